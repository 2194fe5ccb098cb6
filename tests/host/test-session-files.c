/*
 * Workspace file operations on a session (host-agent/session/files.h) against the fake guest's
 * workspace in memory (tests/host/fake-files.c): puts and gets in chunks with their SHA-256,
 * SBX_SESSION_FILE_WINDOW of them in flight, the cap of a get, lists and deletes, the guest's
 * errors as GErrors (the answers still owed drained first), cancels, refusals, and hostile
 * answers (a wrong seq, one out of order, too much data, a size that lies, no answer, a hang-up,
 * an answer twice, data frames unannounced, of the wrong length or missing, data on a write's
 * answer), each of which closes the session.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake-guest.h"
#include "files.h"
#include "session.h"

#define MIB (1024 * 1024)

/* Bound on every wait: a 10 MiB transfer under ASan on a loaded host takes seconds. */
#define WAIT_MS 60000

typedef struct {
    SbxSession *session;
    FakeGuest *guest;
    FakeFiles *files;
    int ready_count;
    int done_count;
    GError *error; /* the last operation's, or NULL */
    guint64 size;
    char sha256[SBX_SESSION_SHA256_HEX_SIZE];
    GBytes *data;
    GString *entries; /* the last list: "d:a f:a/b:3 ..." */
    gboolean truncated;
    gsize n_entries;
    int broken_count;
    char *broken_reason;
    guint chunks; /* on_chunk */
    guint64 chunk_bytes;
    GChecksum *chunk_sha;
    gboolean cancel_in_chunk;
    gboolean cancel_usable;
    int run_done_count;
    GError *in_run_error;  /* a file operation tried during a run */
    struct Source *source; /* put_stream's */
} Fx;

static void on_ready(SbxSession *s, const GError *error, gpointer data)
{
    Fx *fx = data;
    (void)s;

    assert_null(error);
    fx->ready_count++;
}

static void on_broken(SbxSession *s, const char *reason, gpointer data)
{
    Fx *fx = data;
    (void)s;

    fx->broken_count++;
    g_free(fx->broken_reason);
    fx->broken_reason = g_strdup(reason);
}

static void clear_last(Fx *fx)
{
    g_clear_error(&fx->error);
    g_clear_pointer(&fx->data, g_bytes_unref);
    g_string_truncate(fx->entries, 0);
    fx->size = 0;
    fx->sha256[0] = '\0';
    fx->truncated = FALSE;
    fx->n_entries = 0;
}

static void on_done(SbxSession *s, const SbxFileOutcome *out, const GError *error, gpointer data)
{
    Fx *fx = data;
    (void)s;

    clear_last(fx);
    fx->done_count++;
    if (error != NULL) {
        assert_null(out);
        fx->error = g_error_copy(error);
        return;
    }
    fx->size = out->size;
    g_strlcpy(fx->sha256, out->sha256, sizeof(fx->sha256));
    fx->data = out->data != NULL ? g_bytes_ref(out->data) : NULL;
    for (gsize i = 0; i < out->n_entries; i++) {
        const SbxFileEntry *e = &out->entries[i];
        if (e->type == SBX_FILE_TYPE_DIR) {
            g_string_append_printf(fx->entries, "%sd:%s", i > 0 ? " " : "", e->path);
        } else {
            g_string_append_printf(fx->entries, "%sf:%s:%" G_GUINT64_FORMAT, i > 0 ? " " : "",
                                   e->path, e->size);
        }
    }
    fx->n_entries = out->n_entries;
    fx->truncated = out->truncated;
}

/* Spin the loop until @count reaches @n; FALSE after @timeout_ms. */
static gboolean wait_for(const int *count, int n, guint timeout_ms)
{
    gint64 end = g_get_monotonic_time() + timeout_ms * 1000ll;

    while (*count < n && g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(200);
    }
    return *count >= n;
}

