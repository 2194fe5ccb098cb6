/*
 * MCP's JSON-RPC framing, the only parser of bytes an MCP server sends (fuzzed by
 * tests/mcp/fuzz-mcp-wire.c):
 *
 * - stdio: one JSON-RPC message per line (newline-delimited, no embedded newline);
 * - streamable HTTP: a response body is one JSON message, or a Server-Sent Events stream whose
 *   `data:` fields carry one message per event.
 *
 * A framer turns bytes into message texts; sbx_mcp_message_parse() turns a text into a typed
 * message. Everything here is pure (no I/O) and bounded by SBX_MCP_MESSAGE_MAX.
 */
#pragma once

#include <cJSON.h>
#include <glib.h>

/*
 * Largest JSON-RPC message from a server (one stdio line, one SSE event, one JSON body). A tool
 * result may be SBX_TOOL_RESULT_MAX (1 MiB) once unwrapped, but it arrives wrapped in `content`
 * text, where JSON string escaping can double it or worse; a tools/list page carries up to
 * SBX_SCHEMA_TEXT_MAX (256 KiB) per schema. 8 MiB covers both with room, and is the memory one
 * server can make us buffer for a message.
 */
#define SBX_MCP_MESSAGE_MAX (8 * 1024 * 1024)

/*
 * Longest SSE event id kept (an `id` field). It is sent back as the Last-Event-ID header when a
 * stream is resumed: servers use short ids (a counter, a UUID, a stream id and a counter), and a
 * longer one would be a server making us send large headers.
 */
#define SBX_MCP_EVENT_ID_MAX 1024

typedef enum {
    SBX_MCP_FRAMING_LINES, /* stdio: newline-delimited */
    SBX_MCP_FRAMING_SSE,   /* text/event-stream */
} SbxMcpFraming;

typedef struct SbxMcpFramer SbxMcpFramer;

/* Called with each complete message (not NUL-terminated, @len bytes). */
typedef void (*SbxMcpMessageFunc)(const char *text, gsize len, gpointer user_data);

/** A framer of @framing with messages up to @max bytes. */
SbxMcpFramer *sbx_mcp_framer_new(SbxMcpFraming framing, gsize max);

/** Free @framer. Accepts NULL. */
void sbx_mcp_framer_free(SbxMcpFramer *framer);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxMcpFramer, sbx_mcp_framer_free)

/**
 * Feed @len bytes; @fn gets each message completed by them. FALSE (with @error) once a message
 * grows past the framer's maximum: the stream cannot be trusted any more (the caller drops it).
 */
gboolean sbx_mcp_framer_feed(SbxMcpFramer *framer, const guint8 *data, gsize len,
                             SbxMcpMessageFunc fn, gpointer user_data, GError **error);

/**
 * End of stream: a last line without its newline counts (stdio); an SSE event without its blank
 * line does not (the spec drops it).
 */
void sbx_mcp_framer_finish(SbxMcpFramer *framer, SbxMcpMessageFunc fn, gpointer user_data);

/**
 * SSE: the id of the last event dispatched (the standard's "last event ID", set by an `id` field
 * and kept for later events), or NULL if none had one. Borrowed until the next feed.
 */
const char *sbx_mcp_framer_last_event_id(const SbxMcpFramer *framer);

/** SSE: the last valid `retry` field (the reconnection delay the server asks for, ms), or -1. */
gint64 sbx_mcp_framer_retry_ms(const SbxMcpFramer *framer);

/** SSE: the number of events dispatched so far, empty ones included. */
guint64 sbx_mcp_framer_events(const SbxMcpFramer *framer);

typedef enum {
    SBX_MCP_MSG_REQUEST,      /* method + id: the server asks us something */
    SBX_MCP_MSG_NOTIFICATION, /* method, no id */
    SBX_MCP_MSG_RESULT,       /* id + result */
    SBX_MCP_MSG_ERROR,        /* id (maybe null) + error */
} SbxMcpMsgKind;

/* A parsed message. Pointers point into @root. */
typedef struct {
    cJSON *root;
    SbxMcpMsgKind kind;
    const char *method; /* requests and notifications */
    const cJSON *id;    /* requests, results, errors (a number, a string, or null for errors) */
    gboolean id_is_int; /* id is an integer that fits gint64: */
    gint64 id_int;
    const cJSON *params; /* requests and notifications, or NULL */
    const cJSON *result; /* results */
    gint64 error_code;   /* errors */
    const char *error_message;
} SbxMcpMessage;

/**
 * Parse one JSON-RPC 2.0 message (an object; batches are not supported: MCP 2025-06-18 removed
 * them). NULL with @error if @text is not JSON, nests deeper than cJSON allows, or is not a
 * well-formed request, notification, result or error.
 */
SbxMcpMessage *sbx_mcp_message_parse(const char *text, gsize len, GError **error);

/** Free @msg. Accepts NULL. */
void sbx_mcp_message_free(SbxMcpMessage *msg);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxMcpMessage, sbx_mcp_message_free)
