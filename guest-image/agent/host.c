/*
 * Messages from the host, by connection state: hello first, then execute, cancel, tool_result,
 * file and ping. Anything else, or anything out of order, is a protocol error that closes the
 * connection (docs/protocol.md, "Guest agent").
 */
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "util.h"

/* Languages this guest can run right now, for hello_ok. */
static void fill_languages(const AgentOptions *o, char **langs)
{
    size_t n = 0;

    for (int l = 0; l < SBX_LANG__COUNT; l++)
        if (spawn_available(o, (SbxLanguage)l))
            langs[n++] = (char *)sbx_language_name((SbxLanguage)l);
    langs[n] = NULL;
}

/* Answer hello: set the clock (as init) to the host's, as of now, then hello_ok. */
static void greet(Agent *a, const char *token, int64_t time_us, int64_t received_ms)
{
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};
    char *langs[SBX_LANG__COUNT + 1];
    int r;

    if (a->pid1 && (r = clock_set_us(time_us + (now_ms() - received_ms) * 1000)) < 0)
        agent_log("setting the clock: %s", strerror(-r));
    fill_languages(&a->opt, langs);
    ok.hello_ok.version = SBX_PROTOCOL_VERSION;
    ok.hello_ok.token = (char *)token;
    ok.hello_ok.agent = (char *)AGENT_NAME;
    ok.hello_ok.languages = langs;
    conn_send(a, &ok);
    a->conn_state = CONN_READY;
    a->conn_deadline_ms = 0;
}

static void on_hello(Agent *a, const SbxHello *h)
{
    int r;

    if (h->version != SBX_PROTOCOL_VERSION) {
        conn_fail(a, SBX_ERR_PROTOCOL, "protocol version %u is not supported (this agent: %d)",
                  h->version, SBX_PROTOCOL_VERSION);
        return;
    }
    /* A restored snapshot starts with the RNG state and clock of the moment it was saved. Only
     * init (the real guest) credits the entropy and sets the clock: run as a test on a host,
     * the agent must not move the host's clock. */
    r = entropy_add(h->entropy, h->entropy_len, a->pid1);
    if (r < 0 && a->pid1)
        agent_log("adding the host's entropy: %s", strerror(-r));

    /* A pooled VM just restored from a snapshot: its runners are warm for the guest but not for
     * TCG, which has no translated code after a restore. The pool asks them to run their
     * warm-up again before the VM is offered (hello_ok waits for it, below); a host that runs
     * code at once (`sandbox run`) does not ask: it would only wait for it. */
    if (h->warm_up)
        prestart_rewarm(a);
    /* Pre-started runners still warming up (a cold boot, or the snapshot maker's template, or a
     * warm_up just asked for): answer once they are warm, so that a snapshot taken after
     * hello_ok holds warm runners.
     * The clock is set then too: until they are warm it stays at PRESTART_CLOCK_US (agent.h:
     * what node's OpenSSL seeds while it starts must be dated far from any hello's time).
     * How long: the hello's warm_wait_ms (the snapshot maker's: as long as it takes), else
     * PRESTART_HELLO_WAIT_MS (a session's hello times out at 10 s). */
    if (!prestart_all_ready(a) && (a->greeting_token = strdup(h->token))) {
        a->conn_state = CONN_GREETING;
        a->greeting_time_us = h->time_us;
        a->greeting_ms = now_ms();
        a->greeting_wait_ms = h->warm_wait_ms ? (int64_t)h->warm_wait_ms : PRESTART_HELLO_WAIT_MS;
        a->conn_deadline_ms = a->greeting_ms + a->greeting_wait_ms;
        return;
    }
    greet(a, h->token, h->time_us, now_ms());
}

void host_greeting_check(Agent *a, int64_t now)
{
    char *token = a->greeting_token;

    if (a->conn_state != CONN_GREETING || (!prestart_all_ready(a) && now < a->conn_deadline_ms))
        return;
    if (!prestart_all_ready(a))
        agent_log("pre-started runners not warm after %lld ms: answering hello anyway",
                  (long long)a->greeting_wait_ms);
    a->greeting_token = NULL;
    greet(a, token, a->greeting_time_us, a->greeting_ms);
    free(token);
}

static void on_cancel(Agent *a, const SbxCancel *c)
{
    /* A cancel may cross the done of the execution it names: not an error, nothing to do. */
    if (a->exec && strcmp(a->exec->id, c->id) == 0)
        exec_cancel(a);
}

static void on_ping(Agent *a, const SbxPing *p)
{
    SbxMsg pong = {.type = SBX_MSG_PONG};

    pong.ping.seq = p->seq;
    conn_send(a, &pong);
}

static void dispatch_ready(Agent *a, SbxMsg *msg)
{
    switch (msg->type) {
    case SBX_MSG_EXECUTE:
        exec_start(a, msg);
        break;
    case SBX_MSG_CANCEL:
        on_cancel(a, &msg->cancel);
        break;
    case SBX_MSG_TOOL_RESULT:
        runner_tool_result(a, msg);
        break;
    case SBX_MSG_PING:
        on_ping(a, &msg->ping);
        break;
    case SBX_MSG_FILE:
        files_on_request(a, &msg->file);
        break;
    case SBX_MSG_PONG:
        break; /* we never ping, but a pong is harmless */
    case SBX_MSG_ERROR:
        agent_log("the host reported an error: %s", msg->error.message);
        a->conn_broken = true; /* the sender closes after an error */
        break;
    default:
        conn_fail(a, SBX_ERR_PROTOCOL, "unexpected message from the host: %s",
                  sbx_msg_type_name(msg->type));
        break;
    }
}

void host_dispatch(Agent *a, SbxMsg *msg)
{
    if (a->conn_state == CONN_READY) {
        dispatch_ready(a, msg);
    } else if (msg->type == SBX_MSG_HELLO) {
        on_hello(a, &msg->hello);
    } else {
        conn_fail(a, SBX_ERR_PROTOCOL, "expected hello first, got %s",
                  sbx_msg_type_name(msg->type));
    }
}
