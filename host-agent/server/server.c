/*
 * The server behind `sandbox serve` (server.h): the pooled profiles and their pools, and the
 * jobs, queued per tenant and started in turn as slots free up.
 */
#include "server/server.h"

#include <string.h>

#include "pool-vm.h"
#include "prestart.h"
#include "server/sessions.h"

/*
 * The pool's refill after a claim waits this long (unless a claim waits): a restore (QEMU's
 * start, the RAM copy, the guest's warm-up) right away would take a core from the execution
 * just claimed; 300 ms covers a short one (console.log(1) is ~100-150 ms under TCG).
 */
#define SERVER_REFILL_DELAY_MS 300

/* The queue key of the local clients (a tenant id is never empty). */
#define LOCAL_QUEUE ""

/* One pooled profile: its image, snapshot, factory of VMs and pool. */
typedef struct {
    SbxProfile *profile;
    SbxImage *image; /* the profile's (sbx_image_open_for): profiles may run different images */
    SbxSnapshot *snapshot;
    SbxPoolVmFactory *factory;
    SbxPool *pool;
    guint pool_size;
    guint prestart;
    guint running; /* jobs of this profile started and not finished */
} ServerProfile;

struct SbxServer {
    ServerProfile profiles[SBX_SERVER_PROFILES_MAX];
    SbxStore *store; /* every job's record, or NULL */
    guint n_profiles;
    SbxApprovals *approvals;
    SbxServerSessions *sessions;
    GList *jobs;        /* every job until it is freed */
    GHashTable *queues; /* tenant key -> GQueue of queued jobs */
    GQueue turns;       /* tenant keys with queued jobs, in the order they get a slot */
    guint queued;       /* jobs in the queues */
    guint running;      /* jobs started and not done */
    gboolean stopping;
    void (*drained)(gpointer data);
    gpointer drained_data;
};

struct SbxServerJob {
    SbxServer *srv;
    SbxServerSession *session; /* a reference, or NULL */
    char *queue;               /* tenant key */
    guint profile;
    SbxExec *exec;
    const SbxExecSink *sink; /* NULL once detached */
    gpointer sink_data;
    gboolean queued;
    gboolean running;
    gboolean done;
    gint64 submitted;
    guint free_source;
};

/* ---- profiles ----------------------------------------------------------------------------- */

/* @cfg's profile, image and snapshot into the next ServerProfile. */
static gboolean load_profile(SbxServer *srv, const SbxServerConfig *config,
                             const SbxServerProfileConfig *cfg, GError **error)
{
    SbxSnapshotOptions so = {.on_make = config->on_make_snapshot, .user_data = config->data};
    ServerProfile *sp = &srv->profiles[srv->n_profiles];

    sp->pool_size = cfg->pool_size;
    sp->prestart = cfg->prestart;
    sp->profile = sbx_profile_load_named(NULL, cfg->name, error);
    if (sp->profile == NULL) {
        return FALSE;
    }
    srv->n_profiles++; /* freed by sbx_server_free() from now on */
    sp->image = sbx_image_open_for(sp->profile, error);
    if (sp->image == NULL) {
        return FALSE;
    }
    sp->snapshot = sbx_snapshot_ensure(sp->profile, sp->image, &so, error);
    return sp->snapshot != NULL;
}

/* @sp's factory (with its pre-started QEMUs) and pool; its first starts come from the loop. */
static void start_pool(ServerProfile *sp, gboolean warm_up)
{
    SbxPoolConfig cfg = {.size = sp->pool_size, .refill_delay_ms = SERVER_REFILL_DELAY_MS};

    sp->factory = sbx_pool_vm_factory_new(sp->profile, sp->image, sp->snapshot);
    sbx_pool_vm_factory_set_warm_up(sp->factory, warm_up);
    sbx_pool_vm_factory_set_prestart(sp->factory, sp->prestart);
    /* The factory reports to the pool. */
    sp->pool = sbx_pool_new(&sbx_pool_vm_ops, sp->factory, &cfg);
    sbx_pool_vm_factory_set_pool(sp->factory, sp->pool);
}

