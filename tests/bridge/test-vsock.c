/*
 * The vsock device against a fake guest driver: connection setup both ways, data and credit
 * flow, shutdown, and the hostile cases (unknown connections, bad headers, credit abuse,
 * limits, RST floods, timeouts).
 */
#include <endian.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake-guest.h"
#include "vsock-priv.h"

#define GUEST_PORT 1234
#define HOST_PORT 5000
#define CONN_BUF 4096

struct fx {
    struct fake_guest g;
    struct vsock_dev d;
    int connect_result; /* what the fake host answers to guest connects */
    unsigned connects, established, closed, changed;
    uint32_t last_port;
    int token;
};

static int fake_connect(void *opaque, struct vsock_conn *c, uint32_t port)
{
    struct fx *f = opaque;
    f->connects++;
    f->last_port = port;
    if (f->connect_result < 0)
        return f->connect_result;
    c->user = &f->token;
    return 0;
}

static void fake_event(void *opaque, struct vsock_conn *c, enum vsock_event ev)
{
    struct fx *f = opaque;
    (void)c;
    if (ev == VSOCK_EV_ESTABLISHED)
        f->established++;
    else if (ev == VSOCK_EV_CLOSED)
        f->closed++;
    else
        f->changed++;
}

static const struct vsock_ops fake_ops = {.connect_host = fake_connect, .event = fake_event};

static int setup_n(void **state, unsigned max_conns)
{
    struct fx *f = calloc(1, sizeof(*f));
    fg_init(&f->g, 64);
    assert_int_equal(vsock_dev_init(&f->d, FG_GUEST_CID, max_conns, CONN_BUF, &fake_ops, f), 0);
    f->d.now_ms = 1000;
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_n(state, 8);
}

static int setup_small(void **state)
{
    return setup_n(state, 2);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    vsock_dev_destroy(&f->d);
    fg_fini(&f->g);
    free(f);
    return 0;
}

/* One device round: everything on tx, then everything owed into rx. */
static bool run(struct fx *f)
{
    bool more;
    int r = vsock_dev_process_tx(&f->d, &f->g.q[FG_TX].vq, &f->g.mem, &more);
    assert_true(r >= 0);
    assert_true(vsock_dev_fill_rx(&f->d, &f->g.q[FG_RX].vq, &f->g.mem) >= 0);
    return more;
}

static void send_op(struct fx *f, uint32_t src, uint32_t dst, uint16_t op, const void *data,
                    uint32_t len)
{
    struct virtio_vsock_hdr h = fg_hdr(src, dst, op, len);
    fg_send(&f->g, &h, data, len);
}

/* Receive one packet and check its addressing; returns its op. */
static uint16_t recv_op(struct fx *f, uint32_t host_port, uint32_t guest_port, void *payload,
                        uint32_t *ret_len)
{
    struct virtio_vsock_hdr h;
    uint32_t n = fg_recv(&f->g, &h, payload, 1 << 20);
    assert_true(n >= sizeof(h));
    assert_int_equal(le64toh(h.src_cid), 2);
    assert_int_equal(le64toh(h.dst_cid), FG_GUEST_CID);
    assert_int_equal(le32toh(h.src_port), host_port);
    assert_int_equal(le32toh(h.dst_port), guest_port);
    assert_int_equal(le16toh(h.type), VIRTIO_VSOCK_TYPE_STREAM);
    assert_int_equal(le32toh(h.len), n - sizeof(h));
    if (ret_len)
        *ret_len = le32toh(h.len);
    return le16toh(h.op);
}

static void assert_no_packet(struct fx *f)
{
    struct virtio_vsock_hdr h;
    assert_int_equal(fg_recv(&f->g, &h, NULL, 0), 0);
}

