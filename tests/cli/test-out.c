/*
 * Output that never blocks the loop (host-agent/cli/writer.c, out.c): a reader that does not
 * read leaves every call returning at once and the flush at the end bounded; a slow reader gets
 * everything; a gone reader (EPIPE) drops the rest; a full queue drops the rest with one note;
 * a terminal gets escaped bytes (a character split across chunks intact), a pipe exact ones;
 * stdout and stderr on one destination keep their order.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>

#include "cli/out.h"
#include "cli/writer.h"
#include "pty.h"

#define CHUNK (64 * 1024)

static void make_pipe(int fds[2])
{
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
}

/* Read from @fd (blocking) until @want bytes or EOF, at most @timeout_ms; what came. */
static GString *read_for(int fd, gsize want, int timeout_ms)
{
    GString *got = g_string_new(NULL);
    gint64 end = g_get_monotonic_time() + timeout_ms * 1000ll;
    char buf[CHUNK];

    while (got->len < want) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        int left = (int)((end - g_get_monotonic_time()) / 1000);
        if (left <= 0 || poll(&q, 1, left) <= 0) {
            break;
        }
        ssize_t n = read(fd, buf, MIN(sizeof(buf), want - got->len));
        if (n <= 0) {
            break;
        }
        g_string_append_len(got, buf, n);
    }
    return got;
}

/* Nobody reads: pushes return at once and stop at the bound; the flush gives up in time. */
static void test_reader_not_reading(void **state)
{
    int fds[2];
    static guint8 chunk[CHUNK];
    gsize pushed = 0;
    (void)state;

    make_pipe(fds);
    SbxWriter *w = sbx_writer_new(fds[1]);
    close(fds[1]); /* the writer has its own duplicate */
    while (sbx_writer_push(w, chunk, sizeof(chunk), FALSE)) {
        pushed += sizeof(chunk);
        assert_true(pushed <= SBX_WRITER_QUEUE_MAX + (16u << 20)); /* the pipe holds some */
    }
    assert_true(pushed >= SBX_WRITER_QUEUE_MAX - CHUNK);
    assert_true(sbx_writer_queued(w) <= SBX_WRITER_QUEUE_MAX);
    assert_false(sbx_writer_dead(w));
    assert_true(sbx_writer_push(w, "note", 4, TRUE)); /* forced: past the bound */

    gint64 t0 = g_get_monotonic_time();
    assert_false(sbx_writer_flush(w, 300, 5000));
    gint64 took_ms = (g_get_monotonic_time() - t0) / 1000;
    assert_true(took_ms >= 250);
    assert_true(took_ms < 4000); /* the stall bound, not the total one, ended it */
    sbx_writer_free(w);          /* its thread is blocked in write(): left to finish */
    close(fds[0]);               /* ... which it does now, with EPIPE */
}

typedef struct {
    int fd;
    GString *got;
} SlowReader;

static gpointer slow_reader(gpointer data)
{
    SlowReader *r = data;
    char buf[4096];
    ssize_t n;

    while ((n = read(r->fd, buf, sizeof(buf))) > 0) {
        g_string_append_len(r->got, buf, n);
        g_usleep(200); /* ~20 MB/s at most: slower than the pushes */
    }
    return NULL;
}

/* A slow reader that reads gets every byte, in order. */
static void test_slow_reader_gets_all(void **state)
{
    int fds[2];
    SlowReader r = {.got = g_string_new(NULL)};
    g_autoptr(GString) sent = g_string_new(NULL);
    (void)state;

    make_pipe(fds);
    r.fd = fds[0];
    GThread *t = g_thread_new("slow-reader", slow_reader, &r);
    SbxWriter *w = sbx_writer_new(fds[1]);
    close(fds[1]);
    for (int i = 0; i < 200; i++) {
        g_autofree char *line = g_strdup_printf("%d %s\n", i, i % 2 ? "odd" : "even");
        g_string_append(sent, line);
        assert_true(sbx_writer_push(w, line, strlen(line), FALSE));
    }
    g_autofree guint8 *big = g_malloc(4 << 20);
    memset(big, 'z', 4 << 20);
    assert_true(sbx_writer_push(w, big, 4 << 20, FALSE));
    g_string_append_len(sent, (char *)big, 4 << 20);
    assert_true(sbx_writer_flush(w, SBX_WRITER_FLUSH_STALL_MS, 60000));
    assert_int_equal(sbx_writer_queued(w), 0);
    sbx_writer_free(w); /* closes its duplicate: the reader sees EOF */
    g_thread_join(t);
    assert_int_equal(r.got->len, sent->len);
    assert_memory_equal(r.got->str, sent->str, sent->len);
    close(fds[0]);
    g_string_free(r.got, TRUE);
}

/* EPIPE (`| head`): the writer is dead, the rest is dropped, nothing blocks. */
static void test_reader_gone(void **state)
{
    int fds[2];
    static guint8 chunk[CHUNK];
    (void)state;

    make_pipe(fds);
    SbxWriter *w = sbx_writer_new(fds[1]);
    close(fds[1]);
    close(fds[0]);
    assert_true(sbx_writer_push(w, chunk, sizeof(chunk), FALSE));
    assert_true(sbx_writer_flush(w, 2000, 5000)); /* nothing left to write: dropped */
    assert_true(sbx_writer_dead(w));
    assert_false(sbx_writer_push(w, chunk, sizeof(chunk), TRUE));
    sbx_writer_free(w);
}

