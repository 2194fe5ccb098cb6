/*
 * vhost-user back-end control plane (QEMU docs/interop/vhost-user.rst) for a vsock device:
 * features, memory table, vring setup, config space. QEMU is the front-end and connects to
 * us. Under TCG the QEMU process is only as trusted as its guest, so every message is
 * checked: sizes, indices, fds, and memory regions against the size of their file.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "virtq.h"
#include "vmem.h"

/* vsock has rx (0), tx (1) and event (2) queues; QEMU keeps the event queue to itself. */
#define VU_NUM_QUEUES 2
#define VU_QUEUE_RX 0
#define VU_QUEUE_TX 1

/*
 * Largest payload we read: SET_MEM_TABLE (8 + 8 * 32 bytes) and GET_CONFIG (12 + 256) are
 * the biggest messages we understand; anything claiming more than this is broken or hostile,
 * and we drop the connection rather than buffer it.
 */
#define VU_MAX_PAYLOAD 4096

/* Most fds one message carries: SET_MEM_TABLE's one per region. */
#define VU_MAX_FDS VMEM_MAX_REGIONS

enum vu_request {
    VU_GET_FEATURES = 1,
    VU_SET_FEATURES = 2,
    VU_SET_OWNER = 3,
    VU_RESET_OWNER = 4,
    VU_SET_MEM_TABLE = 5,
    VU_SET_LOG_BASE = 6,
    VU_SET_LOG_FD = 7,
    VU_SET_VRING_NUM = 8,
    VU_SET_VRING_ADDR = 9,
    VU_SET_VRING_BASE = 10,
    VU_GET_VRING_BASE = 11,
    VU_SET_VRING_KICK = 12,
    VU_SET_VRING_CALL = 13,
    VU_SET_VRING_ERR = 14,
    VU_GET_PROTOCOL_FEATURES = 15,
    VU_SET_PROTOCOL_FEATURES = 16,
    VU_GET_QUEUE_NUM = 17,
    VU_SET_VRING_ENABLE = 18,
    VU_GET_CONFIG = 24,
    VU_SET_CONFIG = 25,
};

#define VU_FLAG_VERSION 0x1u
#define VU_FLAG_REPLY (1u << 2)
#define VU_FLAG_NEED_REPLY (1u << 3)

#define VU_F_PROTOCOL_FEATURES 30
#define VU_PROTOCOL_F_MQ 0
#define VU_PROTOCOL_F_REPLY_ACK 3
#define VU_PROTOCOL_F_CONFIG 9

/* Bits 0-7 of the u64 of SET_VRING_KICK/CALL/ERR are the index, bit 8 "no fd". */
#define VU_VRING_IDX_MASK 0xffu
#define VU_VRING_NOFD (1u << 8)

struct vu_hdr {
    uint32_t request;
    uint32_t flags;
    uint32_t size;
} __attribute__((packed));

struct vu_vring_state {
    uint32_t index;
    uint32_t num;
} __attribute__((packed));

struct vu_vring_addr {
    uint32_t index;
    uint32_t flags;
    uint64_t desc;
    uint64_t used;
    uint64_t avail;
    uint64_t log;
} __attribute__((packed));

struct vu_mem_region {
    uint64_t gpa;
    uint64_t size;
    uint64_t uva;
    uint64_t mmap_offset;
} __attribute__((packed));

struct vu_mem_table {
    uint32_t nregions;
    uint32_t padding;
    struct vu_mem_region regions[VMEM_MAX_REGIONS];
} __attribute__((packed));

struct vu_config {
    uint32_t offset;
    uint32_t size;
    uint32_t flags;
    uint8_t payload[];
} __attribute__((packed));

struct vu_vring {
    struct virtq vq;
    int kick_fd;
    int call_fd;
    int err_fd;
    struct watch kick_watch;
    bool started; /* kick fd set, not stopped by GET_VRING_BASE */
    bool enabled;
};

struct vu_mapping {
    void *addr;
    size_t len;
};

struct vu_ops {
    /* Queue @q was kicked or (re)started: process it. */
    void (*kick)(void *opaque, unsigned q);
};

struct vu_dev {
    int fd;
    struct loop *loop; /* kick fds are watched here; the socket is watched by the caller */
    bool verbose;

    /* The message being received. */
    union {
        struct vu_hdr hdr;
        uint8_t buf[sizeof(struct vu_hdr) + VU_MAX_PAYLOAD];
    } in;
    size_t have;
    int fds[VU_MAX_FDS];
    unsigned nfds;

    int send_error; /* a reply could not be sent: the connection is dead */

    uint64_t features;          /* acked by SET_FEATURES */
    uint64_t protocol_features; /* acked by SET_PROTOCOL_FEATURES */
    uint64_t guest_cid;

    struct vmem mem;
    struct vu_mapping maps[VMEM_MAX_REGIONS];
    struct vu_vring vr[VU_NUM_QUEUES];

    const struct vu_ops *ops;
    void *opaque;
};

/* Feature bits we offer. */
uint64_t vu_offered_features(void);
uint64_t vu_offered_protocol_features(void);

/**
 * vu_dev_init: take over connected socket @fd (read with MSG_DONTWAIT; the caller watches
 * it and calls vu_dev_receive() when readable). Kick fds are watched in @loop. Returns 0.
 */
int vu_dev_init(struct vu_dev *d, int fd, struct loop *loop, uint64_t guest_cid,
                const struct vu_ops *ops, void *opaque);

/** vu_dev_destroy: unmap guest memory, close every fd including the socket. */
void vu_dev_destroy(struct vu_dev *d);

/**
 * vu_dev_receive: read and handle every complete message available. Returns 0 when the
 * socket is drained, 1 when the front-end closed the connection, or -errno on a protocol
 * error (the caller drops the connection).
 */
int vu_dev_receive(struct vu_dev *d);

/**
 * vu_dev_handle: handle one complete message (@d->in, @d->fds). Exposed for tests and the
 * fuzzer. Returns 0 or -errno when the connection must be dropped.
 */
int vu_dev_handle(struct vu_dev *d);

/** vu_queue_ready: whether queue @q may be processed (started, enabled, mapped, not broken). */
bool vu_queue_ready(const struct vu_dev *d, unsigned q);

/** vu_queue_notify: signal the call eventfd of @q if the driver wants an interrupt. */
void vu_queue_notify(struct vu_dev *d, unsigned q);
