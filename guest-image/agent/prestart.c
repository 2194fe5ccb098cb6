/*
 * Pre-started runners: one runner per language, started when the agent starts (before it
 * listens), so that a snapshot of the VM holds runtimes that are up, with their modules loaded
 * and a warm-up run behind them. TypeScript has none of its own: its execute goes to the
 * JavaScript runner, which strips the types when the execute says "typescript". Each is pinged on
 * its channel; it answers pong once it is warm and then waits for its execute. An execute of that
 * language is handed to the waiting runner (exec.c) instead of spawning one. Each is used once and
 * not replaced: a VM serves one execution, and later ones of the same language are spawned as
 * before.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* The seq of our first ping ("are you warm?"): a fixed one makes a stray pong recognisable. */
#define PRESTART_PING_SEQ 1

/*
 * The seq of the ping at a hello with warm_up ("warm up again"): its pong says the warm-up is
 * over, and hello_ok waits for it (host.c). One that comes after the take is ignored (runner.c).
 */
#define PRESTART_REWARM_SEQ 2

/* Forget @p (the process, if any, is reaped by pid1.c like any other child). */
static void forget(Prestart *p)
{
    for (int s = 0; s < SBX_STREAM__COUNT; s++)
        p->pipes[s] = safe_close(p->pipes[s]);
    if (p->chan_open)
        link_close(&p->chan);
    p->chan_open = false;
    p->ready = false;
    p->rewarmed = false;
    p->rewarming = false;
    p->pid = 0;
}

/* A runner that broke the rules while waiting is of no use: kill it and forget it. */
static void drop(Prestart *p, const char *why)
{
    agent_log("pre-started %s runner: %s; it will be spawned on demand", p->name, why);
    if (p->pid > 0)
        kill(-p->pid, SIGKILL);
    forget(p);
}

static void start_one(Agent *a, SbxLanguage lang)
{
    Prestart *p = &a->pre[lang];
    SbxMsg ping = {.type = SBX_MSG_PING};
    int chan, r;

    p->name = sbx_language_name(lang);
    if (!spawn_available(&a->opt, lang))
        return;
    r = spawn_runner(&a->opt, lang, &p->pid, &chan, p->pipes);
    if (r < 0) {
        agent_log("cannot pre-start the %s runner: %s", p->name, strerror(-r));
        p->pid = 0;
        return;
    }
    link_init(&p->chan, chan, SBX_FRAME_MAX);
    p->chan_open = true;
    ping.ping.seq = PRESTART_PING_SEQ;
    if (link_send(&p->chan, &ping) < 0 || link_flush(&p->chan) < 0)
        drop(p, "cannot ping it");
}

void prestart_all(Agent *a)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        a->pre[l].pid = 0;
        a->pre[l].pipes[SBX_STREAM_STDOUT] = a->pre[l].pipes[SBX_STREAM_STDERR] = -1;
    }
    if (!a->opt.prestart)
        return;
    /* node first: it takes longest to start. */
    start_one(a, SBX_LANG_JAVASCRIPT);
    start_one(a, SBX_LANG_PYTHON);
}

/*
 * The agent's own paths of an execution, for TCG after a restore: decode an execute (with a
 * tool), encode started, output and done, as a real one would; everything is dropped. What
 * goes over the host channel (framing, the socket) is warm from hello and the pings.
 */
static void warm_codec(void)
{
    SbxToolDecl tool = {.provider = "warm", .name = "up"};
    uint8_t bytes[] = "warm\n";
    SbxMsg x = {.type = SBX_MSG_EXECUTE,
                .execute = {.id = "warmup", .code = "1", .tools = &tool, .n_tools = 1}};
    SbxMsg out = {.type = SBX_MSG_OUTPUT,
                  .output = {.id = "warmup", .data = bytes, .len = sizeof(bytes) - 1}};
    SbxMsg started = {.type = SBX_MSG_STARTED, .started = {.id = "warmup"}};
    SbxMsg done = {.type = SBX_MSG_DONE, .done = {.id = "warmup", .result_json = "1"}};
    const SbxMsg *msgs[] = {&x, &started, &out, &done};

    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        uint8_t *frame = NULL;
        size_t len = 0;
        SbxMsg back = {0};
        char *why = NULL;

        if (sbx_msg_encode(msgs[i], &frame, &len) < 0)
            continue;
        /* The payload after the 4-byte length, decoded as a message from the host would be. */
        if (sbx_msg_decode((const char *)frame + 4, len - 4, &back, &why) == 0)
            sbx_msg_clear(&back);
        free(why);
        free(frame);
    }
}

/*
 * After its warm-up the runner wrote to its real stdout and stderr (the pipes of its future
 * execution): read that as output_read() would, encode it as an output frame, and drop it.
 * None of it belongs to an execution.
 */
