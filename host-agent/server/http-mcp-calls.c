/*
 * What the calls of `/mcp` do (http-mcp-private.h): each `execute` runs as an execution of the
 * tenant (http-exec.c: its quotas, its record with front end "mcp"), its progress and output
 * going on the POST that carried it; the session tools on the server's sessions; and the
 * approvals its executions' tool calls wait for, asked of a client that takes elicitations.
 *
 * A tool call of such an execution that the policy holds for approval is asked of the client
 * when it declared elicitation (docs/mcp-server.md, "Approvals"): `elicitation/create` on the
 * stream of the call whose execution made it, the client's answer in a POST of its own decides
 * it (sbx_approvals_decide_by(), "the MCP client NAME"), whoever answers first wins (the API's
 * POST /v1/approvals/{id} works meanwhile), and a question whose approval stopped waiting is
 * withdrawn (notifications/cancelled).
 */
#include "server/http-mcp-private.h"

#include <string.h>

#include "exec/report.h"
#include "server/session-files.h"
#include "server/sessions.h"

/* ---- executions --------------------------------------------------------------------------- */

/* The messages of @job's call go to its POST now; the one they went to before. */
static McpPost *answer_begin(McpJob *job)
{
    McpSession *s = job->s;
    McpPost *was = s->current;

    g_clear_handle_id(&job->progress_timer, g_source_remove);
    if (job->exec != NULL) {
        sbx_http_exec_watch(job->exec, NULL, NULL);
    }
    s->jobs = g_list_remove(s->jobs, job);
    s->current = job->post;
    return was;
}

/* @job's call was answered: its POST ends with its last call; @job is freed. */
static void answer_end(McpJob *job, McpPost *was)
{
    McpPost *p = job->post;

    job->s->current = was;
    g_free(job);
    if (p != NULL && --p->calls == 0 && p->decided) {
        sbx_http_mcp_post_end(p);
    }
}

/*
 * Answer @job's call with @report_json (`sandbox run --json`'s object, or the API's object of
 * the execution: the members the answer shows are the same) and free @job.
 */
static void job_finish(McpJob *job, const char *report_json)
{
    McpPost *was = answer_begin(job);

    sbx_mcp_server_finish(job->s->server, job->call, report_json);
    answer_end(job, was);
}

/* A call refused before its execution started, reported as `sandbox run --json` would. */
static void job_fail(McpJob *job, const char *why, SbxStatus status)
{
    SbxReport rep = {.failure = why, .failure_status = status, .boot_ms = -1};
    g_autofree char *report = sbx_report_json(&rep);

    job_finish(job, report);
}

static void on_exec_done(gpointer data, const char *object_json)
{
    McpJob *job = data;

    job->exec = NULL; /* it is the API's, kept with its finished executions */
    job_finish(job, object_json);
}

/* Milliseconds since @job's call came: its progress (of its timeout, in ms too). */
static guint64 job_elapsed_ms(const McpJob *job)
{
    return (guint64)((g_get_monotonic_time() - job->started_us) / 1000);
}

static gboolean progress_tick(gpointer data)
{
    McpJob *job = data;
    McpSession *s = job->s;
    McpPost *was = s->current;
    guint64 ms = job_elapsed_ms(job);
    g_autofree char *message =
        g_strdup_printf("running for %" G_GUINT64_FORMAT " s", (ms + 500) / 1000);

    if (sbx_http_mcp_post_takes_progress(job->post)) {
        s->current = job->post;
        sbx_mcp_server_progress(s->server, job->call, ms, job->timeout_ms, message);
        s->current = was;
    }
    return G_SOURCE_CONTINUE;
}

/* The program's output as it comes, for a client that asked for progress. */
static void on_exec_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    McpJob *job = data;
    McpSession *s = job->s;
    McpPost *was = s->current;

    if (sbx_http_mcp_post_takes_progress(job->post)) {
        s->current = job->post;
        sbx_mcp_server_output(s->server, job->call, stream, bytes, len, job_elapsed_ms(job),
                              job->timeout_ms);
        s->current = was;
    }
}