static void spin(guint ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000ll;

    while (g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
}

static const SbxSessionCallbacks watch = {.on_broken = on_broken};

/* A session to the fake guest running @script with @files (taken); handshaken if @hello. */
static Fx *fx_new_with(FakeFiles *files, FakeGuestScript script, const SbxSessionCallbacks *cb,
                       gboolean hello)
{
    Fx *fx = g_new0(Fx, 1);
    g_autoptr(GError) error = NULL;
    int fd = -1;

    fx->files = files;
    fx->entries = g_string_new(NULL);
    fx->guest = fake_guest_start(script, files, &fd);
    assert_non_null(fx->guest);
    fx->session = sbx_session_new(fd, cb, fx, &error);
    assert_non_null(fx->session);
    if (hello) {
        assert_true(sbx_session_handshake_async(fx->session, FALSE, on_ready, fx, &error));
        assert_true(wait_for(&fx->ready_count, 1, WAIT_MS));
        assert_true(sbx_session_is_ready(fx->session));
    }
    return fx;
}

static Fx *fx_new(FakeFiles *files)
{
    return fx_new_with(files, fake_guest_script_files, &watch, TRUE);
}

static void fx_free(Fx *fx)
{
    sbx_session_free(fx->session);
    fake_guest_join(fx->guest);
    if (fx->guest->failure != NULL) {
        fail_msg("fake guest: %s", fx->guest->failure);
    }
    fake_guest_join_free(fx->guest);
    fake_files_free(fx->files);
    clear_last(fx);
    g_string_free(fx->entries, TRUE);
    g_free(fx->broken_reason);
    g_clear_pointer(&fx->chunk_sha, g_checksum_free);
    g_clear_error(&fx->in_run_error);
    g_free(fx);
}

/* ---- operations, waited for ------------------------------------------------------------------ */

static void wait_op(Fx *fx, int before)
{
    if (!wait_for(&fx->done_count, before + 1, WAIT_MS)) {
        fail_msg("the file operation did not end within %d ms", WAIT_MS);
    }
    assert_int_equal(fx->done_count, before + 1);
}

static void put(Fx *fx, const char *path, GBytes *contents)
{
    g_autoptr(GError) error = NULL;
    int before = fx->done_count;

    assert_true(sbx_session_file_put_async(fx->session, path, contents, on_done, fx, &error));
    assert_null(error);
    assert_int_equal(fx->done_count, before); /* never from inside the call */
    wait_op(fx, before);
}

static gboolean on_chunk(const guint8 *data, gsize len, gpointer user_data, GError **error)
{
    Fx *fx = user_data;
    (void)error;

    assert_true(len > 0);
    fx->chunks++;
    fx->chunk_bytes += len;
    g_checksum_update(fx->chunk_sha, data, len);
    if (fx->cancel_in_chunk) {
        fx->cancel_usable = sbx_session_file_cancel(fx->session);
    }
    return TRUE;
}

static void get_start(Fx *fx, const char *path, guint64 cap, gboolean streamed)
{
    g_autoptr(GError) error = NULL;

    fx->chunks = 0;
    fx->chunk_bytes = 0;
    g_clear_pointer(&fx->chunk_sha, g_checksum_free);
    fx->chunk_sha = g_checksum_new(G_CHECKSUM_SHA256);
    assert_true(sbx_session_file_get_async(fx->session, path, cap, streamed ? on_chunk : NULL,
                                           on_done, fx, &error));
    assert_null(error);
}

static void get(Fx *fx, const char *path, guint64 cap, gboolean streamed)
{
    int before = fx->done_count;

    get_start(fx, path, cap, streamed);
    wait_op(fx, before);
}

static void list(Fx *fx, const char *path)
{
    g_autoptr(GError) error = NULL;
    int before = fx->done_count;

    assert_true(sbx_session_file_list_async(fx->session, path, on_done, fx, &error));
    wait_op(fx, before);
}

static void delete (Fx *fx, const char *path)
{
    g_autoptr(GError) error = NULL;
    int before = fx->done_count;

    assert_true(sbx_session_file_delete_async(fx->session, path, on_done, fx, &error));
    wait_op(fx, before);
}

static GBytes *random_bytes(gsize len, guint32 seed)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(seed);
    guint8 *buf = g_malloc(len);

    for (gsize i = 0; i < len; i++) {
        buf[i] = (guint8)g_rand_int(rand);
    }
    return g_bytes_new_take(buf, len);
}

static char *sha256_of(GBytes *b)
{
    return g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, b);
}

static void assert_error(const Fx *fx, GIOErrorEnum code, const char *part)
{
    if (fx->error == NULL) {
        fail_msg("expected an error with \"%s\", the operation succeeded", part);
    }
    if (!g_error_matches(fx->error, G_IO_ERROR, code) || strstr(fx->error->message, part) == NULL) {
        fail_msg("expected code %d with \"%s\", got code %d: %s", code, part, fx->error->code,
                 fx->error->message);
    }
}

/* The session is closed: not ready, and the next operation refused with G_IO_ERROR_CLOSED. */
static void assert_closed(Fx *fx, const char *why)
{
    g_autoptr(GError) error = NULL;

    assert_int_equal(fx->broken_count, 1);
    assert_non_null(strstr(fx->broken_reason, why));
    assert_false(sbx_session_is_ready(fx->session));
    assert_false(sbx_session_file_busy(fx->session));
    assert_false(sbx_session_file_list_async(fx->session, NULL, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CLOSED));
    assert_non_null(strstr(error->message, why));
}

/* ---- transfers ---------------------------------------------------------------------------- */

/* 10 MiB of random bytes there and back: 10 writes of 1 MiB, 10 reads, the same SHA-256. */
static void test_round_trip_10mib(void **state)
{
    (void)state;
    Fx *fx = fx_new(fake_files_new());
    g_autoptr(GBytes) contents = random_bytes(10 * MIB, 14);
    g_autofree char *sha = sha256_of(contents);

    put(fx, "dir/sub/blob.bin", contents);
    assert_null(fx->error);
    assert_int_equal(fx->size, 10 * MIB);
    assert_string_equal(fx->sha256, sha);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), 10);
    assert_int_equal(fx->files->write_max, SBX_FILE_CHUNK_MAX);
    g_autoptr(GBytes) there = fake_files_get(fx->files, "dir/sub/blob.bin");
    assert_non_null(there);
    assert_true(g_bytes_equal(there, contents));
    assert_true(sbx_session_is_ready(fx->session));

    get(fx, "dir/sub/blob.bin", 10 * MIB, FALSE);
    assert_null(fx->error);
    assert_int_equal(fx->size, 10 * MIB);
    assert_string_equal(fx->sha256, sha);
    assert_non_null(fx->data);
    assert_true(g_bytes_equal(fx->data, contents));
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_READ), 10);
    assert_true(sbx_session_is_ready(fx->session));
    assert_int_equal(fx->broken_count, 0);
    fx_free(fx);
}

/* A get with on_chunk: the chunks in order, nothing kept, the digest of what came. */
static void test_get_streamed(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) contents = random_bytes(3 * MIB + 12345, 7);
    g_autofree char *sha = sha256_of(contents);

    fake_files_set(files, "s.bin", g_bytes_get_data(contents, NULL), g_bytes_get_size(contents));
    Fx *fx = fx_new(files);
    get(fx, "s.bin", 4 * MIB, TRUE);
    assert_null(fx->error);
    assert_null(fx->data);
    assert_int_equal(fx->chunks, 4);
    assert_int_equal(fx->chunk_bytes, g_bytes_get_size(contents));
    assert_string_equal(g_checksum_get_string(fx->chunk_sha), sha);
    assert_string_equal(fx->sha256, sha);
    assert_int_equal(fx->size, g_bytes_get_size(contents));
    fx_free(fx);
}

