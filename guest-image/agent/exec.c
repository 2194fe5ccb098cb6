/*
 * An execution's lifecycle: start the runner, hand it the execute message, follow it until the
 * process has exited, its pipes are drained and its channel is read, then report done.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent.h"
#include "util.h"

static void exec_free(Exec *e)
{
    SbxMsg m = {.type = SBX_MSG_DONE};

    if (!e)
        return;
    for (int s = 0; s < SBX_STREAM__COUNT; s++)
        e->pipes[s] = safe_close(e->pipes[s]);
    if (e->chan_open)
        link_close(&e->chan);
    m.done = e->done; /* the runner's report, if any, is freed like a message */
    sbx_msg_clear(&m);
    free(e->failure.type);
    free(e->failure.message);
    free(e->failure.stack);
    free(e->id);
    free(e);
}

/* Report an execution that never started: a done without a started before it. */
static void refuse_as(Agent *a, const char *id, SbxStatus status, SbxErrorCode code,
                      const char *type, const char *why)
{
    SbxMsg m = {.type = SBX_MSG_DONE};

    m.done.id = (char *)id;
    m.done.status = status;
    m.done.has_error = true;
    m.done.error.code = code;
    m.done.error.type = (char *)type;
    m.done.error.message = (char *)why;
    m.done.exit_code = -1;
    conn_send(a, &m);
}

