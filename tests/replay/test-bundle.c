/*
 * Portable bundles (host-agent/replay/bundle*.c): a record exported from a temporary store with
 * a fake snapshot (made for this machine's QEMU), image and profile, opened in another
 * directory: every field of the record, its calls and approvals as the store has them, the
 * files byte for byte, and the unpacked snapshot opens against the unpacked profile and image
 * (sbx_snapshot_open(): the same QEMU). Then bad bundles (truncated, a digest that differs, a
 * path out of its folder, a link, a member too big, a member after the manifest, not zstd):
 * each refused, and nothing left behind in the work directory.
 */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "replay/bundle.h"
#include "store/records.h"
#include "vm/image.h"
#include "vm/profile.h"
#include "vm/snapshot-private.h"
#include "vm/snapshot-verify.h"
#include "vm/snapshot.h"

/* The fake snapshot's RAM file: sparse, a few pages written. */
#define RAM_SIZE (64 * 1024 * 1024)

typedef struct {
    char *top;
    char *db;
    char *bundle;
    char *key;
    SbxStore *store;
} Fixture;

static void rm_tree(const char *path)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void write_file(const char *dir, const char *name, const char *text, gssize len)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    assert_true(g_file_set_contents(path, text, len, NULL));
}

static void make_image(const char *dir)
{
    const char *files[] = {"vmlinuz", "initramfs.cpio", "rootfs.erofs"};
    const char *bytes[] = {"kernel bytes", "initramfs bytes", "rootfs bytes\001\002"};
    g_autoptr(GString) m = g_string_new("{\"image_id\":\"img-1\",\"files\":{");

    assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    for (gsize i = 0; i < G_N_ELEMENTS(files); i++) {
        write_file(dir, files[i], bytes[i], -1);
        g_string_append_printf(m, "%s\"%s\":{\"size\":%zu}", i ? "," : "", files[i],
                               strlen(bytes[i]));
    }
    g_string_append(m, "}}");
    write_file(dir, "manifest.json", m->str, -1);
}

/* A snapshot of q35 + the fake image for this machine, in the cache; its key. */
static char *make_snapshot(const char *cache)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) profile = sbx_profile_load_named(NULL, "q35", &error);
    g_autoptr(SbxImage) image = profile ? sbx_image_open_for(profile, &error) : NULL;
    SbxSnapshotInputs in = {0};

    if (image == NULL)
        fail_msg("profile or image: %s", error->message);
    assert_true(sbx_snapshot_current_inputs(profile, image, &in, &error));
    g_autofree char *dir = g_build_filename(cache, in.key, NULL);
    g_autofree char *json = sbx_snapshot_inputs_to_json(&in);
    g_autofree char *ram = g_build_filename(dir, "ram", NULL);
    assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    write_file(dir, "inputs.json", json, -1);
    write_file(dir, "state.bin", "device state", -1);
    int fd = open(ram, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, RAM_SIZE), 0);
    assert_int_equal(pwrite(fd, "page one", 8, 4096), 8);
    assert_int_equal(pwrite(fd, "last", 4, RAM_SIZE - 4), 4);
    close(fd);
    assert_true(sbx_snapshot_digests_write(dir, &error));
    char *key = g_strdup(in.key);
    sbx_snapshot_inputs_clear(&in);
    return key;
}

static const char out_bytes[] = "out\0put \xff\xfe not UTF-8\n";

