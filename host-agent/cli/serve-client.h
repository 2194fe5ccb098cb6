/*
 * The client side of `sandbox serve` in `sandbox run` (docs/pool.md): send the run to a warm
 * pool when a server answers on the socket, with the same output, report and exit code; the
 * same for `sandbox session exec`, a run in one of the server's sessions.
 */
#pragma once

#include "cli/cli.h"
#include "cli/out.h"
#include "protocol/message.h"
#include "server/proto.h"

/*
 * How long the client waits for the server's status answer before running directly: the
 * server answers from its main loop within microseconds unless it is wedged.
 */
#define SBX_SERVE_CLIENT_PROBE_MS 1000

typedef struct {
    SbxLanguage language;
    const char *code;
    const char *entry;       /* or NULL */
    const char *args_json;   /* checked (exec/call.h), or NULL */
    const char *kwargs_json; /* checked, or NULL */
    const char *tools_path;  /* or NULL */
    guint timeout_ms;
    guint64 output_limit;
    const char *profile; /* or NULL: the server's */
    const char *session; /* or NULL; a session's run goes to the server or nowhere */
    gboolean json;
    gboolean live; /* with json: the output streamed as it comes too (sbx_serve_client_call()) */
    gboolean approvals; /* a call's approvals told as they come (sbx_serve_call_set_approvals()) */
    SbxOut *out;        /* where the run's output, summary and report go; outlives the client */
} SbxServeClientRequest;

/**
 * Send @req to the server if one answers on the socket (and pools @req->profile; for a
 * session's run, if one listens there). TRUE: the run goes on on @cli's loop, which quits with
 * the exit code (signals are handled; a refusal is a sandbox failure, 125); FALSE: no usable
 * server, nothing was sent: run directly (a session's run cannot).
 */
gboolean sbx_serve_client_try(SbxCli *cli, const SbxServeClientRequest *req);

/**
 * A run (@session: in a session) that ended, or never started, without the server's done:
 * reported to @out as a direct run's failure is (--json: @json, one object with @status and the
 * message as its error; else `sandbox: MESSAGE` on stderr).
 */
void sbx_serve_client_report_failure(SbxOut *out, gboolean json, gboolean session,
                                     const char *message, SbxStatus status);

/** Free what a client run holds (after the loop stopped). */
void sbx_serve_client_cleanup(void);

/*
 * A run whose report is collected (`sandbox mcp`, cli/mcp.c): one connection per run, many at
 * once, nothing printed. The done callback gets the server's report (`sandbox run --json`'s
 * object), or NULL and why the run ended without one; it may free the call.
 */
typedef struct SbxServeCall SbxServeCall;
typedef void (*SbxServeCallDone)(gpointer data, const char *report_json, const char *failure);
/* The program's output as it comes, for a call that asked for it (@req->live). */
typedef void (*SbxServeCallOutput)(gpointer data, SbxStream stream, const guint8 *bytes, gsize len);

/**
 * Send @req as a collected run (its json and out are not used) if a server answers on the
 * socket and pools @req->profile (a session's run: if one answers there at all); NULL: no usable
 * server, nothing sent (run directly). @done comes once, on the loop, unless the call is freed
 * first.
 */
SbxServeCall *sbx_serve_client_call(const SbxServeClientRequest *req, SbxServeCallDone done,
                                    gpointer data);

/** Have @output called with the output of @call as it comes (its request said live). */
void sbx_serve_call_set_output(SbxServeCall *call, SbxServeCallOutput output);

/*
 * One of the run's approvals (its request said approvals): @pending when it starts waiting
 * (its id, provider, tool, input or its excerpt, times), NULL when approval @id stopped waiting
 * (answered, timed out, its call ended). Valid during the call.
 */
typedef void (*SbxServeCallApproval)(gpointer data, const SbxServePending *pending, const char *id);

/** Have @approval called with the approvals of @call as they start and stop waiting. */
void sbx_serve_call_set_approvals(SbxServeCall *call, SbxServeCallApproval approval);

/** Hang up (the server ends the execution and kills its VM) and free. Accepts NULL. */
void sbx_serve_call_free(SbxServeCall *call);

/*
 * One request answered by one message (session_new, session_end, a file's one piece: put with
 * `last`, get at offset 0), asked on a connection of its own without blocking the loop, many at
 * once (`sandbox mcp`'s session tools). The done callback gets the answer, whatever its type,
 * or NULL and why none came (the connection lost, a broken frame, no answer in time); it may
 * free the ask.
 */
typedef struct SbxServeAsk SbxServeAsk;
typedef void (*SbxServeAskDone)(gpointer data, const SbxServeMsg *answer, const char *failure);

/**
 * Send @req if a server answers on the socket; NULL: none does (or the request is over a
 * frame), nothing sent. @done comes once, on the loop, within @timeout_ms, unless the ask is
 * freed first.
 */
SbxServeAsk *sbx_serve_client_ask(const SbxServeRequest *req, guint timeout_ms,
                                  SbxServeAskDone done, gpointer data);

/** Hang up (a session_new's session is then ended by the server) and free. Accepts NULL. */
void sbx_serve_ask_free(SbxServeAsk *ask);

/* For the other clients of the server (`sandbox approvals`, cli/approvals.c). */
/** Connect to the server's socket (after the directory check); -1 if none answers. */
int sbx_serve_client_connect(void);
/** Send one frame holding @json; FALSE if the server is gone. Blocking. */
gboolean sbx_serve_client_send(int fd, const char *json);
/*
 * Read one frame (an answer) within @deadline_us (monotonic), in chunks, and decode it into
 * @msg: for a request answered by one frame, whose server sends nothing else meanwhile. FALSE
 * if none came in time or it is no message. Blocking.
 */
gboolean sbx_serve_client_read(int fd, gint64 deadline_us, SbxServeMsg *msg);
