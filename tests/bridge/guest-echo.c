/*
 * Guest side of the bridge's QEMU test (static, runs in a throw-away initramfs):
 *   guest-echo serve PORT              echo every connection on vsock PORT (a child each)
 *   guest-echo client PORT BYTES       connect to the host (CID 2) PORT, send BYTES of a
 *                                      pattern while reading the echo back, verify it
 * Prints one "GUEST-..." line per event on stdout (the serial console), which the test reads.
 */
#include <errno.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Copy buffer: larger than the guest's ~4 KB receive buffers, so reads take several packets. */
#define CHUNK 65536

/* Connect attempts, 100 ms apart: the device may be hot-plugged up to a minute after boot. */
#define CONNECT_TRIES 600

static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 7 + (i >> 12));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void echo(int fd)
{
    static char buf[CHUNK];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w <= 0)
                return;
            off += w;
        }
    }
    shutdown(fd, SHUT_WR);
}

static int serve(unsigned port)
{
    int s = socket(AF_VSOCK, SOCK_STREAM, 0);
    struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = port};
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 16) < 0) {
        printf("GUEST-ECHO FAIL listen %u: %s\n", port, strerror(errno));
        return 1;
    }
    signal(SIGCHLD, SIG_IGN); /* children are reaped by the kernel */
    printf("GUEST-ECHO READY port %u\n", port);
    fflush(stdout);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        if (fork() == 0) {
            close(s);
            echo(c);
            close(c);
            _exit(0);
        }
        close(c);
    }
}

/* Send @total bytes and read as many back, both at once so neither side blocks. */
static int pump(int fd, uint64_t total)
{
    static uint8_t out[CHUNK], in[CHUNK];
    uint64_t sent = 0, got = 0;
    while (got < total) {
        struct pollfd p = {.fd = fd, .events = POLLIN | (sent < total ? POLLOUT : 0)};
        if (poll(&p, 1, 20000) <= 0)
            return -ETIMEDOUT;
        if ((p.revents & POLLOUT) && sent < total) {
            size_t k = total - sent < CHUNK ? (size_t)(total - sent) : CHUNK;
            for (size_t i = 0; i < k; i++)
                out[i] = pattern(sent + i);
            ssize_t w = send(fd, out, k, MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN)
                return -errno;
            sent += w > 0 ? (uint64_t)w : 0;
        }
        if (p.revents & (POLLIN | POLLHUP)) {
            ssize_t r = recv(fd, in, sizeof(in), MSG_DONTWAIT);
            if (r == 0)
                return -EPIPE;
            if (r < 0 && errno != EAGAIN)
                return -errno;
            for (ssize_t i = 0; i < r; i++)
                if (in[i] != pattern(got + (uint64_t)i))
                    return -EBADMSG;
            got += r > 0 ? (uint64_t)r : 0;
        }
    }
    return 0;
}

/*
 * Connect to the host, retrying for a while: when the test hot-plugs the vsock device, it
 * appears only some time after boot.
 */
static int connect_host(unsigned port)
{
    struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_HOST, .svm_port = port};
    for (int tries = 0;; tries++) {
        int s = socket(AF_VSOCK, SOCK_STREAM, 0);
        if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return s;
        int err = errno;
        if (s >= 0)
            close(s);
        if (tries == CONNECT_TRIES) {
            printf("GUEST-CLIENT FAIL connect %u: %s\n", port, strerror(err));
            return -1;
        }
        usleep(100 * 1000);
    }
}

static int client(unsigned port, uint64_t total)
{
    int s = connect_host(port);
    if (s < 0)
        return 1;
    double t0 = now_s();
    int r = pump(s, total);
    double dt = now_s() - t0;
    if (r < 0) {
        printf("GUEST-CLIENT FAIL after %.3f s: %s\n", dt, strerror(-r));
        return 1;
    }
    shutdown(s, SHUT_WR);
    char c;
    ssize_t tail = read(s, &c, 1); /* the host's echo closes after our shutdown: EOF */
    close(s);
    printf("GUEST-CLIENT OK bytes=%llu seconds=%.3f eof=%s\n", (unsigned long long)total, dt,
           tail == 0 ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "serve") == 0)
        return serve((unsigned)strtoul(argv[2], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client((unsigned)strtoul(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
    fprintf(stderr, "usage: guest-echo serve PORT | client PORT BYTES\n");
    return 2;
}