static void record_execution(Fixture *f)
{
    g_autoptr(GError) error = NULL;
    SbxRecord r = {
        .id = "exec-1",
        .front_end = "run",
        .language = "python",
        .code = "print('h\u00e9')",
        .entry = "main",
        .args_json = "[1,{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]",
        .kwargs_json = "{\"k\":1.50}",
        .profile = "q35",
        .snapshot_key = f->key,
        .image_id = "img-1",
        .catalog = "cat",
        .timeout_ms = 30000,
        .output_limit = 4096,
        .created_at_ms = 1700000000000,
        .started_at_ms = 1700000000001,
        .boot_ms = 40,
        .entropy_hex = "00112233",
        .guest_clock_ms = 1700000000000,
    };
    assert_true(sbx_records_begin(f->store, &r, &error));
    r.status = "ok";
    r.has_exit_code = TRUE;
    r.exit_code = 3;
    r.result_json = "{\"x\":12345678901234567890}";
    r.error_json = "{\"type\":\"E\"}";
    r.stdout_data = (char *)out_bytes;
    r.stdout_len = sizeof(out_bytes) - 1;
    r.stdout_truncated = TRUE;
    r.stderr_data = "err";
    r.stderr_len = 3;
    r.finished_at_ms = 1700000000100;
    r.duration_ms = 99;
    r.files_json = "{\"in\":[]}";
    r.seed_hex = "abcdef";
    r.clock_log_json = "[1,2,3]";
    r.event_log_json = "[3,2]";
    r.has_log_open = TRUE;
    r.log_open = TRUE;
    r.tools_json = "[{\"provider\":\"p\",\"tools\":[{\"name\":\"t\"}]}]";
    r.has_replayable = TRUE;
    r.replayable = TRUE;
    SbxRecordCall calls[] = {
        {.call_id = 7,
         .provider = "p",
         .tool = "t",
         .input_json = "{\"q\":1}",
         .ok = TRUE,
         .result_json = "[true]",
         .duration_ms = 5},
        {.call_id = 8,
         .provider = "p",
         .tool = "u",
         .input_json = "{}",
         .error_json = "{\"code\":\"denied\"}",
         .policy_json = "{\"approval\":\"a1\"}"},
    };
    SbxRecordApproval approvals[] = {{.approval_id = "a1",
                                      .provider = "p",
                                      .tool = "u",
                                      .decision = "denied",
                                      .answered_by = "me",
                                      .asked_at_ms = 1700000000050,
                                      .answered_at_ms = 1700000000060}};
    assert_true(sbx_records_finish(f->store, &r, calls, 2, approvals, 1, &error));
}

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);
    g_autoptr(GError) error = NULL;

    f->top = g_dir_make_tmp("sbx-bundle-XXXXXX", NULL);
    g_autofree char *image = g_build_filename(f->top, "image", NULL);
    g_autofree char *cache = g_build_filename(f->top, "cache", NULL);
    make_image(image);
    assert_int_equal(g_mkdir_with_parents(cache, 0700), 0);
    g_setenv("SANDBOX_IMAGE_DIR", image, TRUE);
    g_setenv("SANDBOX_SNAPSHOT_DIR", cache, TRUE);
    f->key = make_snapshot(cache);
    f->db = g_build_filename(f->top, "state", "sandbox.db", NULL);
    f->store = sbx_store_open(f->db, &error);
    assert_non_null(f->store);
    f->bundle = g_build_filename(f->top, "exec-1.bundle", NULL);
    record_execution(f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    Fixture *f = *state;

    sbx_store_close(f->store);
    rm_tree(f->top);
    g_free(f->top);
    g_free(f->db);
    g_free(f->bundle);
    g_free(f->key);
    g_free(f);
    return 0;
}

/* ---- comparing ---------------------------------------------------------------------------- */

static void same_str(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        assert_ptr_equal(a, b);
    else
        assert_string_equal(a, b);
}

