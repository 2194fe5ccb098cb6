/*
 * One bridge per VM: the vhost-user connection from QEMU, the vsock device behind it, and the
 * hybrid unix sockets for the host. Ties the pure parts (virtq, vsock) to file descriptors.
 */
#pragma once

#include <stdbool.h>

#include "hybrid.h"
#include "loop.h"
#include "options.h"
#include "vhost-user.h"
#include "vsock.h"

struct bridge {
    struct options opt;
    struct loop loop;
    int vu_listen_fd;
    int uds_listen_fd;
    bool vu_listening, uds_listening; /* we created the socket files: unlink them on exit */
    struct watch vu_listen_w;
    struct watch vu_conn_w;
    bool vu_connected;
    struct vu_dev vu;
    struct vsock_dev vsock;
    struct hybrid hy;
    bool more; /* work left over: poll again without sleeping */
    bool broken_logged[VU_NUM_QUEUES];
    bool quit;
    int exit_code;
};

/**
 * bridge_start: listen on both sockets (refusing paths that exist) and set everything up.
 * Returns 0, or -errno after printing why; bridge_stop() must be called either way.
 */
int bridge_start(struct bridge *b, const struct options *opt);

/** bridge_pump: run the devices after an event batch: timers, tx, host I/O, rx, interrupts. */
void bridge_pump(struct bridge *b);

/** bridge_timeout_ms: how long the loop may sleep (-1 = until an event). */
int bridge_timeout_ms(const struct bridge *b);

/** bridge_stop: close everything and unlink the socket files we created. */
void bridge_stop(struct bridge *b);
