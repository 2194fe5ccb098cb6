/* vhost-user back-end control plane. See vhost-user.h. */
#include "vhost-user.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_LEN sizeof(struct vu_hdr)

/* A handler that already sent its own reply returns this (no REPLY_ACK then). */
#define VU_REPLIED 1

/* How long we wait for the front-end to take a reply before giving up on it. */
#define VU_SEND_TIMEOUT_MS 1000

/* VIRTIO_F_VERSION_1: modern virtio (bit 32); the legacy virtio-mmio transport leaves it off. */
#define VIRTIO_F_VERSION_1_BIT 32

/* Largest config read we accept (QEMU's VHOST_USER_MAX_CONFIG_SIZE). */
#define VU_MAX_CONFIG 256

uint64_t vu_offered_features(void)
{
    return (1ull << VIRTIO_F_VERSION_1_BIT) | (1ull << VU_F_PROTOCOL_FEATURES);
}

uint64_t vu_offered_protocol_features(void)
{
    return (1ull << VU_PROTOCOL_F_MQ) | (1ull << VU_PROTOCOL_F_REPLY_ACK) |
           (1ull << VU_PROTOCOL_F_CONFIG);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* ---- sending ---------------------------------------------------------------------------- */

static int send_all(int fd, const uint8_t *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN)
            return -errno;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int r = poll(&pfd, 1, VU_SEND_TIMEOUT_MS);
        if (r == 0)
            return -ETIMEDOUT;
        if (r < 0 && errno != EINTR)
            return -errno;
    }
    return 0;
}

static int reply(struct vu_dev *d, const void *payload, uint32_t size)
{
    uint8_t out[HDR_LEN + 12 + VU_MAX_CONFIG];
    if (size > sizeof(out) - HDR_LEN)
        return -EINVAL;
    struct vu_hdr h = {
        .request = d->in.hdr.request, .flags = VU_FLAG_VERSION | VU_FLAG_REPLY, .size = size};
    memcpy(out, &h, HDR_LEN);
    memcpy(out + HDR_LEN, payload, size);
    int r = send_all(d->fd, out, HDR_LEN + size);
    if (r < 0)
        d->send_error = r; /* the connection is unusable: vu_dev_handle() drops it */
    return VU_REPLIED;
}

static int reply_u64(struct vu_dev *d, uint64_t v)
{
    return reply(d, &v, sizeof(v));
}

/* ---- helpers ---------------------------------------------------------------------------- */

static const uint8_t *payload(const struct vu_dev *d)
{
    return d->in.buf + HDR_LEN;
}

static uint64_t payload_u64(const struct vu_dev *d)
{
    uint64_t v;
    memcpy(&v, payload(d), sizeof(v));
    return v;
}

static struct vu_vring *vring(struct vu_dev *d, uint32_t index)
{
    return index < VU_NUM_QUEUES ? &d->vr[index] : NULL;
}

/* Take ownership of the message's only fd, or -1 when it carries none. */
static int take_fd(struct vu_dev *d)
{
    if (d->nfds != 1)
        return -1;
    int fd = d->fds[0];
    d->fds[0] = -1;
    return fd;
}

static void unmap_all(struct vu_mapping *maps, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (maps[i].addr)
            munmap(maps[i].addr, maps[i].len);
        maps[i] = (struct vu_mapping){0};
    }
}

static void stop_ring(struct vu_dev *d, struct vu_vring *vr)
{
    loop_unwatch(d->loop, &vr->kick_watch);
    close_fd(&vr->kick_fd);
    vr->started = false;
}

/* ---- features --------------------------------------------------------------------------- */

static int on_get_features(struct vu_dev *d)
{
    return reply_u64(d, vu_offered_features());
}

static int on_set_features(struct vu_dev *d)
{
    uint64_t v = payload_u64(d);
    d->features = v & vu_offered_features();
    return (v & ~vu_offered_features()) ? -EINVAL : 0;
}

static int on_get_protocol_features(struct vu_dev *d)
{
    return reply_u64(d, vu_offered_protocol_features());
}

static int on_set_protocol_features(struct vu_dev *d)
{
    uint64_t v = payload_u64(d);
    d->protocol_features = v & vu_offered_protocol_features();
    return (v & ~vu_offered_protocol_features()) ? -EINVAL : 0;
}

