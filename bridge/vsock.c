/*
 * vsock connections: the table, the stream state machine, credit accounting, timeouts and
 * the host-side API. The packet side (parsing tx, building rx) is in vsock-pkt.c.
 */
#include "vsock-priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Local ports for host-initiated connections start here: Firecracker does the same, the range
 * is far above anything a guest service listens on, so the (host port, guest port) pairs of
 * the two directions never meet.
 */
#define VSOCK_FIRST_LOCAL_PORT (1u << 30)

int vsock_dev_init(struct vsock_dev *d, uint64_t guest_cid, unsigned max_conns, uint32_t conn_buf,
                   const struct vsock_ops *ops, void *opaque)
{
    *d = (struct vsock_dev){0};
    d->conns = calloc(max_conns ? max_conns : 1, sizeof(*d->conns));
    if (!d->conns)
        return -ENOMEM;
    d->guest_cid = guest_cid;
    d->max_conns = max_conns;
    d->conn_buf = conn_buf;
    d->next_port = VSOCK_FIRST_LOCAL_PORT;
    d->ops = ops;
    d->opaque = opaque;
    return 0;
}

void vsock_dev_destroy(struct vsock_dev *d)
{
    while (d->n_conns > 0)
        vsock_conn_free(d, d->conns[d->n_conns - 1]);
    free(d->conns);
    d->conns = NULL;
}

struct vsock_conn *vsock_conn_find(const struct vsock_dev *d, uint32_t host_port,
                                   uint32_t guest_port)
{
    /* Linear: the table is small (max_conns, 64 by default) and this keeps it obviously right. */
    for (unsigned i = 0; i < d->n_conns; i++) {
        struct vsock_conn *c = d->conns[i];
        if (c->host_port == host_port && c->guest_port == guest_port)
            return c;
    }
    return NULL;
}

struct vsock_conn *vsock_conn_new(struct vsock_dev *d, uint32_t host_port, uint32_t guest_port)
{
    if (d->n_conns >= d->max_conns)
        return NULL;
    struct vsock_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    if (ringbuf_init(&c->to_host, d->conn_buf) < 0 || ringbuf_init(&c->to_guest, d->conn_buf) < 0) {
        ringbuf_free(&c->to_host);
        free(c);
        return NULL;
    }
    c->host_port = host_port;
    c->guest_port = guest_port;
    d->conns[d->n_conns++] = c;
    return c;
}

void vsock_conn_free(struct vsock_dev *d, struct vsock_conn *c)
{
    if (c->user) {
        d->ops->event(d->opaque, c, VSOCK_EV_CLOSED);
        c->user = NULL;
    }
    for (unsigned i = 0; i < d->n_conns; i++) {
        if (d->conns[i] == c) {
            d->conns[i] = d->conns[--d->n_conns];
            break;
        }
    }
    ringbuf_free(&c->to_host);
    ringbuf_free(&c->to_guest);
    free(c);
}

void vsock_conn_changed(struct vsock_dev *d, struct vsock_conn *c)
{
    if (c->user)
        d->ops->event(d->opaque, c, VSOCK_EV_CHANGED);
}

void vsock_conn_close(struct vsock_dev *d, struct vsock_conn *c, bool drop_to_host)
{
    c->state = VSOCK_CLOSING;
    c->pending = VSOCK_PEND_RST;
    c->deadline_ms = d->now_ms + VSOCK_CLOSE_TIMEOUT_MS;
    ringbuf_clear(&c->to_guest);
    if (drop_to_host)
        ringbuf_clear(&c->to_host);
    vsock_conn_changed(d, c);
}

uint32_t vsock_conn_credit(const struct vsock_conn *c)
{
    /*
     * Unsigned wrap-around is the protocol's arithmetic. A guest that reports a fwd_cnt ahead
     * of what we sent makes in_flight look huge: that gives zero credit, never extra.
     */
    uint32_t in_flight = c->tx_cnt - c->peer_fwd_cnt;
    if (in_flight >= c->peer_buf_alloc)
        return 0;
    return c->peer_buf_alloc - in_flight;
}

bool vsock_conn_data_sendable(const struct vsock_conn *c)
{
    return c->state == VSOCK_ESTABLISHED && !(c->local_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) &&
           ringbuf_len(&c->to_guest) > 0 && vsock_conn_credit(c) > 0;
}

