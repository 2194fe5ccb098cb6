/*
 * The session against a fake guest: the normal run and everything a hostile guest can do to
 * the host's end of the protocol (bad frames, wrong states, floods, silence).
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* ---- scripts ------------------------------------------------------------------------------- */

static void script_normal(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_output(g, SBX_STREAM_STDOUT, "hello\n") < 0 ||
        fake_guest_output(g, SBX_STREAM_STDERR, "err\n") < 0 ||
        fake_guest_output(g, SBX_STREAM_STDOUT, "again\n") < 0) {
        return;
    }
    fake_guest_done(g, SBX_STATUS_OK, "{\"answer\":42}", 0);
}

static void test_normal_run(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    gint64 before = g_get_real_time();
    SbxToolDecl decl = {.provider = "calc", .name = "add", .description = "Add"};
    SbxRunRequest req = {
        .language = SBX_LANG_PYTHON,
        .code = "print('hello')",
        .tools = &decl,
        .n_tools = 1,
        .output_limit = 1000,
        .timeout_ms = 5000,
        .collect_output = TRUE,
    };

    harness_start(h, script_normal, NULL, &req);
    harness_wait_done(h, 1, 10000);
    const SbxRunResult *r = h->result;
    assert_int_equal(r->status, SBX_STATUS_OK);
    assert_int_equal(r->exit_code, 0);
    assert_string_equal(r->result_json, "{\"answer\":42}");
    assert_false(r->has_error);
    assert_false(r->output_truncated);
    assert_true(r->vm_reusable);
    assert_int_equal(r->output_bytes, 16);
    assert_int_equal(r->collected[SBX_STREAM_STDOUT]->len, 12);
    assert_memory_equal(r->collected[SBX_STREAM_STDOUT]->data, "hello\nagain\n", 12);
    assert_string_equal(h->streamed[SBX_STREAM_STDOUT]->str, "hello\nagain\n");
    assert_string_equal(h->streamed[SBX_STREAM_STDERR]->str, "err\n");

    /* What the guest was sent. */
    const SbxHello *hello = &h->guest->hello.hello;
    assert_int_equal(hello->version, SBX_PROTOCOL_VERSION);
    assert_true(strlen(hello->token) >= 32);
    assert_int_equal(hello->entropy_len, SBX_SESSION_ENTROPY_BYTES);
    assert_true(hello->time_us >= before && hello->time_us <= g_get_real_time());
    const SbxExecute *e = &h->guest->execute.execute;
    assert_string_equal(e->id, sbx_session_execution_id(h->session));
    assert_int_equal(e->language, SBX_LANG_PYTHON);
    assert_string_equal(e->code, "print('hello')");
    assert_int_equal(e->n_tools, 1);
    assert_string_equal(e->tools[0].provider, "calc");
    assert_int_equal(e->output_limit, 1000);
    assert_int_equal(e->timeout_ms, 5000);
    harness_free(h, FALSE);
}

/* A done with the replay members (docs/protocol.md, "Replay"), as a runner reports them. */
static void script_replay(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    char *json = g_strdup_printf(
        "{\"type\":\"done\",\"id\":\"%s\",\"status\":\"ok\",\"exit_code\":0,"
        "\"duration_ms\":1,\"output_truncated\":false,\"clock_log\":[7,1800000000000123],"
        "\"replayable\":false,\"not_replayable\":\"a thread was started\"}",
        g->execute.execute.id);
    fake_guest_send_json(g, json);
    g_free(json);
}

/*
 * The seed: fresh from the kernel for every execute when the request has none (and kept for
 * the record), the request's when it has one (a replay), with its clock log; the guest's
 * clock log and verdict come back in the result. A done without them is not replayable.
 */
