/*
 * Inside the MCP transport of the HTTP front end (http-mcp.c, docs/mcp-server.md "Over HTTP"):
 * the MCP sessions, the POSTs whose answers wait for calls, and the calls themselves, shared by
 * http-mcp.c (the transport: requests, answers, sessions) and http-mcp-calls.c (what the calls
 * do: executions, the session tools, approvals asked of the client).
 */
#pragma once

#include "mcp-server/mcp-server.h"
#include "server/http-private.h"

/* Progress while a call runs, for a client that asked for it (as over stdio: cli/mcp.c). */
#define SBX_HTTP_MCP_PROGRESS_S 5

/*
 * Bytes an SSE answer may have queued for a client that does not read: past 4 MiB, no more
 * progress is written to it (the output goes on into the result); its answer still is (at most
 * a few MiB). The output progress carries is at most the execution's (1 MiB, escaped), so this
 * is the backstop that keeps a call's stream bounded whatever else progress comes to carry.
 */
#define SBX_HTTP_MCP_QUEUED_MAX (4u * 1024 * 1024)

typedef struct McpSession McpSession;
typedef struct McpPost McpPost;

/* One POST whose answer waits for calls it started. */
struct McpPost {
    McpSession *s;
    SoupServerMessage *msg;
    gboolean sse;     /* answered as an SSE stream (else one JSON body at the end) */
    gboolean decided; /* its answer has begun (SSE) or waits (JSON): calls may end it */
    gboolean ended;   /* complete: only libsoup's "finished" is still to come */
    GPtrArray *held;  /* char*: messages not yet written (JSON: all of them) */
    guint calls;      /* calls it started, not yet finished */
    gsize queued;     /* SSE bytes appended, not yet written (SBX_HTTP_MCP_QUEUED_MAX) */
    gulong finished_handler;
    gulong wrote_handler;
    guint keepalive;
};

/* One call in flight: an `execute`, or a session tool's. */
typedef struct {
    McpSession *s; /* NULL once its MCP session ended (a session tool's server call pending) */
    SbxMcpCall *call;
    gboolean pending; /* a session tool's: the server's callback is still to come */
    McpPost *post;    /* whose answer carries its messages; NULL once its client went */
    HttpExec *exec;   /* until its done */
    guint progress_timer;
    gint64 started_us; /* monotonic */
    guint timeout_ms;
} McpJob;

struct McpSession {
    HttpFront *front;
    char *id;
    char *tenant_id;
    char *catalog;           /* the executions' (`/mcp?catalog=`), or NULL */
    SbxHttpListing *listing; /* that catalog listed for the discovery tools, or NULL */
    SbxMcpServer *server;
    McpPost *current;        /* the POST the core's messages go to now, or NULL */
    const SbxTenant *tenant; /* while a POST of this tenant is handled */
    GList *posts;            /* McpPost*: answers still open */
    GList *jobs;             /* McpJob* */
    GList *asks;             /* McpAsk*: approvals asked of the client, not answered */
    gint64 used_us;          /* monotonic: the last request */
};

/* An approval asked of the session's client (an elicitation in flight). */
typedef struct {
    McpSession *s;
    char *approval_id;
    guint64 elicit_id;
    McpJob *job; /* whose execution made the call (its stream carries the question) */
} McpAsk;

/* http-mcp.c */
/** The core's messages (SbxMcpServerOps.send): on the POST the session's `current` names. */
void sbx_http_mcp_send(gpointer data, const char *json, gsize len);
/** Every call of @p ended: its answer is complete. */
void sbx_http_mcp_post_end(McpPost *p);
/** Whether progress may go on @p (an SSE answer its client reads; NULL: none). */
gboolean sbx_http_mcp_post_takes_progress(const McpPost *p);

/* http-mcp-calls.c */
/** The core's operations of an MCP session: its calls run on the server. */
extern const SbxMcpServerOps sbx_http_mcp_ops;
/** @s ends: its questions to the client withdrawn (while its calls and POSTs are known). */
void sbx_http_mcp_calls_withdraw(McpSession *s);
/**
 * @s ends, its POSTs ended already: its calls' executions cancelled (a session tool's server
 * call still to come frees itself), the sandbox sessions it opened ended.
 */
void sbx_http_mcp_calls_end(McpSession *s);
