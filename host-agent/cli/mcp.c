/*
 * `sandbox mcp`: the sandbox as an MCP server over stdio, for an agent that starts it as a
 * local MCP server (docs/mcp-server.md). Newline-delimited JSON-RPC on stdin and stdout, logs on
 * stderr only. The protocol is mcp-server/'s; this file moves the bytes and runs each `execute`
 * on the execution core like `sandbox run --json` does: through the local `sandbox serve` when *
 * one answers (its warm pool), else in a VM restored here. The session tools (mcp-server/
 * sessions.h) are the local server's sessions, through its socket (docs/pool.md, "Sessions over
 * the socket"), or without a `sandbox serve` sessions of VMs restored here (mcp-local.h). Tool
 * calls the policy holds are asked of a client that can be asked (mcp-approvals.h). A
 * cancelled
 * call's execution is ended (the server's, by hanging up). At the end of stdin the calls in
 * flight finish and are answered; on SIGINT/SIGTERM they are ended; either way the sessions
 * this connection opened are ended and the command exits once every execution is reaped.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib-unix.h>

#include "base/sbx-config.h"
#include "cli/cli.h"
#include "cli/mcp-approvals.h"
#include "cli/mcp-local.h"
#include "cli/out.h"
#include "cli/serve-client.h"
#include "cli/store-open.h"
#include "exec/exec.h"
#include "exec/report.h"
#include "mcp-server/mcp-server.h"
#include "store/db.h"
#include "tools.h"
#include "vm.h"

/* The profile of the VMs restored here (run.c's default: the fastest restore). */
#define MCP_PROFILE_DEFAULT "q35-serial"

/*
 * A call whose client asked for progress gets one every 5 s while it runs (the milliseconds so
 * far, of its timeout; the program's output as it comes in between, sbx_mcp_server_output()): often
 * enough for a client that extends its own timeout on progress (the TypeScript SDK's
 * resetTimeoutOnProgress; its timeout is 60 s by default), rare enough to cost nothing.
 */
#define MCP_PROGRESS_INTERVAL_S 5

/*
 * Answers waiting for a client that does not read them: past 16 MiB (an execute's answer is
 * at most a few MiB: SBX_MCP_EXECUTE_OUTPUT_LIMIT twice, escaped), stdin is not read until the
 * client took them, checked every 100 ms, and no progress (output) is sent meanwhile. The
 * executions in flight (bounded) still answer.
 */
#define MCP_ANSWERS_QUEUED_MAX (16u * 1024 * 1024)
#define MCP_ANSWERS_CHECK_MS 100

/*
 * A session tool's answer from `sandbox serve`: a session's VM claimed (restored on demand when
 * the pool is empty: seconds under TCG on a busy host) or a file's trip to the guest. Two
 * minutes, as `sandbox session` waits (SESSION_WORK_MS), then the call fails rather than hang.
 */
#define MCP_SESSION_WORK_MS 120000

/* The ends of the sessions at the connection's end: answered at once by the server's loop. */
#define MCP_SESSION_END_MS 5000

/* A session of `sandbox serve` whose server is gone. */
#define MCP_NO_SERVE "the session's `sandbox serve` does not answer any more (it ended with it)"

typedef struct McpCtx McpCtx;

/* One call in flight: an `execute` through the server (serve) or here (exec), or a session
 * tool's request to the server (ask). */
typedef struct {
    McpCtx *ctx;
    SbxMcpCall *call;
    SbxMcpTool tool;
    SbxServeCall *serve;
    SbxExec *exec;
    SbxServeAsk *ask;
    SbxMcpLocalOp *local_op; /* a session tool's on a session of ours */
    char *local_session;     /* an execute in a session of ours: its handle */
    char sha256_sent[65];    /* file_write: the hex digest of the bytes sent */
    gsize len_sent;
    guint progress_timer;
    gint64 started_us; /* monotonic */
    guint timeout_ms;
} Job;

struct McpCtx {
    SbxCli *cli;
    /* options */
    char *tools_path;
    char *profile_name;
    gboolean no_serve;
    /* running */
    SbxOut *out;
    SbxMcpServer *server;
    guint stdin_source;
    guint resume_source; /* stdin paused: the check of the answers waiting */
    gboolean ending;     /* stdin ended or a signal came: no new executions, quit once none runs */
    GPtrArray *jobs;     /* Job*: in flight */
    GPtrArray *done; /* Job*: ended, freed from an idle callback (never inside the exec's sink) */
    guint reap_idle;
    /* The VMs restored here: loaded at the first execution that runs here. */
    SbxProfile *profile;
    SbxImage *image;
    SbxSnapshot *snapshot;
    char *local_failure;     /* why none can be restored here (kept: each call says so) */
    SbxTools *listing;       /* --tools: the catalog with its MCP servers' tools, for discovery */
    SbxStore *store;         /* the records, or NULL */
    SbxMcpLocal *local;      /* the sessions of VMs restored here (no `sandbox serve`) */
    gboolean sessions_ended; /* the connection's sessions were ended (once, at the end) */
    SbxMcpApprovals *approvals; /* those asked of the client (mcp-approvals.h) */
};