static void test_seed_and_clock_log(void **state)
{
    (void)state;
    guint8 seed[SBX_SEED_BYTES];
    guint64 reads[] = {7, 1800000000000123};
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "1"};
    SbxSessionGiven given;

    for (gsize i = 0; i < sizeof(seed); i++) {
        seed[i] = (guint8)i;
    }
    /* No seed asked for: a fresh one, which the record gets; a done without replay members. */
    Harness *h = harness_new(NULL);
    harness_start(h, script_normal, NULL, &req);
    harness_wait_done(h, 1, 10000);
    const SbxExecute *e = &h->guest->execute.execute;
    assert_non_null(e->seed);
    assert_null(e->clock_log);
    assert_true(sbx_session_given(h->session, &given));
    assert_true(given.has_seed);
    assert_memory_equal(given.seed, e->seed, SBX_SEED_BYTES);
    guint8 first[SBX_SEED_BYTES];
    memcpy(first, e->seed, sizeof(first));
    assert_false(h->result->replayable);
    assert_null(h->result->clock_log);
    harness_free(h, FALSE);

    h = harness_new(NULL);
    harness_start(h, script_normal, NULL, &req);
    harness_wait_done(h, 1, 10000);
    assert_memory_not_equal(h->guest->execute.execute.seed, first, SBX_SEED_BYTES);
    harness_free(h, FALSE);

    /* A replay: the request's seed and clock log go out; the guest's log comes back. */
    req.seed = seed;
    req.clock_log = reads;
    req.n_clock_log = 2;
    h = harness_new(NULL);
    harness_start(h, script_replay, NULL, &req);
    harness_wait_done(h, 1, 10000);
    e = &h->guest->execute.execute;
    assert_memory_equal(e->seed, seed, SBX_SEED_BYTES);
    assert_int_equal(e->n_clock_log, 2);
    assert_true(e->clock_log[1] == 1800000000000123ull);
    assert_true(sbx_session_given(h->session, &given));
    assert_memory_equal(given.seed, seed, SBX_SEED_BYTES);
    const SbxRunResult *r = h->result;
    assert_int_equal(r->status, SBX_STATUS_OK);
    assert_int_equal(r->n_clock_log, 2);
    assert_true(r->clock_log[0] == 7 && r->clock_log[1] == 1800000000000123ull);
    assert_false(r->replayable);
    assert_string_equal(r->not_replayable, "a thread was started");
    harness_free(h, FALSE);
}

/* Everything byte by byte: the session must reassemble frames from any fragmentation. */
static void script_fragmented(FakeGuest *g)
{
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};
    char *langs[] = {"javascript", NULL};
    uint8_t *frame = NULL;
    size_t len = 0;

    if (fake_guest_recv(g, &g->hello) < 0) {
        return;
    }
    ok.hello_ok.version = SBX_PROTOCOL_VERSION;
    ok.hello_ok.token = g->hello.hello.token;
    ok.hello_ok.agent = "frag";
    ok.hello_ok.languages = langs;
    sbx_msg_encode(&ok, &frame, &len);
    for (size_t i = 0; i < len; i++) {
        fake_guest_send_raw(g, frame + i, 1);
    }
    free(frame);
    if (fake_guest_recv(g, &g->execute) < 0) {
        return;
    }
    fake_guest_started(g);
    fake_guest_output(g, SBX_STREAM_STDOUT, "x");
    SbxMsg done = {.type = SBX_MSG_DONE};
    done.done.id = g->execute.execute.id;
    done.done.status = SBX_STATUS_OK;
    done.done.result_json = "null";
    sbx_msg_encode(&done, &frame, &len);
    for (size_t i = 0; i < len; i++) {
        fake_guest_send_raw(g, frame + i, 1);
    }
    free(frame);
}

static void test_fragmented(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_fragmented, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_OK);
    assert_string_equal(h->result->result_json, "null");
    assert_string_equal(h->streamed[SBX_STREAM_STDOUT]->str, "x");
    harness_free(h, FALSE);
}

/* Two executions on one session: the second gets execute without a new hello. */
static void script_two_runs(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_done(g, SBX_STATUS_OK, "1", 0) < 0) {
        return;
    }
    SbxMsg *second = fake_guest_recv_keep(g);
    if (second == NULL || second->type != SBX_MSG_EXECUTE) {
        fake_guest_fail(g, "expected a second execute");
        return;
    }
    SbxMsg started = {.type = SBX_MSG_STARTED, .started = {.id = second->execute.id}};
    SbxMsg done = {.type = SBX_MSG_DONE};
    done.done.id = second->execute.id;
    done.done.status = SBX_STATUS_ERROR;
    done.done.exit_code = 3;
    fake_guest_send(g, &started);
    fake_guest_send(g, &done);
}

static void test_second_execution(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    g_autoptr(GError) error = NULL;
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT, .code = "2", .timeout_ms = 5000};

    harness_start(h, script_two_runs, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    g_autofree char *first_id = g_strdup(sbx_session_execution_id(h->session));
    assert_true(sbx_session_run(h->session, &req, &error));
    assert_false(sbx_session_run(h->session, &req, &error)); /* busy */
    harness_wait_done(h, 2, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_ERROR);
    assert_int_equal(h->result->exit_code, 3);
    assert_string_not_equal(first_id, sbx_session_execution_id(h->session));
    harness_free(h, FALSE);
}

/* ---- protocol violations ------------------------------------------------------------------- */