/* An empty file: one write with last, one read; the digest of nothing. */
static void test_empty_file(void **state)
{
    (void)state;
    static const char empty_sha[] =
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    Fx *fx = fx_new(fake_files_new());
    g_autoptr(GBytes) nothing = g_bytes_new(NULL, 0);

    put(fx, "empty", nothing);
    assert_null(fx->error);
    assert_int_equal(fx->size, 0);
    assert_string_equal(fx->sha256, empty_sha);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), 1);
    g_autoptr(GBytes) there = fake_files_get(fx->files, "empty");
    assert_non_null(there);
    assert_int_equal(g_bytes_get_size(there), 0);

    get(fx, "empty", 0, FALSE);
    assert_null(fx->error);
    assert_non_null(fx->data);
    assert_int_equal(g_bytes_get_size(fx->data), 0);
    assert_string_equal(fx->sha256, empty_sha);
    get(fx, "empty", 100, TRUE);
    assert_null(fx->error);
    assert_int_equal(fx->chunks, 0);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_READ), 2);
    fx_free(fx);
}

/* The contents of a put_stream: handed out in pieces of at most @piece bytes. */
typedef struct Source {
    GBytes *contents;
    gsize off;
    gsize piece;
    gboolean cancel; /* the first pull cancels the put */
} Source;

/* (The pull function and on_done share the user data: the fixture, which points here.) */
static gssize pull(guint8 *buf, gsize max, gpointer user_data, GError **error)
{
    Fx *fx = user_data;
    Source *src = fx->source;
    gsize total = g_bytes_get_size(src->contents);
    gsize n = MIN(MIN(max, src->piece), total - src->off);
    (void)error;

    if (src->cancel) {
        assert_true(sbx_session_file_cancel(fx->session));
        return 0;
    }
    memcpy(buf, (const guint8 *)g_bytes_get_data(src->contents, NULL) + src->off, n);
    src->off += n;
    return (gssize)n;
}

static void put_stream(Fx *fx, const char *path, GBytes *contents)
{
    g_autoptr(GError) error = NULL;
    Source src = {.contents = contents, .piece = 100000};
    int before = fx->done_count;

    fx->source = &src;
    assert_true(sbx_session_file_put_stream_async(fx->session, path, pull, on_done, fx, &error));
    wait_op(fx, before);
    fx->source = NULL;
}

/* 2 MiB is 2 full chunks and an empty last one; 1.5 MiB is 2 chunks. */
static void test_put_stream(void **state)
{
    (void)state;
    Fx *fx = fx_new(fake_files_new());
    g_autoptr(GBytes) two = random_bytes(2 * MIB, 3);
    g_autoptr(GBytes) one_half = random_bytes(MIB + MIB / 2, 4);
    g_autofree char *sha_two = sha256_of(two);
    g_autofree char *sha_one_half = sha256_of(one_half);

    put_stream(fx, "p/two", two);
    assert_null(fx->error);
    assert_int_equal(fx->size, 2 * MIB);
    assert_string_equal(fx->sha256, sha_two);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), 3);
    g_autoptr(GBytes) there = fake_files_get(fx->files, "p/two");
    assert_true(there != NULL && g_bytes_equal(there, two));

    put_stream(fx, "p/one_half", one_half);
    assert_null(fx->error);
    assert_string_equal(fx->sha256, sha_one_half);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), 5);
    g_autoptr(GBytes) there2 = fake_files_get(fx->files, "p/one_half");
    assert_true(there2 != NULL && g_bytes_equal(there2, one_half));
    fx_free(fx);
}

/* ---- lists and deletes ------------------------------------------------------------------------
 */

static void test_list_delete(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();

    fake_files_set(files, "a/b.txt", "abc", 3);
    fake_files_set(files, "a/c/d.txt", "abcd", 4);
    fake_files_set(files, "e.txt", "abcde", 5);
    Fx *fx = fx_new(files);
    list(fx, NULL);
    assert_null(fx->error);
    assert_string_equal(fx->entries->str, "d:a f:a/b.txt:3 d:a/c f:a/c/d.txt:4 f:e.txt:5");
    assert_false(fx->truncated);
    list(fx, "a");
    assert_string_equal(fx->entries->str, "f:a/b.txt:3 d:a/c f:a/c/d.txt:4");
    list(fx, "e.txt");
    assert_error(fx, G_IO_ERROR_NOT_DIRECTORY, "ENOTDIR");

    delete (fx, "a");
    assert_null(fx->error);
    list(fx, NULL);
    assert_string_equal(fx->entries->str, "f:e.txt:5");
    delete (fx, "e.txt");
    assert_null(fx->error);
    list(fx, NULL);
    assert_null(fx->error);
    assert_int_equal(fx->n_entries, 0);
    delete (fx, "e.txt");
    assert_error(fx, G_IO_ERROR_NOT_FOUND, "ENOENT");
    assert_true(sbx_session_is_ready(fx->session));
    fx_free(fx);
}

/* More entries than an answer holds: SBX_FILE_LIST_MAX of them, and truncated. */
static void test_list_truncated(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();

    for (int i = 0; i < SBX_FILE_LIST_MAX + 6; i++) {
        g_autofree char *path = g_strdup_printf("f%04d", i);
        fake_files_set(files, path, "x", 1);
    }
    Fx *fx = fx_new(files);
    list(fx, NULL);
    assert_null(fx->error);
    assert_int_equal(fx->n_entries, SBX_FILE_LIST_MAX);
    assert_true(fx->truncated);
    fx_free(fx);
}

/* ---- the guest's errors -----------------------------------------------------------------------
 */