static const SbxHttpExecWatch exec_watch = {.output = on_exec_output, .done = on_exec_done};

/* The execution of @a for the tenant of the POST being handled; NULL when refused (why). */
static HttpExec *start_exec(McpSession *s, const SbxMcpExecuteArgs *a, char **ret_why)
{
    const SbxTenant *t = s->tenant;
    g_autoptr(GError) error = NULL;
    guint retry_s;

    *ret_why = sbx_http_quota_refusal(s->front, t, &retry_s);
    if (*ret_why != NULL) {
        char *why = g_strdup_printf("%s: try again in %u s", *ret_why, retry_s);
        g_free(*ret_why);
        *ret_why = why;
        return NULL;
    }
    if (a->timeout_ms > t->quotas.max_timeout_ms) {
        *ret_why =
            g_strdup_printf("timeout_ms is over this tenant's limit of %" G_GUINT64_FORMAT " ms",
                            t->quotas.max_timeout_ms);
        return NULL;
    }
    SbxServerSession *session = NULL;
    if (a->session != NULL) {
        session = sbx_server_session_find(s->front->srv, t->id, a->session);
        if (session == NULL || !sbx_server_session_can_run(session, &error)) {
            *ret_why = g_strdup(session == NULL ? "no such session: it ended" : error->message);
            return NULL;
        }
    }
    SbxHttpCreate req = {
        .language = a->language,
        .code = a->code,
        .entry = a->entry,
        .args_json = a->args_json,
        .kwargs_json = a->kwargs_json,
        .catalog = s->catalog,
        .timeout_ms = a->timeout_ms,
        .output_limit = MIN((guint64)SBX_MCP_EXECUTE_OUTPUT_LIMIT, t->quotas.max_output_bytes),
    };
    HttpExec *e = sbx_http_exec_start(s->front, t, &req, session, "mcp", &error);
    if (e == NULL) {
        *ret_why = g_strdup(error->message);
    }
    return e;
}

/* A call of @s's POST being handled, in flight until answered. */
static McpJob *job_new(McpSession *s, SbxMcpCall *call)
{
    McpJob *job = g_new0(McpJob, 1);

    job->s = s;
    job->call = call;
    job->post = s->current;
    job->started_us = g_get_monotonic_time();
    s->jobs = g_list_prepend(s->jobs, job);
    if (job->post != NULL) {
        job->post->calls++;
    }
    sbx_mcp_call_set_data(call, job);
    return job;
}

static void mcp_execute(gpointer data, SbxMcpCall *call, const SbxMcpExecuteArgs *a)
{
    McpSession *s = data;
    McpJob *job = job_new(s, call);
    g_autofree char *why = NULL;

    job->timeout_ms = a->timeout_ms;
    job->exec = s->tenant != NULL ? start_exec(s, a, &why) : NULL;
    if (job->exec == NULL) {
        job_fail(job, why != NULL ? why : "the server is shutting down", SBX_STATUS_ERROR);
        return;
    }
    sbx_http_exec_watch(job->exec, &exec_watch, job);
    if (sbx_mcp_call_wants_progress(call)) {
        job->progress_timer = g_timeout_add(SBX_HTTP_MCP_PROGRESS_S * 1000, progress_tick, job);
    }
}

static void mcp_cancel(gpointer data, SbxMcpCall *call)
{
    McpJob *job = sbx_mcp_call_get_data(call);
    (void)data;

    if (job != NULL && job->exec != NULL) {
        sbx_http_exec_cancel(job->exec, "cancelled by the MCP client");
    }
}

/* ---- the session tools (mcp-server/sessions.h) on the server's sessions --------------------- */

static void session_finish(McpJob *job, const SbxMcpSessionOutcome *outcome)
{
    McpPost *was = answer_begin(job);

    sbx_mcp_server_finish_session(job->s->server, job->call, outcome);
    answer_end(job, was);
}