static int on_get_queue_num(struct vu_dev *d)
{
    return reply_u64(d, VU_NUM_QUEUES);
}

static int on_reset_owner(struct vu_dev *d)
{
    /* Deprecated; the spec recommends treating it as "disable all rings". */
    for (unsigned i = 0; i < VU_NUM_QUEUES; i++) {
        stop_ring(d, &d->vr[i]);
        d->vr[i].enabled = false;
    }
    return 0;
}

/* ---- memory table ----------------------------------------------------------------------- */

static int map_region(const struct vu_mem_region *r, int fd, struct vu_mapping *out)
{
    struct stat st;
    if (r->size == 0 || r->mmap_offset + r->size < r->mmap_offset)
        return -EINVAL;
    if (fstat(fd, &st) < 0)
        return -errno;
    /*
     * Only a regular (memfd, shm, hugetlbfs) file that really is this long: touching a page
     * of a mapping beyond the end of its file would kill us with SIGBUS.
     */
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < r->mmap_offset + r->size)
        return -EINVAL;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = r->mmap_offset & ~(page - 1);
    uint64_t len = r->size + (r->mmap_offset - start);
    if (len > SIZE_MAX)
        return -EINVAL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, (off_t)start);
    if (p == MAP_FAILED)
        return -errno;
    *out = (struct vu_mapping){.addr = p, .len = len};
    return 0;
}