static void test_not_found(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();

    fake_files_set(files, "d/f", "x", 1);
    Fx *fx = fx_new(files);
    get(fx, "missing/file", MIB, FALSE);
    assert_error(fx, G_IO_ERROR_NOT_FOUND, "ENOENT");
    assert_non_null(strstr(fx->error->message, "get \"missing/file\""));
    assert_null(fx->data);
    get(fx, "d", MIB, FALSE);
    assert_error(fx, G_IO_ERROR_IS_DIRECTORY, "EISDIR");
    g_autoptr(GBytes) one = g_bytes_new("y", 1);
    put(fx, "d/f/g", one);
    assert_error(fx, G_IO_ERROR_NOT_DIRECTORY, "ENOTDIR");
    /* none of this touched the session */
    assert_true(sbx_session_is_ready(fx->session));
    assert_int_equal(fx->broken_count, 0);
    get(fx, "d/f", 1, FALSE);
    assert_null(fx->error);
    fx_free(fx);
}

/* Refused paths, no space, unknown names; the guest's message cut and without line breaks. */
static void test_guest_errors(void **state)
{
    (void)state;
    Fx *fx = fx_new(fake_files_new());
    g_autoptr(GBytes) small = g_bytes_new("abc", 3);
    g_autoptr(GBytes) big = random_bytes(3 * MIB, 5);
    GString *longer = g_string_new("line one\nline two\x1b[31m ");

    while (longer->len < 5000) {
        g_string_append(longer, "\xc3\xa9"); /* é: a cut must not split it */
    }
    fake_files_fail(fx->files, 0, "ELOOP", "a symbolic link on the path");
    put(fx, "link/x", small);
    assert_error(fx, G_IO_ERROR_PERMISSION_DENIED, "ELOOP");
    assert_non_null(strstr(fx->error->message, "a symbolic link on the path"));
    fake_files_fail(fx->files, 0, "EXDEV", NULL);
    get(fx, "mnt/x", 10, FALSE);
    assert_error(fx, G_IO_ERROR_PERMISSION_DENIED, "EXDEV");

    /* The second chunk refused, the third in flight already: its answer (a refusal too: no
     * write goes on) is read before the put reports the first refusal. */
    fake_files_fail(fx->files, 1, "ENOSPC", longer->str);
    guint writes = fake_files_count(fx->files, SBX_FILE_WRITE);
    put(fx, "big", big);
    assert_error(fx, G_IO_ERROR_NO_SPACE, "ENOSPC");
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), writes + 3);
    assert_true(sbx_session_is_ready(fx->session));
    assert_null(strchr(fx->error->message, '\n'));
    assert_null(strchr(fx->error->message, '\x1b'));
    assert_true(strlen(fx->error->message) < SBX_SESSION_FILE_GUEST_TEXT_MAX + 200);
    assert_true(g_utf8_validate(fx->error->message, -1, NULL));
    g_autoptr(GBytes) absent = fake_files_get(fx->files, "big");
    assert_null(absent);

    /* A get's second read refused, with two more asked ahead: drained the same way. */
    fake_files_set(fx->files, "four", g_bytes_get_data(big, NULL), 3 * MIB);
    fake_files_fail(fx->files, 1, "EIO", NULL);
    guint reads = fake_files_count(fx->files, SBX_FILE_READ);
    get(fx, "four", 4 * MIB, FALSE);
    assert_error(fx, G_IO_ERROR_FAILED, "EIO");
    assert_null(fx->data);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_READ), reads + 3);
    assert_true(sbx_session_is_ready(fx->session));

    fake_files_fail(fx->files, 0, "EWHATEVER", NULL);
    delete (fx, "x");
    assert_error(fx, G_IO_ERROR_FAILED, "EWHATEVER");
    fake_files_fail(fx->files, 0, "not an errno", NULL);
    delete (fx, "x");
    assert_error(fx, G_IO_ERROR_FAILED, "no errno name");
    assert_true(sbx_session_is_ready(fx->session));
    assert_int_equal(fx->broken_count, 0);
    g_string_free(longer, TRUE);
    fx_free(fx);
}

/* ---- the cap of a get -------------------------------------------------------------------------
 */

static void test_get_over_cap(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) hundred = random_bytes(100, 9);

    fake_files_set(files, "h", g_bytes_get_data(hundred, NULL), 100);
    fake_files_set(files, "one", "1", 1);
    Fx *fx = fx_new(files);
    get(fx, "h", 99, TRUE);
    assert_error(fx, G_IO_ERROR_MESSAGE_TOO_LARGE, "100 bytes, more than the cap of 99");
    assert_int_equal(fx->chunks, 0); /* nothing handed over */
    assert_null(fx->data);
    get(fx, "one", 0, FALSE);
    assert_error(fx, G_IO_ERROR_MESSAGE_TOO_LARGE, "cap of 0");
    assert_true(sbx_session_is_ready(fx->session));
    get(fx, "h", 100, FALSE);
    assert_null(fx->error);
    assert_true(g_bytes_equal(fx->data, hundred));
    fx_free(fx);
}

/* A file that grows while it is read: refused past the cap, taken within it. */
static void test_get_grows(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) three = random_bytes(3 * MIB, 11);

    fake_files_set(files, "grows", g_bytes_get_data(three, NULL), 3 * MIB);
    files->grow_per_read = MIB;
    Fx *fx = fx_new(files);
    get(fx, "grows", 8 * MIB, FALSE);
    assert_error(fx, G_IO_ERROR_MESSAGE_TOO_LARGE, "grew to");
    assert_null(fx->data);
    assert_true(sbx_session_is_ready(fx->session));
    assert_int_equal(fx->broken_count, 0);
    fx_free(fx);

    files = fake_files_new();
    fake_files_set(files, "grows", g_bytes_get_data(three, NULL), 3 * MIB);
    files->grow_per_read = 100;
    fx = fx_new(files);
    get(fx, "grows", 8 * MIB, FALSE);
    assert_null(fx->error);
    assert_true(fx->size > 3 * MIB);
    assert_int_equal(g_bytes_get_size(fx->data), fx->size);
    fx_free(fx);
}

