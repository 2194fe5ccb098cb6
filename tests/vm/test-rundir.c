/*
 * VM runtime directories (host-agent/vm/rundir.c): made with a held lock beside them, removed
 * whole; a dead agent's swept by the next, a live one's and a brand-new one's left alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <glib/gstdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include "rundir.h"

static gboolean exists(const char *path)
{
    return g_file_test(path, G_FILE_TEST_EXISTS);
}

/* Age a lock file past the sweep's grace period. */
static void age(const char *path)
{
    struct utimbuf old = {time(NULL) - 60, time(NULL) - 60};

    assert_int_equal(utime(path, &old), 0);
}

static void test_new_and_free(void **state)
{
    g_autofree char *parent = g_dir_make_tmp("sbx-test-rundir-XXXXXX", NULL);
    SbxRundir *rd = sbx_rundir_new(parent, NULL);
    g_autofree char *dir = NULL, *lock = NULL, *sock = NULL;

    (void)state;
    assert_non_null(rd);
    dir = g_strdup(sbx_rundir_path(rd));
    lock = g_strconcat(dir, ".lock", NULL);
    sock = g_build_filename(dir, "x.sock", NULL);
    assert_true(g_file_set_contents(sock, "", 0, NULL));
    assert_true(exists(dir) && exists(lock));
    age(lock);
    sbx_rundir_sweep(parent); /* held by us: left */
    assert_true(exists(dir));
    sbx_rundir_free(rd);
    assert_false(exists(dir) || exists(lock));
    assert_int_equal(g_rmdir(parent), 0); /* nothing else left in it */
}

/* A child makes one and dies without its teardown; the sweep removes it once it is not new. */
static void test_dead_agent_swept(void **state)
{
    g_autofree char *parent = g_dir_make_tmp("sbx-test-rundir-XXXXXX", NULL);
    int fds[2];
    char path[256] = "";
    pid_t pid;

    (void)state;
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    if (pid == 0) {
        SbxRundir *rd = sbx_rundir_new(parent, NULL);
        const char *p = rd ? sbx_rundir_path(rd) : "";
        if (write(fds[1], p, strlen(p) + 1) < 0)
            _exit(2);
        _exit(rd ? 0 : 1); /* no sbx_rundir_free: as if SIGKILLed */
    }
    assert_true(read(fds[0], path, sizeof path - 1) > 0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    close(fds[0]);
    close(fds[1]);
    g_autofree char *lock = g_strconcat(path, ".lock", NULL);
    assert_true(exists(path) && exists(lock));
    sbx_rundir_sweep(parent); /* too new: its agent might be about to lock it */
    assert_true(exists(path));
    age(lock);
    sbx_rundir_sweep(parent);
    assert_false(exists(path) || exists(lock));
    assert_int_equal(g_rmdir(parent), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_and_free),
        cmocka_unit_test(test_dead_agent_swept),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
