/*
 * Sessions (sessions.h): their table, their VM's lease, their timers and their ends.
 */
#include "server/sessions.h"

#include <string.h>

#include "exec/lease.h"
#include "profile.h"
#include "server/session-clock.h"
#include "store/sessions.h"

/* The queue key of the local clients, as in server.c (a tenant id is never empty). */
#define LOCAL_KEY ""

struct SbxServerSessions {
    SbxServer *srv;
    guint max;
    GHashTable *by_id; /* id -> SbxServerSession* (the table's reference), open or ended */
    GQueue ended;      /* ended sessions still in the table, oldest first */
};

typedef struct {
    SbxServerSessionChannelFunc func;
    void (*abort)(gpointer data);
    gpointer data;
} ChannelWaiter;

struct SbxServerSession {
    gint refs;
    SbxServerSessions *all; /* NULL once the server is gone */
    char id[SBX_ID_MAX + 1];
    char *tenant_key;
    char *front_end;
    guint profile;
    char *profile_name;
    guint64 memory_mib;
    SbxServerSessionState state;
    SbxExecLease *lease;
    SbxSessionClock clock; /* its idle timeout and lifetime, created_ms, last_active_ms */
    gint64 ended_ms;
    guint executions;
    char *current_execution; /* the job's execution id, while one runs */
    gboolean running;        /* a job submitted and not done */
    gboolean file_op;        /* a file operation asked for the channel and is not done */
    gboolean files_changed;  /* a file was put or deleted from outside: replays cannot redo it */
    ChannelWaiter *waiter;   /* that operation, until it has the channel */
    void (*channel_abort)(gpointer data); /* and once it has it: how to stop it */
    gpointer channel_abort_data;
    SbxServerSessionReadyFunc ready;
    gpointer ready_data;
    char *end_status;
    char *end_reason;
};

G_DEFINE_QUARK(sbx - server - session - error - quark, sbx_server_session_error)

static gint64 now_ms(void)
{
    return g_get_real_time() / 1000;
}

static void new_id(char out[SBX_ID_MAX + 1])
{
    GString *id = g_string_new("se_");

    for (int i = 0; i < 12; i++) {
        g_string_append_printf(id, "%02x", (guint)g_random_int_range(0, 256));
    }
    g_strlcpy(out, id->str, SBX_ID_MAX + 1);
    g_string_free(id, TRUE);
}

/* ---- timers --------------------------------------------------------------------------------- */

static void on_expired(gpointer data, const char *why)
{
    sbx_server_session_end(data, "expired", why);
}

/* The session is idle from now (when ready): its idle timeout runs again. */
static void now_idle(SbxServerSession *s)
{
    sbx_session_clock_used(&s->clock, s->state == SBX_SERVER_SESSION_READY);
}

static void set_busy(SbxServerSession *s)
{
    s->state = SBX_SERVER_SESSION_BUSY;
    sbx_session_clock_busy(&s->clock); /* no idle time while it works */
}

/* Nothing runs any more: ready again, its next waiter served first. */
static void settle(SbxServerSession *s);

/* ---- the lease ------------------------------------------------------------------------------ */

static void on_ready(SbxExecLease *lease, const GError *error, gpointer data)
{
    SbxServerSession *s = data;
    SbxServerSessionReadyFunc ready = g_steal_pointer(&s->ready);
    g_autoptr(GError) e = NULL;
    (void)lease;

    sbx_server_session_ref(s); /* the ready function may drop the caller's reference */
    if (error != NULL) {
        e = g_error_new(SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_START,
                        "the session's VM could not be started: %s", error->message);
        sbx_server_session_end(s, "crashed", e->message);
    } else {
        s->state = SBX_SERVER_SESSION_READY;
        now_idle(s);
    }
    if (ready != NULL) {
        ready(s, e, s->ready_data);
    }
    sbx_server_session_unref(s);
}

