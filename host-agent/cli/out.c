/* A run's stdout and stderr through writer threads, escaped on a terminal (out.h). */
#include "cli/out.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/escape.h"
#include "cli/writer.h"

typedef struct {
    SbxWriter *writer; /* shared with the other stream when both are one destination */
    gboolean tty;
    SbxEscaper escaper; /* the guest's bytes on a terminal, across chunks */
    gboolean dropping;  /* the reader fell SBX_WRITER_QUEUE_MAX behind: the rest is dropped */
    guint64 dropped;    /* guest bytes not queued (slow or gone reader) */
} Stream;

struct SbxOut {
    Stream s[SBX_STREAM__COUNT];
};

/* Both descriptors lead to one file, pipe or terminal. */
static gboolean same_destination(int a, int b)
{
    struct stat sa, sb;

    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

SbxOut *sbx_out_new_fds(int out_fd, int err_fd)
{
    SbxOut *o = g_new0(SbxOut, 1);
    int fds[SBX_STREAM__COUNT] = {out_fd, err_fd};

    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        o->s[i].tty = isatty(fds[i]);
        sbx_escaper_init(&o->s[i].escaper, SBX_ESCAPE_TEXT);
    }
    o->s[SBX_STREAM_STDOUT].writer = sbx_writer_new(out_fd);
    o->s[SBX_STREAM_STDERR].writer =
        same_destination(out_fd, err_fd) ? o->s[SBX_STREAM_STDOUT].writer : sbx_writer_new(err_fd);
    return o;
}

SbxOut *sbx_out_new(void)
{
    return sbx_out_new_fds(STDOUT_FILENO, STDERR_FILENO);
}

gboolean sbx_out_is_tty(const SbxOut *o, SbxStream stream)
{
    return o->s[stream].tty;
}

/* A note of the host's on stderr, past the bound (it is one line). */
static void note(SbxOut *o, const char *text)
{
    sbx_writer_push(o->s[SBX_STREAM_STDERR].writer, text, strlen(text), TRUE);
}

void sbx_out_guest(SbxOut *o, SbxStream stream, const guint8 *data, gsize len)
{
    Stream *st = &o->s[stream];
    g_autoptr(GBytes) bytes = NULL;

    if (st->dropping || sbx_writer_dead(st->writer)) {
        st->dropped += len;
        return;
    }
    if (st->tty) {
        GString *escaped = g_string_sized_new(len + 16);
        sbx_escaper_feed(&st->escaper, data, len, escaped);
        bytes = g_string_free_to_bytes(escaped);
    } else {
        bytes = g_bytes_new(data, len);
    }
    if (sbx_writer_push_bytes(st->writer, bytes, FALSE)) {
        return;
    }
    st->dropped += len;
    if (!sbx_writer_dead(st->writer)) { /* full: the reader is too slow (gone: silent) */
        g_autofree char *text = g_strdup_printf(
            "sandbox: the reader of %s does not keep up (%u MiB waiting): the rest of the "
            "program's %s is dropped\n",
            sbx_stream_name(stream), SBX_WRITER_QUEUE_MAX >> 20, sbx_stream_name(stream));
        st->dropping = TRUE;
        note(o, text);
    }
}

/* What the escaper of @st holds (the start of a character that never came whole). */
static void finish_guest(Stream *st)
{
    if (st->tty && st->escaper.n_held > 0 && !st->dropping) {
        g_autoptr(GString) rest = g_string_new(NULL);
        sbx_escaper_finish(&st->escaper, rest);
        sbx_writer_push(st->writer, rest->str, rest->len, TRUE);
    }
}

void sbx_out_text(SbxOut *o, SbxStream stream, const char *text)
{
    Stream *st = &o->s[stream];

    finish_guest(st); /* the guest's bytes on this stream came before */
    if (st->tty) {
        g_autofree char *safe = sbx_escape(text, -1, SBX_ESCAPE_TEXT);
        sbx_writer_push(st->writer, safe, strlen(safe), TRUE);
    } else {
        sbx_writer_push(st->writer, text, strlen(text), TRUE);
    }
}

void sbx_out_json(SbxOut *o, SbxStream stream, const char *json, gsize len)
{
    Stream *st = &o->s[stream];

    if (st->tty) {
        g_autofree char *safe = sbx_escape(json, len, SBX_ESCAPE_JSON);
        sbx_writer_push(st->writer, safe, strlen(safe), TRUE);
    } else {
        sbx_writer_push(st->writer, json, len, TRUE);
    }
}

guint64 sbx_out_dropped(const SbxOut *o, SbxStream stream)
{
    return o->s[stream].dropped;
}

gsize sbx_out_queued(const SbxOut *o, SbxStream stream)
{
    return sbx_writer_queued(o->s[stream].writer);
}

/* Flush @w within the bounds; the bytes left, 0 if everything was written (or it is dead). */
static gsize flush(SbxWriter *w)
{
    if (sbx_writer_flush(w, SBX_WRITER_FLUSH_STALL_MS, SBX_WRITER_FLUSH_MAX_MS)) {
        return 0;
    }
    return MAX(sbx_writer_queued(w), 1);
}

void sbx_out_free(SbxOut *o)
{
    SbxWriter *out, *err;

    if (o == NULL) {
        return;
    }
    out = o->s[SBX_STREAM_STDOUT].writer;
    err = o->s[SBX_STREAM_STDERR].writer;
    finish_guest(&o->s[SBX_STREAM_STDOUT]);
    finish_guest(&o->s[SBX_STREAM_STDERR]);
    gsize left = flush(out);
    if (err != out) {
        if (left > 0) {
            g_autofree char *text = g_strdup_printf("sandbox: gave up on %" G_GSIZE_FORMAT
                                                    " bytes of stdout: its reader did not take "
                                                    "them in time\n",
                                                    left);
            note(o, text);
        }
        flush(err);
        sbx_writer_free(err);
    }
    sbx_writer_free(out);
    g_free(o);
}
