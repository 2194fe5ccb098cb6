/*
 * The vsock device: connection table, stream state machine and credit flow control, fed from
 * the tx virtqueue and feeding the rx virtqueue (virtio 1.2, 5.10). Pure: it never touches a
 * file descriptor. The host side (hybrid.c) moves bytes between sockets and each connection's
 * two ring buffers and is told about changes through struct vsock_ops.
 *
 * Every packet comes from the guest and is hostile: unknown connections get RST, a guest that
 * ignores our credit gets RST, and nothing a guest does can grow memory beyond
 * max_conns * 2 * conn_buf plus a fixed-size RST queue.
 */
#pragma once

#include <linux/virtio_vsock.h>
#include <stdbool.h>
#include <stdint.h>

#include "ringbuf.h"
#include "virtq.h"

#define VSOCK_HOST_CID 2

/* The guest header, as it travels (little-endian, packed): 44 bytes. */
#define VSOCK_HDR_LEN ((uint32_t)sizeof(struct virtio_vsock_hdr))

/*
 * Largest payload accepted in, or sent in, one packet: Linux's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE
 * (64 KiB). A longer header.len is a lie; sending less per packet only costs headers.
 */
#define VSOCK_MAX_PKT_PAYLOAD (64u * 1024)

/*
 * A host-initiated connection waits this long for the guest's RESPONSE (the brief's ~2 s;
 * a guest that is up answers in well under 100 ms, even under TCG).
 */
#define VSOCK_CONNECT_TIMEOUT_MS 2000

/*
 * A closing connection waits this long for the guest's RST or for the host client to take
 * the last bytes, then is freed anyway: Linux waits 8 s (VSOCK_CLOSE_TIMEOUT) for the same.
 */
#define VSOCK_CLOSE_TIMEOUT_MS 8000

/*
 * RST replies to packets that match no connection wait here for an rx buffer. While it is full
 * we stop reading the tx queue (as Linux's vhost-vsock does), so a guest that floods bogus
 * packets without posting rx buffers only stalls itself. 64 covers a burst from every
 * connection of a default-sized table.
 */
#define VSOCK_RST_QUEUE 64

enum vsock_conn_state {
    VSOCK_CONNECTING, /* host sent REQUEST, waiting for RESPONSE */
    VSOCK_ESTABLISHED,
    VSOCK_CLOSING, /* no more traffic with the guest; draining towards the host */
};

/* Control packets a connection still owes the guest (bit set). */
enum {
    VSOCK_PEND_REQUEST = 1 << 0,
    VSOCK_PEND_RESPONSE = 1 << 1,
    VSOCK_PEND_CREDIT_UPDATE = 1 << 2,
    VSOCK_PEND_SHUTDOWN = 1 << 3,
    VSOCK_PEND_RST = 1 << 4,
};

struct vsock_conn {
    uint32_t host_port;
    uint32_t guest_port;
    enum vsock_conn_state state;
    unsigned pending;     /* VSOCK_PEND_* */
    uint64_t deadline_ms; /* connect or close timeout; 0 = none */
    void *user;           /* host-side owner (NULL once detached) */

    /* guest -> host */
    struct ringbuf to_host;
    uint32_t rx_cnt;       /* payload bytes accepted from the guest */
    uint32_t fwd_cnt;      /* of those, bytes handed to the host */
    uint32_t fwd_cnt_sent; /* fwd_cnt last advertised to the guest */
    uint32_t peer_shut;    /* VIRTIO_VSOCK_SHUTDOWN_* received from the guest */
    bool host_wr_shut;     /* host side told (shutdown(SHUT_WR)) that the guest stopped sending */

    /* host -> guest */
    struct ringbuf to_guest;
    uint32_t tx_cnt; /* payload bytes sent to the guest */
    uint32_t peer_buf_alloc;
    uint32_t peer_fwd_cnt;
    uint32_t local_shut; /* VIRTIO_VSOCK_SHUTDOWN_* sent (or queued) to the guest */
    bool host_eof;       /* the host client will send no more */
    bool host_gone;      /* ... and will not receive either (it closed) */
};

enum vsock_event {
    VSOCK_EV_ESTABLISHED, /* the guest accepted a host-initiated connection */
    VSOCK_EV_CHANGED,     /* buffers, credit or shutdown state changed: re-evaluate the socket */
    VSOCK_EV_CLOSED,      /* the connection is being freed: drop the handle, close the socket */
};

struct vsock_ops {
    /*
     * The guest asks to connect to host @port through the new connection @c. Return 0 after
     * setting c->user, or a -errno to refuse (the guest gets RST and @c is dropped silently).
     */
    int (*connect_host)(void *opaque, struct vsock_conn *c, uint32_t port);
    /* Something happened on @c (its user is still set). */
    void (*event)(void *opaque, struct vsock_conn *c, enum vsock_event ev);
};