static void on_lost(SbxExecLease *lease, const char *reason, gpointer data)
{
    SbxServerSession *s = data;
    (void)lease;

    if (!s->running) {
        /* an execution's end says more: sbx_server_session_job_done() ends it then */
        sbx_server_session_end(s, "crashed", reason);
    }
}

static void on_returned(SbxExecLease *lease, gpointer data)
{
    (void)lease;
    settle(data);
}

static const SbxExecLeaseCallbacks lease_callbacks = {
    .ready = on_ready,
    .lost = on_lost,
    .returned = on_returned,
};

/* Give the waiting file operation the channel, or tell it the session ended. */
static void serve_waiter(SbxServerSession *s)
{
    ChannelWaiter *w = g_steal_pointer(&s->waiter);
    g_autoptr(GError) e = NULL;
    SbxSession *channel = NULL;

    if (s->state == SBX_SERVER_SESSION_ENDED) {
        e = g_error_new(SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_ENDED,
                        "the session has ended: %s", s->end_reason != NULL ? s->end_reason : "");
    } else {
        channel = sbx_exec_lease_session(s->lease);
        s->channel_abort = w->abort;
        s->channel_abort_data = w->data;
    }
    w->func(s, channel, e, w->data);
    g_free(w);
}

static void settle(SbxServerSession *s)
{
    if (s->state == SBX_SERVER_SESSION_ENDED || s->state == SBX_SERVER_SESSION_STARTING ||
        s->running || !sbx_exec_lease_usable(s->lease)) {
        return;
    }
    if (s->waiter != NULL) {
        sbx_server_session_ref(s);
        serve_waiter(s);
        sbx_server_session_unref(s);
        return;
    }
    if (!s->file_op) {
        s->state = SBX_SERVER_SESSION_READY;
        now_idle(s);
    }
}

static gboolean settle_later(gpointer data)
{
    settle(data);
    sbx_server_session_unref(data);
    return G_SOURCE_REMOVE;
}

/* ---- the API -------------------------------------------------------------------------------- */

/* The session's record (docs/service.md, "Records"): begun before its VM is claimed, so a
 * server killed with it open leaves it to be marked interrupted at the next start. */
static gboolean record_begin(SbxServer *srv, SbxServerSession *s, GError **error)
{
    SbxStore *store = sbx_server_store(srv);
    g_autoptr(GError) e = NULL;
    SbxSessionRecord r = {
        .id = s->id,
        .tenant_id = (char *)sbx_server_session_tenant(s),
        .profile = s->profile_name,
        .memory_mib = s->memory_mib,
        .created_at_ms = s->clock.created_ms,
        .idle_timeout_ms = (gint64)s->clock.idle_timeout_s * 1000,
        .max_lifetime_ms = (gint64)s->clock.max_lifetime_s * 1000,
    };

    if (store == NULL || sbx_session_records_begin(store, &r, &e)) {
        return TRUE;
    }
    g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_FULL,
                "the session cannot be recorded: %s", e->message);
    return FALSE;
}

/* Its end in the record; a store that fails is logged (the session ends regardless). */
static void record_end(SbxServerSession *s)
{
    SbxStore *store = s->all != NULL ? sbx_server_store(s->all->srv) : NULL;
    g_autoptr(GError) e = NULL;

    if (store != NULL &&
        !sbx_session_records_end(store, s->id, s->end_status, s->end_reason, s->ended_ms, &e)) {
        g_warning("session %s: its end could not be recorded: %s", s->id, e->message);
    }
}

