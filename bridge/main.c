/*
 * sandbox-bridge: a vhost-user-vsock device back-end, one process per VM. This file holds
 * only the options, the signals, the seccomp filter's installation and the loop; see bridge.h
 * for the rest.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "bridge.h"
#include "seccomp-filter.h"

static void on_signal(struct watch *w, uint32_t events)
{
    struct bridge *b = w->ctx;
    struct signalfd_siginfo si;
    (void)events;
    if (read(w->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        b->quit = true;
        b->exit_code = 0;
    }
}

/* SIGTERM/SIGINT arrive through a signalfd in the loop; SIGPIPE is never wanted. */
static int setup_signals(int *ret_fd)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return -errno;
    signal(SIGPIPE, SIG_IGN);
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    *ret_fd = fd;
    return 0;
}

static void announce_ready(int fd)
{
    static const char msg[] = "READY\n";
    if (write(fd, msg, sizeof(msg) - 1) < 0)
        fprintf(stderr, "sandbox-bridge: --ready-fd %d: %s\n", fd, strerror(errno));
    close(fd);
}

static int run(const struct options *o)
{
    struct bridge b;
    int sig_fd = -1;
    struct watch sig_w;
    int r = bridge_start(&b, o);
    if (r == 0 && (r = setup_signals(&sig_fd)) < 0)
        fprintf(stderr, "sandbox-bridge: signals: %s\n", strerror(-r));
    if (r == 0)
        r = loop_watch(&b.loop, &sig_w, sig_fd, EPOLLIN, on_signal, &b);
    /*
     * Everything that needs more than the loop's system calls (binding the sockets, the
     * signalfd, epoll) is done: from here on only the allow-list, before the first byte from
     * QEMU or the guest, and before READY so that whoever waits for it gets a confined bridge.
     */
    if (r == 0 && (r = bridge_seccomp_install(o->seccomp)) < 0)
        fprintf(stderr, "sandbox-bridge: seccomp: %s\n", strerror(-r));
    if (r < 0) {
        bridge_stop(&b);
        if (sig_fd >= 0)
            close(sig_fd);
        return 1;
    }
    if (o->ready_fd >= 0)
        announce_ready(o->ready_fd);
    while (!b.quit) {
        r = loop_wait(&b.loop, bridge_timeout_ms(&b));
        if (r < 0) {
            fprintf(stderr, "sandbox-bridge: epoll_wait: %s\n", strerror(-r));
            b.exit_code = 1;
            break;
        }
        bridge_pump(&b);
    }
    int code = b.exit_code;
    loop_unwatch(&b.loop, &sig_w);
    bridge_stop(&b);
    close(sig_fd);
    return code;
}

int main(int argc, char **argv)
{
    struct options o;
    char err[256];
    int r = options_parse(argc, argv, &o, err, sizeof(err));
    if (r == 1) {
        fputs(options_usage(), stdout);
        return 0;
    }
    if (r < 0) {
        fprintf(stderr, "sandbox-bridge: %s\n%s", err, options_usage());
        return 2;
    }
    if (o.ready_fd >= 0 && fcntl(o.ready_fd, F_GETFD) < 0) {
        fprintf(stderr, "sandbox-bridge: --ready-fd %d is not open\n", o.ready_fd);
        return 2;
    }
    return run(&o);
}