bool vsock_conn_has_rx_work(const struct vsock_conn *c)
{
    return c->pending != 0 || vsock_conn_data_sendable(c);
}

bool vsock_dev_has_rx_work(const struct vsock_dev *d)
{
    if (d->rst_len > 0)
        return true;
    for (unsigned i = 0; i < d->n_conns; i++)
        if (vsock_conn_has_rx_work(d->conns[i]))
            return true;
    return false;
}

bool vsock_rst_push(struct vsock_dev *d, const struct vsock_pkt *p)
{
    if (d->rst_len >= VSOCK_RST_QUEUE)
        return false;
    /* Answer from where the packet was going, to where it came from. */
    d->rst[(d->rst_head + d->rst_len++) % VSOCK_RST_QUEUE] =
        (struct vsock_rst){.src_cid = p->dst_cid, .src_port = p->dst_port, .dst_port = p->src_port};
    return true;
}

/* The host stopped sending and every byte reached the guest: say so with SHUTDOWN. */
static void maybe_shutdown_to_guest(struct vsock_dev *d, struct vsock_conn *c)
{
    if (!c->host_eof || ringbuf_len(&c->to_guest) > 0 ||
        (c->local_shut & VIRTIO_VSOCK_SHUTDOWN_SEND))
        return;
    c->local_shut |= VIRTIO_VSOCK_SHUTDOWN_SEND;
    if (c->host_gone) {
        /* The host will not read either; the guest answers with RST, or we time out. */
        c->local_shut |= VIRTIO_VSOCK_SHUTDOWN_RCV;
        c->deadline_ms = d->now_ms + VSOCK_CLOSE_TIMEOUT_MS;
    }
    c->pending |= VSOCK_PEND_SHUTDOWN;
}

