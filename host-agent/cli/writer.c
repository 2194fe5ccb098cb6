/* A descriptor written by a thread of its own, from a bounded queue (writer.h). */
#include "cli/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

/*
 * On a non-blocking descriptor the thread waits for room at most this long at a time, then
 * looks whether it was told to stop: stopping takes at most this long.
 */
#define WRITER_POLL_MS 100

struct SbxWriter {
    int fd;          /* a duplicate of the caller's, closed with the writer */
    gboolean own_fd; /* FALSE if it could not be duplicated: the caller's own */
    gint refs;       /* the owner's and the thread's: the thread may outlive sbx_writer_free() */
    GThread *thread;
    gint stop; /* atomic: drop what is queued and end */
    GMutex lock;
    GCond wake;     /* to the thread: bytes queued, or stop */
    GCond progress; /* to a flush: bytes written, or the writer died */
    GQueue chunks;  /* GBytes, oldest first */
    gsize queued;   /* bytes in chunks and in the chunk being written */
    gboolean busy;  /* the thread is writing a chunk it took */
    gboolean dead;
    gint64 written_us; /* monotonic time the last bytes were written */
};

static void writer_unref(SbxWriter *w)
{
    if (!g_atomic_int_dec_and_test(&w->refs)) {
        return;
    }
    g_queue_clear_full(&w->chunks, (GDestroyNotify)g_bytes_unref);
    if (w->own_fd) {
        close(w->fd);
    }
    g_mutex_clear(&w->lock);
    g_cond_clear(&w->wake);
    g_cond_clear(&w->progress);
    g_free(w);
}

static void note_progress(SbxWriter *w)
{
    g_mutex_lock(&w->lock);
    w->written_us = g_get_monotonic_time();
    g_cond_broadcast(&w->progress);
    g_mutex_unlock(&w->lock);
}

/* Write @chunk whole. FALSE if the descriptor failed (EPIPE: nobody reads any more). */
static gboolean write_chunk(SbxWriter *w, GBytes *chunk)
{
    gsize len;
    const guint8 *p = g_bytes_get_data(chunk, &len);

    while (len > 0 && !g_atomic_int_get(&w->stop)) {
        ssize_t n = write(w->fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd q = {.fd = w->fd, .events = POLLOUT};
            poll(&q, 1, WRITER_POLL_MS);
            continue;
        }
        if (n <= 0) {
            return FALSE;
        }
        p += n;
        len -= n;
        note_progress(w);
    }
    return TRUE;
}

static gpointer writer_thread(gpointer data)
{
    SbxWriter *w = data;

    g_mutex_lock(&w->lock);
    for (;;) {
        while (g_queue_is_empty(&w->chunks) && !g_atomic_int_get(&w->stop)) {
            g_cond_wait(&w->wake, &w->lock);
        }
        if (g_atomic_int_get(&w->stop)) {
            break;
        }
        GBytes *chunk = g_queue_pop_head(&w->chunks);
        w->busy = TRUE;
        g_mutex_unlock(&w->lock);
        gboolean ok = write_chunk(w, chunk);
        g_mutex_lock(&w->lock);
        w->busy = FALSE;
        w->queued -= g_bytes_get_size(chunk);
        g_bytes_unref(chunk);
        if (!ok) {
            w->dead = TRUE;
            g_queue_clear_full(&w->chunks, (GDestroyNotify)g_bytes_unref);
            w->queued = 0;
        }
        g_cond_broadcast(&w->progress);
    }
    g_mutex_unlock(&w->lock);
    writer_unref(w);
    return NULL;
}

SbxWriter *sbx_writer_new(int fd)
{
    SbxWriter *w = g_new0(SbxWriter, 1);

    /*
     * A duplicate, so that a thread left blocked in write() never writes to a number the
     * caller closed and the process reused for something else.
     */
    w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    w->own_fd = w->fd >= 0;
    if (!w->own_fd) {
        w->fd = fd; /* out of descriptors: write the caller's, which outlives us in practice */
    }
    w->refs = 2;
    g_mutex_init(&w->lock);
    g_cond_init(&w->wake);
    g_cond_init(&w->progress);
    g_queue_init(&w->chunks);
    w->thread = g_thread_new("sbx-writer", writer_thread, w);
    return w;
}

gboolean sbx_writer_push_bytes(SbxWriter *w, GBytes *bytes, gboolean force)
{
    gsize len = g_bytes_get_size(bytes);
    gboolean ok;

    g_mutex_lock(&w->lock);
    ok = !w->dead && (force || w->queued + len <= SBX_WRITER_QUEUE_MAX);
    if (ok && len > 0) {
        g_queue_push_tail(&w->chunks, g_bytes_ref(bytes));
        w->queued += len;
        g_cond_signal(&w->wake);
    }
    g_mutex_unlock(&w->lock);
    return ok;
}

gboolean sbx_writer_push(SbxWriter *w, const void *data, gsize len, gboolean force)
{
    g_autoptr(GBytes) bytes = g_bytes_new(data, len);

    return sbx_writer_push_bytes(w, bytes, force);
}

gboolean sbx_writer_dead(SbxWriter *w)
{
    g_mutex_lock(&w->lock);
    gboolean dead = w->dead;
    g_mutex_unlock(&w->lock);
    return dead;
}

gsize sbx_writer_queued(SbxWriter *w)
{
    g_mutex_lock(&w->lock);
    gsize queued = w->queued;
    g_mutex_unlock(&w->lock);
    return queued;
}

gboolean sbx_writer_flush(SbxWriter *w, guint stall_ms, guint max_ms)
{
    gint64 start = g_get_monotonic_time();
    gint64 end = start + max_ms * G_GINT64_CONSTANT(1000);
    gboolean done;

    g_mutex_lock(&w->lock);
    while ((w->busy || !g_queue_is_empty(&w->chunks)) && !w->dead) {
        /* Progress counts from the start of the flush: bytes written before it are old news. */
        gint64 until = MIN(end, MAX(w->written_us, start) + stall_ms * G_GINT64_CONSTANT(1000));
        if (g_get_monotonic_time() >= until) {
            break;
        }
        g_cond_wait_until(&w->progress, &w->lock, until);
    }
    done = w->dead || (!w->busy && g_queue_is_empty(&w->chunks));
    g_mutex_unlock(&w->lock);
    return done;
}

void sbx_writer_free(SbxWriter *w)
{
    gboolean busy;

    if (w == NULL) {
        return;
    }
    g_mutex_lock(&w->lock);
    g_atomic_int_set(&w->stop, 1);
    g_cond_broadcast(&w->wake);
    busy = w->busy;
    g_mutex_unlock(&w->lock);
    if (busy) {
        /* Perhaps blocked in write() for good: the thread frees the writer if it ever returns. */
        g_thread_unref(w->thread);
    } else {
        g_thread_join(w->thread); /* it ends at once: it takes no chunk once told to stop */
    }
    writer_unref(w);
}