static gboolean check_room(SbxServer *srv, const SbxServerSessionRequest *req, guint64 memory_mib,
                           GError **error)
{
    SbxServerSessions *all = sbx_server_sessions(srv);
    guint64 used_mib = 0;
    guint open = sbx_server_sessions_open(srv, req->tenant_id, &used_mib);
    guint total = 0;

    if (req->max_sessions != 0 && open >= req->max_sessions) {
        g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_QUOTA,
                    "the tenant has %u sessions open, its quota", open);
        return FALSE;
    }
    if (req->max_memory_mib != 0 && used_mib + memory_mib > req->max_memory_mib) {
        g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_QUOTA,
                    "the tenant's sessions hold %" G_GUINT64_FORMAT
                    " MiB; one more of %" G_GUINT64_FORMAT
                    " MiB is past its quota of %" G_GUINT64_FORMAT " MiB",
                    used_mib, memory_mib, req->max_memory_mib);
        return FALSE;
    }
    /* counted over every tenant, the local clients included */
    GHashTableIter it;
    gpointer v;
    g_hash_table_iter_init(&it, all->by_id);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        total += ((SbxServerSession *)v)->state != SBX_SERVER_SESSION_ENDED;
    }
    if (total >= all->max) {
        g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_FULL,
                    "the server holds %u sessions, as many as it may: try again later", total);
        return FALSE;
    }
    return TRUE;
}

SbxServerSession *sbx_server_session_new(SbxServer *srv, const SbxServerSessionRequest *req,
                                         SbxServerSessionReadyFunc ready, gpointer data,
                                         GError **error)
{
    SbxServerSessions *all = sbx_server_sessions(srv);
    const SbxProfile *profile = sbx_server_profile(srv, req->profile);
    guint64 memory_mib = sbx_profile_memory_mib(profile);

    if (sbx_server_stopping(srv)) {
        g_set_error_literal(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_FULL,
                            "the server is shutting down");
        return NULL;
    }
    if (!check_room(srv, req, memory_mib, error)) {
        return NULL;
    }
    SbxServerSession *s = g_new0(SbxServerSession, 1);
    s->refs = 2; /* the table's and the caller's */
    s->all = all;
    new_id(s->id);
    s->tenant_key = g_strdup(req->tenant_id != NULL ? req->tenant_id : LOCAL_KEY);
    s->front_end = g_strdup(req->front_end);
    s->profile = req->profile;
    s->profile_name = g_strdup(sbx_profile_name(profile));
    s->memory_mib = memory_mib;
    s->state = SBX_SERVER_SESSION_STARTING;
    /* its lifetime runs from now: stopped again if it cannot be recorded */
    sbx_session_clock_start(&s->clock, req->idle_timeout_s, req->max_lifetime_s, on_expired, s);
    s->ready = ready;
    s->ready_data = data;
    if (!record_begin(srv, s, error)) {
        s->refs = 1;
        sbx_server_session_unref(s);
        return NULL;
    }
    g_hash_table_insert(all->by_id, s->id, s);
    s->lease =
        sbx_exec_lease_new(sbx_exec_source_new_pool(sbx_server_profile_pool(srv, s->profile)));
    sbx_exec_lease_start(s->lease, &lease_callbacks, s);
    return s;
}

static gboolean tenant_is(const SbxServerSession *s, const char *tenant_id)
{
    return strcmp(s->tenant_key, tenant_id != NULL ? tenant_id : LOCAL_KEY) == 0;
}

SbxServerSession *sbx_server_session_find(SbxServer *srv, const char *tenant_id, const char *id)
{
    SbxServerSession *s =
        id != NULL ? g_hash_table_lookup(sbx_server_sessions(srv)->by_id, id) : NULL;

    return s != NULL && tenant_is(s, tenant_id) ? s : NULL;
}

static gint newest_first(gconstpointer a, gconstpointer b)
{
    const SbxServerSession *x = *(SbxServerSession *const *)a, *y = *(SbxServerSession *const *)b;

    return x->clock.created_ms != y->clock.created_ms
               ? (x->clock.created_ms > y->clock.created_ms ? -1 : 1)
               : -strcmp(x->id, y->id);
}

GPtrArray *sbx_server_sessions_list(SbxServer *srv, const char *tenant_id)
{
    GPtrArray *out = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_server_session_unref);
    GHashTableIter it;
    gpointer v;

    g_hash_table_iter_init(&it, sbx_server_sessions(srv)->by_id);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        if (tenant_is(v, tenant_id)) {
            g_ptr_array_add(out, sbx_server_session_ref(v));
        }
    }
    g_ptr_array_sort(out, newest_first);
    return out;
}

