/*
 * The host over virtio-serial: the port named SERIAL_PORT_NAME, when the VM has one (profiles
 * with "channel": "virtio-serial"; docs/snapshot.md). One stream, no connections: the kernel
 * only says whether a host is attached to the other end (VIRTIO_CONSOLE_PORT_OPEN).
 *
 * How the Linux driver (drivers/char/virtio_console.c) reports it: with no host attached, poll()
 * returns POLLHUP (and POLLIN: a read would not block, it returns 0), writes block; with one,
 * the port behaves like a socket. A change of the host's state, and data arriving, send SIGIO
 * to the owner of a port opened with O_ASYNC. So while no host is attached we do not poll the
 * port at all (it would report POLLHUP in a loop) and wait for SIGIO on the signalfd; each
 * SIGIO (they coalesce) makes us look at the port's state again with a poll() of timeout 0.
 *
 * A host connection's end: when the host went away (POLLHUP) we close the port and open it
 * again. The host sees that as QMP VSERPORT_CHANGE close/open: "the agent saw the end of the
 * old connection and waits for a new one" (host-agent/vm/channel-serial.c waits for it before
 * connecting again, and before saving a snapshot). When we end it ourselves (protocol error,
 * no hello) while the host is still attached, what it still sends belongs to the old
 * connection: we read and drop it until the host goes away, and only then reopen.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* Where udev would link the port; the guest has no udev, so sysfs is searched as well. */
#define SERIAL_UDEV_DIR "/dev/virtio-ports/"
#define SERIAL_SYSFS_DIR "/sys/class/virtio-ports"
#define VIRTIO_CONSOLE_DRIVER "/sys/bus/virtio/drivers/virtio_console"

/*
 * The driver adds a device's ports from a workqueue after the device is probed, so at boot a
 * port may appear a moment after its device. With a virtio-serial device present, wait for
 * ours this long (in steps), once, before serving: a boot without it would never be reached.
 */
#define SERIAL_APPEAR_WAIT_MS 3000
#define SERIAL_APPEAR_STEP_MS 10

/*
 * Bytes of an old connection dropped per SIGIO while draining. More wakes us again: the
 * driver signals every buffer that arrives. 1 MiB bounds one loop round's work.
 */
#define SERIAL_DRAIN_MAX (1024 * 1024)

/*
 * A failed reopen is tried again: the driver allows one opener, so a runner forked just before
 * the reopen holds the old descriptor until its exec (EBUSY for a few milliseconds). The wait
 * doubles from 10 ms to 1 s: without the port the host can never reach us again.
 */
#define SERIAL_RETRY_FIRST_MS 10
#define SERIAL_RETRY_MAX_MS 1000

/* The device node of the port named @name, from sysfs ("vport0p1" -> /dev/vport0p1). */
static int find_port(const char *name, char *out, size_t len)
{
    DIR *d;
    struct dirent *e;
    int r = -ENOENT;

    snprintf(out, len, SERIAL_UDEV_DIR "%s", name);
    if (access(out, F_OK) == 0)
        return 0;
    d = opendir(SERIAL_SYSFS_DIR);
    if (!d)
        return -ENOENT;
    while (r < 0 && (e = readdir(d))) {
        char path[512], got[128] = "";
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), SERIAL_SYSFS_DIR "/%s/name", e->d_name);
        f = fopen(path, "re");
        if (!f)
            continue;
        if (fgets(got, sizeof(got), f))
            got[strcspn(got, "\n")] = '\0';
        fclose(f);
        if (strcmp(got, name) == 0 && (size_t)snprintf(out, len, "/dev/%s", e->d_name) < len)
            r = 0;
    }
    closedir(d);
    return r;
}

