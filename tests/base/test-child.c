/*
 * Child processes as tool processes use them (base/child.h): stdin, stdout and stderr piped,
 * a working directory and an environment of exactly what is given, the exit watched; a
 * grandchild in the child's process group dies when the child exits by itself, when it is
 * killed without waiting, and when it is freed. After each test no child of ours is left, not
 * even a zombie (waitpid: ECHILD). Processes are checked by PID, never by name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/child.h"
#include "test-util.h"

/* Bound on every wait of these tests: the processes are shells that do almost nothing. */
#define WAIT_MS 10000

typedef struct {
    gboolean exited;
    int status;
} Exit;

static void on_exit_cb(SbxChild *child, int wait_status, gpointer data)
{
    Exit *e = data;

    (void)child;
    e->exited = TRUE;
    e->status = wait_status;
}

/* Read @fd until EOF (bounded by WAIT_MS); the text read. */
static char *read_all(int fd)
{
    GString *s = g_string_new(NULL);
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;
    char buf[256];

    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        gint64 left = (deadline - g_get_monotonic_time()) / 1000;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            fail_msg("no EOF on fd %d in %d ms", fd, WAIT_MS);
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        g_string_append_len(s, buf, n);
    }
    return g_string_free(s, FALSE);
}

/* Read one line (a pid) from @fd, bounded. */
static GPid read_pid(int fd)
{
    char line[32] = {0};
    gsize len = 0;
    gint64 deadline = g_get_monotonic_time() + WAIT_MS * 1000;

    while (len < sizeof line - 1 && (len == 0 || line[len - 1] != '\n')) {
        struct pollfd p = {fd, POLLIN, 0};
        gint64 left = (deadline - g_get_monotonic_time()) / 1000;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            fail_msg("no pid line in %d ms", WAIT_MS);
        ssize_t n = read(fd, line + len, 1);
        if (n <= 0)
            fail_msg("EOF before a pid line");
        len += (gsize)n;
    }
    return (GPid)atoi(line);
}

/* Gone, or a zombie of some other parent (init reaps it): not running any more. */
static gboolean not_running(GPid pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", (int)pid);
    g_autofree char *stat = NULL;

    if (!g_file_get_contents(path, &stat, NULL, NULL))
        return TRUE;
    const char *end = strrchr(stat, ')');
    return end && end[1] == ' ' && end[2] == 'Z';
}

static void assert_dies(GPid pid)
{
    for (int i = 0; i < WAIT_MS / 10 && !not_running(pid); i++)
        g_usleep(10000);
    assert_true(not_running(pid));
}