/* Build the new table aside, so that a bad message leaves the old one in place. */
static int build_table(struct vu_dev *d, const struct vu_mem_table *t, struct vmem *mem,
                       struct vu_mapping *maps)
{
    for (uint32_t i = 0; i < t->nregions; i++) {
        const struct vu_mem_region *r = &t->regions[i];
        int rc = map_region(r, d->fds[i], &maps[i]);
        if (rc < 0)
            return rc;
        uint8_t *host = (uint8_t *)maps[i].addr + (maps[i].len - r->size);
        rc = vmem_add(mem, r->gpa, r->size, r->uva, host);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void remap_rings(struct vu_dev *d)
{
    for (unsigned i = 0; i < VU_NUM_QUEUES; i++) {
        struct virtq *vq = &d->vr[i].vq;
        if (vq->mapped && virtq_map(vq, &d->mem) < 0) {
            vq->broken = true;
            vq->error = -EFAULT;
        }
    }
}

static int on_set_mem_table(struct vu_dev *d)
{
    struct vu_mem_table t = {0};
    uint32_t size = d->in.hdr.size;
    memcpy(&t, payload(d), size < sizeof(t) ? size : sizeof(t));
    if (t.nregions == 0 || t.nregions > VMEM_MAX_REGIONS || t.nregions != d->nfds ||
        size < 8 + t.nregions * sizeof(struct vu_mem_region))
        return -EINVAL;
    struct vmem mem = {0};
    struct vu_mapping maps[VMEM_MAX_REGIONS] = {0};
    int r = build_table(d, &t, &mem, maps);
    if (r < 0) {
        unmap_all(maps, VMEM_MAX_REGIONS);
        return r;
    }
    unmap_all(d->maps, VMEM_MAX_REGIONS);
    memcpy(d->maps, maps, sizeof(maps));
    d->mem = mem;
    remap_rings(d);
    return 0;
}

/* ---- vrings ----------------------------------------------------------------------------- */

static int on_set_vring_num(struct vu_dev *d)
{
    struct vu_vring_state s;
    memcpy(&s, payload(d), sizeof(s));
    struct vu_vring *vr = vring(d, s.index);
    /* Split rings are a power of two in size (the index arithmetic wraps at 2^16). */
    if (!vr || s.num == 0 || s.num > VIRTQ_MAX_SIZE || (s.num & (s.num - 1)) || vr->started)
        return -EINVAL;
    vr->vq.num = (uint16_t)s.num;
    vr->vq.mapped = false;
    return 0;
}

static int on_set_vring_addr(struct vu_dev *d)
{
    struct vu_vring_addr a;
    memcpy(&a, payload(d), sizeof(a));
    struct vu_vring *vr = vring(d, a.index);
    if (!vr)
        return -EINVAL;
    struct virtq *vq = &vr->vq;
    vq->desc_addr = a.desc;
    vq->avail_addr = a.avail;
    vq->used_addr = a.used;
    vq->broken = false;
    vq->error = 0;
    int r = virtq_map(vq, &d->mem);
    if (r < 0)
        return r;
    /* Resume where the driver's used ring stands (it is 0 on a fresh start). */
    vq->used_idx = __atomic_load_n(&vq->used->idx, __ATOMIC_ACQUIRE);
    return 0;
}

static int on_set_vring_base(struct vu_dev *d)
{
    struct vu_vring_state s;
    memcpy(&s, payload(d), sizeof(s));
    struct vu_vring *vr = vring(d, s.index);
    if (!vr || s.num > UINT16_MAX)
        return -EINVAL;
    vr->vq.last_avail = (uint16_t)s.num;
    return 0;
}

static int on_get_vring_base(struct vu_dev *d)
{
    struct vu_vring_state s;
    memcpy(&s, payload(d), sizeof(s));
    struct vu_vring *vr = vring(d, s.index);
    if (!vr)
        return -EINVAL;
    stop_ring(d, vr);
    s.num = vr->vq.last_avail;
    return reply(d, &s, sizeof(s));
}

static void on_kick(struct watch *w, uint32_t events)
{
    struct vu_dev *d = w->ctx;
    unsigned q = 0;
    for (unsigned i = 0; i < VU_NUM_QUEUES; i++)
        if (w == &d->vr[i].kick_watch)
            q = i;
    uint64_t v;
    (void)events;
    /* Non-blocking: a spurious wakeup reads nothing. A broken fd must not spin the loop. */
    if (read(w->fd, &v, sizeof(v)) < 0 && errno != EAGAIN && errno != EINTR)
        loop_update(d->loop, w, 0);
    d->ops->kick(d->opaque, q);
}

static int on_set_vring_kick(struct vu_dev *d)
{
    uint64_t v = payload_u64(d);
    struct vu_vring *vr = vring(d, v & VU_VRING_IDX_MASK);
    if (!vr)
        return -EINVAL;
    stop_ring(d, vr);
    if (v & VU_VRING_NOFD)
        return -EINVAL; /* polling mode is not supported */
    int fd = take_fd(d);
    if (fd < 0)
        return -EINVAL;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
        loop_watch(d->loop, &vr->kick_watch, fd, EPOLLIN, on_kick, d) < 0) {
        close(fd);
        vr->kick_watch.fd = -1;
        return -EINVAL;
    }
    vr->kick_fd = fd;
    vr->started = true;
    if (!(d->features & (1ull << VU_F_PROTOCOL_FEATURES)))
        vr->enabled = true; /* without protocol features rings start enabled */
    d->ops->kick(d->opaque, (unsigned)(vr - d->vr));
    return 0;
}

static int set_notifier(struct vu_dev *d, bool call)
{
    uint64_t v = payload_u64(d);
    struct vu_vring *vr = vring(d, v & VU_VRING_IDX_MASK);
    if (!vr)
        return -EINVAL;
    int *slot = call ? &vr->call_fd : &vr->err_fd;
    close_fd(slot);
    if (v & VU_VRING_NOFD)
        return 0;
    int fd = take_fd(d);
    if (fd < 0)
        return -EINVAL;
    /* Never block on a full pipe posing as an eventfd. */
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
        close(fd);
        return -EINVAL;
    }
    *slot = fd;
    return 0;
}

static int on_set_vring_enable(struct vu_dev *d)
{
    struct vu_vring_state s;
    memcpy(&s, payload(d), sizeof(s));
    struct vu_vring *vr = vring(d, s.index);
    if (!vr || s.num > 1)
        return -EINVAL;
    vr->enabled = s.num == 1;
    if (vr->enabled)
        d->ops->kick(d->opaque, s.index);
    return 0;
}

/* ---- config ----------------------------------------------------------------------------- */

