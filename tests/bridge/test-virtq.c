/*
 * Split virtqueue parsing on fake guest memory: good chains, and every way a hostile driver
 * can lie (loops, out-of-range indices and addresses, lengths, oversize chains).
 */
#include <endian.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fake-guest.h"
#include "virtq.h"

struct fixture {
    struct fake_guest g;
    struct vq_chain c;
};

static int setup(void **state)
{
    static struct fixture f;
    fg_init(&f.g, 16);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    fg_fini(&f->g);
    return 0;
}

static struct virtq *tx(struct fixture *f)
{
    return &f->g.q[FG_TX].vq;
}

static struct vring_desc *desc(struct fixture *f)
{
    return fg_ptr(&f->g, f->g.q[FG_TX].desc_gpa);
}

/* Publish @head directly in the avail ring (for hand-made descriptor tables). */
static void publish(struct fixture *f, uint16_t head)
{
    struct fg_queue *fq = &f->g.q[FG_TX];
    struct vring_avail *avail = fg_ptr(&f->g, fq->avail_gpa);
    avail->ring[fq->avail_idx % fq->num] = htole16(head);
    avail->idx = htole16(++fq->avail_idx);
}

static void set_desc(struct fixture *f, uint16_t i, uint64_t gpa, uint32_t len, uint16_t flags,
                     uint16_t next)
{
    desc(f)[i] = (struct vring_desc){
        .addr = htole64(gpa), .len = htole32(len), .flags = htole16(flags), .next = htole16(next)};
}

static void test_empty(void **state)
{
    struct fixture *f = *state;
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 0);
    assert_false(virtq_has_avail(tx(f)));
}

static void test_good_chain(void **state)
{
    struct fixture *f = *state;
    uint64_t a = fg_alloc(&f->g, 100), b = fg_alloc(&f->g, 200), w = fg_alloc(&f->g, 300);
    memcpy(fg_ptr(&f->g, a), "hello", 5);
    struct fg_desc d[] = {{a, 100, false}, {b, 200, false}, {w, 300, true}};
    uint16_t head = fg_add_chain(&f->g, FG_TX, d, 3);
    assert_true(virtq_has_avail(tx(f)));
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 1);
    assert_int_equal(f->c.head, head);
    assert_int_equal(f->c.n_out, 2);
    assert_int_equal(f->c.n_in, 1);
    assert_int_equal(f->c.out_len, 300);
    assert_int_equal(f->c.in_len, 300);
    char buf[5];
    assert_int_equal(vq_chain_read(&f->c, 0, buf, 5), 5);
    assert_memory_equal(buf, "hello", 5);
    /* Reads and writes stop at the chain's end. */
    char big[400];
    assert_int_equal(vq_chain_read(&f->c, 250, big, sizeof(big)), 50);
    assert_int_equal(vq_chain_write(&f->c, 0, big, sizeof(big)), 300);
    virtq_push(tx(f), f->c.head, 7);
    assert_int_equal(fg_tx_used(&f->g), 1);
    assert_true(virtq_take_notify(tx(f)));
    assert_false(virtq_take_notify(tx(f)));
}

static void test_no_interrupt_flag(void **state)
{
    struct fixture *f = *state;
    struct vring_avail *avail = fg_ptr(&f->g, f->g.q[FG_TX].avail_gpa);
    struct fg_desc d = {fg_alloc(&f->g, 64), 64, false};
    fg_add_chain(&f->g, FG_TX, &d, 1);
    avail->flags = htole16(VRING_AVAIL_F_NO_INTERRUPT);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 1);
    virtq_push(tx(f), f->c.head, 0);
    assert_false(virtq_take_notify(tx(f)));
}

static void test_loop(void **state)
{
    struct fixture *f = *state;
    uint64_t a = fg_alloc(&f->g, 16);
    set_desc(f, 0, a, 16, VRING_DESC_F_NEXT, 1);
    set_desc(f, 1, a, 16, VRING_DESC_F_NEXT, 0);
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -ELOOP);
    assert_true(tx(f)->broken);
    /* A broken queue stays broken. */
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EIO);
    assert_false(virtq_has_avail(tx(f)));
}

