/*
 * A stand-in for build/bridge/sandbox-bridge in the lifecycle tests: same command line, same
 * READY protocol and hybrid-vsock answers, no virtio. "The guest agent listens" once the fake
 * QEMU writes "AGENT-UP\n" on the vhost-user socket; then CONNECT 1024 gets "OK 1024\n" and
 * the stream echoes. It exits when the fake QEMU disconnects, unlinking its sockets, like the
 * real one. FAKE_BRIDGE_MODE: ok (default) | no-ready | exit | garbage.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_CLIENTS 16

static const char *vhost_path, *uds_path;

static void cleanup(void)
{
    if (vhost_path)
        unlink(vhost_path);
    if (uds_path)
        unlink(uds_path);
}

static void on_term(int sig)
{
    (void)sig;
    cleanup();
    _exit(0);
}

static int listen_on(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0) {
        fprintf(stderr, "fake-bridge: listen %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return fd;
}

/* Read one line (byte by byte, like a careful peer). */
static int read_line(int fd, char *buf, size_t size)
{
    size_t n = 0;

    while (n + 1 < size) {
        char c;
        if (read(fd, &c, 1) != 1)
            return -1;
        if (c == '\n')
            break;
        buf[n++] = c;
    }
    buf[n] = '\0';
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = getenv("FAKE_BRIDGE_MODE");
    int ready_fd = -1, vhost_l, uds_l, vhost_c = -1, agent_up = 0;
    int echo[MAX_CLIENTS], n_echo = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--vhost-user"))
            vhost_path = argv[i + 1];
        else if (!strcmp(argv[i], "--uds"))
            uds_path = argv[i + 1];
        else if (!strcmp(argv[i], "--ready-fd"))
            ready_fd = atoi(argv[i + 1]);
    }
    if (!vhost_path || !uds_path || ready_fd < 0) {
        fprintf(stderr, "fake-bridge: bad arguments\n");
        return 2;
    }
    mode = mode ? mode : "ok";
    if (!strcmp(mode, "exit")) {
        fprintf(stderr, "fake-bridge: exiting as asked\n");
        return 3;
    }
    signal(SIGTERM, on_term);
    vhost_l = listen_on(vhost_path);
    uds_l = listen_on(uds_path);
    if (!strcmp(mode, "no-ready"))
        pause();
    if (write(ready_fd, !strcmp(mode, "garbage") ? "HELLO\n" : "READY\n", 6) != 6)
        return 1;
    close(ready_fd);
    for (;;) {
        struct pollfd p[3 + MAX_CLIENTS] = {
            {vhost_l, POLLIN, 0}, {uds_l, POLLIN, 0}, {vhost_c, POLLIN, 0}};
        for (int i = 0; i < n_echo; i++)
            p[3 + i] = (struct pollfd){echo[i], POLLIN, 0};
        if (poll(p, 3 + n_echo, -1) < 0)
            continue;
        if (p[0].revents & POLLIN)
            vhost_c = accept4(vhost_l, NULL, NULL, SOCK_CLOEXEC);
        if (vhost_c >= 0 && (p[2].revents & (POLLIN | POLLHUP))) {
            char line[64];
            if (read_line(vhost_c, line, sizeof line) < 0)
                break; /* QEMU went away: exit like the real bridge */
            agent_up = !strcmp(line, "AGENT-UP");
        }
        if (p[1].revents & POLLIN) {
            char line[64];
            int c = accept4(uds_l, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && read_line(c, line, sizeof line) == 0 && agent_up &&
                !strcmp(line, "CONNECT 1024") && n_echo < MAX_CLIENTS &&
                write(c, "OK 1024\n", 8) == 8) {
                echo[n_echo++] = c;
            } else if (c >= 0) {
                close(c);
            }
        }
        for (int i = 0, live = n_echo; i < live; i++) {
            char buf[4096];
            ssize_t n;
            if (!(p[3 + i].revents & (POLLIN | POLLHUP)))
                continue;
            n = read(echo[i], buf, sizeof buf);
            if (n <= 0 || write(echo[i], buf, (size_t)n) != n) {
                close(echo[i]);
                echo[i] = -1;
            }
        }
        for (int i = 0, j = 0, live = n_echo; i < live; i++) {
            if (echo[i] >= 0)
                echo[j++] = echo[i];
            if (i == live - 1)
                n_echo = j;
        }
    }
    cleanup();
    return 0;
}
