/* Bounded logs of child processes and the guest console (see logring.h). */
#include "logring.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <string.h>
#include <unistd.h>

/* One read: the pipe and socket buffers are 64 KiB; 4 KiB keeps the stack frame small. */
#define READ_CHUNK 4096

struct SbxLogRing {
    guint8 *buf;
    gsize capacity;
    gsize start; /* index of the oldest byte */
    gsize len;   /* bytes kept, <= capacity */
    guint64 total;
    int fd;
    guint watch;
    int copy_fd;
    gsize copy_left; /* bytes we may still copy to copy_fd */
};

char *sbx_log_sanitize(const char *data, gsize len)
{
    GString *out = g_string_sized_new(len + 16);
    g_autofree char *raw = NULL;

    for (gsize i = 0; i < len; i++) {
        guchar c = (guchar)data[i];
        if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f))
            g_string_append_c(out, (char)c);
        else if (c != '\r')
            g_string_append_printf(out, "\\x%02x", c);
    }
    raw = g_string_free(out, FALSE);
    return g_utf8_make_valid(raw, -1);
}

static void copy_out(SbxLogRing *ring, const guint8 *data, gsize len)
{
    static const char note[] = "\n[... console copy truncated]\n";
    g_autofree char *text = NULL;
    gsize n;

    if (ring->copy_fd < 0 || ring->copy_left == 0)
        return;
    n = MIN(len, ring->copy_left);
    ring->copy_left -= n;
    text = sbx_log_sanitize((const char *)data, n);
    /* Best effort: a failing stderr must not stop the VM. */
    if (write(ring->copy_fd, text, strlen(text)) < 0)
        ring->copy_left = 0;
    if (ring->copy_left == 0 && write(ring->copy_fd, note, sizeof note - 1) < 0)
        return;
}

void sbx_log_ring_append(SbxLogRing *ring, const void *data, gsize len)
{
    const guint8 *p = data;

    ring->total += len;
    copy_out(ring, p, len);
    if (len >= ring->capacity) {
        memcpy(ring->buf, p + len - ring->capacity, ring->capacity);
        ring->start = 0;
        ring->len = ring->capacity;
        return;
    }
    for (gsize i = 0; i < len; i++) {
        ring->buf[(ring->start + ring->len) % ring->capacity] = p[i];
        if (ring->len < ring->capacity)
            ring->len++;
        else
            ring->start = (ring->start + 1) % ring->capacity;
    }
}

/* Read until EAGAIN or EOF. Returns FALSE at EOF or on an error (the fd is then closed). */
static gboolean read_available(SbxLogRing *ring)
{
    guint8 chunk[READ_CHUNK];

    if (ring->fd < 0)
        return FALSE;
    for (;;) {
        ssize_t n = read(ring->fd, chunk, sizeof chunk);
        if (n > 0) {
            sbx_log_ring_append(ring, chunk, (gsize)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return TRUE;
        close(ring->fd);
        ring->fd = -1;
        return FALSE;
    }
}

static gboolean on_readable(int fd, GIOCondition cond, gpointer data)
{
    SbxLogRing *ring = data;

    (void)fd;
    (void)cond;
    if (read_available(ring))
        return G_SOURCE_CONTINUE;
    ring->watch = 0;
    return G_SOURCE_REMOVE;
}

SbxLogRing *sbx_log_ring_new(int fd, gsize capacity, int copy_fd, gsize copy_max)
{
    SbxLogRing *ring = g_new0(SbxLogRing, 1);

    g_assert(capacity > 0);
    ring->buf = g_malloc(capacity);
    ring->capacity = capacity;
    ring->fd = fd;
    ring->copy_fd = copy_fd;
    ring->copy_left = copy_fd >= 0 ? copy_max : 0;
    if (fd >= 0) {
        g_unix_set_fd_nonblocking(fd, TRUE, NULL);
        ring->watch = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_readable, ring);
    }
    return ring;
}

void sbx_log_ring_drain(SbxLogRing *ring)
{
    if (!read_available(ring) && ring->watch) {
        g_source_remove(ring->watch);
        ring->watch = 0;
    }
}

void sbx_log_ring_finish(SbxLogRing *ring)
{
    read_available(ring);
    if (ring->watch)
        g_source_remove(ring->watch);
    ring->watch = 0;
    if (ring->fd >= 0)
        close(ring->fd);
    ring->fd = -1;
}

char *sbx_log_ring_text(const SbxLogRing *ring)
{
    g_autofree char *flat = g_malloc(ring->len + 1);
    gsize first = MIN(ring->len, ring->capacity - ring->start);

    memcpy(flat, ring->buf + ring->start, first);
    memcpy(flat + first, ring->buf, ring->len - first);
    return sbx_log_sanitize(flat, ring->len);
}

char *sbx_log_ring_tail_lines(const SbxLogRing *ring, guint max_lines)
{
    g_autofree char *text = sbx_log_ring_text(ring);
    char *p;
    guint lines = 0;

    g_strchomp(text);
    for (p = text + strlen(text); p > text; p--) {
        if (p[-1] == '\n' && ++lines == max_lines)
            break;
    }
    return g_strdup(p);
}

guint64 sbx_log_ring_total(const SbxLogRing *ring)
{
    return ring->total;
}

void sbx_log_ring_free(SbxLogRing *ring)
{
    if (!ring)
        return;
    if (ring->watch)
        g_source_remove(ring->watch);
    if (ring->fd >= 0)
        close(ring->fd);
    g_free(ring->buf);
    g_free(ring);
}