guint sbx_server_sessions_open(SbxServer *srv, const char *tenant_id, guint64 *ret_memory_mib)
{
    GHashTableIter it;
    gpointer v;
    guint n = 0;
    guint64 mib = 0;

    g_hash_table_iter_init(&it, sbx_server_sessions(srv)->by_id);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        SbxServerSession *s = v;
        if (s->state != SBX_SERVER_SESSION_ENDED && tenant_is(s, tenant_id)) {
            n++;
            mib += s->memory_mib;
        }
    }
    if (ret_memory_mib != NULL) {
        *ret_memory_mib = mib;
    }
    return n;
}

/* Keep at most SBX_SERVER_SESSIONS_ENDED_KEPT ended sessions in the table. */
static void trim_ended(SbxServerSessions *all)
{
    while (g_queue_get_length(&all->ended) > SBX_SERVER_SESSIONS_ENDED_KEPT) {
        SbxServerSession *old = g_queue_pop_head(&all->ended);
        g_hash_table_remove(all->by_id, old->id);
        old->all = NULL;
        sbx_server_session_unref(old);
    }
}

void sbx_server_session_end(SbxServerSession *s, const char *status, const char *reason)
{
    if (s->state == SBX_SERVER_SESSION_ENDED) {
        return;
    }
    sbx_server_session_ref(s);
    s->state = SBX_SERVER_SESSION_ENDED;
    s->ended_ms = now_ms();
    s->end_status = g_strdup(status);
    s->end_reason = g_strdup(reason);
    record_end(s);
    sbx_session_clock_stop(&s->clock);
    if (s->channel_abort != NULL) {
        void (*abort)(gpointer) = g_steal_pointer(&s->channel_abort);
        abort(s->channel_abort_data); /* a file operation leaves the channel before its free */
    }
    sbx_exec_lease_close(s->lease); /* kills the VM: a job on it ends on the VM's exit */
    if (s->waiter != NULL) {
        serve_waiter(s); /* a file operation waiting for the channel hears of the end */
    }
    SbxServerSessionReadyFunc ready = g_steal_pointer(&s->ready);
    if (ready != NULL) {
        g_autoptr(GError) e = g_error_new(SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_ENDED,
                                          "the session ended before it started: %s", reason);
        ready(s, e, s->ready_data);
    }
    if (s->all != NULL) {
        g_queue_push_tail(&s->all->ended, s);
        trim_ended(s->all);
    }
    sbx_server_session_unref(s);
}

gboolean sbx_server_session_can_run(SbxServerSession *s, GError **error)
{
    switch (s->state) {
    case SBX_SERVER_SESSION_ENDED:
        g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_ENDED,
                    "the session has ended (%s): %s", s->end_status, s->end_reason);
        return FALSE;
    case SBX_SERVER_SESSION_STARTING:
        g_set_error_literal(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_BUSY,
                            "the session is starting");
        return FALSE;
    default:
        break;
    }
    if (s->running || s->file_op) {
        g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_BUSY,
                    "the session is busy (%s): one execution or file operation at a time",
                    s->running ? "an execution runs" : "a file operation runs");
        return FALSE;
    }
    return TRUE;
}

SbxExecSource *sbx_server_session_lend(SbxServerSession *s, const char *exec_id)
{
    g_assert(s->state != SBX_SERVER_SESSION_ENDED && s->state != SBX_SERVER_SESSION_STARTING &&
             !s->running);
    s->running = TRUE;
    s->executions++;
    g_free(s->current_execution);
    s->current_execution = g_strdup(exec_id);
    set_busy(s);
    return sbx_exec_lease_lend(s->lease);
}

