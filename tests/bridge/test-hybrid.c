/*
 * The host side (hybrid.c) with real unix sockets in a temporary directory, in front of the
 * vsock device and a fake guest: the CONNECT line, "OK <port>", relaying both ways, guest
 * connections to <uds>_<port>, and the refusals (garbage lines, nobody listening, limits).
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake-guest.h"
#include "hybrid.h"
#include "loop.h"
#include "vsock.h"

struct hx {
    struct loop loop;
    struct fake_guest g;
    struct vsock_dev d;
    struct hybrid h;
    char dir[64];
    char uds[128];
    int lfd;
};

static int listen_at(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 8), 0);
    return fd;
}

static int connect_to(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static int setup(void **state)
{
    struct hx *x = calloc(1, sizeof(*x));
    strcpy(x->dir, "/tmp/bridge-test-XXXXXX");
    assert_non_null(mkdtemp(x->dir));
    snprintf(x->uds, sizeof(x->uds), "%s/hy.sock", x->dir);
    x->lfd = listen_at(x->uds);
    assert_int_equal(loop_init(&x->loop), 0);
    fg_init(&x->g, 64);
    assert_int_equal(vsock_dev_init(&x->d, FG_GUEST_CID, 4, 8192, &hybrid_vsock_ops, &x->h), 0);
    assert_int_equal(hybrid_init(&x->h, &x->loop, &x->d, x->uds, x->lfd, 4), 0);
    fg_post_rx(&x->g, 32, 4096);
    *state = x;
    return 0;
}

static int teardown(void **state)
{
    struct hx *x = *state;
    hybrid_destroy(&x->h);
    vsock_dev_destroy(&x->d);
    fg_fini(&x->g);
    loop_fini(&x->loop);
    close(x->lfd);
    unlink(x->uds);
    rmdir(x->dir);
    free(x);
    return 0;
}

/* What the bridge's main loop does, a few times over. */
static void pump(struct hx *x)
{
    for (int i = 0; i < 5; i++) {
        loop_wait(&x->loop, 10);
        x->d.now_ms = loop_now_ms();
        vsock_dev_tick(&x->d);
        hybrid_tick(&x->h, x->d.now_ms);
        bool more;
        vsock_dev_process_tx(&x->d, &x->g.q[FG_TX].vq, &x->g.mem, &more);
        hybrid_sync(&x->h);
        vsock_dev_fill_rx(&x->d, &x->g.q[FG_RX].vq, &x->g.mem);
        hybrid_sync(&x->h);
        hybrid_reap(&x->h);
    }
}

static uint16_t guest_recv(struct hx *x, struct virtio_vsock_hdr *h, char *payload, size_t max)
{
    uint32_t n = fg_recv(&x->g, h, payload, max);
    assert_true(n >= sizeof(*h));
    if (payload && n - sizeof(*h) < max)
        payload[n - sizeof(*h)] = 0;
    return le16toh(h->op);
}

static void guest_send(struct hx *x, uint32_t src, uint32_t dst, uint16_t op, const char *data,
                       uint32_t flags)
{
    uint32_t len = data ? (uint32_t)strlen(data) : 0;
    struct virtio_vsock_hdr h = fg_hdr(src, dst, op, len);
    h.flags = htole32(flags);
    fg_send(&x->g, &h, data, len);
}

static ssize_t read_some(int fd, char *buf, size_t len)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 2000) != 1)
        return -1;
    ssize_t n = read(fd, buf, len - 1);
    if (n >= 0)
        buf[n] = 0;
    return n;
}