static void same_record(const SbxRecord *a, const SbxRecord *b)
{
    const char *sa[] = {a->id,
                        a->tenant_id,
                        a->front_end,
                        a->language,
                        a->code,
                        a->code_sha256,
                        a->entry,
                        a->args_json,
                        a->kwargs_json,
                        a->profile,
                        a->snapshot_key,
                        a->image_id,
                        a->catalog,
                        a->session_id,
                        a->status,
                        a->result_json,
                        a->error_json,
                        a->entropy_hex,
                        a->files_json,
                        a->seed_hex,
                        a->clock_log_json,
                        a->not_replayable,
                        a->event_log_json,
                        a->tools_json};
    const char *sb[] = {b->id,
                        b->tenant_id,
                        b->front_end,
                        b->language,
                        b->code,
                        b->code_sha256,
                        b->entry,
                        b->args_json,
                        b->kwargs_json,
                        b->profile,
                        b->snapshot_key,
                        b->image_id,
                        b->catalog,
                        b->session_id,
                        b->status,
                        b->result_json,
                        b->error_json,
                        b->entropy_hex,
                        b->files_json,
                        b->seed_hex,
                        b->clock_log_json,
                        b->not_replayable,
                        b->event_log_json,
                        b->tools_json};
    gint64 na[] = {a->timeout_ms,       a->output_limit,     a->has_exit_code, a->exit_code,
                   a->stdout_truncated, a->stderr_truncated, a->created_at_ms, a->started_at_ms,
                   a->finished_at_ms,   a->boot_ms,          a->duration_ms,   a->guest_clock_ms,
                   a->has_replayable,   a->replayable,       a->has_log_open,  a->log_open};
    gint64 nb[] = {b->timeout_ms,       b->output_limit,     b->has_exit_code, b->exit_code,
                   b->stdout_truncated, b->stderr_truncated, b->created_at_ms, b->started_at_ms,
                   b->finished_at_ms,   b->boot_ms,          b->duration_ms,   b->guest_clock_ms,
                   b->has_replayable,   b->replayable,       b->has_log_open,  b->log_open};

    for (gsize i = 0; i < G_N_ELEMENTS(sa); i++)
        same_str(sa[i], sb[i]);
    for (gsize i = 0; i < G_N_ELEMENTS(na); i++)
        assert_int_equal(na[i], nb[i]);
    assert_int_equal(a->stdout_len, b->stdout_len);
    assert_memory_equal(a->stdout_data, b->stdout_data, a->stdout_len);
    assert_int_equal(a->stderr_len, b->stderr_len);
    assert_memory_equal(a->stderr_data, b->stderr_data, a->stderr_len);
}

static void same_calls(const GPtrArray *a, const GPtrArray *b)
{
    assert_int_equal(a->len, b->len);
    for (guint i = 0; i < a->len; i++) {
        const SbxRecordCall *x = g_ptr_array_index(a, i), *y = g_ptr_array_index(b, i);
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->call_id, y->call_id);
        assert_int_equal(x->ok, y->ok);
        assert_int_equal(x->duration_ms, y->duration_ms);
        same_str(x->provider, y->provider);
        same_str(x->tool, y->tool);
        same_str(x->input_json, y->input_json);
        same_str(x->result_json, y->result_json);
        same_str(x->error_json, y->error_json);
        same_str(x->policy_json, y->policy_json);
    }
}

static void same_approvals(const GPtrArray *a, const GPtrArray *b)
{
    assert_int_equal(a->len, b->len);
    for (guint i = 0; i < a->len; i++) {
        const SbxRecordApproval *x = g_ptr_array_index(a, i), *y = g_ptr_array_index(b, i);
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->asked_at_ms, y->asked_at_ms);
        assert_int_equal(x->answered_at_ms, y->answered_at_ms);
        same_str(x->approval_id, y->approval_id);
        same_str(x->provider, y->provider);
        same_str(x->tool, y->tool);
        same_str(x->decision, y->decision);
        same_str(x->answered_by, y->answered_by);
    }
}

static void same_file(const char *a_dir, const char *b_dir, const char *name)
{
    g_autofree char *a = g_build_filename(a_dir, name, NULL);
    g_autofree char *b = g_build_filename(b_dir, name, NULL);
    g_autofree char *x = NULL, *y = NULL;
    gsize nx = 0, ny = 0;

    assert_true(g_file_get_contents(a, &x, &nx, NULL));
    assert_true(g_file_get_contents(b, &y, &ny, NULL));
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
}

static gboolean empty_dir(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    return d != NULL && g_dir_read_name(d) == NULL;
}

