/*
 * The runner channel: fd 3 of the runner, the same framing and messages as the host
 * connection. The runner sends tool_call and replay_log (any number) and one done; we send it
 * execute and tool_result. The runner runs user code, so it is as untrusted as the code: anything
 * off the protocol fails the execution (protocol_error) instead of reaching the host.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "util.h"

static void close_channel(Exec *e)
{
    if (!e->chan_open)
        return;
    link_close(&e->chan);
    e->chan_open = false;
}

/*
 * The runner cannot be written to any more (it exited, or closed its end): what was queued for
 * it goes, but the channel stays open for reading. What it wrote before (its done, with the
 * result) is still in the socket, and its exit reads it (runner_drain); closing here lost it.
 */
static void stop_writing(Exec *e)
{
    link_drop_queue(&e->chan);
    e->chan_mute = true;
}

void runner_send(Agent *a, const SbxMsg *msg)
{
    Exec *e = a->exec;
    int r;

    if (!e->chan_open || e->chan_mute)
        return;
    r = link_send(&e->chan, msg);
    if (r < 0) {
        exec_fail(a, SBX_ERR_INTERNAL, "cannot send %s to the runner: %s",
                  sbx_msg_type_name(msg->type), strerror(-r));
        return;
    }
    /* A runner that closed its end just cannot be answered any more: its exit tells the rest. */
    if (link_flush(&e->chan) < 0)
        stop_writing(e);
}

/* Answer a call ourselves, without bothering the host. */
static void refuse_call(Agent *a, uint32_t call_id, SbxErrorCode code, const char *why)
{
    SbxMsg m = {.type = SBX_MSG_TOOL_RESULT};

    m.tool_result.id = a->exec->id;
    m.tool_result.call_id = call_id;
    m.tool_result.ok = false;
    m.tool_result.error.code = code;
    m.tool_result.error.message = (char *)why;
    runner_send(a, &m);
}

/*
 * A call the agent answers itself: the replay logs' entries it carried still go to the host,
 * as a replay_log of their own (the host keeps every entry; docs/protocol.md, "Replay").
 */
static void forward_call_log(Agent *a, SbxToolCall *c)
{
    SbxMsg m = {.type = SBX_MSG_REPLAY_LOG};

    if (!c->clock && !c->events && !c->not_replayable)
        return;
    m.replay_log.id = a->exec->id;
    m.replay_log.clock = c->clock;
    m.replay_log.n_clock = c->n_clock;
    m.replay_log.events = c->events;
    m.replay_log.n_events = c->n_events;
    m.replay_log.not_replayable = c->not_replayable;
    conn_send(a, &m);
}

static void on_tool_call(Agent *a, SbxMsg *msg)
{
    Exec *e = a->exec;
    SbxToolCall *c = &msg->tool_call;
    int r;

    if (e->have_done) {
        exec_fail(a, SBX_ERR_PROTOCOL, "runner: tool call after done");
        return;
    }
    r = calls_begin(&e->calls, c->call_id);
    if (r == -EINVAL) {
        exec_fail(a, SBX_ERR_PROTOCOL, "runner: tool call id %u reused (ids must increase)",
                  c->call_id);
        return;
    }
    if (r == -EBUSY) {
        forward_call_log(a, c);
        refuse_call(a, c->call_id, SBX_ERR_TOOL,
                    "too many tool calls in flight (at most " STRINGIFY(
                        SBX_TOOL_CALLS_IN_FLIGHT_MAX) "): await some before starting more");
        return;
    }
    /* The runner may not speak for another execution: the id is ours to set. */
    free(c->id);
    c->id = strdup(e->id);
    if (!c->id) {
        exec_fail(a, SBX_ERR_INTERNAL, "out of memory");
        return;
    }
    r = conn_send(a, msg);
    if (r == -EMSGSIZE || r == -EINVAL) {
        calls_end(&e->calls, c->call_id);
        forward_call_log(a, c);
        refuse_call(a, c->call_id, SBX_ERR_SERIALIZATION,
                    "the tool call is too large to forward (a message is at most 4 MiB)");
    }
}

/*
 * The next entries of the runner's replay logs (docs/protocol.md, "Replay"): checked by the
 * decoder, forwarded as they are under our id; the host keeps them and bounds their total.
 */
