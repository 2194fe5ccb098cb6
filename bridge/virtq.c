/* Split virtqueue, device side. See virtq.h for the trust model. */
#include "virtq.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

/* Ring sizes for @num entries, including the event-index word the layout always reserves. */
static uint64_t desc_bytes(uint16_t num)
{
    return 16ull * num;
}

static uint64_t avail_bytes(uint16_t num)
{
    return 6ull + 2ull * num;
}

static uint64_t used_bytes(uint16_t num)
{
    return 6ull + 8ull * num;
}

static bool aligned(const void *p, uintptr_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

void virtq_reset(struct virtq *vq)
{
    *vq = (struct virtq){0};
}

int virtq_map(struct virtq *vq, const struct vmem *mem)
{
    vq->mapped = false;
    if (vq->num == 0)
        return -EINVAL;
    void *d = vmem_uva(mem, vq->desc_addr, desc_bytes(vq->num));
    void *a = vmem_uva(mem, vq->avail_addr, avail_bytes(vq->num));
    void *u = vmem_uva(mem, vq->used_addr, used_bytes(vq->num));
    if (!d || !a || !u)
        return -EFAULT;
    /* The spec's alignment rules; they also keep our 16/32-bit accesses naturally aligned. */
    if (!aligned(d, VRING_DESC_ALIGN_SIZE) || !aligned(a, VRING_AVAIL_ALIGN_SIZE) ||
        !aligned(u, VRING_USED_ALIGN_SIZE))
        return -EINVAL;
    vq->desc = d;
    vq->avail = a;
    vq->used = u;
    vq->mapped = true;
    return 0;
}

static int virtq_break(struct virtq *vq, int err)
{
    vq->broken = true;
    vq->error = err;
    return err;
}

static uint16_t avail_idx(const struct virtq *vq)
{
    /* Acquire: the ring entries the driver published before this index are visible after. */
    return le16toh(__atomic_load_n(&vq->avail->idx, __ATOMIC_ACQUIRE));
}

bool virtq_has_avail(const struct virtq *vq)
{
    if (!vq->mapped || vq->broken)
        return false;
    return avail_idx(vq) != vq->last_avail;
}

/* Copy one descriptor out of shared memory field by field, exactly once. */
static struct vring_desc read_desc(const struct virtq *vq, uint16_t i)
{
    const volatile struct vring_desc *vd = &vq->desc[i];
    struct vring_desc d;
    d.addr = le64toh(vd->addr);
    d.len = le32toh(vd->len);
    d.flags = le16toh(vd->flags);
    d.next = le16toh(vd->next);
    return d;
}

/* Translate one descriptor's buffer into segments, splitting it where regions end. */
static int chain_add(struct vq_chain *c, const struct vmem *mem, const struct vring_desc *d)
{
    bool writable = d->flags & VRING_DESC_F_WRITE;
    if (!writable && c->n_in > 0)
        return -EINVAL; /* readable after writable: the spec forbids it */
    uint64_t addr = d->addr;
    uint64_t left = d->len;
    while (left > 0) {
        uint8_t *host;
        uint64_t len;
        int r = vmem_gpa(mem, addr, left, &host, &len);
        if (r < 0)
            return r;
        uint16_t *n = writable ? &c->n_in : &c->n_out;
        if (*n >= VQ_MAX_SEGS)
            return -E2BIG;
        struct vq_seg *seg = writable ? &c->in[*n] : &c->out[*n];
        *seg = (struct vq_seg){.p = host, .len = (uint32_t)len};
        (*n)++;
        *(writable ? &c->in_len : &c->out_len) += len;
        addr += len;
        left -= len;
    }
    return 0;
}

static int walk_chain(const struct virtq *vq, const struct vmem *mem, uint16_t head,
                      struct vq_chain *c)
{
    c->head = head;
    c->n_out = c->n_in = 0;
    c->out_len = c->in_len = 0;
    uint16_t i = head;
    for (unsigned count = 1;; count++) {
        if (i >= vq->num)
            return -ERANGE;
        /* A chain cannot visit more descriptors than exist: anything longer loops. */
        if (count > vq->num || count > VQ_MAX_DESCS)
            return -ELOOP;
        struct vring_desc d = read_desc(vq, i);
        if (d.flags & VRING_DESC_F_INDIRECT)
            return -EINVAL; /* VIRTIO_RING_F_INDIRECT_DESC is not offered */
        int r = chain_add(c, mem, &d);
        if (r < 0)
            return r;
        if (!(d.flags & VRING_DESC_F_NEXT))
            return 0;
        i = d.next;
    }
}

int virtq_pop(struct virtq *vq, const struct vmem *mem, struct vq_chain *c)
{
    if (vq->broken)
        return -EIO;
    if (!vq->mapped)
        return 0;
    uint16_t pending = (uint16_t)(avail_idx(vq) - vq->last_avail);
    if (pending == 0)
        return 0;
    if (pending > vq->num)
        return virtq_break(vq, -EOVERFLOW);
    const volatile uint16_t *ring = vq->avail->ring;
    uint16_t head = le16toh(ring[vq->last_avail % vq->num]);
    int r = walk_chain(vq, mem, head, c);
    if (r < 0)
        return virtq_break(vq, r);
    vq->last_avail++;
    return 1;
}

void virtq_push(struct virtq *vq, uint16_t head, uint32_t len)
{
    if (!vq->mapped || vq->broken)
        return;
    volatile struct vring_used_elem *e = &vq->used->ring[vq->used_idx % vq->num];
    e->id = htole32(head);
    e->len = htole32(len);
    vq->used_idx++;
    /* Release: the element is visible before the index that publishes it. */
    __atomic_store_n(&vq->used->idx, htole16(vq->used_idx), __ATOMIC_RELEASE);
    vq->pushed++;
}

bool virtq_take_notify(struct virtq *vq)
{
    if (vq->pushed == 0 || !vq->mapped)
        return false;
    vq->pushed = 0;
    /* Full barrier: order our used->idx store before reading the driver's flags. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint16_t flags = le16toh(__atomic_load_n(&vq->avail->flags, __ATOMIC_RELAXED));
    return !(flags & VRING_AVAIL_F_NO_INTERRUPT);
}

uint64_t vq_chain_read(const struct vq_chain *c, uint64_t off, void *dst, uint64_t n)
{
    uint64_t done = 0;
    for (unsigned i = 0; i < c->n_out && done < n; i++) {
        const struct vq_seg *s = &c->out[i];
        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        uint64_t k = s->len - off;
        if (k > n - done)
            k = n - done;
        memcpy((uint8_t *)dst + done, s->p + off, k);
        done += k;
        off = 0;
    }
    return done;
}

uint64_t vq_chain_write(const struct vq_chain *c, uint64_t off, const void *src, uint64_t n)
{
    uint64_t done = 0;
    for (unsigned i = 0; i < c->n_in && done < n; i++) {
        const struct vq_seg *s = &c->in[i];
        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        uint64_t k = s->len - off;
        if (k > n - done)
            k = n - done;
        memcpy(s->p + off, (const uint8_t *)src + done, k);
        done += k;
        off = 0;
    }
    return done;
}
