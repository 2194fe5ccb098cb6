/*
 * The session against the real guest agent and runners, without a VM: the agent's test build
 * (sandbox-agent-test --listen-unix) runs on the host with node and python3, and the session
 * connects to its unix socket. Covers the interplay the fake guest cannot: the real hello,
 * execute, output, tool calls through the runners, done, and a host-side timeout.
 * Skipped (77) when the agent binary or the runners are not there.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <gio/gio.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

typedef struct {
    char *dir;
    char *sock;
    GSubprocess *agent;
} Agent;

static Agent agent;

static int start_agent(void **state)
{
    g_autoptr(GError) error = NULL;
    (void)state;

    agent.dir = g_dir_make_tmp("sbx-agent-XXXXXX", NULL);
    agent.sock = g_build_filename(agent.dir, "agent.sock", NULL);
    const char *argv[] = {SBX_AGENT_TEST,  "--listen-unix", agent.sock, "--runners",
                          SBX_RUNNERS_DIR, "--run-as",      "none",     NULL};
    agent.agent = g_subprocess_newv(argv, G_SUBPROCESS_FLAGS_STDERR_SILENCE, &error);
    if (agent.agent == NULL) {
        fprintf(stderr, "cannot start %s: %s\n", SBX_AGENT_TEST, error->message);
        return -1;
    }
    for (int i = 0; i < 500 && !g_file_test(agent.sock, G_FILE_TEST_EXISTS); i++) {
        g_usleep(10000);
    }
    return g_file_test(agent.sock, G_FILE_TEST_EXISTS) ? 0 : -1;
}

static int stop_agent(void **state)
{
    (void)state;
    if (agent.agent != NULL) {
        g_subprocess_send_signal(agent.agent, SIGTERM); /* our child, by its PID */
        g_subprocess_wait(agent.agent, NULL, NULL);
        g_clear_object(&agent.agent);
    }
    unlink(agent.sock); /* normally already removed by the agent */
    int r = rmdir(agent.dir);
    g_free(agent.sock);
    g_free(agent.dir);
    return r;
}

static int connect_agent(void)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_strlcpy(addr.sun_path, agent.sock, sizeof(addr.sun_path));
    /* The agent serves one host at a time: retry while it finishes the previous one. */
    for (int i = 0; i < 200; i++) {
        if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
            return fd;
        }
        g_usleep(25000);
    }
    fail_msg("connect %s: %s", agent.sock, g_strerror(errno));
    return -1;
}

/* Start @req on a fresh connection and wait for the end. */
static Harness *run_req(const SbxRunRequest *req, SbxTools *tools)
{
    /* The agent serves one host at a time and refuses (closes) a connection that arrives
     * before it noticed the previous one closed: retry those. */
    for (int attempt = 0;; attempt++) {
        g_autoptr(GError) error = NULL;
        Harness *h = harness_new(tools);
        gboolean started = harness_try_start_fd(h, connect_agent(), req, &error);
        if (!started && attempt == 50) {
            fail_msg("starting the session: %s", error->message);
        }
        if (started) {
            harness_wait_done(h, 1, req->timeout_ms + 30000);
        }
        if (started &&
            (attempt == 50 || strstr(harness_error(h), "another host connection") == NULL)) {
            return h;
        }
        h->tools = NULL; /* kept for the next attempt */
        harness_free(h, FALSE);
        g_usleep(50000);
    }
}

static Harness *run(SbxLanguage lang, const char *code, SbxTools *tools, guint timeout_ms)
{
    SbxRunRequest req = {
        .language = lang, .code = code, .timeout_ms = timeout_ms, .collect_output = TRUE};
    return run_req(&req, tools);
}

static void expect_ok(Harness *h)
{
    if (h->result->status != SBX_STATUS_OK) {
        fail_msg("status %s: %s", sbx_status_name(h->result->status), harness_error(h));
    }
}

static void test_js_hello(void **state)
{
    (void)state;
    Harness *h =
        run(SBX_LANG_JAVASCRIPT, "console.log('hi js'); console.error('e'); 6 * 7", NULL, 20000);
    expect_ok(h);
    assert_int_equal(h->result->exit_code, 0);
    assert_string_equal(h->streamed[SBX_STREAM_STDOUT]->str, "hi js\n");
    assert_string_equal(h->streamed[SBX_STREAM_STDERR]->str, "e\n");
    assert_string_equal(h->result->result_json, "42");
    harness_free(h, FALSE);
}

