/* Host clients on unix sockets, relayed to vsock connections. See hybrid.h. */
#include "hybrid.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Clients accepted per readable event on the listening socket; the rest wait for the next. */
#define HYBRID_ACCEPT_BATCH 16

int hybrid_parse_connect(const char *buf, size_t len, uint32_t *ret_port, size_t *ret_used)
{
    static const char kw[] = "CONNECT ";
    const size_t kwlen = sizeof(kw) - 1;
    uint64_t port = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = buf[i];
        if (i >= HYBRID_LINE_MAX)
            return -EINVAL;
        if (i < kwlen) {
            if (ch != kw[i])
                return -EINVAL;
        } else if (ch == '\n') {
            if (i == kwlen)
                return -EINVAL; /* no digits */
            *ret_port = (uint32_t)port;
            *ret_used = i + 1;
            return 1;
        } else if (ch >= '0' && ch <= '9') {
            port = port * 10 + (uint64_t)(ch - '0');
            if (port > UINT32_MAX)
                return -EINVAL;
        } else {
            return -EINVAL;
        }
    }
    return len >= HYBRID_LINE_MAX ? -EINVAL : 0;
}

/* ---- client lifetime -------------------------------------------------------------------- */

static void client_close(struct hybrid_client *cl)
{
    struct hybrid *h = cl->h;
    if (cl->state == HYBRID_DEAD)
        return;
    if (cl->state == HYBRID_LINE)
        h->n_pending--;
    loop_unwatch(h->loop, &cl->w);
    close(cl->fd);
    cl->fd = -1;
    cl->state = HYBRID_DEAD;
    if (cl->conn) {
        struct vsock_conn *c = cl->conn;
        cl->conn = NULL;
        vsock_conn_host_failed(h->vsock, c); /* detaches: no event comes back */
    }
}

static void on_client(struct watch *w, uint32_t events);

static struct hybrid_client *client_new(struct hybrid *h, int fd, enum hybrid_client_state st)
{
    if (h->n_clients >= h->max_clients)
        return NULL;
    struct hybrid_client *cl = calloc(1, sizeof(*cl));
    if (!cl)
        return NULL;
    *cl = (struct hybrid_client){.h = h, .fd = fd, .state = st, .dirty = true};
    uint32_t ev = st == HYBRID_LINE ? EPOLLIN : 0;
    if (loop_watch(h->loop, &cl->w, fd, ev, on_client, cl) < 0) {
        free(cl);
        return NULL;
    }
    h->clients[h->n_clients++] = cl;
    if (st == HYBRID_LINE)
        h->n_pending++;
    return cl;
}

/* ---- CONNECT line ----------------------------------------------------------------------- */

static void start_connect(struct hybrid_client *cl, uint32_t port, size_t used)
{
    struct hybrid *h = cl->h;
    struct vsock_conn *c;
    if (vsock_connect_guest(h->vsock, port, cl, &c) < 0) {
        client_close(cl);
        return;
    }
    h->n_pending--;
    cl->state = HYBRID_CONNECTING;
    cl->deadline_ms = 0;
    cl->conn = c;
    /* Bytes after the line are the start of the stream (the buffer has room: >= 4 KiB). */
    ringbuf_push(&c->to_guest, cl->line + used, cl->line_len - used);
    cl->dirty = true;
}

static void read_line(struct hybrid_client *cl)
{
    ssize_t n = recv(cl->fd, cl->line + cl->line_len, sizeof(cl->line) - cl->line_len, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        client_close(cl);
        return;
    }
    cl->line_len += (size_t)n;
    uint32_t port;
    size_t used;
    int r = hybrid_parse_connect(cl->line, cl->line_len, &port, &used);
    if (r < 0) {
        if (cl->h->verbose)
            fprintf(stderr, "sandbox-bridge: host client sent a bad CONNECT line\n");
        client_close(cl);
    } else if (r > 0) {
        start_connect(cl, port, used);
    }
}

