/*
 * An MCP client connection: JSON-RPC requests with integer ids, any number in flight, matched
 * to the server's answers; the server's own requests (ping answered, elicitation declined, the rest
 * -32601) and notifications; per-request timeouts with `notifications/cancelled`. The bytes travel
 * through a transport (stdio child process: mcp-stdio.c, streamable HTTP: mcp-http.c) that hands
 * each received message text to sbx_mcp_client_receive() and reports a dead connection with
 * sbx_mcp_client_closed().
 *
 * Everything runs on the thread-default main context of the creator, never blocking it.
 */
#pragma once

#include <cJSON.h>
#include <gio/gio.h>

typedef struct SbxMcpClient SbxMcpClient;
typedef struct SbxMcpTransport SbxMcpTransport;

typedef struct {
    /* Send one message (compact JSON). @id: the id of our request, or -1 (notification, answer). */
    void (*send)(SbxMcpTransport *t, const char *json, gint64 id);
    /* The client stopped waiting for request @id (timeout, cancel). NULL: nothing to do. */
    void (*abandon)(SbxMcpTransport *t, gint64 id);
    /* The protocol version both sides agreed on (HTTP sends it as a header). NULL: unused. */
    void (*negotiated)(SbxMcpTransport *t, const char *version);
    /* Close and free: kill and reap the server, or end the HTTP session. */
    void (*free)(SbxMcpTransport *t);
} SbxMcpTransportOps;

struct SbxMcpTransport {
    const SbxMcpTransportOps *ops;
    SbxMcpClient *client; /* the client it delivers to (not owned) */
};

/*
 * Answer of a request: the `result` member (borrowed for the call), or NULL and @error
 * (SBX_TOOL_ERROR with SBX_ERR_TOOL: a JSON-RPC error, a timeout, a dead server; or
 * G_IO_ERROR_CANCELLED). Never called from inside sbx_mcp_client_request().
 */
typedef void (*SbxMcpReplyFunc)(const cJSON *result, const GError *error, gpointer user_data);

/** A client named @name (the provider, for messages) with no transport yet. */
SbxMcpClient *sbx_mcp_client_new(const char *name);

/** Give @client its transport (owned from now on). */
void sbx_mcp_client_set_transport(SbxMcpClient *client, SbxMcpTransport *transport);

/**
 * Free @client: pending requests are completed (cancelled) first, without sending anything;
 * then the transport is freed. Accepts NULL.
 */
void sbx_mcp_client_free(SbxMcpClient *client);

/**
 * Send request @method with @params (taken; NULL for none). @timeout_ms 0: no timeout. On
 * timeout or cancellation of @cancellable, the server gets `notifications/cancelled`.
 */
void sbx_mcp_client_request(SbxMcpClient *client, const char *method, cJSON *params,
                            guint timeout_ms, GCancellable *cancellable, SbxMcpReplyFunc fn,
                            gpointer user_data);

/** Send notification @method with @params (taken; NULL for none). */
void sbx_mcp_client_notify(SbxMcpClient *client, const char *method, cJSON *params);

/** Tell the transport the protocol version agreed in `initialize` (HTTP sends it along). */
void sbx_mcp_client_negotiated(SbxMcpClient *client, const char *version);

/* ---- for transports ---------------------------------------------------------------------- */

/** One message text from the server. Bad messages are dropped (counted, see below). */
void sbx_mcp_client_receive(SbxMcpClient *client, const char *text, gsize len);

/**
 * The connection is dead (@why: "the server exited (status 1): <stderr>"): every pending request
 * fails with it, and so does every later one.
 */
void sbx_mcp_client_closed(SbxMcpClient *client, const char *why);

/** Request @id could not be delivered or answered (HTTP status, ...): it fails with @why. */
void sbx_mcp_client_fail_request(SbxMcpClient *client, gint64 id, const char *why);

/** Whether request @id is still waiting for its answer (not answered, timed out nor cancelled). */
gboolean sbx_mcp_client_waits(const SbxMcpClient *client, gint64 id);

/** Requests sent and not answered yet. */
guint sbx_mcp_client_pending(const SbxMcpClient *client);

/** Messages dropped: unparsable, or answers to no pending request (for tests). */
guint sbx_mcp_client_dropped(const SbxMcpClient *client);