/* Guest connects to HOST_PORT and gets RESPONSE: returns the connection. */
static struct vsock_conn *guest_connect(struct fx *f, uint32_t guest_port)
{
    fg_post_rx(&f->g, 1, 4096);
    send_op(f, guest_port, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, guest_port, NULL, NULL), VIRTIO_VSOCK_OP_RESPONSE);
    struct vsock_conn *c = f->d.conns[f->d.n_conns - 1];
    assert_int_equal(c->state, VSOCK_ESTABLISHED);
    return c;
}

static void test_guest_connect(void **state)
{
    struct fx *f = *state;
    guest_connect(f, GUEST_PORT);
    assert_int_equal(f->connects, 1);
    assert_int_equal(f->last_port, HOST_PORT);
    assert_int_equal(f->d.n_conns, 1);
    assert_int_equal(fg_tx_used(&f->g), 1);
}

static void test_guest_connect_refused(void **state)
{
    struct fx *f = *state;
    f->connect_result = -ECONNREFUSED;
    fg_post_rx(&f->g, 1, 4096);
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.n_conns, 0);
    assert_int_equal(f->closed, 0); /* never had a user */
}

static void test_host_connect(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c;
    assert_int_equal(vsock_connect_guest(&f->d, 80, &f->token, &c), 0);
    fg_post_rx(&f->g, 2, 4096);
    run(f);
    uint32_t hp = c->host_port;
    assert_int_equal(recv_op(f, hp, 80, NULL, NULL), VIRTIO_VSOCK_OP_REQUEST);
    send_op(f, 80, hp, VIRTIO_VSOCK_OP_RESPONSE, NULL, 0);
    run(f);
    assert_int_equal(f->established, 1);
    assert_int_equal(c->state, VSOCK_ESTABLISHED);
    /* Guest resets it: the host side hears CLOSED, nothing goes back. */
    send_op(f, 80, hp, VIRTIO_VSOCK_OP_RST, NULL, 0);
    run(f);
    assert_int_equal(f->closed, 1);
    assert_int_equal(f->d.n_conns, 0);
    assert_no_packet(f);
}

static void test_host_connect_refused_by_guest(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c;
    assert_int_equal(vsock_connect_guest(&f->d, 81, &f->token, &c), 0);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    uint32_t hp = c->host_port;
    assert_int_equal(recv_op(f, hp, 81, NULL, NULL), VIRTIO_VSOCK_OP_REQUEST);
    send_op(f, 81, hp, VIRTIO_VSOCK_OP_RST, NULL, 0);
    run(f);
    assert_int_equal(f->established, 0);
    assert_int_equal(f->closed, 1);
}

static void test_host_eof_before_response(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c;
    assert_int_equal(vsock_connect_guest(&f->d, 83, &f->token, &c), 0);
    ringbuf_push(&c->to_guest, "req", 3);
    vsock_conn_host_eof(&f->d, c, false); /* the client sent its request and shut down */
    fg_post_rx(&f->g, 8, 4096);
    run(f);
    uint32_t hp = c->host_port, len;
    assert_int_equal(recv_op(f, hp, 83, NULL, NULL), VIRTIO_VSOCK_OP_REQUEST);
    send_op(f, 83, hp, VIRTIO_VSOCK_OP_RESPONSE, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, hp, 83, NULL, &len), VIRTIO_VSOCK_OP_RW);
    assert_int_equal(len, 3);
    assert_int_equal(recv_op(f, hp, 83, NULL, NULL), VIRTIO_VSOCK_OP_SHUTDOWN);
    /* The same with nothing sent at all: SHUTDOWN follows RESPONSE at once. */
    assert_int_equal(vsock_connect_guest(&f->d, 84, &f->token, &c), 0);
    vsock_conn_host_eof(&f->d, c, false);
    run(f);
    hp = c->host_port;
    assert_int_equal(recv_op(f, hp, 84, NULL, NULL), VIRTIO_VSOCK_OP_REQUEST);
    send_op(f, 84, hp, VIRTIO_VSOCK_OP_RESPONSE, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, hp, 84, NULL, NULL), VIRTIO_VSOCK_OP_SHUTDOWN);
}

