/*
 * Snapshot integrity without a VM (host-agent/vm/snapshot-verify.c): the cache's owner and
 * mode, the digests of state.bin and ram, the stamp that spares a hash, and a changed byte
 * found wherever it is. That a restore refuses a changed snapshot: tests/snapshot/test-snapshot-vm.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshot-verify.h"
#include "vm-error.h"

typedef struct {
    char *dir;
} Fx;

/* A snapshot dir: a small state.bin and a sparse 8 MiB ram with data in two places. */
static int setup(void **state)
{
    Fx *fx = g_new0(Fx, 1);
    g_autofree char *state_bin = NULL, *ram = NULL;
    char page[4096];
    int fd;

    fx->dir = g_dir_make_tmp("sbx-test-verify-XXXXXX", NULL);
    state_bin = g_build_filename(fx->dir, "state.bin", NULL);
    ram = g_build_filename(fx->dir, "ram", NULL);
    assert_true(g_file_set_contents(state_bin, "QEVM state", -1, NULL));
    fd = open(ram, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    memset(page, 'r', sizeof page);
    assert_int_equal(pwrite(fd, page, sizeof page, 4096), (ssize_t)sizeof page);
    assert_int_equal(pwrite(fd, page, sizeof page, 6 << 20), (ssize_t)sizeof page);
    assert_int_equal(ftruncate(fd, 8 << 20), 0);
    close(fd);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    Fx *fx = *state;
    const char *names[] = {"state.bin", "ram", "digests", "verified", "copy", NULL};

    for (guint i = 0; names[i]; i++) {
        g_autofree char *p = g_build_filename(fx->dir, names[i], NULL);
        g_unlink(p);
    }
    g_rmdir(fx->dir);
    g_free(fx->dir);
    g_free(fx);
    return 0;
}

static void poke(const char *dir, const char *name, off_t at, char byte)
{
    g_autofree char *p = g_build_filename(dir, name, NULL);
    int fd = open(p, O_WRONLY);

    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, &byte, 1, at), 1);
    close(fd);
}

static void expect_mismatch(const char *dir, const char *name)
{
    g_autoptr(GError) error = NULL;

    assert_false(sbx_snapshot_digests_check(dir, &error));
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT));
    g_autofree char *want = g_strdup_printf(": %s is not what was made", name);
    if (!strstr(error->message, want))
        fail_msg("'%s' not in '%s'", want, error->message);
}

static void test_made_then_checked(void **state)
{
    Fx *fx = *state;
    g_autoptr(GError) error = NULL;

    assert_true(sbx_snapshot_digests_write(fx->dir, &error));
    assert_true(sbx_snapshot_digests_check(fx->dir, &error));
}

/* A byte changed in a page of data, in a hole, in the state: each is found. */
static void test_changes_found(void **state)
{
    Fx *fx = *state;
    g_autoptr(GError) error = NULL;

    assert_true(sbx_snapshot_digests_write(fx->dir, &error));
    poke(fx->dir, "ram", 4096 + 17, 'x');
    expect_mismatch(fx->dir, "ram");
    poke(fx->dir, "ram", 4096 + 17, 'r'); /* back as it was: right again (hashed anew) */
    assert_true(sbx_snapshot_digests_check(fx->dir, &error));
    poke(fx->dir, "ram", 3 << 20, 1); /* inside the hole */
    expect_mismatch(fx->dir, "ram");
    poke(fx->dir, "ram", 3 << 20, 0);
    assert_true(sbx_snapshot_digests_check(fx->dir, &error));
    poke(fx->dir, "state.bin", 0, 'X');
    expect_mismatch(fx->dir, "state.bin");
}

/* Zeros written into a hole are the same content: a filled copy has the sparse one's digest. */
static void test_sparse_and_filled_agree(void **state)
{
    Fx *fx = *state;
    g_autofree char *ram = g_build_filename(fx->dir, "ram", NULL);
    g_autofree char *copy = g_build_filename(fx->dir, "copy", NULL);
    g_autofree char *a = NULL, *b = NULL;
    g_autofree char *data = NULL;
    gsize len = 0;

    assert_true(g_file_get_contents(ram, &data, &len, NULL));
    assert_true(g_file_set_contents(copy, data, (gssize)len, NULL));
    a = sbx_snapshot_file_digest(ram, NULL);
    b = sbx_snapshot_file_digest(copy, NULL);
    assert_non_null(a);
    assert_string_equal(a, b);
}

/*
 * The stamp: while no file changed, no hash: a wrong digest record goes unnoticed (the files
 * were found right when stamped); once a file is written to (its ctime moves), it is hashed.
 */
static void test_stamp_spares_the_hash(void **state)
{
    Fx *fx = *state;
    g_autofree char *digests = g_build_filename(fx->dir, "digests", NULL);
    g_autofree char *wrong = g_strdup_printf("%064d  state.bin\n%064d  ram\n", 0, 0);
    g_autoptr(GError) error = NULL;

    assert_true(sbx_snapshot_digests_write(fx->dir, &error));
    g_unlink(digests);
    assert_true(g_file_set_contents(digests, wrong, -1, NULL));
    assert_true(sbx_snapshot_digests_check(fx->dir, &error));
    g_usleep(20000);                 /* a coarse clock could give the write below the same ctime */
    poke(fx->dir, "ram", 4096, 'r'); /* the same byte: content unchanged, ctime not */
    expect_mismatch(fx->dir, "state.bin");
}

static void test_digests_required(void **state)
{
    Fx *fx = *state;
    g_autofree char *digests = g_build_filename(fx->dir, "digests", NULL);
    g_autoptr(GError) error = NULL;

    assert_true(sbx_snapshot_digests_write(fx->dir, &error));
    g_unlink(digests);
    assert_false(sbx_snapshot_digests_check(fx->dir, &error));
    assert_non_null(strstr(error->message, "digests are missing"));
}

static void test_missing_file(void **state)
{
    Fx *fx = *state;
    g_autofree char *ram = g_build_filename(fx->dir, "ram", NULL);
    g_autoptr(GError) error = NULL;

    assert_true(sbx_snapshot_digests_write(fx->dir, NULL));
    g_unlink(ram);
    assert_false(sbx_snapshot_digests_check(fx->dir, &error));
    assert_non_null(strstr(error->message, "missing"));
}

static void test_cache_owner_and_mode(void **state)
{
    Fx *fx = *state;
    g_autofree char *cache = g_build_filename(fx->dir, "copy", NULL);
    g_autoptr(GError) error = NULL;
    struct stat st;

    assert_true(sbx_snapshot_cache_check(cache, &error)); /* made 0700 */
    assert_int_equal(stat(cache, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(chmod(cache, 0755), 0);
    assert_false(sbx_snapshot_cache_check(cache, &error));
    assert_non_null(strstr(error->message, "mode 755"));
    g_clear_error(&error);
    assert_int_equal(chmod(cache, 0700), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(cache, 1, 1), 0);
        assert_false(sbx_snapshot_cache_check(cache, &error));
        assert_non_null(strstr(error->message, "owner 1"));
    }
    g_rmdir(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_made_then_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changes_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sparse_and_filled_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stamp_spares_the_hash, setup, teardown),
        cmocka_unit_test_setup_teardown(test_digests_required, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_owner_and_mode, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
