/*
 * vsock packets on the virtqueues: parse and dispatch what the guest sends on tx, build what
 * the host sends into the guest's rx buffers. The connection state lives in vsock.c.
 */
#include "vsock-priv.h"

#include <endian.h>
#include <string.h>

static struct vsock_pkt pkt_decode(const struct virtio_vsock_hdr *h)
{
    return (struct vsock_pkt){
        .src_cid = le64toh(h->src_cid),
        .dst_cid = le64toh(h->dst_cid),
        .src_port = le32toh(h->src_port),
        .dst_port = le32toh(h->dst_port),
        .len = le32toh(h->len),
        .type = le16toh(h->type),
        .op = le16toh(h->op),
        .flags = le32toh(h->flags),
        .buf_alloc = le32toh(h->buf_alloc),
        .fwd_cnt = le32toh(h->fwd_cnt),
    };
}

static struct virtio_vsock_hdr pkt_encode(const struct vsock_pkt *p)
{
    return (struct virtio_vsock_hdr){
        .src_cid = htole64(p->src_cid),
        .dst_cid = htole64(p->dst_cid),
        .src_port = htole32(p->src_port),
        .dst_port = htole32(p->dst_port),
        .len = htole32(p->len),
        .type = htole16(p->type),
        .op = htole16(p->op),
        .flags = htole32(p->flags),
        .buf_alloc = htole32(p->buf_alloc),
        .fwd_cnt = htole32(p->fwd_cnt),
    };
}

/* ---- guest -> host ---------------------------------------------------------------------- */

static void reply_rst(struct vsock_dev *d, const struct vsock_pkt *p)
{
    /* Never answer an RST with an RST: two hostile ends would ping-pong forever. */
    if (p->op == VIRTIO_VSOCK_OP_RST)
        return;
    if (vsock_rst_push(d, p))
        d->stats.rst_unknown++;
}

static void on_request(struct vsock_dev *d, const struct vsock_pkt *p)
{
    struct vsock_conn *c = vsock_conn_new(d, p->dst_port, p->src_port);
    if (!c || d->ops->connect_host(d->opaque, c, p->dst_port) < 0) {
        if (c) {
            c->user = NULL;
            vsock_conn_free(d, c);
        }
        d->stats.refused++;
        reply_rst(d, p);
        return;
    }
    c->state = VSOCK_ESTABLISHED;
    c->pending = VSOCK_PEND_RESPONSE;
    c->peer_buf_alloc = p->buf_alloc;
    c->peer_fwd_cnt = p->fwd_cnt;
}

/* Copy @len payload bytes of chain @ch into the connection's to-host buffer. */
static void accept_payload(struct vsock_dev *d, struct vsock_conn *c, const struct vq_chain *ch,
                           uint32_t len)
{
    struct iovec iov[2];
    unsigned n = ringbuf_space_iov(&c->to_host, iov);
    uint64_t off = VSOCK_HDR_LEN;
    uint32_t left = len;
    for (unsigned i = 0; i < n && left > 0; i++) {
        uint64_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
        vq_chain_read(ch, off, iov[i].iov_base, k);
        off += k;
        left -= (uint32_t)k;
    }
    ringbuf_commit(&c->to_host, len);
    c->rx_cnt += len;
    d->stats.bytes_in += len;
}

static void on_rw(struct vsock_dev *d, struct vsock_conn *c, const struct vsock_pkt *p,
                  const struct vq_chain *ch)
{
    if (c->state != VSOCK_ESTABLISHED || (c->peer_shut & VIRTIO_VSOCK_SHUTDOWN_SEND)) {
        vsock_conn_close(d, c, false);
        return;
    }
    if (p->len > ringbuf_space(&c->to_host)) {
        /* Beyond the credit we gave: a guest that ignores flow control loses the stream. */
        d->stats.credit_abuse++;
        vsock_conn_close(d, c, true);
        return;
    }
    accept_payload(d, c, ch, p->len);
    vsock_conn_changed(d, c);
}

static void on_shutdown(struct vsock_dev *d, struct vsock_conn *c, const struct vsock_pkt *p)
{
    if (c->state != VSOCK_ESTABLISHED) {
        vsock_conn_close(d, c, false);
        return;
    }
    c->peer_shut |= p->flags & (VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND);
    if (c->peer_shut & VIRTIO_VSOCK_SHUTDOWN_RCV)
        ringbuf_clear(&c->to_guest);
    vsock_conn_update(d, c);
}

static void on_response(struct vsock_dev *d, struct vsock_conn *c)
{
    if (c->state != VSOCK_CONNECTING) {
        vsock_conn_close(d, c, false);
        return;
    }
    c->state = VSOCK_ESTABLISHED;
    c->deadline_ms = 0;
    if (c->user)
        d->ops->event(d->opaque, c, VSOCK_EV_ESTABLISHED);
    vsock_conn_update(d, c); /* the host may have finished sending while we waited */
}