/* Expect the execution to end as a crash by protocol violation mentioning @what. */
static void expect_violation_within(FakeGuestScript script, gpointer data, const char *what,
                                    guint timeout_ms)
{
    /* The execution's own timeout must not end it first. */
    SbxRunRequest req = {
        .language = SBX_LANG_JAVASCRIPT,
        .code = "console.log('hi')",
        .timeout_ms = timeout_ms * 2,
        .collect_output = TRUE,
    };
    Harness *h = harness_new(NULL);
    harness_start(h, script, data, &req);
    harness_wait_done(h, 1, timeout_ms);
    assert_int_equal(h->result->status, SBX_STATUS_CRASH);
    assert_true(h->result->protocol_violation);
    assert_false(h->result->vm_reusable);
    assert_int_equal(h->result->error.code, SBX_ERR_INTERNAL);
    if (strstr(harness_error(h), "protocol violation") == NULL ||
        strstr(harness_error(h), what) == NULL) {
        fail_msg("error \"%s\" does not mention \"%s\"", harness_error(h), what);
    }
    harness_spin(50); /* nothing more may happen */
    assert_int_equal(h->done_count, 1);
    assert_int_equal(h->broken_count, 0);
    harness_free(h, TRUE);
}

static void expect_violation(FakeGuestScript script, gpointer data, const char *what)
{
    expect_violation_within(script, data, what, 10000);
}

static void script_bad_token(FakeGuest *g)
{
    fake_guest_handshake(g, "not-the-token");
}

static void test_token_mismatch(void **state)
{
    (void)state;
    expect_violation(script_bad_token, NULL, "token");
}

static void script_bad_version(FakeGuest *g)
{
    char *langs[] = {"javascript", NULL};
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};
    if (fake_guest_recv(g, &g->hello) < 0) {
        return;
    }
    ok.hello_ok.version = SBX_PROTOCOL_VERSION + 1;
    ok.hello_ok.token = g->hello.hello.token;
    ok.hello_ok.agent = "future";
    ok.hello_ok.languages = langs;
    fake_guest_send(g, &ok);
}

static void test_version_mismatch(void **state)
{
    (void)state;
    expect_violation(script_bad_version, NULL, "version");
}

static void script_hello_ok_twice(FakeGuest *g)
{
    char *langs[] = {"javascript", NULL};
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    ok.hello_ok.version = SBX_PROTOCOL_VERSION;
    ok.hello_ok.token = g->hello.hello.token;
    ok.hello_ok.agent = "again";
    ok.hello_ok.languages = langs;
    fake_guest_send(g, &ok);
}

static void test_hello_ok_twice(void **state)
{
    (void)state;
    expect_violation(script_hello_ok_twice, NULL, "unexpected hello_ok");
}

static void script_malformed(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    fake_guest_send_json(g, "{\"type\": \"started\", \"id\": ");
}

static void test_malformed_frame(void **state)
{
    (void)state;
    expect_violation(script_malformed, NULL, "undecodable frame");
}

static void script_oversize(FakeGuest *g)
{
    static const uint8_t header[4] = {0x7f, 0xff, 0xff, 0xff};
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    fake_guest_send_raw(g, header, sizeof(header));
}

/* Bit 31: a data frame, which nothing announced during an execution (only file messages do). */
static void script_data_frame(FakeGuest *g)
{
    static const uint8_t header[4] = {0xff, 0xff, 0xff, 0xff};
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    fake_guest_send_raw(g, header, sizeof(header));
}

static void test_oversize_header(void **state)
{
    (void)state;
    expect_violation(script_oversize, NULL, "frame of 2147483647 bytes announced, limit 4194304");
    expect_violation(script_data_frame, NULL,
                     "a data frame of 2147483647 bytes that no message announced");
}

static void script_empty_frame(FakeGuest *g)
{
    static const uint8_t header[4] = {0, 0, 0, 0};
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    fake_guest_send_raw(g, header, sizeof(header));
}

static void test_empty_frame(void **state)
{
    (void)state;
    expect_violation(script_empty_frame, NULL, "0 bytes");
}

static void script_output_before_started(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    fake_guest_output(g, SBX_STREAM_STDOUT, "early");
}

static void test_output_before_started(void **state)
{
    (void)state;
    expect_violation(script_output_before_started, NULL, "output before started");
}

static void script_output_other_id(FakeGuest *g)
{
    SbxMsg m = {.type = SBX_MSG_OUTPUT};
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    m.output.id = "someone-else";
    m.output.stream = SBX_STREAM_STDOUT;
    m.output.data = (uint8_t *)"x";
    m.output.len = 1;
    fake_guest_send(g, &m);
}

static void test_output_other_id(void **state)
{
    (void)state;
    expect_violation(script_output_other_id, NULL, "someone-else");
}

static void script_started_twice(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    fake_guest_started(g);
}

static void test_started_twice(void **state)
{
    (void)state;
    expect_violation(script_started_twice, NULL, "unexpected started");
}

