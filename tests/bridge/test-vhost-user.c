/*
 * The vhost-user control plane against a scripted fake front-end (QEMU's side of the socket):
 * feature negotiation, config space, the memory table with real memfds, vring setup and
 * kicks, REPLY_ACK, and refusal of unknown, oversized or malformed messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake-frontend.h"
#include "loop.h"
#include "vhost-user.h"

#define MEM_SIZE (2u << 20)
#define UVA_BASE 0x7f1000000000ull

struct fx {
    struct loop loop;
    struct vu_dev d;
    int qemu; /* the front-end's end of the socket */
    int memfd;
    unsigned kicks[VU_NUM_QUEUES];
};

static void on_kick(void *opaque, unsigned q)
{
    struct fx *f = opaque;
    f->kicks[q]++;
}

static const struct vu_ops ops = {.kick = on_kick};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    assert_int_equal(loop_init(&f->loop), 0);
    vu_dev_init(&f->d, sv[0], &f->loop, 42, &ops, f);
    f->qemu = sv[1];
    f->memfd = memfd_create("guest-ram", MFD_CLOEXEC);
    assert_true(f->memfd >= 0);
    assert_int_equal(ftruncate(f->memfd, MEM_SIZE), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    vu_dev_destroy(&f->d);
    loop_fini(&f->loop);
    close(f->qemu);
    close(f->memfd);
    free(f);
    return 0;
}

static void send_msg(struct fx *f, uint32_t req, uint32_t flags, const void *payload, uint32_t size,
                     const int *fds, unsigned nfds)
{
    assert_int_equal(fake_frontend_send(f->qemu, req, flags, payload, size, fds, nfds),
                     (ssize_t)(sizeof(struct vu_hdr) + size));
}

/* Send and let the back-end handle it; returns vu_dev_receive()'s result. */
static int exchange(struct fx *f, uint32_t req, uint32_t flags, const void *payload, uint32_t size,
                    const int *fds, unsigned nfds)
{
    send_msg(f, req, flags, payload, size, fds, nfds);
    return vu_dev_receive(&f->d);
}

/* Read one reply; checks its header. Returns the payload size. */
static uint32_t get_reply(struct fx *f, uint32_t req, void *payload, size_t max)
{
    struct vu_hdr h;
    assert_int_equal(recv(f->qemu, &h, sizeof(h), MSG_DONTWAIT), sizeof(h));
    assert_int_equal(h.request, req);
    assert_int_equal(h.flags, VU_FLAG_VERSION | VU_FLAG_REPLY);
    assert_true(h.size <= max);
    if (h.size)
        assert_int_equal(recv(f->qemu, payload, h.size, MSG_DONTWAIT), h.size);
    return h.size;
}

static uint64_t get_u64(struct fx *f, uint32_t req)
{
    uint64_t v = 0;
    assert_int_equal(get_reply(f, req, &v, sizeof(v)), 8);
    return v;
}

static void assert_no_reply(struct fx *f)
{
    char c;
    assert_int_equal(recv(f->qemu, &c, 1, MSG_DONTWAIT), -1);
    assert_int_equal(errno, EAGAIN);
}

static void test_features(void **state)
{
    struct fx *f = *state;
    assert_int_equal(exchange(f, VU_GET_FEATURES, 0, NULL, 0, NULL, 0), 0);
    uint64_t feat = get_u64(f, VU_GET_FEATURES);
    assert_true(feat & (1ull << VU_F_PROTOCOL_FEATURES));
    assert_true(feat & (1ull << 32));  /* VIRTIO_F_VERSION_1 */
    assert_false(feat & (1ull << 28)); /* no indirect descriptors */
    assert_int_equal(exchange(f, VU_GET_PROTOCOL_FEATURES, 0, NULL, 0, NULL, 0), 0);
    uint64_t pf = get_u64(f, VU_GET_PROTOCOL_FEATURES);
    assert_int_equal(pf, (1ull << VU_PROTOCOL_F_MQ) | (1ull << VU_PROTOCOL_F_REPLY_ACK) |
                             (1ull << VU_PROTOCOL_F_CONFIG));
    assert_int_equal(exchange(f, VU_SET_PROTOCOL_FEATURES, VU_FLAG_NEED_REPLY, &pf, 8, NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_SET_PROTOCOL_FEATURES), 0);
    assert_int_equal(exchange(f, VU_GET_QUEUE_NUM, 0, NULL, 0, NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_GET_QUEUE_NUM), VU_NUM_QUEUES);
    assert_int_equal(exchange(f, VU_SET_OWNER, 0, NULL, 0, NULL, 0), 0);
    assert_no_reply(f);
    /* Features we never offered are refused. */
    uint64_t bogus = 1ull << 28;
    assert_int_equal(exchange(f, VU_SET_FEATURES, VU_FLAG_NEED_REPLY, &bogus, 8, NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_SET_FEATURES), 1);
    assert_int_equal(exchange(f, VU_SET_FEATURES, VU_FLAG_NEED_REPLY, &feat, 8, NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_SET_FEATURES), 0);
}