/* ---- hostile answers ------------------------------------------------------------------------ */

static void test_wrong_seq(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();

    files->wrong_seq_at = 2;
    Fx *fx = fx_new(files);
    list(fx, NULL);
    assert_null(fx->error);
    list(fx, NULL);
    assert_error(fx, G_IO_ERROR_INVALID_DATA, "protocol violation: file_result for request");
    assert_closed(fx, "file_result for request");
    fx_free(fx);
}

/* A read answer with more bytes than asked: through a request, and through a get. */
static void on_answer(SbxSession *s, const SbxFileResult *answer, const GError *error,
                      gpointer data)
{
    Fx *fx = data;
    (void)s;

    clear_last(fx);
    fx->done_count++;
    if (error != NULL) {
        assert_null(answer);
        fx->error = g_error_copy(error);
        return;
    }
    assert_true(answer->ok);
    fx->size = answer->size;
    fx->data = g_bytes_new(answer->data, answer->len);
}

static void request(Fx *fx, const SbxFile *req)
{
    g_autoptr(GError) error = NULL;
    int before = fx->done_count;

    assert_true(sbx_session_file_request_async(fx->session, req, on_answer, fx, &error));
    wait_op(fx, before);
}

static void test_too_much_data(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    SbxFile read = {.op = SBX_FILE_READ, .path = "h", .offset = 2, .length = 10};

    fake_files_set(files, "h", "0123456789abcdef", 16);
    Fx *fx = fx_new(files);
    request(fx, &read); /* honest first */
    assert_null(fx->error);
    assert_int_equal(fx->size, 16);
    assert_int_equal(g_bytes_get_size(fx->data), 10);
    assert_memory_equal(g_bytes_get_data(fx->data, NULL), "23456789ab", 10);
    fx->files->read_extra = 1; /* the guest is blocked in recv: no race */
    request(fx, &read);
    assert_error(fx, G_IO_ERROR_INVALID_DATA, "carries 11 bytes, 10 asked");
    assert_closed(fx, "10 asked");
    fx_free(fx);

    files = fake_files_new();
    fake_files_set(files, "h", "0123456789abcdef", 16);
    files->read_extra = 1;
    fx = fx_new(files);
    get(fx, "h", 8, FALSE);
    assert_error(fx, G_IO_ERROR_INVALID_DATA, "carries 9 bytes, 8 asked");
    assert_closed(fx, "8 asked");
    fx_free(fx);
}

/* A write answer that says more was written; a read answer whose data passes its own size. */
static void test_size_lies(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) two = random_bytes(2 * MIB, 2);
    g_autoptr(GBytes) six = random_bytes(6 * MIB, 2);

    files->write_size_lie = 1;
    Fx *fx = fx_new(files);
    put(fx, "lie", six);
    assert_error(fx, G_IO_ERROR_INVALID_DATA, "says 1048577 bytes written");
    assert_closed(fx, "bytes written");
    /* nothing sent after the breach: the window's chunks at most */
    assert_true(fake_files_count(fx->files, SBX_FILE_WRITE) <= SBX_SESSION_FILE_WINDOW);
    fx_free(fx);

    files = fake_files_new();
    fake_files_set(files, "lie", g_bytes_get_data(two, NULL), 2 * MIB);
    files->read_size_lie = -1;
    fx = fx_new(files);
    get(fx, "lie", 4 * MIB, FALSE);
    assert_error(fx, G_IO_ERROR_INVALID_DATA, "of a file of 2097151 bytes");
    assert_closed(fx, "of a file of");
    fx_free(fx);
}

/* No answer: the short timeout of the test, not 10 s. */
static void test_no_answer(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) three = random_bytes(3 * MIB, 4);

    files->silent_from = 2; /* the second chunk */
    Fx *fx = fx_new(files);
    sbx_session_set_file_timeout(fx->session, 300);
    gint64 t0 = g_get_monotonic_time();
    put(fx, "slow", three);
    assert_true(g_get_monotonic_time() - t0 >= 300 * 1000);
    assert_error(fx, G_IO_ERROR_TIMED_OUT, "did not answer a file request within 300 ms");
    assert_closed(fx, "within 300 ms");
    fx_free(fx);
}

/* The guest hangs up under a get; the guest answers a delete twice. */
static void test_hangup_duplicate(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();

    fake_files_set(files, "x", "x", 1);
    files->hangup_at = 1;
    Fx *fx = fx_new(files);
    get(fx, "x", 10, FALSE);
    assert_error(fx, G_IO_ERROR_CONNECTION_CLOSED, "guest closed the channel");
    assert_closed(fx, "closed the channel");
    fx_free(fx);

    files = fake_files_new();
    fake_files_set(files, "x", "x", 1);
    files->duplicate_at = 1;
    fx = fx_new(files);
    delete (fx, "x");
    assert_null(fx->error); /* the first answer was fine */
    assert_true(wait_for(&fx->broken_count, 1, WAIT_MS));
    assert_closed(fx, "unexpected file_result");
    fx_free(fx);
}

/* ---- the window --------------------------------------------------------------------------- */

/* A put and a get of 8 MiB: SBX_SESSION_FILE_WINDOW requests in flight before the first
 * answer, and not one more. */