static int on_get_config(struct vu_dev *d)
{
    struct vu_config c;
    memcpy(&c, payload(d), sizeof(c));
    uint8_t out[sizeof(c) + VU_MAX_CONFIG] = {0};
    /* struct virtio_vsock_config: just the little-endian guest CID. */
    uint64_t cid = htole64(d->guest_cid);
    uint8_t space[8];
    memcpy(space, &cid, sizeof(space));
    if (c.size > VU_MAX_CONFIG || d->in.hdr.size != sizeof(c) + c.size ||
        c.offset > sizeof(space) || c.size > sizeof(space) - c.offset) {
        c.size = 0; /* a zero size tells the front-end the read failed */
        memcpy(out, &c, sizeof(c));
        return reply(d, out, sizeof(c));
    }
    memcpy(out, &c, sizeof(c));
    memcpy(out + sizeof(c), space + c.offset, c.size);
    return reply(d, out, (uint32_t)(sizeof(c) + c.size));
}

/* ---- dispatch --------------------------------------------------------------------------- */

struct vu_handler {
    const char *name;
    int (*fn)(struct vu_dev *d);
    int32_t size; /* exact payload size, or -1 when the handler checks it */
};

static int on_ok(struct vu_dev *d)
{
    (void)d;
    return 0;
}

static int on_set_vring_call(struct vu_dev *d)
{
    return set_notifier(d, true);
}

static int on_set_vring_err(struct vu_dev *d)
{
    return set_notifier(d, false);
}

static const struct vu_handler handlers[] = {
    [VU_GET_FEATURES] = {"GET_FEATURES", on_get_features, 0},
    [VU_SET_FEATURES] = {"SET_FEATURES", on_set_features, 8},
    [VU_SET_OWNER] = {"SET_OWNER", on_ok, 0},
    [VU_RESET_OWNER] = {"RESET_OWNER", on_reset_owner, 0},
    [VU_SET_MEM_TABLE] = {"SET_MEM_TABLE", on_set_mem_table, -1},
    [VU_SET_VRING_NUM] = {"SET_VRING_NUM", on_set_vring_num, 8},
    [VU_SET_VRING_ADDR] = {"SET_VRING_ADDR", on_set_vring_addr, 40},
    [VU_SET_VRING_BASE] = {"SET_VRING_BASE", on_set_vring_base, 8},
    [VU_GET_VRING_BASE] = {"GET_VRING_BASE", on_get_vring_base, 8},
    [VU_SET_VRING_KICK] = {"SET_VRING_KICK", on_set_vring_kick, 8},
    [VU_SET_VRING_CALL] = {"SET_VRING_CALL", on_set_vring_call, 8},
    [VU_SET_VRING_ERR] = {"SET_VRING_ERR", on_set_vring_err, 8},
    [VU_GET_PROTOCOL_FEATURES] = {"GET_PROTOCOL_FEATURES", on_get_protocol_features, 0},
    [VU_SET_PROTOCOL_FEATURES] = {"SET_PROTOCOL_FEATURES", on_set_protocol_features, 8},
    [VU_GET_QUEUE_NUM] = {"GET_QUEUE_NUM", on_get_queue_num, 0},
    [VU_SET_VRING_ENABLE] = {"SET_VRING_ENABLE", on_set_vring_enable, 8},
    [VU_GET_CONFIG] = {"GET_CONFIG", on_get_config, -1},
};

static const struct vu_handler *find_handler(uint32_t request)
{
    if (request >= sizeof(handlers) / sizeof(handlers[0]) || !handlers[request].fn)
        return NULL;
    return &handlers[request];
}

static int run_handler(struct vu_dev *d, const struct vu_handler *h)
{
    if (!h)
        return -ENOSYS; /* unknown or unsupported (SET_CONFIG, logging, ...): refuse */
    uint32_t size = d->in.hdr.size;
    if (h->size >= 0 && size != (uint32_t)h->size)
        return -EINVAL;
    if (h->size < 0 && size < 8)
        return -EINVAL;
    return h->fn(d);
}

int vu_dev_handle(struct vu_dev *d)
{
    const struct vu_handler *h = find_handler(d->in.hdr.request);
    int r = -EPROTO;
    if ((d->in.hdr.flags & 0x3) == VU_FLAG_VERSION)
        r = run_handler(d, h);
    if (d->verbose)
        fprintf(stderr, "sandbox-bridge: vhost-user %s (%u) size %u fds %u -> %d\n",
                h ? h->name : "unknown", d->in.hdr.request, d->in.hdr.size, d->nfds, r);
    for (unsigned i = 0; i < d->nfds; i++)
        close_fd(&d->fds[i]);
    d->nfds = 0;
    if (r == -EPROTO)
        return r; /* not a vhost-user peer we can talk to */
    if (r != VU_REPLIED && (d->in.hdr.flags & VU_FLAG_NEED_REPLY))
        reply_u64(d, r < 0 ? 1 : 0); /* REPLY_ACK: 0 success, non-zero failure */
    return d->send_error;
}