void vsock_conn_update(struct vsock_dev *d, struct vsock_conn *c)
{
    if (c->state == VSOCK_CLOSING) {
        /* Freed once the RST left and the host took the last bytes (or is gone). */
        if (!(c->pending & VSOCK_PEND_RST) && (!c->user || ringbuf_len(&c->to_host) == 0))
            vsock_conn_free(d, c);
        return;
    }
    if (c->state != VSOCK_ESTABLISHED)
        return;
    const uint32_t both = VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND;
    if ((c->peer_shut & both) == both) {
        /* The guest closed: answer RST (as Linux does), let the host drain what arrived. */
        vsock_conn_close(d, c, false);
        return;
    }
    maybe_shutdown_to_guest(d, c);
    bool done_in = (c->peer_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && ringbuf_len(&c->to_host) == 0;
    bool done_out =
        (c->local_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && !(c->pending & VSOCK_PEND_SHUTDOWN);
    if (done_in && done_out) {
        /* Both directions finished: end the connection. */
        vsock_conn_close(d, c, false);
        return;
    }
    vsock_conn_changed(d, c);
}

static uint32_t alloc_local_port(struct vsock_dev *d, uint32_t guest_port)
{
    for (;;) {
        uint32_t p = d->next_port++;
        if (d->next_port == UINT32_MAX)
            d->next_port = VSOCK_FIRST_LOCAL_PORT;
        /* At most n_conns ports can be taken for this guest port: this ends. */
        if (!vsock_conn_find(d, p, guest_port))
            return p;
    }
}

int vsock_connect_guest(struct vsock_dev *d, uint32_t guest_port, void *user,
                        struct vsock_conn **ret_conn)
{
    if (d->n_conns >= d->max_conns)
        return -EMFILE;
    struct vsock_conn *c = vsock_conn_new(d, alloc_local_port(d, guest_port), guest_port);
    if (!c)
        return -ENOMEM;
    c->state = VSOCK_CONNECTING;
    c->pending = VSOCK_PEND_REQUEST;
    c->deadline_ms = d->now_ms + VSOCK_CONNECT_TIMEOUT_MS;
    c->user = user;
    *ret_conn = c;
    return 0;
}

static void expire(struct vsock_dev *d, struct vsock_conn *c)
{
    if (c->state == VSOCK_CONNECTING) {
        /* A late RESPONSE will find no connection and get RST. */
        vsock_conn_free(d, c);
        return;
    }
    if (c->state == VSOCK_ESTABLISHED || (c->pending & VSOCK_PEND_RST)) {
        struct vsock_pkt p = {.src_cid = d->guest_cid,
                              .dst_cid = VSOCK_HOST_CID,
                              .src_port = c->guest_port,
                              .dst_port = c->host_port};
        if (!vsock_rst_push(d, &p))
            d->stats.rst_dropped++;
    }
    vsock_conn_free(d, c);
}

void vsock_dev_tick(struct vsock_dev *d)
{
    /* Downwards: freeing swaps the last entry into this slot, which was already visited. */
    for (unsigned i = d->n_conns; i-- > 0;) {
        struct vsock_conn *c = d->conns[i];
        if (c->deadline_ms && d->now_ms >= c->deadline_ms)
            expire(d, c);
    }
}

uint64_t vsock_dev_next_deadline(const struct vsock_dev *d)
{
    uint64_t next = 0;
    for (unsigned i = 0; i < d->n_conns; i++) {
        uint64_t t = d->conns[i]->deadline_ms;
        if (t && (!next || t < next))
            next = t;
    }
    return next;
}

unsigned vsock_conn_host_read_iov(const struct vsock_conn *c, struct iovec iov[2])
{
    if (!vsock_conn_wants_host_read(c))
        return 0;
    return ringbuf_space_iov(&c->to_guest, iov);
}

void vsock_conn_host_produced(struct vsock_dev *d, struct vsock_conn *c, size_t n)
{
    (void)d;
    ringbuf_commit(&c->to_guest, n);
    /* The guest said it will not read: what the host sends goes nowhere. */
    if (c->peer_shut & VIRTIO_VSOCK_SHUTDOWN_RCV)
        ringbuf_clear(&c->to_guest);
}

unsigned vsock_conn_host_write_iov(const struct vsock_conn *c, struct iovec iov[2])
{
    return ringbuf_data_iov(&c->to_host, iov);
}

/* Whether the guest should hear that we freed buffer space. */
static bool credit_update_due(const struct vsock_dev *d, const struct vsock_conn *c)
{
    if (c->fwd_cnt == c->fwd_cnt_sent)
        return false;
    /*
     * Free space as the guest last saw it. Below half the buffer, tell it more: Linux only
     * sends while its credit is > 0 and never asks, so without this a fast writer stalls.
     */
    int64_t seen_free = (int64_t)d->conn_buf - (int64_t)(uint32_t)(c->rx_cnt - c->fwd_cnt_sent);
    return seen_free < (int64_t)d->conn_buf / 2;
}

void vsock_conn_host_consumed(struct vsock_dev *d, struct vsock_conn *c, size_t n)
{
    if (n > ringbuf_len(&c->to_host))
        n = ringbuf_len(&c->to_host);
    ringbuf_consume(&c->to_host, n);
    c->fwd_cnt += (uint32_t)n;
    if (c->state == VSOCK_ESTABLISHED && credit_update_due(d, c))
        c->pending |= VSOCK_PEND_CREDIT_UPDATE;
    vsock_conn_update(d, c);
}

bool vsock_conn_wants_host_read(const struct vsock_conn *c)
{
    return (c->state == VSOCK_CONNECTING || c->state == VSOCK_ESTABLISHED) && !c->host_eof &&
           ringbuf_space(&c->to_guest) > 0;
}

bool vsock_conn_wants_shut_wr(const struct vsock_conn *c)
{
    return c->state == VSOCK_ESTABLISHED && (c->peer_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) &&
           ringbuf_len(&c->to_host) == 0 && !c->host_wr_shut;
}

void vsock_conn_host_shut_wr(struct vsock_dev *d, struct vsock_conn *c)
{
    c->host_wr_shut = true;
    vsock_conn_update(d, c);
}

void vsock_conn_host_eof(struct vsock_dev *d, struct vsock_conn *c, bool gone)
{
    c->host_eof = true;
    c->host_gone = c->host_gone || gone;
    vsock_conn_update(d, c);
}

void vsock_conn_host_failed(struct vsock_dev *d, struct vsock_conn *c)
{
    c->user = NULL;
    if (c->state == VSOCK_CONNECTING) {
        vsock_conn_free(d, c);
        return;
    }
    if (c->state == VSOCK_ESTABLISHED)
        vsock_conn_close(d, c, true);
    else
        ringbuf_clear(&c->to_host);
    vsock_conn_update(d, c);
}
