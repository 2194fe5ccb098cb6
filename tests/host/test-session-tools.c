/*
 * Tool calls through the session: a fake guest calls tools, the host runs them with the real
 * command provider (tests/host/fake-tool.py), and the answers go back once per call id.
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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

typedef struct {
    char *dir; /* temp dir of this test */
} Fixture;

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);
    f->dir = g_dir_make_tmp("sbx-session-tools-XXXXXX", NULL);
    *state = f;
    return f->dir != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    g_autofree char *pidfile = g_build_filename(f->dir, "pids", NULL);
    unlink(pidfile);
    int r = rmdir(f->dir); /* fails if a test left a file behind */
    g_free(f->dir);
    g_free(f);
    return r;
}

/* Receive until a tool_result for @call_id arrives (other results are kept too). */
static SbxMsg *await_result(FakeGuest *g, guint32 call_id)
{
    for (;;) {
        SbxMsg *m = fake_guest_recv_keep(g);
        if (m == NULL) {
            fake_guest_fail(g, "EOF while waiting for the result of call %u", call_id);
            return NULL;
        }
        if (m->type == SBX_MSG_TOOL_RESULT && m->tool_result.call_id == call_id) {
            return m;
        }
    }
}

/* ---- round trip ---------------------------------------------------------------------------- */

static void script_round_trip(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_tool_call(g, 1, "fake", "echo", "{\"x\":[1,2]}") < 0) {
        return;
    }
    SbxMsg *r1 = await_result(g, 1);
    if (fake_guest_tool_call(g, 2, "my_tools", "do_it", "\"hi\"") < 0) {
        return;
    }
    SbxMsg *r2 = await_result(g, 2);
    if (r1 == NULL || r2 == NULL || !r1->tool_result.ok || !r2->tool_result.ok) {
        fake_guest_fail(g, "a call failed");
        return;
    }
    g_autofree char *both =
        g_strdup_printf("[%s,%s]", r1->tool_result.result_json, r2->tool_result.result_json);
    fake_guest_done(g, SBX_STATUS_OK, both, 0);
}

static void test_round_trip(void **state)
{
    Fixture *f = *state;
    Harness *h = harness_new(harness_fake_tools(f->dir, 10000, NULL));

    harness_start(h, script_round_trip, NULL, NULL);
    harness_wait_done(h, 1, 30000);
    const SbxRunResult *r = h->result;
    assert_int_equal(r->status, SBX_STATUS_OK);
    /* The providers got the real names back from the guest's identifiers. */
    assert_string_equal(r->result_json, "[{\"tool\":\"echo\",\"input\":{\"x\":[1,2]}},"
                                        "{\"tool\":\"do.it\",\"input\":\"hi\"}]");
    assert_int_equal(r->tool_calls->len, 2);
    SbxToolRecord *rec = g_ptr_array_index(r->tool_calls, 1);
    assert_int_equal(rec->call_id, 2);
    assert_string_equal(rec->provider, "my_tools");
    assert_string_equal(rec->tool, "do_it");
    assert_string_equal(rec->input_json, "\"hi\"");
    assert_true(rec->answered && rec->ok);
    assert_string_equal(rec->result_json, "{\"tool\":\"do.it\",\"input\":\"hi\"}");
    /* The namespace the guest was given. */
    const SbxExecute *e = &h->guest->execute.execute;
    gboolean seen = FALSE;
    for (size_t i = 0; i < e->n_tools; i++) {
        seen = seen || (strcmp(e->tools[i].provider, "my_tools") == 0 &&
                        strcmp(e->tools[i].name, "do_it") == 0);
    }
    assert_true(seen);
    harness_free(h, FALSE);
}

/* ---- failing calls -------------------------------------------------------------------------- */

typedef struct {
    const char *provider;
    const char *tool;
} Target;