static void test_self_loop(void **state)
{
    struct fixture *f = *state;
    set_desc(f, 3, fg_alloc(&f->g, 16), 16, VRING_DESC_F_NEXT, 3);
    publish(f, 3);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -ELOOP);
}

static void test_head_out_of_range(void **state)
{
    struct fixture *f = *state;
    publish(f, 16);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -ERANGE);
}

static void test_next_out_of_range(void **state)
{
    struct fixture *f = *state;
    set_desc(f, 0, fg_alloc(&f->g, 16), 16, VRING_DESC_F_NEXT, 0xffff);
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -ERANGE);
}

static void test_addr_outside_memory(void **state)
{
    struct fixture *f = *state;
    set_desc(f, 0, 0x1000, 16, 0, 0); /* below the RAM */
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EFAULT);
}

static void test_addr_huge(void **state)
{
    struct fixture *f = *state;
    set_desc(f, 0, UINT64_MAX - 4, 16, 0, 0); /* would wrap around */
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EFAULT);
}

static void test_length_lies(void **state)
{
    struct fixture *f = *state;
    /* Starts inside the RAM, claims to run 1 MiB past its end. */
    set_desc(f, 0, FG_RAM_GPA + FG_RAM_SIZE - 16, FG_RAM_SIZE, 0, 0);
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EFAULT);
}

static void test_avail_idx_runs_ahead(void **state)
{
    struct fixture *f = *state;
    struct vring_avail *avail = fg_ptr(&f->g, f->g.q[FG_TX].avail_gpa);
    avail->idx = htole16(17); /* 17 > queue size 16 */
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EOVERFLOW);
}

static void test_indirect_refused(void **state)
{
    struct fixture *f = *state;
    set_desc(f, 0, fg_alloc(&f->g, 64), 64, VRING_DESC_F_INDIRECT, 0);
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EINVAL);
}

static void test_readable_after_writable(void **state)
{
    struct fixture *f = *state;
    uint64_t a = fg_alloc(&f->g, 64);
    set_desc(f, 0, a, 64, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
    set_desc(f, 1, a, 64, 0, 0);
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -EINVAL);
}

static void test_wraparound(void **state)
{
    struct fixture *f = *state;
    /* Indices are free-running 16-bit counters: start just below the wrap. */
    struct fg_queue *fq = &f->g.q[FG_TX];
    fq->avail_idx = 65534;
    tx(f)->last_avail = 65534;
    for (int i = 0; i < 4; i++) {
        struct fg_desc d = {fg_alloc(&f->g, 32), 32, false};
        fg_add_chain(&f->g, FG_TX, &d, 1);
        assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 1);
        virtq_push(tx(f), f->c.head, 0);
    }
    assert_int_equal(tx(f)->last_avail, 2);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 0);
}

static void test_zero_length_desc(void **state)
{
    struct fixture *f = *state;
    struct fg_desc d[] = {{fg_alloc(&f->g, 16), 0, false}, {fg_alloc(&f->g, 16), 16, false}};
    fg_add_chain(&f->g, FG_TX, d, 2);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 1);
    assert_int_equal(f->c.n_out, 1);
    assert_int_equal(f->c.out_len, 16);
}

/* A queue bigger than VQ_MAX_DESCS, so that only the chain limit stops a long chain. */
static void test_chain_too_long(void **state)
{
    struct fixture *f = *state;
    fg_fini(&f->g);
    fg_init(&f->g, 128);
    uint64_t a = fg_alloc(&f->g, 16);
    for (uint16_t i = 0; i < VQ_MAX_DESCS + 1; i++)
        set_desc(f, i, a, 16, i < VQ_MAX_DESCS ? VRING_DESC_F_NEXT : 0, (uint16_t)(i + 1));
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), -ELOOP);

    /* Exactly VQ_MAX_DESCS is fine. */
    fg_fini(&f->g);
    fg_init(&f->g, 128);
    a = fg_alloc(&f->g, 16);
    for (uint16_t i = 0; i < VQ_MAX_DESCS; i++)
        set_desc(f, i, a, 16, i + 1 < VQ_MAX_DESCS ? VRING_DESC_F_NEXT : 0, (uint16_t)(i + 1));
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &f->g.mem, &f->c), 1);
    assert_int_equal(f->c.n_out, VQ_MAX_DESCS);
}