/* Why the session cannot go on after @exec, whose guest did not keep the runner's state. */
static char *why_not_kept(SbxExec *exec, const SbxRunResult *r)
{
    if (r->status == SBX_STATUS_OK || r->status == SBX_STATUS_ERROR) {
        return g_strdup_printf("its execution %s ended the runtime (exit code %d): the "
                               "session's state is gone",
                               sbx_exec_id(exec), r->exit_code);
    }
    return g_strdup_printf("its execution %s ended with %s%s%s: the session's state is gone",
                           sbx_exec_id(exec), sbx_status_name(r->status), r->has_error ? ": " : "",
                           r->has_error ? r->error.message : "");
}

void sbx_server_session_job_done(SbxServerSession *s, SbxExec *exec)
{
    const SbxRunResult *r = sbx_exec_result(exec);
    g_autofree char *why = NULL;

    s->running = FALSE;
    g_clear_pointer(&s->current_execution, g_free);
    if (s->state == SBX_SERVER_SESSION_ENDED) {
        return;
    }
    if (r != NULL && !r->kept) {
        why = why_not_kept(exec, r);
    }
    /* else: kept, or no execute reached the guest (cancelled while queued, tools that did not
     * start): the state is as it was, unless the VM is gone */
    if (why == NULL && sbx_exec_lease_lost(s->lease)) {
        why = g_strdup_printf("its VM was lost under execution %s%s%s", sbx_exec_id(exec),
                              r == NULL ? ": " : "", r == NULL ? sbx_exec_failure(exec) : "");
    }
    if (why != NULL) {
        sbx_server_session_end(s, "crashed", why);
        return;
    }
    /* Ready at once: the answer of the execution may already be out, and what comes next is
     * taken (a next execution's lend waits for the VM's return, as a file operation's settle
     * does), so the status must not say busy with nothing running. */
    s->state = SBX_SERVER_SESSION_READY;
    now_idle(s);
    settle(s); /* a waiter is served once the job gave the VM back (the lease's returned) */
}

gboolean sbx_server_session_with_channel(SbxServerSession *s, SbxServerSessionChannelFunc func,
                                         GCallback abort, gpointer data, GError **error)
{
    if (!sbx_server_session_can_run(s, error)) {
        return FALSE;
    }
    s->waiter = g_new0(ChannelWaiter, 1);
    s->waiter->func = func;
    s->waiter->abort = (void (*)(gpointer))abort;
    s->waiter->data = data;
    s->file_op = TRUE; /* a second request is refused (busy) until it is done */
    set_busy(s);
    /* from the loop, never from inside the caller; or when the last execution gives it back */
    g_idle_add(settle_later, sbx_server_session_ref(s));
    return TRUE;
}

void sbx_server_session_channel_done(SbxServerSession *s, gboolean broken, const char *why)
{
    s->file_op = FALSE;
    s->channel_abort = NULL;
    if (s->state == SBX_SERVER_SESSION_ENDED) {
        return;
    }
    if (broken) {
        sbx_server_session_end(s, "crashed", why);
        return;
    }
    settle(s);
}

void sbx_server_session_mark_files_changed(SbxServerSession *s)
{
    s->files_changed = TRUE;
}

gboolean sbx_server_session_files_changed(const SbxServerSession *s)
{
    return s->files_changed;
}

const char *sbx_server_session_id(const SbxServerSession *s)
{
    return s->id;
}

const char *sbx_server_session_tenant(const SbxServerSession *s)
{
    return s->tenant_key[0] != '\0' ? s->tenant_key : NULL;
}

SbxServerSessionState sbx_server_session_state(const SbxServerSession *s)
{
    return s->state;
}

const char *sbx_server_session_state_name(const SbxServerSession *s)
{
    static const char *const names[] = {
        [SBX_SERVER_SESSION_STARTING] = "starting",
        [SBX_SERVER_SESSION_READY] = "ready",
        [SBX_SERVER_SESSION_BUSY] = "busy",
        [SBX_SERVER_SESSION_ENDED] = "ended",
    };
    return names[s->state];
}

guint sbx_server_session_profile(const SbxServerSession *s)
{
    return s->profile;
}