/* A session's error as the session tools report it (the codes of serve's socket). */
static void session_fail(McpJob *job, const GError *error)
{
    gboolean gone = error->domain == SBX_SERVER_SESSION_ERROR &&
                    (error->code == SBX_SERVER_SESSION_ERROR_NOT_FOUND ||
                     error->code == SBX_SERVER_SESSION_ERROR_ENDED);
    SbxMcpSessionOutcome o = {
        .error_code = sbx_server_session_error_code(error), .error = error->message, .gone = gone};

    session_finish(job, &o);
}

/*
 * A server callback came for @job: FALSE (and @job freed) when its MCP session ended meanwhile;
 * a session opened for it then is ended, as nobody holds its handle.
 */
static gboolean job_back(McpJob *job, SbxServerSession *opened)
{
    job->pending = FALSE;
    if (job->s != NULL) {
        return TRUE;
    }
    if (opened != NULL) {
        sbx_server_session_end(opened, "deleted", "its MCP session ended before it was ready");
    }
    g_free(job);
    return FALSE;
}

static void on_open_ready(SbxServerSession *session, const GError *error, gpointer data)
{
    McpJob *job = data;
    SbxServerSessionInfo info;

    if (!job_back(job, error == NULL ? session : NULL)) {
        return;
    }
    if (error != NULL) {
        session_fail(job, error);
        return;
    }
    sbx_server_session_info(session, &info);
    SbxMcpSessionOutcome o = {.session = sbx_server_session_id(session),
                              .idle_timeout_s = info.idle_timeout_s,
                              .max_lifetime_s = info.max_lifetime_s};
    session_finish(job, &o);
}

G_STATIC_ASSERT(SBX_MCP_SESSION_SECONDS_MAX == SBX_SERVER_SESSION_IDLE_MAX_S &&
                SBX_MCP_SESSION_SECONDS_MAX == SBX_SERVER_SESSION_LIFETIME_MAX_S);

static void mcp_session_open(gpointer data, SbxMcpCall *call, guint idle_timeout_s,
                             guint max_lifetime_s)
{
    McpSession *s = data;
    McpJob *job = job_new(s, call);
    g_autoptr(GError) error = NULL;
    SbxServerSessionRequest req = {
        .tenant_id = s->tenant->id,
        .front_end = "mcp",
        .idle_timeout_s = idle_timeout_s,
        .max_lifetime_s = max_lifetime_s,
        .max_sessions = s->tenant->quotas.max_sessions,
        .max_memory_mib = s->tenant->quotas.max_session_memory_mib,
    };

    job->pending = TRUE;
    g_autoptr(SbxServerSession) session =
        sbx_server_session_new(s->front->srv, &req, on_open_ready, job, &error);
    if (session == NULL) {
        job->pending = FALSE;
        session_fail(job, error);
    }
}

static void mcp_session_close(gpointer data, SbxMcpCall *call, const char *handle)
{
    McpSession *s = data;
    SbxServerSession *session = sbx_server_session_find(s->front->srv, s->tenant_id, handle);
    SbxMcpSessionOutcome done = {0};

    if (session != NULL) {
        sbx_server_session_end(session, "deleted", "closed by its MCP client");
    }
    session_finish(job_new(s, call), &done); /* ended or unknown already: not an error */
}

static void on_file_done(SbxServerSession *session, const SbxSessionFileResult *r,
                         const GError *error, gpointer data)
{
    McpJob *job = data;
    (void)session;

    if (!job_back(job, NULL)) {
        return;
    }
    if (error != NULL) {
        session_fail(job, error);
        return;
    }
    SbxMcpSessionOutcome o = {.size = r->size,
                              .sha256 = r->sha256,
                              .data = r->data != NULL ? g_bytes_get_data(r->data, NULL) : NULL};
    session_finish(job, &o);
}

