/*
 * Small helpers of the guest agent: clock, logging, file descriptors.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void agent_log(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int saved = errno;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One write per line so that lines from the agent and its children do not interleave. */
    dprintf(STDERR_FILENO, "sandbox-agent: %s\n", line);
    errno = saved;
}

int64_t oom_kills(void)
{
    /* /proc/vmstat is ~4 KiB of "name value" lines; oom_kill is one of them (Linux >= 4.13). */
    char buf[16384];
    int fd = open("/proc/vmstat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    const char *p;

    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    p = strstr(buf, "\noom_kill ");
    return p ? strtoll(p + strlen("\noom_kill "), NULL, 10) : -1;
}

int fd_set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

int safe_close(int fd)
{
    int saved = errno;

    if (fd >= 0)
        close(fd);
    errno = saved;
    return -1;
}
