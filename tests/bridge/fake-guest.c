/* Fake guest RAM and virtio driver for the tests. See fake-guest.h. */
#include "fake-guest.h"

#include <assert.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>

/* Rings live in the first 64 KiB of the fake RAM, buffers after them. */
#define FG_RING_AREA 0x10000u

static uint64_t uva_of(uint64_t gpa)
{
    return FG_RAM_UVA + (gpa - FG_RAM_GPA);
}

void *fg_ptr(struct fake_guest *g, uint64_t gpa)
{
    assert(gpa >= FG_RAM_GPA && gpa - FG_RAM_GPA < FG_RAM_SIZE);
    return g->ram + (gpa - FG_RAM_GPA);
}

static void queue_init(struct fake_guest *g, unsigned q, uint16_t num, uint64_t base)
{
    struct fg_queue *fq = &g->q[q];
    *fq = (struct fg_queue){.num = num};
    fq->desc_gpa = base;
    fq->avail_gpa = base + 16ull * num;
    fq->used_gpa = (fq->avail_gpa + 6 + 2ull * num + 3) & ~3ull;
    fq->vq.num = num;
    fq->vq.desc_addr = uva_of(fq->desc_gpa);
    fq->vq.avail_addr = uva_of(fq->avail_gpa);
    fq->vq.used_addr = uva_of(fq->used_gpa);
    int r = virtq_map(&fq->vq, &g->mem);
    assert(r == 0);
    (void)r;
}

void fg_init(struct fake_guest *g, uint16_t num)
{
    uint8_t *ram = calloc(1, FG_RAM_SIZE);
    assert(ram);
    fg_init_ram(g, num, ram);
    g->own_ram = true;
}

void fg_init_ram(struct fake_guest *g, uint16_t num, uint8_t *ram)
{
    *g = (struct fake_guest){.ram = ram};
    vmem_add(&g->mem, FG_RAM_GPA, FG_RAM_SIZE, FG_RAM_UVA, g->ram);
    /* Each queue's rings need 16n + 6 + 2n + 6 + 8n bytes: < 32 KiB for n <= 1024. */
    assert(num <= 1024);
    queue_init(g, FG_RX, num, FG_RAM_GPA);
    queue_init(g, FG_TX, num, FG_RAM_GPA + FG_RING_AREA / 2);
    g->heap_base = g->heap = FG_RAM_GPA + FG_RING_AREA;
    g->heap_end = FG_RAM_GPA + FG_RAM_SIZE;
}

void fg_fini(struct fake_guest *g)
{
    if (g->own_ram)
        free(g->ram);
    g->ram = NULL;
}

uint64_t fg_alloc(struct fake_guest *g, uint32_t size)
{
    size = (size + 15) & ~15u;
    assert(size <= g->heap_end - g->heap_base);
    if (g->heap + size > g->heap_end)
        g->heap = g->heap_base;
    uint64_t a = g->heap;
    g->heap += size;
    return a;
}

uint16_t fg_add_chain(struct fake_guest *g, unsigned q, const struct fg_desc *d, unsigned n)
{
    struct fg_queue *fq = &g->q[q];
    struct vring_desc *table = fg_ptr(g, fq->desc_gpa);
    uint16_t head = fq->next_desc;
    for (unsigned i = 0; i < n; i++) {
        uint16_t slot = (uint16_t)((head + i) % fq->num);
        uint16_t next = (uint16_t)((head + i + 1) % fq->num);
        table[slot].addr = htole64(d[i].gpa);
        table[slot].len = htole32(d[i].len);
        table[slot].flags =
            htole16((d[i].write ? VRING_DESC_F_WRITE : 0) | (i + 1 < n ? VRING_DESC_F_NEXT : 0));
        table[slot].next = htole16(next);
    }
    fq->next_desc = (uint16_t)((head + n) % fq->num);
    struct vring_avail *avail = fg_ptr(g, fq->avail_gpa);
    avail->ring[fq->avail_idx % fq->num] = htole16(head);
    fq->avail_idx++;
    __atomic_store_n(&avail->idx, htole16(fq->avail_idx), __ATOMIC_RELEASE);
    return head;
}