/* A message only the host may send. */
static void script_host_message(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    SbxMsg cancel = {.type = SBX_MSG_CANCEL, .cancel = {.id = g->execute.execute.id}};
    fake_guest_send(g, &cancel);
}

static void test_wrong_direction(void **state)
{
    (void)state;
    expect_violation(script_host_message, NULL, "unexpected cancel");
}

static void script_pong(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    SbxMsg pong = {.type = SBX_MSG_PONG, .ping = {.seq = 7}};
    fake_guest_send(g, &pong);
}

static void test_unsolicited_pong(void **state)
{
    (void)state;
    expect_violation(script_pong, NULL, "unexpected pong");
}

static void script_duplicate_call(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    fake_guest_tool_call(g, 5, "calc", "add", "{}");
    fake_guest_tool_call(g, 5, "calc", "add", "{}");
}

static void test_duplicate_call_id(void **state)
{
    (void)state;
    expect_violation(script_duplicate_call, NULL, "reuses call id 5");
}

/* The guest's fatal error message ends the execution as a crash (not a violation). */
static void script_guest_error(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0) {
        return;
    }
    SbxMsg m = {.type = SBX_MSG_ERROR, .error = {.code = SBX_ERR_INTERNAL, .message = "boom"}};
    fake_guest_send(g, &m);
}

static void test_guest_error(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_guest_error, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_CRASH);
    assert_non_null(strstr(harness_error(h), "boom"));
    assert_false(h->result->vm_reusable);
    harness_free(h, TRUE);
}

static void script_eof(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    static const uint8_t half[2] = {0, 0}; /* then EOF inside a frame header */
    fake_guest_send_raw(g, half, sizeof(half));
}

static void test_guest_eof(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_eof, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_CRASH);
    assert_non_null(strstr(harness_error(h), "channel to the guest lost"));
    assert_non_null(strstr(harness_error(h), "middle of a frame"));
    harness_free(h, TRUE);
}

static void script_no_python(FakeGuest *g)
{
    char *langs[] = {"javascript", NULL};
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};
    if (fake_guest_recv(g, &g->hello) < 0) {
        return;
    }
    ok.hello_ok.version = SBX_PROTOCOL_VERSION;
    ok.hello_ok.token = g->hello.hello.token;
    ok.hello_ok.agent = "js only";
    ok.hello_ok.languages = langs;
    fake_guest_send(g, &ok);
}

static void test_language_not_offered(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "1"};
    harness_start(h, script_no_python, NULL, &req);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_CRASH);
    assert_false(h->result->protocol_violation);
    assert_non_null(strstr(harness_error(h), "does not offer python"));
    harness_free(h, TRUE);
}

/* ---- after done ------------------------------------------------------------------------------ */

static void script_done_twice(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_done(g, SBX_STATUS_OK, "1", 0) < 0) {
        return;
    }
    fake_guest_done(g, SBX_STATUS_ERROR, "2", 9);
}

static void test_done_twice(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_done_twice, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    harness_wait_broken(h, 10000);
    assert_int_equal(h->done_count, 1);
    assert_int_equal(h->result->status, SBX_STATUS_OK); /* the first done counts */
    assert_string_equal(h->result->result_json, "1");
    assert_non_null(strstr(h->broken_reason, "unexpected done"));
    harness_free(h, TRUE);
}

static void script_output_after_done(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_output(g, SBX_STREAM_STDOUT, "in time") < 0 ||
        fake_guest_done(g, SBX_STATUS_OK, "1", 0) < 0) {
        return;
    }
    fake_guest_output(g, SBX_STREAM_STDOUT, "too late");
}

static void test_output_after_done(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_output_after_done, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    harness_wait_broken(h, 10000);
    assert_int_equal(h->done_count, 1);
    assert_string_equal(h->streamed[SBX_STREAM_STDOUT]->str, "in time");
    assert_int_equal(h->result->collected[SBX_STREAM_STDOUT]->len, 7);
    assert_non_null(strstr(h->broken_reason, "output"));
    harness_free(h, TRUE);
}

/* ---- host-enforced limits ------------------------------------------------------------------- */

/* Bytes the flood test sends: 1 GiB unless SBX_TEST_FLOOD_MIB says otherwise. */
static guint64 flood_bytes(void)
{
    const char *env = g_getenv("SBX_TEST_FLOOD_MIB");
    return (env != NULL ? g_ascii_strtoull(env, NULL, 10) : 1024) * 1024 * 1024;
}