static void test_parse_connect(void **state)
{
    (void)state;
    uint32_t port = 0;
    size_t used = 0;
    assert_int_equal(hybrid_parse_connect("CONNECT 1234\n", 13, &port, &used), 1);
    assert_int_equal(port, 1234);
    assert_int_equal(used, 13);
    assert_int_equal(hybrid_parse_connect("CONNECT 4294967295\nrest", 23, &port, &used), 1);
    assert_int_equal(port, 4294967295u);
    assert_int_equal(used, 19);
    assert_int_equal(hybrid_parse_connect("CONN", 4, &port, &used), 0);
    assert_int_equal(hybrid_parse_connect("CONNECT 12", 10, &port, &used), 0);
    assert_int_equal(hybrid_parse_connect("", 0, &port, &used), 0);
    assert_int_equal(hybrid_parse_connect("connect 1\n", 10, &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect("CONNECT \n", 9, &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect("CONNECT 4294967296\n", 19, &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect("CONNECT -1\n", 11, &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect("CONNECT 12 \n", 12, &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect("CONNECT 1\r\n", 11, &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect("GET / HTTP/1.1\r\n", 16, &port, &used), -EINVAL);
    /* Leading zeros never end: the line length limit does. */
    char zeros[64] = "CONNECT ";
    memset(zeros + 8, '0', sizeof(zeros) - 9);
    assert_int_equal(hybrid_parse_connect(zeros, strlen(zeros), &port, &used), -EINVAL);
    assert_int_equal(hybrid_parse_connect(zeros, HYBRID_LINE_MAX - 1, &port, &used), 0);
}

static void test_host_to_guest(void **state)
{
    struct hx *x = *state;
    int c = connect_to(x->uds);
    assert_int_equal(write(c, "CONNECT 1234\nearly", 18), 18);
    pump(x);
    struct virtio_vsock_hdr h;
    char buf[256];
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_REQUEST);
    assert_int_equal(le32toh(h.dst_port), 1234);
    uint32_t hp = le32toh(h.src_port);
    guest_send(x, 1234, hp, VIRTIO_VSOCK_OP_RESPONSE, NULL, 0);
    pump(x);
    char expect[32];
    snprintf(expect, sizeof(expect), "OK %u\n", hp);
    assert_true(read_some(c, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, expect);
    /* Bytes the client sent right after its line arrive first. */
    assert_int_equal(guest_recv(x, &h, buf, sizeof(buf)), VIRTIO_VSOCK_OP_RW);
    assert_string_equal(buf, "early");
    guest_send(x, 1234, hp, VIRTIO_VSOCK_OP_RW, "pong", 0);
    assert_int_equal(write(c, "ping", 4), 4);
    pump(x);
    assert_true(read_some(c, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "pong");
    assert_int_equal(guest_recv(x, &h, buf, sizeof(buf)), VIRTIO_VSOCK_OP_RW);
    assert_string_equal(buf, "ping");
    /* The client half-closes: the guest hears SHUTDOWN(SEND). */
    shutdown(c, SHUT_WR);
    pump(x);
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_SHUTDOWN);
    assert_int_equal(le32toh(h.flags), VIRTIO_VSOCK_SHUTDOWN_SEND);
    /* The guest closes: RST back, and the client reads EOF. */
    guest_send(x, 1234, hp, VIRTIO_VSOCK_OP_SHUTDOWN, NULL,
               VIRTIO_VSOCK_SHUTDOWN_SEND | VIRTIO_VSOCK_SHUTDOWN_RCV);
    pump(x);
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(read_some(c, buf, sizeof(buf)), 0);
    assert_int_equal(x->d.n_conns, 0);
    assert_int_equal(x->h.n_clients, 0);
    close(c);
}

static void test_guest_refuses(void **state)
{
    struct hx *x = *state;
    int c = connect_to(x->uds);
    assert_int_equal(write(c, "CONNECT 99\n", 11), 11);
    pump(x);
    struct virtio_vsock_hdr h;
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_REQUEST);
    guest_send(x, 99, le32toh(h.src_port), VIRTIO_VSOCK_OP_RST, NULL, 0);
    pump(x);
    char buf[64];
    assert_int_equal(read_some(c, buf, sizeof(buf)), 0); /* closed, no OK */
    close(c);
}

static void test_garbage_line(void **state)
{
    struct hx *x = *state;
    int c = connect_to(x->uds);
    assert_int_equal(write(c, "HELLO\n", 6), 6);
    pump(x);
    char buf[64];
    assert_int_equal(read_some(c, buf, sizeof(buf)), 0);
    close(c);
    /* Over-long, no newline. */
    c = connect_to(x->uds);
    char junk[HYBRID_LINE_MAX + 8];
    memset(junk, '1', sizeof(junk));
    memcpy(junk, "CONNECT ", 8);
    assert_int_equal(write(c, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    pump(x);
    ssize_t n = read_some(c, buf, sizeof(buf));
    assert_true(n <= 0); /* EOF, or ECONNRESET for the unread bytes */
    close(c);
    assert_int_equal(x->h.n_clients, 0);
    assert_int_equal(x->d.n_conns, 0);
}

static void test_guest_to_host(void **state)
{
    struct hx *x = *state;
    char path[160];
    snprintf(path, sizeof(path), "%s_7000", x->uds);
    int l = listen_at(path);
    guest_send(x, 555, 7000, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    pump(x);
    struct virtio_vsock_hdr h;
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_RESPONSE);
    int s = accept(l, NULL, NULL);
    assert_true(s >= 0);
    guest_send(x, 555, 7000, VIRTIO_VSOCK_OP_RW, "hi host", 0);
    pump(x);
    char buf[64];
    assert_true(read_some(s, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "hi host");
    assert_int_equal(write(s, "hi guest", 8), 8);
    pump(x);
    assert_int_equal(guest_recv(x, &h, buf, sizeof(buf)), VIRTIO_VSOCK_OP_RW);
    assert_string_equal(buf, "hi guest");
    /* The host side closes completely: SHUTDOWN both ways. */
    close(s);
    pump(x);
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_SHUTDOWN);
    assert_int_equal(le32toh(h.flags), VIRTIO_VSOCK_SHUTDOWN_SEND | VIRTIO_VSOCK_SHUTDOWN_RCV);
    guest_send(x, 555, 7000, VIRTIO_VSOCK_OP_RST, NULL, 0);
    pump(x);
    assert_int_equal(x->d.n_conns, 0);
    close(l);
    unlink(path);
}

static void test_guest_to_nobody(void **state)
{
    struct hx *x = *state;
    guest_send(x, 556, 7001, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    pump(x);
    struct virtio_vsock_hdr h;
    assert_int_equal(guest_recv(x, &h, NULL, 0), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(x->h.n_clients, 0);
}

static void test_pending_limit(void **state)
{
    struct hx *x = *state;
    int c[HYBRID_MAX_PENDING + 1];
    for (int i = 0; i <= HYBRID_MAX_PENDING; i++) {
        c[i] = connect_to(x->uds);
        pump(x);
    }
    assert_int_equal(x->h.n_pending, HYBRID_MAX_PENDING);
    char buf[8];
    assert_int_equal(read_some(c[HYBRID_MAX_PENDING], buf, sizeof(buf)), 0);
    for (int i = 0; i <= HYBRID_MAX_PENDING; i++)
        close(c[i]);
    pump(x);
    assert_int_equal(x->h.n_pending, 0);
    assert_int_equal(x->h.n_clients, 0);
}

static void test_connect_timeout_closes_client(void **state)
{
    struct hx *x = *state;
    int c = connect_to(x->uds);
    pump(x); /* accepted */
    /* The loop slept long since its last pump: the timeout must count from the CONNECT. */
    x->d.now_ms = 1;
    assert_int_equal(write(c, "CONNECT 5\n", 10), 10);
    pump(x);
    assert_int_equal(x->d.n_conns, 1);
    /* The guest never answers: pretend 2 s passed. */
    x->d.now_ms += VSOCK_CONNECT_TIMEOUT_MS;
    vsock_dev_tick(&x->d);
    hybrid_reap(&x->h);
    char buf[8];
    assert_int_equal(read_some(c, buf, sizeof(buf)), 0);
    close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_connect),
        cmocka_unit_test_setup_teardown(test_host_to_guest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_to_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_to_nobody, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_timeout_closes_client, setup, teardown),
    };
    return cmocka_run_group_tests_name("bridge-hybrid", tests, NULL, NULL);
}