/* Two adjacent regions: a buffer may straddle them, and then counts two segments. */
static void test_region_straddle(void **state)
{
    struct fixture *f = *state;
    struct vmem m = {0};
    uint8_t *ram = f->g.ram;
    const uint64_t half = FG_RAM_SIZE / 2;
    assert_int_equal(vmem_add(&m, FG_RAM_GPA, half, FG_RAM_UVA, ram), 0);
    assert_int_equal(vmem_add(&m, FG_RAM_GPA + half, half, FG_RAM_UVA + half, ram + half), 0);
    set_desc(f, 0, FG_RAM_GPA + half - 8, 16, 0, 0);
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &m, &f->c), 1);
    assert_int_equal(f->c.n_out, 2);
    assert_int_equal(f->c.out_len, 16);
    assert_ptr_equal(f->c.out[1].p, ram + half);
}

static void test_too_many_segments(void **state)
{
    struct fixture *f = *state;
    fg_fini(&f->g);
    fg_init(&f->g, 128);
    struct vmem m = {0};
    const uint64_t half = FG_RAM_SIZE / 2;
    vmem_add(&m, FG_RAM_GPA, half, FG_RAM_UVA, f->g.ram);
    vmem_add(&m, FG_RAM_GPA + half, half, FG_RAM_UVA + half, f->g.ram + half);
    /* VQ_MAX_DESCS descriptors, each straddling: twice as many segments as allowed. */
    for (uint16_t i = 0; i < VQ_MAX_DESCS; i++)
        set_desc(f, i, FG_RAM_GPA + half - 8, 16, i + 1 < VQ_MAX_DESCS ? VRING_DESC_F_NEXT : 0,
                 (uint16_t)(i + 1));
    publish(f, 0);
    assert_int_equal(virtq_pop(tx(f), &m, &f->c), -E2BIG);
}

static void test_map_checks(void **state)
{
    struct fixture *f = *state;
    struct virtq vq = *tx(f);
    vq.desc_addr = 0x1234; /* not a QEMU address of guest RAM */
    assert_int_equal(virtq_map(&vq, &f->g.mem), -EFAULT);
    assert_false(vq.mapped);
    vq = *tx(f);
    vq.desc_addr += 8; /* misaligned descriptor table */
    assert_int_equal(virtq_map(&vq, &f->g.mem), -EINVAL);
    vq = *tx(f);
    vq.used_addr = FG_RAM_UVA + FG_RAM_SIZE - 8; /* runs past the end */
    assert_int_equal(virtq_map(&vq, &f->g.mem), -EFAULT);
    vq = *tx(f);
    vq.num = 0;
    assert_int_equal(virtq_map(&vq, &f->g.mem), -EINVAL);
}

static void test_vmem(void **state)
{
    (void)state;
    struct vmem m = {0};
    uint8_t buf[64];
    assert_int_equal(vmem_add(&m, 0, 0, 0, buf), -EINVAL);
    assert_int_equal(vmem_add(&m, UINT64_MAX - 10, 64, 0, buf), -EINVAL);
    assert_int_equal(vmem_add(&m, 0, 64, UINT64_MAX - 10, buf), -EINVAL);
    for (int i = 0; i < VMEM_MAX_REGIONS; i++)
        assert_int_equal(vmem_add(&m, 1000u * (unsigned)i, 64, 0, buf), 0);
    assert_int_equal(vmem_add(&m, 99999, 64, 0, buf), -E2BIG);
    uint8_t *p;
    uint64_t len;
    assert_int_equal(vmem_gpa(&m, 1000 + 60, 100, &p, &len), 0);
    assert_ptr_equal(p, buf + 60);
    assert_int_equal(len, 4);
    assert_int_equal(vmem_gpa(&m, 1000 + 64, 1, &p, &len), -EFAULT);
    assert_null(vmem_uva(&m, 10, 60));
    assert_non_null(vmem_uva(&m, 0, 64));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_interrupt_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_loop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_next_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_addr_outside_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_addr_huge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_length_lies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_avail_idx_runs_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_indirect_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readable_after_writable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wraparound, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_length_desc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain_too_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_straddle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_too_many_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_map_checks, setup, teardown),
        cmocka_unit_test(test_vmem),
    };
    return cmocka_run_group_tests_name("bridge-virtq", tests, NULL, NULL);
}
