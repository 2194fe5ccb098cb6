/*
 * The host side of the bridge: Firecracker's hybrid vsock convention over unix sockets.
 *  - A host client connects to <uds>, writes "CONNECT <port>\n", gets "OK <hostport>\n" once
 *    the guest accepts, then the socket is the stream. Refused or timed out: it is closed.
 *  - A guest connection to host port P is relayed to a new connection to <uds>_P.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "vsock.h"

/* "CONNECT 4294967295\n" is 19 bytes: a longer line is garbage. */
#define HYBRID_LINE_MAX 32

/*
 * A client has this long to send its CONNECT line: one that connects and says nothing would
 * otherwise hold a slot forever.
 */
#define HYBRID_LINE_TIMEOUT_MS 5000

/*
 * Clients still typing their CONNECT line hold no vsock connection yet, so they are bounded
 * separately; past this, new clients are closed at once (which also keeps the listen backlog
 * from filling with clients that never speak).
 */
#define HYBRID_MAX_PENDING 16

enum hybrid_client_state {
    HYBRID_LINE,       /* reading "CONNECT <port>\n" */
    HYBRID_CONNECTING, /* REQUEST sent to the guest, waiting */
    HYBRID_RELAY,      /* bytes flow */
    HYBRID_DEAD,       /* closed, freed by hybrid_reap() */
};

struct hybrid;

struct hybrid_client {
    struct hybrid *h;
    int fd;
    struct watch w;
    enum hybrid_client_state state;
    struct vsock_conn *conn;
    uint64_t deadline_ms; /* CONNECT line timeout */
    bool dirty;           /* re-evaluate I/O interest at the next hybrid_sync() */
    char line[HYBRID_LINE_MAX];
    size_t line_len;
    char prefix[24]; /* "OK <port>\n", sent before any stream byte */
    size_t prefix_len, prefix_off;
};

struct hybrid {
    struct loop *loop;
    struct vsock_dev *vsock;
    const char *uds_path;
    int listen_fd;
    struct watch listen_w;
    struct hybrid_client **clients;
    unsigned n_clients, max_clients;
    unsigned n_pending; /* clients in HYBRID_LINE */
    bool verbose;
};

/**
 * hybrid_parse_connect: parse a "CONNECT <port>\n" line at the start of @buf (@len bytes).
 * Returns 1 with *ret_port and *ret_used (bytes up to and including '\n') set, 0 when more
 * bytes are needed, or -EINVAL for garbage: anything but that exact form with a decimal port
 * that fits 32 bits, or a line longer than HYBRID_LINE_MAX.
 */
int hybrid_parse_connect(const char *buf, size_t len, uint32_t *ret_port, size_t *ret_used);

/**
 * hybrid_init: serve host clients on the already listening @listen_fd. @max_conns bounds the
 * relayed connections (as the vsock device does). Returns 0 or -errno.
 */
int hybrid_init(struct hybrid *h, struct loop *loop, struct vsock_dev *vsock, const char *uds_path,
                int listen_fd, unsigned max_conns);

/** hybrid_destroy: close every client and the listening socket. */
void hybrid_destroy(struct hybrid *h);

/** hybrid_vsock_ops: the callbacks to give the vsock device (opaque = struct hybrid *). */
extern const struct vsock_ops hybrid_vsock_ops;

/** hybrid_sync: flush pending writes and update the I/O interest of changed clients. */
void hybrid_sync(struct hybrid *h);

/** hybrid_tick: expire CONNECT line timeouts at @now_ms. */
void hybrid_tick(struct hybrid *h, uint64_t now_ms);

/** hybrid_next_deadline: earliest CONNECT line timeout, 0 when none. */
uint64_t hybrid_next_deadline(const struct hybrid *h);

/** hybrid_reap: free closed clients (call when no event batch is being dispatched). */
void hybrid_reap(struct hybrid *h);