SbxServer *sbx_server_new(const SbxServerConfig *config, GError **error)
{
    g_autoptr(GError) local = NULL;
    SbxServer *srv = g_new0(SbxServer, 1);

    g_assert(config->n_profiles >= 1 && config->n_profiles <= SBX_SERVER_PROFILES_MAX);
    srv->approvals = sbx_approvals_new();
    srv->store = config->store;
    srv->sessions = sbx_server_sessions_new(srv, config->max_sessions);
    srv->queues =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_queue_free);
    g_queue_init(&srv->turns);
    for (guint i = 0; i < config->n_profiles; i++) {
        if (!load_profile(srv, config, &config->profiles[i], &local)) {
            g_propagate_error(error, g_steal_pointer(&local));
            sbx_server_free(srv);
            return NULL;
        }
    }
    for (guint i = 0; i < srv->n_profiles; i++) {
        start_pool(&srv->profiles[i], !config->no_warm_up);
    }
    return srv;
}

SbxApprovals *sbx_server_approvals(SbxServer *srv)
{
    return srv->approvals;
}

gboolean sbx_server_find_profile(SbxServer *srv, const char *name, guint *ret_index)
{
    for (guint i = 0; i < srv->n_profiles; i++) {
        if (name == NULL || strcmp(name, sbx_profile_name(srv->profiles[i].profile)) == 0) {
            *ret_index = i;
            return TRUE;
        }
    }
    return FALSE;
}

guint sbx_server_n_profiles(SbxServer *srv)
{
    return srv->n_profiles;
}

const char *sbx_server_profile_name(SbxServer *srv, guint i)
{
    g_assert(i < srv->n_profiles);
    return sbx_profile_name(srv->profiles[i].profile);
}

void sbx_server_profile_state(SbxServer *srv, guint i, SbxServerProfileState *out)
{
    ServerProfile *sp = &srv->profiles[i];

    g_assert(i < srv->n_profiles && sp->pool != NULL);
    memset(out, 0, sizeof(*out));
    out->pool_size = sp->pool_size;
    out->prestart = sp->prestart;
    out->running = sp->running;
    sbx_pool_stats(sp->pool, &out->pool);
    out->ready_pids = g_array_new(FALSE, FALSE, sizeof(GPid));
    out->running_pids = g_array_new(FALSE, FALSE, sizeof(GPid));
    out->prestarted_pids = sbx_pool_vm_factory_prestart_pids(sp->factory);
    out->session_pids = g_array_new(FALSE, FALSE, sizeof(GPid));
    out->sessions = sbx_server_sessions_of_profile(srv, i, out->session_pids);
    g_autoptr(GPtrArray) vms = sbx_pool_ready_vms(sp->pool);
    for (guint k = 0; k < vms->len; k++) {
        GPid pid = sbx_pool_vm_ops.pid(vms->pdata[k], sp->factory);
        g_array_append_val(out->ready_pids, pid);
    }
    for (GList *l = srv->jobs; l != NULL; l = l->next) {
        SbxServerJob *job = l->data;
        SbxVm *vm = job->running && job->profile == i ? sbx_exec_vm(job->exec) : NULL;
        GPid pid = vm != NULL ? sbx_vm_qemu_pid(vm) : 0;
        if (pid != 0) {
            g_array_append_val(out->running_pids, pid);
        }
    }
}

void sbx_server_profile_state_clear(SbxServerProfileState *st)
{
    g_clear_pointer(&st->ready_pids, g_array_unref);
    g_clear_pointer(&st->running_pids, g_array_unref);
    g_clear_pointer(&st->prestarted_pids, g_array_unref);
    g_clear_pointer(&st->session_pids, g_array_unref);
}

/* ---- jobs --------------------------------------------------------------------------------- */