static McpCtx *mcp_ctx;

/* ---- the end -------------------------------------------------------------------------------- */

static void job_free(Job *job)
{
    g_clear_handle_id(&job->progress_timer, g_source_remove);
    sbx_serve_call_free(job->serve);
    sbx_serve_ask_free(job->ask);
    sbx_mcp_local_op_cancel(job->local_op);
    sbx_exec_free(job->exec); /* its VM and tool processes killed and reaped */
    g_free(job->local_session);
    g_free(job);
}

/*
 * End the sessions this connection opened (docs/mcp-server.md, "Sessions"): their VMs are
 * killed by the server. Blocking, once: the server answers each at once from its loop, and
 * nothing else is left to do.
 */
static void end_sessions(McpCtx *ctx)
{
    g_auto(GStrv) handles = sbx_mcp_server_sessions(ctx->server);

    if (ctx->sessions_ended) {
        return;
    }
    ctx->sessions_ended = TRUE;
    for (char **h = handles; *h != NULL; h++) {
        if (sbx_mcp_local_has(ctx->local, *h)) {
            continue; /* ours: below */
        }
        SbxServeRequest req = {.type = SBX_SERVE_REQ_SESSION_END, .id = *h};
        g_autofree char *json = sbx_serve_proto_request_encode(&req);
        g_auto(SbxServeMsg) answer = {0};
        int fd = sbx_serve_client_connect();
        if (fd < 0 || !sbx_serve_client_send(fd, json) ||
            !sbx_serve_client_read(fd, g_get_monotonic_time() + MCP_SESSION_END_MS * 1000ll,
                                   &answer)) {
            g_autofree char *text = g_strdup_printf(
                "sandbox mcp: warning: session %s was not ended (the server did not answer)\n", *h);
            sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    /* Ours: their leases closed, their VMs killed and reaped. */
    g_clear_pointer(&ctx->local, sbx_mcp_local_free);
}

static void maybe_quit(McpCtx *ctx)
{
    if (ctx->ending && ctx->jobs->len == 0 && ctx->done->len == 0) {
        end_sessions(ctx);
        sbx_cli_quit(ctx->cli, ctx->cli->signal != 0 ? SBX_EXIT_SIGNAL_BASE + ctx->cli->signal : 0);
    }
}

static gboolean reap_jobs(gpointer data)
{
    McpCtx *ctx = data;

    ctx->reap_idle = 0;
    while (ctx->done->len > 0) {
        job_free(g_ptr_array_steal_index(ctx->done, ctx->done->len - 1));
    }
    maybe_quit(ctx);
    return G_SOURCE_REMOVE;
}

/* @job is over: out of the jobs in flight, freed later (never inside its own callbacks). */
static void job_done(Job *job)
{
    McpCtx *ctx = job->ctx;

    sbx_mcp_approvals_done(ctx->approvals, job->call);
    g_clear_handle_id(&job->progress_timer, g_source_remove);
    g_ptr_array_remove(ctx->jobs, job);
    g_ptr_array_add(ctx->done, job);
    if (ctx->reap_idle == 0) {
        ctx->reap_idle = g_idle_add(reap_jobs, ctx);
    }
}

/* @job's execution ended with @report_json: the answer goes out, the job is freed later. */
static void job_finish(Job *job, const char *report_json)
{
    job_done(job);
    sbx_mcp_server_finish(job->ctx->server, job->call, report_json);
    job->call = NULL;
}

/* @job's session tool call ended with @outcome. */
static void job_finish_session(Job *job, const SbxMcpSessionOutcome *outcome)
{
    job_done(job);
    sbx_mcp_server_finish_session(job->ctx->server, job->call, outcome);
    job->call = NULL;
}

/* A failure before an execution ran, as `sandbox run --json` reports one; for a session tool,
 * its error (@status says which code). */
static void job_fail(Job *job, const char *failure, SbxStatus status)
{
    if (job->tool != SBX_MCP_TOOL_EXECUTE) {
        SbxMcpSessionOutcome o = {
            .error_code = status == SBX_STATUS_CANCELLED    ? "cancelled"
                          : status == SBX_STATUS_TERMINATED ? "terminated"
                                                            : "unavailable",
            .error = failure,
        };
        job_finish_session(job, &o);
        return;
    }
    SbxReport rep = {.failure = failure, .failure_status = status, .boot_ms = -1};
    g_autofree char *report = sbx_report_json(&rep);

    job_finish(job, report);
}

/* ---- through `sandbox serve` ---------------------------------------------------------------- */

static void on_serve_done(gpointer data, const char *report_json, const char *failure)
{
    Job *job = data;

    if (report_json != NULL) {
        job_finish(job, report_json);
    } else {
        job_fail(job, failure, SBX_STATUS_CRASH);
    }
}

/* Milliseconds since @job's call came: its progress (of its timeout, in ms too). */
static guint64 job_elapsed_ms(const Job *job)
{
    return (guint64)((g_get_monotonic_time() - job->started_us) / 1000);
}

/*
 * The program's output as it comes (a VM restored here, or a live run of the server), for a
 * client that asked for progress (the report has it all).
 */
static void on_job_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    Job *job = data;

    /* A client that does not read: no more progress (the result has the output). */
    if (sbx_out_queued(job->ctx->out, SBX_STREAM_STDOUT) > MCP_ANSWERS_QUEUED_MAX) {
        return;
    }
    sbx_mcp_server_output(job->ctx->server, job->call, stream, bytes, len, job_elapsed_ms(job),
                          job->timeout_ms);
}

/* The server told an approval of @job's run (it waits, or no longer). */
static void on_job_approval(gpointer data, const SbxServePending *pending, const char *id)
{
    Job *job = data;

    sbx_mcp_approvals_told(job->ctx->approvals, job->call, pending, id);
}

/* Through the server: FALSE if none answers (nothing sent). A session's run names no profile
 * (the session's is used). */
static gboolean try_serve(McpCtx *ctx, Job *job, const SbxMcpExecuteArgs *a)
{
    SbxServeClientRequest req = {
        .language = a->language,
        .code = a->code,
        .entry = a->entry,
        .args_json = a->args_json,
        .kwargs_json = a->kwargs_json,
        .tools_path = ctx->tools_path,
        .timeout_ms = a->timeout_ms,
        .output_limit = SBX_MCP_EXECUTE_OUTPUT_LIMIT,
        .profile = a->session == NULL ? ctx->profile_name : NULL,
        .session = a->session,
        .live = sbx_mcp_call_wants_progress(job->call),
        .approvals = sbx_mcp_approvals_can_ask(ctx->approvals), /* its held calls: the client */
    };

    if (ctx->no_serve) {
        return FALSE;
    }
    job->serve = sbx_serve_client_call(&req, on_serve_done, job);
    if (job->serve != NULL && req.live) {
        sbx_serve_call_set_output(job->serve, on_job_output);
    }
    if (job->serve != NULL && req.approvals) {
        sbx_serve_call_set_approvals(job->serve, on_job_approval);
    }
    return job->serve != NULL;
}

/* ---- here ----------------------------------------------------------------------------------- */

static void on_make_snapshot(const char *dir, gpointer data)
{
    McpCtx *ctx = data;
    g_autofree char *text =
        g_strdup_printf("sandbox mcp: making the %s snapshot (once per image and profile): %s\n",
                        sbx_profile_name(ctx->profile), dir);

    sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
}

/*
 * The profile, image and snapshot of the VMs restored here, loaded once. Making a missing
 * snapshot takes a while (once per image and profile). Its waits iterate the main loop, but
 * not the reader of the client's messages, whose dispatch called this (GLib does not dispatch a
 * source inside its own dispatch): a call sent meanwhile is read once the snapshot is there, and
 * never reaches here while it is made (tests/mcp, the "making" test).
 */
static gboolean ensure_local(McpCtx *ctx)
{
    g_autoptr(GError) error = NULL;
    SbxSnapshotOptions so = {.on_make = on_make_snapshot, .user_data = ctx};

    if (ctx->snapshot != NULL || ctx->local_failure != NULL) {
        return ctx->snapshot != NULL;
    }
    ctx->profile = sbx_profile_load_named(
        NULL, ctx->profile_name != NULL ? ctx->profile_name : MCP_PROFILE_DEFAULT, &error);
    if (ctx->profile != NULL) {
        ctx->image = sbx_image_open_for(ctx->profile, &error);
    }
    if (ctx->image != NULL) {
        ctx->snapshot = sbx_snapshot_ensure(ctx->profile, ctx->image, &so, &error);
    }
    if (ctx->snapshot == NULL) {
        ctx->local_failure = g_strdup_printf("no VM can be restored here: %s", error->message);
        g_autofree char *text = g_strdup_printf("sandbox mcp: %s\n", ctx->local_failure);
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
    }
    return ctx->snapshot != NULL;
}

static void on_exec_done(gpointer data, SbxExec *exec)
{
    Job *job = data;
    g_autofree char *report = sbx_exec_report_json(exec, NULL);

    if (job->local_session != NULL && job->ctx->local != NULL) {
        sbx_mcp_local_exec_done(job->ctx->local, job->local_session, exec);
    }
    if (sbx_exec_record_error(exec) != NULL) {
        g_autofree char *warning = g_strdup_printf(
            "sandbox mcp: warning: the record of an execution: %s\n", sbx_exec_record_error(exec));
        sbx_out_text(job->ctx->out, SBX_STREAM_STDERR, warning);
    }
    job_finish(job, report);
}

static void on_warnings(gpointer data, const char *const *warnings)
{
    Job *job = data;

    for (const char *const *w = warnings; *w != NULL; w++) {
        g_autofree char *text = g_strdup_printf("sandbox mcp: warning: %s\n", *w);
        sbx_out_text(job->ctx->out, SBX_STREAM_STDERR, text);
    }
}

/* Record the execution (docs/service.md, "Records") unless SANDBOX_RECORDS=off. */
static void set_record(McpCtx *ctx, SbxExec *exec)
{
    if (ctx->store == NULL) {
        return;
    }
    SbxExecRecordInfo info = {
        .front_end = "mcp",
        .profile = sbx_profile_name(ctx->profile),
        .snapshot_key = sbx_snapshot_inputs(ctx->snapshot)->key,
        .image_id = ctx->image->hash,
    };
    sbx_exec_set_record(exec, ctx->store, &info);
}

/* An execution here: in a VM of its own, or (@a->session) in a session of ours. */
static void run_here(McpCtx *ctx, Job *job, const SbxMcpExecuteArgs *a)
{
    static const SbxExecSink sink = {
        .collected_output = on_job_output,
        .warnings = on_warnings,
        .done = on_exec_done,
    };
    g_autoptr(GError) error = NULL;
    g_autofree char *busy = NULL;
    SbxExecSource *src = NULL;

    if (!ensure_local(ctx)) {
        job_fail(job, ctx->local_failure, SBX_STATUS_CRASH);
        return;
    }
    if (a->session != NULL && (src = sbx_mcp_local_lend(ctx->local, a->session, &busy)) == NULL) {
        job_fail(job, busy, SBX_STATUS_CRASH);
        return;
    }
    /* The providers start anew for each execution, as for `sandbox run --tools`. */
    SbxCatalog *catalog = ctx->tools_path != NULL ? sbx_catalog_load(ctx->tools_path, &error)
                                                  : sbx_catalog_new_empty();
    SbxTools *tools = catalog != NULL ? sbx_tools_new(catalog, &error) : NULL;
    if (tools == NULL) {
        g_autofree char *why = g_strdup_printf("the tool catalog: %s", error->message);
        if (src != NULL) {
            /* the lent VM given back unused: the session's state stands */
            sbx_exec_source_free(src);
            sbx_mcp_local_exec_done(ctx->local, a->session, NULL);
        }
        job_fail(job, why, SBX_STATUS_CRASH);
        return;
    }
    SbxExecRequest req = {
        .language = a->language,
        .code = a->code,
        .entry = a->entry,
        .args_json = a->args_json,
        .kwargs_json = a->kwargs_json,
        .timeout_ms = a->timeout_ms,
        .output_limit = SBX_MCP_EXECUTE_OUTPUT_LIMIT,
        .collect_output = TRUE,
        .keep = a->session != NULL,
    };
    SbxVmOptions opts = {0};
    if (src == NULL) {
        src = sbx_exec_source_new_vm(ctx->profile, ctx->image, ctx->snapshot, &opts);
    } else {
        job->local_session = g_strdup(a->session);
    }
    sbx_mcp_approvals_local(ctx->approvals, job->call, tools);
    job->exec = sbx_exec_new(&req, tools, src, &sink, job);
    set_record(ctx, job->exec);
    sbx_exec_start(job->exec);
}

/* ---- the protocol's side -------------------------------------------------------------------- */

static void on_send(gpointer data, const char *json, gsize len)
{
    McpCtx *ctx = data;
    g_autofree char *line = g_strdup_printf("%.*s\n", (int)len, json);

    sbx_out_json(ctx->out, SBX_STREAM_STDOUT, line, len + 1);
}

static gboolean on_progress_tick(gpointer data)
{
    Job *job = data;
    guint64 ms = job_elapsed_ms(job);
    g_autofree char *message =
        g_strdup_printf("running for %" G_GUINT64_FORMAT " s", (ms + 500) / 1000);

    sbx_mcp_server_progress(job->ctx->server, job->call, ms, job->timeout_ms, message);
    return G_SOURCE_CONTINUE;
}

static void on_execute(gpointer data, SbxMcpCall *call, const SbxMcpExecuteArgs *args)
{
    McpCtx *ctx = data;
    Job *job = g_new0(Job, 1);

    job->ctx = ctx;
    job->call = call;
    job->started_us = g_get_monotonic_time();
    job->timeout_ms = args->timeout_ms;
    sbx_mcp_call_set_data(call, job);
    g_ptr_array_add(ctx->jobs, job);
    if (sbx_mcp_call_wants_progress(call)) {
        /* not g_timeout_add_seconds(): its ticks are aligned to whole seconds and may come
         * early, so the first said "4 s" (a client's test failed on it) */
        job->progress_timer = g_timeout_add(MCP_PROGRESS_INTERVAL_S * 1000, on_progress_tick, job);
    }
    gboolean ours = args->session != NULL && sbx_mcp_local_has(ctx->local, args->session);
    if (ctx->ending) {
        job_fail(job, "sandbox mcp is shutting down", SBX_STATUS_TERMINATED);
    } else if (!ours && try_serve(ctx, job, args)) {
        return;
    } else if (!ours && args->session != NULL) {
        /* A session of the server: its run has no other place to go. */
        job_fail(job, MCP_NO_SERVE, SBX_STATUS_CRASH);
    } else {
        run_here(ctx, job, args);
    }
}

/* ---- the session tools, through `sandbox serve` --------------------------------------------- */

/* The server's error answer (or none: @failure) as the call's outcome. */
static void ask_failed(Job *job, const SbxServeMsg *answer, const char *failure)
{
    if (answer == NULL) {
        SbxMcpSessionOutcome o = {.error_code = "failed", .error = failure};
        job_finish_session(job, &o);
        return;
    }
    g_autofree char *other =
        g_strdup_printf("the server answered with a message of another kind (%s)",
                        answer->type_name != NULL ? answer->type_name : "no type");
    gboolean error = answer->type == SBX_SERVE_MSG_ERROR;
    SbxMcpSessionOutcome o = {
        .error_code = error && answer->code != NULL ? answer->code : "failed",
        .error = error ? answer->message : other,
        /* The session ended (expired, crashed, closed elsewhere): its handle is no more. */
        .gone = error && g_strcmp0(answer->code, "ended") == 0,
    };
    job_finish_session(job, &o);
}

static void on_opened(gpointer data, const SbxServeMsg *answer, const char *failure)
{
    Job *job = data;

    if (answer == NULL || answer->type != SBX_SERVE_MSG_SESSION || answer->n_sessions != 1) {
        ask_failed(job, answer, failure);
        return;
    }
    const SbxServeSession *se = &answer->sessions[0];
    SbxMcpSessionOutcome o = {
        .session = se->id,
        .idle_timeout_s = se->idle_timeout_s,
        .max_lifetime_s = se->max_lifetime_s,
    };
    job_finish_session(job, &o);
}

static void on_closed(gpointer data, const SbxServeMsg *answer, const char *failure)
{
    Job *job = data;

    /* An unknown session is closed as far as the client can tell (the server restarted). */
    if (answer != NULL &&
        (answer->type == SBX_SERVE_MSG_SESSION ||
         (answer->type == SBX_SERVE_MSG_ERROR && g_strcmp0(answer->code, "not_found") == 0))) {
        job_finish_session(job, &(SbxMcpSessionOutcome){0});
        return;
    }
    ask_failed(job, answer, failure);
}

static void on_written(gpointer data, const SbxServeMsg *answer, const char *failure)
{
    Job *job = data;

    if (answer == NULL || answer->type != SBX_SERVE_MSG_FILE) {
        ask_failed(job, answer, failure);
        return;
    }
    if (answer->size != job->len_sent || g_strcmp0(answer->sha256, job->sha256_sent) != 0) {
        SbxMcpSessionOutcome o = {.error_code = "failed",
                                  .error = "the guest has other bytes than were sent"};
        job_finish_session(job, &o);
        return;
    }
    SbxMcpSessionOutcome o = {.size = answer->size, .sha256 = answer->sha256};
    job_finish_session(job, &o);
}

static void on_read(gpointer data, const SbxServeMsg *answer, const char *failure)
{
    Job *job = data;

    if (answer == NULL || answer->type != SBX_SERVE_MSG_FILE || answer->sha256 == NULL ||
        answer->offset != 0) {
        ask_failed(job, answer, failure);
        return;
    }
    if (answer->size > SBX_MCP_FILE_MAX) { /* its size is enough: the core refuses it */
        SbxMcpSessionOutcome o = {.size = answer->size, .sha256 = answer->sha256};
        job_finish_session(job, &o);
        return;
    }
    g_autofree char *sha = g_compute_checksum_for_data(
        G_CHECKSUM_SHA256, answer->data != NULL ? answer->data : (const guint8 *)"",
        answer->data_len);
    if (answer->data_len != answer->size || strcmp(sha, answer->sha256) != 0) {
        SbxMcpSessionOutcome o = {.error_code = "failed",
                                  .error = "the server sent bytes that do not fit the file"};
        job_finish_session(job, &o);
        return;
    }
    SbxMcpSessionOutcome o = {.size = answer->size, .sha256 = sha, .data = answer->data};
    job_finish_session(job, &o);
}

/* A session tool's job (@prepared, or a new one), in flight; FALSE: it was refused at once. */
static gboolean session_job(McpCtx *ctx, SbxMcpCall *call, Job **job, Job *prepared)
{
    *job = prepared != NULL ? prepared : g_new0(Job, 1);
    (*job)->ctx = ctx;
    (*job)->call = call;
    (*job)->tool = sbx_mcp_call_tool(call);
    sbx_mcp_call_set_data(call, *job);
    g_ptr_array_add(ctx->jobs, *job);
    if (ctx->ending) {
        job_fail(*job, "sandbox mcp is shutting down", SBX_STATUS_TERMINATED);
        return FALSE;
    }
    return TRUE;
}

/* The request of a session of the server's; its error at once if the server is gone. */
static void ask_serve(McpCtx *ctx, Job *job, const SbxServeRequest *req, SbxServeAskDone done)
{
    if (ctx->no_serve ||
        (job->ask = sbx_serve_client_ask(req, MCP_SESSION_WORK_MS, done, job)) == NULL) {
        job_fail(job, MCP_NO_SERVE, SBX_STATUS_CRASH);
    }
}

/* A session of ours ended an operation with @outcome. */
static void on_local_done(gpointer data, const SbxMcpSessionOutcome *outcome)
{
    Job *job = data;

    job->local_op = NULL;
    job_finish_session(job, outcome);
}

G_STATIC_ASSERT(SBX_MCP_SESSION_SECONDS_MAX == SBX_SERVE_SESSION_SECONDS_MAX);

static void on_session_open(gpointer data, SbxMcpCall *call, guint idle_timeout_s,
                            guint max_lifetime_s)
{
    McpCtx *ctx = data;
    SbxServeRequest req = {
        .type = SBX_SERVE_REQ_SESSION_NEW,
        .session_new = {.profile = ctx->profile_name,
                        .idle_timeout_s = idle_timeout_s,
                        .max_lifetime_s = max_lifetime_s},
    };
    SbxVmOptions opts = {0};
    Job *job;

    if (!session_job(ctx, call, &job, NULL) ||
        (!ctx->no_serve &&
         (job->ask = sbx_serve_client_ask(&req, MCP_SESSION_WORK_MS, on_opened, job)) != NULL)) {
        return;
    }
    /* No server: a session of a VM restored here. */
    if (!ensure_local(ctx)) {
        job_fail(job, ctx->local_failure, SBX_STATUS_CRASH);
        return;
    }
    SbxExecSource *src = sbx_exec_source_new_vm(ctx->profile, ctx->image, ctx->snapshot, &opts);
    job->local_op =
        sbx_mcp_local_open(ctx->local, src, idle_timeout_s, max_lifetime_s, on_local_done, job);
}

static void on_session_close(gpointer data, SbxMcpCall *call, const char *session)
{
    McpCtx *ctx = data;
    SbxServeRequest req = {.type = SBX_SERVE_REQ_SESSION_END, .id = (char *)session};
    Job *job;

    if (!session_job(ctx, call, &job, NULL)) {
        return;
    }
    if (sbx_mcp_local_has(ctx->local, session)) {
        sbx_mcp_local_close(ctx->local, session);
        job_finish_session(job, &(SbxMcpSessionOutcome){0});
        return;
    }
    ask_serve(ctx, job, &req, on_closed);
}
static void on_file_write(gpointer data, SbxMcpCall *call, const char *session, const char *path,
                          const guint8 *bytes, gsize len)
{
    Job *job = g_new0(Job, 1);
    g_autofree char *sha = g_compute_checksum_for_data(
        G_CHECKSUM_SHA256, bytes != NULL ? bytes : (const guint8 *)"", len);
    /* One piece, the last: SBX_MCP_FILE_MAX is within SBX_SERVE_FILE_CHUNK_MAX. */
    SbxServeRequest req = {
        .type = SBX_SERVE_REQ_FILE_PUT,
        .file = {.session = (char *)session,
                 .path = (char *)path,
                 .data = (guint8 *)bytes,
                 .len = len,
                 .last = TRUE},
    };
    McpCtx *ctx = data;

    G_STATIC_ASSERT(SBX_MCP_FILE_MAX <= SBX_SERVE_FILE_CHUNK_MAX);
    g_strlcpy(job->sha256_sent, sha, sizeof(job->sha256_sent));
    job->len_sent = len;
    if (!session_job(ctx, call, &job, job)) {
        return;
    }
    if (sbx_mcp_local_has(ctx->local, session)) {
        job->local_op =
            sbx_mcp_local_write(ctx->local, session, path, bytes, len, on_local_done, job);
        return;
    }
    ask_serve(ctx, job, &req, on_written);
}

static void on_file_read(gpointer data, SbxMcpCall *call, const char *session, const char *path)
{
    SbxServeRequest req = {
        .type = SBX_SERVE_REQ_FILE_GET,
        .file = {.session = (char *)session, .path = (char *)path},
    };
    McpCtx *ctx = data;
    Job *job;

    if (!session_job(ctx, call, &job, NULL)) {
        return;
    }
    if (sbx_mcp_local_has(ctx->local, session)) {
        job->local_op = sbx_mcp_local_read(ctx->local, session, path, on_local_done, job);
        return;
    }
    ask_serve(ctx, job, &req, on_read);
}

/* End @job's execution now; its answer (if the call was not cancelled) says @status. */
static void job_abort(Job *job, SbxStatus status, const char *why)
{
    if (job->local_op != NULL) {
        /* An open's session is ended; a file's trip stops (the session may end with it). */
        g_clear_pointer(&job->local_op, sbx_mcp_local_op_cancel);
        job_fail(job, why, status);
    } else if (job->ask != NULL) {
        /* Hanging up: a session_new's session is ended by the server; a file's trip stops. */
        g_clear_pointer(&job->ask, sbx_serve_ask_free);
        job_fail(job, why, status);
    } else if (job->serve != NULL) {
        /* Hanging up ends the server's execution and kills its VM. */
        g_clear_pointer(&job->serve, sbx_serve_call_free);
        job_fail(job, why, status);
    } else if (job->exec != NULL) {
        sbx_exec_abort(job->exec, status, why); /* done comes once it is all reaped */
    }
}

static void on_cancel(gpointer data, SbxMcpCall *call)
{
    (void)data;
    job_abort(sbx_mcp_call_get_data(call), SBX_STATUS_CANCELLED, "cancelled by the MCP client");
}

static const SbxMcpServerOps server_ops = {
    .send = on_send,
    .execute = on_execute,
    .cancel = on_cancel,
    .session_open = on_session_open,
    .session_close = on_session_close,
    .file_write = on_file_write,
    .file_read = on_file_read,
};

/* Stop reading; the loop quits once every execution is over and reaped. */
static void begin_end(McpCtx *ctx)
{
    ctx->ending = TRUE;
    g_clear_handle_id(&ctx->stdin_source, g_source_remove);
    g_clear_handle_id(&ctx->resume_source, g_source_remove);
    maybe_quit(ctx);
}

static void read_stdin(McpCtx *ctx);

static gboolean resume_stdin(gpointer data)
{
    McpCtx *ctx = data;

    if (sbx_out_queued(ctx->out, SBX_STREAM_STDOUT) > MCP_ANSWERS_QUEUED_MAX) {
        return G_SOURCE_CONTINUE;
    }
    ctx->resume_source = 0;
    read_stdin(ctx);
    return G_SOURCE_REMOVE;
}

static gboolean on_stdin(gint fd, GIOCondition cond, gpointer data)
{
    McpCtx *ctx = data;
    guint8 buf[64 * 1024];
    (void)cond;

    if (sbx_out_queued(ctx->out, SBX_STREAM_STDOUT) > MCP_ANSWERS_QUEUED_MAX) {
        ctx->stdin_source = 0;
        ctx->resume_source = g_timeout_add(MCP_ANSWERS_CHECK_MS, resume_stdin, ctx);
        return G_SOURCE_REMOVE;
    }
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return G_SOURCE_CONTINUE;
    }
    if (n > 0) {
        sbx_mcp_server_feed(ctx->server, buf, n);
        return G_SOURCE_CONTINUE;
    }
    /*
     * The client closed our stdin (MCP's stdio shutdown, or `printf ... | sandbox mcp`): the
     * executions in flight finish and are answered (a client that still reads gets them; the
     * SDK sends SIGTERM after 2 s, which ends them), then we exit. Each is bounded by its
     * timeout.
     */
    sbx_mcp_server_feed_end(ctx->server);
    ctx->stdin_source = 0;
    begin_end(ctx);
    return G_SOURCE_REMOVE;
}

