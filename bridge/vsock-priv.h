/* Shared between vsock.c (connections, state machine) and vsock-pkt.c (packets on rings). */
#pragma once

#include "vsock.h"

/* A header in host byte order. */
struct vsock_pkt {
    uint64_t src_cid, dst_cid;
    uint32_t src_port, dst_port;
    uint32_t len;
    uint16_t type, op;
    uint32_t flags, buf_alloc, fwd_cnt;
};

/* Find the connection of (host port, guest port), or NULL. */
struct vsock_conn *vsock_conn_find(const struct vsock_dev *d, uint32_t host_port,
                                   uint32_t guest_port);

/* Allocate a connection in the table (no user yet). NULL: limit reached or out of memory. */
struct vsock_conn *vsock_conn_new(struct vsock_dev *d, uint32_t host_port, uint32_t guest_port);

/* Free @c: VSOCK_EV_CLOSED first if it still has a user. */
void vsock_conn_free(struct vsock_dev *d, struct vsock_conn *c);

/* Reset @c towards the guest: RST goes out, then the connection is freed. */
void vsock_conn_close(struct vsock_dev *d, struct vsock_conn *c, bool drop_to_host);

/* Re-evaluate @c after any change: shutdowns, graceful end, freeing. May free @c. */
void vsock_conn_update(struct vsock_dev *d, struct vsock_conn *c);

/* Tell the host side that @c changed. */
void vsock_conn_changed(struct vsock_dev *d, struct vsock_conn *c);

/* Credit the guest gives us for sending: bytes we may still send. */
uint32_t vsock_conn_credit(const struct vsock_conn *c);

/* Whether @c may send payload now (established, data buffered, credit left). */
bool vsock_conn_data_sendable(const struct vsock_conn *c);

/* Whether @c has a packet for the guest right now. */
bool vsock_conn_has_rx_work(const struct vsock_conn *c);

/* Queue an RST answering @p (which matched no connection). false if the queue is full. */
bool vsock_rst_push(struct vsock_dev *d, const struct vsock_pkt *p);