static void maybe_drained(SbxServer *srv)
{
    if (srv->stopping && srv->jobs == NULL && srv->drained != NULL) {
        void (*drained)(gpointer) = srv->drained;
        srv->drained = NULL;
        drained(srv->drained_data);
    }
}

static void job_free(SbxServerJob *job)
{
    g_clear_handle_id(&job->free_source, g_source_remove);
    sbx_exec_free(job->exec); /* its VM killed (a session's: given back), its tools reaped */
    sbx_server_session_unref(job->session);
    g_free(job->queue);
    g_free(job);
}

static gboolean free_idle(gpointer data)
{
    SbxServerJob *job = data;
    SbxServer *srv = job->srv;

    job->free_source = 0;
    srv->jobs = g_list_remove(srv->jobs, job);
    job_free(job); /* not from inside the exec's callback, hence the idle */
    maybe_drained(srv);
    return G_SOURCE_REMOVE;
}

static void start_waiting(SbxServer *srv);

static void job_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    SbxServerJob *job = data;

    if (job->sink != NULL && job->sink->output != NULL) {
        job->sink->output(job->sink_data, stream, bytes, len);
    }
}

static void job_collected_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    SbxServerJob *job = data;

    if (job->sink != NULL && job->sink->collected_output != NULL) {
        job->sink->collected_output(job->sink_data, stream, bytes, len);
    }
}

static void job_started(gpointer data)
{
    SbxServerJob *job = data;

    if (job->sink != NULL && job->sink->started != NULL) {
        job->sink->started(job->sink_data);
    }
}

static void job_tool_call(gpointer data, guint32 call_id, const char *provider, const char *tool,
                          const char *input_json)
{
    SbxServerJob *job = data;

    if (job->sink != NULL && job->sink->tool_call != NULL) {
        job->sink->tool_call(job->sink_data, call_id, provider, tool, input_json);
    }
}

static void job_tool_result(gpointer data, guint32 call_id, gboolean ok, guint64 duration_ms)
{
    SbxServerJob *job = data;

    if (job->sink != NULL && job->sink->tool_result != NULL) {
        job->sink->tool_result(job->sink_data, call_id, ok, duration_ms);
    }
}

static void job_warnings(gpointer data, const char *const *warnings)
{
    SbxServerJob *job = data;

    if (job->sink != NULL && job->sink->warnings != NULL) {
        job->sink->warnings(job->sink_data, warnings);
    }
}

static void job_done(gpointer data, SbxExec *exec)
{
    SbxServerJob *job = data;
    SbxServer *srv = job->srv;

    job->done = TRUE;
    if (job->running) {
        job->running = FALSE;
        srv->running--;
        srv->profiles[job->profile].running--;
    }
    if (job->session != NULL) {
        sbx_server_session_job_done(job->session, exec); /* before the front end reads it */
    }
    if (job->sink != NULL) {
        job->sink->done(job->sink_data, exec); /* the front end drops the job here */
    }
    /* Low priority: the front end's answer (an HTTP response libsoup writes from the loop)
     * goes out before the exec's free waits for its VM's and tools' ends. */
    job->free_source = g_idle_add_full(G_PRIORITY_LOW, free_idle, job, NULL);
    start_waiting(srv);
}

static const SbxExecSink job_sink = {
    .started = job_started,
    .output = job_output,
    .collected_output = job_collected_output,
    .tool_call = job_tool_call,
    .tool_result = job_tool_result,
    .warnings = job_warnings,
    .done = job_done,
};

/* Take @job out of its tenant's queue. */
static void unqueue(SbxServer *srv, SbxServerJob *job)
{
    GQueue *q = g_hash_table_lookup(srv->queues, job->queue);

    g_queue_remove(q, job);
    job->queued = FALSE;
    srv->queued--;
    if (g_queue_is_empty(q)) {
        GList *turn = g_queue_find_custom(&srv->turns, job->queue, (GCompareFunc)strcmp);
        g_free(turn->data);
        g_queue_delete_link(&srv->turns, turn);
        g_hash_table_remove(srv->queues, job->queue);
    }
}

