/*
 * Fuzz target for the bridge's data plane: the split rings (virtq.c) and the vsock device
 * (vsock.c, vsock-pkt.c) driven by a fake guest whose every move comes from the input. The
 * input is a program: each opcode byte sends a packet, corrupts ring memory, posts raw
 * descriptor chains, posts rx buffers, or acts as the host side (connect, produce, consume,
 * close) or the clock. After each step the device's limits must hold; ASan and UBSan watch
 * the rest (memory errors, leaks, overflow).
 */
#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake-guest.h"
#include "fuzz-bridge.h"
#include "vsock-priv.h"

/* Small limits so that the fuzzer reaches them quickly. */
#define FZ_MAX_CONNS 4
#define FZ_CONN_BUF 4096

#define FZ_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

struct input {
    const uint8_t *p;
    size_t left;
};

static uint8_t u8(struct input *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->p++;
}

static uint32_t u32(struct input *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = v << 8 | u8(in);
    return v;
}

struct fz {
    struct fake_guest g;
    struct vsock_dev d;
    int token;
};

static int fz_connect(void *opaque, struct vsock_conn *c, uint32_t port)
{
    struct fz *f = opaque;
    if (port & 1)
        return -1; /* odd host ports have no listener */
    c->user = &f->token;
    return 0;
}

static void fz_event(void *opaque, struct vsock_conn *c, enum vsock_event ev)
{
    (void)opaque;
    FZ_CHECK(c->user != NULL);
    (void)ev;
}

static const struct vsock_ops fz_ops = {.connect_host = fz_connect, .event = fz_event};

static struct vsock_conn *pick_conn(struct fz *f, struct input *in)
{
    uint8_t i = u8(in);
    return f->d.n_conns ? f->d.conns[i % f->d.n_conns] : NULL;
}

static void op_send(struct fz *f, struct input *in)
{
    /* Ports from a tiny set, or those of an open connection, so that packets meet them. */
    /* One read per statement: the order of evaluation of arguments is unspecified. */
    uint8_t src = u8(in) % 4;
    uint8_t dst = u8(in) % 4;
    uint8_t op = u8(in) % 9;
    struct virtio_vsock_hdr h = fg_hdr(src, dst, op, 0);
    uint8_t v = u8(in);
    struct vsock_conn *c = (v & 16) ? pick_conn(f, in) : NULL;
    if (c) {
        h.src_port = htole32(c->guest_port);
        h.dst_port = htole32(c->host_port);
    }
    if (v & 1)
        h.type = htole16(u8(in));
    if (v & 2)
        h.src_cid = htole64(u8(in));
    if (v & 4)
        h.dst_cid = htole64(u8(in));
    h.flags = htole32(u8(in));
    h.buf_alloc = htole32(u32(in));
    h.fwd_cnt = htole32(u32(in));
    uint32_t len = (uint32_t)u8(in) * 16;
    uint32_t claimed = (v & 8) ? u32(in) : len;
    h.len = htole32(claimed);
    static uint8_t payload[256 * 16];
    for (uint32_t i = 0; i < len; i++)
        payload[i] = (uint8_t)i;
    fg_send(&f->g, &h, payload, len);
}

/* Overwrite bytes of ring memory: descriptors, avail and used rings. */
static void op_scribble(struct fz *f, struct input *in)
{
    uint32_t off = (u32(in) % 0x10000u);
    uint8_t n = u8(in) % 16;
    uint8_t *p = fg_ptr(&f->g, FG_RAM_GPA);
    for (uint8_t i = 0; i < n && off + i < 0x10000u; i++)
        p[off + i] = u8(in);
}

/* A chain of raw descriptors: any address, length, direction. */
static void op_raw_chain(struct fz *f, struct input *in)
{
    struct fg_desc d[8];
    unsigned n = 1 + u8(in) % 8;
    unsigned q = u8(in) & 1;
    for (unsigned i = 0; i < n; i++) {
        uint8_t k = u8(in);
        uint64_t gpa = (k & 1) ? (uint64_t)u32(in) << (k & 0x10 ? 20 : 0)
                               : FG_RAM_GPA + 0x10000 + u32(in) % (FG_RAM_SIZE - 0x10000);
        d[i] = (struct fg_desc){
            .gpa = gpa, .len = (k & 2) ? u32(in) : u8(in) * 8u, .write = (k & 4) != 0};
    }
    fg_add_chain(&f->g, q, d, n);
}