/* Open the port: non-blocking, SIGIO to us on every change. Then look at it. */
static void port_open(Agent *a)
{
    int fd = open(a->serial_dev, O_RDWR | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0 || fcntl(fd, F_SETOWN, getpid()) < 0 ||
        fcntl(fd, F_SETFL, O_RDWR | O_NONBLOCK | O_ASYNC) < 0) {
        agent_log("virtio-serial port %s: %m (trying again)", a->serial_dev);
        safe_close(fd);
        a->serial_fd = -1;
        a->serial_retry_wait_ms =
            a->serial_retry_wait_ms ? a->serial_retry_wait_ms * 2 : SERIAL_RETRY_FIRST_MS;
        if (a->serial_retry_wait_ms > SERIAL_RETRY_MAX_MS)
            a->serial_retry_wait_ms = SERIAL_RETRY_MAX_MS;
        a->serial_retry_ms = now_ms() + a->serial_retry_wait_ms;
        return;
    }
    a->serial_retry_ms = 0;
    a->serial_retry_wait_ms = 0;
    a->serial_fd = fd;
    a->serial_draining = false;
    serial_check(a);
}

/* POLLHUP: no host attached (the driver's host_connected is false). */
static bool host_attached(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLERR));
}

/* Drop what the host of an ended connection still sends; true at its end (EOF). */
static bool drain(int fd)
{
    char buf[4096];
    size_t total = 0;

    while (total < SERIAL_DRAIN_MAX) {
        ssize_t n = read(fd, buf, sizeof(buf));

        if (n == 0)
            return true;
        if (n < 0)
            return errno != EAGAIN && errno != EINTR; /* EAGAIN: the host is still there */
        total += (size_t)n;
    }
    return false;
}

/* Whether a virtio-serial device is bound to the driver (a "virtioN" link in its directory). */
static bool have_console_device(void)
{
    DIR *d = opendir(VIRTIO_CONSOLE_DRIVER);
    struct dirent *e;
    bool found = false;

    if (!d)
        return false;
    while (!found && (e = readdir(d)))
        found = strncmp(e->d_name, "virtio", 6) == 0;
    closedir(d);
    return found;
}

void serial_init(Agent *a)
{
    int64_t deadline = now_ms() + SERIAL_APPEAR_WAIT_MS;

    a->serial_fd = -1;
    while (find_port(SERIAL_PORT_NAME, a->serial_dev, sizeof(a->serial_dev)) < 0) {
        if (!have_console_device() || now_ms() >= deadline) {
            a->serial_dev[0] = '\0';
            return; /* no such port: vsock only */
        }
        usleep(SERIAL_APPEAR_STEP_MS * 1000);
    }
    agent_log("listening on virtio-serial %s", a->serial_dev);
    port_open(a);
}

void serial_on_timer(Agent *a, int64_t now)
{
    if (a->serial_retry_ms && now >= a->serial_retry_ms) {
        a->serial_retry_ms = 0;
        port_open(a);
    }
}

void serial_check(Agent *a)
{
    if (a->serial_fd < 0)
        return;
    if (a->serial_draining) {
        if (!drain(a->serial_fd))
            return;
        a->serial_fd = safe_close(a->serial_fd);
        port_open(a); /* the old host is gone: show it (VSERPORT_CHANGE), wait for the next */
        return;
    }
    /* A host attached while another connection (vsock) is served waits for its end. */
    if (a->conn_state != CONN_NONE || !host_attached(a->serial_fd))
        return;
    conn_attach(a, a->serial_fd, true);
    a->serial_fd = -1;
}

void serial_conn_closing(Agent *a, int fd)
{
    if (host_attached(fd)) {
        /* We ended it, the host is still there: keep the port open and drop its bytes. */
        a->serial_fd = dup(fd);
        a->serial_draining = a->serial_fd >= 0;
        if (a->serial_fd < 0)
            agent_log("virtio-serial: dup: %m");
    }
}

void serial_conn_closed(Agent *a)
{
    if (a->serial_fd >= 0)
        serial_check(a); /* draining */
    else
        port_open(a);
}
