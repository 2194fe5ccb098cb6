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

int link_send(Link *l, const SbxMsg *msg)
{
    LinkFrame *f = calloc(1, sizeof(*f));
    int r;

    if (!f)
        return -ENOMEM;
    r = sbx_msg_encode(msg, &f->data, &f->len);
    if (r < 0) {
        free(f);
        return r;
    }
    if (l->tail)
        l->tail->next = f;
    else
        l->head = f;
    l->tail = f;
    l->queued += f->len;
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

static char *frame_error(ssize_t err, uint32_t max)
{
    char *s = NULL;

    if (err == -EMSGSIZE && asprintf(&s, "frame: length above the limit of %u bytes", max) >= 0)
        return s;
    if (err == -EBADMSG)
        return strdup("frame: length 0");
    return NULL;
}

int link_recv(Link *l, SbxMsg *msg, char **ret_reason)
{
    *ret_reason = NULL;
    for (;;) {
        char *frame = NULL;
        size_t len = 0;
        ssize_t used;
        int r;

        if (l->in_off == l->in_len) {
            r = fill(l);
            if (r <= 0)
                return r;
        }
        used = sbx_frame_reader_feed(&l->reader, l->in + l->in_off, l->in_len - l->in_off, &frame,
                                     &len);
        if (used < 0) {
            *ret_reason = frame_error(used, l->reader.max_len);
            return used == -ENOMEM ? -ENOMEM : -EBADMSG;
        }
        l->in_off += (size_t)used;
        if (!frame)
            continue;
        r = sbx_msg_decode(frame, len, msg, ret_reason);
        free(frame);
        return r < 0 ? r : 1;
    }
}