static void test_config(void **state)
{
    struct fx *f = *state;
    uint8_t req[12 + 8] = {0};
    uint32_t off = 0, size = 8;
    memcpy(req, &off, 4);
    memcpy(req + 4, &size, 4);
    assert_int_equal(exchange(f, VU_GET_CONFIG, 0, req, sizeof(req), NULL, 0), 0);
    uint8_t out[12 + 8];
    assert_int_equal(get_reply(f, VU_GET_CONFIG, out, sizeof(out)), 20);
    uint64_t cid;
    memcpy(&cid, out + 12, 8);
    assert_int_equal(cid, 42);
    /* Past the end of the 8-byte config space: a zero size says it failed. */
    off = 4;
    memcpy(req, &off, 4);
    assert_int_equal(exchange(f, VU_GET_CONFIG, 0, req, sizeof(req), NULL, 0), 0);
    assert_int_equal(get_reply(f, VU_GET_CONFIG, out, sizeof(out)), 12);
    memcpy(&size, out + 4, 4);
    assert_int_equal(size, 0);
    /* Writing the config is refused. */
    assert_int_equal(exchange(f, VU_SET_CONFIG, VU_FLAG_NEED_REPLY, req, sizeof(req), NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_SET_CONFIG), 1);
}

static void test_unknown_request(void **state)
{
    struct fx *f = *state;
    uint64_t v = 0;
    assert_int_equal(exchange(f, 99, VU_FLAG_NEED_REPLY, &v, 8, NULL, 0), 0);
    assert_int_equal(get_u64(f, 99), 1);
    assert_int_equal(exchange(f, VU_SET_LOG_BASE, 0, &v, 8, NULL, 0), 0);
    assert_no_reply(f);
    /* Wrong payload size for a known request. */
    assert_int_equal(exchange(f, VU_SET_FEATURES, VU_FLAG_NEED_REPLY, &v, 4, NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_SET_FEATURES), 1);
    /* An fd on a message that takes none is closed, not leaked (ASan/valgrind would see). */
    int efd = eventfd(0, EFD_CLOEXEC);
    assert_int_equal(exchange(f, VU_SET_OWNER, 0, NULL, 0, &efd, 1), 0);
    close(efd);
    assert_int_equal(f->d.nfds, 0);
}

static void test_oversized(void **state)
{
    struct fx *f = *state;
    struct vu_hdr h = {
        .request = VU_SET_FEATURES, .flags = VU_FLAG_VERSION, .size = VU_MAX_PAYLOAD + 1};
    assert_int_equal(send(f->qemu, &h, sizeof(h), 0), sizeof(h));
    assert_int_equal(vu_dev_receive(&f->d), -EMSGSIZE);
}

static void test_bad_version(void **state)
{
    struct fx *f = *state;
    struct vu_hdr h = {.request = VU_GET_FEATURES, .flags = 2, .size = 0};
    assert_int_equal(send(f->qemu, &h, sizeof(h), 0), sizeof(h));
    assert_int_equal(vu_dev_receive(&f->d), -EPROTO);
}

static void test_peer_closes(void **state)
{
    struct fx *f = *state;
    /* Half a header, then gone. */
    assert_int_equal(send(f->qemu, "\x01\x00", 2, 0), 2);
    assert_int_equal(vu_dev_receive(&f->d), 0);
    close(f->qemu);
    f->qemu = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_int_equal(vu_dev_receive(&f->d), 1);
}

