/*
 * Framed non-blocking channel over a GSocket (see channel.h).
 */
#include "channel.h"

#include <errno.h>
#include <gio/gio.h>
#include <unistd.h>

#include "protocol/frame.h"

/*
 * Bytes read per wake-up. One read per main-loop dispatch keeps a guest that floods the channel
 * from starving timers and other sources; 256 KiB holds a few output frames, so streaming at
 * full speed does not cost a syscall per frame.
 */
#define READ_BUF (256 * 1024)

typedef struct {
    uint8_t *data; /* malloc'd, or in @bytes */
    size_t len;
    GBytes *bytes; /* a data frame's payload (sbx_channel_send_bytes()), or NULL */
} OutFrame;

struct SbxChannel {
    GSocket *socket;
    GMainContext *context;
    GSource *in_source;
    GSource *out_source;
    SbxFrameReader reader;
    SbxChannelCallbacks cb;
    gpointer user_data;
    gboolean stopped;
    GQueue out;     /* OutFrame* */
    size_t out_off; /* bytes of the head already written */
    gsize queued;   /* bytes in the queue not yet written */
    gsize max_queue;
    uint8_t buf[READ_BUF];
};

static void out_frame_free(gpointer p)
{
    OutFrame *f = p;
    if (f->bytes != NULL) {
        g_bytes_unref(f->bytes);
    } else {
        free(f->data);
    }
    g_free(f);
}

static void drop_source(GSource **src)
{
    if (*src != NULL) {
        g_source_destroy(*src);
        g_source_unref(*src);
        *src = NULL;
    }
}

void sbx_channel_stop(SbxChannel *ch)
{
    ch->stopped = TRUE;
    drop_source(&ch->in_source);
    drop_source(&ch->out_source);
    g_queue_clear_full(&ch->out, out_frame_free);
    ch->queued = 0;
    ch->out_off = 0;
}

static void fail(SbxChannel *ch, SbxChannelFailure failure, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/* Stop and report once. */
static void fail(SbxChannel *ch, SbxChannelFailure failure, const char *fmt, ...)
{
    va_list ap;

    if (ch->stopped) {
        return;
    }
    sbx_channel_stop(ch);
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    ch->cb.on_error(failure, msg, ch->user_data);
}

static void frame_error(SbxChannel *ch, ssize_t err)
{
    const uint8_t *h = ch->reader.header;
    guint32 word = (guint32)h[0] << 24 | (guint32)h[1] << 16 | (guint32)h[2] << 8 | h[3];
    guint32 n = word & ~SBX_FRAME_DATA;
    const char *kind = word & SBX_FRAME_DATA ? "data frame" : "frame";

    if (err == -EPROTO) {
        fail(ch, SBX_CHANNEL_BAD_FRAME,
             "a %s of %u bytes where the data frame of %u bytes "
             "announced was due",
             kind, n, ch->reader.data_due);
    } else if (err == -EMSGSIZE && (word & SBX_FRAME_DATA)) {
        fail(ch, SBX_CHANNEL_BAD_FRAME, "a data frame of %u bytes that no message announced", n);
    } else if (err == -EMSGSIZE) {
        fail(ch, SBX_CHANNEL_BAD_FRAME, "frame of %u bytes announced, limit %u", word,
             ch->reader.max_len);
    } else if (err == -EBADMSG) {
        fail(ch, SBX_CHANNEL_BAD_FRAME, "frame of 0 bytes announced");
    } else {
        fail(ch, SBX_CHANNEL_IO, "frame reader: %s", g_strerror((int)-err));
    }
}

/* Split @n bytes of ch->buf into frames and hand them over until one stops the channel. */
static void feed(SbxChannel *ch, size_t n)
{
    size_t off = 0;

    while (off < n && !ch->stopped) {
        char *frame = NULL;
        size_t len = 0;
        gboolean data = ch->reader.data_due > 0; /* then the frame that completes is that one */
        ssize_t used = sbx_frame_reader_feed(&ch->reader, ch->buf + off, n - off, &frame, &len);
        if (used < 0) {
            frame_error(ch, used);
            return;
        }
        off += used;
        if (frame != NULL) {
            gboolean go_on;
            if (data) {
                go_on = ch->cb.on_data((guint8 *)frame, len, ch->user_data);
            } else {
                go_on = ch->cb.on_frame(frame, len, ch->user_data);
                free(frame);
            }
            if (!go_on) {
                sbx_channel_stop(ch);
                return;
            }
        } else if (used == 0) {
            break; /* cannot happen: the reader consumes input until a frame completes */
        }
    }
}

static gboolean on_readable(GSocket *socket, GIOCondition cond, gpointer data)
{
    SbxChannel *ch = data;
    g_autoptr(GError) error = NULL;
    (void)cond;

    gssize n = g_socket_receive(socket, (gchar *)ch->buf, READ_BUF, NULL, &error);
    if (n < 0) {
        if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)) {
            return G_SOURCE_CONTINUE;
        }
        fail(ch, SBX_CHANNEL_IO, "read from the guest: %s", error->message);
        return G_SOURCE_REMOVE;
    }
    if (n == 0) {
        gboolean cut = sbx_frame_reader_pending(&ch->reader);
        fail(ch, cut ? SBX_CHANNEL_IO : SBX_CHANNEL_EOF,
             cut ? "guest closed the channel in the middle of a frame"
                 : "guest closed the channel");
        return G_SOURCE_REMOVE;
    }
    feed(ch, n);
    return ch->stopped ? G_SOURCE_REMOVE : G_SOURCE_CONTINUE;
}