/* Output frames as fast as the socket takes them, then a done that claims nothing was cut. */
static void script_flood(FakeGuest *g)
{
    static uint8_t chunk[SBX_OUTPUT_CHUNK_MAX];
    SbxMsg m = {.type = SBX_MSG_OUTPUT};
    uint8_t *frame = NULL;
    size_t len = 0;

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    memset(chunk, 'x', sizeof(chunk));
    m.output.id = g->execute.execute.id;
    m.output.stream = SBX_STREAM_STDOUT;
    m.output.data = chunk;
    m.output.len = sizeof(chunk);
    if (sbx_msg_encode(&m, &frame, &len) < 0) {
        fake_guest_fail(g, "encode output");
        return;
    }
    for (guint64 sent = 0; sent < flood_bytes(); sent += sizeof(chunk)) {
        if (fake_guest_send_raw(g, frame, len) < 0) {
            fake_guest_fail(g, "host closed during the flood");
            break;
        }
    }
    free(frame);
    fake_guest_done(g, SBX_STATUS_OK, "\"finished\"", 0);
}

static long max_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static void test_output_cap_flood(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    const guint64 cap = 1024 * 1024;
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT,
                         .code = "flood()",
                         .output_limit = cap,
                         .timeout_ms = 600000,
                         .collect_output = TRUE};
    long rss_before = max_rss_kib();

    harness_start(h, script_flood, NULL, &req);
    harness_wait_done(h, 1, 600000);
    const SbxRunResult *r = h->result;
    assert_int_equal(r->status, SBX_STATUS_OK);
    assert_string_equal(r->result_json, "\"finished\"");
    assert_true(r->output_truncated); /* the guest said false: the host knows better */
    assert_int_equal(r->output_bytes, cap);
    assert_int_equal(r->collected[SBX_STREAM_STDOUT]->len, cap);
    assert_int_equal(h->streamed[SBX_STREAM_STDOUT]->len, cap);
    long grew_mib = (max_rss_kib() - rss_before) / 1024;
    printf("# flood of %" G_GUINT64_FORMAT " MiB: peak RSS grew by %ld MiB\n", flood_bytes() >> 20,
           grew_mib);
#if !defined(__SANITIZE_ADDRESS__)
    assert_true(grew_mib < 48); /* ASan's quarantine keeps freed frames around */
#endif
    harness_free(h, FALSE);
}

/* Started, then silence until the host cancels. */
static void script_silent(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    fake_guest_output(g, SBX_STREAM_STDOUT, "spinning");
    fake_guest_recv_keep(g); /* the cancel, or EOF */
}

static void test_timeout(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT,
                         .code = "for(;;);",
                         .timeout_ms = 300,
                         .collect_output = TRUE};
    gint64 t0 = g_get_monotonic_time();

    harness_start(h, script_silent, NULL, &req);
    harness_wait_done(h, 1, 10000);
    gint64 took_ms = (g_get_monotonic_time() - t0) / 1000;
    assert_int_equal(h->result->status, SBX_STATUS_TIMEOUT);
    assert_int_equal(h->result->error.code, SBX_ERR_TIMEOUT);
    assert_false(h->result->vm_reusable);
    assert_true(h->result->duration_ms >= 300 && took_ms < 5000);
    assert_string_equal(h->streamed[SBX_STREAM_STDOUT]->str, "spinning");
    harness_free(h, FALSE);
}

/* A replay_log of the running execution: @body is its members after the id. */
static void send_replay_log(FakeGuest *g, const char *body)
{
    char *json =
        g_strdup_printf("{\"type\":\"replay_log\",\"id\":\"%s\"%s}", g->execute.execute.id, body);
    fake_guest_send_json(g, json);
    g_free(json);
}

/* Logs streamed, an output, more logs, then silence till the kill (data: a reason to send). */
static void script_logs_then_silent(FakeGuest *g)
{
    const char *reason = g->data;

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    send_replay_log(g, ",\"clock\":[5,6],\"events\":[2]");
    fake_guest_output(g, SBX_STREAM_STDOUT, "6");
    send_replay_log(g, ",\"clock\":[7]");
    if (reason != NULL) {
        char *body = g_strdup_printf(",\"not_replayable\":\"%s\"", reason);
        send_replay_log(g, body);
        g_free(body);
    }
    fake_guest_recv_keep(g); /* the cancel, or EOF */
}

/*
 * A run killed by the host's timeout keeps the logs it streamed (replay_log), open at their
 * ends, and is replayable unless the runner said why not; the replay's event log and log_open
 * go out in the execute.
 */