struct virtio_vsock_hdr fg_hdr(uint32_t src_port, uint32_t dst_port, uint16_t op, uint32_t len)
{
    return (struct virtio_vsock_hdr){
        .src_cid = htole64(FG_GUEST_CID),
        .dst_cid = htole64(2),
        .src_port = htole32(src_port),
        .dst_port = htole32(dst_port),
        .len = htole32(len),
        .type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
        .op = htole16(op),
        .buf_alloc = htole32(256 * 1024),
    };
}

void fg_send(struct fake_guest *g, const struct virtio_vsock_hdr *h, const void *payload,
             uint32_t len)
{
    struct fg_desc d[2];
    d[0] = (struct fg_desc){.gpa = fg_alloc(g, sizeof(*h)), .len = sizeof(*h)};
    memcpy(fg_ptr(g, d[0].gpa), h, sizeof(*h));
    unsigned n = 1;
    if (len > 0) {
        d[1] = (struct fg_desc){.gpa = fg_alloc(g, len), .len = len};
        memcpy(fg_ptr(g, d[1].gpa), payload, len);
        n = 2;
    }
    fg_add_chain(g, FG_TX, d, n);
}

void fg_post_rx(struct fake_guest *g, unsigned count, uint32_t size)
{
    const uint32_t hl = sizeof(struct virtio_vsock_hdr);
    for (unsigned i = 0; i < count; i++) {
        struct fg_desc d[2];
        d[0] = (struct fg_desc){.gpa = fg_alloc(g, hl), .len = hl, .write = true};
        unsigned n = 1;
        if (size > hl) {
            d[1] = (struct fg_desc){.gpa = fg_alloc(g, size - hl), .len = size - hl, .write = true};
            n = 2;
        } else {
            d[0].len = size;
        }
        fg_add_chain(g, FG_RX, d, n);
    }
}

static struct vring_used_elem take_used(struct fake_guest *g, unsigned q, bool *ok)
{
    struct fg_queue *fq = &g->q[q];
    struct vring_used *used = fg_ptr(g, fq->used_gpa);
    uint16_t idx = le16toh(__atomic_load_n(&used->idx, __ATOMIC_ACQUIRE));
    *ok = idx != fq->used_seen;
    if (!*ok)
        return (struct vring_used_elem){0};
    return used->ring[fq->used_seen++ % fq->num];
}

/* Copy @n bytes at offset @off of the chain starting at @head into @dst. */
static void chain_copy(struct fake_guest *g, unsigned q, uint16_t head, uint32_t off, void *dst,
                       uint32_t n)
{
    struct vring_desc *table = fg_ptr(g, g->q[q].desc_gpa);
    uint16_t i = head;
    uint8_t *out = dst;
    while (n > 0) {
        uint32_t len = le32toh(table[i].len);
        if (off < len) {
            uint32_t k = len - off < n ? len - off : n;
            memcpy(out, fg_ptr(g, le64toh(table[i].addr)) + off, k);
            out += k;
            n -= k;
            off = 0;
        } else {
            off -= len;
        }
        if (!(le16toh(table[i].flags) & VRING_DESC_F_NEXT))
            break;
        i = le16toh(table[i].next);
    }
}

uint32_t fg_recv(struct fake_guest *g, struct virtio_vsock_hdr *h, void *payload, size_t max)
{
    bool ok;
    struct vring_used_elem e = take_used(g, FG_RX, &ok);
    if (!ok)
        return 0;
    uint32_t len = le32toh(e.len);
    uint16_t head = (uint16_t)le32toh(e.id);
    memset(h, 0, sizeof(*h));
    if (len >= sizeof(*h)) {
        chain_copy(g, FG_RX, head, 0, h, sizeof(*h));
        uint32_t plen = len - (uint32_t)sizeof(*h);
        if (payload && max > 0)
            chain_copy(g, FG_RX, head, sizeof(*h), payload, plen < max ? plen : (uint32_t)max);
    }
    return len;
}

unsigned fg_drain(struct fake_guest *g, unsigned q)
{
    unsigned n = 0;
    bool ok = true;
    while (take_used(g, q, &ok), ok)
        n++;
    return n;
}

unsigned fg_tx_used(struct fake_guest *g)
{
    return fg_drain(g, FG_TX);
}