/* A file of session @handle in or out (@bytes NULL: out). */
static void file_op(McpSession *s, SbxMcpCall *call, const char *handle, const char *path,
                    GBytes *bytes)
{
    McpJob *job = job_new(s, call);
    SbxServerSession *session = sbx_server_session_find(s->front->srv, s->tenant_id, handle);
    g_autoptr(GError) error = NULL;

    if (session == NULL) {
        g_set_error(&error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_NOT_FOUND,
                    "no such session: it ended");
        session_fail(job, error);
        return;
    }
    job->pending = TRUE;
    gboolean started =
        bytes != NULL ? sbx_server_session_put_file(session, path, bytes, on_file_done, job, &error)
                      : sbx_server_session_get_file(session, path, on_file_done, job, &error);
    if (!started) {
        job->pending = FALSE;
        session_fail(job, error);
    }
}

static void mcp_file_write(gpointer data, SbxMcpCall *call, const char *handle, const char *path,
                           const guint8 *bytes, gsize len)
{
    g_autoptr(GBytes) b = g_bytes_new(bytes, len);

    file_op(data, call, handle, path, b);
}

static void mcp_file_read(gpointer data, SbxMcpCall *call, const char *handle, const char *path)
{
    file_op(data, call, handle, path, NULL);
}

const SbxMcpServerOps sbx_http_mcp_ops = {
    .send = sbx_http_mcp_send,
    .execute = mcp_execute,
    .cancel = mcp_cancel,
    .session_open = mcp_session_open,
    .session_close = mcp_session_close,
    .file_write = mcp_file_write,
    .file_read = mcp_file_read,
};

/* ---- approvals through the client (elicitation) --------------------------------------------- */

static void ask_free(McpAsk *k)
{
    k->s->asks = g_list_remove(k->s->asks, k);
    g_free(k->approval_id);
    g_free(k);
}

/* The client's answer (or the end of the question): an answer decides the approval. */
static void on_asked(SbxMcpServer *server, SbxMcpElicitOutcome outcome, gpointer data)
{
    McpAsk *k = data;
    HttpFront *front = k->s->front;
    g_autofree char *id = g_strdup(k->approval_id);

    ask_free(k); /* first: the decision's notify comes back here */
    if (outcome == SBX_MCP_ELICIT_APPROVED || outcome == SBX_MCP_ELICIT_DENIED) {
        const char *name = sbx_mcp_server_client_name(server);
        g_autofree char *by = g_strdup_printf("the MCP client %s", name != NULL ? name : "");
        /* FALSE: answered elsewhere first, timed out, or its execution ended: nothing to do */
        sbx_approvals_decide_by(sbx_server_approvals(front->srv), id,
                                outcome == SBX_MCP_ELICIT_APPROVED, by);
    }
}

/* The core's messages go to @post now; the POST they went to before. */
static McpPost *route_to(McpSession *s, McpPost *post)
{
    McpPost *was = s->current;

    s->current = post;
    return was;
}

