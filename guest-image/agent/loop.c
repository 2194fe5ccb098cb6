/*
 * The poll() loop. One round: decide what to watch (back-pressure decides whether the pipes,
 * the runner channel and the host are read at all), wait, handle events, fire deadlines, then
 * settle: close what broke, finish an execution whose every part has ended.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "agent.h"
#include "util.h"

enum {
    SLOT_LISTEN,
    SLOT_SIGNAL,
    SLOT_HOST,
    SLOT_CHAN,
    SLOT_STDOUT,
    SLOT_STDERR,
    SLOT_PRE, /* one per language: the channels of pre-started runners until they are warm */
    SLOT_KEPT_CHAN = SLOT_PRE + SBX_LANG__COUNT,       /* one per language: kept runners (kept.c) */
    SLOT_KEPT_PIPE = SLOT_KEPT_CHAN + SBX_LANG__COUNT, /* their stdout, stderr */
    SLOT__COUNT = SLOT_KEPT_PIPE + SBX_LANG__COUNT * SBX_STREAM__COUNT
};

static void watch(struct pollfd *p, int fd, bool in, bool out)
{
    p->fd = (in || out) ? fd : -1;
    p->events = (short)((in ? POLLIN : 0) | (out ? POLLOUT : 0));
    p->revents = 0;
}

static void build(const Agent *a, struct pollfd *p)
{
    const Exec *e = a->exec;
    bool output = conn_wants_output(a);
    bool host = a->conn_state != CONN_NONE;

    for (int i = 0; i < SLOT__COUNT; i++)
        watch(&p[i], -1, false, false);
    watch(&p[SLOT_LISTEN], a->listen_fd, true, false);
    watch(&p[SLOT_SIGNAL], a->signal_fd, true, false);
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        const Prestart *pre = &a->pre[l];

        if (pre->chan_open && (!pre->ready || pre->rewarming))
            watch(&p[SLOT_PRE + l], pre->chan.fd, true, false);
    }
    /* Kept runners are read whatever the back-pressure: what they say between executes is
     * dropped (or ends them). */
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        const Kept *k = &a->kept[l];

        if (k->chan_open)
            watch(&p[SLOT_KEPT_CHAN + l], k->chan.fd, true, false);
        for (int s = 0; s < SBX_STREAM__COUNT; s++)
            watch(&p[SLOT_KEPT_PIPE + l * SBX_STREAM__COUNT + s], k->pipes[s], true, false);
    }
    /* Always watched while connected: hang-ups are reported even when we do not read. */
    if (host) {
        p[SLOT_HOST].fd = a->host.fd;
        p[SLOT_HOST].events =
            (short)((conn_wants_input(a) ? POLLIN : 0) | (link_queued(&a->host) ? POLLOUT : 0));
    }
    if (!e)
        return;
    if (e->chan_open)
        watch(&p[SLOT_CHAN], e->chan.fd, output, link_queued(&e->chan) > 0);
    watch(&p[SLOT_STDOUT], e->pipes[SBX_STREAM_STDOUT], output, false);
    watch(&p[SLOT_STDERR], e->pipes[SBX_STREAM_STDERR], output, false);
}

static int64_t earliest(int64_t a, int64_t b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return a < b ? a : b;
}

/* Milliseconds until the next deadline, -1 for none. */
static int poll_timeout(const Agent *a)
{
    int64_t next = earliest(a->conn_deadline_ms, a->serial_retry_ms);
    int64_t now;

    if (a->exec)
        next = earliest(next, earliest(a->exec->kill_deadline_ms, a->exec->drain_deadline_ms));
    /* Messages already read wait for us, not for the file descriptor. */
    if (conn_has_buffered(a) || runner_has_buffered(a))
        return 0;
    if (!next)
        return -1;
    now = now_ms();
    return next <= now ? 0 : (int)(next - now);
}

static void dispatch(Agent *a, struct pollfd *p)
{
    /* Messages read in an earlier round count as input as much as the socket's. */
    if (conn_has_buffered(a))
        p[SLOT_HOST].revents |= POLLIN;
    if (runner_has_buffered(a))
        p[SLOT_CHAN].revents |= POLLIN;
    /* Each handler may end what a later slot refers to: check it is still the same fd. */
    if (p[SLOT_HOST].revents && a->conn_state != CONN_NONE && a->host.fd == p[SLOT_HOST].fd)
        conn_on_events(a, p[SLOT_HOST].revents);
    if (p[SLOT_CHAN].revents && a->exec && a->exec->chan_open &&
        a->exec->chan.fd == p[SLOT_CHAN].fd)
        runner_on_events(a, p[SLOT_CHAN].revents);
    for (int s = 0; s < SBX_STREAM__COUNT; s++) {
        const struct pollfd *q = &p[SLOT_STDOUT + s];

        if (q->revents && a->exec && a->exec->pipes[s] >= 0 && a->exec->pipes[s] == q->fd)
            output_on_events(a, (SbxStream)s);
    }
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        const struct pollfd *q = &p[SLOT_PRE + l];

        if (q->revents && a->pre[l].chan_open && a->pre[l].chan.fd == q->fd)
            prestart_on_events(a, (SbxLanguage)l);
    }
    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        const struct pollfd *q = &p[SLOT_KEPT_CHAN + l];

        if (q->revents && a->kept[l].chan_open && a->kept[l].chan.fd == q->fd)
            kept_on_chan(a, (SbxLanguage)l);
        for (int s = 0; s < SBX_STREAM__COUNT; s++) {
            q = &p[SLOT_KEPT_PIPE + l * SBX_STREAM__COUNT + s];
            if (q->revents && a->kept[l].pipes[s] >= 0 && a->kept[l].pipes[s] == q->fd)
                kept_on_pipe(a, (SbxLanguage)l, (SbxStream)s);
        }
    }
    if (p[SLOT_SIGNAL].revents)
        pid1_on_signals(a);
    if (p[SLOT_LISTEN].revents)
        conn_accept(a);
}

static void timers(Agent *a, int64_t now)
{
    if (a->conn_state == CONN_HELLO && now >= a->conn_deadline_ms)
        conn_fail(a, SBX_ERR_PROTOCOL, "no hello within %d ms", HELLO_TIMEOUT_MS);
    host_greeting_check(a, now);
    serial_on_timer(a, now);
    if (a->exec)
        exec_on_timer(a, now);
}

static void settle(Agent *a, int64_t now)
{
    /* An execution lives only as long as the connection that started it. */
    if (a->exec && (a->conn_state != CONN_READY || a->conn_broken))
        exec_abort(a);
    if (a->conn_broken)
        conn_close(a);
    else if (a->conn_state == CONN_CLOSING &&
             (link_queued(&a->host) == 0 || now >= a->conn_deadline_ms))
        conn_close(a);
    if (a->exec)
        exec_maybe_finish(a);
    /* done may have failed to leave. */
    if (a->conn_broken)
        conn_close(a);
}

int agent_run(Agent *a)
{
    while (!a->quit) {
        struct pollfd p[SLOT__COUNT];
        int n;

        build(a, p);
        n = poll(p, SLOT__COUNT, poll_timeout(a));
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n >= 0)
            dispatch(a, p);
        timers(a, now_ms());
        settle(a, now_ms());
    }
    conn_close(a);
    return 0;
}