static void test_connect_timeout(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c;
    assert_int_equal(vsock_connect_guest(&f->d, 82, &f->token, &c), 0);
    assert_int_equal(vsock_dev_next_deadline(&f->d), 1000 + VSOCK_CONNECT_TIMEOUT_MS);
    f->d.now_ms += VSOCK_CONNECT_TIMEOUT_MS - 1;
    vsock_dev_tick(&f->d);
    assert_int_equal(f->closed, 0);
    f->d.now_ms += 1;
    vsock_dev_tick(&f->d);
    assert_int_equal(f->closed, 1);
    assert_int_equal(f->d.n_conns, 0);
    assert_int_equal(vsock_dev_next_deadline(&f->d), 0);
}

static void test_guest_to_host_data(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, "hello", 5);
    run(f);
    struct iovec iov[2];
    assert_int_equal(vsock_conn_host_write_iov(c, iov), 1);
    assert_int_equal(iov[0].iov_len, 5);
    assert_memory_equal(iov[0].iov_base, "hello", 5);
    vsock_conn_host_consumed(&f->d, c, 5);
    assert_int_equal(c->fwd_cnt, 5);
    assert_int_equal(c->rx_cnt, 5);
}

static void test_host_to_guest_split(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    uint8_t data[3000];
    for (unsigned i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)i;
    assert_int_equal(ringbuf_push(&c->to_guest, data, sizeof(data)), sizeof(data));
    /* Receive buffers of 1044 bytes: 1000 payload bytes each. */
    fg_post_rx(&f->g, 5, 1044);
    run(f);
    uint8_t got[3000];
    uint32_t off = 0, len;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, got + off, &len), VIRTIO_VSOCK_OP_RW);
        assert_int_equal(len, 1000);
        off += len;
    }
    assert_memory_equal(got, data, sizeof(data));
    assert_no_packet(f);
    assert_int_equal(c->tx_cnt, 3000);
}

static void test_credit_respected(void **state)
{
    struct fx *f = *state;
    fg_post_rx(&f->g, 1, 4096);
    struct virtio_vsock_hdr h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, 0);
    h.buf_alloc = htole32(100); /* the guest can only take 100 bytes */
    fg_send(&f->g, &h, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RESPONSE);
    struct vsock_conn *c = f->d.conns[0];
    uint8_t data[250] = {0};
    ringbuf_push(&c->to_guest, data, sizeof(data));
    fg_post_rx(&f->g, 4, 4096);
    run(f);
    uint32_t len;
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, &len), VIRTIO_VSOCK_OP_RW);
    assert_int_equal(len, 100);
    assert_no_packet(f); /* out of credit */
    /* The guest read 60 bytes: 60 more may go. */
    h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0);
    h.buf_alloc = htole32(100);
    h.fwd_cnt = htole32(60);
    fg_send(&f->g, &h, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, &len), VIRTIO_VSOCK_OP_RW);
    assert_int_equal(len, 60);
    assert_no_packet(f);
}

static void test_lying_fwd_cnt_gives_no_credit(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    c->peer_buf_alloc = 100;
    c->peer_fwd_cnt = 1000; /* claims it consumed bytes we never sent */
    assert_int_equal(vsock_conn_credit(c), 0);
}

static void test_credit_update_after_consume(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    /* The guest fills our whole buffer (its credit). */
    static uint8_t data[CONN_BUF];
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, data, CONN_BUF);
    fg_post_rx(&f->g, 2, 4096);
    run(f);
    assert_no_packet(f);
    assert_int_equal(ringbuf_space(&c->to_host), 0);
    /* The host takes a little: still most of the buffer seen as used, so an update goes. */
    vsock_conn_host_consumed(&f->d, c, 100);
    run(f);
    struct virtio_vsock_hdr h;
    assert_int_equal(fg_recv(&f->g, &h, NULL, 0), sizeof(h));
    assert_int_equal(le16toh(h.op), VIRTIO_VSOCK_OP_CREDIT_UPDATE);
    assert_int_equal(le32toh(h.fwd_cnt), 100);
    assert_int_equal(le32toh(h.buf_alloc), CONN_BUF);
    /* A second write fits into the freed space. */
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, data, 100);
    run(f);
    assert_int_equal(c->state, VSOCK_ESTABLISHED);
    assert_int_equal(c->rx_cnt, CONN_BUF + 100);
}