/* Free slots go to the queues in turn: the first job of the queue whose turn it is. */
static void start_waiting(SbxServer *srv)
{
    while (!srv->stopping && srv->running < SBX_SERVER_RUNNING_MAX &&
           !g_queue_is_empty(&srv->turns)) {
        char *key = g_queue_pop_head(&srv->turns);
        GQueue *q = g_hash_table_lookup(srv->queues, key);
        SbxServerJob *job = g_queue_peek_head(q);

        g_queue_push_tail(&srv->turns, key); /* its next turn, after every other queue's */
        unqueue(srv, job);
        job->running = TRUE;
        srv->running++;
        srv->profiles[job->profile].running++;
        sbx_exec_start(job->exec);
    }
}

SbxServerJob *sbx_server_submit(SbxServer *srv, const SbxServerRequest *req, SbxTools *tools,
                                const SbxExecSink *sink, gpointer sink_data, GError **error)
{
    g_autoptr(SbxTools) owned = tools;

    g_assert(req->profile < srv->n_profiles);
    if (srv->stopping) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED,
                            "the server is shutting down");
        return NULL;
    }
    if (srv->queued >= SBX_SERVER_QUEUED_MAX) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BUSY,
                    "the server has %u executions waiting: try again later", srv->queued);
        return NULL;
    }
    SbxServerJob *job = g_new0(SbxServerJob, 1);
    job->srv = srv;
    job->queue = g_strdup(req->tenant_id != NULL ? req->tenant_id : LOCAL_QUEUE);
    job->profile = req->profile;
    job->sink = sink;
    job->sink_data = sink_data;
    job->submitted = g_get_monotonic_time();
    sbx_tools_set_approvals(owned, srv->approvals, req->origin);
    SbxExecRequest ereq = req->exec;
    SbxExecSource *src;
    if (req->session != NULL) {
        g_assert(ereq.id != NULL); /* the session's current execution */
        job->session = sbx_server_session_ref(req->session);
        src = sbx_server_session_lend(req->session, ereq.id);
        ereq.keep = TRUE;
    } else {
        /* The source now: the report's claim_ms counts from the request's arrival. */
        src = sbx_exec_source_new_pool(srv->profiles[req->profile].pool);
    }
    job->exec = sbx_exec_new(&ereq, g_steal_pointer(&owned), src, &job_sink, job);
    if (srv->store != NULL) {
        ServerProfile *sp = &srv->profiles[req->profile];
        SbxExecRecordInfo info = {
            .tenant_id = req->tenant_id,
            .front_end = req->front_end,
            .profile = sbx_profile_name(sp->profile),
            .snapshot_key = sbx_snapshot_inputs(sp->snapshot)->key,
            .image_id = sp->image->hash,
            .catalog = req->catalog,
            .created_at_ms = req->created_at_ms,
        };
        info.session_id = req->session != NULL ? sbx_server_session_id(req->session) : NULL;
        if (req->session != NULL && sbx_server_session_files_changed(req->session)) {
            info.not_replayable = "files of its session were put or deleted before it (a record "
                                  "keeps no file contents)";
        }
        sbx_exec_set_record(job->exec, srv->store, &info);
    }
    srv->jobs = g_list_prepend(srv->jobs, job);
    GQueue *q = g_hash_table_lookup(srv->queues, job->queue);
    if (q == NULL) {
        q = g_queue_new();
        g_hash_table_insert(srv->queues, g_strdup(job->queue), q);
        g_queue_push_tail(&srv->turns, g_strdup(job->queue));
    }
    g_queue_push_tail(q, job);
    job->queued = TRUE;
    srv->queued++;
    start_waiting(srv);
    return job;
}

