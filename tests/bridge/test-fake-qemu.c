/*
 * The sandbox-bridge binary against a fake QEMU: this test is the vhost-user front-end (guest
 * RAM in a memfd, eventfds for kicks and interrupts) and, through fake-guest.c on that shared
 * RAM, the guest's virtio driver. It proves the process end to end without booting anything,
 * both ways (a host client connecting in, the guest connecting out to <uds>_<port>) under the
 * bridge's seccomp filter, then plays a hostile guest (garbage rings, lying descriptors, packet
 * floods) and checks the bridge survives with bounded memory and still exits cleanly.
 *
 * usage: test-fake-qemu PATH-TO-SANDBOX-BRIDGE
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake-frontend.h"
#include "fake-guest.h"
#include "vhost-user.h"

#define GUEST_CID 3
#define QUEUE_SIZE 64
/* The bridge's resident memory may not grow beyond this under attack (its limits are 64
 * connections x 2 x 256 KiB plus small tables; ASan builds need more). */
#define RSS_LIMIT_KB (256 * 1024)

static const char *bridge_path;

struct fx {
    char dir[64], vu[128], uds[128];
    pid_t pid;
    int sock;
    int memfd;
    uint8_t *ram;
    struct fake_guest g;
    int kick[2], call[2];
};

/* ---- the bridge process ----------------------------------------------------------------- */

static pid_t spawn_bridge(struct fx *f)
{
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 3); /* dup2 clears CLOEXEC on the copy */
        char cid[16];
        snprintf(cid, sizeof(cid), "%d", GUEST_CID);
        execl(bridge_path, bridge_path, "--vhost-user", f->vu, "--uds", f->uds, "--guest-cid", cid,
              "--ready-fd", "3", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char buf[8] = "";
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    assert_int_equal(read(p[0], buf, sizeof(buf)), 6);
    assert_memory_equal(buf, "READY\n", 6);
    close(p[0]);
    return pid;
}

static int unix_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return s;
}

