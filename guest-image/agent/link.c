/*
 * A framed, non-blocking endpoint (see link.h).
 */
#include "link.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

void link_init(Link *l, int fd, uint32_t max_frame)
{
    memset(l, 0, sizeof(*l));
    struct stat st;

    l->fd = fd;
    l->device = fstat(fd, &st) == 0 && !S_ISSOCK(st.st_mode);
    sbx_frame_reader_init(&l->reader, max_frame);
}

void link_take_data(Link *l)
{
    l->data = true;
}

void link_drop_queue(Link *l)
{
    LinkFrame *f = l->head;

    while (f) {
        LinkFrame *next = f->next;

        free(f->data);
        free(f);
        f = next;
    }
    l->head = l->tail = NULL;
    l->queued = 0;
}

void link_close(Link *l)
{
    link_drop_queue(l);
    sbx_frame_reader_clear(&l->reader);
    sbx_msg_clear(&l->pending);
    l->has_pending = false;
    l->data = false;
    l->in_len = l->in_off = 0;
    l->fd = safe_close(l->fd);
}

bool link_buffered(const Link *l)
{
    return l->in_off < l->in_len;
}

size_t link_queued(const Link *l)
{
    return l->queued;
}

static void enqueue(Link *l, LinkFrame *f)
{
    if (l->tail)
        l->tail->next = f;
    else
        l->head = f;
    l->tail = f;
    l->queued += f->len;
}

/* @msg's frame, with @extra bytes of room at its end. */
static int encode(const SbxMsg *msg, size_t extra, LinkFrame **ret)
{
    LinkFrame *f = calloc(1, sizeof(*f));
    uint8_t *grown;
    int r;

    if (!f)
        return -ENOMEM;
    r = sbx_msg_encode(msg, &f->data, &f->len);
    if (r == 0 && extra && !(grown = realloc(f->data, f->len + extra)))
        r = -ENOMEM;
    else if (r == 0 && extra)
        f->data = grown;
    if (r < 0) {
        free(f->data);
        free(f);
        return r;
    }
    *ret = f;
    return 0;
}

int link_send(Link *l, const SbxMsg *msg)
{
    LinkFrame *f;
    int r;

    if (sbx_msg_data_len(msg) > 0)
        return -EINVAL;
    r = encode(msg, 0, &f);
    if (r == 0)
        enqueue(l, f);
    return r;
}

int link_send_data(Link *l, const SbxMsg *msg, uint8_t *data)
{
    size_t n = sbx_msg_data_len(msg);
    LinkFrame *f, *d = NULL;
    int r = l->data && n && data ? 0 : -EINVAL;

    /* The data frame's header ends the message's frame; its payload is queued as it is. */
    if (r == 0 && !(d = calloc(1, sizeof(*d))))
        r = -ENOMEM;
    if (r == 0)
        r = encode(msg, SBX_FRAME_HEADER, &f);
    if (r < 0) {
        free(d);
        free(data);
        return r;
    }
    sbx_frame_data_header(n, f->data + f->len);
    f->len += SBX_FRAME_HEADER;
    d->data = data;
    d->len = n;
    enqueue(l, f);
    enqueue(l, d);
    return 0;
}