/* ---- relaying --------------------------------------------------------------------------- */

static void relay_read(struct hybrid_client *cl, uint32_t events)
{
    struct hybrid *h = cl->h;
    struct iovec iov[2];
    unsigned n = vsock_conn_host_read_iov(cl->conn, iov);
    if (n == 0)
        return;
    ssize_t r = readv(cl->fd, iov, (int)n);
    if (r > 0)
        vsock_conn_host_produced(h->vsock, cl->conn, (size_t)r);
    else if (r == 0)
        vsock_conn_host_eof(h->vsock, cl->conn, events & EPOLLHUP);
    else if (errno != EAGAIN && errno != EINTR)
        client_close(cl);
}

/* Returns false when the client was closed. */
static bool flush_prefix(struct hybrid_client *cl)
{
    while (cl->prefix_off < cl->prefix_len) {
        ssize_t n = send(cl->fd, cl->prefix + cl->prefix_off, cl->prefix_len - cl->prefix_off,
                         MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return true;
        if (n < 0) {
            client_close(cl);
            return false;
        }
        cl->prefix_off += (size_t)n;
    }
    return true;
}

static void relay_write(struct hybrid_client *cl)
{
    struct hybrid *h = cl->h;
    if (!flush_prefix(cl) || cl->prefix_off < cl->prefix_len || !cl->conn)
        return;
    struct iovec iov[2];
    unsigned n = vsock_conn_host_write_iov(cl->conn, iov);
    if (n > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n};
        ssize_t r = sendmsg(cl->fd, &mh, MSG_NOSIGNAL);
        if (r < 0 && errno != EAGAIN && errno != EINTR) {
            client_close(cl);
            return;
        }
        if (r > 0)
            vsock_conn_host_consumed(h->vsock, cl->conn, (size_t)r); /* may close cl */
    }
    if (cl->conn && vsock_conn_wants_shut_wr(cl->conn)) {
        shutdown(cl->fd, SHUT_WR);
        vsock_conn_host_shut_wr(h->vsock, cl->conn);
    }
}

static uint32_t interest(const struct hybrid_client *cl)
{
    if (cl->state == HYBRID_LINE)
        return EPOLLIN;
    if (cl->state == HYBRID_DEAD || !cl->conn)
        return 0;
    uint32_t ev = 0;
    if (vsock_conn_wants_host_read(cl->conn))
        ev |= EPOLLIN;
    if (cl->prefix_off < cl->prefix_len || ringbuf_len(&cl->conn->to_host) > 0)
        ev |= EPOLLOUT;
    return ev;
}

static void on_client(struct watch *w, uint32_t events)
{
    struct hybrid_client *cl = w->ctx;
    /* Timers the vsock device arms from here (connect, close) start now, not at the last pump. */
    cl->h->vsock->now_ms = loop_now_ms();
    if (events & EPOLLERR) {
        client_close(cl);
        return;
    }
    if (cl->state == HYBRID_LINE) {
        read_line(cl);
        return;
    }
    if (cl->conn && (events & (EPOLLIN | EPOLLHUP)))
        relay_read(cl, events);
    if (cl->conn && (events & (EPOLLOUT | EPOLLHUP)))
        relay_write(cl);
    cl->dirty = true;
}

void hybrid_sync(struct hybrid *h)
{
    for (unsigned i = 0; i < h->n_clients; i++) {
        struct hybrid_client *cl = h->clients[i];
        if (!cl->dirty || cl->state == HYBRID_DEAD)
            continue;
        cl->dirty = false;
        if (cl->conn)
            relay_write(cl);
        if (cl->state != HYBRID_DEAD)
            loop_update(h->loop, &cl->w, interest(cl));
    }
}

/* ---- vsock callbacks -------------------------------------------------------------------- */

