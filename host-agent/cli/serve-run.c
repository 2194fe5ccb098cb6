/*
 * One `run` request of `sandbox serve` (docs/pool.md): claim a VM from the pool (while the tools
 * start: MCP servers list their tools, asynchronously), run the
 * execution on it with the session (output forwarded to the client as it comes, or collected),
 * relay tool calls, then destroy the VM (never reused), wait for the tool processes, and send
 * the client the exit code, the summary and the report `sandbox run --json` prints.
 */
#include <signal.h>

#include "cli/outcome.h"
#include "cli/relay.h"
#include "cli/report.h"
#include "cli/serve.h"
#include "protocol/base64.h"
#include "session.h"
#include "tools.h"

struct ServeRun {
    Serve *srv;
    ServeConn *conn; /* NULL once the client is gone */
    ServeRunRequest req;
    SbxTools *tools;
    gboolean tools_ready; /* started (MCP tools listed) */
    GCancellable *cancel; /* tool calls */
    guint64 claim_id;
    gboolean claiming;
    SbxPoolVm *pv;
    SbxSession *session;
    const SbxRunResult *result; /* owned by the session */
    char *failure;              /* the sandbox failed before an execution result */
    SbxStatus failure_status;
    gboolean finished;
    gboolean reported;
    gint64 t_received;   /* monotonic us */
    gint64 claim_us;     /* request received to VM in hand */
    gint64 boot_us;      /* the VM's restore, done before the claim */
    gint64 hello_us;     /* the VM's hello (with the warm-up), done before the claim */
    gint64 hello_age_us; /* hello_ok to the claim: how long the VM waited, handshaken */
    gboolean warmed;     /* the VM's runners warmed up again before it was offered */
    gboolean prestarted; /* the VM was restored in a pre-started QEMU */
    guint idle_source;
};

void sbx_serve_request_clear(ServeRunRequest *req)
{
    g_clear_pointer(&req->code, g_free);
    g_clear_pointer(&req->tools_path, g_free);
}

ServeRun *sbx_serve_run_new(Serve *srv, ServeConn *conn, ServeRunRequest *req)
{
    ServeRun *run = g_new0(ServeRun, 1);

    run->srv = srv;
    run->conn = conn;
    run->req = *req;
    memset(req, 0, sizeof(*req));
    run->cancel = g_cancellable_new();
    run->t_received = g_get_monotonic_time();
    run->failure_status = SBX_STATUS_CRASH;
    return run;
}

guint sbx_serve_run_profile(ServeRun *run)
{
    return run->req.profile;
}

GPid sbx_serve_run_pid(ServeRun *run)
{
    return run->pv != NULL ? sbx_vm_qemu_pid(sbx_pool_vm_vm(run->pv)) : 0;
}

/* The tools' warnings (an MCP schema left unchecked, ...) go before the summary, on stderr. */
static char *with_warnings(ServeRun *run, const char *summary)
{
    GString *out = g_string_new(NULL);

    for (const char *const *w = run->tools != NULL ? sbx_tools_warnings(run->tools) : NULL;
         w != NULL && *w != NULL; w++) {
        g_string_append_printf(out, "sandbox: warning: %s\n", *w);
    }
    g_string_append(out, summary);
    return g_string_free(out, FALSE);
}

/* The done frame: exit code, the stderr summary and the --json report. */
static char *done_message(ServeRun *run)
{
    SbxReport rep = {
        .result = run->result,
        .failure = run->failure,
        .failure_status = run->failure_status,
        .ns = run->tools != NULL ? sbx_tools_namespace(run->tools) : NULL,
        .boot_ms = run->boot_us > 0 ? run->boot_us / 1000 : -1,
    };
    g_autofree char *report = sbx_report_json(&rep);
    g_autofree char *outcome =
        sbx_outcome_summary(run->result, run->failure, run->req.output_limit);
    g_autofree char *summary = with_warnings(run, outcome);
    int code = run->result != NULL ? sbx_outcome_exit_code(run->result) : SBX_EXIT_SANDBOX;
    GString *out = g_string_new(NULL);

    g_assert(report[0] == '{');
    g_string_append_printf(out, "{\"type\":\"done\",\"exit_code\":%d,\"summary\":", code);
    sbx_json_append_string(out, summary, strlen(summary));
    /*
     * The report, first with where the VM came from, how long the claim took and the time
     * from the request's arrival to this frame.
     */
    g_string_append_printf(
        out,
        ",\"report\":{\"start\":\"pool\",\"claim_ms\":%" G_GINT64_FORMAT
        ",\"serve_ms\":%" G_GINT64_FORMAT ",\"hello_ms\":%" G_GINT64_FORMAT
        ",\"hello_age_ms\":%" G_GINT64_FORMAT ",\"warmed\":%s,\"prestarted\":%s%s%s}",
        run->claim_us / 1000, (g_get_monotonic_time() - run->t_received) / 1000,
        run->hello_us / 1000, run->hello_age_us / 1000, run->warmed ? "true" : "false",
        run->prestarted ? "true" : "false", report[1] == '}' ? "" : ",", report + 1);
    return g_string_free(out, FALSE);
}