/* ---- the round trip ----------------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxBundle) b = NULL;
    g_autoptr(SbxRecord) orig = NULL;
    g_autoptr(GPtrArray) calls = NULL, approvals = NULL;
    g_autofree char *fresh = g_build_filename(f->top, "fresh-state", NULL);
    g_autofree char *cache = g_build_filename(f->top, "cache", NULL);
    g_autofree char *snap = g_build_filename(cache, f->key, NULL);
    g_autofree char *image = g_build_filename(f->top, "image", NULL);

    if (!sbx_bundle_export(f->store, NULL, "exec-1", f->bundle, &error))
        fail_msg("export: %s", error->message);
    /* Another tenant's view does not find it. */
    assert_false(sbx_bundle_export(f->store, "other", "exec-1", f->bundle, &error));
    g_clear_error(&error);

    /* The fuzz target's seed (tests/replay/corpus-bundle/real): a bundle as export makes it. */
    if (g_getenv("SBX_BUNDLE_SEED_OUT") != NULL) {
        g_autofree char *text = NULL;
        gsize len = 0;
        assert_true(g_file_get_contents(f->bundle, &text, &len, NULL));
        assert_true(g_file_set_contents(g_getenv("SBX_BUNDLE_SEED_OUT"), text, (gssize)len, NULL));
    }
    if (!sbx_bundle_open(f->bundle, fresh, &b, &error))
        fail_msg("open: %s", error->message);
    assert_true(sbx_records_get(f->store, NULL, "exec-1", &orig, &error));
    assert_true(sbx_records_get_calls(f->store, NULL, "exec-1", &calls, &approvals, &error));
    /* Not compared as both missing: the fields a replay needs are there. */
    const SbxRecord *got = sbx_bundle_record(b);
    assert_string_equal(got->seed_hex, "abcdef");
    assert_string_equal(got->clock_log_json, "[1,2,3]");
    assert_string_equal(got->event_log_json, "[3,2]");
    assert_true(got->has_log_open && got->log_open);
    assert_non_null(strstr(got->tools_json, "\"provider\":\"p\""));
    assert_string_equal(got->files_json, "{\"in\":[]}");
    assert_string_equal(got->result_json, "{\"x\":12345678901234567890}");
    assert_int_equal(got->stdout_len, sizeof(out_bytes) - 1);
    assert_int_equal(sbx_bundle_calls(b)->len, 2);
    assert_int_equal(sbx_bundle_approvals(b)->len, 1);
    same_record(orig, got);
    same_calls(calls, sbx_bundle_calls(b));
    same_approvals(approvals, sbx_bundle_approvals(b));
    assert_non_null(sbx_bundle_qemu_version(b));

    const char *snap_files[] = {"inputs.json", "state.bin", "ram", "digests"};
    for (gsize i = 0; i < G_N_ELEMENTS(snap_files); i++)
        same_file(snap, sbx_bundle_snapshot_dir(b), snap_files[i]);
    const char *image_files[] = {"manifest.json", "vmlinuz", "initramfs.cpio", "rootfs.erofs"};
    for (gsize i = 0; i < G_N_ELEMENTS(image_files); i++)
        same_file(image, sbx_bundle_image_dir(b), image_files[i]);
    /* The RAM file stays sparse. */
    g_autofree char *ram = g_build_filename(sbx_bundle_snapshot_dir(b), "ram", NULL);
    struct stat st;
    assert_int_equal(stat(ram, &st), 0);
    assert_true(st.st_blocks * 512 < RAM_SIZE / 8);

    /* What the replay does with it: the unpacked snapshot opens for this QEMU. */
    g_autoptr(SbxProfile) profile = sbx_profile_load(sbx_bundle_profile_path(b), &error);
    assert_non_null(profile);
    g_autoptr(SbxImage) img = sbx_image_open(sbx_bundle_image_dir(b), &error);
    assert_non_null(img);
    g_autoptr(SbxSnapshot) opened =
        sbx_snapshot_open(sbx_bundle_snapshot_dir(b), profile, img, &error);
    if (opened == NULL)
        fail_msg("snapshot open: %s", error->message);
    g_clear_pointer(&opened, sbx_snapshot_free);

    g_clear_pointer(&b, sbx_bundle_free);
    assert_true(empty_dir(fresh));
}

/* Execution @id of session se-1, on the fixture's snapshot. */
static void record_in_session(Fixture *f, const char *id, gint64 created_ms)
{
    g_autoptr(GError) error = NULL;
    SbxRecord r = {
        .id = (char *)id,
        .front_end = "serve",
        .language = "python",
        .code = "print(x)",
        .profile = "q35",
        .snapshot_key = f->key,
        .image_id = "img-1",
        .session_id = "se-1",
        .created_at_ms = created_ms,
    };
    assert_true(sbx_records_begin(f->store, &r, &error));
    r.status = "ok";
    r.seed_hex = "00";
    r.clock_log_json = "[]";
    r.has_replayable = r.replayable = TRUE;
    assert_true(sbx_records_finish(f->store, &r, NULL, 0, NULL, 0, &error));
}