static void test_window(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) eight = random_bytes(8 * MIB, 21);
    g_autofree char *sha = sha256_of(eight);

    files->gather = SBX_SESSION_FILE_WINDOW;
    Fx *fx = fx_new(files);
    put(fx, "w.bin", eight);
    assert_null(fx->error);
    assert_string_equal(fx->sha256, sha);
    assert_int_equal(fx->files->gathered, SBX_SESSION_FILE_WINDOW);
    assert_false(fx->files->more_while_gathering);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), 8);
    fx_free(fx);

    files = fake_files_new();
    fake_files_set(files, "w.bin", g_bytes_get_data(eight, NULL), 8 * MIB);
    /* the first read alone (the size is not known yet), then the window's worth ahead */
    files->gather = SBX_SESSION_FILE_WINDOW;
    files->gather_at = 2;
    fx = fx_new(files);
    get(fx, "w.bin", 8 * MIB, FALSE);
    assert_null(fx->error);
    assert_int_equal(fx->files->gathered, SBX_SESSION_FILE_WINDOW);
    assert_false(fx->files->more_while_gathering);
    assert_true(g_bytes_equal(fx->data, eight));
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_READ), 8);
    fx_free(fx);
}

/* A get whose consumer fails at the second chunk, three reads ahead of it: their answers are
 * drained, the consumer's error reported, the session usable. */
static gboolean on_chunk_fails(const guint8 *data, gsize len, gpointer user_data, GError **error)
{
    Fx *fx = user_data;
    (void)data;
    (void)len;

    if (++fx->chunks < 2) {
        return TRUE;
    }
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_NO_SPACE, "the disk is full");
    return FALSE;
}

static void test_get_consumer_fails(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) five = random_bytes(5 * MIB, 23);
    g_autoptr(GError) error = NULL;

    fake_files_set(files, "f", g_bytes_get_data(five, NULL), 5 * MIB);
    Fx *fx = fx_new(files);
    int before = fx->done_count;
    /* the first read, then 4 ahead: the consumer fails at the second chunk */
    assert_true(
        sbx_session_file_get_async(fx->session, "f", 8 * MIB, on_chunk_fails, on_done, fx, &error));
    wait_op(fx, before);
    assert_error(fx, G_IO_ERROR_NO_SPACE, "the disk is full");
    assert_int_equal(fx->chunks, 2);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_READ), 5);
    assert_true(sbx_session_is_ready(fx->session));
    list(fx, NULL);
    assert_null(fx->error);
    assert_int_equal(fx->broken_count, 0);
    fx_free(fx);
}

/* ---- hostile data frames ------------------------------------------------------------------ */

typedef enum {
    HOSTILE_OUT_OF_ORDER, /* two writes in flight: the second answered first */
    HOSTILE_UNANNOUNCED,  /* a list answered, then a data frame nothing announced */
    HOSTILE_SHORT_DATA,   /* a read's answer announces 5 bytes, its data frame has 4 */
    HOSTILE_JSON_DUE,     /* a read's answer announces 5 bytes, a JSON frame comes instead */
    HOSTILE_WRITE_DATA,   /* a write's answer with a data frame */
    HOSTILE_CUT,          /* a read's answer announces 5 bytes, the guest hangs up after 2 */
} Hostile;

static Hostile hostile;

static void send_data_frame(FakeGuest *g, guint32 len, const char *bytes)
{
    guint8 h[4] = {0x80 | (guint8)(len >> 24), (guint8)(len >> 16), (guint8)(len >> 8),
                   (guint8)len};

    fake_guest_send_raw(g, h, 4);
    fake_guest_send_raw(g, bytes, strlen(bytes));
}

/* hello, then one request (two for HOSTILE_OUT_OF_ORDER) answered as @hostile says. */
static void script_hostile(FakeGuest *g)
{
    SbxMsg m = {0}, m2 = {0};
    g_autofree char *json = NULL;

    if (fake_guest_hello(g) < 0 || fake_guest_recv(g, &m) < 0 || m.type != SBX_MSG_FILE) {
        fake_guest_fail(g, "expected hello, then a file request");
        return;
    }
    switch (hostile) {
    case HOSTILE_OUT_OF_ORDER:
        if (fake_guest_recv(g, &m2) < 0 || m2.type != SBX_MSG_FILE) {
            fake_guest_fail(g, "expected a second request in flight");
            break;
        }
        json = g_strdup_printf("{\"type\":\"file_result\",\"seq\":%u,\"ok\":true,\"size\":%" PRIu64
                               "}",
                               m2.file.seq, m2.file.offset + m2.file.len);
        fake_guest_send_json(g, json);
        break;
    case HOSTILE_UNANNOUNCED:
        json = g_strdup_printf("{\"type\":\"file_result\",\"seq\":%u,\"ok\":true,\"entries\":[]}",
                               m.file.seq);
        fake_guest_send_json(g, json);
        send_data_frame(g, 3, "abc");
        break;
    case HOSTILE_SHORT_DATA:
    case HOSTILE_JSON_DUE:
    case HOSTILE_CUT:
        json = g_strdup_printf("{\"type\":\"file_result\",\"seq\":%u,\"ok\":true,\"size\":5,"
                               "\"data_len\":5}",
                               m.file.seq);
        fake_guest_send_json(g, json);
        if (hostile == HOSTILE_SHORT_DATA) {
            send_data_frame(g, 4, "abcd");
        } else if (hostile == HOSTILE_JSON_DUE) {
            fake_guest_send_json(g, "{\"type\":\"ping\",\"seq\":1}");
        } else {
            send_data_frame(g, 5, "ab");
            sbx_msg_clear(&m);
            return; /* hang up in the middle of it */
        }
        break;
    case HOSTILE_WRITE_DATA:
        json = g_strdup_printf("{\"type\":\"file_result\",\"seq\":%u,\"ok\":true,\"size\":%" PRIu64
                               ",\"data_len\":1}",
                               m.file.seq, m.file.offset + m.file.len);
        fake_guest_send_json(g, json);
        send_data_frame(g, 1, "x");
        break;
    }
    sbx_msg_clear(&m);
    sbx_msg_clear(&m2);
    while (fake_guest_recv(g, &m) == 0) { /* the host's error, then its hang-up */
        sbx_msg_clear(&m);
    }
}

