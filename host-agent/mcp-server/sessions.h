/*
 * The MCP server's session tools (docs/mcp-server.md, "Sessions"): session_open, session_close,
 * file_write and file_read. A session is one VM kept for several executions of one client
 * (docs/sessions.md): `execute` with its handle runs in it and sees what the earlier executions
 * left (variables, functions, files); the file tools move files of its workspace in and out as
 * text (UTF-8) or base64. Here: their definitions for tools/list, the checks of their arguments
 * and their results from what the transport reports (SbxMcpSessionOutcome). Pure: the protocol
 * library and the JSON builder.
 */
#pragma once

#include <glib.h>

#include "base/json-builder.h"

/*
 * Sessions one client connection may hold open: 4. Each holds a VM (~100 MiB and more) for as
 * long as it is open, and the server holds 16 over all its clients (SBX_SERVER_SESSIONS_MAX);
 * an agent needs one (one session runs both languages), a few for separate experiments. Opens
 * in flight count.
 */
#define SBX_MCP_SESSIONS_MAX 4

/*
 * A file written or read: 256 KiB of content. A model pays for every byte it reads or writes in
 * its context (~4 bytes a token: 256 KiB is ~64k tokens, more as base64, and a result carries
 * it twice, as text and as structuredContent); more data belongs to the program: read it with
 * execute in the session and return what matters. A file crosses the socket of `sandbox serve`
 * in one piece (SBX_SERVE_FILE_CHUNK_MAX, 1 MiB).
 */
#define SBX_MCP_FILE_MAX (256u * 1024)

/*
 * A session's idle timeout and maximum lifetime that session_open may ask for: 1 s to a day,
 * the bounds of the server's sessions (SBX_SERVER_SESSION_IDLE_MAX_S, _LIFETIME_MAX_S; the
 * transports assert they are equal: this module stays pure, without the server's headers).
 */
#define SBX_MCP_SESSION_SECONDS_MAX (24 * 60 * 60)

/* The tools a call may be for, execute included. */
typedef enum {
    SBX_MCP_TOOL_EXECUTE,
    SBX_MCP_TOOL_SESSION_OPEN,
    SBX_MCP_TOOL_SESSION_CLOSE,
    SBX_MCP_TOOL_FILE_WRITE,
    SBX_MCP_TOOL_FILE_READ,
} SbxMcpTool;

/* The checked arguments of a session tool's call. Owned (sbx_mcp_session_args_clear()). */
typedef struct {
    char *session;   /* close, write, read: the handle (sbx_id_valid()) */
    char *path;      /* write, read: a workspace path (sbx_workspace_path_valid(), UTF-8) */
    guint8 *data;    /* write: the bytes, decoded (len of them; NULL when empty) */
    gsize len;       /* write: at most SBX_MCP_FILE_MAX */
    gboolean base64; /* read: the content asked for as base64 (else UTF-8 when it is text) */
    /* open: 1..SBX_MCP_SESSION_SECONDS_MAX, or 0: the server's defaults (10 min, 1 h) */
    guint idle_timeout_s, max_lifetime_s;
} SbxMcpSessionArgs;

/*
 * What the transport reports at the end of a session tool's call (sbx_mcp_server_finish_session,
 * mcp-server.h). Borrowed for the call.
 */
typedef struct {
    /*
     * NULL: done. Else why not, as `sandbox serve`'s socket says it (docs/pool.md): "not_found"
     * (no such session, or file), "busy", "ended", "bad_request" (also a path the guest refuses),
     * "too_large", "workspace_full", "failed", "unavailable" (also: no server for sessions).
     */
    const char *error_code;
    const char *error; /* with error_code: the reason, for the model */
    /* With error_code: the session no longer exists (ended, or unknown to the server), so its
     * handle is forgotten and no longer counts towards SBX_MCP_SESSIONS_MAX. (A close forgets
     * its handle whatever its outcome.) */
    gboolean gone;
    const char *session;                  /* open: the new session's handle (sbx_id_valid()) */
    guint idle_timeout_s, max_lifetime_s; /* open: its limits (0: none, or not known) */
    guint64 size;                         /* write, read: the file's size */
    const char *sha256;                   /* write, read: hex SHA-256 of what crossed, or NULL */
    const guint8 *data; /* read: the file's size bytes; NULL when over SBX_MCP_FILE_MAX */
} SbxMcpSessionOutcome;

/** Whether @name is a session tool; which in *@ret. */
gboolean sbx_mcp_session_is_tool(const char *name, SbxMcpTool *ret);

/** Append the session tools' definitions (tools/list elements) to @b, for @revision. */
void sbx_mcp_session_definitions(SbxJsonb *b, const char *revision);

/**
 * Check the arguments of session tool @tool, the JSON object text @text (@len bytes), into *@ret
 * (cleared first). NULL if fine, else what is wrong, for the model (caller frees; *@ret cleared).
 */
char *sbx_mcp_session_args_parse(SbxMcpTool tool, const char *text, gsize len,
                                 SbxMcpSessionArgs *ret);

/** Free what @args holds and zero it. */
void sbx_mcp_session_args_clear(SbxMcpSessionArgs *args);

/**
 * The CallToolResult of @tool's call with @args, which ended with @outcome: a text for the
 * model and structuredContent (before 2025-06-18, its JSON as a second text); an error (the
 * outcome's, a read over SBX_MCP_FILE_MAX, an open without a valid handle) is a tool error.
 * Caller frees.
 */
char *sbx_mcp_session_result(SbxMcpTool tool, const SbxMcpSessionArgs *args,
                             const SbxMcpSessionOutcome *outcome, const char *revision);