int link_flush(Link *l)
{
    while (l->head) {
        LinkFrame *f = l->head;
        /* A port is non-blocking by its open flags; SIGPIPE is ignored (pid1.c). */
        ssize_t n =
            l->device ? write(l->fd, f->data + f->off, f->len - f->off)
                      : send(l->fd, f->data + f->off, f->len - f->off, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
        f->off += (size_t)n;
        l->queued -= (size_t)n;
        if (f->off < f->len)
            continue;
        l->head = f->next;
        if (!l->head)
            l->tail = NULL;
        free(f->data);
        free(f);
    }
    return 0;
}

/* One read into the input buffer. Returns 1, 0 (would block), -EPIPE (end) or -errno. */
static int fill(Link *l)
{
    ssize_t n;

    do
        n = l->device ? read(l->fd, l->in, sizeof(l->in))
                      : recv(l->fd, l->in, sizeof(l->in), MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    if (n == 0)
        return -EPIPE;
    l->in_len = (size_t)n;
    l->in_off = 0;
    return 1;
}

static char *frame_error(ssize_t err, const SbxFrameReader *r)
{
    const uint8_t *h = r->header;
    uint32_t word = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
    char *s = NULL;
    int n = -1;

    if (err == -EPROTO)
        n = asprintf(&s,
                     "frame: a %s of %u bytes where the data frame of %u bytes announced "
                     "was due",
                     word & SBX_FRAME_DATA ? "data frame" : "frame", word & ~SBX_FRAME_DATA,
                     r->data_due);
    else if (err == -EMSGSIZE && (word & SBX_FRAME_DATA))
        n = asprintf(&s, "frame: a data frame of %u bytes that no message announced",
                     word & ~SBX_FRAME_DATA);
    else if (err == -EMSGSIZE)
        n = asprintf(&s, "frame: length above the limit of %u bytes", r->max_len);
    else if (err == -EBADMSG)
        return strdup("frame: length 0");
    return n >= 0 ? s : NULL;
}

/*
 * The message @frame (@len bytes, taken): decoded into @msg (1), or held in l->pending while
 * the data frame it announces is read (0).
 */
static int decode(Link *l, char *frame, size_t len, SbxMsg *msg, char **ret_reason)
{
    int r = sbx_msg_decode(frame, len, msg, ret_reason);
    size_t n;

    free(frame);
    if (r < 0)
        return r;
    n = r == 0 ? sbx_msg_data_len(msg) : 0;
    if (n == 0)
        return 1;
    if (!l->data || sbx_frame_reader_expect_data(&l->reader, (uint32_t)n) < 0) {
        if (asprintf(ret_reason, "%s: announces data, which this channel does not take",
                     sbx_msg_type_name(msg->type)) < 0)
            *ret_reason = NULL;
        sbx_msg_clear(msg);
        return -EBADMSG;
    }
    l->pending = *msg;
    l->has_pending = true;
    memset(msg, 0, sizeof(*msg));
    return 0;
}

/* The data frame l->pending announced (@data, @len bytes, taken): attached, into @msg. */
static int attach(Link *l, char *data, size_t len, SbxMsg *msg)
{
    int r = sbx_msg_attach_data(&l->pending, (uint8_t *)data, len);

    *msg = l->pending;
    memset(&l->pending, 0, sizeof(l->pending));
    l->has_pending = false;
    if (r < 0) /* cannot happen: the reader took exactly the length announced */
        sbx_msg_clear(msg);
    return r < 0 ? -EBADMSG : 1;
}

/* One read into the payload being received (@room, @n bytes): like fill(), the frame that
 * completes in *@ret_frame. */
static int fill_direct(Link *l, uint8_t *room, size_t n, char **ret_frame, size_t *ret_len)
{
    ssize_t got;

    do
        got = l->device ? read(l->fd, room, n) : recv(l->fd, room, n, MSG_DONTWAIT);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    if (got == 0)
        return -EPIPE;
    return sbx_frame_reader_received(&l->reader, (size_t)got, ret_frame, ret_len) < 0 ? -EIO : 1;
}

int link_recv(Link *l, SbxMsg *msg, char **ret_reason)
{
    *ret_reason = NULL;
    for (;;) {
        char *frame = NULL;
        size_t len = 0, n = 0;
        uint8_t *room = l->in_off == l->in_len ? sbx_frame_reader_room(&l->reader, &n) : NULL;
        ssize_t used;
        int r;

        if (room && n >= LINK_DIRECT_MIN) {
            /* in the middle of a large payload (a chunk): read straight into it */
            r = fill_direct(l, room, n, &frame, &len);
            if (r <= 0)
                return r;
        } else {
            if (l->in_off == l->in_len && (r = fill(l)) <= 0)
                return r;
            used = sbx_frame_reader_feed(&l->reader, l->in + l->in_off, l->in_len - l->in_off,
                                         &frame, &len);
            if (used < 0) {
                *ret_reason = frame_error(used, &l->reader);
                return used == -ENOMEM ? -ENOMEM : -EBADMSG;
            }
            l->in_off += (size_t)used;
        }
        if (!frame)
            continue;
        r = l->has_pending ? attach(l, frame, len, msg) : decode(l, frame, len, msg, ret_reason);
        if (r != 0)
            return r;
    }
}