static void test_credit_request(void **state)
{
    struct fx *f = *state;
    guest_connect(f, GUEST_PORT);
    fg_post_rx(&f->g, 1, 4096);
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_CREDIT_REQUEST, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_CREDIT_UPDATE);
}

static void test_credit_abuse(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    (void)c;
    static uint8_t data[CONN_BUF];
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, data, CONN_BUF);
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, data, 1); /* beyond our credit */
    fg_post_rx(&f->g, 2, 4096);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.stats.credit_abuse, 1);
    assert_int_equal(f->d.n_conns, 0);
    assert_int_equal(f->closed, 1);
}

static void test_unknown_connection_rst(void **state)
{
    struct fx *f = *state;
    fg_post_rx(&f->g, 4, 4096);
    send_op(f, 7, 8, VIRTIO_VSOCK_OP_RW, "x", 1);
    send_op(f, 7, 8, VIRTIO_VSOCK_OP_SHUTDOWN, NULL, 0);
    send_op(f, 7, 8, VIRTIO_VSOCK_OP_RST, NULL, 0); /* never answered */
    run(f);
    assert_int_equal(recv_op(f, 8, 7, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(recv_op(f, 8, 7, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_no_packet(f);
    assert_int_equal(f->d.stats.rst_unknown, 2);
}

static void test_bad_headers(void **state)
{
    struct fx *f = *state;
    fg_post_rx(&f->g, 8, 4096);
    struct virtio_vsock_hdr h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, 0);
    h.type = htole16(VIRTIO_VSOCK_TYPE_SEQPACKET); /* not offered */
    fg_send(&f->g, &h, NULL, 0);
    h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, 0);
    h.src_cid = htole64(99); /* spoofed source: dropped without an answer */
    fg_send(&f->g, &h, NULL, 0);
    h = fg_hdr(GUEST_PORT, HOST_PORT, 99, 0); /* unknown op, unknown connection */
    fg_send(&f->g, &h, NULL, 0);
    /* Chains too short for a header. */
    struct fg_desc d = {fg_alloc(&f->g, 8), 8, false};
    fg_add_chain(&f->g, FG_TX, &d, 1);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_no_packet(f);
    assert_int_equal(f->d.n_conns, 0);
    assert_int_equal(f->connects, 0);
    assert_int_equal(fg_tx_used(&f->g), 4);
}

static void test_dst_not_host(void **state)
{
    struct fx *f = *state;
    fg_post_rx(&f->g, 1, 4096);
    struct virtio_vsock_hdr h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, 0);
    h.dst_cid = htole64(7); /* another VM: not reachable through us */
    fg_send(&f->g, &h, NULL, 0);
    run(f);
    struct virtio_vsock_hdr r;
    assert_int_equal(fg_recv(&f->g, &r, NULL, 0), sizeof(r));
    assert_int_equal(le16toh(r.op), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(le64toh(r.src_cid), 7);
    assert_int_equal(f->connects, 0);
}

static void test_length_lies(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    (void)c;
    /* The header claims 1000 bytes, the chain carries 10. */
    struct virtio_vsock_hdr h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, 1000);
    fg_send(&f->g, &h, "0123456789", 10);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.stats.bad_pkts, 1);
    assert_int_equal(f->d.n_conns, 0);
    /* Larger than any packet may be, even with a chain that long. */
    static uint8_t big[VSOCK_MAX_PKT_PAYLOAD + 1];
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, big, sizeof(big));
    run(f);
    assert_int_equal(f->d.stats.bad_pkts, 2);
}