void sbx_server_job_abort(SbxServerJob *job, SbxStatus status, const char *why)
{
    if (job->done) {
        return;
    }
    if (job->queued) {
        unqueue(job->srv, job);
    }
    sbx_exec_abort(job->exec, status, why); /* queued: never started, done at once */
}

void sbx_server_job_detach(SbxServerJob *job)
{
    job->sink = NULL;
}

SbxExec *sbx_server_job_exec(SbxServerJob *job)
{
    return job->exec;
}

gboolean sbx_server_job_queued(SbxServerJob *job)
{
    return job->queued;
}

gint64 sbx_server_job_submitted(SbxServerJob *job)
{
    return job->submitted;
}

guint sbx_server_tenant_jobs(SbxServer *srv, const char *tenant_id)
{
    const char *key = tenant_id != NULL ? tenant_id : LOCAL_QUEUE;
    guint n = 0;

    for (GList *l = srv->jobs; l != NULL; l = l->next) {
        SbxServerJob *job = l->data;
        n += !job->done && strcmp(job->queue, key) == 0;
    }
    return n;
}

/* ---- shutdown ----------------------------------------------------------------------------- */

void sbx_server_shutdown(SbxServer *srv, void (*drained)(gpointer data), gpointer data)
{
    srv->stopping = TRUE;
    srv->drained = drained;
    srv->drained_data = data;
    for (guint i = 0; i < srv->n_profiles; i++) {
        ServerProfile *sp = &srv->profiles[i];
        g_clear_pointer(&sp->pool, sbx_pool_free);        /* fails queued claims: jobs end */
        sbx_pool_vm_factory_set_prestart(sp->factory, 0); /* kills the pre-started QEMUs */
    }
    g_autoptr(GList) jobs = g_list_copy(srv->jobs);
    for (GList *l = jobs; l != NULL; l = l->next) {
        sbx_server_job_abort(l->data, SBX_STATUS_TERMINATED, "the server is shutting down");
    }
    sbx_server_sessions_shutdown(srv->sessions); /* their VMs killed, their records ended */
    maybe_drained(srv);
}

gboolean sbx_server_stopping(SbxServer *srv)
{
    return srv->stopping;
}

const SbxProfile *sbx_server_profile(SbxServer *srv, guint i)
{
    g_assert(i < srv->n_profiles);
    return srv->profiles[i].profile;
}

SbxPool *sbx_server_profile_pool(SbxServer *srv, guint i)
{
    g_assert(i < srv->n_profiles);
    return srv->profiles[i].pool;
}

SbxServerSessions *sbx_server_sessions(SbxServer *srv)
{
    return srv->sessions;
}

SbxStore *sbx_server_store(SbxServer *srv)
{
    return srv->store;
}

void sbx_server_free(SbxServer *srv)
{
    if (srv == NULL) {
        return;
    }
    for (guint i = 0; i < srv->n_profiles; i++) {
        g_clear_pointer(&srv->profiles[i].pool, sbx_pool_free);
    }
    /* Jobs that did not end in time: their VMs are killed now, their sinks hear nothing. */
    for (GList *l = srv->jobs; l != NULL; l = l->next) {
        SbxServerJob *job = l->data;
        job->sink = NULL;
    }
    g_list_free_full(g_steal_pointer(&srv->jobs), (GDestroyNotify)job_free);
    sbx_server_sessions_free(srv->sessions); /* after the jobs that borrowed their VMs */
    g_queue_clear_full(&srv->turns, g_free);
    g_hash_table_destroy(srv->queues);
    sbx_approvals_free(srv->approvals); /* after the jobs: nothing calls back any more */
    for (guint i = 0; i < srv->n_profiles; i++) {
        ServerProfile *sp = &srv->profiles[i];
        sbx_pool_vm_factory_free(sp->factory);
        sbx_snapshot_free(sp->snapshot);
        sbx_image_free(sp->image);
        sbx_profile_free(sp->profile);
    }
    g_free(srv);
}