/* @kind against a put of 3 MiB (writes) or a get of 5 bytes (reads) or a list: the session
 * closes with @why, the operation fails with it. */
static void expect_hostile(Hostile kind, const char *why)
{
    Fx *fx;
    g_autoptr(GBytes) three = random_bytes(3 * MIB, 24);

    hostile = kind;
    fx = fx_new_with(fake_files_new(), script_hostile, &watch, TRUE);
    if (kind == HOSTILE_OUT_OF_ORDER || kind == HOSTILE_WRITE_DATA) {
        put(fx, "h", three);
    } else if (kind == HOSTILE_UNANNOUNCED) {
        list(fx, NULL);
        assert_null(fx->error); /* the answer was fine; what follows it is not */
        assert_true(wait_for(&fx->broken_count, 1, WAIT_MS));
    } else {
        get(fx, "h", 100, FALSE);
    }
    if (kind != HOSTILE_UNANNOUNCED) {
        assert_error(
            fx, kind == HOSTILE_CUT ? G_IO_ERROR_CONNECTION_CLOSED : G_IO_ERROR_INVALID_DATA, why);
    }
    assert_closed(fx, why);
    fx_free(fx);
}

static void test_hostile_data_frames(void **state)
{
    (void)state;
    expect_hostile(HOSTILE_OUT_OF_ORDER, "file_result for request 2, expected 1");
    expect_hostile(HOSTILE_UNANNOUNCED, "a data frame of 3 bytes that no message announced");
    expect_hostile(HOSTILE_SHORT_DATA,
                   "a data frame of 4 bytes where the data frame of 5 bytes announced was due");
    expect_hostile(HOSTILE_JSON_DUE,
                   "a frame of 23 bytes where the data frame of 5 bytes announced was due");
    expect_hostile(HOSTILE_WRITE_DATA, "file_result of a write carries 1 bytes of data");
    expect_hostile(HOSTILE_CUT, "in the middle of a frame");
}

/* ---- refusals ------------------------------------------------------------------------------- */

static void on_tool_call(SbxSession *s, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json, gpointer data)
{
    Fx *fx = data;
    (void)provider;
    (void)tool;
    (void)input_json;

    g_clear_error(&fx->in_run_error);
    assert_false(sbx_session_file_list_async(s, NULL, on_done, fx, &fx->in_run_error));
    assert_true(sbx_session_tool_result(s, call_id, "1", NULL));
}

static void on_run_done(SbxSession *s, const SbxRunResult *r, gpointer data)
{
    Fx *fx = data;
    (void)s;

    assert_int_equal(r->status, SBX_STATUS_OK);
    fx->run_done_count++;
}

/* hello, an execution with a tool call, then files. */
static void script_run_then_files(FakeGuest *g)
{
    SbxMsg m = {0};

    if (fake_guest_hello(g) < 0) {
        return;
    }
    if (fake_guest_recv(g, &g->execute) < 0 || g->execute.type != SBX_MSG_EXECUTE) {
        fake_guest_fail(g, "expected execute");
        return;
    }
    fake_guest_started(g);
    fake_guest_tool_call(g, 1, "p", "t", "{}");
    if (fake_guest_recv(g, &m) < 0 || m.type != SBX_MSG_TOOL_RESULT) {
        fake_guest_fail(g, "expected a tool_result");
        return;
    }
    sbx_msg_clear(&m);
    fake_guest_done(g, SBX_STATUS_OK, "1", 0);
    fake_guest_serve_files(g, g->data);
}

static void test_refused_during_run(void **state)
{
    (void)state;
    static const SbxSessionCallbacks cb = {
        .on_tool_call = on_tool_call, .on_done = on_run_done, .on_broken = on_broken};
    static const SbxToolDecl tool = {.provider = "p", .name = "t"};
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "1", .tools = &tool, .n_tools = 1};
    Fx *fx = fx_new_with(fake_files_new(), script_run_then_files, &cb, TRUE);
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) one = g_bytes_new("1", 1);

    assert_true(sbx_session_run(fx->session, &req, &error));
    assert_false(sbx_session_file_put_async(fx->session, "x", one, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_BUSY));
    assert_non_null(strstr(error->message, "an execution is running"));
    assert_true(wait_for(&fx->run_done_count, 1, WAIT_MS));
    assert_true(g_error_matches(fx->in_run_error, G_IO_ERROR, G_IO_ERROR_BUSY));
    assert_int_equal(fx->done_count, 0);
    list(fx, NULL); /* idle again: allowed */
    assert_null(fx->error);
    fx_free(fx);
}

