/*
 * Device side of a virtio split virtqueue (virtio 1.2, 2.7), over a vmem table. Pure: no
 * I/O, no eventfds, so it is unit-tested and fuzzed on fake guest memory.
 *
 * Everything in the ring is written by the guest while we read it: each descriptor is copied
 * once into a local before it is checked, and a malformed ring marks the queue broken (it is
 * then ignored until the front-end sets it up again), like a device that needs a reset.
 */
#pragma once

#include <linux/virtio_ring.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmem.h"

/* Largest split queue the spec allows ("Queue Size ... maximum 32768"). */
#define VIRTQ_MAX_SIZE 32768

/*
 * Longest descriptor chain we accept, and most buffer segments per direction. Linux's vsock
 * driver uses one or two descriptors per packet (header + payload), up to MAX_SKB_FRAGS + 2
 * with zero-copy sends; 64 leaves room for any sane driver while bounding the work one chain
 * costs and the size of struct vq_chain (it lives on the stack).
 */
#define VQ_MAX_DESCS 64
#define VQ_MAX_SEGS 64

struct vq_seg {
    uint8_t *p;
    uint32_t len;
};

/* One popped descriptor chain, translated into host segments. */
struct vq_chain {
    uint16_t head;
    uint16_t n_out; /* device-readable segments */
    uint16_t n_in;  /* device-writable segments */
    uint64_t out_len;
    uint64_t in_len;
    struct vq_seg out[VQ_MAX_SEGS];
    struct vq_seg in[VQ_MAX_SEGS];
};

struct virtq {
    uint16_t num; /* queue size from SET_VRING_NUM; 0 = not set */
    bool mapped;  /* the three ring pointers below are valid */
    bool broken;  /* a malformed ring was seen: ignore the queue */
    int error;    /* the -errno that broke it */
    uint16_t last_avail;
    uint16_t used_idx;
    uint16_t pushed;                           /* used entries since the last notification check */
    uint64_t desc_addr, avail_addr, used_addr; /* front-end addresses (SET_VRING_ADDR) */
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
};

/**
 * virtq_map: translate the ring addresses through @mem (after SET_VRING_ADDR, or after a new
 * memory table). Returns 0, -EINVAL (no size, misaligned) or -EFAULT (outside guest memory);
 * on failure the queue is unmapped.
 */
int virtq_map(struct virtq *vq, const struct vmem *mem);

/** virtq_reset: forget everything but nothing else (used on ring stop and teardown). */
void virtq_reset(struct virtq *vq);

/** virtq_has_avail: whether the driver has made a chain available that we did not pop yet. */
bool virtq_has_avail(const struct virtq *vq);

/**
 * virtq_pop: take the next available chain into @c. Returns 1, 0 when none is available, or
 * a -errno when the ring is malformed (the queue is then broken and every later call returns
 * -EIO): -EOVERFLOW avail index ran ahead by more than the queue size, -ERANGE descriptor index
 * out of range, -ELOOP chain loops or is longer than VQ_MAX_DESCS, -EFAULT buffer outside guest
 * memory, -E2BIG too many segments, -EINVAL indirect descriptor (not offered) or a readable
 * descriptor after a writable one.
 */
int virtq_pop(struct virtq *vq, const struct vmem *mem, struct vq_chain *c);

/** virtq_push: return chain @head to the driver, @len bytes written into it. */
void virtq_push(struct virtq *vq, uint16_t head, uint32_t len);

/**
 * virtq_take_notify: whether the driver wants an interrupt for the entries pushed since the
 * last call (VRING_AVAIL_F_NO_INTERRUPT clear). Resets the pushed count.
 */
bool virtq_take_notify(struct virtq *vq);

/** vq_chain_read: copy up to @n bytes at offset @off of the readable part; returns bytes. */
uint64_t vq_chain_read(const struct vq_chain *c, uint64_t off, void *dst, uint64_t n);

/** vq_chain_write: copy up to @n bytes at offset @off of the writable part; returns bytes. */
uint64_t vq_chain_write(const struct vq_chain *c, uint64_t off, const void *src, uint64_t n);
