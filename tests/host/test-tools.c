/*
 * The tools dispatcher and the command provider, driven directly (no session): results,
 * failures, caps, the per-call timeout and cancellation (the process group is killed and
 * reaped before the call completes).
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "provider.h"
#include "tools-error.h"

typedef struct {
    char *dir;
} Fixture;

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);
    f->dir = g_dir_make_tmp("sbx-tools-XXXXXX", NULL);
    *state = f;
    return f->dir != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    g_autofree char *pidfile = g_build_filename(f->dir, "pids", NULL);
    unlink(pidfile);
    int r = rmdir(f->dir);
    g_free(f->dir);
    g_free(f);
    return r;
}

typedef struct {
    gboolean finished;
    char *result;
    GError *error;
} Outcome;

static void on_done(GObject *src, GAsyncResult *res, gpointer data)
{
    Outcome *o = data;
    (void)src;
    o->result = sbx_tools_call_finish(NULL, res, &o->error);
    o->finished = TRUE;
}

static void outcome_clear(Outcome *o)
{
    g_free(o->result);
    g_clear_error(&o->error);
}

/* Start a call; the caller runs the loop until it finishes. */
static void call(SbxTools *tools, const char *provider, const char *tool, const char *input,
                 GCancellable *cancel, Outcome *o)
{
    memset(o, 0, sizeof(*o));
    sbx_tools_call_async(tools, provider, tool, input, cancel, on_done, o);
    assert_false(o->finished); /* never completes synchronously */
}

static void wait_for(Outcome *o, guint timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    while (!o->finished && g_get_monotonic_time() < deadline) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
    assert_true(o->finished);
}

static void call_sync(SbxTools *tools, const char *provider, const char *tool, const char *input,
                      Outcome *o)
{
    call(tools, provider, tool, input, NULL, o);
    wait_for(o, 20000);
    assert_int_equal(sbx_tools_in_flight(tools), 0);
}

static void expect_error(Outcome *o, int code, const char *text)
{
    assert_null(o->result);
    assert_non_null(o->error);
    assert_true(o->error->domain == SBX_TOOL_ERROR);
    assert_int_equal(o->error->code, code);
    if (strstr(o->error->message, text) == NULL) {
        fail_msg("\"%s\" does not mention \"%s\"", o->error->message, text);
    }
}

static void test_call_ok(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 10000, NULL);
    Outcome o;

    call_sync(tools, "fake", "echo", "{\"a\":\"\\u00e9\\n\",\"b\":[true,null,1.5]}", &o);
    assert_null(o.error);
    /* The input reaches the tool as the guest wrote it: \u00e9 stays an escape, never a
     * re-print (docs/protocol.md, "Numbers" and the text of values). */
    assert_string_equal(
        o.result, "{\"tool\":\"echo\",\"input\":{\"a\":\"\\u00e9\\n\",\"b\":[true,null,1.5]}}");
    outcome_clear(&o);
    call_sync(tools, "my_tools", "do_it", "[]", &o);
    assert_string_equal(o.result, "{\"tool\":\"do.it\",\"input\":[]}");
    outcome_clear(&o);
}

static void test_decls(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 10000, NULL);
    gsize n = 0;
    const SbxToolDecl *d = sbx_tools_decls(tools, &n);

    assert_int_equal(n, 9);
    assert_string_equal(d[0].provider, "fake");
    assert_string_equal(d[0].name, "echo");
    assert_string_equal(d[0].description, "Echo");
    assert_null(d[1].description);
    assert_string_equal(d[6].name, "do_it");
    assert_string_equal(d[7].provider, "my_tools");
}

static void test_failures(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 10000, NULL);
    Outcome o;

    call_sync(tools, "fake", "fail", "{}", &o);
    expect_error(&o, SBX_ERR_TOOL, "exit status 1");
    assert_non_null(strstr(o.error->message, "it broke on purpose"));
    outcome_clear(&o);
    call_sync(tools, "fake", "garbage", "{}", &o);
    expect_error(&o, SBX_ERR_TOOL, "did not print one JSON value");
    outcome_clear(&o);
    call_sync(tools, "fake", "flood", "{}", &o);
    expect_error(&o, SBX_ERR_TOOL, "more than 1048576 bytes on stdout");
    outcome_clear(&o);
    call_sync(tools, "fake", "missing", "{}", &o);
    expect_error(&o, SBX_ERR_TOOL, "unknown tool fake.missing");
    outcome_clear(&o);
}