/* An execution of a session after others carries them (session.jsonl), oldest first; the first
 * of its session carries none. */
static void test_session(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxBundle) b = NULL;
    g_autofree char *fresh = g_build_filename(f->top, "fresh-state", NULL);
    GPtrArray *recs = NULL, *calls = NULL;

    record_in_session(f, "s-1", 1700000001000);
    record_in_session(f, "s-2", 1700000002000);
    record_in_session(f, "s-3", 1700000003000);
    if (!sbx_bundle_export(f->store, NULL, "s-3", f->bundle, &error))
        fail_msg("export: %s", error->message);
    if (!sbx_bundle_open(f->bundle, fresh, &b, &error))
        fail_msg("open: %s", error->message);
    sbx_bundle_take_session(b, &recs, &calls);
    assert_int_equal(recs->len, 2);
    assert_int_equal(calls->len, 2);
    assert_string_equal(((SbxRecord *)recs->pdata[0])->id, "s-1");
    assert_string_equal(((SbxRecord *)recs->pdata[1])->id, "s-2");
    assert_string_equal(((SbxRecord *)recs->pdata[1])->code, "print(x)");
    assert_string_equal(sbx_bundle_record(b)->id, "s-3");
    g_ptr_array_unref(recs);
    g_ptr_array_unref(calls);
    g_clear_pointer(&b, sbx_bundle_free);
    /* the first of its session: nothing before it */
    assert_true(sbx_bundle_export(f->store, NULL, "s-1", f->bundle, &error));
    assert_true(sbx_bundle_open(f->bundle, fresh, &b, &error));
    sbx_bundle_take_session(b, &recs, &calls);
    assert_int_equal(recs->len, 0);
    g_ptr_array_unref(recs);
    g_ptr_array_unref(calls);
}

/* A kept snapshot compressed at rest (ram.zst): the export finds it decompressed, the same. */
static void test_export_compressed(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxBundle) b = NULL;
    g_autofree char *snap = g_build_filename(f->top, "cache", f->key, NULL);
    g_autofree char *fresh = g_build_filename(f->top, "fresh-state", NULL);
    g_autofree char *ram = g_build_filename(snap, "ram", NULL);
    g_autofree char *text = NULL;
    gsize len = 0;

    assert_true(g_file_get_contents(ram, &text, &len, NULL));
    assert_true(sbx_snapshot_ram_compress(snap, &error));
    assert_false(g_file_test(ram, G_FILE_TEST_EXISTS));
    if (!sbx_bundle_export(f->store, NULL, "exec-1", f->bundle, &error))
        fail_msg("export: %s", error->message);
    assert_true(sbx_bundle_open(f->bundle, fresh, &b, &error));
    g_autofree char *out = g_build_filename(sbx_bundle_snapshot_dir(b), "ram", NULL);
    g_autofree char *back = NULL;
    gsize back_len = 0;
    assert_true(g_file_get_contents(out, &back, &back_len, NULL));
    assert_int_equal(back_len, len);
    assert_memory_equal(back, text, len);
    /* Decompressed in place, sparse again. */
    struct stat st;
    assert_int_equal(stat(ram, &st), 0);
    assert_true(st.st_blocks * 512 < RAM_SIZE / 8);
}

/* The record's snapshot gone from the cache: the export says so. */
static void test_export_gone(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autofree char *snap = g_build_filename(f->top, "cache", f->key, NULL);

    rm_tree(snap);
    assert_false(sbx_bundle_export(f->store, NULL, "exec-1", f->bundle, &error));
    assert_non_null(strstr(error->message, "is gone (collected or never made here)"));
    assert_false(g_file_test(f->bundle, G_FILE_TEST_EXISTS));
}

/* ---- bad bundles -------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *data;     /* NULL: a symlink to "target" */
    gint64 declared_size; /* -1: the data's */
} Entry;

