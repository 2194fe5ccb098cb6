/*
 * Host side of the bridge's QEMU test: a client and an echo server for the hybrid sockets.
 *   hybrid-client connect UDS PORT BYTES   CONNECT to guest PORT, send BYTES, verify the echo
 *   hybrid-client latency UDS PORT COUNT   COUNT 1-byte round trips, print median and mean
 *   hybrid-client refused UDS PORT         expect the bridge to close without "OK"
 *   hybrid-client garbage UDS              send a bad CONNECT line, expect to be closed
 *   hybrid-client echo-server PATH         echo every connection on unix socket PATH until
 *                                          SIGTERM, then unlink PATH
 * Exit 0 on success; one line of results on stdout.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536
#define IO_TIMEOUT_MS 30000

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

static int unix_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "connect %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return s;
}

/* Read one '\n'-terminated line (byte by byte: what follows belongs to the stream). */
static int read_line(int s, char *buf, size_t len)
{
    size_t n = 0;
    while (n + 1 < len) {
        struct pollfd p = {.fd = s, .events = POLLIN};
        if (poll(&p, 1, IO_TIMEOUT_MS) <= 0)
            return -ETIMEDOUT;
        ssize_t r = read(s, buf + n, 1);
        if (r <= 0)
            return r == 0 ? -ECONNRESET : -errno;
        if (buf[n++] == '\n')
            break;
    }
    buf[n] = 0;
    return (int)n;
}

static int open_stream(const char *uds, const char *port)
{
    int s = unix_connect(uds);
    char line[64];
    int n = snprintf(line, sizeof(line), "CONNECT %s\n", port);
    if (write(s, line, (size_t)n) != n || read_line(s, line, sizeof(line)) < 0 ||
        strncmp(line, "OK ", 3) != 0) {
        fprintf(stderr, "no OK from the bridge\n");
        exit(1);
    }
    return s;
}

static int pump(int fd, uint64_t total)
{
    static uint8_t out[CHUNK], in[CHUNK];
    uint64_t sent = 0, got = 0;
    while (got < total) {
        struct pollfd p = {.fd = fd, .events = POLLIN | (sent < total ? POLLOUT : 0)};
        if (poll(&p, 1, IO_TIMEOUT_MS) <= 0)
            return -ETIMEDOUT;
        if ((p.revents & POLLOUT) && sent < total) {
            size_t k = total - sent < CHUNK ? (size_t)(total - sent) : CHUNK;
            for (size_t i = 0; i < k; i++)
                out[i] = pattern(sent + i);
            ssize_t w = send(fd, out, k, MSG_DONTWAIT | MSG_NOSIGNAL);
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

static int cmd_connect(const char *uds, const char *port, uint64_t total)
{
    int s = open_stream(uds, port);
    double t0 = now_s();
    int r = pump(s, total);
    double dt = now_s() - t0;
    if (r < 0) {
        fprintf(stderr, "stream failed after %.3f s: %s\n", dt, strerror(-r));
        return 1;
    }
    /* Half-close: the guest's echo sees EOF, finishes, and its close reaches us as EOF. */
    shutdown(s, SHUT_WR);
    char c;
    struct pollfd p = {.fd = s, .events = POLLIN};
    int eof = poll(&p, 1, IO_TIMEOUT_MS) == 1 && read(s, &c, 1) == 0;
    close(s);
    printf("HOST OK bytes=%llu seconds=%.3f MiB/s=%.2f eof=%s\n", (unsigned long long)total, dt,
           (double)total / (1024.0 * 1024.0) / (dt > 0 ? dt : 1e-9), eof ? "yes" : "no");
    return eof ? 0 : 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmd_latency(const char *uds, const char *port, unsigned count)
{
    int s = open_stream(uds, port);
    double *t = calloc(count, sizeof(*t)), sum = 0;
    for (unsigned i = 0; i < count; i++) {
        char c = (char)i, r;
        double t0 = now_s();
        struct pollfd p = {.fd = s, .events = POLLIN};
        if (write(s, &c, 1) != 1 || poll(&p, 1, IO_TIMEOUT_MS) != 1 || read(s, &r, 1) != 1 ||
            r != c) {
            fprintf(stderr, "round trip %u failed\n", i);
            return 1;
        }
        t[i] = (now_s() - t0) * 1e6;
        sum += t[i];
    }
    qsort(t, count, sizeof(*t), cmp_double);
    printf("HOST LATENCY count=%u median_us=%.0f mean_us=%.0f\n", count, t[count / 2], sum / count);
    close(s);
    free(t);
    return 0;
}

/* Expect the bridge to close the connection without an OK line. */
static int expect_closed(int s, const char *what)
{
    char line[64];
    double t0 = now_s();
    int r = read_line(s, line, sizeof(line));
    if (r >= 0) {
        fprintf(stderr, "%s: unexpected answer: %s", what, line);
        return 1;
    }
    printf("HOST %s closed after %.3f s\n", what, now_s() - t0);
    return 0;
}

static int cmd_refused(const char *uds, const char *port)
{
    int s = unix_connect(uds);
    char line[64];
    int n = snprintf(line, sizeof(line), "CONNECT %s\n", port);
    if (write(s, line, (size_t)n) != n)
        return 1;
    return expect_closed(s, "refused");
}

static int cmd_garbage(const char *uds)
{
    int s = unix_connect(uds);
    static const char junk[] = "HELLO WORLD this is not a connect line at all\n";
    if (write(s, junk, sizeof(junk) - 1) < 0)
        return 1;
    return expect_closed(s, "garbage");
}

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static void echo_child(int c)
{
    static char buf[CHUNK];
    ssize_t n;
    while ((n = read(c, buf, sizeof(buf))) > 0)
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(c, buf + off, (size_t)(n - off));
            if (w <= 0)
                _exit(0);
            off += w;
        }
    _exit(0);
}

static int cmd_echo_server(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 16) < 0) {
        fprintf(stderr, "listen %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct sigaction act = {.sa_handler = on_term};
    sigaction(SIGTERM, &act, NULL);
    signal(SIGCHLD, SIG_IGN);
    while (!stop) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        if (fork() == 0) {
            signal(SIGTERM, SIG_DFL);
            close(s);
            echo_child(c);
        }
        close(c);
    }
    unlink(path);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc == 5 && strcmp(argv[1], "connect") == 0)
        return cmd_connect(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    if (argc == 5 && strcmp(argv[1], "latency") == 0)
        return cmd_latency(argv[2], argv[3], (unsigned)strtoul(argv[4], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "refused") == 0)
        return cmd_refused(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "garbage") == 0)
        return cmd_garbage(argv[2]);
    if (argc == 3 && strcmp(argv[1], "echo-server") == 0)
        return cmd_echo_server(argv[2]);
    fprintf(stderr, "usage: see the comment at the top of hybrid-client.c\n");
    return 2;
}