static void on_signal(SbxCli *cli, gpointer data)
{
    McpCtx *ctx = data;
    g_autofree char *why =
        g_strdup_printf("interrupted by %s", cli->signal == SIGINT ? "SIGINT" : "SIGTERM");

    /* Backwards: an abort may finish its job at once (and take it out of the array). */
    for (guint i = ctx->jobs->len; i > 0; i--) {
        if (i <= ctx->jobs->len) {
            job_abort(g_ptr_array_index(ctx->jobs, i - 1), SBX_STATUS_TERMINATED, why);
        }
    }
    begin_end(ctx);
}

/* ---- the verb ------------------------------------------------------------------------------- */

static gboolean parse_options(McpCtx *ctx, int argc, char **argv, GError **error)
{
    const GOptionEntry entries[] = {
        {"tools", 't', 0, G_OPTION_ARG_FILENAME, &ctx->tools_path,
         "Tool catalog the programs may call", "FILE"},
        {"profile", 'p', 0, G_OPTION_ARG_STRING, &ctx->profile_name,
         "Machine profile (default: the server's, or " MCP_PROFILE_DEFAULT ")", "NAME"},
        {"no-serve", 0, 0, G_OPTION_ARG_NONE, &ctx->no_serve,
         "Restore the VMs here even if `sandbox serve` runs", NULL},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(GOptionContext) oc =
        g_option_context_new("- serve MCP on stdin/stdout (code mode for agents)");
    g_set_prgname("sandbox mcp");
    g_option_context_add_main_entries(oc, entries, NULL);
    g_option_context_set_description(oc, "Newline-delimited JSON-RPC on stdin and stdout; logs "
                                         "on stderr. docs/mcp-server.md.\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    if (argc != 1) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    "no arguments; see `sandbox mcp --help`");
        return FALSE;
    }
    if (ctx->tools_path != NULL) {
        /* Checked once now (a usage error); loaded again for each execution, or by the server,
         * which needs it absolute. */
        g_autofree char *abs = g_canonicalize_filename(ctx->tools_path, NULL);
        SbxCatalog *catalog = sbx_catalog_load(abs, error);
        if (catalog == NULL) {
            return FALSE;
        }
        sbx_catalog_free(catalog);
        g_free(ctx->tools_path);
        ctx->tools_path = g_steal_pointer(&abs);
    }
    return TRUE;
}

static void read_stdin(McpCtx *ctx)
{
    ctx->stdin_source = g_unix_fd_add(STDIN_FILENO, G_IO_IN | G_IO_HUP | G_IO_ERR, on_stdin, ctx);
}

/* --tools: the catalog's tools are listed (MCP servers asked): discovery can answer. */
static void on_listed(SbxTools *tools, const GError *error, gpointer data)
{
    McpCtx *ctx = data;

    for (const char *const *w = sbx_tools_warnings(tools); *w != NULL; w++) {
        g_autofree char *text = g_strdup_printf("sandbox mcp: warning: %s\n", *w);
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
    }
    if (error != NULL) {
        g_autofree char *text = g_strdup_printf("sandbox mcp: %s\n", error->message);
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
        sbx_cli_quit(ctx->cli, SBX_EXIT_SANDBOX);
        return;
    }
    sbx_mcp_server_set_catalog(ctx->server, sbx_tools_catalog(tools));
    if (!ctx->ending) {
        read_stdin(ctx);
    }
}

/*
 * With --tools, the catalog's tools are listed before the first message is read, so that
 * tools/list names the discovery tools from the start (an MCP provider's server answers within
 * its startup timeout, 20 s by default). The servers listed stay up, idle, for the discovery's
 * catalog; each execution starts its own.
 */
static gboolean start_listing(McpCtx *ctx, GError **error)
{
    SbxCatalog *catalog = sbx_catalog_load(ctx->tools_path, error);

    ctx->listing = catalog != NULL ? sbx_tools_new_listing(catalog, error) : NULL;
    if (ctx->listing == NULL) {
        return FALSE;
    }
    sbx_tools_start(ctx->listing, on_listed, ctx);
    return TRUE;
}

static int mcp_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    McpCtx *ctx = mcp_ctx = g_new0(McpCtx, 1);
    SbxMcpServerInfo info = {.name = "sandbox", .version = SBX_VERSION};

    ctx->cli = cli;
    ctx->jobs = g_ptr_array_new();
    ctx->local = sbx_mcp_local_new();
    ctx->done = g_ptr_array_new();
    if (!parse_options(ctx, argc, argv, &error)) {
        fprintf(stderr, "sandbox mcp: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    /* From here on stdout carries only the protocol, written without blocking the loop. */
    ctx->out = sbx_out_new();
    ctx->store =
        sbx_cli_store_open_records(ctx->out, "sandbox mcp: warning: executions are not recorded");
    ctx->server = sbx_mcp_server_new(&server_ops, ctx, &info);
    ctx->approvals = sbx_mcp_approvals_new(ctx->server);
    if (ctx->tools_path == NULL) {
        read_stdin(ctx);
    } else if (!start_listing(ctx, &error)) {
        fprintf(stderr, "sandbox mcp: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    cli->on_signal = on_signal;
    cli->data = ctx;
    return -1;
}

static void mcp_cleanup(SbxCli *cli)
{
    McpCtx *ctx = mcp_ctx;
    (void)cli;

    if (ctx == NULL) {
        return;
    }
    g_clear_handle_id(&ctx->stdin_source, g_source_remove);
    g_clear_handle_id(&ctx->resume_source, g_source_remove);
    g_clear_handle_id(&ctx->reap_idle, g_source_remove);
    /* Quit only comes with no job left; after an early exit, end what is left here. */
    for (guint i = 0; i < ctx->jobs->len; i++) {
        job_free(g_ptr_array_index(ctx->jobs, i));
    }
    for (guint i = 0; i < ctx->done->len; i++) {
        job_free(g_ptr_array_index(ctx->done, i));
    }
    if (ctx->server != NULL) {
        end_sessions(ctx); /* after an early exit too: no session's VM is left behind */
    }
    g_clear_pointer(&ctx->local, sbx_mcp_local_free); /* a usage error's: before the server */
    g_ptr_array_unref(ctx->jobs);
    g_ptr_array_unref(ctx->done);
    sbx_mcp_server_free(ctx->server);       /* its questions end */
    sbx_mcp_approvals_free(ctx->approvals); /* after the executions and the server */
    sbx_tools_free(ctx->listing);           /* after the server, which read its catalog */
    sbx_store_close(ctx->store);
    sbx_snapshot_free(ctx->snapshot);
    sbx_image_free(ctx->image);
    sbx_profile_free(ctx->profile);
    g_free(ctx->local_failure);
    /* Last: what is queued for the client is written (bounded) before we exit. */
    sbx_out_free(ctx->out);
    g_free(ctx->tools_path);
    g_free(ctx->profile_name);
    g_free(ctx);
    mcp_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_mcp = {
    .name = "mcp",
    .summary = "Serve MCP on stdio: an agent's code runs in sandbox VMs (execute)",
    .start = mcp_start,
    .cleanup = mcp_cleanup,
};