static void test_timeout_keeps_streamed_logs(void **state)
{
    (void)state;
    guint64 events[] = {3};
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT,
                         .code = "x",
                         .timeout_ms = 400,
                         .collect_output = TRUE,
                         .event_log = events,
                         .n_event_log = 1,
                         .log_open = TRUE};

    for (int with_reason = 0; with_reason <= 1; with_reason++) {
        Harness *h = harness_new(NULL);
        harness_start(h, script_logs_then_silent, with_reason ? "a thread was started" : NULL,
                      &req);
        harness_wait_done(h, 1, 10000);
        const SbxExecute *e = &h->guest->execute.execute;
        assert_int_equal(e->n_event_log, 1);
        assert_true(e->event_log[0] == 3 && e->log_open);
        const SbxRunResult *r = h->result;
        assert_int_equal(r->status, SBX_STATUS_TIMEOUT);
        assert_int_equal(r->n_clock_log, 3);
        assert_true(r->clock_log[0] == 5 && r->clock_log[1] == 6 && r->clock_log[2] == 7);
        assert_int_equal(r->n_event_log, 1);
        assert_true(r->event_log[0] == 2);
        assert_true(r->log_open);
        assert_int_equal(r->replayable, !with_reason);
        if (with_reason) {
            assert_string_equal(r->not_replayable, "a thread was started");
        } else {
            assert_null(r->not_replayable);
        }
        harness_free(h, FALSE);
    }
}

/* Logs streamed, then a tool call carrying the next ones, then silence till the kill. */
static void script_call_carries_log(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    send_replay_log(g, ",\"clock\":[5,6],\"events\":[2]");
    char *call = g_strdup_printf("{\"type\":\"tool_call\",\"id\":\"%s\",\"call_id\":1,"
                                 "\"provider\":\"p\",\"tool\":\"t\",\"input\":{},"
                                 "\"clock\":[7],\"events\":[4]}",
                                 g->execute.execute.id);
    fake_guest_send_json(g, call);
    g_free(call);
    while (fake_guest_recv_keep(g) != NULL) {
        /* the call's answer, then the cancel, or EOF */
    }
}

/* A tool_call's carried entries join the logs as a replay_log's would (one frame less a call). */
static void test_call_carries_log(void **state)
{
    (void)state;
    SbxRunRequest req = {
        .language = SBX_LANG_JAVASCRIPT, .code = "x", .timeout_ms = 400, .collect_output = TRUE};
    Harness *h = harness_new(NULL);

    harness_start(h, script_call_carries_log, NULL, &req);
    harness_wait_done(h, 1, 10000);
    const SbxRunResult *r = h->result;
    assert_int_equal(r->status, SBX_STATUS_TIMEOUT);
    assert_int_equal(r->n_clock_log, 3);
    assert_true(r->clock_log[0] == 5 && r->clock_log[1] == 6 && r->clock_log[2] == 7);
    assert_int_equal(r->n_event_log, 2);
    assert_true(r->event_log[0] == 2 && r->event_log[1] == 4);
    assert_true(r->log_open && r->replayable);
    assert_int_equal(r->tool_calls->len, 1);
    harness_free(h, FALSE);
}

/* Streamed logs, then the runner's done with the clock's tail: the whole log, not open. */
static void script_logs_then_done(FakeGuest *g)
{
    const char *status = g->data;
    const char *tail = "[3]";

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    if (strcmp(status, "ok-empty") == 0) {
        status = "ok"; /* no read, nothing streamed: the done's empty log is the log */
        tail = "[]";
    } else {
        send_replay_log(g, ",\"clock\":[1,2],\"events\":[4,3]");
    }
    char *json = g_strdup_printf(
        "{\"type\":\"done\",\"id\":\"%s\",\"status\":\"%s\",\"exit_code\":0,"
        "\"duration_ms\":1,\"output_truncated\":false%s%s%s}",
        g->execute.execute.id, status, strcmp(status, "ok") == 0 ? ",\"clock_log\":" : "",
        strcmp(status, "ok") == 0 ? tail : "",
        strcmp(status, "ok") == 0 ? ",\"replayable\":true" : "");
    fake_guest_send_json(g, json);
    g_free(json);
}

