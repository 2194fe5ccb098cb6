/*
 * A replay's run (replay.h, "Running"): the record's machine held by a lease (exec/lease.h),
 * and on it each execution of the chain in order, through the execution core, each compared
 * with its record as soon as it ended. An execution of a session is replayed after the ones
 * of its session before it, on one VM, as it ran: their runners' state is its input.
 */
#include <string.h>

#include "exec/lease.h"
#include "replay/replay.h"

struct SbxReplayRun {
    GPtrArray *chain; /* SbxReplay*, the target last */
    const SbxReplayMachine *machine;
    SbxReplayToolsFunc tools_for; /* NULL: the record answers */
    gpointer tools_data;
    SbxReplayRunDone done;
    gpointer done_data;
    SbxExecLease *lease;
    SbxExec *exec;     /* the execution running, or the last one */
    guint index;       /* of the chain's execution running */
    guint free_source; /* the previous execution's free, from the loop */
    guint done_source; /* the report of the end, from the loop */
    GPtrArray *diffs;  /* SbxReplayDiff*, of the first execution that differs */
    char *failure;     /* it could not run, or NULL */
    gboolean finished; /* done reported */
    gint64 started_us;
    gint64 duration_ms; /* start to the last execution's end */
};

static gboolean report_done(gpointer data)
{
    SbxReplayRun *run = data;

    run->done_source = 0;
    run->done(run, run->done_data);
    return G_SOURCE_REMOVE;
}

/* From the loop: the front end may free the run in its done, and an execution's sink callback
 * (where this may be called) must not free it (exec.h). */
static void finish(SbxReplayRun *run)
{
    run->finished = TRUE;
    run->duration_ms = (g_get_monotonic_time() - run->started_us) / 1000;
    sbx_exec_lease_close(run->lease); /* the VM dies now: nothing of the replay outlives it */
    run->done_source = g_idle_add(report_done, run);
}

static void fail(SbxReplayRun *run, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void fail(SbxReplayRun *run, const char *fmt, ...)
{
    va_list ap;

    if (run->finished) {
        return;
    }
    va_start(ap, fmt);
    run->failure = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    finish(run);
}

static void run_next(SbxReplayRun *run);

static gboolean next_later(gpointer data)
{
    SbxReplayRun *run = data;

    run->free_source = 0;
    g_clear_pointer(&run->exec, sbx_exec_free); /* its lease's channel back */
    run->index++;
    run_next(run);
    return G_SOURCE_REMOVE;
}

/* Which execution of the chain a difference is of: said when there is more than one. */
static void name_execution(SbxReplayRun *run, GPtrArray *diffs)
{
    const SbxRecord *rec = sbx_replay_record(g_ptr_array_index(run->chain, run->index));

    for (guint i = 0; i < diffs->len && run->chain->len > 1; i++) {
        SbxReplayDiff *d = g_ptr_array_index(diffs, i);
        char *where =
            g_strdup_printf("execution %u of its session (%s)%s%s", run->index + 1, rec->id,
                            d->where != NULL ? ", " : "", d->where != NULL ? d->where : "");
        g_free(d->where);
        d->where = where;
    }
}

static void on_exec_done(gpointer data, SbxExec *exec)
{
    SbxReplayRun *run = data;

    if (sbx_exec_result(exec) == NULL && sbx_exec_failure_status(exec) == SBX_STATUS_CRASH) {
        fail(run, "the replay could not run: %s", sbx_exec_failure(exec));
        return;
    }
    if (run->finished) {
        return; /* aborted */
    }
    run->diffs = sbx_replay_compare(g_ptr_array_index(run->chain, run->index), exec);
    name_execution(run, run->diffs);
    if (run->diffs->len > 0 || run->index + 1 == run->chain->len) {
        finish(run);
        return;
    }
    g_clear_pointer(&run->diffs, g_ptr_array_unref);
    /* never free an execution from its own sink's callback (exec.h) */
    run->free_source = g_idle_add(next_later, run);
}

static void run_next(SbxReplayRun *run)
{
    static const SbxExecSink sink = {.done = on_exec_done};
    SbxReplay *r = g_ptr_array_index(run->chain, run->index);
    g_autoptr(GError) error = NULL;
    SbxTools *tools = run->tools_for != NULL ? run->tools_for(r, run->tools_data, &error)
                                             : sbx_replay_tools(r, NULL, &error);
    SbxExecRequest req;

    if (tools == NULL) {
        fail(run, "%s", error->message);
        return;
    }
    sbx_replay_request(r, &req);
    req.keep = sbx_replay_record(r)->session_id != NULL; /* as a session's ran */
    run->exec = sbx_exec_new(&req, tools, sbx_exec_lease_lend(run->lease), &sink, run);
    sbx_exec_start(run->exec);
}

static void on_lease_ready(SbxExecLease *lease, const GError *error, gpointer data)
{
    SbxReplayRun *run = data;
    (void)lease;

    if (error != NULL) {
        fail(run, "the replay's VM did not start: %s", error->message);
        return;
    }
    run_next(run);
}

SbxReplayRun *sbx_replay_run_new(GPtrArray *chain, const SbxReplayMachine *machine,
                                 SbxReplayToolsFunc tools_for, gpointer tools_data)
{
    SbxReplayRun *run = g_new0(SbxReplayRun, 1);

    g_assert(chain->len > 0);
    run->chain = chain;
    run->machine = machine;
    run->tools_for = tools_for;
    run->tools_data = tools_data;
    return run;
}

void sbx_replay_run_start(SbxReplayRun *run, SbxReplayRunDone done, gpointer data)
{
    static const SbxExecLeaseCallbacks cb = {.ready = on_lease_ready};
    SbxVmOptions opts = {0};
    const SbxReplayMachine *m = run->machine;

    run->done = done;
    run->done_data = data;
    run->started_us = g_get_monotonic_time();
    run->lease =
        sbx_exec_lease_new(sbx_exec_source_new_vm(m->profile, m->image, m->snapshot, &opts));
    sbx_exec_lease_start(run->lease, &cb, run);
}

void sbx_replay_run_abort(SbxReplayRun *run, const char *why)
{
    if (run->exec != NULL && !sbx_exec_finished(run->exec)) {
        sbx_exec_abort(run->exec, SBX_STATUS_TERMINATED, why);
    }
    fail(run, "%s", why);
}

gboolean sbx_replay_run_finished(const SbxReplayRun *run)
{
    return run->finished;
}

const GPtrArray *sbx_replay_run_diffs(const SbxReplayRun *run)
{
    return run->diffs;
}

const char *sbx_replay_run_failure(const SbxReplayRun *run)
{
    return run->failure;
}

gint64 sbx_replay_run_duration_ms(const SbxReplayRun *run)
{
    return run->duration_ms;
}

const SbxReplay *sbx_replay_run_target(const SbxReplayRun *run)
{
    return g_ptr_array_index(run->chain, run->chain->len - 1);
}

void sbx_replay_run_free(SbxReplayRun *run)
{
    if (run == NULL) {
        return;
    }
    if (run->free_source != 0) {
        g_source_remove(run->free_source);
    }
    if (run->done_source != 0) {
        g_source_remove(run->done_source);
    }
    sbx_exec_free(run->exec); /* its VM killed and reaped, its tools' processes too */
    sbx_exec_lease_unref(run->lease);
    if (run->diffs != NULL) {
        g_ptr_array_unref(run->diffs);
    }
    g_ptr_array_unref(run->chain);
    g_free(run->failure);
    g_free(run);
}