static void set_mem(struct fx *f, uint64_t size2, int expect_ack)
{
    struct vu_mem_table t = {.nregions = 2};
    t.regions[0] = (struct vu_mem_region){.gpa = 0, .size = MEM_SIZE / 2, .uva = UVA_BASE};
    t.regions[1] = (struct vu_mem_region){.gpa = 0x100000000ull,
                                          .size = size2,
                                          .uva = UVA_BASE + MEM_SIZE / 2,
                                          .mmap_offset = MEM_SIZE / 2};
    int fds[2] = {f->memfd, f->memfd};
    assert_int_equal(exchange(f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &t,
                              8 + 2 * sizeof(struct vu_mem_region), fds, 2),
                     0);
    assert_int_equal(get_u64(f, VU_SET_MEM_TABLE), expect_ack);
}

static void test_mem_table(void **state)
{
    struct fx *f = *state;
    set_mem(f, MEM_SIZE / 2, 0);
    assert_int_equal(f->d.mem.n, 2);
    /* Both regions map the same file: a write through one is seen by a fresh mapping. */
    uint8_t *p = vmem_uva(&f->d.mem, UVA_BASE + MEM_SIZE / 2 + 10, 1);
    assert_non_null(p);
    *p = 0x5a;
    uint8_t *m = mmap(NULL, MEM_SIZE, PROT_READ, MAP_SHARED, f->memfd, 0);
    assert_int_equal(m[MEM_SIZE / 2 + 10], 0x5a);
    munmap(m, MEM_SIZE);
    /* A region reaching past the end of its file is refused; the old table stays. */
    set_mem(f, MEM_SIZE, 1);
    assert_int_equal(f->d.mem.n, 2);
    assert_int_equal(f->d.mem.r[1].size, MEM_SIZE / 2);
    /* Fd count must match the region count. */
    struct vu_mem_table t = {.nregions = 2};
    assert_int_equal(exchange(f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &t,
                              8 + 2 * sizeof(struct vu_mem_region), &f->memfd, 1),
                     0);
    assert_int_equal(get_u64(f, VU_SET_MEM_TABLE), 1);
    /* A non-regular fd (an eventfd) cannot be guest memory. */
    t.nregions = 1;
    t.regions[0] = (struct vu_mem_region){.size = 4096};
    int efd = eventfd(0, EFD_CLOEXEC);
    assert_int_equal(exchange(f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &t,
                              8 + sizeof(struct vu_mem_region), &efd, 1),
                     0);
    assert_int_equal(get_u64(f, VU_SET_MEM_TABLE), 1);
    close(efd);
}

static void vring_state(struct fx *f, uint32_t req, uint32_t index, uint32_t num, int ack)
{
    struct vu_vring_state s = {index, num};
    assert_int_equal(exchange(f, req, VU_FLAG_NEED_REPLY, &s, sizeof(s), NULL, 0), 0);
    assert_int_equal(get_u64(f, req), ack);
}

static void vring_addr(struct fx *f, uint32_t index, uint64_t base, int ack)
{
    struct vu_vring_addr a = {
        .index = index, .desc = base, .avail = base + 0x1000, .used = base + 0x2000};
    assert_int_equal(exchange(f, VU_SET_VRING_ADDR, VU_FLAG_NEED_REPLY, &a, sizeof(a), NULL, 0), 0);
    assert_int_equal(get_u64(f, VU_SET_VRING_ADDR), ack);
}

static void vring_fd(struct fx *f, uint32_t req, uint64_t v, int fd, int ack)
{
    assert_int_equal(exchange(f, req, VU_FLAG_NEED_REPLY, &v, 8, &fd, fd >= 0 ? 1 : 0), 0);
    assert_int_equal(get_u64(f, req), ack);
}