static void test_done_after_streamed_logs(void **state)
{
    (void)state;
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "x"};

    /* The runner's done: the streamed reads and the done's tail, in order. */
    Harness *h = harness_new(NULL);
    harness_start(h, script_logs_then_done, "ok", &req);
    harness_wait_done(h, 1, 10000);
    const SbxRunResult *r = h->result;
    assert_int_equal(r->status, SBX_STATUS_OK);
    assert_int_equal(r->n_clock_log, 3);
    assert_true(r->clock_log[0] == 1 && r->clock_log[1] == 2 && r->clock_log[2] == 3);
    assert_int_equal(r->n_event_log, 2);
    assert_true(r->event_log[0] == 4 && r->event_log[1] == 3);
    assert_false(r->log_open);
    assert_true(r->replayable);
    harness_free(h, FALSE);

    /* The agent's done for a runner the kernel killed (memory): the streamed logs, open. */
    h = harness_new(NULL);
    harness_start(h, script_logs_then_done, "memory_limit", &req);
    harness_wait_done(h, 1, 10000);
    r = h->result;
    assert_int_equal(r->status, SBX_STATUS_MEMORY_LIMIT);
    assert_int_equal(r->n_clock_log, 2);
    assert_int_equal(r->n_event_log, 2);
    assert_true(r->log_open && r->replayable);
    harness_free(h, FALSE);

    /* Nothing streamed, an empty clock log in the done: an empty log, replayable. */
    h = harness_new(NULL);
    harness_start(h, script_logs_then_done, "ok-empty", &req);
    harness_wait_done(h, 1, 10000);
    r = h->result;
    assert_non_null(r->clock_log);
    assert_int_equal(r->n_clock_log, 0);
    assert_true(r->replayable);
    assert_null(r->event_log);
    harness_free(h, FALSE);

    /* An exit without the runner's done (status error): not replayable, as before. */
    h = harness_new(NULL);
    harness_start(h, script_logs_then_done, "error", &req);
    harness_wait_done(h, 1, 10000);
    assert_false(h->result->replayable);
    assert_false(h->result->log_open);
    harness_free(h, FALSE);
}

/* More clock reads than SBX_CLOCK_READS_MAX over several replay_logs, then an ok done. */
static void script_too_many_reads(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    GString *body = g_string_new(",\"clock\":[");
    for (int i = 0; i < SBX_REPLAY_LOG_BATCH_MAX; i++) {
        g_string_append_printf(body, "%s%d", i ? "," : "", i);
    }
    g_string_append_c(body, ']');
    for (int n = 0; n * SBX_REPLAY_LOG_BATCH_MAX <= SBX_CLOCK_READS_MAX; n++) {
        send_replay_log(g, body->str);
    }
    g_string_free(body, TRUE);
    char *json =
        g_strdup_printf("{\"type\":\"done\",\"id\":\"%s\",\"status\":\"ok\",\"exit_code\":0,"
                        "\"duration_ms\":1,\"output_truncated\":false,\"replayable\":true}",
                        g->execute.execute.id);
    fake_guest_send_json(g, json);
    g_free(json);
}

static void test_replay_log_bounds(void **state)
{
    (void)state;
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "x"};
    Harness *h = harness_new(NULL);

    harness_start(h, script_too_many_reads, NULL, &req);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_OK);
    assert_true(h->result->n_clock_log <= SBX_CLOCK_READS_MAX);
    assert_false(h->result->replayable);
    assert_non_null(strstr(h->result->not_replayable, "too many clock reads"));
    harness_free(h, FALSE);
}

/* A malformed replay_log is a breach: the run ends (crash), not replayable. */
static void script_bad_replay_log(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    send_replay_log(g, ",\"clock\":[1,-1]");
    fake_guest_recv_keep(g);
}

static void test_bad_replay_log(void **state)
{
    (void)state;
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "x", .timeout_ms = 5000};
    Harness *h = harness_new(NULL);

    harness_start(h, script_bad_replay_log, NULL, &req);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_CRASH);
    assert_true(h->result->protocol_violation);
    assert_false(h->result->replayable);
    assert_false(h->result->log_open);
    harness_free(h, FALSE);
}

/*
 * A timeout after the output reached the limit: no done says whether the guest cut it, and it
 * stops sending at the limit, so the report says truncated; below the limit it does not.
 */
static void test_timeout_at_output_limit(void **state)
{
    (void)state;
    for (int at_limit = 0; at_limit <= 1; at_limit++) {
        Harness *h = harness_new(NULL);
        SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT,
                             .code = "for(;;) print('spinning');",
                             .timeout_ms = 300,
                             .output_limit = at_limit ? strlen("spinning") : 1024,
                             .collect_output = TRUE};

        harness_start(h, script_silent, NULL, &req);
        harness_wait_done(h, 1, 10000);
        assert_int_equal(h->result->status, SBX_STATUS_TIMEOUT);
        assert_int_equal(h->result->output_truncated, at_limit);
        harness_free(h, FALSE);
    }
}

static void test_timeout_sends_cancel(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT, .code = "for(;;);", .timeout_ms = 200};

    harness_start(h, script_silent, NULL, &req);
    harness_wait_done(h, 1, 10000);
    FakeGuest *g = h->guest;
    fake_guest_join(g); /* returns once the guest got the cancel (the session is still open) */
    assert_int_equal(g->received->len, 1);
    SbxMsg *m = g_ptr_array_index(g->received, 0);
    assert_int_equal(m->type, SBX_MSG_CANCEL);
    assert_string_equal(m->cancel.id, g->execute.execute.id);
    harness_free(h, FALSE);
}