static void test_max_conns(void **state)
{
    struct fx *f = *state; /* max_conns = 2 */
    guest_connect(f, 1);
    guest_connect(f, 2);
    fg_post_rx(&f->g, 1, 4096);
    send_op(f, 3, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, 3, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.n_conns, 2);
    assert_int_equal(f->d.stats.refused, 1);
    struct vsock_conn *c;
    assert_int_equal(vsock_connect_guest(&f->d, 9, &f->token, &c), -EMFILE);
}

static void test_duplicate_request(void **state)
{
    struct fx *f = *state;
    guest_connect(f, GUEST_PORT);
    fg_post_rx(&f->g, 1, 4096);
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.n_conns, 0);
}

static void test_rst_flood_backpressure(void **state)
{
    struct fx *f = *state;
    /* 100 bogus packets and no rx buffer: only VSOCK_RST_QUEUE are taken, then tx waits. */
    for (int i = 0; i < 60; i++)
        send_op(f, (uint32_t)i, 1, VIRTIO_VSOCK_OP_RW, NULL, 0);
    bool more = run(f);
    assert_false(more);
    for (int i = 0; i < 60; i++) {
        fg_tx_used(&f->g);
        send_op(f, 100 + (uint32_t)i, 1, VIRTIO_VSOCK_OP_RW, NULL, 0);
        run(f);
    }
    assert_int_equal(f->d.rst_len, VSOCK_RST_QUEUE);
    assert_true(virtq_has_avail(&f->g.q[FG_TX].vq));
    more = run(f);
    assert_true(more);
    /* Rx buffers arrive: the RSTs go out, tx moves again. */
    fg_post_rx(&f->g, 64, 128);
    run(f);
    assert_int_equal(f->d.rst_len, 0);
    while (run(f))
        ;
    fg_post_rx(&f->g, 64, 128);
    run(f);
    assert_false(virtq_has_avail(&f->g.q[FG_TX].vq));
}

static void test_guest_closes(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, "bye", 3);
    struct virtio_vsock_hdr h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_SHUTDOWN, 0);
    h.flags = htole32(VIRTIO_VSOCK_SHUTDOWN_RCV | VIRTIO_VSOCK_SHUTDOWN_SEND);
    fg_send(&f->g, &h, NULL, 0);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    /* RST answers at once; the connection lives until the host took "bye". */
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.n_conns, 1);
    assert_int_equal(c->state, VSOCK_CLOSING);
    assert_false(vsock_conn_wants_host_read(c));
    vsock_conn_host_consumed(&f->d, c, 3);
    assert_int_equal(f->d.n_conns, 0);
    assert_int_equal(f->closed, 1);
}

static void test_half_close_both_ways(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    /* The host stops sending: SHUTDOWN(SEND) after its last data. */
    ringbuf_push(&c->to_guest, "last", 4);
    vsock_conn_host_eof(&f->d, c, false);
    fg_post_rx(&f->g, 3, 4096);
    run(f);
    uint32_t len;
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, &len), VIRTIO_VSOCK_OP_RW);
    struct virtio_vsock_hdr h;
    assert_int_equal(fg_recv(&f->g, &h, NULL, 0), sizeof(h));
    assert_int_equal(le16toh(h.op), VIRTIO_VSOCK_OP_SHUTDOWN);
    assert_int_equal(le32toh(h.flags), VIRTIO_VSOCK_SHUTDOWN_SEND);
    /* The guest still talks, then stops sending too. */
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, "reply", 5);
    h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_SHUTDOWN, 0);
    h.flags = htole32(VIRTIO_VSOCK_SHUTDOWN_SEND);
    fg_send(&f->g, &h, NULL, 0);
    run(f);
    assert_false(vsock_conn_wants_shut_wr(c)); /* "reply" not yet delivered */
    vsock_conn_host_consumed(&f->d, c, 5);
    /* Both directions are done: RST ends it. */
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.n_conns, 0);
}