static void warm_drain(Prestart *p)
{
    uint8_t buf[SBX_OUTPUT_CHUNK_MAX];

    for (int s = 0; s < SBX_STREAM__COUNT; s++) {
        ssize_t n;

        /* A few bytes are expected; the bound keeps a runner gone wrong from holding us. */
        for (int r = 0; r < 16 && p->pipes[s] >= 0 && (n = read(p->pipes[s], buf, sizeof(buf))) > 0;
             r++) {
            SbxMsg m = {
                .type = SBX_MSG_OUTPUT,
                .output = {.id = "warmup", .stream = (SbxStream)s, .data = buf, .len = (size_t)n}};
            uint8_t *frame = NULL;
            size_t len = 0;

            if (sbx_msg_encode(&m, &frame, &len) == 0)
                free(frame);
        }
    }
}

void prestart_rewarm(Agent *a)
{
    SbxMsg ping = {.type = SBX_MSG_PING};

    ping.ping.seq = PRESTART_REWARM_SEQ;
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        Prestart *p = &a->pre[l];

        if (p->pid <= 0 || !p->ready || !p->chan_open || p->rewarmed)
            continue;
        p->rewarmed = true;
        p->rewarming = true;
        if (link_send(&p->chan, &ping) < 0 || link_flush(&p->chan) < 0)
            drop(p, "cannot ping it");
    }
    warm_codec();
}

bool prestart_all_ready(const Agent *a)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++)
        if (a->pre[l].pid > 0 && (!a->pre[l].ready || a->pre[l].rewarming))
            return false;
    return true;
}

size_t prestart_pids(const Agent *a, pid_t keep[SBX_LANG__COUNT])
{
    size_t n = 0;

    for (int l = 0; l < SBX_LANG__COUNT; l++)
        if (a->pre[l].pid > 0)
            keep[n++] = a->pre[l].pid;
    return n;
}

void prestart_on_events(Agent *a, SbxLanguage lang)
{
    Prestart *p = &a->pre[lang];

    /* It sends one pong per ping; anything more is read by the bounded loop and judged. */
    for (int n = 0; n < MESSAGES_PER_ROUND && p->chan_open && (!p->ready || p->rewarming); n++) {
        SbxMsg msg;
        char *why = NULL;
        int r = link_recv(&p->chan, &msg, &why);

        free(why);
        if (r == 0)
            return;
        if (r < 0) {
            drop(p, r == -EPIPE     ? "it closed its channel"
                    : r == -EBADMSG ? "bad frame on its channel"
                                    : "its channel failed");
            return;
        }
        if (msg.type == SBX_MSG_PONG && msg.ping.seq == PRESTART_PING_SEQ && !p->ready)
            p->ready = true;
        else if (msg.type == SBX_MSG_PONG && msg.ping.seq == PRESTART_REWARM_SEQ && p->rewarming) {
            p->rewarming = false;
            warm_drain(p); /* it wrote before its pong */
            agent_log("pre-started %s runner: warm again", p->name);
        } else
            drop(p, "unexpected message on its channel");
        sbx_msg_clear(&msg);
    }
}

void prestart_reaped(Agent *a, pid_t pid)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        if (a->pre[l].pid == pid && pid > 0) {
            agent_log("pre-started %s runner exited before use", a->pre[l].name);
            forget(&a->pre[l]);
        }
    }
}

/* Throw away what the runner wrote while it waited: it belongs to no execution. */
static void discard_pipe(int fd)
{
    char buf[4096];

    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}

bool prestart_take(Agent *a, SbxLanguage lang, pid_t *ret_pid, Link *ret_chan,
                   int ret_pipes[SBX_STREAM__COUNT])
{
    Prestart *p = &a->pre[spawn_runner_language(lang)];
    siginfo_t si = {0};

    if (p->pid <= 0 || !p->chan_open)
        return false;
    /* Still in the warm-up asked for at hello (the hello gave up waiting for it): it may yet
     * write warm-up output into what would be the execution's pipes. Not one to hand code to. */
    if (p->rewarming) {
        drop(p, "still warming up");
        return false;
    }
    /* Exited but not reaped yet (SIGCHLD not read): not a runner to hand code to. */
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid) {
        drop(p, "it has exited");
        return false;
    }
    for (int s = 0; s < SBX_STREAM__COUNT; s++) {
        discard_pipe(p->pipes[s]);
        ret_pipes[s] = p->pipes[s];
        p->pipes[s] = -1;
    }
    *ret_pid = p->pid;
    /* The Link moves by value: it owns a socket and heap buffers, no pointer into itself. */
    *ret_chan = p->chan;
    p->chan_open = false;
    p->ready = false;
    p->rewarming = false;
    p->pid = 0;
    return true;
}

void prestart_stop(Agent *a)
{
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        pid_t pid = a->pre[l].pid;

        if (pid <= 0)
            continue;
        kill(-pid, SIGKILL);
        forget(&a->pre[l]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}