struct vsock_stats {
    uint64_t pkts_in, pkts_out;
    uint64_t bytes_in, bytes_out;
    uint64_t bad_pkts;      /* malformed header or length: dropped */
    uint64_t rst_unknown;   /* RST sent for a packet that matched no connection */
    uint64_t credit_abuse;  /* guest sent beyond our credit: connection reset */
    uint64_t refused;       /* guest connects refused (limit, nobody listening) */
    uint64_t rst_dropped;   /* RSTs dropped on a closing timeout */
    uint64_t small_rx_bufs; /* rx chains too small for a header */
};

struct vsock_rst {
    uint64_t src_cid;
    uint32_t src_port;
    uint32_t dst_port;
};

struct vsock_dev {
    uint64_t guest_cid;
    uint32_t conn_buf; /* bytes buffered per connection and direction = our buf_alloc */
    unsigned max_conns;
    uint64_t now_ms; /* set by the caller before each call that may start a timer */

    struct vsock_conn **conns;
    unsigned n_conns;
    unsigned rr;        /* round-robin cursor for rx fairness */
    uint32_t next_port; /* next local port for host-initiated connections */

    struct vsock_rst rst[VSOCK_RST_QUEUE];
    unsigned rst_head, rst_len;

    const struct vsock_ops *ops;
    void *opaque;
    struct vsock_stats stats;
};

/**
 * vsock_dev_init: set up an empty device. @conn_buf is the per-connection, per-direction
 * buffer (also our advertised buf_alloc). Returns 0 or -ENOMEM.
 */
int vsock_dev_init(struct vsock_dev *d, uint64_t guest_cid, unsigned max_conns, uint32_t conn_buf,
                   const struct vsock_ops *ops, void *opaque);

/** vsock_dev_destroy: free every connection (emitting VSOCK_EV_CLOSED) and the table. */
void vsock_dev_destroy(struct vsock_dev *d);

/**
 * vsock_dev_process_tx: consume up to @budget packets from the guest's tx queue. Returns the
 * number consumed, or the queue's -errno if it is malformed. *ret_more is set when packets are
 * left (budget exhausted or the RST queue full: call again after the rx queue moved).
 */
int vsock_dev_process_tx(struct vsock_dev *d, struct virtq *tx, const struct vmem *mem,
                         bool *ret_more);

/**
 * vsock_dev_fill_rx: write pending packets into the guest's rx buffers. Returns the number of
 * packets delivered or the queue's -errno.
 */
int vsock_dev_fill_rx(struct vsock_dev *d, struct virtq *rx, const struct vmem *mem);

/** vsock_dev_has_rx_work: whether some packet waits for an rx buffer. */
bool vsock_dev_has_rx_work(const struct vsock_dev *d);

/** vsock_dev_tick: expire timeouts at d->now_ms. */
void vsock_dev_tick(struct vsock_dev *d);

/** vsock_dev_next_deadline: earliest timeout in ms (monotonic), or 0 when none is armed. */
uint64_t vsock_dev_next_deadline(const struct vsock_dev *d);

/**
 * vsock_connect_guest: open a host-initiated connection to guest @guest_port. Queues a
 * REQUEST; VSOCK_EV_ESTABLISHED or VSOCK_EV_CLOSED follows. Returns 0 or -EMFILE (connection
 * limit), -ENOMEM; *ret_conn is set on success.
 */
int vsock_connect_guest(struct vsock_dev *d, uint32_t guest_port, void *user,
                        struct vsock_conn **ret_conn);

/** vsock_conn_host_read_iov: free space in the to-guest buffer, for a readv from the host. */
unsigned vsock_conn_host_read_iov(const struct vsock_conn *c, struct iovec iov[2]);

/** vsock_conn_host_produced: @n bytes were read from the host into that space. */
void vsock_conn_host_produced(struct vsock_dev *d, struct vsock_conn *c, size_t n);

/** vsock_conn_host_write_iov: bytes from the guest waiting for the host, for a writev. */
unsigned vsock_conn_host_write_iov(const struct vsock_conn *c, struct iovec iov[2]);

/** vsock_conn_host_consumed: @n of those bytes were written to the host (credit returns). */
void vsock_conn_host_consumed(struct vsock_dev *d, struct vsock_conn *c, size_t n);

/** vsock_conn_wants_host_read: whether reading from the host makes progress now. */
bool vsock_conn_wants_host_read(const struct vsock_conn *c);

/**
 * vsock_conn_wants_shut_wr: whether the guest stopped sending and every byte reached the
 * host: the caller should shutdown(SHUT_WR) and call vsock_conn_host_shut_wr().
 */
bool vsock_conn_wants_shut_wr(const struct vsock_conn *c);

/** vsock_conn_host_shut_wr: the host side was told the guest will send no more. */
void vsock_conn_host_shut_wr(struct vsock_dev *d, struct vsock_conn *c);

/**
 * vsock_conn_host_eof: the host client sent its last byte (read returned 0); @gone when it
 * closed completely (it will not read either).
 */
void vsock_conn_host_eof(struct vsock_dev *d, struct vsock_conn *c, bool gone);

/**
 * vsock_conn_host_failed: the host side is gone abruptly (I/O error) or has closed the
 * connection: reset it towards the guest. The connection is detached (no further events).
 */
void vsock_conn_host_failed(struct vsock_dev *d, struct vsock_conn *c);