/* A packet for an existing connection. */
static void on_conn_pkt(struct vsock_dev *d, struct vsock_conn *c, const struct vsock_pkt *p,
                        const struct vq_chain *ch)
{
    if (c->state == VSOCK_CLOSING)
        return; /* our RST is on its way */
    c->peer_buf_alloc = p->buf_alloc;
    c->peer_fwd_cnt = p->fwd_cnt;
    switch (p->op) {
    case VIRTIO_VSOCK_OP_RESPONSE:
        on_response(d, c);
        break;
    case VIRTIO_VSOCK_OP_RW:
        on_rw(d, c, p, ch);
        break;
    case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
        vsock_conn_changed(d, c);
        break;
    case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
        c->pending |= VSOCK_PEND_CREDIT_UPDATE;
        break;
    case VIRTIO_VSOCK_OP_SHUTDOWN:
        on_shutdown(d, c, p);
        break;
    case VIRTIO_VSOCK_OP_RST:
        vsock_conn_free(d, c);
        break;
    default: /* REQUEST on an open connection, INVALID, unknown op */
        vsock_conn_close(d, c, false);
        break;
    }
}

static void dispatch(struct vsock_dev *d, const struct vsock_pkt *p, const struct vq_chain *ch)
{
    d->stats.pkts_in++;
    if (p->src_cid != d->guest_cid) {
        d->stats.bad_pkts++; /* spoofed source: not worth an answer */
        return;
    }
    if (p->dst_cid != VSOCK_HOST_CID || p->type != VIRTIO_VSOCK_TYPE_STREAM) {
        d->stats.bad_pkts++;
        reply_rst(d, p);
        return;
    }
    struct vsock_conn *c = vsock_conn_find(d, p->dst_port, p->src_port);
    if (c)
        on_conn_pkt(d, c, p, ch);
    else if (p->op == VIRTIO_VSOCK_OP_REQUEST)
        on_request(d, p);
    else
        reply_rst(d, p);
}

/* One tx chain: header, length checks, dispatch. */
static void handle_tx_chain(struct vsock_dev *d, const struct vq_chain *ch)
{
    struct virtio_vsock_hdr h;
    if (ch->out_len < VSOCK_HDR_LEN) {
        d->stats.bad_pkts++;
        return;
    }
    vq_chain_read(ch, 0, &h, sizeof(h));
    struct vsock_pkt p = pkt_decode(&h);
    if (p.len > VSOCK_MAX_PKT_PAYLOAD || p.len > ch->out_len - VSOCK_HDR_LEN) {
        /* The header lies about its payload: the stream it belongs to cannot continue. */
        d->stats.bad_pkts++;
        struct vsock_conn *c =
            p.src_cid == d->guest_cid ? vsock_conn_find(d, p.dst_port, p.src_port) : NULL;
        if (c && c->state != VSOCK_CLOSING)
            vsock_conn_close(d, c, false);
        return;
    }
    if (p.op != VIRTIO_VSOCK_OP_RW)
        p.len = 0; /* only RW carries payload; ignore anything else's */
    dispatch(d, &p, ch);
}

int vsock_dev_process_tx(struct vsock_dev *d, struct virtq *tx, const struct vmem *mem,
                         bool *ret_more)
{
    int done = 0;
    *ret_more = false;
    while (virtq_has_avail(tx)) {
        /* Each packet may need one RST; stop while there is no room (see VSOCK_RST_QUEUE). */
        if (d->rst_len >= VSOCK_RST_QUEUE || done >= tx->num) {
            *ret_more = true;
            break;
        }
        struct vq_chain ch;
        int r = virtq_pop(tx, mem, &ch);
        if (r < 0)
            return r;
        if (r == 0)
            break;
        handle_tx_chain(d, &ch);
        virtq_push(tx, ch.head, 0);
        done++;
    }
    return done;
}

/* ---- host -> guest ---------------------------------------------------------------------- */

static struct vsock_pkt conn_pkt(const struct vsock_dev *d, const struct vsock_conn *c, uint16_t op)
{
    return (struct vsock_pkt){
        .src_cid = VSOCK_HOST_CID,
        .dst_cid = d->guest_cid,
        .src_port = c->host_port,
        .dst_port = c->guest_port,
        .type = VIRTIO_VSOCK_TYPE_STREAM,
        .op = op,
        .buf_alloc = d->conn_buf,
        .fwd_cnt = c->fwd_cnt,
    };
}