static gboolean finished_idle(gpointer data)
{
    ServeRun *run = data;

    run->idle_source = 0;
    /* Frees the run (and its session: not from inside a session callback, hence the idle). */
    sbx_serve_run_finished(run->srv, run->conn, run);
    return G_SOURCE_REMOVE;
}

/*
 * Report once the execution is over and every tool process has been reaped. The done frame
 * is queued at once (the client's latency); the run is freed from an idle callback.
 */
static void maybe_finish(ServeRun *run)
{
    if (run->reported || !run->finished ||
        (run->tools != NULL && sbx_tools_in_flight(run->tools) > 0)) {
        return;
    }
    run->reported = TRUE;
    if (run->conn != NULL) {
        g_autofree char *msg = done_message(run);
        sbx_serve_conn_send(run->conn, msg, strlen(msg));
    }
    run->idle_source = g_idle_add(finished_idle, run);
}

static void kill_vm(ServeRun *run)
{
    if (run->pv != NULL) {
        sbx_vm_kill(sbx_pool_vm_vm(run->pv)); /* one execution per VM: nothing outlives it */
    }
}

static void fail(ServeRun *run, const char *message)
{
    if (run->finished) {
        return;
    }
    run->failure = g_strdup(message);
    run->finished = TRUE;
    g_cancellable_cancel(run->cancel);
    kill_vm(run);
    maybe_finish(run);
}

/* ---- session callbacks ---------------------------------------------------------------- */

static void on_output(SbxSession *s, SbxStream stream, const guint8 *data, gsize len,
                      gpointer user_data)
{
    ServeRun *run = user_data;
    (void)s;

    while (run->conn != NULL && len > 0) {
        gsize n = MIN(len, SBX_SERVE_OUTPUT_CHUNK);
        g_autofree char *b64 = NULL;
        if (sbx_base64_encode(data, n, &b64) < 0) {
            return;
        }
        g_autofree char *msg = g_strdup_printf("{\"type\":\"output\",\"stream\":\"%s\","
                                               "\"data\":\"%s\"}",
                                               sbx_stream_name(stream), b64);
        if (!sbx_serve_conn_send(run->conn, msg, strlen(msg))) {
            return; /* the connection is being dropped: it aborts this run */
        }
        data += n;
        len -= n;
    }
}

static void on_tool_settled(gpointer user_data)
{
    maybe_finish(user_data);
}

static void on_tool_call(SbxSession *s, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json, gpointer user_data)
{
    ServeRun *run = user_data;

    sbx_relay_tool_call(s, run->tools, call_id, provider, tool, input_json, run->cancel,
                        on_tool_settled, run);
}

static void on_done(SbxSession *s, const SbxRunResult *result, gpointer user_data)
{
    ServeRun *run = user_data;
    (void)s;

    run->result = result;
    run->finished = TRUE;
    g_cancellable_cancel(run->cancel);
    maybe_finish(run); /* queues the done frame before the kill's reaping wait */
    kill_vm(run);
}

/* ---- start ---------------------------------------------------------------------------- */

static void on_vm_exit(SbxVm *vm, const char *reason, gpointer user_data)
{
    ServeRun *run = user_data;
    g_autofree char *msg = g_strdup_printf("the VM exited: %s", reason);
    (void)vm;

    if (run->session != NULL) {
        sbx_session_abort(run->session, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, msg);
    }
    fail(run, msg);
}