static int connect_host(void *opaque, struct vsock_conn *c, uint32_t port)
{
    struct hybrid *h = opaque;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int len = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s_%u", h->uds_path, port);
    if (len < 0 || (size_t)len >= sizeof(sa.sun_path))
        return -ENAMETOOLONG;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* A unix connect completes at once or fails (EAGAIN: backlog full): no waiting here. */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    struct hybrid_client *cl = client_new(h, fd, HYBRID_RELAY);
    if (!cl) {
        close(fd);
        return -EMFILE;
    }
    cl->conn = c;
    c->user = cl;
    return 0;
}

static void on_vsock_event(void *opaque, struct vsock_conn *c, enum vsock_event ev)
{
    (void)opaque;
    struct hybrid_client *cl = c->user;
    switch (ev) {
    case VSOCK_EV_ESTABLISHED:
        cl->state = HYBRID_RELAY;
        cl->prefix_len = (size_t)snprintf(cl->prefix, sizeof(cl->prefix), "OK %u\n", c->host_port);
        cl->prefix_off = 0;
        cl->dirty = true;
        break;
    case VSOCK_EV_CHANGED:
        cl->dirty = true;
        break;
    case VSOCK_EV_CLOSED:
        cl->conn = NULL;
        client_close(cl);
        break;
    }
}

const struct vsock_ops hybrid_vsock_ops = {
    .connect_host = connect_host,
    .event = on_vsock_event,
};

/* ---- listening -------------------------------------------------------------------------- */

static void on_listen(struct watch *w, uint32_t events)
{
    struct hybrid *h = w->ctx;
    (void)events;
    for (int i = 0; i < HYBRID_ACCEPT_BATCH; i++) {
        int fd = accept4(h->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct hybrid_client *cl = NULL;
        if (h->n_pending < HYBRID_MAX_PENDING)
            cl = client_new(h, fd, HYBRID_LINE);
        if (!cl) {
            close(fd);
            continue;
        }
        cl->deadline_ms = loop_now_ms() + HYBRID_LINE_TIMEOUT_MS;
    }
}

int hybrid_init(struct hybrid *h, struct loop *loop, struct vsock_dev *vsock, const char *uds_path,
                int listen_fd, unsigned max_conns)
{
    *h =
        (struct hybrid){.loop = loop, .vsock = vsock, .uds_path = uds_path, .listen_fd = listen_fd};
    h->max_clients = max_conns + HYBRID_MAX_PENDING;
    h->clients = calloc(h->max_clients, sizeof(*h->clients));
    if (!h->clients)
        return -ENOMEM;
    return loop_watch(loop, &h->listen_w, listen_fd, EPOLLIN, on_listen, h);
}

void hybrid_tick(struct hybrid *h, uint64_t now_ms)
{
    for (unsigned i = 0; i < h->n_clients; i++) {
        struct hybrid_client *cl = h->clients[i];
        if (cl->state == HYBRID_LINE && now_ms >= cl->deadline_ms)
            client_close(cl);
    }
}

uint64_t hybrid_next_deadline(const struct hybrid *h)
{
    uint64_t next = 0;
    for (unsigned i = 0; i < h->n_clients; i++) {
        const struct hybrid_client *cl = h->clients[i];
        if (cl->state == HYBRID_LINE && (!next || cl->deadline_ms < next))
            next = cl->deadline_ms;
    }
    return next;
}

void hybrid_reap(struct hybrid *h)
{
    unsigned j = 0;
    for (unsigned i = 0; i < h->n_clients; i++) {
        if (h->clients[i]->state == HYBRID_DEAD)
            free(h->clients[i]);
        else
            h->clients[j++] = h->clients[i];
    }
    h->n_clients = j;
}

void hybrid_destroy(struct hybrid *h)
{
    for (unsigned i = 0; i < h->n_clients; i++)
        client_close(h->clients[i]);
    hybrid_reap(h);
    free(h->clients);
    h->clients = NULL;
    loop_unwatch(h->loop, &h->listen_w);
}