static void test_input_cap(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 10000, NULL);
    g_autofree char *big = g_malloc(SBX_TOOL_INPUT_MAX + 8);
    Outcome o;

    memset(big, 'a', SBX_TOOL_INPUT_MAX + 8);
    big[0] = '"';
    big[SBX_TOOL_INPUT_MAX + 6] = '"';
    big[SBX_TOOL_INPUT_MAX + 7] = '\0';
    call_sync(tools, "fake", "echo", big, &o);
    expect_error(&o, SBX_ERR_VALIDATION, "larger than");
    outcome_clear(&o);
}

/* A program that exits without reading its (large) input: EPIPE on our side is no error. */
static void test_noread(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 10000, ", \"--noread\"");
    g_autofree char *big = g_malloc(900 * 1024);
    Outcome o;

    memset(big, 'b', 900 * 1024);
    big[0] = '"';
    big[900 * 1024 - 2] = '"';
    big[900 * 1024 - 1] = '\0';
    call_sync(tools, "fake", "echo", big, &o);
    assert_null(o.error);
    assert_string_equal(o.result, "{\"noread\":true}");
    outcome_clear(&o);
}

static gboolean pid_running(pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", pid);
    g_autofree char *stat = NULL;

    if (kill(pid, 0) < 0 && errno == ESRCH) {
        return FALSE;
    }
    if (g_file_get_contents(path, &stat, NULL, NULL)) {
        const char *end = strrchr(stat, ')');
        return !(end != NULL && end[1] == ' ' && end[2] == 'Z'); /* a zombie is not running */
    }
    return FALSE;
}

/* The call is over: the tool was reaped (gone) and its grandchild killed. */
static void check_killed(const char *pidfile)
{
    g_autofree char *pids = NULL;
    int tool_pid = 0, grandchild = 0;

    assert_true(g_file_get_contents(pidfile, &pids, NULL, NULL));
    assert_int_equal(sscanf(pids, "%d %d", &tool_pid, &grandchild), 2);
    assert_true(kill(tool_pid, 0) < 0 && errno == ESRCH); /* reaped by us */
    for (int i = 0; i < 100 && pid_running(grandchild); i++) {
        g_usleep(20000);
    }
    assert_false(pid_running(grandchild));
}

static void test_timeout(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 3000, NULL);
    g_autofree char *pidfile = g_build_filename(f->dir, "pids", NULL);
    g_autofree char *input = g_strdup_printf("{\"pidfile\":\"%s\"}", pidfile);
    gint64 t0 = g_get_monotonic_time();
    Outcome o;

    call_sync(tools, "fake", "sleep", input, &o);
    expect_error(&o, SBX_ERR_TOOL, "timed out after 3000 ms");
    assert_true(g_get_monotonic_time() - t0 < 10 * G_USEC_PER_SEC);
    outcome_clear(&o);
    check_killed(pidfile);
}

static void test_cancel(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 60000, NULL);
    g_autofree char *pidfile = g_build_filename(f->dir, "pids", NULL);
    g_autofree char *input = g_strdup_printf("{\"pidfile\":\"%s\"}", pidfile);
    g_autoptr(GCancellable) cancel = g_cancellable_new();
    Outcome o;

    call(tools, "fake", "sleep", input, cancel, &o);
    for (int i = 0; i < 500 && !g_file_test(pidfile, G_FILE_TEST_EXISTS); i++) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(10000);
    }
    g_usleep(100000); /* let it write both pids */
    assert_int_equal(sbx_tools_in_flight(tools), 1);
    g_cancellable_cancel(cancel);
    wait_for(&o, 10000);
    assert_true(g_error_matches(o.error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    assert_int_equal(sbx_tools_in_flight(tools), 0);
    outcome_clear(&o);
    check_killed(pidfile);
}

static void test_cancelled_before(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = harness_fake_tools(f->dir, 60000, NULL);
    g_autoptr(GCancellable) cancel = g_cancellable_new();
    Outcome o;

    g_cancellable_cancel(cancel);
    call(tools, "fake", "echo", "1", cancel, &o);
    wait_for(&o, 10000);
    assert_true(g_error_matches(o.error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    outcome_clear(&o);
}

static void test_spawn_failure(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autofree char *path = g_build_filename(f->dir, "tools.json", NULL);
    const char *json = "{\"providers\": {\"p\": {\"kind\": \"command\","
                       " \"command\": [\"./no-such-program\"], \"tools\": {\"t\": {}}}}}";
    Outcome o;

    assert_true(g_file_set_contents(path, json, -1, NULL));
    g_autoptr(SbxTools) tools = sbx_tools_load(path, &error);
    unlink(path);
    assert_non_null(tools);
    call_sync(tools, "p", "t", "{}", &o);
    expect_error(&o, SBX_ERR_TOOL, "cannot start provider \"p\"");
    outcome_clear(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_call_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_input_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_before, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_failure, setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