static void test_abort(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_silent, NULL, NULL);
    harness_spin(100);
    assert_int_equal(h->done_count, 0);
    sbx_session_abort(h->session, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, "the VM exited");
    assert_int_equal(h->done_count, 1);
    assert_int_equal(h->result->status, SBX_STATUS_CRASH);
    assert_string_equal(harness_error(h), "the VM exited");
    sbx_session_abort(h->session, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, "again"); /* no-op */
    assert_int_equal(h->done_count, 1);
    harness_free(h, FALSE);
}

/* Pings without ever reading the pongs: the host's write queue must stay bounded. */
static void script_ping_flood(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    for (guint32 seq = 0;; seq++) {
        SbxMsg ping = {.type = SBX_MSG_PING, .ping = {.seq = seq}};
        if (fake_guest_send(g, &ping) < 0) {
            break; /* the host gave up on us */
        }
    }
}

static void test_not_reading(void **state)
{
    (void)state;
    /* ~600 000 pings decoded and pongs encoded before 16 MiB of pongs are queued: ~2 s here,
     * over 10 s under ASan on a loaded machine (seen in CI). */
    expect_violation_within(script_ping_flood, NULL, "does not read", 60000);
}

static void script_ping(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    SbxMsg ping = {.type = SBX_MSG_PING, .ping = {.seq = 77}};
    fake_guest_send(g, &ping);
    SbxMsg *pong = fake_guest_recv_keep(g);
    if (pong == NULL || pong->type != SBX_MSG_PONG || pong->ping.seq != 77) {
        fake_guest_fail(g, "expected pong 77");
    }
    fake_guest_done(g, SBX_STATUS_OK, NULL, 0);
}

static void test_ping_pong(void **state)
{
    (void)state;
    Harness *h = harness_new(NULL);
    harness_start(h, script_ping, NULL, NULL);
    harness_wait_done(h, 1, 10000);
    assert_int_equal(h->result->status, SBX_STATUS_OK);
    assert_null(h->result->result_json);
    harness_free(h, FALSE);
}

static void done_never(SbxSession *s, const SbxRunResult *r, gpointer data)
{
    (void)s;
    (void)r;
    (void)data;
    fail_msg("on_done must not run when sbx_session_run() fails");
}

static void test_program_too_large(void **state)
{
    (void)state;
    static const SbxSessionCallbacks cb = {.on_done = done_never};
    g_autoptr(GError) error = NULL;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    g_autofree char *code = g_malloc(SBX_FRAME_MAX + 2);
    memset(code, 'a', SBX_FRAME_MAX + 1);
    code[SBX_FRAME_MAX + 1] = '\0';
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT, .code = code};

    SbxSession *s = sbx_session_new(sv[0], &cb, NULL, &error);
    assert_non_null(s);
    assert_false(sbx_session_run(s, &req, &error));
    assert_non_null(strstr(error->message, "frame limit"));
    sbx_session_free(s);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_output_cap_flood), /* first: its RSS check needs a low baseline */
        cmocka_unit_test(test_normal_run),
        cmocka_unit_test(test_seed_and_clock_log),
        cmocka_unit_test(test_fragmented),
        cmocka_unit_test(test_second_execution),
        cmocka_unit_test(test_token_mismatch),
        cmocka_unit_test(test_version_mismatch),
        cmocka_unit_test(test_hello_ok_twice),
        cmocka_unit_test(test_malformed_frame),
        cmocka_unit_test(test_oversize_header),
        cmocka_unit_test(test_empty_frame),
        cmocka_unit_test(test_output_before_started),
        cmocka_unit_test(test_output_other_id),
        cmocka_unit_test(test_started_twice),
        cmocka_unit_test(test_wrong_direction),
        cmocka_unit_test(test_unsolicited_pong),
        cmocka_unit_test(test_duplicate_call_id),
        cmocka_unit_test(test_guest_error),
        cmocka_unit_test(test_guest_eof),
        cmocka_unit_test(test_language_not_offered),
        cmocka_unit_test(test_done_twice),
        cmocka_unit_test(test_output_after_done),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_timeout_keeps_streamed_logs),
        cmocka_unit_test(test_call_carries_log),
        cmocka_unit_test(test_done_after_streamed_logs),
        cmocka_unit_test(test_replay_log_bounds),
        cmocka_unit_test(test_bad_replay_log),
        cmocka_unit_test(test_timeout_at_output_limit),
        cmocka_unit_test(test_timeout_sends_cancel),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_not_reading),
        cmocka_unit_test(test_ping_pong),
        cmocka_unit_test(test_program_too_large),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
