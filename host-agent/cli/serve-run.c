/*
 * One `run` request of `sandbox serve` (docs/pool.md), on the execution core (exec/exec.h) with
 * a VM claimed from the request's pool: output forwarded to the client as it comes (or
 * collected), then the done frame with the exit code, the summary and the report `sandbox run
 * --json` prints.
 */
#include <signal.h>

#include "cli/serve.h"
#include "exec/exec.h"
#include "session.h"
#include "tools.h"

struct ServeRun {
    Serve *srv;
    ServeConn *conn; /* NULL once the client is gone */
    ServeRunRequest req;
    SbxExec *exec;     /* the execution core does the work; this file talks to the client */
    gint64 t_received; /* monotonic us */
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
    run->t_received = g_get_monotonic_time();
    return run;
}

guint sbx_serve_run_profile(ServeRun *run)
{
    return run->req.profile;
}

GPid sbx_serve_run_pid(ServeRun *run)
{
    SbxVm *vm = run->exec != NULL ? sbx_exec_vm(run->exec) : NULL;

    return vm != NULL ? sbx_vm_qemu_pid(vm) : 0;
}

/* The tools' warnings (an MCP schema left unchecked, ...) go before the summary, on stderr. */
static char *with_warnings(ServeRun *run, const char *summary)
{
    GString *out = g_string_new(NULL);
    SbxTools *tools = sbx_exec_tools(run->exec);

    for (const char *const *w = sbx_tools_warnings(tools); w != NULL && *w != NULL; w++) {
        g_string_append_printf(out, "sandbox: warning: %s\n", *w);
    }
    g_string_append(out, summary);
    return g_string_free(out, FALSE);
}

/*
 * The done frame: exit code, the stderr summary and the --json report, with the time from the
 * request's arrival to this frame (`serve_ms`).
 */
static void send_done(ServeRun *run)
{
    g_autofree char *serve_ms = g_strdup_printf(",\"serve_ms\":%" G_GINT64_FORMAT,
                                                (g_get_monotonic_time() - run->t_received) / 1000);
    g_autofree char *report = sbx_exec_report_json(run->exec, serve_ms);
    g_autofree char *outcome = sbx_exec_summary(run->exec);
    g_autofree char *summary = with_warnings(run, outcome);
    SbxServeMsg m = {
        .type = SBX_SERVE_MSG_DONE,
        .exit_code = sbx_exec_exit_code(run->exec),
        .summary = summary,
        .report_json = report,
    };

    sbx_serve_conn_send_msg(run->conn, &m);
}

static gboolean finished_idle(gpointer data)
{
    ServeRun *run = data;

    run->idle_source = 0;
    /* Frees the run (and its exec: not from inside its callback, hence the idle). */
    sbx_serve_run_finished(run->srv, run->conn, run);
    return G_SOURCE_REMOVE;
}

/*
 * The execution is over and every tool process reaped. The done frame is queued at once (the
 * client's latency); the run is freed from an idle callback.
 */
static void on_done(gpointer data, SbxExec *exec)
{
    ServeRun *run = data;
    (void)exec;

    if (run->conn != NULL) {
        send_done(run);
    }
    run->idle_source = g_idle_add(finished_idle, run);
}

static void on_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    ServeRun *run = data;

    while (run->conn != NULL && len > 0) {
        gsize n = MIN(len, SBX_SERVE_OUTPUT_CHUNK);
        SbxServeMsg m = {
            .type = SBX_SERVE_MSG_OUTPUT,
            .stream = stream,
            .data = (guint8 *)bytes,
            .data_len = n,
        };
        g_autofree char *json = sbx_serve_proto_msg_encode(&m);
        if (!sbx_serve_conn_send(run->conn, json, strlen(json))) {
            return; /* the connection is being dropped: it aborts this run */
        }
        bytes += n;
        len -= n;
    }
}

void sbx_serve_run_start(ServeRun *run)
{
    static const SbxExecSink sink = {.output = on_output, .done = on_done};
    g_autoptr(GError) error = NULL;
    SbxExecRequest req = {
        .language = run->req.language,
        .code = run->req.code,
        .timeout_ms = run->req.timeout_ms,
        .output_limit = run->req.output_limit,
        .collect_output = run->req.collect,
    };
    SbxTools *tools = sbx_tools_load(run->req.tools_path, &error);

    if (tools == NULL) {
        g_autofree char *msg = g_strdup_printf("tool catalog: %s", error->message);
        tools = sbx_tools_new(sbx_catalog_new_empty(), NULL);
        run->exec = sbx_exec_new(&req, tools, sbx_exec_source_new_pool(NULL), &sink, run);
        sbx_exec_abort(run->exec, SBX_STATUS_CRASH, msg); /* never started: done at once */
        return;
    }
    g_autofree char *origin = sbx_serve_conn_origin(run->conn);
    sbx_tools_set_approvals(tools, sbx_serve_approvals(run->srv), origin);
    run->exec = sbx_exec_new(&req, tools,
                             sbx_exec_source_new_pool(sbx_serve_pool(run->srv, run->req.profile)),
                             &sink, run);
    sbx_exec_start(run->exec);
}

void sbx_serve_run_abort(ServeRun *run, const char *why, gboolean client_gone)
{
    if (client_gone) {
        run->conn = NULL;
    }
    if (run->exec != NULL) {
        sbx_exec_abort(run->exec, SBX_STATUS_TERMINATED, why); /* no-op once it ended */
    }
}

void sbx_serve_run_free(ServeRun *run)
{
    if (run == NULL) {
        return;
    }
    g_clear_handle_id(&run->idle_source, g_source_remove);
    sbx_exec_free(run->exec); /* its VM killed, its tool processes reaped */
    sbx_serve_request_clear(&run->req);
    g_free(run);
}