/* Move up to @max bytes of to-guest data into the chain after the header. */
static uint32_t copy_payload(struct vsock_conn *c, const struct vq_chain *ch, uint32_t max)
{
    struct iovec iov[2];
    unsigned n = ringbuf_data_iov(&c->to_guest, iov);
    uint32_t done = 0;
    for (unsigned i = 0; i < n && done < max; i++) {
        uint32_t k = iov[i].iov_len < max - done ? (uint32_t)iov[i].iov_len : max - done;
        vq_chain_write(ch, VSOCK_HDR_LEN + done, iov[i].iov_base, k);
        done += k;
    }
    ringbuf_consume(&c->to_guest, done);
    return done;
}

static uint32_t min_u32(uint64_t a, uint64_t b)
{
    uint64_t m = a < b ? a : b;
    return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

/* Pick @c's next packet and write it (payload included) into @ch. */
static struct vsock_pkt conn_next_pkt(struct vsock_dev *d, struct vsock_conn *c,
                                      const struct vq_chain *ch)
{
    if (c->pending & VSOCK_PEND_RST) {
        c->pending &= ~VSOCK_PEND_RST;
        return conn_pkt(d, c, VIRTIO_VSOCK_OP_RST);
    }
    if (c->pending & VSOCK_PEND_REQUEST) {
        c->pending &= ~VSOCK_PEND_REQUEST;
        return conn_pkt(d, c, VIRTIO_VSOCK_OP_REQUEST);
    }
    if (c->pending & VSOCK_PEND_RESPONSE) {
        c->pending &= ~VSOCK_PEND_RESPONSE;
        return conn_pkt(d, c, VIRTIO_VSOCK_OP_RESPONSE);
    }
    if (vsock_conn_data_sendable(c)) {
        struct vsock_pkt p = conn_pkt(d, c, VIRTIO_VSOCK_OP_RW);
        uint32_t room = min_u32(ch->in_len - VSOCK_HDR_LEN, VSOCK_MAX_PKT_PAYLOAD);
        p.len = copy_payload(c, ch, min_u32(room, vsock_conn_credit(c)));
        c->tx_cnt += p.len;
        d->stats.bytes_out += p.len;
        return p;
    }
    if (c->pending & VSOCK_PEND_SHUTDOWN) {
        c->pending &= ~VSOCK_PEND_SHUTDOWN;
        struct vsock_pkt p = conn_pkt(d, c, VIRTIO_VSOCK_OP_SHUTDOWN);
        p.flags = c->local_shut;
        return p;
    }
    return conn_pkt(d, c, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
}

static uint32_t write_pkt(const struct vq_chain *ch, const struct vsock_pkt *p)
{
    struct virtio_vsock_hdr h = pkt_encode(p);
    vq_chain_write(ch, 0, &h, sizeof(h));
    return VSOCK_HDR_LEN + p->len;
}

/* Write the next packet owed to the guest into @ch; returns its length. */
static uint32_t emit_one(struct vsock_dev *d, const struct vq_chain *ch)
{
    if (d->rst_len > 0) {
        const struct vsock_rst *r = &d->rst[d->rst_head];
        struct vsock_pkt p = {.src_cid = r->src_cid,
                              .dst_cid = d->guest_cid,
                              .src_port = r->src_port,
                              .dst_port = r->dst_port,
                              .type = VIRTIO_VSOCK_TYPE_STREAM,
                              .op = VIRTIO_VSOCK_OP_RST};
        d->rst_head = (d->rst_head + 1) % VSOCK_RST_QUEUE;
        d->rst_len--;
        return write_pkt(ch, &p);
    }
    for (unsigned k = 0; k < d->n_conns; k++) {
        unsigned i = (d->rr + k) % d->n_conns;
        struct vsock_conn *c = d->conns[i];
        if (!vsock_conn_has_rx_work(c))
            continue;
        d->rr = i + 1;
        struct vsock_pkt p = conn_next_pkt(d, c, ch);
        /* Every packet tells the guest our fwd_cnt: no separate update is owed now. */
        c->fwd_cnt_sent = c->fwd_cnt;
        c->pending &= ~VSOCK_PEND_CREDIT_UPDATE;
        uint32_t len = write_pkt(ch, &p);
        vsock_conn_update(d, c); /* may free c */
        return len;
    }
    return 0;
}

int vsock_dev_fill_rx(struct vsock_dev *d, struct virtq *rx, const struct vmem *mem)
{
    int sent = 0;
    while (vsock_dev_has_rx_work(d)) {
        struct vq_chain ch;
        int r = virtq_pop(rx, mem, &ch);
        if (r <= 0)
            return r < 0 ? r : sent;
        if (ch.in_len < VSOCK_HDR_LEN) {
            /* Too small for a header: hand it back empty, the driver drops it. */
            d->stats.small_rx_bufs++;
            virtq_push(rx, ch.head, 0);
            continue;
        }
        uint32_t len = emit_one(d, &ch);
        virtq_push(rx, ch.head, len);
        d->stats.pkts_out++;
        sent++;
    }
    return sent;
}