static void write_archive(const char *path, const Entry *entries, gsize n, gboolean zstd)
{
    struct archive *a = archive_write_new();

    archive_write_set_format_pax_restricted(a);
    if (zstd)
        archive_write_add_filter_zstd(a);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    for (gsize i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        gsize len = entries[i].data ? strlen(entries[i].data) : 0;

        archive_entry_set_pathname(e, entries[i].name);
        if (entries[i].data == NULL) {
            archive_entry_set_filetype(e, AE_IFLNK);
            archive_entry_set_symlink(e, "target");
        } else {
            archive_entry_set_filetype(e, AE_IFREG);
            archive_entry_set_size(e, entries[i].declared_size >= 0 ? entries[i].declared_size
                                                                    : (gint64)len);
        }
        archive_entry_set_perm(e, 0600);
        archive_write_header(a, e);
        if (len > 0)
            archive_write_data(a, entries[i].data, len);
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
}

static void refused(Fixture *f, const char *path, const char *why)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxBundle) b = NULL;
    g_autofree char *work = g_build_filename(f->top, "work", NULL);

    assert_false(sbx_bundle_open(path, work, &b, &error));
    assert_null(b);
    assert_non_null(error);
    if (strstr(error->message, why) == NULL)
        fail_msg("expected \"%s\" in: %s", why, error->message);
    assert_true(empty_dir(work));
}

static void test_bad_bundles(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autofree char *path = g_build_filename(f->top, "bad.bundle", NULL);
    g_autofree char *text = NULL;
    gsize len = 0;

    /* Truncated: the real bundle cut in the middle. */
    assert_true(sbx_bundle_export(f->store, NULL, "exec-1", f->bundle, &error));
    assert_true(g_file_get_contents(f->bundle, &text, &len, NULL));
    assert_true(g_file_set_contents(path, text, (gssize)len / 2, NULL));
    refused(f, path, "bundle");
    /* Cut before the manifest. */
    Entry only_record[] = {{"record.json", "{}", -1}};
    write_archive(path, only_record, 1, TRUE);
    refused(f, path, "no manifest at its end");

    Entry traversal[] = {{"../evil", "x", -1}};
    write_archive(path, traversal, 1, TRUE);
    refused(f, path, "a name a bundle does not hold");
    g_autofree char *evil = g_build_filename(f->top, "evil", NULL);
    assert_false(g_file_test(evil, G_FILE_TEST_EXISTS));
    Entry nested[] = {{"snapshot/../../evil", "x", -1}};
    write_archive(path, nested, 1, TRUE);
    refused(f, path, "a name a bundle does not hold");
    Entry absolute[] = {{"/tmp/evil", "x", -1}};
    write_archive(path, absolute, 1, TRUE);
    refused(f, path, "a name a bundle does not hold");
    Entry link[] = {{"profile/q35.json", NULL, -1}};
    write_archive(path, link, 1, TRUE);
    refused(f, path, "not a plain file");

    /* A member larger than its kind may be (a profile of 1 MiB). */
    g_autofree char *big = g_strnfill(1024 * 1024, 'x');
    Entry too_big[] = {{"profile/q35.json", big, -1}};
    write_archive(path, too_big, 1, TRUE);
    refused(f, path, "larger than its kind");
    Entry twice[] = {{"record.json", "{}", -1}, {"record.json", "{}", -1}};
    write_archive(path, twice, 2, TRUE);
    refused(f, path, "there twice");

    /* A digest that differs from the member's. */
    Entry wrong_sha[] = {
        {"record.json", "{}", -1},
        {"manifest.json",
         "{\"format\":\"sbx-bundle-1\",\"record_id\":\"r\",\"created_at_ms\":1,"
         "\"qemu_version\":\"q\",\"snapshot_key\":\"k\",\"image_id\":\"i\",\"profile\":\"p\","
         "\"members\":{\"record.json\":{\"size\":2,\"sha256\":\"00\"}}}",
         -1}};
    write_archive(path, wrong_sha, 2, TRUE);
    refused(f, path, "differs from the manifest");
    Entry after[] = {{"manifest.json", "{}", -1}, {"record.json", "{}", -1}};
    write_archive(path, after, 2, TRUE);
    refused(f, path, "follows the manifest");
    /* Plain tar, not zstd. */
    write_archive(path, only_record, 1, FALSE);
    refused(f, path, "bundle");
    /* Not there at all. */
    g_autofree char *missing = g_build_filename(f->top, "missing.bundle", NULL);
    refused(f, missing, "bundle");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_gone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_compressed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_bundles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
