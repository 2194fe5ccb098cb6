/*
 * The sandbox as an MCP server ("code mode" for agents, docs/mcp-server.md): the protocol core
 * every transport shares (`sandbox mcp` over stdio, cli/mcp.c). It takes the client's JSON-RPC
 * 2.0 messages, one text at a time or the bytes of a stdio stream (newline-delimited, split
 * here), and answers them: the lifecycle (`initialize` with the revision negotiated,
 * `notifications/initialized`, `ping`), `tools/list`, `tools/call` and `notifications/cancelled`,
 * and a JSON-RPC error for everything else. Batches only in the one revision that has them
 * (2025-03-26).
 *
 * A tool call the policy holds for approval may be asked of a client that declared
 * elicitation (elicit.h, sbx_mcp_server_elicit_approval()): the core sends `elicitation/create`,
 * keeps it in flight (bounded, with a timer: the only main-loop source here) and reads the
 * client's answer.
 *
 * Pure: no I/O and no execution. What goes to the client goes through the ops' send; a checked
 * `execute` goes to the ops' execute and comes back, once the execution ended, through
 * sbx_mcp_server_finish(); a checked session tool call (sessions.h) goes to its op and comes
 * back through sbx_mcp_server_finish_session(). The core keeps the handles of the sessions
 * opened through it (sbx_mcp_server_sessions()): only those are accepted, at most
 * SBX_MCP_SESSIONS_MAX, and the transport ends them when its connection ends. Every parser of
 * untrusted bytes here is fuzzed (tests/mcp/fuzz-mcp-server.c). cJSON stays inside.
 */
#pragma once

#include <glib.h>

#include "catalog.h"
#include "mcp-server/elicit.h"
#include "mcp-server/execute.h"
#include "mcp-server/sessions.h"

/*
 * One message from the client: 4 MiB. An `execute` (code up to SBX_MCP_EXECUTE_CODE_MAX, its
 * JSON escapes, its arguments) all goes to the guest in one frame of at most SBX_FRAME_MAX (4
 * MiB), so a larger message could not run anyway; it is also what one client makes us hold.
 */
#define SBX_MCP_SERVER_MESSAGE_MAX (4u * 1024 * 1024)

/*
 * A request id's JSON text: 256 bytes. Ids are echoed in every answer and kept with each call in
 * flight; clients use counters or UUIDs (36 bytes).
 */
#define SBX_MCP_SERVER_ID_MAX 256

/*
 * Executions in flight on one connection: 8. Each is a VM (restored by `sandbox mcp` itself, or
 * one of `sandbox serve`'s pool, which queues the rest): enough for an agent's parallel calls,
 * few enough that a runaway client cannot start dozens of VMs on a workstation. A call beyond
 * is answered at once with a tool error that says to wait.
 */
#define SBX_MCP_SERVER_CALLS_MAX 8

/* Messages in one batch (2025-03-26 only): a batch is answered as one array, held until whole. */
#define SBX_MCP_SERVER_BATCH_MAX 64

/* JSON-RPC 2.0's error codes. */
#define SBX_JSONRPC_PARSE_ERROR (-32700)
#define SBX_JSONRPC_INVALID_REQUEST (-32600)
#define SBX_JSONRPC_METHOD_NOT_FOUND (-32601)
#define SBX_JSONRPC_INVALID_PARAMS (-32602)
#define SBX_JSONRPC_INTERNAL_ERROR (-32603)

/* The revisions of MCP spoken, newest first: the newest is answered to a client asking another. */
extern const char *const sbx_mcp_server_revisions[];

typedef struct SbxMcpServer SbxMcpServer;
typedef struct SbxMcpCall SbxMcpCall;