/* ... with status error and no type. */
static void refuse(Agent *a, const char *id, SbxErrorCode code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void refuse(Agent *a, const char *id, SbxErrorCode code, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    refuse_as(a, id, SBX_STATUS_ERROR, code, NULL, why);
}

static Exec *exec_new(const SbxExecute *x)
{
    Exec *e = calloc(1, sizeof(*e));

    if (!e || !(e->id = strdup(x->id))) {
        free(e);
        return NULL;
    }
    e->pipes[SBX_STREAM_STDOUT] = e->pipes[SBX_STREAM_STDERR] = -1;
    e->out_limit = x->output_limit ? x->output_limit : OUTPUT_LIMIT_DEFAULT;
    e->lang = spawn_runner_language(x->language);
    e->keep = x->keep;
    e->start_ms = now_ms();
    e->oom_kills_at_start = oom_kills();
    return e;
}

/*
 * A pooled VM's hello (entropy, clock) was sent when it entered the pool, maybe minutes ago:
 * the host sends both again with the execute. Applied before the runner gets the code (the
 * runners reseed from the kernel at the execute); then dropped from the message, so that the
 * runner, which also runs the user's code, never holds the host's entropy.
 */
static void refresh_identity(Agent *a, SbxExecute *x)
{
    int r;

    if (x->entropy && (r = entropy_add(x->entropy, x->entropy_len, a->pid1)) < 0 && a->pid1)
        agent_log("adding the host's entropy: %s", strerror(-r));
    if (x->time_us && a->pid1 && (r = clock_set_us(x->time_us)) < 0)
        agent_log("setting the clock: %s", strerror(-r));
    if (x->entropy)
        explicit_bzero(x->entropy, x->entropy_len);
    free(x->entropy);
    x->entropy = NULL;
    x->entropy_len = 0;
    x->time_us = 0;
}

void exec_start(Agent *a, SbxMsg *msg)
{
    const SbxExecute *x = &msg->execute;
    SbxMsg started = {.type = SBX_MSG_STARTED};
    const char *lang = sbx_language_name(x->language);
    int chan, r;
    Exec *e;

    if (a->exec) {
        conn_fail(a, SBX_ERR_PROTOCOL, "execute %s while %s is running", x->id, a->exec->id);
        return;
    }
    if (!spawn_available(&a->opt, x->language)) {
        refuse(a, x->id, SBX_ERR_VALIDATION, "%s is not available in this guest", lang);
        return;
    }
    e = exec_new(x);
    if (!e) {
        refuse(a, x->id, SBX_ERR_INTERNAL, "out of memory");
        return;
    }
    refresh_identity(a, &msg->execute);
    /* A session's runner kept for this language; if it died since, a session's execute must
     * not go on with a fresh one as if nothing happened (docs/protocol.md, "Sessions"). */
    r = kept_take(a, x->language, &e->pid, &e->chan, e->pipes);
    if (r == -ESRCH && x->keep) {
        char why[128];

        snprintf(why, sizeof(why),
                 "the session's %s runner exited between executions: its state is gone",
                 sbx_language_name(e->lang));
        refuse_as(a, x->id, SBX_STATUS_CRASH, SBX_ERR_RUNTIME, "RunnerLost", why);
        exec_free(e);
        return;
    }
    /* Else the runner pre-started for this language, warm and waiting, if there is one. */
    if (r <= 0 && !prestart_take(a, x->language, &e->pid, &e->chan, e->pipes)) {
        r = spawn_runner(&a->opt, x->language, &e->pid, &chan, e->pipes);
        if (r < 0) {
            refuse(a, x->id, SBX_ERR_INTERNAL, "cannot start the %s runner: %s", lang,
                   strerror(-r));
            exec_free(e);
            return;
        }
        link_init(&e->chan, chan, SBX_FRAME_MAX);
    }
    e->chan_open = true;
    a->exec = e;
    started.started.id = e->id;
    conn_send(a, &started);
    /* The runner learns what to run from the same message the host sent us. */
    runner_send(a, msg);
}

/*
 * Kill the group @pgid and what escaped it, sparing the runners still waiting for theirs and
 * the runners kept by a session (not their children: whatever left a group is fair game).
 */
static void kill_all(const Agent *a, pid_t pgid)
{
    pid_t keep[2 * SBX_LANG__COUNT];
    size_t n = prestart_pids(a, keep);

    n += kept_pids(a, keep + n);
    spawn_kill_all(&a->opt, pgid, keep, n);
}

void exec_cancel(Agent *a)
{
    Exec *e = a->exec;

    if (e->cancelled)
        return;
    e->cancelled = true;
    if (e->pid > 0)
        kill(-e->pid, SIGKILL);
}

void exec_fail(Agent *a, SbxErrorCode code, const char *fmt, ...)
{
    Exec *e = a->exec;
    char why[512];
    va_list ap;

    if (e->failed || e->cancelled)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    agent_log("execution %s failed: %s", e->id, why);
    e->failed = true;
    e->failure.code = code;
    e->failure.message = strdup(why); /* NULL when out of memory: done.c has a fallback */
    if (e->pid > 0)
        kill(-e->pid, SIGKILL);
    if (e->chan_open) {
        link_close(&e->chan);
        e->chan_open = false;
    }
}

void exec_abort(Agent *a)
{
    Exec *e = a->exec;

    if (!e)
        return;
    if (e->pid > 0) {
        /* SIGKILL cannot be caught: the wait is short and keeps no zombie behind. */
        kill_all(a, e->pid);
        while (waitpid(e->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    exec_free(e);
    a->exec = NULL;
}

void exec_runner_exiting(Agent *a, pid_t pid)
{
    /* The leader is still a zombie, so its pid names the group for sure: kill what it left
     * behind (background children) now, before the pid can be reused. */
    if ((a->exec && a->exec->pid == pid) || (a->early_pid > 0 && a->early_pid == pid))
        kill_all(a, pid);
    kept_exiting(a, pid);
    if (a->early_pid == pid)
        a->early_pid = 0;
}

void exec_runner_exited(Agent *a, pid_t pid, int wstatus)
{
    Exec *e = a->exec;

    if (!e || e->pid != pid)
        return;
    e->pid = 0;
    e->wstatus = wstatus;
    e->kill_deadline_ms = 0;
    e->drain_deadline_ms = now_ms() + DRAIN_GRACE_MS;
    runner_drain(a);
}

void exec_on_timer(Agent *a, int64_t now)
{
    Exec *e = a->exec;

    if (e->kill_deadline_ms && now >= e->kill_deadline_ms) {
        e->kill_deadline_ms = 0;
        if (e->pid > 0) {
            agent_log("runner of %s did not exit after done: killing it", e->id);
            kill(-e->pid, SIGKILL);
        }
    }
    if (e->drain_deadline_ms && now >= e->drain_deadline_ms) {
        if (!conn_wants_output(a)) {
            /* We are the ones not reading (back-pressure): that is no reason to give up. */
            e->drain_deadline_ms = now + DRAIN_GRACE_MS;
            return;
        }
        agent_log("output of %s still open after the runner exited: closing it", e->id);
        for (int s = 0; s < SBX_STREAM__COUNT; s++)
            e->pipes[s] = safe_close(e->pipes[s]);
        e->drain_deadline_ms = 0;
    }
}

static void send_done(Agent *a)
{
    Exec *e = a->exec;
    SbxMsg done;
    DoneText text;
    int r;

    done_build(e, now_ms(), &done, &text);
    r = conn_send(a, &done);
    if (r == -EMSGSIZE && done.done.clock_log) {
        /* The result and the clock log together do not fit: the result matters more, and
         * the execution is said to be not replayable instead of silently losing its log. */
        done.done.clock_log = NULL;
        done.done.n_clock_log = 0;
        done.done.has_replayable = true;
        done.done.replayable = false;
        done.done.not_replayable =
            (char *)"the clock log did not fit in the done message beside the result";
        r = conn_send(a, &done);
    }
    if (r == -EMSGSIZE || r == -EINVAL) {
        /* The runner's result fitted its frame but not ours (our fields are longer). */
        done.done.status = SBX_STATUS_ERROR;
        done.done.result_json = NULL;
        done.done.has_error = true;
        done.done.error = (SbxError){
            .code = SBX_ERR_SERIALIZATION,
            .message = (char *)"the result is too large to send (a message is at most 4 MiB)",
        };
        conn_send(a, &done);
    }
}

/*
 * The runner reported its done and is about to exit. It flushed its output before, so all of
 * it is in the pipes now: read it, send done, then kill the group and what escaped it. Not
 * waiting for the exit saves the runtime's teardown (~30-90 ms under TCG) and the sweep's time
 * on every execution; the exit code is the one the runner said (0 after ok, 1 after an error).
 * Output that a leftover process writes after the runner's done is not reported.
 */
static void finish_early(Agent *a)
{
    Exec *e = a->exec;
    pid_t pgid = e->pid;

    for (int s = 0; s < SBX_STREAM__COUNT; s++)
        for (int i = 0; i < EARLY_DRAIN_READS && e->pipes[s] >= 0; i++)
            if (output_read(a, (SbxStream)s) <= 0)
                break;
    e->early = true;
    /* A session's: the runner stays, with its group, its pipes and its channel (kept.c). */
    if (e->keep && e->chan_open && !e->chan_mute) {
        e->kept = true;
        send_done(a);
        kept_store(a, e->lang, pgid, &e->chan, e->pipes);
        e->chan_open = false;
        exec_free(e);
        a->exec = NULL;
        return;
    }
    for (int s = 0; s < SBX_STREAM__COUNT; s++)
        e->pipes[s] = safe_close(e->pipes[s]);
    if (e->chan_open) {
        link_close(&e->chan);
        e->chan_open = false;
    }
    send_done(a);
    /* The runner stays our child until reaped (pid1.c): no zombie is kept. Its own children
     * are not ours until it is dead, so the sweep runs again then (exec_runner_exiting). */
    kill_all(a, pgid);
    a->early_pid = pgid;
    exec_free(e);
    a->exec = NULL;
}

void exec_maybe_finish(Agent *a)
{
    Exec *e = a->exec;

    if (e->pid > 0 && e->have_done && !e->failed && !e->cancelled) {
        finish_early(a);
        return;
    }
    if (e->pid > 0 || e->chan_open)
        return;
    for (int s = 0; s < SBX_STREAM__COUNT; s++)
        if (e->pipes[s] >= 0)
            return;
    send_done(a);
    exec_free(e);
    a->exec = NULL;
}
