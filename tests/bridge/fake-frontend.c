/* The QEMU side of vhost-user for tests (fake-frontend.h). */
#include "fake-frontend.h"

#include <string.h>
#include <sys/socket.h>

#include "vhost-user.h"

ssize_t fake_frontend_send_raw(int sock, const void *buf, size_t len, const int *fds, unsigned nfds,
                               int flags)
{
    union {
        struct cmsghdr align;
        char b[CMSG_SPACE(VU_MAX_FDS * sizeof(int))];
    } c;
    struct iovec iov = {(void *)buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

    if (nfds > VU_MAX_FDS)
        return -1;
    if (nfds) {
        mh.msg_control = c.b;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    }
    return sendmsg(sock, &mh, flags);
}

ssize_t fake_frontend_send(int sock, uint32_t req, uint32_t flags, const void *payload,
                           uint32_t size, const int *fds, unsigned nfds)
{
    uint8_t buf[sizeof(struct vu_hdr) + 512];
    struct vu_hdr h = {.request = req, .flags = VU_FLAG_VERSION | flags, .size = size};

    if (size > sizeof(buf) - sizeof(h))
        return -1;
    memcpy(buf, &h, sizeof(h));
    if (size)
        memcpy(buf + sizeof(h), payload, size);
    return fake_frontend_send_raw(sock, buf, sizeof(h) + size, fds, nfds, 0);
}