/* Wait for the bridge to exit; returns its status (-1 on timeout). */
static int wait_exit(pid_t pid, int timeout_ms)
{
    for (int i = 0; i < timeout_ms / 10; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    return -1;
}

/* A numeric field of /proc/PID/status ("VmRSS", "Seccomp", ...), -1 if absent. */
static long status_field(pid_t pid, const char *name)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    long v = -1;
    size_t n = strlen(name);
    while (fp && fgets(line, sizeof(line), fp))
        if (strncmp(line, name, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%ld", &v) == 1)
            break;
    if (fp)
        fclose(fp);
    return v;
}

static long rss_kb(pid_t pid)
{
    return status_field(pid, "VmRSS");
}

/* The bridge runs under its seccomp filter (mode 2) with no_new_privs (bridge/seccomp-filter.c). */
static void assert_confined(pid_t pid)
{
    assert_int_equal(status_field(pid, "Seccomp"), 2);
    assert_int_equal(status_field(pid, "NoNewPrivs"), 1);
}

/* ---- vhost-user front-end ----------------------------------------------------------------- */

static void vu_send(struct fx *f, uint32_t req, uint32_t flags, const void *payload, uint32_t size,
                    const int *fds, unsigned nfds)
{
    assert_int_equal(fake_frontend_send(f->sock, req, flags, payload, size, fds, nfds),
                     (ssize_t)(sizeof(struct vu_hdr) + size));
}

static uint32_t vu_recv(struct fx *f, uint32_t req, void *payload, size_t max)
{
    struct vu_hdr h;
    assert_int_equal(recv(f->sock, &h, sizeof(h), MSG_WAITALL), sizeof(h));
    assert_int_equal(h.request, req);
    assert_true(h.size <= max);
    if (h.size)
        assert_int_equal(recv(f->sock, payload, h.size, MSG_WAITALL), h.size);
    return h.size;
}

/* A message with REPLY_ACK: the bridge must answer 0. */
static void vu_acked(struct fx *f, uint32_t req, const void *payload, uint32_t size, const int *fds,
                     unsigned nfds)
{
    vu_send(f, req, VU_FLAG_NEED_REPLY, payload, size, fds, nfds);
    uint64_t ack = 99;
    assert_int_equal(vu_recv(f, req, &ack, sizeof(ack)), 8);
    assert_int_equal(ack, 0);
}

static uint64_t vu_get_u64(struct fx *f, uint32_t req)
{
    vu_send(f, req, 0, NULL, 0, NULL, 0);
    uint64_t v;
    assert_int_equal(vu_recv(f, req, &v, sizeof(v)), 8);
    return v;
}

static void setup_vring(struct fx *f, uint32_t q)
{
    struct vu_vring_state s = {q, QUEUE_SIZE};
    vu_acked(f, VU_SET_VRING_NUM, &s, sizeof(s), NULL, 0);
    s.num = 0;
    vu_acked(f, VU_SET_VRING_BASE, &s, sizeof(s), NULL, 0);
    const struct virtq *vq = &f->g.q[q].vq;
    struct vu_vring_addr a = {
        .index = q, .desc = vq->desc_addr, .used = vq->used_addr, .avail = vq->avail_addr};
    vu_acked(f, VU_SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
    uint64_t v = q;
    vu_acked(f, VU_SET_VRING_CALL, &v, 8, &f->call[q], 1);
    vu_acked(f, VU_SET_VRING_KICK, &v, 8, &f->kick[q], 1);
    s = (struct vu_vring_state){q, 1};
    vu_acked(f, VU_SET_VRING_ENABLE, &s, sizeof(s), NULL, 0);
}

/* QEMU's sequence (shared/FINDINGS.md) with this test's memfd as guest RAM. */
static void negotiate(struct fx *f)
{
    uint64_t feat = vu_get_u64(f, VU_GET_FEATURES);
    uint64_t pf = vu_get_u64(f, VU_GET_PROTOCOL_FEATURES);
    vu_send(f, VU_SET_PROTOCOL_FEATURES, 0, &pf, 8, NULL, 0);
    assert_int_equal(vu_get_u64(f, VU_GET_QUEUE_NUM), 2);
    vu_send(f, VU_SET_OWNER, 0, NULL, 0, NULL, 0);
    uint8_t cfg[12 + 8] = {0};
    cfg[4] = 8;
    vu_send(f, VU_GET_CONFIG, 0, cfg, sizeof(cfg), NULL, 0);
    assert_int_equal(vu_recv(f, VU_GET_CONFIG, cfg, sizeof(cfg)), sizeof(cfg));
    assert_int_equal(cfg[12], GUEST_CID);
    vu_acked(f, VU_SET_FEATURES, &feat, 8, NULL, 0);
    struct vu_mem_table t = {.nregions = 1};
    t.regions[0] =
        (struct vu_mem_region){.gpa = FG_RAM_GPA, .size = FG_RAM_SIZE, .uva = FG_RAM_UVA};
    vu_acked(f, VU_SET_MEM_TABLE, &t, 8 + sizeof(struct vu_mem_region), &f->memfd, 1);
    setup_vring(f, FG_RX);
    setup_vring(f, FG_TX);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    strcpy(f->dir, "/tmp/bridge-fakeqemu-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->vu, sizeof(f->vu), "%s/vu.sock", f->dir);
    snprintf(f->uds, sizeof(f->uds), "%s/hy.sock", f->dir);
    f->memfd = memfd_create("guest-ram", MFD_CLOEXEC);
    assert_int_equal(ftruncate(f->memfd, FG_RAM_SIZE), 0);
    f->ram = mmap(NULL, FG_RAM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, f->memfd, 0);
    assert_true(f->ram != MAP_FAILED);
    fg_init_ram(&f->g, QUEUE_SIZE, f->ram);
    for (int q = 0; q < 2; q++) {
        f->kick[q] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        f->call[q] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    }
    f->pid = spawn_bridge(f);
    f->sock = unix_connect(f->vu);
    negotiate(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
    }
    if (f->sock >= 0)
        close(f->sock);
    for (int q = 0; q < 2; q++) {
        close(f->kick[q]);
        close(f->call[q]);
    }
    fg_fini(&f->g);
    munmap(f->ram, FG_RAM_SIZE);
    close(f->memfd);
    unlink(f->vu);
    unlink(f->uds);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* ---- the guest driver --------------------------------------------------------------------- */

static void kick(struct fx *f, int q)
{
    uint64_t one = 1;
    assert_int_equal(write(f->kick[q], &one, 8), 8);
}

/* Wait for the next packet on rx (interrupt, then used ring). */
static uint16_t guest_recv(struct fx *f, struct virtio_vsock_hdr *h, char *buf, size_t max)
{
    for (int i = 0; i < 500; i++) {
        uint32_t n = fg_recv(&f->g, h, buf, max);
        if (n >= sizeof(*h)) {
            if (buf && n - sizeof(*h) < max)
                buf[n - sizeof(*h)] = 0;
            return le16toh(h->op);
        }
        struct pollfd p = {.fd = f->call[FG_RX], .events = POLLIN};
        poll(&p, 1, 10);
        uint64_t v;
        if (read(f->call[FG_RX], &v, 8) < 0 && errno != EAGAIN)
            fail();
    }
    fail_msg("no packet from the bridge");
    return 0;
}

static void guest_send(struct fx *f, uint32_t src, uint32_t dst, uint16_t op, const char *data,
                       uint32_t flags)
{
    uint32_t len = data ? (uint32_t)strlen(data) : 0;
    struct virtio_vsock_hdr h = fg_hdr(src, dst, op, len);
    h.flags = htole32(flags);
    h.src_cid = htole64(GUEST_CID);
    fg_send(&f->g, &h, data, len);
    kick(f, FG_TX);
}

static ssize_t read_line(int fd, char *buf, size_t max)
{
    size_t n = 0;
    while (n + 1 < max) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) != 1 || read(fd, buf + n, 1) != 1)
            return -1;
        if (buf[n++] == '\n')
            break;
    }
    buf[n] = 0;
    return (ssize_t)n;
}

static void test_end_to_end(void **state)
{
    struct fx *f = *state;
    fg_post_rx(&f->g, 16, 4096);
    kick(f, FG_RX);
    int c = unix_connect(f->uds);
    assert_int_equal(write(c, "CONNECT 1234\n", 13), 13);
    struct virtio_vsock_hdr h;
    char buf[128];
    assert_int_equal(guest_recv(f, &h, NULL, 0), VIRTIO_VSOCK_OP_REQUEST);
    uint32_t hp = le32toh(h.src_port);
    assert_int_equal(le32toh(h.dst_port), 1234);
    guest_send(f, 1234, hp, VIRTIO_VSOCK_OP_RESPONSE, NULL, 0);
    assert_true(read_line(c, buf, sizeof(buf)) > 0);
    assert_true(strncmp(buf, "OK ", 3) == 0);
    assert_int_equal(write(c, "hello", 5), 5);
    assert_int_equal(guest_recv(f, &h, buf, sizeof(buf)), VIRTIO_VSOCK_OP_RW);
    assert_string_equal(buf, "hello");
    guest_send(f, 1234, hp, VIRTIO_VSOCK_OP_RW, "world\n", 0);
    assert_true(read_line(c, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "world\n");
    close(c);
    assert_int_equal(guest_recv(f, &h, NULL, 0), VIRTIO_VSOCK_OP_SHUTDOWN);
    guest_send(f, 1234, hp, VIRTIO_VSOCK_OP_RST, NULL, 0);
    /* All of that went through the seccomp allow-list, which is still in place. */
    assert_confined(f->pid);
    /* The front-end leaves: the bridge exits 0 and removes its sockets. */
    close(f->sock);
    f->sock = -1;
    assert_int_equal(wait_exit(f->pid, 5000), 0);
    f->pid = 0;
    assert_int_equal(access(f->vu, F_OK), -1);
    assert_int_equal(access(f->uds, F_OK), -1);
}

static int unix_listen(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    assert_true(snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path) < (int)sizeof(sa.sun_path));
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s, 4), 0);
    return s;
}