static void on_replay_log(Agent *a, SbxMsg *msg)
{
    Exec *e = a->exec;
    SbxReplayLog *l = &msg->replay_log;

    if (e->have_done) {
        exec_fail(a, SBX_ERR_PROTOCOL, "runner: replay_log after done");
        return;
    }
    free(l->id);
    l->id = strdup(e->id);
    if (!l->id) {
        exec_fail(a, SBX_ERR_INTERNAL, "out of memory");
        return;
    }
    conn_send(a, msg);
}

static void on_done(Agent *a, SbxMsg *msg)
{
    Exec *e = a->exec;
    SbxStatus s = msg->done.status;

    if (e->have_done) {
        exec_fail(a, SBX_ERR_PROTOCOL, "runner: second done");
        return;
    }
    /* How an execution was stopped is for the agent and the host to say, not the runner. */
    if (s != SBX_STATUS_OK && s != SBX_STATUS_ERROR) {
        exec_fail(a, SBX_ERR_PROTOCOL, "runner: done with status %s", sbx_status_name(s));
        return;
    }
    e->have_done = true;
    e->done = msg->done;
    memset(&msg->done, 0, sizeof(msg->done));
    msg->type = SBX_MSG_PING; /* nothing left for sbx_msg_clear() to free */
    if (e->pid > 0)
        e->kill_deadline_ms = now_ms() + EXIT_GRACE_MS;
}

static void dispatch(Agent *a, SbxMsg *msg)
{
    switch (msg->type) {
    case SBX_MSG_TOOL_CALL:
        on_tool_call(a, msg);
        break;
    case SBX_MSG_DONE:
        on_done(a, msg);
        break;
    case SBX_MSG_REPLAY_LOG:
        on_replay_log(a, msg);
        break;
    case SBX_MSG_PONG:
        /* A pre-started runner answers our ping once warm, before it reads its execute: the
         * pong arrives here when the execute was handed over before that. */
        break;
    default:
        exec_fail(a, SBX_ERR_PROTOCOL, "runner: unexpected message %s",
                  sbx_msg_type_name(msg->type));
        break;
    }
}

/* Read and act on at most @max messages while @more allows. */
static void read_messages(Agent *a, bool (*more)(const Agent *), size_t max)
{
    Exec *e = a->exec;

    for (size_t n = 0; n < max && e->chan_open && more(a); n++) {
        SbxMsg msg;
        char *why = NULL;
        int r = link_recv(&e->chan, &msg, &why);

        if (r == 0)
            return;
        if (r == -EPIPE) {
            close_channel(e);
        } else if (r == -EBADMSG) {
            exec_fail(a, SBX_ERR_PROTOCOL, "runner: %s", why ? why : "malformed frame");
        } else if (r < 0) {
            exec_fail(a, SBX_ERR_INTERNAL, "reading the runner channel: %s", strerror(-r));
        } else {
            dispatch(a, &msg);
            sbx_msg_clear(&msg);
        }
        free(why);
    }
}

bool runner_has_buffered(const Agent *a)
{
    const Exec *e = a->exec;

    return e && e->chan_open && conn_wants_output(a) && link_buffered(&e->chan);
}

void runner_on_events(Agent *a, short revents)
{
    Exec *e = a->exec;

    if (revents & (POLLIN | POLLHUP | POLLERR))
        read_messages(a, conn_wants_output, MESSAGES_PER_ROUND);
    if (e->chan_open && !e->chan_mute && link_flush(&e->chan) < 0)
        stop_writing(e);
}

static bool always(const Agent *a)
{
    (void)a;
    return true;
}

void runner_drain(Agent *a)
{
    /* The runner has exited: what it wrote is all in the socket already (its writes completed
     * before it could exit), so this reads a bounded amount, whatever the back-pressure. */
    read_messages(a, always, SIZE_MAX);
    close_channel(a->exec);
}

void runner_tool_result(Agent *a, SbxMsg *msg)
{
    Exec *e = a->exec;
    const SbxToolResult *t = &msg->tool_result;

    /* Results for a finished execution, an unknown or an already answered call: the call may
     * have crossed the end of its execution, so this is ignored, not a protocol error. */
    if (!e || strcmp(e->id, t->id) != 0 || !calls_end(&e->calls, t->call_id))
        return;
    runner_send(a, msg);
}
