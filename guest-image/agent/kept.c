/*
 * A session's runners (docs/protocol.md, "Sessions"): after the done of an execute with `keep`
 * the runner is not killed but kept, one per language, with its process group and its state,
 * and the next execute of its language is handed to it. Between executes it is quiet: what it
 * writes to stdout/stderr is read and dropped, and anything on its channel (a runner speaks
 * only during an execute) ends it. One that dies between executes is remembered as lost, so
 * that the session's next keep execute is told instead of silently starting afresh.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/*
 * Reads of a pipe when a kept runner is handed over: what it wrote since its last done is
 * dropped. A process still writing could keep the pipe full forever; the rest of its output
 * then shows up in the execute that took it over, which is where it is written anyway.
 */
#define TAKE_DRAIN_READS 16

void kept_init(Agent *a)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        memset(&a->kept[l], 0, sizeof(a->kept[l]));
        a->kept[l].pipes[SBX_STREAM_STDOUT] = a->kept[l].pipes[SBX_STREAM_STDERR] = -1;
    }
}

static void forget(Kept *k)
{
    for (int s = 0; s < SBX_STREAM__COUNT; s++)
        k->pipes[s] = safe_close(k->pipes[s]);
    if (k->chan_open)
        link_close(&k->chan);
    k->chan_open = false;
    k->pid = 0;
}

/* It died or broke the rules: kill its group (reaped by pid1.c), its state is gone. */
static void lose(Kept *k, SbxLanguage lang, const char *why)
{
    agent_log("kept %s runner: %s; its session's state is gone", sbx_language_name(lang), why);
    if (k->pid > 0)
        kill(-k->pid, SIGKILL);
    forget(k);
    k->lost = true;
}

void kept_store(Agent *a, SbxLanguage lang, pid_t pid, Link *chan, int pipes[SBX_STREAM__COUNT])
{
    Kept *k = &a->kept[spawn_runner_language(lang)];

    forget(k); /* there is none: its execute took it */
    k->pid = pid;
    k->chan = *chan; /* moves by value, as in prestart_take */
    k->chan_open = true;
    for (int s = 0; s < SBX_STREAM__COUNT; s++) {
        k->pipes[s] = pipes[s];
        pipes[s] = -1;
    }
    k->lost = false;
}

/* Read what the channel holds: a message, its end or a bad frame all end the runner. */
static void read_chan(Kept *k, SbxLanguage lang)
{
    for (int n = 0; n < MESSAGES_PER_ROUND && k->chan_open; n++) {
        SbxMsg msg;
        char *why = NULL;
        int r = link_recv(&k->chan, &msg, &why);

        free(why);
        if (r == 0)
            return;
        if (r > 0) {
            sbx_msg_clear(&msg);
            lose(k, lang, "it sent a message between executes");
        } else {
            lose(k, lang, r == -EPIPE ? "it closed its channel" : "its channel failed");
        }
    }
}

void kept_on_chan(Agent *a, SbxLanguage lang)
{
    read_chan(&a->kept[lang], lang);
}

/* One read of the pipe, dropped; 0 at EOF (closed), -1 when empty. */
static int drop_read(Kept *k, SbxStream s)
{
    uint8_t buf[SBX_OUTPUT_CHUNK_MAX];
    ssize_t n = read(k->pipes[s], buf, sizeof(buf));

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return -1;
    if (n <= 0) {
        k->pipes[s] = safe_close(k->pipes[s]);
        return 0;
    }
    return 1;
}

void kept_on_pipe(Agent *a, SbxLanguage lang, SbxStream stream)
{
    /* One read per round, like an execution's output (output.c). */
    drop_read(&a->kept[lang], stream);
}

int kept_take(Agent *a, SbxLanguage lang, pid_t *ret_pid, Link *ret_chan,
              int ret_pipes[SBX_STREAM__COUNT])
{
    SbxLanguage rl = spawn_runner_language(lang);
    Kept *k = &a->kept[rl];
    siginfo_t si = {0};

    /* Exited but not reaped yet (SIGCHLD not read): lost all the same. */
    if (k->pid > 0 && waitid(P_PID, (id_t)k->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        si.si_pid)
        lose(k, rl, "it has exited");
    if (k->pid > 0)
        read_chan(k, rl);
    if (k->pid <= 0) {
        bool lost = k->lost;

        k->lost = false;
        return lost ? -ESRCH : 0;
    }
    for (int s = 0; s < SBX_STREAM__COUNT; s++) {
        for (int i = 0; i < TAKE_DRAIN_READS && k->pipes[s] >= 0; i++)
            if (drop_read(k, (SbxStream)s) <= 0)
                break;
        ret_pipes[s] = k->pipes[s];
        k->pipes[s] = -1;
    }
    *ret_pid = k->pid;
    *ret_chan = k->chan;
    k->chan_open = false;
    k->pid = 0;
    return 1;
}

size_t kept_pids(const Agent *a, pid_t keep[SBX_LANG__COUNT])
{
    size_t n = 0;

    for (int l = 0; l < SBX_LANG__COUNT; l++)
        if (a->kept[l].pid > 0)
            keep[n++] = a->kept[l].pid;
    return n;
}

void kept_exiting(Agent *a, pid_t pid)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++)
        if (pid > 0 && a->kept[l].pid == pid)
            lose(&a->kept[l], (SbxLanguage)l, "it exited");
}

void kept_stop_all(Agent *a)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        Kept *k = &a->kept[l];
        pid_t keep[SBX_LANG__COUNT], pid = k->pid;

        k->lost = false; /* a new connection starts no session where this one left off */
        if (pid <= 0)
            continue;
        forget(k);
        /* Its group and what left it (other kept runners go the same way, in turn); the
         * pre-started runners still waiting are spared. */
        spawn_kill_all(&a->opt, pid, keep, prestart_pids(a, keep));
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}