/* A full queue: the rest of that stream is dropped with one note on stderr; the exit is bounded
 * and says what was given up. */
static void test_out_drops_with_note(void **state)
{
    int out[2], err[2];
    static guint8 chunk[CHUNK];
    (void)state;

    make_pipe(out);
    make_pipe(err);
    SbxOut *o = sbx_out_new_fds(out[1], err[1]);
    close(out[1]);
    close(err[1]);
    assert_false(sbx_out_is_tty(o, SBX_STREAM_STDOUT));
    memset(chunk, 'x', sizeof(chunk));
    guint64 total = 0;
    while (sbx_out_dropped(o, SBX_STREAM_STDOUT) == 0) {
        sbx_out_guest(o, SBX_STREAM_STDOUT, chunk, sizeof(chunk));
        total += sizeof(chunk);
        assert_true(total < 64u << 20);
    }
    for (int i = 0; i < 10; i++) {
        sbx_out_guest(o, SBX_STREAM_STDOUT, chunk, sizeof(chunk)); /* dropped, no more notes */
    }
    assert_int_equal(sbx_out_dropped(o, SBX_STREAM_STDOUT), 11 * sizeof(chunk));
    sbx_out_guest(o, SBX_STREAM_STDERR, (const guint8 *)"err\n", 4); /* stderr unaffected */
    sbx_out_text(o, SBX_STREAM_STDERR, "sandbox: summary\n");
    gint64 t0 = g_get_monotonic_time();
    sbx_out_free(o);
    gint64 took_ms = (g_get_monotonic_time() - t0) / 1000;
    assert_true(took_ms >= SBX_WRITER_FLUSH_STALL_MS - 100);
    assert_true(took_ms < SBX_WRITER_FLUSH_MAX_MS); /* gave up after the stall, not later */
    g_autoptr(GString) said = read_for(err[0], 1 << 20, 2000);
    const char *note = strstr(said->str, "the reader of stdout does not keep up");
    assert_non_null(note);
    assert_null(strstr(note + strlen("the reader of stdout does not keep up"), "keep up"));
    assert_non_null(strstr(said->str, "err\nsandbox: summary\n"));
    assert_non_null(strstr(said->str, "sandbox: gave up on "));
    close(out[0]);
    close(err[0]);
}

/* A terminal gets escapes (a split character whole), a pipe the exact bytes. */
static void test_out_terminal_and_pipe(void **state)
{
    int term, master, err[2];
    static const char bytes[] = "\x1b[2J\r\xe4\xb8\xad\xc2\x9b!";
    (void)state;

    test_pty_open(80, 24, &term, &master);
    make_pipe(err);
    SbxOut *o = sbx_out_new_fds(term, err[1]);
    close(err[1]);
    assert_true(sbx_out_is_tty(o, SBX_STREAM_STDOUT));
    assert_false(sbx_out_is_tty(o, SBX_STREAM_STDERR));
    for (gsize i = 0; i < sizeof(bytes) - 1; i++) { /* one byte a chunk */
        sbx_out_guest(o, SBX_STREAM_STDOUT, (const guint8 *)bytes + i, 1);
        sbx_out_guest(o, SBX_STREAM_STDERR, (const guint8 *)bytes + i, 1);
    }
    sbx_out_guest(o, SBX_STREAM_STDOUT, (const guint8 *)"\xe4\xb8", 2); /* never completed */
    sbx_out_text(o, SBX_STREAM_STDOUT, "Error: \x1b[8mhidden\n");
    sbx_out_json(o, SBX_STREAM_STDOUT, "{\"s\":\"\x7f\"}", strlen("{\"s\":\"\x7f\"}"));
    sbx_out_free(o);
    g_autoptr(GString) shown = g_string_new(NULL);
    test_pty_drain(master, shown);
    assert_string_equal(shown->str, "\\x1b[2J\\x0d\xe4\xb8\xad\\u009b!\\xe4\\xb8"
                                    "Error: \\x1b[8mhidden\n{\"s\":\"\\u007f\"}");
    g_autoptr(GString) exact = read_for(err[0], sizeof(bytes) - 1, 2000);
    assert_int_equal(exact->len, sizeof(bytes) - 1);
    assert_memory_equal(exact->str, bytes, sizeof(bytes) - 1);
    close(term);
    close(master);
    close(err[0]);
}

/* stdout and stderr on one pipe (2>&1): one writer, the order kept. */
static void test_out_one_destination(void **state)
{
    int fds[2];
    (void)state;

    make_pipe(fds);
    SbxOut *o = sbx_out_new_fds(fds[1], fds[1]);
    close(fds[1]);
    for (int i = 0; i < 100; i++) {
        sbx_out_guest(o, i % 2 ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT, (const guint8 *)"ab", 2);
        sbx_out_guest(o, i % 2 ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT, (const guint8 *)"c", 1);
    }
    sbx_out_free(o);
    g_autoptr(GString) got = read_for(fds[0], 1000, 2000);
    assert_int_equal(got->len, 300);
    for (int i = 0; i < 100; i++) {
        assert_memory_equal(got->str + 3 * i, "abc", 3);
    }
    close(fds[0]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* as in the sandbox: a gone reader is EPIPE */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader_not_reading),    cmocka_unit_test(test_slow_reader_gets_all),
        cmocka_unit_test(test_reader_gone),           cmocka_unit_test(test_out_drops_with_note),
        cmocka_unit_test(test_out_terminal_and_pipe), cmocka_unit_test(test_out_one_destination),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