static void test_refused_before_hello_and_busy(void **state)
{
    (void)state;
    Fx *fx = fx_new_with(fake_files_new(), fake_guest_script_files, &watch, FALSE);
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) two = random_bytes(2 * MIB, 8);
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "1"};

    assert_false(sbx_session_file_get_async(fx->session, "x", 10, NULL, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NOT_INITIALIZED));
    g_clear_error(&error);
    assert_true(sbx_session_handshake_async(fx->session, FALSE, on_ready, fx, &error));
    assert_false(sbx_session_file_list_async(fx->session, NULL, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NOT_INITIALIZED));
    g_clear_error(&error);
    assert_true(wait_for(&fx->ready_count, 1, WAIT_MS));

    /* not a workspace path */
    assert_false(sbx_session_file_put_async(fx->session, "../x", two, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
    g_clear_error(&error);
    assert_false(sbx_session_file_delete_async(fx->session, NULL, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
    g_clear_error(&error);

    /* one operation at a time, no run nor ping meanwhile */
    int before = fx->done_count;
    assert_true(sbx_session_file_put_async(fx->session, "two", two, on_done, fx, &error));
    assert_true(sbx_session_file_busy(fx->session));
    assert_false(sbx_session_is_ready(fx->session));
    assert_false(sbx_session_file_list_async(fx->session, NULL, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_BUSY));
    g_clear_error(&error);
    SbxSessionCallbacks cb = {.on_done = on_run_done, .on_broken = on_broken};
    sbx_session_set_callbacks(fx->session, &cb, fx);
    assert_false(sbx_session_run(fx->session, &req, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_BUSY));
    g_clear_error(&error);
    assert_false(sbx_session_ping_async(fx->session, on_ready, fx));
    wait_op(fx, before);
    assert_null(fx->error);
    assert_false(sbx_session_file_busy(fx->session));
    assert_true(sbx_session_is_ready(fx->session));
    fx_free(fx);
}

/* ---- cancel ---------------------------------------------------------------------------------- */

/* From on_chunk: nothing in flight, so the session stays usable; done never runs. */
static void test_cancel_between_requests(void **state)
{
    (void)state;
    FakeFiles *files = fake_files_new();
    g_autoptr(GBytes) three = random_bytes(3 * MIB, 6);

    fake_files_set(files, "c", g_bytes_get_data(three, NULL), 3 * MIB);
    Fx *fx = fx_new(files);
    fx->cancel_in_chunk = TRUE;
    int before = fx->done_count;
    get_start(fx, "c", 4 * MIB, TRUE);
    gint64 end = g_get_monotonic_time() + WAIT_MS * 1000ll;
    while (fx->chunks == 0 && g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, FALSE);
    }
    assert_int_equal(fx->chunks, 1);
    assert_true(fx->cancel_usable);
    fx->cancel_in_chunk = FALSE;
    spin(200);
    assert_int_equal(fx->done_count, before); /* never runs */
    assert_int_equal(fx->chunks, 1);
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_READ), 1);
    assert_true(sbx_session_is_ready(fx->session));
    assert_true(sbx_session_file_cancel(fx->session)); /* nothing to cancel */
    list(fx, NULL);
    assert_null(fx->error);
    assert_int_equal(fx->broken_count, 0);
    fx_free(fx);
}

/* With requests in flight (a put of 3 chunks): the session is closed at once; done never runs. */
static void test_cancel_in_flight(void **state)
{
    (void)state;
    Fx *fx = fx_new(fake_files_new());
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) three = random_bytes(3 * MIB, 6);

    assert_true(sbx_session_file_put_async(fx->session, "c", three, on_done, fx, &error));
    assert_false(sbx_session_file_cancel(fx->session));
    assert_int_equal(fx->broken_count, 1);
    assert_non_null(strstr(fx->broken_reason, "cancelled with requests in flight"));
    spin(200);
    assert_int_equal(fx->done_count, 0);
    assert_closed(fx, "cancelled");
    fx_free(fx);
}

/* From the pull function, before anything was sent: the put does not start. */
static void test_cancel_from_pull(void **state)
{
    (void)state;
    Fx *fx = fx_new(fake_files_new());
    g_autoptr(GError) error = NULL;
    Source src = {.contents = g_bytes_new("abc", 3), .piece = 1, .cancel = TRUE};

    fx->source = &src;
    assert_false(sbx_session_file_put_stream_async(fx->session, "p", pull, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    assert_true(sbx_session_is_ready(fx->session));
    assert_int_equal(fake_files_count(fx->files, SBX_FILE_WRITE), 0);
    g_bytes_unref(src.contents);
    fx_free(fx);
}

/* on_broken that cancels whatever file operation there is (an owner's cleanup). */
static void on_broken_cancel(SbxSession *s, const char *reason, gpointer data)
{
    Fx *fx = data;

    on_broken(s, reason, data);
    fx->cancel_usable = sbx_session_file_cancel(s);
}

/* hello, then the guest is gone. */
static void script_hello_only(FakeGuest *g)
{
    fake_guest_hello(g);
}

/* The first request cannot be sent (the guest is gone): refused, the session closed, and a
 * cancel from on_broken meanwhile is harmless. */
static void test_send_breaks(void **state)
{
    (void)state;
    static const SbxSessionCallbacks cb = {.on_broken = on_broken_cancel};
    Fx *fx = fx_new_with(fake_files_new(), script_hello_only, &cb, TRUE);
    g_autoptr(GError) error = NULL;
    g_autoptr(GBytes) one = g_bytes_new("1", 1);

    /* The session has not read the end of the stream yet (the loop is not run): the write
     * finds the socket closed. */
    fake_guest_join(fx->guest);
    close(fx->guest->fd);
    fx->guest->fd = -1;
    assert_false(sbx_session_file_put_async(fx->session, "x", one, on_done, fx, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CLOSED));
    assert_non_null(strstr(error->message, "cannot send the file request"));
    assert_true(fx->cancel_usable); /* the request was not in flight yet */
    assert_closed(fx, "write to the guest failed");
    spin(50);
    assert_int_equal(fx->done_count, 0);
    fx_free(fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_10mib),
        cmocka_unit_test(test_get_streamed),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_put_stream),
        cmocka_unit_test(test_list_delete),
        cmocka_unit_test(test_list_truncated),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_guest_errors),
        cmocka_unit_test(test_get_over_cap),
        cmocka_unit_test(test_get_grows),
        cmocka_unit_test(test_wrong_seq),
        cmocka_unit_test(test_too_much_data),
        cmocka_unit_test(test_size_lies),
        cmocka_unit_test(test_no_answer),
        cmocka_unit_test(test_hangup_duplicate),
        cmocka_unit_test(test_refused_during_run),
        cmocka_unit_test(test_refused_before_hello_and_busy),
        cmocka_unit_test(test_cancel_between_requests),
        cmocka_unit_test(test_cancel_in_flight),
        cmocka_unit_test(test_cancel_from_pull),
        cmocka_unit_test(test_send_breaks),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_get_consumer_fails),
        cmocka_unit_test(test_hostile_data_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