static void test_guest_half_close(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    struct virtio_vsock_hdr h = fg_hdr(GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_SHUTDOWN, 0);
    h.flags = htole32(VIRTIO_VSOCK_SHUTDOWN_SEND);
    fg_send(&f->g, &h, NULL, 0);
    run(f);
    assert_true(vsock_conn_wants_shut_wr(c));
    vsock_conn_host_shut_wr(&f->d, c);
    assert_false(vsock_conn_wants_shut_wr(c));
    /* RW after SHUTDOWN(SEND) is a protocol violation. */
    send_op(f, GUEST_PORT, HOST_PORT, VIRTIO_VSOCK_OP_RW, "x", 1);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
}

static void test_host_gone(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    vsock_conn_host_eof(&f->d, c, true);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    struct virtio_vsock_hdr h;
    assert_int_equal(fg_recv(&f->g, &h, NULL, 0), sizeof(h));
    assert_int_equal(le16toh(h.op), VIRTIO_VSOCK_OP_SHUTDOWN);
    assert_int_equal(le32toh(h.flags), VIRTIO_VSOCK_SHUTDOWN_SEND | VIRTIO_VSOCK_SHUTDOWN_RCV);
    /* The guest never answers: after the close timeout we RST and forget it. */
    f->d.now_ms += VSOCK_CLOSE_TIMEOUT_MS;
    vsock_dev_tick(&f->d);
    assert_int_equal(f->d.n_conns, 0);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
}

static void test_host_failed(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *c = guest_connect(f, GUEST_PORT);
    vsock_conn_host_failed(&f->d, c);
    fg_post_rx(&f->g, 1, 4096);
    run(f);
    assert_int_equal(recv_op(f, HOST_PORT, GUEST_PORT, NULL, NULL), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(f->d.n_conns, 0);
    assert_int_equal(f->closed, 0); /* detached: no event */
}

static void test_small_rx_buffers(void **state)
{
    struct fx *f = *state;
    fg_post_rx(&f->g, 2, 20); /* smaller than a header */
    send_op(f, 7, 8, VIRTIO_VSOCK_OP_RW, NULL, 0);
    run(f);
    assert_int_equal(f->d.stats.small_rx_bufs, 2);
    assert_int_equal(f->d.rst_len, 1); /* still owed */
}

static void test_broken_tx_ring(void **state)
{
    struct fx *f = *state;
    struct vring_avail *avail = fg_ptr(&f->g, f->g.q[FG_TX].avail_gpa);
    avail->idx = htole16(1000);
    bool more;
    assert_int_equal(vsock_dev_process_tx(&f->d, &f->g.q[FG_TX].vq, &f->g.mem, &more), -EOVERFLOW);
}

static void test_fairness(void **state)
{
    struct fx *f = *state;
    struct vsock_conn *a = guest_connect(f, 1), *b = guest_connect(f, 2);
    uint8_t data[2000] = {0};
    ringbuf_push(&a->to_guest, data, sizeof(data));
    ringbuf_push(&b->to_guest, data, sizeof(data));
    fg_post_rx(&f->g, 2, 1044);
    run(f);
    /* One buffer each, not both to the first. */
    struct virtio_vsock_hdr h1, h2;
    fg_recv(&f->g, &h1, NULL, 0);
    fg_recv(&f->g, &h2, NULL, 0);
    assert_int_not_equal(le32toh(h1.dst_port), le32toh(h2.dst_port));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_guest_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_connect_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_connect, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_connect_refused_by_guest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_eof_before_response, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_to_host_data, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_to_guest_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_respected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lying_fwd_cnt_gives_no_credit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_update_after_consume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_credit_abuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_connection_rst, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_headers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dst_not_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_length_lies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_conns, setup_small, teardown),
        cmocka_unit_test_setup_teardown(test_duplicate_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rst_flood_backpressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_close_both_ways, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_half_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_failed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_small_rx_buffers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broken_tx_ring, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fairness, setup, teardown),
    };
    return cmocka_run_group_tests_name("bridge-vsock", tests, NULL, NULL);
}