typedef struct {
    /* One message (or batch answer) for the client: JSON text without a newline. Required. */
    void (*send)(gpointer data, const char *json, gsize len);
    /*
     * Run @args (checked; owned by @call, valid until its finish). Answer with
     * sbx_mcp_server_finish(@call), exactly once, also after a cancel. Required.
     */
    void (*execute)(gpointer data, SbxMcpCall *call, const SbxMcpExecuteArgs *args);
    /* The client cancelled @call (any call in flight, execute's or a session tool's): end what
     * it does now. Its finish is still due (no answer goes to the client, as MCP says).
     * Required. */
    void (*cancel)(gpointer data, SbxMcpCall *call);
    /*
     * The session tools (sessions.h, docs/mcp-server.md "Sessions"): all four or none. NULL:
     * none are offered, and execute takes no `session`. Each is answered with
     * sbx_mcp_server_finish_session(@call, outcome), exactly once, also after a cancel, and
     * possibly from inside the op (a refusal at once); the strings and bytes are @call's, valid
     * until then. A session handle given to close, write and read (and to execute, in
     * SbxMcpExecuteArgs.session) is always one this server's session_open returned and whose
     * close has not finished (two closes of one handle may be in flight).
     *
     * session_open: open a session for this connection's client (the transport's tenant, the
     * server's default profile) with the idle timeout and lifetime asked for (seconds, checked;
     * 0: the server's defaults) and finish with its handle (outcome.session) and limits once
     * its VM is ready. A cancelled open that opened one anyway may finish with it:
     * its handle is kept and ended with the connection like the others.
     */
    void (*session_open)(gpointer data, SbxMcpCall *call, guint idle_timeout_s,
                         guint max_lifetime_s);
    /* End session @session (its VM killed); an ended or unknown one is no error. */
    void (*session_close)(gpointer data, SbxMcpCall *call, const char *session);
    /*
     * Put @len bytes of @bytes (at most SBX_MCP_FILE_MAX) at workspace path @path (checked with
     * sbx_workspace_path_valid()) of @session, replacing a file there; finish with the size
     * and SHA-256 the server reports.
     */
    void (*file_write)(gpointer data, SbxMcpCall *call, const char *session, const char *path,
                       const guint8 *bytes, gsize len);
    /*
     * Get the file at @path of @session; finish with its size, SHA-256 and bytes (outcome.data;
     * a file over SBX_MCP_FILE_MAX may come with its size and no bytes: the core refuses it).
     */
    void (*file_read)(gpointer data, SbxMcpCall *call, const char *session, const char *path);
} SbxMcpServerOps;

/* Who we are, for initialize's serverInfo. Copied. */
typedef struct {
    const char *name;
    const char *version;
} SbxMcpServerInfo;

/** A server for one client connection. @ops and @data must outlive it. */
SbxMcpServer *sbx_mcp_server_new(const SbxMcpServerOps *ops, gpointer data,
                                 const SbxMcpServerInfo *info);

/**
 * Free @server (accepts NULL). Calls still in flight are forgotten: end their executions first
 * (their finish must not come after this).
 */
void sbx_mcp_server_free(SbxMcpServer *server);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxMcpServer, sbx_mcp_server_free)

/**
 * Offer the discovery tools (discover.h) over @catalog, the host tools the programs may call
 * (its MCP providers' tools listed already; it must outlive the server). NULL: none (the
 * default).
 */
void sbx_mcp_server_set_catalog(SbxMcpServer *server, const SbxCatalog *catalog);

/** One message (or batch) from the client, @len bytes of @text (any bytes). */
void sbx_mcp_server_receive(SbxMcpServer *server, const char *text, gsize len);

/**
 * Bytes of a stdio stream: each line (LF, a CR before it dropped; blank lines skipped) is one
 * message. A line over SBX_MCP_SERVER_MESSAGE_MAX is answered with an error (null id) and
 * skipped up to its newline; the stream goes on.
 */
void sbx_mcp_server_feed(SbxMcpServer *server, const guint8 *data, gsize len);

/** The end of the stdio stream: a last line without its newline counts. */
void sbx_mcp_server_feed_end(SbxMcpServer *server);

/**
 * @call's execution ended: its report is @report_json (`sandbox run --json`'s object). The
 * answer goes to the client unless the call was cancelled; @call is freed.
 */
void sbx_mcp_server_finish(SbxMcpServer *server, SbxMcpCall *call, const char *report_json);

/**
 * @call, a session tool's (session_open, session_close, file_write, file_read), ended with
 * @outcome (sessions.h). The answer goes to the client unless the call was cancelled; the
 * handles are kept up to date (an open's added, a close's or a gone one's dropped); @call is
 * freed.
 */
void sbx_mcp_server_finish_session(SbxMcpServer *server, SbxMcpCall *call,
                                   const SbxMcpSessionOutcome *outcome);

/**
 * The handles of the sessions opened through @server and not closed (NULL-terminated; caller
 * frees with g_strfreev()): what the transport ends when the connection ends.
 */
char **sbx_mcp_server_sessions(const SbxMcpServer *server);

/** Which tool @call is for. */
SbxMcpTool sbx_mcp_call_tool(const SbxMcpCall *call);