void sbx_server_session_info(const SbxServerSession *s, SbxServerSessionInfo *out)
{
    *out = (SbxServerSessionInfo){
        .id = s->id,
        .state = sbx_server_session_state_name(s),
        .profile = s->profile_name,
        .created_ms = s->clock.created_ms,
        .last_active_ms = s->clock.last_active_ms,
        .expires_ms =
            s->state == SBX_SERVER_SESSION_ENDED
                ? 0
                : sbx_session_clock_expires_ms(&s->clock, s->state == SBX_SERVER_SESSION_READY),
        .ended_ms = s->ended_ms,
        .idle_timeout_s = s->clock.idle_timeout_s,
        .max_lifetime_s = s->clock.max_lifetime_s,
        .executions = s->executions,
        .memory_mib = s->memory_mib,
        .end_status = s->end_status,
        .end_reason = s->end_reason,
        .current_execution = s->current_execution,
    };
}

guint sbx_server_sessions_of_profile(SbxServer *srv, guint profile, GArray *pids)
{
    GHashTableIter it;
    gpointer v;
    guint n = 0;

    g_hash_table_iter_init(&it, sbx_server_sessions(srv)->by_id);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        SbxServerSession *s = v;
        GPid pid = sbx_server_session_qemu_pid(s);
        if (s->state == SBX_SERVER_SESSION_ENDED || s->profile != profile) {
            continue;
        }
        n++;
        if (pid != 0) {
            g_array_append_val(pids, pid);
        }
    }
    return n;
}

GPid sbx_server_session_qemu_pid(SbxServerSession *s)
{
    SbxVm *vm = s->state != SBX_SERVER_SESSION_ENDED ? sbx_exec_lease_vm(s->lease) : NULL;

    return vm != NULL ? sbx_vm_qemu_pid(vm) : 0;
}

SbxServerSession *sbx_server_session_ref(SbxServerSession *s)
{
    s->refs++;
    return s;
}

void sbx_server_session_unref(SbxServerSession *s)
{
    if (s == NULL || --s->refs > 0) {
        return;
    }
    g_assert(s->waiter == NULL);
    sbx_session_clock_stop(&s->clock);
    sbx_exec_lease_unref(s->lease);
    g_free(s->tenant_key);
    g_free(s->front_end);
    g_free(s->profile_name);
    g_free(s->current_execution);
    g_free(s->end_status);
    g_free(s->end_reason);
    g_free(s);
}

/* ---- the table ------------------------------------------------------------------------------ */

SbxServerSessions *sbx_server_sessions_new(SbxServer *srv, guint max_sessions)
{
    SbxServerSessions *all = g_new0(SbxServerSessions, 1);

    all->srv = srv;
    all->max = max_sessions != 0 ? max_sessions : SBX_SERVER_SESSIONS_MAX;
    all->by_id = g_hash_table_new(g_str_hash, g_str_equal);
    g_queue_init(&all->ended);
    return all;
}

void sbx_server_sessions_shutdown(SbxServerSessions *all)
{
    g_autoptr(GPtrArray) open =
        g_ptr_array_new_with_free_func((GDestroyNotify)sbx_server_session_unref);
    GHashTableIter it;
    gpointer v;

    g_hash_table_iter_init(&it, all->by_id);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        g_ptr_array_add(open, sbx_server_session_ref(v));
    }
    for (guint i = 0; i < open->len; i++) {
        sbx_server_session_end(open->pdata[i], "interrupted", "the server is shutting down");
    }
}

void sbx_server_sessions_free(SbxServerSessions *all)
{
    GHashTableIter it;
    gpointer v;

    if (all == NULL) {
        return;
    }
    sbx_server_sessions_shutdown(all);
    g_hash_table_iter_init(&it, all->by_id);
    while (g_hash_table_iter_next(&it, NULL, &v)) {
        SbxServerSession *s = v;
        s->all = NULL;
        sbx_server_session_unref(s);
    }
    g_hash_table_destroy(all->by_id);
    g_queue_clear(&all->ended);
    g_free(all);
}