static void op_host(struct fz *f, struct input *in, uint8_t what)
{
    struct vsock_conn *c = pick_conn(f, in), *nc;
    struct iovec iov[2];
    uint32_t n = u8(in) * 32u;
    switch (what) {
    case 0:
        vsock_connect_guest(&f->d, u8(in) % 4, &f->token, &nc);
        return;
    case 1:
        if (c && vsock_conn_host_read_iov(c, iov) > 0) {
            size_t k = n < iov[0].iov_len ? n : iov[0].iov_len;
            memset(iov[0].iov_base, 'h', k);
            vsock_conn_host_produced(&f->d, c, k);
        }
        return;
    case 2:
        if (c)
            vsock_conn_host_consumed(&f->d, c, n);
        return;
    case 3:
        if (c)
            vsock_conn_host_eof(&f->d, c, n & 32);
        return;
    case 4:
        if (c && vsock_conn_wants_shut_wr(c))
            vsock_conn_host_shut_wr(&f->d, c);
        return;
    default:
        if (c)
            vsock_conn_host_failed(&f->d, c);
        return;
    }
}

static void check_limits(const struct fz *f)
{
    FZ_CHECK(f->d.n_conns <= FZ_MAX_CONNS);
    FZ_CHECK(f->d.rst_len <= VSOCK_RST_QUEUE);
    for (unsigned i = 0; i < f->d.n_conns; i++) {
        const struct vsock_conn *c = f->d.conns[i];
        FZ_CHECK(ringbuf_len(&c->to_host) <= FZ_CONN_BUF);
        FZ_CHECK(ringbuf_len(&c->to_guest) <= FZ_CONN_BUF);
        FZ_CHECK((uint32_t)(c->rx_cnt - c->fwd_cnt) == ringbuf_len(&c->to_host) ||
                 c->state == VSOCK_CLOSING);
    }
}

static void step(struct fz *f, struct input *in)
{
    uint8_t op = u8(in);
    bool more;
    switch (op % 13) {
    case 0:
        op_send(f, in);
        break;
    case 1:
        op_scribble(f, in);
        break;
    case 2:
        op_raw_chain(f, in);
        break;
    case 3: {
        unsigned count = 1 + u8(in) % 4;
        fg_post_rx(&f->g, count, u8(in) * 8u);
        break;
    }
    case 4:
        vsock_dev_process_tx(&f->d, &f->g.q[FG_TX].vq, &f->g.mem, &more);
        fg_drain(&f->g, FG_TX);
        break;
    case 5:
        vsock_dev_fill_rx(&f->d, &f->g.q[FG_RX].vq, &f->g.mem);
        fg_drain(&f->g, FG_RX);
        break;
    case 6:
        f->d.now_ms += (uint64_t)u8(in) * 100;
        vsock_dev_tick(&f->d);
        break;
    default:
        op_host(f, in, (uint8_t)(op % 13 - 7));
        break;
    }
    check_limits(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size};
    static struct fz f;
    fg_init(&f.g, (uint16_t)(1u << (u8(&in) % 8))); /* queue sizes 1 .. 128 */
    if (vsock_dev_init(&f.d, FG_GUEST_CID, FZ_MAX_CONNS, FZ_CONN_BUF, &fz_ops, &f) < 0)
        abort();
    f.d.now_ms = 1;
    /* Bounded work per input: every step consumes at least one byte. */
    while (in.left > 0)
        step(&f, &in);
    bool more;
    vsock_dev_process_tx(&f.d, &f.g.q[FG_TX].vq, &f.g.mem, &more);
    vsock_dev_fill_rx(&f.d, &f.g.q[FG_RX].vq, &f.g.mem);
    vsock_dev_destroy(&f.d);
    fg_fini(&f.g);
    return 0;
}