static gboolean on_writable(GSocket *socket, GIOCondition cond, gpointer data);

/* Write what the socket takes. Returns 0 or -errno (message in *@ret_error). */
static int flush(SbxChannel *ch, GError **ret_error)
{
    OutFrame *f;

    while ((f = g_queue_peek_head(&ch->out)) != NULL) {
        gssize n = g_socket_send(ch->socket, (const gchar *)f->data + ch->out_off,
                                 f->len - ch->out_off, NULL, ret_error);
        if (n < 0 && g_error_matches(*ret_error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)) {
            g_clear_error(ret_error);
            if (ch->out_source == NULL) {
                ch->out_source = g_socket_create_source(ch->socket, G_IO_OUT, NULL);
                g_source_set_callback(ch->out_source, G_SOURCE_FUNC(on_writable), ch, NULL);
                g_source_attach(ch->out_source, ch->context);
            }
            return 0;
        }
        if (n < 0) {
            return -EPIPE;
        }
        ch->out_off += n;
        ch->queued -= n;
        if (ch->out_off == f->len) {
            out_frame_free(g_queue_pop_head(&ch->out));
            ch->out_off = 0;
        }
    }
    drop_source(&ch->out_source);
    return 0;
}

static gboolean on_writable(GSocket *socket, GIOCondition cond, gpointer data)
{
    SbxChannel *ch = data;
    g_autoptr(GError) error = NULL;
    (void)socket;
    (void)cond;

    if (flush(ch, &error) < 0) {
        fail(ch, SBX_CHANNEL_IO, "write to the guest: %s",
             error != NULL ? error->message : "failed");
        return G_SOURCE_REMOVE;
    }
    return ch->out_source != NULL ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

/* Queue @f (taken) and write what the socket takes now. */
static int enqueue(SbxChannel *ch, OutFrame *f)
{
    g_autoptr(GError) error = NULL;

    if (ch->stopped) {
        out_frame_free(f);
        return -EPIPE;
    }
    if (f->len > ch->max_queue - ch->queued) {
        out_frame_free(f);
        return -ENOBUFS;
    }
    g_queue_push_tail(&ch->out, f);
    ch->queued += f->len;
    if (ch->out_source != NULL) {
        return 0; /* already waiting for the socket */
    }
    if (flush(ch, &error) < 0) {
        sbx_channel_stop(ch);
        return -EPIPE;
    }
    return 0;
}

int sbx_channel_send(SbxChannel *ch, uint8_t *frame, size_t len)
{
    OutFrame *f = g_new0(OutFrame, 1);

    f->data = frame;
    f->len = len;
    return enqueue(ch, f);
}

int sbx_channel_send_bytes(SbxChannel *ch, GBytes *bytes)
{
    OutFrame *f = g_new0(OutFrame, 1);
    gsize len = 0;

    f->bytes = g_bytes_ref(bytes);
    f->data = (uint8_t *)g_bytes_get_data(bytes, &len);
    f->len = len;
    return enqueue(ch, f);
}

int sbx_channel_expect_data(SbxChannel *ch, guint32 len)
{
    return sbx_frame_reader_expect_data(&ch->reader, len);
}

void sbx_channel_start(SbxChannel *ch)
{
    if (ch->in_source != NULL || ch->stopped) {
        return;
    }
    ch->in_source = g_socket_create_source(ch->socket, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
    g_source_set_callback(ch->in_source, G_SOURCE_FUNC(on_readable), ch, NULL);
    g_source_attach(ch->in_source, ch->context);
}

gsize sbx_channel_queued(const SbxChannel *ch)
{
    return ch->queued;
}

SbxChannel *sbx_channel_new(int fd, guint32 max_frame, gsize max_queue,
                            const SbxChannelCallbacks *callbacks, gpointer user_data,
                            GError **error)
{
    GSocket *socket = g_socket_new_from_fd(fd, error);
    if (socket == NULL) {
        close(fd);
        return NULL;
    }
    g_socket_set_blocking(socket, FALSE);
    SbxChannel *ch = g_new0(SbxChannel, 1);
    ch->socket = socket;
    ch->context = g_main_context_ref_thread_default();
    ch->cb = *callbacks;
    ch->user_data = user_data;
    ch->max_queue = max_queue;
    g_queue_init(&ch->out);
    sbx_frame_reader_init(&ch->reader, max_frame);
    return ch;
}

void sbx_channel_free(SbxChannel *ch)
{
    if (ch == NULL) {
        return;
    }
    sbx_channel_stop(ch);
    sbx_frame_reader_clear(&ch->reader);
    g_socket_close(ch->socket, NULL);
    g_object_unref(ch->socket);
    g_main_context_unref(ch->context);
    g_free(ch);
}
