/*
 * Fuzz target for the vhost-user control plane (vhost-user.c): the input is a stream of
 * messages from a hostile front-end, sent through a real socket in fragments, with real fds
 * attached where a message takes them (a memfd for SET_MEM_TABLE, eventfds for the vring
 * notifiers), so that the memory table and vring paths are reachable. Every reply is read
 * back and checked for a sane header.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake-frontend.h"
#include "fuzz-bridge.h"
#include "loop.h"
#include "vhost-user.h"

/* Guest RAM for SET_MEM_TABLE: small, so that mapping it per input stays cheap. */
#define FZ_MEM_SIZE (1u << 20)

#define FZ_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void fz_kick(void *opaque, unsigned q)
{
    (void)opaque;
    FZ_CHECK(q < VU_NUM_QUEUES);
}

static const struct vu_ops fz_ops = {.kick = fz_kick};

static int memfd = -1;

static unsigned fds_for(uint32_t request, const uint8_t *payload, uint32_t size, int *fds)
{
    switch (request) {
    case VU_SET_MEM_TABLE: {
        uint32_t n = 0;
        if (size >= 4)
            memcpy(&n, payload, 4);
        n = n > VU_MAX_FDS ? VU_MAX_FDS : n;
        for (uint32_t i = 0; i < n; i++)
            fds[i] = memfd;
        return n;
    }
    case VU_SET_VRING_KICK:
    case VU_SET_VRING_CALL:
    case VU_SET_VRING_ERR:
        fds[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        return fds[0] >= 0 ? 1 : 0;
    default:
        return 0;
    }
}

/* Send @len bytes, with @nfds fds attached to the first byte. */
static bool send_with_fds(int s, const uint8_t *p, size_t len, const int *fds, unsigned nfds)
{
    return fake_frontend_send_raw(s, p, len, fds, nfds, MSG_DONTWAIT | MSG_NOSIGNAL) ==
           (ssize_t)len;
}

/* Read back every reply; each must carry the reply flag and fit the protocol. */
static void drain_replies(int s)
{
    struct vu_hdr h;
    while (recv(s, &h, sizeof(h), MSG_DONTWAIT) == (ssize_t)sizeof(h)) {
        FZ_CHECK(h.flags == (VU_FLAG_VERSION | VU_FLAG_REPLY));
        FZ_CHECK(h.size <= 12 + 256);
        uint8_t junk[12 + 256];
        if (h.size)
            FZ_CHECK(recv(s, junk, h.size, MSG_DONTWAIT) == (ssize_t)h.size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz-ram", MFD_CLOEXEC);
        if (memfd < 0 || ftruncate(memfd, FZ_MEM_SIZE) < 0)
            abort();
    }
    int sv[2];
    struct loop loop;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || loop_init(&loop) < 0)
        abort();
    struct vu_dev d;
    vu_dev_init(&d, sv[0], &loop, 3, &fz_ops, NULL);
    /*
     * Messages: a 12-byte header, then as many payload bytes as the header says (or as are
     * left), sent in two fragments cut where the header's first byte says, so that partial
     * reads are exercised too.
     */
    while (size >= sizeof(struct vu_hdr)) {
        struct vu_hdr h;
        memcpy(&h, data, sizeof(h));
        size_t plen = h.size < size - sizeof(h) ? h.size : size - sizeof(h);
        size_t len = sizeof(h) + (plen > 512 ? 512 : plen);
        int fds[VU_MAX_FDS];
        unsigned nfds = fds_for(h.request, data + sizeof(h), (uint32_t)plen, fds);
        size_t cut = 1 + data[0] % len;
        bool sent = send_with_fds(sv[1], data, cut, fds, nfds);
        if (nfds && h.request != VU_SET_MEM_TABLE)
            close(fds[0]);
        int r = sent ? vu_dev_receive(&d) : -1;
        if (r == 0 && cut < len) {
            sent = send_with_fds(sv[1], data + cut, len - cut, NULL, 0);
            r = sent ? vu_dev_receive(&d) : -1;
        }
        data += len;
        size -= len;
        if (r != 0)
            break; /* the back-end dropped the connection: as it should on garbage */
        drain_replies(sv[1]);
        loop_wait(&loop, 0); /* deliver any kick */
    }
    vu_dev_destroy(&d);
    loop_fini(&loop);
    close(sv[1]);
    return 0;
}