static void test_python_hello(void **state)
{
    (void)state;
    Harness *h = run(SBX_LANG_PYTHON, "print('hi py')\n{'a': [1, 2]}", NULL, 20000);
    expect_ok(h);
    assert_string_equal(h->streamed[SBX_STREAM_STDOUT]->str, "hi py\n");
    assert_string_equal(h->result->result_json, "{\"a\":[1,2]}");
    harness_free(h, FALSE);
}

static void test_js_exception(void **state)
{
    (void)state;
    Harness *h = run(SBX_LANG_JAVASCRIPT, "throw new TypeError('boom')", NULL, 20000);
    assert_int_equal(h->result->status, SBX_STATUS_ERROR);
    assert_int_equal(h->result->error.code, SBX_ERR_RUNTIME);
    assert_string_equal(h->result->error.type, "TypeError");
    assert_non_null(strstr(h->result->error.message, "boom"));
    harness_free(h, FALSE);
}

static SbxTools *tools(void)
{
    return harness_fake_tools(agent.dir, 10000, NULL);
}

static void test_js_tool_call(void **state)
{
    (void)state;
    Harness *h = run(SBX_LANG_JAVASCRIPT,
                     "const r = await tools.fake.echo({x: 1});\n"
                     "const d = await tools.my_tools.do_it([1]);\n"
                     "let err = null;\n"
                     "try { await tools.fake.fail({}); } catch (e) { err = e.code; }\n"
                     "[r, d.tool, err]",
                     tools(), 30000);
    expect_ok(h);
    assert_string_equal(h->result->result_json,
                        "[{\"tool\":\"echo\",\"input\":{\"x\":1}},\"do.it\",\"tool_error\"]");
    assert_int_equal(h->result->tool_calls->len, 3);
    SbxToolRecord *fail = g_ptr_array_index(h->result->tool_calls, 2);
    assert_true(fail->answered && !fail->ok);
    assert_non_null(strstr(fail->error.message, "it broke on purpose"));
    harness_free(h, FALSE);
}

static void test_python_tool_call(void **state)
{
    (void)state;
    Harness *h = run(SBX_LANG_PYTHON,
                     "r = tools.fake.echo({'y': 2})\n"
                     "try:\n    tools.fake.fail({})\n    e = None\n"
                     "except ToolError as ex:\n    e = ex.code\n"
                     "[r['input'], e]",
                     tools(), 30000);
    expect_ok(h);
    assert_string_equal(h->result->result_json, "[{\"y\":2},\"tool_error\"]");
    harness_free(h, FALSE);
}

static void test_timeout(void **state)
{
    (void)state;
    Harness *h = run(SBX_LANG_JAVASCRIPT, "console.log('spin'); for (;;) {}", NULL, 2000);
    if (h->result->status != SBX_STATUS_TIMEOUT) {
        fail_msg("status %s: %s", sbx_status_name(h->result->status), harness_error(h));
    }
    harness_free(h, FALSE);
}

/* After a timeout the agent must serve the next host (here: the next test's connection). */
static void test_after_timeout(void **state)
{
    (void)state;
    Harness *h = run(SBX_LANG_PYTHON, "1 + 1", NULL, 20000);
    expect_ok(h);
    assert_string_equal(h->result->result_json, "2");
    harness_free(h, FALSE);
}

static void test_output_cap(void **state)
{
    (void)state;
    SbxRunRequest req = {.language = SBX_LANG_PYTHON,
                         .code = "import sys\nfor _ in range(64):\n"
                                 "    sys.stdout.write('x' * 65536)\n'end'",
                         .output_limit = 100000,
                         .timeout_ms = 30000,
                         .collect_output = TRUE};
    Harness *h = run_req(&req, NULL);

    expect_ok(h);
    assert_true(h->result->output_truncated);
    assert_int_equal(h->result->collected[SBX_STREAM_STDOUT]->len, 100000);
    harness_free(h, FALSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_js_hello),         cmocka_unit_test(test_python_hello),
        cmocka_unit_test(test_js_exception),     cmocka_unit_test(test_js_tool_call),
        cmocka_unit_test(test_python_tool_call), cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_after_timeout),    cmocka_unit_test(test_output_cap),
    };
    if (!g_file_test(SBX_AGENT_TEST, G_FILE_TEST_IS_EXECUTABLE) ||
        !g_file_test(SBX_RUNNERS_DIR "/runner.mjs", G_FILE_TEST_EXISTS) ||
        !g_file_test(SBX_RUNNERS_DIR "/runner.py", G_FILE_TEST_EXISTS)) {
        printf("SKIP: no agent test build or runners\n");
        return 77;
    }
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, start_agent, stop_agent);
}
