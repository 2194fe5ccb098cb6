/*
 * The final report of an execution. The runner says how the program ended (status, result,
 * error) when it could; the agent adds what only it knows (exit code, duration, truncation)
 * and overrides the runner when it knows better (cancelled, a runner that broke the protocol,
 * a process that died without a report).
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "agent.h"
#include "util.h"

/* "SIGSEGV" for 11; "signal 99" for a number without a name. */
static void signal_name(int sig, char *buf, size_t size)
{
    const char *abbrev = sigabbrev_np(sig);

    if (abbrev)
        snprintf(buf, size, "SIG%s", abbrev);
    else
        snprintf(buf, size, "signal %d", sig);
}

/* The process ended without a report of its own: judge by how it ended. */
static void from_wait_status(const Exec *e, SbxDone *d, DoneText *text)
{
    if (WIFEXITED(e->wstatus) && WEXITSTATUS(e->wstatus) == 0) {
        d->status = SBX_STATUS_OK;
        return;
    }
    d->has_error = true;
    d->error.code = SBX_ERR_RUNTIME;
    if (WIFEXITED(e->wstatus)) {
        d->status = SBX_STATUS_ERROR;
        snprintf(text->message, sizeof(text->message), "process exited with status %d",
                 WEXITSTATUS(e->wstatus));
        d->error.message = text->message;
        return;
    }
    /* SIGKILLed while the kernel killed for memory: the program ran out of it. */
    if (WTERMSIG(e->wstatus) == SIGKILL && e->oom_kills_at_start >= 0 &&
        oom_kills() > e->oom_kills_at_start) {
        d->status = SBX_STATUS_MEMORY_LIMIT;
        d->error.code = SBX_ERR_MEMORY_LIMIT;
        d->error.type = (char *)"SIGKILL";
        d->error.message =
            (char *)"the program ran out of memory (the guest's OOM killer ended it)";
        return;
    }
    /* The type carries the signal name ("SIGSEGV"), the message says it in words. */
    d->status = SBX_STATUS_CRASH;
    signal_name(WTERMSIG(e->wstatus), text->type, sizeof(text->type));
    d->error.type = text->type;
    snprintf(text->message, sizeof(text->message), "process killed by %s", text->type);
    d->error.message = text->message;
}

void done_build(const Exec *e, int64_t now, SbxMsg *out, DoneText *text)
{
    SbxDone *d = &out->done;

    memset(out, 0, sizeof(*out));
    out->type = SBX_MSG_DONE;
    d->id = e->id;
    /* Reported on the runner's done, before its exit: the status it said it exits with. */
    d->exit_code = e->early                ? e->done.exit_code
                   : WIFEXITED(e->wstatus) ? WEXITSTATUS(e->wstatus)
                                           : -1;
    d->duration_ms = (uint64_t)(now - e->start_ms);
    d->output_truncated = e->truncated;
    d->kept = e->kept;
    if (e->cancelled) {
        d->status = SBX_STATUS_CANCELLED;
    } else if (e->failed) {
        d->status = SBX_STATUS_ERROR;
        d->has_error = true;
        d->error = e->failure;
        if (!d->error.message)
            d->error.message = (char *)"internal error (out of memory)";
    } else if (e->have_done) {
        d->status = e->done.status;
        d->result_json = e->done.result_json;
        d->has_error = e->done.has_error;
        d->error = e->done.error;
        /* What a replay needs comes from the runner only: a done the agent makes up has none
         * (absent is not replayable, docs/protocol.md "Replay"). */
        d->clock_log = e->done.clock_log;
        d->n_clock_log = e->done.n_clock_log;
        d->has_replayable = e->done.has_replayable;
        d->replayable = e->done.replayable;
        d->not_replayable = e->done.not_replayable;
    } else {
        from_wait_status(e, d, text);
    }
}
