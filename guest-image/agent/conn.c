/*
 * The host connection: accept, hello deadline, reading messages under back-pressure, writing,
 * and closing after a protocol error. What the messages mean is host.c's business.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* An error frame to a connection we do not serve: one best-effort write, then close. */
static void refuse(int fd, const char *why)
{
    SbxMsg m = {.type = SBX_MSG_ERROR};
    uint8_t *frame;
    size_t len;

    m.error.code = SBX_ERR_PROTOCOL;
    m.error.message = (char *)why;
    if (sbx_msg_encode(&m, &frame, &len) == 0) {
        if (send(fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            agent_log("refusing a connection: %m");
        free(frame);
    }
    close(fd);
}

void conn_accept(Agent *a)
{
    int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
            agent_log("accept: %m");
        return;
    }
    /*
     * The host connects again only after it gave up on an attempt (its probe timed out). The
     * guest may have accepted that one all the same: the bridge drops a connection it timed
     * out without a word, and the reset comes only when the guest's late answer reaches it,
     * maybe after the new connection (a restore on a loaded host). So one that has not said
     * hello yet, or that has already ended, makes way for the new one; one whose host said
     * hello keeps it (the new one is refused). A virtio-serial host is not replaced.
     */
    if (a->conn_state != CONN_NONE &&
        (a->conn_broken || (a->conn_state == CONN_HELLO && !a->conn_serial))) {
        agent_log("a new host connection replaces one that %s",
                  a->conn_broken ? "has ended" : "sent no hello");
        conn_close(a);
    }
    if (a->conn_state != CONN_NONE) {
        refuse(fd, "another host connection is active");
        return;
    }
    conn_attach(a, fd, false);
}

void conn_attach(Agent *a, int fd, bool serial)
{
    link_init(&a->host, fd, SBX_FRAME_MAX);
    link_take_data(&a->host); /* files' chunks: docs/protocol.md, "Data frames" */
    a->conn_state = CONN_HELLO;
    a->conn_broken = false;
    a->conn_deadline_ms = now_ms() + HELLO_TIMEOUT_MS;
    a->conn_serial = serial;
}

void conn_close(Agent *a)
{
    if (a->exec)
        exec_abort(a);
    /* A session lives only as long as its connection, and so does a write in progress. */
    kept_stop_all(a);
    files_abort(a);
    if (a->conn_state == CONN_NONE)
        return;
    if (a->conn_serial)
        serial_conn_closing(a, a->host.fd);
    link_close(&a->host);
    free(a->greeting_token);
    a->greeting_token = NULL;
    a->conn_state = CONN_NONE;
    a->conn_broken = false;
    a->conn_deadline_ms = 0;
    if (a->conn_serial) {
        a->conn_serial = false;
        serial_conn_closed(a);
    } else {
        serial_check(a); /* a host may have attached to the port meanwhile */
    }
}

int conn_send(Agent *a, const SbxMsg *msg)
{
    return conn_send_data(a, msg, NULL);
}

int conn_send_data(Agent *a, const SbxMsg *msg, uint8_t *data)
{
    int r;

    /* After an error frame nothing more goes out: the host is told why, then we close. */
    if (a->conn_state == CONN_NONE || a->conn_state == CONN_CLOSING || a->conn_broken) {
        free(data);
        return -ENOTCONN;
    }
    r = data ? link_send_data(&a->host, msg, data) : link_send(&a->host, msg);
    if (r == -EMSGSIZE || r == -EINVAL) {
        /* The message cannot be sent (content from the runner that grew past the frame limit
         * when re-encoded, or a bug): the caller decides; the connection is fine. */
        agent_log("cannot send %s: %s", sbx_msg_type_name(msg->type), strerror(-r));
        return r;
    }
    if (r < 0 || link_flush(&a->host) < 0)
        a->conn_broken = true;
    return r;
}

void conn_fail(Agent *a, SbxErrorCode code, const char *fmt, ...)
{
    SbxMsg m = {.type = SBX_MSG_ERROR};
    char why[256];
    va_list ap;

    if (a->conn_state == CONN_NONE || a->conn_state == CONN_CLOSING)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    agent_log("closing the host connection: %s", why);
    m.error.code = code;
    m.error.message = why;
    conn_send(a, &m);
    a->conn_state = CONN_CLOSING;
    a->conn_deadline_ms = now_ms() + CLOSING_TIMEOUT_MS;
}

bool conn_wants_output(const Agent *a)
{
    return a->conn_state == CONN_READY && !a->conn_broken &&
           link_queued(&a->host) < HOST_QUEUE_SOFT_MAX;
}

bool conn_wants_input(const Agent *a)
{
    if (a->conn_state != CONN_HELLO && a->conn_state != CONN_READY)
        return false;
    /* The runner of an execution done early is swept again when it is reaped (exec.c): no
     * next execute before that, so that the sweep cannot reach its processes. */
    if (a->early_pid > 0)
        return false;
    if (a->conn_broken || link_queued(&a->host) >= HOST_QUEUE_SOFT_MAX)
        return false;
    return !(a->exec && a->exec->chan_open && link_queued(&a->exec->chan) >= RUNNER_QUEUE_MAX);
}

bool conn_has_buffered(const Agent *a)
{
    return conn_wants_input(a) && link_buffered(&a->host);
}

static void read_messages(Agent *a)
{
    for (int n = 0; n < MESSAGES_PER_ROUND && conn_wants_input(a); n++) {
        SbxMsg msg;
        char *why = NULL;
        int r = link_recv(&a->host, &msg, &why);

        if (r == 0)
            break;
        if (r == -EBADMSG) {
            conn_fail(a, SBX_ERR_PROTOCOL, "%s", why ? why : "malformed frame");
        } else if (r == -EPIPE) {
            a->conn_broken = true; /* the host hung up (or cut a frame short) */
        } else if (r < 0) {
            agent_log("reading from the host: %s", strerror(-r));
            a->conn_broken = true;
        } else {
            host_dispatch(a, &msg);
            sbx_msg_clear(&msg);
        }
        free(why);
    }
}

void conn_on_events(Agent *a, short revents)
{
    if (revents & (POLLIN | POLLHUP | POLLERR))
        read_messages(a);
    if (a->conn_state != CONN_NONE && !a->conn_broken && link_flush(&a->host) < 0)
        a->conn_broken = true;
    /* Hang-up while we are not reading (back-pressure): nobody will read what we send. */
    if ((revents & (POLLHUP | POLLERR)) && !conn_wants_input(a))
        a->conn_broken = true;
}