/* No child of ours is left, running or zombie. */
static void assert_no_children(void)
{
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* A shell script as a tool runs one: piped stdio, a given cwd and environment only. */
static SbxChild *spawn_sh(const char *script, int *in, int *out, int *err, GError **error)
{
    const char *argv[] = {"sh", "-c", script, NULL};
    const char *envp[] = {"PATH=/usr/bin:/bin", "ONLY=this", NULL};
    SbxChildFds fds = {
        .stderr_fd = -1,
        .stdin_pipe = in,
        .stdout_pipe = out,
        .stderr_pipe = err,
        .envp = envp,
        .path_from_envp = TRUE,
        .cwd = "/",
        .launcher_info_fd = -1,
    };

    return sbx_child_spawn(argv, &fds, "test shell", error);
}

static void test_pipes_and_exit(void **state)
{
    g_autoptr(GError) error = NULL;
    int in = -1, out = -1, err = -1;
    Exit e = {0};

    (void)state;
    SbxChild *child = spawn_sh("read x; echo \"got:$x $(pwd) $ONLY ${HOME:-nohome}\"; "
                               "echo oops >&2; exit 3",
                               &in, &out, &err, &error);
    assert_null(error);
    assert_non_null(child);
    assert_true(sbx_child_pid(child) > 0);
    sbx_child_watch(child, on_exit_cb, &e);
    assert_int_equal(write(in, "hello\n", 6), 6);
    close(in);
    g_autofree char *text = read_all(out);
    g_autofree char *etext = read_all(err);
    assert_string_equal(text, "got:hello / this nohome\n");
    assert_string_equal(etext, "oops\n");
    assert_true(run_until(&e.exited, WAIT_MS));
    assert_true(WIFEXITED(e.status));
    assert_int_equal(WEXITSTATUS(e.status), 3);
    assert_int_equal(sbx_child_pid(child), 0); /* reaped */
    close(out);
    close(err);
    sbx_child_free(child);
    assert_no_children();
}

/* The child exits by itself, leaving a grandchild in its group: the grandchild dies too. */
static void test_exit_kills_group(void **state)
{
    g_autoptr(GError) error = NULL;
    int out = -1;
    Exit e = {0};

    (void)state;
    SbxChild *child = spawn_sh("sleep 60 & echo $!", NULL, &out, NULL, &error);
    assert_non_null(child);
    sbx_child_watch(child, on_exit_cb, &e);
    GPid grandchild = read_pid(out);
    assert_true(grandchild > 0);
    assert_true(run_until(&e.exited, WAIT_MS));
    assert_true(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0);
    assert_dies(grandchild);
    close(out);
    sbx_child_free(child);
    assert_no_children();
}

/* Freeing a running child kills its group (the grandchild too) and reaps it at once. */
static void test_free_kills_group(void **state)
{
    g_autoptr(GError) error = NULL;
    int out = -1;

    (void)state;
    SbxChild *child = spawn_sh("sleep 60 & echo $!; wait", NULL, &out, NULL, &error);
    assert_non_null(child);
    GPid pid = sbx_child_pid(child);
    GPid grandchild = read_pid(out);
    assert_false(not_running(pid));
    assert_false(not_running(grandchild));
    sbx_child_free(child);
    assert_true(pid_gone(pid)); /* reaped by the free, not later */
    assert_dies(grandchild);
    close(out);
    assert_no_children();
}

/* Killed without waiting (a timeout on the main loop): the watch reports the signal. */
static void test_kill_async(void **state)
{
    g_autoptr(GError) error = NULL;
    int out = -1;
    Exit e = {0};

    (void)state;
    SbxChild *child = spawn_sh("sleep 60 & echo $!; wait", NULL, &out, NULL, &error);
    assert_non_null(child);
    sbx_child_watch(child, on_exit_cb, &e);
    GPid grandchild = read_pid(out);
    sbx_child_kill_async(child);
    assert_true(run_until(&e.exited, WAIT_MS));
    assert_true(WIFSIGNALED(e.status));
    assert_int_equal(WTERMSIG(e.status), SIGKILL);
    assert_dies(grandchild);
    sbx_child_kill_async(child); /* reaped: nothing */
    close(out);
    sbx_child_free(child);
    assert_no_children();
}

/* A program that is not there: an error in SBX_CHILD_ERROR, nothing started. */
static void test_spawn_fails(void **state)
{
    g_autoptr(GError) error = NULL;
    const char *argv[] = {"no-such-program-here", NULL};
    const char *envp[] = {"PATH=/nonexistent", NULL};
    int in = -1, out = -1;
    SbxChildFds fds = {.stderr_fd = -1,
                       .stdin_pipe = &in,
                       .stdout_pipe = &out,
                       .envp = envp,
                       .path_from_envp = TRUE,
                       .launcher_info_fd = -1};

    (void)state;
    assert_null(sbx_child_spawn(argv, &fds, "nothing", &error));
    assert_true(g_error_matches(error, SBX_CHILD_ERROR, SBX_CHILD_ERROR_SPAWN));
    assert_non_null(strstr(error->message, "cannot start nothing (no-such-program-here)"));
    assert_no_children();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipes_and_exit),   cmocka_unit_test(test_exit_kills_group),
        cmocka_unit_test(test_free_kills_group), cmocka_unit_test(test_kill_async),
        cmocka_unit_test(test_spawn_fails),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
