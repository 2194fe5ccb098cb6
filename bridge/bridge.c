/* Wiring of one VM's bridge. See bridge.h. */
#include "bridge.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Listen backlog: QEMU connects once; host clients beyond this retry (and are bounded anyway). */
#define BRIDGE_BACKLOG 16

static int listen_unix(const char *path, int *ret_fd)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        fprintf(stderr, "sandbox-bridge: %s already exists (a stale socket? remove it)\n", path);
        return -EEXIST;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = -errno;
        fprintf(stderr, "sandbox-bridge: socket: %s\n", strerror(errno));
        return err;
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, BRIDGE_BACKLOG) < 0) {
        int err = -errno;
        fprintf(stderr, "sandbox-bridge: listen on %s: %s\n", path, strerror(errno));
        close(fd);
        return err;
    }
    *ret_fd = fd;
    return 0;
}

/* ---- vhost-user ------------------------------------------------------------------------- */

static void on_vu_kick(void *opaque, unsigned q)
{
    struct bridge *b = opaque;
    (void)q;
    b->more = true; /* the pump after this event batch processes the queues */
}

static const struct vu_ops vu_ops = {.kick = on_vu_kick};

static void on_vu_readable(struct watch *w, uint32_t events)
{
    struct bridge *b = w->ctx;
    (void)events;
    int r = vu_dev_receive(&b->vu);
    if (r == 0)
        return;
    if (r > 0) {
        if (b->opt.verbose)
            fprintf(stderr, "sandbox-bridge: QEMU closed the vhost-user connection\n");
        b->exit_code = 0;
    } else {
        fprintf(stderr, "sandbox-bridge: vhost-user protocol error: %s\n", strerror(-r));
        b->exit_code = 1;
    }
    b->quit = true;
    loop_unwatch(&b->loop, w);
}