static void test_vring_lifecycle(void **state)
{
    struct fx *f = *state;
    uint64_t feat = vu_offered_features();
    assert_int_equal(exchange(f, VU_SET_FEATURES, 0, &feat, 8, NULL, 0), 0);
    set_mem(f, MEM_SIZE / 2, 0);
    vring_state(f, VU_SET_VRING_NUM, 0, 64, 0);
    vring_state(f, VU_SET_VRING_BASE, 0, 5, 0);
    vring_addr(f, 0, UVA_BASE + 0x10000, 0);
    int kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), call = eventfd(0, EFD_CLOEXEC);
    vring_fd(f, VU_SET_VRING_CALL, 0, call, 0);
    vring_fd(f, VU_SET_VRING_KICK, 0, kick, 0);
    assert_int_equal(f->kicks[0], 1); /* started: process at once */
    /* Protocol features were negotiated: the ring waits for SET_VRING_ENABLE. */
    assert_false(vu_queue_ready(&f->d, 0));
    vring_state(f, VU_SET_VRING_ENABLE, 0, 1, 0);
    assert_true(vu_queue_ready(&f->d, 0));
    /* A kick on the eventfd reaches the ops through the loop. */
    uint64_t one = 1;
    assert_int_equal(write(kick, &one, 8), 8);
    assert_true(loop_wait(&f->loop, 1000) >= 1);
    assert_int_equal(f->kicks[0], 3);
    /* Notify: after a used entry the call eventfd fires. */
    virtq_push(&f->d.vr[0].vq, 0, 0);
    vu_queue_notify(&f->d, 0);
    uint64_t v;
    assert_int_equal(read(call, &v, 8), 8);
    /* GET_VRING_BASE stops the ring and tells where it stopped. */
    struct vu_vring_state s = {0, 0};
    assert_int_equal(exchange(f, VU_GET_VRING_BASE, 0, &s, sizeof(s), NULL, 0), 0);
    assert_int_equal(get_reply(f, VU_GET_VRING_BASE, &s, sizeof(s)), sizeof(s));
    assert_int_equal(s.num, 5);
    assert_false(vu_queue_ready(&f->d, 0));
    close(kick);
    close(call);
}

static void test_vring_refusals(void **state)
{
    struct fx *f = *state;
    set_mem(f, MEM_SIZE / 2, 0);
    vring_state(f, VU_SET_VRING_NUM, VU_NUM_QUEUES, 64, 1); /* no such queue */
    vring_state(f, VU_SET_VRING_NUM, 0, 0, 1);
    vring_state(f, VU_SET_VRING_NUM, 0, 65536, 1);
    vring_state(f, VU_SET_VRING_NUM, 0, 100, 1); /* not a power of two */
    vring_state(f, VU_SET_VRING_BASE, 0, 70000, 1);
    vring_state(f, VU_SET_VRING_ENABLE, 0, 2, 1);
    vring_state(f, VU_SET_VRING_NUM, 1, 256, 0);
    vring_addr(f, 1, 0x1000, 1);                              /* not guest memory */
    vring_addr(f, 1, UVA_BASE + MEM_SIZE - 0x1800, 1);        /* runs off the end */
    vring_addr(f, 7, UVA_BASE, 1);                            /* no such queue */
    vring_fd(f, VU_SET_VRING_KICK, 1 | VU_VRING_NOFD, -1, 1); /* polling: unsupported */
    vring_fd(f, VU_SET_VRING_KICK, 1, -1, 1);                 /* fd missing */
    vring_fd(f, VU_SET_VRING_CALL, 1 | VU_VRING_NOFD, -1, 0);
    int efd = eventfd(0, EFD_CLOEXEC);
    vring_fd(f, VU_SET_VRING_ERR, 9, efd, 1); /* no such queue */
    vring_fd(f, VU_SET_VRING_ERR, 1, efd, 0);
    close(efd);
    assert_false(vu_queue_ready(&f->d, 1));
    assert_false(vu_queue_ready(&f->d, VU_NUM_QUEUES));
}

static void test_ring_survives_new_mem_table(void **state)
{
    struct fx *f = *state;
    set_mem(f, MEM_SIZE / 2, 0);
    vring_state(f, VU_SET_VRING_NUM, 0, 64, 0);
    vring_addr(f, 0, UVA_BASE + 0x10000, 0);
    assert_true(f->d.vr[0].vq.mapped);
    /* The same layout again: remapped, still usable. */
    set_mem(f, MEM_SIZE / 2, 0);
    assert_true(f->d.vr[0].vq.mapped);
    assert_false(f->d.vr[0].vq.broken);
    /* A table without the ring's memory: the ring is broken, not dangling. */
    struct vu_mem_table t = {.nregions = 1};
    t.regions[0] = (struct vu_mem_region){.gpa = 0, .size = 4096, .uva = 0x1000};
    assert_int_equal(exchange(f, VU_SET_MEM_TABLE, VU_FLAG_NEED_REPLY, &t,
                              8 + sizeof(struct vu_mem_region), &f->memfd, 1),
                     0);
    assert_int_equal(get_u64(f, VU_SET_MEM_TABLE), 0);
    assert_true(f->d.vr[0].vq.broken);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_features, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mem_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vring_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vring_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ring_survives_new_mem_table, setup, teardown),
    };
    return cmocka_run_group_tests_name("bridge-vhost-user", tests, NULL, NULL);
}