static gboolean is_pending(GPtrArray *pending, const char *id)
{
    for (guint i = 0; i < pending->len; i++) {
        if (strcmp(((const SbxApproval *)pending->pdata[i])->id, id) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

/* Withdraw @s's questions whose approvals stopped waiting. */
static void withdraw_gone(McpSession *s, GPtrArray *pending)
{
    GList *l = s->asks;

    while (l != NULL) {
        McpAsk *k = l->data;
        l = l->next; /* k is freed by its cancellation */
        if (!is_pending(pending, k->approval_id)) {
            McpPost *was = route_to(s, k->job->post);
            sbx_mcp_server_elicit_cancel(s->server, k->elicit_id);
            s->current = was;
        }
    }
}

/* The call of @s whose execution is @exec_id, or NULL. */
static McpJob *job_of_exec(McpSession *s, const char *exec_id)
{
    for (GList *l = s->jobs; l != NULL; l = l->next) {
        McpJob *job = l->data;
        if (job->exec != NULL && strcmp(sbx_http_exec_id(job->exec), exec_id) == 0) {
            return job;
        }
    }
    return NULL;
}

static gboolean asked(McpSession *s, const char *approval_id)
{
    for (GList *l = s->asks; l != NULL; l = l->next) {
        if (strcmp(((McpAsk *)l->data)->approval_id, approval_id) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

/* Ask @s's client about @a, made by @job's execution, on @job's stream (if it can hear it). */
static void ask_client(McpSession *s, McpJob *job, const SbxApproval *a)
{
    gint64 waited_ms = (g_get_monotonic_time() - a->since_us) / 1000;
    SbxMcpApprovalAsk q = {
        .provider = a->provider,
        .tool = a->tool,
        .input_json = a->input_json,
        .timeout_ms = (guint)MAX((gint64)a->timeout_ms - waited_ms, 1),
    };

    /* A client that reads only JSON sees the call's messages at its end: too late to ask. */
    if (job->post == NULL || !job->post->sse || job->post->ended || asked(s, a->id)) {
        return;
    }
    McpAsk *k = g_new0(McpAsk, 1);
    k->s = s;
    k->job = job;
    k->approval_id = g_strdup(a->id);
    s->asks = g_list_prepend(s->asks, k);
    McpPost *was = route_to(s, job->post);
    k->elicit_id = sbx_mcp_server_elicit_approval(s->server, job->call, &q, on_asked, k);
    s->current = was;
    if (k->elicit_id == 0) {
        ask_free(k); /* not asked (SBX_MCP_ELICITS_MAX): the API's approvals answer it */
    }
}

void sbx_http_mcp_approvals_changed(HttpFront *front)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(sbx_server_approvals(front->srv));
    GHashTableIter it;
    gpointer value;

    if (front->mcp_sessions == NULL) {
        return;
    }
    g_hash_table_iter_init(&it, front->mcp_sessions);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        withdraw_gone(value, pending);
    }
    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *a = pending->pdata[i];
        const char *exec_id = sbx_http_exec_of_origin(a->origin);
        g_hash_table_iter_init(&it, front->mcp_sessions);
        while (exec_id != NULL && g_hash_table_iter_next(&it, NULL, &value)) {
            McpSession *s = value;
            McpJob *job = sbx_mcp_server_can_elicit(s->server) ? job_of_exec(s, exec_id) : NULL;
            if (job != NULL) {
                ask_client(s, job, a);
                break;
            }
        }
    }
}

/* ---- an MCP session's end ----------------------------------------------------------------- */

void sbx_http_mcp_calls_withdraw(McpSession *s)
{
    /* Its questions first, while their calls are known; said to nobody (its streams end). */
    s->current = NULL;
    while (s->asks != NULL) {
        sbx_mcp_server_elicit_cancel(s->server, ((McpAsk *)s->asks->data)->elicit_id);
    }
}

void sbx_http_mcp_calls_end(McpSession *s)
{
    while (s->jobs != NULL) {
        McpJob *job = s->jobs->data;
        s->jobs = g_list_delete_link(s->jobs, s->jobs);
        g_clear_handle_id(&job->progress_timer, g_source_remove);
        if (job->exec != NULL) {
            sbx_http_exec_watch(job->exec, NULL, NULL);
            sbx_http_exec_cancel(job->exec, "its MCP session ended");
        }
        if (job->pending) {
            job->s = NULL; /* freed by the server's callback (job_back()) */
            job->post = NULL;
        } else {
            g_free(job);
        }
    }
    /* The sandbox sessions opened through it: nobody else has their handles. */
    g_auto(GStrv) handles = sbx_mcp_server_sessions(s->server);
    for (gsize i = 0; handles != NULL && handles[i] != NULL; i++) {
        SbxServerSession *session =
            sbx_server_session_find(s->front->srv, s->tenant_id, handles[i]);
        if (session != NULL) {
            sbx_server_session_end(session, "deleted", "its MCP session ended");
        }
    }
}
