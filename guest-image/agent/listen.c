/*
 * The listening socket: AF_VSOCK in the guest (any CID, the agent's port), or a unix socket
 * when the agent runs on the host for tests.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
/* After sys/socket.h, which it needs. */
#include <linux/vm_sockets.h>

#include "agent.h"
#include "util.h"

/*
 * Connections the kernel queues before we accept them. One host talks to us; a second
 * connection is accepted only to be refused, so a short queue is plenty.
 */
#define LISTEN_BACKLOG 4

static int listen_vsock(unsigned port)
{
    struct sockaddr_vm addr = {
        .svm_family = AF_VSOCK,
        .svm_cid = VMADDR_CID_ANY,
        .svm_port = port,
    };
    int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
        int r = -errno;

        close(fd);
        return r;
    }
    return fd;
}

static int listen_unix(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(path) >= sizeof(addr.sun_path))
        return -ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
        int r = -errno;

        close(fd);
        return r;
    }
    return fd;
}

int listen_open(const AgentOptions *o)
{
    return o->unix_path ? listen_unix(o->unix_path) : listen_vsock(o->vsock_port);
}