/* ---- receiving -------------------------------------------------------------------------- */

static int collect_fds(struct vu_dev *d, struct msghdr *mh)
{
    int err = (mh->msg_flags & MSG_CTRUNC) ? -EMSGSIZE : 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            if (d->nfds < VU_MAX_FDS)
                d->fds[d->nfds++] = fd;
            else {
                close(fd);
                err = -EMSGSIZE;
            }
        }
    }
    return err;
}

static ssize_t recv_some(struct vu_dev *d, size_t want)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(VU_MAX_FDS * sizeof(int))];
    } cbuf;
    struct iovec iov = {.iov_base = d->in.buf + d->have, .iov_len = want};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf, .msg_controllen = sizeof(cbuf)};
    ssize_t n = recvmsg(d->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0)
        return errno == EINTR ? -EAGAIN : -errno;
    int r = collect_fds(d, &mh);
    return r < 0 ? r : n;
}

int vu_dev_receive(struct vu_dev *d)
{
    for (;;) {
        if (d->have >= HDR_LEN && d->in.hdr.size > VU_MAX_PAYLOAD)
            return -EMSGSIZE;
        size_t want = d->have < HDR_LEN ? HDR_LEN : HDR_LEN + d->in.hdr.size;
        if (d->have == want && d->have >= HDR_LEN) {
            int r = vu_dev_handle(d);
            d->have = 0;
            if (r < 0)
                return r;
            continue;
        }
        ssize_t n = recv_some(d, want - d->have);
        if (n == -EAGAIN)
            return 0;
        if (n == 0)
            return 1;
        if (n < 0)
            return (int)n;
        d->have += (size_t)n;
    }
}

/* ---- lifetime --------------------------------------------------------------------------- */

int vu_dev_init(struct vu_dev *d, int fd, struct loop *loop, uint64_t guest_cid,
                const struct vu_ops *ops, void *opaque)
{
    *d = (struct vu_dev){
        .fd = fd, .loop = loop, .guest_cid = guest_cid, .ops = ops, .opaque = opaque};
    for (unsigned i = 0; i < VU_NUM_QUEUES; i++) {
        d->vr[i].kick_fd = d->vr[i].call_fd = d->vr[i].err_fd = -1;
        d->vr[i].kick_watch.fd = -1;
    }
    for (unsigned i = 0; i < VU_MAX_FDS; i++)
        d->fds[i] = -1;
    return 0;
}

void vu_dev_destroy(struct vu_dev *d)
{
    for (unsigned i = 0; i < VU_NUM_QUEUES; i++) {
        stop_ring(d, &d->vr[i]);
        close_fd(&d->vr[i].call_fd);
        close_fd(&d->vr[i].err_fd);
    }
    for (unsigned i = 0; i < d->nfds; i++)
        close_fd(&d->fds[i]);
    d->nfds = 0;
    unmap_all(d->maps, VMEM_MAX_REGIONS);
    d->mem = (struct vmem){0};
    close_fd(&d->fd);
}

bool vu_queue_ready(const struct vu_dev *d, unsigned q)
{
    if (q >= VU_NUM_QUEUES)
        return false;
    const struct vu_vring *vr = &d->vr[q];
    return vr->started && vr->enabled && vr->vq.mapped && !vr->vq.broken;
}

void vu_queue_notify(struct vu_dev *d, unsigned q)
{
    struct vu_vring *vr = &d->vr[q];
    if (!virtq_take_notify(&vr->vq) || vr->call_fd < 0)
        return;
    uint64_t one = 1;
    /*
     * A failure is ignored: EAGAIN means the counter is already non-zero (the interrupt is
     * coming anyway), and a broken call fd is the front-end's problem, not ours to die of.
     */
    ssize_t n = write(vr->call_fd, &one, sizeof(one));
    (void)n;
}