static void on_vu_accept(struct watch *w, uint32_t events)
{
    struct bridge *b = w->ctx;
    (void)events;
    int fd = accept4(b->vu_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
        return;
    if (b->vu_connected) {
        /* One front-end per bridge: a second one would fight over the same rings. */
        fprintf(stderr, "sandbox-bridge: refusing a second vhost-user connection\n");
        close(fd);
        return;
    }
    vu_dev_init(&b->vu, fd, &b->loop, b->opt.guest_cid, &vu_ops, b);
    b->vu.verbose = b->opt.verbose;
    if (loop_watch(&b->loop, &b->vu_conn_w, fd, EPOLLIN, on_vu_readable, b) < 0) {
        vu_dev_destroy(&b->vu);
        return;
    }
    b->vu_connected = true;
}

/* ---- pump ------------------------------------------------------------------------------- */

static void check_queue(struct bridge *b, unsigned q, int r)
{
    if (r >= 0 || b->broken_logged[q])
        return;
    b->broken_logged[q] = true;
    fprintf(stderr, "sandbox-bridge: guest broke the %s queue (%s); ignoring it\n",
            q == VU_QUEUE_RX ? "rx" : "tx", strerror(-r));
}

void bridge_pump(struct bridge *b)
{
    uint64_t now = loop_now_ms();
    b->vsock.now_ms = now;
    vsock_dev_tick(&b->vsock);
    hybrid_tick(&b->hy, now);
    b->more = false;
    bool tx_more = false;
    if (b->vu_connected && vu_queue_ready(&b->vu, VU_QUEUE_TX))
        check_queue(
            b, VU_QUEUE_TX,
            vsock_dev_process_tx(&b->vsock, &b->vu.vr[VU_QUEUE_TX].vq, &b->vu.mem, &tx_more));
    hybrid_sync(&b->hy);
    if (b->vu_connected && vu_queue_ready(&b->vu, VU_QUEUE_RX))
        check_queue(b, VU_QUEUE_RX,
                    vsock_dev_fill_rx(&b->vsock, &b->vu.vr[VU_QUEUE_RX].vq, &b->vu.mem));
    hybrid_sync(&b->hy);
    if (b->vu_connected) {
        vu_queue_notify(&b->vu, VU_QUEUE_TX);
        vu_queue_notify(&b->vu, VU_QUEUE_RX);
    }
    hybrid_reap(&b->hy);
    /* tx stopped on its budget, or on a full RST queue that rx has since drained. */
    if (tx_more && b->vsock.rst_len < VSOCK_RST_QUEUE)
        b->more = true;
}

int bridge_timeout_ms(const struct bridge *b)
{
    if (b->more)
        return 0;
    uint64_t t1 = vsock_dev_next_deadline(&b->vsock);
    uint64_t t2 = hybrid_next_deadline(&b->hy);
    uint64_t t = !t1 ? t2 : !t2 ? t1 : (t1 < t2 ? t1 : t2);
    if (!t)
        return -1;
    uint64_t now = loop_now_ms();
    /* +1: wake just after the deadline, not just before it. */
    return t <= now ? 0 : (int)(t - now + 1);
}

/* ---- lifetime --------------------------------------------------------------------------- */

int bridge_start(struct bridge *b, const struct options *opt)
{
    *b = (struct bridge){.opt = *opt, .vu_listen_fd = -1, .uds_listen_fd = -1};
    b->loop.epfd = -1;
    int r = loop_init(&b->loop);
    if (r < 0) {
        fprintf(stderr, "sandbox-bridge: epoll: %s\n", strerror(-r));
        return r;
    }
    r = vsock_dev_init(&b->vsock, opt->guest_cid, opt->max_conns, opt->conn_buf, &hybrid_vsock_ops,
                       &b->hy);
    if (r < 0)
        return r;
    r = listen_unix(opt->vhost_user_path, &b->vu_listen_fd);
    if (r < 0)
        return r;
    b->vu_listening = true;
    r = listen_unix(opt->uds_path, &b->uds_listen_fd);
    if (r < 0)
        return r;
    b->uds_listening = true;
    r = hybrid_init(&b->hy, &b->loop, &b->vsock, opt->uds_path, b->uds_listen_fd, opt->max_conns);
    if (r < 0)
        return r;
    b->hy.verbose = opt->verbose;
    return loop_watch(&b->loop, &b->vu_listen_w, b->vu_listen_fd, EPOLLIN, on_vu_accept, b);
}

static void print_stats(const struct bridge *b)
{
    const struct vsock_stats *s = &b->vsock.stats;
    fprintf(stderr,
            "sandbox-bridge: packets in %llu out %llu, bytes in %llu out %llu, bad %llu, "
            "rst-unknown %llu, credit-abuse %llu, refused %llu, small-rx %llu\n",
            (unsigned long long)s->pkts_in, (unsigned long long)s->pkts_out,
            (unsigned long long)s->bytes_in, (unsigned long long)s->bytes_out,
            (unsigned long long)s->bad_pkts, (unsigned long long)s->rst_unknown,
            (unsigned long long)s->credit_abuse, (unsigned long long)s->refused,
            (unsigned long long)s->small_rx_bufs);
}

void bridge_stop(struct bridge *b)
{
    if (b->opt.verbose)
        print_stats(b);
    if (b->hy.clients)
        hybrid_destroy(&b->hy);
    if (b->vsock.conns)
        vsock_dev_destroy(&b->vsock);
    if (b->vu_connected) {
        loop_unwatch(&b->loop, &b->vu_conn_w);
        vu_dev_destroy(&b->vu);
    }
    if (b->vu_listen_fd >= 0)
        close(b->vu_listen_fd);
    if (b->uds_listen_fd >= 0)
        close(b->uds_listen_fd);
    if (b->vu_listening)
        unlink(b->opt.vhost_user_path);
    if (b->uds_listening)
        unlink(b->opt.uds_path);
    loop_fini(&b->loop);
}