/* One call to data's target; its error message becomes the program's result. */
static void script_one_call(FakeGuest *g)
{
    const Target *t = g->data;
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_tool_call(g, 9, t->provider, t->tool, "{}") < 0) {
        return;
    }
    SbxMsg *r = await_result(g, 9);
    if (r == NULL) {
        return;
    }
    fake_guest_done(g, SBX_STATUS_OK, r->tool_result.ok ? "\"ok\"" : "\"error\"", 0);
}

static const SbxToolResult *only_result(Harness *h)
{
    assert_int_equal(h->guest->received->len, 1);
    SbxMsg *m = g_ptr_array_index(h->guest->received, 0);
    assert_int_equal(m->type, SBX_MSG_TOOL_RESULT);
    return &m->tool_result;
}

static void expect_tool_error(Fixture *f, const char *provider, const char *tool, SbxErrorCode code,
                              const char *text)
{
    Target t = {provider, tool};
    Harness *h = harness_new(harness_fake_tools(f->dir, 10000, NULL));

    harness_start(h, script_one_call, &t, NULL);
    harness_wait_done(h, 1, 30000);
    assert_int_equal(h->result->status, SBX_STATUS_OK);
    assert_string_equal(h->result->result_json, "\"error\"");
    sbx_session_free(h->session);
    h->session = NULL;
    fake_guest_join(h->guest);
    const SbxToolResult *r = only_result(h);
    assert_false(r->ok);
    assert_int_equal(r->error.code, code);
    if (strstr(r->error.message, text) == NULL) {
        fail_msg("tool error \"%s\" does not mention \"%s\"", r->error.message, text);
    }
    harness_free(h, FALSE);
}

static void test_tool_error(void **state)
{
    expect_tool_error(*state, "fake", "fail", SBX_ERR_TOOL, "it broke on purpose");
}

static void test_tool_not_json(void **state)
{
    expect_tool_error(*state, "fake", "garbage", SBX_ERR_TOOL, "did not print one JSON value");
}

static void test_unknown_tool(void **state)
{
    expect_tool_error(*state, "fake", "nothing_here", SBX_ERR_TOOL, "unknown tool");
}

static void test_unknown_provider(void **state)
{
    expect_tool_error(*state, "nobody", "echo", SBX_ERR_TOOL, "unknown tool");
}

static void test_tool_stdout_cap(void **state)
{
    expect_tool_error(*state, "fake", "flood", SBX_ERR_TOOL, "more than 1048576 bytes");
}

/* ---- limits on calls ------------------------------------------------------------------------ */

/* Three slow calls at once with a cap of two: the third is refused at once. */
static void script_three_calls(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    for (guint32 id = 1; id <= 3; id++) {
        fake_guest_tool_call(g, id, "fake", "slow", "{\"s\":0.5}");
    }
    for (int i = 0; i < 3; i++) {
        if (fake_guest_recv_keep(g) == NULL) {
            fake_guest_fail(g, "EOF before three results");
            return;
        }
    }
    fake_guest_done(g, SBX_STATUS_OK, NULL, 0);
}

static void test_in_flight_cap(void **state)
{
    Fixture *f = *state;
    Harness *h = harness_new(harness_fake_tools(f->dir, 10000, NULL));
    SbxRunRequest req = {
        .language = SBX_LANG_JAVASCRIPT, .code = "x", .timeout_ms = 30000, .tool_calls_max = 2};

    harness_start(h, script_three_calls, NULL, &req);
    harness_wait_done(h, 1, 30000);
    assert_int_equal(h->result->status, SBX_STATUS_OK);
    sbx_session_free(h->session);
    h->session = NULL;
    fake_guest_join(h->guest);
    GPtrArray *got = h->guest->received;
    assert_int_equal(got->len, 3);
    const SbxToolResult *first = &((SbxMsg *)g_ptr_array_index(got, 0))->tool_result;
    assert_int_equal(first->call_id, 3); /* refused before the others finished */
    assert_false(first->ok);
    assert_string_equal(first->error.message, "too many tool calls in flight");
    for (guint i = 1; i < 3; i++) {
        const SbxToolResult *r = &((SbxMsg *)g_ptr_array_index(got, i))->tool_result;
        assert_true(r->ok);
        assert_string_equal(r->result_json, "{\"s\":0.5}");
    }
    harness_free(h, FALSE);
}