/** Whether @call's client asked for progress (its request's `_meta.progressToken`). */
gboolean sbx_mcp_call_wants_progress(const SbxMcpCall *call);

/**
 * Send `notifications/progress` for @call: @progress (it must grow: a value not above the last
 * one sent is dropped), @total (0: none) and @message (NULL: none), or instead the output held
 * for it (sbx_mcp_server_output()). Nothing when the client asked for no progress or cancelled
 * the call. The transports count in milliseconds since the call came, of its timeout.
 */
void sbx_mcp_server_progress(SbxMcpServer *server, SbxMcpCall *call, guint64 progress,
                             guint64 total, const char *message);

/*
 * The program's output as it comes goes to a client that asked for progress as the message of
 * notifications/progress: the first at once, then at most one every 100 ms per call (output in
 * between is held and goes with the next one, or with the transport's next progress tick), and
 * at most 16 KiB in one
 * (the rest of a burst is left to the result, which has all of it: a model reads the result,
 * a person watching the progress reads a line or two).
 */
#define SBX_MCP_OUTPUT_EVERY_MS 100
#define SBX_MCP_OUTPUT_HELD_MAX (16u * 1024)

/**
 * @len bytes of @call's program's @stream, as they come, @progress ms into the call (of @total,
 * 0: none): sent as above when the client asked for progress, else nothing. A message of
 * stderr begins with "stderr: "; text that is not UTF-8 is shown with U+FFFD.
 */
void sbx_mcp_server_output(SbxMcpServer *server, SbxMcpCall *call, SbxStream stream,
                           const guint8 *bytes, gsize len, guint64 progress, guint64 total);

/** Calls in flight (started, not finished: cancelled ones count until their finish). */
guint sbx_mcp_server_calls(const SbxMcpServer *server);

/** The revision negotiated, or NULL before initialize. */
const char *sbx_mcp_server_revision(const SbxMcpServer *server);

/* ---- approvals through the client (elicit.h; docs/mcp-server.md, "Approvals") ---------------- */

/**
 * Whether the client can be asked: it declared the `elicitation` capability at initialize (its
 * form mode: an empty object, or one with `form`) and speaks 2025-06-18 or later.
 */
gboolean sbx_mcp_server_can_elicit(const SbxMcpServer *server);

/** The client's clientInfo.name (at most SBX_NAME_MAX bytes, valid UTF-8), or NULL before. */
const char *sbx_mcp_server_client_name(const SbxMcpServer *server);

/* How an elicitation ended (called exactly once for each one asked). */
typedef void (*SbxMcpElicitFunc)(SbxMcpServer *server, SbxMcpElicitOutcome outcome, gpointer data);

/**
 * Ask the client to approve @ask, a host tool call of @call's execution: `elicitation/create`
 * with a fresh id goes through the ops' send now (a transport that answers each call on a stream
 * of its own routes it as it routes @call's messages). @func is called exactly once: from
 * sbx_mcp_server_receive() with the client's answer (an answer with an unknown id is ignored, a
 * malformed one denies), from the main loop after @ask->timeout_ms (TIMED_OUT: a
 * `notifications/cancelled` for the request is sent), or CANCELLED by
 * sbx_mcp_server_elicit_cancel(), @call's finish (before its answer goes out) or the server's
 * free. Returns the request's id, or 0 when nothing was asked (the client cannot be asked,
 * @call was cancelled, SBX_MCP_ELICITS_MAX in flight); then @func is never called.
 */
guint64 sbx_mcp_server_elicit_approval(SbxMcpServer *server, SbxMcpCall *call,
                                       const SbxMcpApprovalAsk *ask, SbxMcpElicitFunc func,
                                       gpointer data);

/**
 * Withdraw elicitation @id (answered elsewhere, or its approval ended): the client is sent
 * `notifications/cancelled` for it and its func is called with CANCELLED. Unknown: nothing.
 */
void sbx_mcp_server_elicit_cancel(SbxMcpServer *server, guint64 id);

/** Elicitations in flight. */
guint sbx_mcp_server_elicits(const SbxMcpServer *server);

/** The call elicitation @id is for, or NULL when none is in flight with that id. */
SbxMcpCall *sbx_mcp_server_elicit_call(const SbxMcpServer *server, guint64 id);

/** Attach the transport's @data to @call / get it back (NULL until set). */
void sbx_mcp_call_set_data(SbxMcpCall *call, gpointer data);
gpointer sbx_mcp_call_get_data(const SbxMcpCall *call);