/* The guest connects out to host port 5000: relayed to <uds>_5000 both ways, then closed. */
static void test_guest_to_host(void **state)
{
    struct fx *f = *state;
    char path[160];
    snprintf(path, sizeof(path), "%s_5000", f->uds);
    int l = unix_listen(path);
    fg_post_rx(&f->g, 16, 4096);
    kick(f, FG_RX);
    guest_send(f, 700, 5000, VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
    struct virtio_vsock_hdr h;
    char buf[128];
    assert_int_equal(guest_recv(f, &h, NULL, 0), VIRTIO_VSOCK_OP_RESPONSE);
    assert_int_equal(le32toh(h.dst_port), 700);
    assert_int_equal(le32toh(h.src_port), 5000);
    struct pollfd p = {.fd = l, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    assert_true(c >= 0);
    guest_send(f, 700, 5000, VIRTIO_VSOCK_OP_RW, "ping\n", 0);
    assert_true(read_line(c, buf, sizeof(buf)) > 0);
    assert_string_equal(buf, "ping\n");
    assert_int_equal(write(c, "pong\n", 5), 5);
    assert_int_equal(guest_recv(f, &h, buf, sizeof(buf)), VIRTIO_VSOCK_OP_RW);
    assert_string_equal(buf, "pong\n");
    close(c);
    assert_int_equal(guest_recv(f, &h, NULL, 0), VIRTIO_VSOCK_OP_SHUTDOWN);
    guest_send(f, 700, 5000, VIRTIO_VSOCK_OP_RST, NULL, 0);
    close(l);
    unlink(path);
    assert_confined(f->pid);
    close(f->sock);
    f->sock = -1;
    assert_int_equal(wait_exit(f->pid, 5000), 0);
    f->pid = 0;
}

static uint32_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (uint32_t)*s;
}

/* Let the bridge take what was posted (bounded wait for the tx interrupt). */
static void settle(struct fx *f, int timeout_ms)
{
    struct pollfd p = {.fd = f->call[FG_TX], .events = POLLIN};
    uint64_t v;
    if (poll(&p, 1, timeout_ms) == 1 && read(f->call[FG_TX], &v, 8) < 0)
        fail();
    fg_drain(&f->g, FG_RX);
    fg_drain(&f->g, FG_TX);
}

/*
 * One round of hostility. Rounds 0-29 of an epoch keep the rings intact (packet floods with
 * bad types and lying lengths, connects to nobody, rx buffers of odd sizes), later rounds
 * break them (wild descriptor addresses and lengths, garbage over the ring memory).
 */
static void attack(struct fx *f, uint64_t *seed, int round)
{
    uint8_t *rings = fg_ptr(&f->g, FG_RAM_GPA);
    if (round < 30 && round % 2 == 0) {
        for (int i = 0; i < 8; i++) {
            uint32_t src = rnd(seed) % 8, dst = rnd(seed) % 8, op = rnd(seed) % 10;
            struct virtio_vsock_hdr h = fg_hdr(src, dst, (uint16_t)op, rnd(seed) % 16);
            h.src_cid = htole64(GUEST_CID);
            h.type = htole16((uint16_t)(1 + rnd(seed) % 2));
            fg_send(&f->g, &h, "xxxxxxxx", rnd(seed) % 9);
        }
    } else if (round < 30) {
        guest_send(f, rnd(seed), rnd(seed), VIRTIO_VSOCK_OP_REQUEST, NULL, 0);
        fg_post_rx(&f->g, 4, 20 + rnd(seed) % 4096);
    } else if (round < 35) {
        struct fg_desc d[3];
        for (int i = 0; i < 3; i++)
            d[i] = (struct fg_desc){.gpa = ((uint64_t)rnd(seed) << (rnd(seed) % 33)),
                                    .len = rnd(seed),
                                    .write = rnd(seed) & 1};
        fg_add_chain(&f->g, rnd(seed) & 1, d, 1 + rnd(seed) % 3);
    } else {
        for (int i = 0; i < 16; i++)
            rings[rnd(seed) % 0x10000] = (uint8_t)rnd(seed);
    }
    kick(f, FG_TX);
    kick(f, FG_RX);
    settle(f, round < 30 ? 20 : 0); /* a broken queue never interrupts: do not wait */
}

/* What QEMU does when the guest resets the device: stop the rings, set them up afresh. */
static void reset_device(struct fx *f)
{
    for (uint32_t q = 0; q < 2; q++) {
        struct vu_vring_state s = {q, 0};
        vu_send(f, VU_GET_VRING_BASE, 0, &s, sizeof(s), NULL, 0);
        assert_int_equal(vu_recv(f, VU_GET_VRING_BASE, &s, sizeof(s)), sizeof(s));
    }
    memset(f->ram, 0, FG_RAM_SIZE);
    fg_init_ram(&f->g, QUEUE_SIZE, f->ram);
    setup_vring(f, FG_RX);
    setup_vring(f, FG_TX);
}

static void test_hostile_guest(void **state)
{
    struct fx *f = *state;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    /* Epochs of attacks, each on freshly set-up rings (a broken queue is ignored). */
    for (int epoch = 0; epoch < 50; epoch++) {
        reset_device(f);
        for (int round = 0; round < 40; round++)
            attack(f, &seed, round);
        /* A control-plane round trip: the bridge is alive and its loop went around. */
        uint64_t feat = vu_get_u64(f, VU_GET_FEATURES);
        assert_true(feat & (1ull << VU_F_PROTOCOL_FEATURES));
        assert_int_equal(waitpid(f->pid, NULL, WNOHANG), 0);
    }
    long rss = rss_kb(f->pid);
    assert_true(rss > 0 && rss < RSS_LIMIT_KB);
    /* After all that, a well-behaved guest is served again. */
    reset_device(f);
    fg_post_rx(&f->g, 16, 4096);
    kick(f, FG_RX);
    guest_send(f, 77, 9, VIRTIO_VSOCK_OP_RW, "x", 0); /* unknown connection */
    struct virtio_vsock_hdr h;
    assert_int_equal(guest_recv(f, &h, NULL, 0), VIRTIO_VSOCK_OP_RST);
    assert_int_equal(le32toh(h.dst_port), 77);
    close(f->sock);
    f->sock = -1;
    assert_int_equal(wait_exit(f->pid, 5000), 0);
    f->pid = 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH-TO-SANDBOX-BRIDGE\n", argv[0]);
        return 2;
    }
    bridge_path = argv[1];
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_end_to_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_guest_to_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_guest, setup, teardown),
    };
    return cmocka_run_group_tests_name("bridge-fake-qemu", tests, NULL, NULL);
}
