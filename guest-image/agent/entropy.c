/*
 * Fresh randomness and wall-clock time from the host. Every VM restored from one snapshot
 * starts with the same kernel RNG state and the same clock; hello carries new ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* RNDADDENTROPY: mix and credit (root only), so the pool counts as freshly seeded. */
static int add_credited(int fd, const uint8_t *buf, size_t len)
{
    struct rand_pool_info *info = malloc(sizeof(*info) + len);
    int r = 0;

    if (!info)
        return -ENOMEM;
    info->entropy_count = (int)(len * 8);
    info->buf_size = (int)len;
    memcpy(info->buf, buf, len);
    if (ioctl(fd, RNDADDENTROPY, info) < 0)
        r = -errno;
    /*
     * Adding entropy does not change what the kernel's generator (the crng) outputs: once it is
     * ready, it takes from the input pool only when it reseeds, every 60 s (at early uptime,
     * every uptime/2 s). Every VM restored from one snapshot would then read the same
     * getrandom() bytes until that reseed: seen as identical Math.random() and
     * crypto.randomUUID() in node started right after a restore. Reseed now.
     */
    if (r == 0 && ioctl(fd, RNDRESEEDCRNG) < 0)
        r = -errno;
    explicit_bzero(info, sizeof(*info) + len);
    free(info);
    return r;
}

int entropy_add(const uint8_t *buf, size_t len, bool credit)
{
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    int r = 0;

    if (fd < 0)
        return -errno;
    if (credit)
        r = add_credited(fd, buf, len);
    /* Writing mixes without crediting and needs no privilege: the fallback, and the only
     * thing done outside the guest. */
    if (!credit || r < 0)
        r = write(fd, buf, len) == (ssize_t)len ? 0 : -EIO;
    close(fd);
    return r;
}

int clock_set_us(int64_t time_us)
{
    struct timespec ts = {
        .tv_sec = time_us / 1000000,
        .tv_nsec = (time_us % 1000000) * 1000,
    };

    return clock_settime(CLOCK_REALTIME, &ts) < 0 ? -errno : 0;
}
