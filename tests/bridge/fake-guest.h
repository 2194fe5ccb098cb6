/*
 * A fake guest for the bridge's unit tests and fuzz target: a malloc'd buffer as guest RAM
 * behind a vmem table, and a minimal virtio driver that lays out split rings, posts
 * descriptor chains and reads the used rings, so that the device code runs exactly as it does
 * on QEMU's shared memory.
 */
#pragma once

#include <linux/virtio_vsock.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "virtq.h"
#include "vmem.h"

#define FG_RAM_GPA 0x100000ull       /* guest-physical address of the fake RAM */
#define FG_RAM_UVA 0x7f0000000000ull /* where "QEMU" has it mapped */
#define FG_RAM_SIZE (1u << 20)
#define FG_RX 0
#define FG_TX 1
#define FG_GUEST_CID 3

struct fg_desc {
    uint64_t gpa;
    uint32_t len;
    bool write;
};

struct fg_queue {
    struct virtq vq; /* the device's view */
    uint16_t num;
    uint64_t desc_gpa, avail_gpa, used_gpa;
    uint16_t avail_idx; /* driver: next avail index */
    uint16_t used_seen; /* driver: used entries consumed */
    uint16_t next_desc; /* driver: next descriptor slot (round robin) */
};

struct fake_guest {
    uint8_t *ram;
    bool own_ram;
    struct vmem mem;
    struct fg_queue q[2];
    uint64_t heap; /* bump allocator for buffers, wraps around */
    uint64_t heap_base, heap_end;
};

/** fg_init: RAM, a one-region table and two mapped queues of @num entries. */
void fg_init(struct fake_guest *g, uint16_t num);

/** fg_init_ram: the same on caller-owned RAM of FG_RAM_SIZE bytes (e.g. a shared memfd). */
void fg_init_ram(struct fake_guest *g, uint16_t num, uint8_t *ram);
void fg_fini(struct fake_guest *g);

/** fg_ptr: host pointer for guest-physical @gpa (must be inside the fake RAM). */
void *fg_ptr(struct fake_guest *g, uint64_t gpa);

/** fg_alloc: @size bytes of guest RAM for a buffer (16-byte aligned, recycled cyclically). */
uint64_t fg_alloc(struct fake_guest *g, uint32_t size);

/** fg_add_chain: write @n chained descriptors and publish the head. Returns the head. */
uint16_t fg_add_chain(struct fake_guest *g, unsigned q, const struct fg_desc *d, unsigned n);

/** fg_hdr: a little-endian vsock header from the guest (src = guest CID, dst = host). */
struct virtio_vsock_hdr fg_hdr(uint32_t src_port, uint32_t dst_port, uint16_t op, uint32_t len);

/** fg_send: put a packet on tx as two descriptors (header, payload) like Linux 6.1. */
void fg_send(struct fake_guest *g, const struct virtio_vsock_hdr *h, const void *payload,
             uint32_t len);

/** fg_post_rx: post @count receive buffers of @size bytes (header + payload, 2 descs). */
void fg_post_rx(struct fake_guest *g, unsigned count, uint32_t size);

/**
 * fg_recv: take the next used rx buffer. Returns the bytes written into it (header included),
 * 0 when none is used yet; the header and up to @max payload bytes are copied out.
 */
uint32_t fg_recv(struct fake_guest *g, struct virtio_vsock_hdr *h, void *payload, size_t max);

/** fg_tx_used: number of tx chains the device returned since the last call. */
unsigned fg_tx_used(struct fake_guest *g);

/**
 * fg_drain: consume queue @q's used entries without looking into the buffers (whose
 * descriptors a fuzzer may have scribbled over). Returns how many.
 */
unsigned fg_drain(struct fake_guest *g, unsigned q);