static void start_execution(ServeRun *run)
{
    static const SbxSessionCallbacks streaming = {
        .on_output = on_output,
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    static const SbxSessionCallbacks collecting = {
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    g_autoptr(GError) error = NULL;
    gsize n_tools = 0;
    const SbxToolDecl *decls = sbx_tools_decls(run->tools, &n_tools);
    SbxRunRequest req = {
        .language = run->req.language,
        .code = run->req.code,
        .tools = decls,
        .n_tools = n_tools,
        .output_limit = run->req.output_limit,
        .timeout_ms = run->req.timeout_ms,
        .collect_output = run->req.collect,
    };

    /* Handshaken in the pool: the execute goes out now, with the clock and fresh entropy. */
    run->session = sbx_pool_vm_take_session(run->pv);
    if (run->session == NULL) {
        fail(run, "the pooled VM has no session");
        return;
    }
    run->hello_age_us = g_get_monotonic_time() - sbx_session_hello_time(run->session);
    sbx_session_set_callbacks(run->session, run->req.collect ? &collecting : &streaming, run);
    if (!sbx_session_run(run->session, &req, &error)) {
        g_autofree char *msg = g_strdup_printf("cannot start the execution: %s", error->message);
        fail(run, msg);
        return;
    }
    sbx_vm_execution_begin(sbx_pool_vm_vm(run->pv));
}

static void on_claimed(gpointer vm, const GError *error, gpointer user_data)
{
    ServeRun *run = user_data;

    run->claiming = FALSE;
    if (vm != NULL) {
        sbx_pool_vm_detach(vm);
    }
    if (run->finished) { /* the tools failed to start meanwhile: the VM goes with the run */
        run->pv = vm;
        kill_vm(run);
        return;
    }
    run->claim_us = g_get_monotonic_time() - run->t_received;
    if (vm == NULL) {
        g_autofree char *msg = g_strdup_printf("cannot start the VM: %s", error->message);
        fail(run, msg);
        return;
    }
    run->pv = vm;
    run->boot_us = sbx_pool_vm_restore_us(run->pv);
    run->hello_us = sbx_pool_vm_hello_us(run->pv);
    run->warmed = sbx_pool_vm_warmed(run->pv);
    run->prestarted = sbx_pool_vm_prestarted(run->pv);
    sbx_vm_set_exit_handler(sbx_pool_vm_vm(run->pv), on_vm_exit, run);
    if (run->tools_ready) {
        start_execution(run);
    } /* else on_tools_ready starts it */
}

static void on_tools_ready(SbxTools *tools, const GError *error, gpointer user_data)
{
    ServeRun *run = user_data;
    (void)tools;

    if (error != NULL) {
        g_autofree char *msg = g_strdup_printf("cannot start the tools: %s", error->message);
        fail(run, msg);
        return;
    }
    run->tools_ready = TRUE;
    if (run->pv != NULL && !run->finished) {
        start_execution(run);
    }
}

void sbx_serve_run_start(ServeRun *run)
{
    g_autoptr(GError) error = NULL;

    run->tools = sbx_tools_load(run->req.tools_path, &error);
    if (run->tools == NULL) {
        g_autofree char *msg = g_strdup_printf("tool catalog: %s", error->message);
        fail(run, msg);
        return;
    }
    g_autofree char *origin = sbx_serve_conn_origin(run->conn);
    sbx_tools_set_approvals(run->tools, sbx_serve_approvals(run->srv), origin);
    run->claiming = TRUE;
    run->claim_id = sbx_pool_claim(sbx_serve_pool(run->srv, run->req.profile), on_claimed, run);
    sbx_tools_start(run->tools, on_tools_ready, run);
}

void sbx_serve_run_abort(ServeRun *run, const char *why, gboolean client_gone)
{
    if (client_gone) {
        run->conn = NULL;
    }
    if (run->claiming) {
        sbx_pool_cancel_claim(sbx_serve_pool(run->srv, run->req.profile), run->claim_id);
        run->claiming = FALSE;
    }
    run->failure_status = SBX_STATUS_TERMINATED;
    if (run->session != NULL) {
        sbx_session_abort(run->session, SBX_STATUS_TERMINATED, SBX_ERR_INTERNAL, why);
    }
    fail(run, why); /* no-op once the execution ended */
}

void sbx_serve_run_free(ServeRun *run)
{
    if (run == NULL) {
        return;
    }
    if (run->claiming) {
        sbx_pool_cancel_claim(sbx_serve_pool(run->srv, run->req.profile), run->claim_id);
    }
    g_clear_handle_id(&run->idle_source, g_source_remove);
    sbx_session_free(run->session);
    sbx_pool_vm_free(run->pv);
    sbx_tools_free(run->tools);
    g_clear_object(&run->cancel);
    g_free(run->failure);
    sbx_serve_request_clear(&run->req);
    g_free(run);
}
