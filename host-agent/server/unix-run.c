/*
 * One `run` request on the Unix socket (docs/pool.md, "Client protocol"), as a job of the
 * server: its output forwarded to the client as it comes (or collected), then the done frame
 * with the exit code, the summary and the report `sandbox run --json` prints. A run that names a
 * session borrows its VM (sessions.h) and asks the guest to keep the runner's state.
 */
#include <stdio.h>
#include <string.h>

#include "server/sessions.h"
#include "server/unix-private.h"
#include "tools.h"

struct UnixRun {
    UnixConn *conn;
    SbxServerJob *job;
    gint64 t_received;          /* monotonic us */
    UnixApprovalTeller *teller; /* its approvals told on its stream (asked for), or NULL */
};

void sbx_unix_run_approvals_changed(UnixRun *run, SbxApprovals *approvals)
{
    if (run->teller != NULL) {
        sbx_unix_approval_tell(run->teller, approvals);
    }
}

GPid sbx_unix_run_pid(UnixRun *run)
{
    SbxVm *vm = sbx_exec_vm(sbx_server_job_exec(run->job));

    return vm != NULL ? sbx_vm_qemu_pid(vm) : 0;
}

/* The tools' warnings (an MCP schema left unchecked, ...) go before the summary, on stderr. */
static char *with_warnings(SbxExec *exec, const char *summary)
{
    GString *out = g_string_new(NULL);
    SbxTools *tools = sbx_exec_tools(exec);

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
static void send_done(UnixRun *run, SbxExec *exec)
{
    g_autofree char *serve_ms = g_strdup_printf(",\"serve_ms\":%" G_GINT64_FORMAT,
                                                (g_get_monotonic_time() - run->t_received) / 1000);
    g_autofree char *report = sbx_exec_report_json(exec, serve_ms);
    g_autofree char *outcome = sbx_exec_summary(exec);
    g_autofree char *summary = with_warnings(exec, outcome);
    SbxServeMsg m = {
        .type = SBX_SERVE_MSG_DONE,
        .exit_code = sbx_exec_exit_code(exec),
        .summary = summary,
        .report_json = report,
    };

    sbx_unix_conn_send_msg(run->conn, &m);
}

/* The execution is over and every tool process reaped: the done frame goes out at once. */
static void on_done(gpointer data, SbxExec *exec)
{
    UnixRun *run = data;

    if (sbx_exec_record_error(exec) != NULL) {
        fprintf(stderr, "sandbox serve: warning: the record of execution %s: %s\n",
                sbx_exec_id(exec), sbx_exec_record_error(exec));
    }
    send_done(run, exec);
    sbx_unix_conn_run_over(run->conn); /* the connection forgets the run: it is freed here */
    sbx_unix_approval_teller_free(run->teller);
    g_free(run);
}

static void on_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    UnixRun *run = data;

    while (len > 0) {
        gsize n = MIN(len, SBX_UNIX_OUTPUT_CHUNK);
        SbxServeMsg m = {
            .type = SBX_SERVE_MSG_OUTPUT,
            .stream = stream,
            .data = (guint8 *)bytes,
            .data_len = n,
        };
        g_autofree char *json = sbx_serve_proto_msg_encode(&m);
        if (!sbx_unix_conn_send(run->conn, json, strlen(json))) {
            return; /* the connection is being dropped: it abandons this run */
        }
        bytes += n;
        len -= n;
    }
}

/*
 * The session @req->session into @sreq: its VM and profile, and an execution id (the session
 * names its current execution). FALSE after answering why not (unknown, busy, ended).
 */
static gboolean in_session(UnixConn *conn, const SbxServeRun *req, SbxServerRequest *sreq,
                           char **ret_id)
{
    SbxServerSession *s = sbx_unix_session_find(conn, req->session);
    g_autoptr(GError) error = NULL;

    if (s == NULL) {
        return FALSE;
    }
    if (!sbx_server_session_can_run(s, &error)) {
        sbx_unix_conn_send_session_error(conn, error);
        return FALSE;
    }
    /* No getrandom(): an id only needs to be unique, not secret (as exec.c's own). */
    *ret_id = g_strdup_printf("x%08x%08x", g_random_int(), g_random_int());
    sreq->exec.id = *ret_id;
    sreq->session = s;
    sreq->profile = sbx_server_session_profile(s);
    return TRUE;
}

UnixRun *sbx_unix_run_start(UnixConn *conn, const SbxServeRun *req)
{
    static const SbxExecSink sink = {.output = on_output, .done = on_done};
    /* collected and streamed as it comes too */
    static const SbxExecSink live_sink = {.collected_output = on_output, .done = on_done};
    const SbxExecSink *chosen = req->collect && req->live ? &live_sink : &sink;
    SbxServer *srv = sbx_unix_conn_server(conn);
    g_autoptr(GError) error = NULL;
    g_autofree char *origin = sbx_unix_conn_origin(conn);
    g_autofree char *exec_id = NULL;
    SbxServerRequest sreq = {
        .exec =
            {
                .language = req->language,
                .code = req->code,
                .entry = req->entry,
                .args_json = req->args_json,
                .kwargs_json = req->kwargs_json,
                .timeout_ms = req->timeout_ms,
                .output_limit = req->output_limit,
                .collect_output = req->collect,
            },
        .front_end = "serve",
        .origin = origin,
    };

    if (req->session != NULL) {
        if (!in_session(conn, req, &sreq, &exec_id)) {
            return NULL;
        }
    } else if (req->profile_not_name ||
               !sbx_server_find_profile(srv, req->profile, &sreq.profile)) {
        sbx_unix_conn_send_error(conn, "unavailable", "this server does not pool that profile");
        return NULL;
    }
    UnixRun *run = g_new0(UnixRun, 1);
    run->conn = conn;
    run->t_received = g_get_monotonic_time();
    SbxTools *tools = sbx_tools_load(req->tools_path, &error);
    if (tools == NULL) {
        /* A run that fails at once: its done frame says why, as for any failure. */
        g_autofree char *msg = g_strdup_printf("tool catalog: %s", error->message);
        g_clear_error(&error);
        tools = sbx_tools_new(sbx_catalog_new_empty(), NULL);
        run->job = sbx_server_submit(srv, &sreq, tools, chosen, run, &error);
        if (run->job != NULL) {
            sbx_server_job_abort(run->job, SBX_STATUS_CRASH, msg);
            return NULL; /* done already: the run is gone */
        }
    } else {
        run->job = sbx_server_submit(srv, &sreq, tools, chosen, run, &error);
    }
    if (run->job == NULL) {
        sbx_unix_conn_send_error(conn, "unavailable", error->message);
        g_free(run);
        return NULL;
    }
    if (req->approvals) {
        /* its tools (the job's now) tag its approvals; none waits before the loop runs */
        run->teller = sbx_unix_approval_teller_new(conn, tools);
    }
    return run;
}

void sbx_unix_run_abandon(UnixRun *run, const char *why)
{
    sbx_server_job_detach(run->job); /* its done no longer comes here */
    sbx_server_job_abort(run->job, SBX_STATUS_TERMINATED, why);
    sbx_unix_approval_teller_free(run->teller);
    g_free(run);
}