/* A call left unanswered when done arrives; the owner's late answers are refused. */
static void script_call_then_done(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_tool_call(g, 4, "fake", "echo", "1") < 0 ||
        fake_guest_tool_call(g, 5, "fake", "echo", "2") < 0) {
        return;
    }
    SbxMsg *r = await_result(g, 4);
    if (r == NULL) {
        return;
    }
    fake_guest_done(g, SBX_STATUS_OK, "0", 0);
}

static void test_answer_once(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);

    h->answer_nothing = TRUE;
    harness_start(h, script_call_then_done, NULL, NULL);
    while (h->held_calls->len < 2) {
        harness_spin(10);
    }
    assert_true(sbx_session_tool_result(h->session, 4, "\"first\"", NULL));
    assert_false(sbx_session_tool_result(h->session, 4, "\"second\"", NULL)); /* answered */
    assert_false(sbx_session_tool_result(h->session, 99, "0", NULL));         /* never asked */
    harness_wait_done(h, 1, 10000);
    SbxError e = {.code = SBX_ERR_TOOL, .message = "late"};
    assert_false(sbx_session_tool_result(h->session, 5, NULL, &e)); /* execution over */
    const SbxRunResult *r = h->result;
    assert_int_equal(r->tool_calls->len, 2);
    SbxToolRecord *r4 = g_ptr_array_index(r->tool_calls, 0);
    SbxToolRecord *r5 = g_ptr_array_index(r->tool_calls, 1);
    assert_true(r4->answered);
    assert_string_equal(r4->result_json, "\"first\"");
    assert_false(r5->answered);
    harness_free(h, FALSE);
}

/* ---- a call still running when the execution times out ----------------------------------- */

static gboolean pid_gone(pid_t pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/stat", pid);
    g_autofree char *stat = NULL;

    if (kill(pid, 0) < 0 && errno == ESRCH) {
        return TRUE;
    }
    /* Killed but not yet reaped by its (new) parent: no longer running. */
    if (g_file_get_contents(path, &stat, NULL, NULL)) {
        const char *end = strrchr(stat, ')');
        return end != NULL && end[1] == ' ' && end[2] == 'Z';
    }
    return TRUE;
}

static void script_sleeping_call(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    fake_guest_tool_call(g, 1, "fake", "sleep", g->data);
    fake_guest_recv_keep(g); /* cancel or EOF */
}

static void test_timeout_kills_tool(void **state)
{
    Fixture *f = *state;
    Harness *h = harness_new(harness_fake_tools(f->dir, 60000, NULL));
    g_autofree char *pidfile = g_build_filename(f->dir, "pids", NULL);
    g_autofree char *input = g_strdup_printf("{\"pidfile\":\"%s\"}", pidfile);
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT, .code = "x", .timeout_ms = 3000};
    g_autofree char *pids = NULL;
    int tool_pid = 0, grandchild = 0;

    harness_start(h, script_sleeping_call, input, &req);
    harness_wait_done(h, 1, 30000);
    assert_int_equal(h->result->status, SBX_STATUS_TIMEOUT);
    assert_true(g_file_get_contents(pidfile, &pids, NULL, NULL));
    assert_int_equal(sscanf(pids, "%d %d", &tool_pid, &grandchild), 2);
    assert_false(pid_gone(tool_pid)); /* still running: the session does not own it */
    harness_free(h, FALSE);           /* cancels the call: kill, reap */
    assert_true(pid_gone(tool_pid));
    for (int i = 0; i < 100 && !pid_gone(grandchild); i++) {
        g_usleep(20000);
    }
    assert_true(pid_gone(grandchild)); /* the whole process group went */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool_not_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_tool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_provider, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool_stdout_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_flight_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_answer_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timeout_kills_tool, setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
