/*
 * The execution core (host-agent/exec/exec.c) against a fake VM source (a socketpair to a fake
 * guest thread, an acquire that succeeds, fails or takes its time, a VM that can "die") and a
 * recording sink: the execute once both the VM and the tools are ready, output to the sink or
 * into the report, a tool call relayed and its process reaped before done, the VM released
 * exactly once, and every way an execution ends early (the acquire fails, the tools fail while
 * the VM is acquired, an abort while acquiring or while running, the VM dies); a function
 * call (entry, args, kwargs) reaching the guest and the record unchanged.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "exec-fakes.h"
#include "exec/exec.h"
#include "exec/lease.h"
#include "exec/outcome.h"
#include "harness.h"
#include "store/records.h"

/* ---- guests ------------------------------------------------------------------------------- */

static void guest_ok(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_output(g, SBX_STREAM_STDOUT, "hi\n") < 0 ||
        fake_guest_output(g, SBX_STREAM_STDERR, "warn\n") < 0) {
        return;
    }
    fake_guest_done(g, SBX_STATUS_OK, "42", 0);
}

/* Starts, then waits until the host closes the channel (the VM "killed"). */
static void guest_hangs(FakeGuest *g)
{
    SbxMsg msg;

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    while (fake_guest_recv(g, &msg) == 0) {
        sbx_msg_clear(&msg);
    }
}

/* Starts, then its end of the channel closes (the VM killed from outside, or the agent gone). */
static void guest_vanishes(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) == 0) {
        fake_guest_started(g);
    }
}

/* One tool call to the fake command tool; the result becomes the program's. */
static void guest_tool_call(FakeGuest *g)
{
    SbxMsg msg;

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_tool_call(g, 1, "fake", "echo", "{\"x\":1}") < 0 ||
        fake_guest_recv(g, &msg) < 0) {
        return;
    }
    if (msg.type != SBX_MSG_TOOL_RESULT || !msg.tool_result.ok) {
        fake_guest_fail(g, "expected an ok tool_result");
    }
    sbx_msg_clear(&msg);
    fake_guest_done(g, SBX_STATUS_OK, "1", 0);
}

/* More than the record keeps of a stream (SBX_RECORD_OUTPUT_MAX), in the protocol's chunks. */
static void guest_floods(FakeGuest *g)
{
    g_autofree char *piece = g_strnfill(SBX_OUTPUT_CHUNK_MAX, 'a');

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    for (int i = 0; i < 20; i++) {
        if (fake_guest_output(g, SBX_STREAM_STDOUT, piece) < 0) {
            return;
        }
    }
    fake_guest_done(g, SBX_STATUS_OK, "null", 0);
}

static char *hex_of(const guint8 *bytes, gsize len)
{
    GString *out = g_string_new(NULL);

    for (gsize i = 0; i < len; i++) {
        g_string_append_printf(out, "%02x", bytes[i]);
    }
    return g_string_free(out, FALSE);
}

/* A streamed run: begun running, finished ok with its output, code hash, entropy and clock. */
/* A front end's own id (the API's ex_...) is the execution's, the guest's and the record's;
 * the catalog it named, the session it runs in and when it took the request are recorded. */
static void test_record_front_end_id(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    SbxExecRequest req = {
        .id = "ex_0123abcd", .language = SBX_LANG_JAVASCRIPT, .code = "1", .timeout_ms = 10000};
    SbxExecRecordInfo info = record_info;
    Run *run = run_new(guest_ok, NULL, &req);

    info.front_end = "http";
    info.tenant_id = "t_00000000000000aa";
    info.catalog = "github";
    info.session_id = "sess-0123";
    info.created_at_ms = 1700000000123;
    sbx_exec_set_record(run->exec, t->store, &info);
    assert_string_equal(sbx_exec_id(run->exec), "ex_0123abcd");
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    fake_guest_join(run->src.guest);
    assert_string_equal(run->src.guest->execute.execute.id, "ex_0123abcd");
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->id, "ex_0123abcd");
    assert_string_equal(r->front_end, "http");
    assert_string_equal(r->tenant_id, "t_00000000000000aa");
    assert_string_equal(r->catalog, "github");
    assert_string_equal(r->session_id, "sess-0123");
    assert_int_equal(r->created_at_ms, 1700000000123);
    assert_string_equal(r->status, "ok");
    run_free(run);
    tmp_store_free(t);
}

static void test_record_streamed(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    Run *run = run_new(guest_ok, NULL, NULL);

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    {
        g_autoptr(SbxRecord) r = NULL;
        g_autoptr(GError) error = NULL;
        assert_true(sbx_records_get(t->store, NULL, sbx_exec_id(run->exec), &r, &error));
        assert_string_equal(r->status, "running"); /* begun with the start */
    }
    run_wait_done(run, 10000);
    fake_guest_join(run->src.guest);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->status, "ok");
    assert_string_equal(r->front_end, "run");
    assert_null(r->tenant_id);
    assert_null(r->session_id);
    assert_string_equal(r->language, "javascript");
    assert_string_equal(r->code, "1");
    g_autofree char *sha = g_compute_checksum_for_string(G_CHECKSUM_SHA256, "1", -1);
    assert_string_equal(r->code_sha256, sha);
    assert_string_equal(r->profile, "q35-serial");
    assert_string_equal(r->snapshot_key, "snapkey");
    assert_string_equal(r->image_id, "img-1");
    assert_int_equal(r->timeout_ms, 10000);
    assert_int_equal(r->exit_code, 0);
    assert_string_equal(r->result_json, "42");
    assert_null(r->error_json);
    assert_int_equal(r->stdout_len, 3);
    assert_memory_equal(r->stdout_data, "hi\n", 3);
    assert_memory_equal(r->stderr_data, "warn\n", 5);
    assert_false(r->stdout_truncated);
    assert_int_equal(r->boot_ms, 7);
    assert_true(r->started_at_ms > 0 && r->finished_at_ms >= r->started_at_ms);
    /* The execution id is the session's: the guest ran under it. */
    assert_string_equal(run->src.guest->execute.execute.id, sbx_exec_id(run->exec));
    /* What the guest was given in hello (a fresh session: the execute carried none). */
    const SbxHello *hello = &run->src.guest->hello.hello;
    g_autofree char *entropy = hex_of(hello->entropy, hello->entropy_len);
    assert_int_equal(strlen(r->entropy_hex), 128);
    assert_string_equal(r->entropy_hex, entropy);
    assert_int_equal(r->guest_clock_ms, hello->time_us / 1000);
    /* The execute's seed, fresh (the request had none); the fake guest's done reported no
     * clock log: not replayable, and the record says why (docs/service.md, "Records"). */
    const SbxExecute *x = &run->src.guest->execute.execute;
    assert_non_null(x->seed);
    g_autofree char *seed = hex_of(x->seed, SBX_SEED_BYTES);
    assert_string_equal(r->seed_hex, seed);
    assert_null(r->clock_log_json);
    assert_true(r->has_replayable);
    assert_false(r->replayable);
    assert_non_null(strstr(r->not_replayable, "no clock log"));
    g_autofree char *rep = report(run);
    g_autofree char *id_member =
        g_strdup_printf(",\"extra\":1,\"id\":\"%s\",\"status\"", sbx_exec_id(run->exec));
    assert_non_null(strstr(rep, id_member));
    run_free(run);
    tmp_store_free(t);
}

/* Collected output is recorded from the result. */
static void test_record_collected(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    SbxExecRequest req = {
        .language = SBX_LANG_PYTHON, .code = "print('hi')", .collect_output = TRUE};
    Run *run = run_new(guest_ok, NULL, &req);

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->language, "python");
    assert_int_equal(r->stdout_len, 3);
    assert_memory_equal(r->stdout_data, "hi\n", 3);
    assert_memory_equal(r->stderr_data, "warn\n", 5);
    run_free(run);
    tmp_store_free(t);
}

/*
 * A function call: the guest's execute carries entry, args and kwargs byte for byte (numbers
 * keep their literals: beyond 2^53, beyond a double, a negative zero); the record keeps the
 * entry and the args (kwargs have no column yet).
 */
static void test_call(void **state)
{
    (void)state;
    static const char args[] = "[9007199254740993,1e400,-0.0,\"\\u00e9\"]";
    static const char kwargs[] = "{\"x\":1.50,\"y\":[{}]}";
    TmpStore *t = tmp_store_new();
    SbxExecRequest req = {.language = SBX_LANG_PYTHON,
                          .code = "def f(*a, **k): return 42",
                          .entry = "f",
                          .args_json = args,
                          .kwargs_json = kwargs};
    Run *run = run_new(guest_ok, NULL, &req);

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    fake_guest_join(run->src.guest);
    assert_null(run->src.guest->failure);
    const SbxExecute *e = &run->src.guest->execute.execute;
    assert_string_equal(e->entry, "f");
    assert_string_equal(e->args_json, args);
    assert_string_equal(e->kwargs_json, kwargs);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->entry, "f");
    assert_string_equal(r->args_json, args);
    run_free(run);
    tmp_store_free(t);
}

/* No call: the execute has no entry, args or kwargs, and the record none either. */
static void test_no_call(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    Run *run = run_new(guest_ok, NULL, NULL);

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    fake_guest_join(run->src.guest);
    const SbxExecute *e = &run->src.guest->execute.execute;
    assert_null(e->entry);
    assert_null(e->args_json);
    assert_null(e->kwargs_json);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_null(r->entry);
    assert_null(r->args_json);
    run_free(run);
    tmp_store_free(t);
}

/* Streamed output beyond the record's cap: kept up to it, flagged; the sink had it all. */
static void test_record_over_cap(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    Run *run = run_new(guest_floods, NULL, NULL);

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 20000);
    assert_int_equal(run->out[SBX_STREAM_STDOUT]->len, 20 * SBX_OUTPUT_CHUNK_MAX);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_int_equal(r->stdout_len, SBX_RECORD_OUTPUT_MAX);
    assert_true(r->stdout_truncated);
    assert_false(r->stderr_truncated);
    run_free(run);
    tmp_store_free(t);
}

/* A tool call is recorded under its real names with its input, result and policy note. */
static void test_record_tool_call(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    g_autofree char *dir = g_dir_make_tmp("test-exec-XXXXXX", NULL);
    Run *run = run_new(guest_tool_call, harness_fake_tools(dir, 10000, NULL), NULL);
    g_autoptr(GPtrArray) calls = NULL;
    g_autoptr(GPtrArray) approvals = NULL;

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 20000);
    g_autoptr(SbxRecord) r = record_of(t, run, &calls, &approvals);
    assert_string_equal(r->status, "ok");
    assert_int_equal(calls->len, 1);
    const SbxRecordCall *c = calls->pdata[0];
    assert_int_equal(c->call_id, 1);
    assert_string_equal(c->provider, "fake");
    assert_string_equal(c->tool, "echo");
    assert_string_equal(c->input_json, "{\"x\":1}");
    assert_true(c->ok);
    assert_non_null(c->result_json);
    assert_non_null(c->policy_json);
    assert_non_null(strstr(c->policy_json, "\"action\":\"allow\""));
    assert_int_equal(approvals->len, 0); /* allowed: nobody was asked */
    run_free(run);
    tmp_store_free(t);
    g_rmdir(dir);
}

/* A runner's done with the replay members: a clock log, replayable. */
static void guest_replayable(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    g_autofree char *log =
        g_strdup_printf("{\"type\":\"replay_log\",\"id\":\"%s\",\"clock\":[5],\"events\":[3,2]}",
                        g->execute.execute.id);
    fake_guest_send_json(g, log);
    fake_guest_done_replay(g, "\"clock_log\":[1800000000000123],\"replayable\":true");
}

/*
 * A replay's inputs through the core (SbxExecRequest.seed, .clock_log, .event_log, .log_open):
 * the execute carries them, and the record keeps the seed, the guest's clock log (streamed and
 * the done's), its event log, log_open and its verdict.
 */
static void test_record_replay_inputs(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    guint8 seed[SBX_SEED_BYTES];
    guint64 reads[] = {5, 1800000000000123};
    guint64 events[] = {3, 2};

    memset(seed, 0xab, sizeof(seed));
    SbxExecRequest req = {.language = SBX_LANG_PYTHON,
                          .code = "1",
                          .timeout_ms = 10000,
                          .seed = seed,
                          .clock_log = reads,
                          .n_clock_log = 2,
                          .event_log = events,
                          .n_event_log = 2,
                          .log_open = TRUE};
    Run *run = run_new(guest_replayable, NULL, &req);
    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    fake_guest_join(run->src.guest);
    const SbxExecute *x = &run->src.guest->execute.execute;
    assert_memory_equal(x->seed, seed, SBX_SEED_BYTES);
    assert_int_equal(x->n_clock_log, 2);
    assert_true(x->clock_log[0] == 5 && x->clock_log[1] == 1800000000000123ull);
    assert_int_equal(x->n_event_log, 2);
    assert_true(x->event_log[0] == 3 && x->log_open);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->status, "ok");
    g_autofree char *hex = hex_of(seed, sizeof(seed));
    assert_string_equal(r->seed_hex, hex);
    assert_string_equal(r->clock_log_json, "[5,1800000000000123]");
    assert_string_equal(r->event_log_json, "[3,2]");
    assert_true(r->has_log_open && !r->log_open);
    assert_true(r->has_replayable && r->replayable);
    assert_null(r->not_replayable);
    run_free(run);
    tmp_store_free(t);
}

/* A failure before the execute: crash, the failure as the error, no entropy (nothing sent). */
static void test_record_failure(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    Run *run = run_new(NULL, NULL, NULL);

    run->src.fail = TRUE;
    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->status, "crash");
    assert_non_null(strstr(r->error_json, "cannot start the VM: no QEMU here"));
    assert_null(r->entropy_hex);
    assert_int_equal(r->stdout_len, 0);
    assert_null(r->seed_hex);
    assert_true(r->has_replayable && !r->replayable);
    assert_string_equal(r->not_replayable, "the execution did not run");
    run_free(run);
    tmp_store_free(t);
}

/* Aborts: while running (terminated, with the guest's entropy) and before the start. */
static void test_record_aborts(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    Run *run = run_new(guest_hangs, NULL, NULL);

    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_start(run->exec);
    while (!run->src.begun) {
        g_main_context_iteration(NULL, TRUE);
    }
    sbx_exec_abort(run->exec, SBX_STATUS_TERMINATED, "the client went away");
    run_wait_done(run, 10000);
    g_autoptr(SbxRecord) r = record_of(t, run, NULL, NULL);
    assert_string_equal(r->status, "terminated");
    assert_non_null(strstr(r->error_json, "the client went away"));
    assert_int_equal(strlen(r->entropy_hex), 128);
    run_free(run);

    run = run_new(NULL, NULL, NULL);
    sbx_exec_set_record(run->exec, t->store, &record_info);
    sbx_exec_abort(run->exec, SBX_STATUS_CRASH, "tool catalog: no such file");
    g_autoptr(SbxRecord) never = record_of(t, run, NULL, NULL);
    assert_string_equal(never->status, "crash");
    assert_non_null(strstr(never->error_json, "tool catalog: no such file"));
    run_free(run);
    tmp_store_free(t);
}

/* A store that fails does not fail the execution: the error is kept for a warning. */
static void test_record_store_fails(void **state)
{
    (void)state;
    TmpStore *t = tmp_store_new();
    Run *first = run_new(guest_ok, NULL, NULL);
    Run *again = run_new(guest_ok, NULL, NULL);

    sbx_exec_set_record(first->exec, t->store, &record_info);
    sbx_exec_start(first->exec);
    run_wait_done(first, 10000);
    /* The same id twice: the store refuses the second record's begin. */
    memcpy((char *)sbx_exec_id(again->exec), sbx_exec_id(first->exec),
           strlen(sbx_exec_id(first->exec)) + 1);
    sbx_exec_set_record(again->exec, t->store, &record_info);
    sbx_exec_start(again->exec);
    run_wait_done(again, 10000);
    assert_int_equal(sbx_exec_result(again->exec)->status, SBX_STATUS_OK);
    assert_non_null(sbx_exec_record_error(again->exec));
    run_free(first);
    run_free(again);
    tmp_store_free(t);
}

/* ---- tests -------------------------------------------------------------------------------- */

/* Output streams to the sink as it comes; the VM is released once; the report has it all. */
static void test_ok(void **state)
{
    (void)state;
    Run *run = run_new(guest_ok, NULL, NULL);

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_int_equal(run->done, 1);
    assert_string_equal(run->out[SBX_STREAM_STDOUT]->str, "hi\n");
    assert_string_equal(run->out[SBX_STREAM_STDERR]->str, "warn\n");
    assert_int_equal(sbx_exec_result(run->exec)->status, SBX_STATUS_OK);
    assert_null(sbx_exec_failure(run->exec));
    assert_int_equal(sbx_exec_exit_code(run->exec), 0);
    assert_true(run->src.begun);
    wait_released(run);
    assert_int_equal(sbx_exec_boot_ms(run->exec), 7);
    g_autofree char *rep = report(run);
    assert_true(g_str_has_prefix(rep, "{\"start\":\"fake\",\"fake\":true,\"extra\":1,"));
    assert_non_null(strstr(rep, "\"result\":42"));
    assert_non_null(strstr(rep, "\"boot_ms\":7"));
    run_free(run);
}

/* collect_output: nothing reaches the sink, the report holds the output. */
static void test_collect(void **state)
{
    (void)state;
    SbxExecRequest req = {
        .language = SBX_LANG_PYTHON, .code = "print('hi')", .collect_output = TRUE};
    Run *run = run_new(guest_ok, NULL, &req);

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_int_equal(run->out[SBX_STREAM_STDOUT]->len, 0);
    g_autofree char *rep = report(run);
    assert_non_null(strstr(rep, "\"stdout\":\"hi\\n\""));
    assert_non_null(strstr(rep, "\"stderr\":\"warn\\n\""));
    run_free(run);
}

/* collect_output with a sink's collected_output: the output reaches it as it comes, and the
 * report holds it too; a streamed run's output never reaches collected_output. */
static void test_collect_live(void **state)
{
    (void)state;
    SbxExecRequest req = {
        .language = SBX_LANG_PYTHON, .code = "print('hi')", .collect_output = TRUE};
    use_live_sink = TRUE;
    Run *run = run_new(guest_ok, NULL, &req);
    Run *streamed = run_new(guest_ok, NULL, NULL);
    use_live_sink = FALSE;

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_string_equal(run->out[SBX_STREAM_STDOUT]->str, "hi\n");
    assert_string_equal(run->out[SBX_STREAM_STDERR]->str, "warn\n");
    g_autofree char *rep = report(run);
    assert_non_null(strstr(rep, "\"stdout\":\"hi\\n\""));
    sbx_exec_start(streamed->exec);
    run_wait_done(streamed, 10000);
    assert_int_equal(streamed->out[SBX_STREAM_STDOUT]->len, 0);
    run_free(run);
    run_free(streamed);
}

/* A tool call goes to the provider; done comes only once its process is reaped. */
static void test_tool_call(void **state)
{
    (void)state;
    g_autofree char *dir = g_dir_make_tmp("test-exec-XXXXXX", NULL);
    Run *run = run_new(guest_tool_call, harness_fake_tools(dir, 10000, NULL), NULL);

    sbx_exec_start(run->exec);
    run_wait_done(run, 20000);
    assert_int_equal(sbx_exec_result(run->exec)->status, SBX_STATUS_OK);
    assert_int_equal(run->tools_in_flight_at_done, 0);
    assert_int_equal(sbx_exec_result(run->exec)->tool_calls->len, 1);
    run_free(run);
    g_rmdir(dir);
}

/* The acquire fails: done with the failure, exit 125, nothing to release. */
static void test_acquire_fails(void **state)
{
    (void)state;
    Run *run = run_new(NULL, NULL, NULL);

    run->src.fail = TRUE;
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_null(sbx_exec_result(run->exec));
    assert_string_equal(sbx_exec_failure(run->exec), "cannot start the VM: no QEMU here");
    assert_int_equal(sbx_exec_exit_code(run->exec), SBX_EXIT_SANDBOX);
    assert_int_equal(run->src.releases, 0);
    g_autofree char *rep = report(run);
    assert_non_null(strstr(rep, "\"status\":\"crash\""));
    assert_non_null(strstr(rep, "\"boot_ms\":null"));
    run_free(run);
}

/* The tools fail while the VM is acquired: the acquire is cancelled, the exec ends with the
 * tools' failure once it returned, and a VM handed over meanwhile is released. */
static void test_tools_fail_while_acquiring(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    static const char catalog[] =
        "{\"providers\":{\"quits\":{\"kind\":\"mcp\",\"command\":[\"true\"]}}}";
    g_autofree char *dir = g_dir_make_tmp("test-exec-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "tools.json", NULL);

    assert_true(g_file_set_contents(path, catalog, -1, NULL));
    SbxTools *tools = sbx_tools_load(path, &error);
    if (tools == NULL) {
        fail_msg("sbx_tools_load: %s", error->message);
    }
    Run *run = run_new(NULL, tools, NULL);
    run->src.delay_ms = 60000;
    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_int_equal(run->src.cancels, 1);
    assert_true(g_str_has_prefix(sbx_exec_failure(run->exec), "cannot start the tools: "));
    assert_int_equal(sbx_exec_exit_code(run->exec), SBX_EXIT_SANDBOX);
    run_free(run);
    unlink(path);
    g_rmdir(dir);
}

/* An abort while acquiring: the acquire is cancelled, done follows with `terminated`. */
static void test_abort_while_acquiring(void **state)
{
    (void)state;
    Run *run = run_new(NULL, NULL, NULL);

    run->src.delay_ms = 60000;
    sbx_exec_start(run->exec);
    sbx_exec_abort(run->exec, SBX_STATUS_TERMINATED, "interrupted by SIGINT");
    assert_int_equal(run->done, 0); /* the acquire has not returned yet */
    run_wait_done(run, 10000);
    assert_int_equal(run->src.cancels, 1);
    assert_string_equal(sbx_exec_failure(run->exec), "interrupted by SIGINT");
    g_autofree char *rep = report(run);
    assert_non_null(strstr(rep, "\"status\":\"terminated\""));
    run_free(run);
}

/* An abort of a running execution: terminated, the VM released, the guest told. */
static void test_abort_while_running(void **state)
{
    (void)state;
    Run *run = run_new(guest_hangs, NULL, NULL);

    sbx_exec_start(run->exec);
    while (!run->src.begun) {
        g_main_context_iteration(NULL, TRUE);
    }
    harness_spin(50);
    sbx_exec_abort(run->exec, SBX_STATUS_TERMINATED, "the client went away");
    run_wait_done(run, 10000);
    assert_int_equal(sbx_exec_result(run->exec)->status, SBX_STATUS_TERMINATED);
    wait_released(run);
    assert_int_equal(sbx_exec_exit_code(run->exec), SBX_EXIT_SANDBOX);
    sbx_exec_abort(run->exec, SBX_STATUS_TERMINATED, "again"); /* no-op once ended */
    assert_int_equal(run->done, 1);
    run_free(run);
}

/* The VM dies during the execution: crash, with the VM's reason. */
static void test_vm_dies(void **state)
{
    (void)state;
    Run *run = run_new(guest_hangs, NULL, NULL);

    sbx_exec_start(run->exec);
    while (!run->src.begun) {
        g_main_context_iteration(NULL, TRUE);
    }
    run->src.exit_func(&run->src.base, "QEMU was killed by signal 9", run->src.exit_data);
    run_wait_done(run, 10000);
    const SbxRunResult *r = sbx_exec_result(run->exec);
    assert_int_equal(r->status, SBX_STATUS_CRASH);
    assert_non_null(strstr(r->error.message, "the VM exited: QEMU was killed by signal 9"));
    run_free(run);
}

/*
 * The channel ends, then the VM's exit is seen (QEMU killed from outside: the EOF comes first):
 * the outcome waits for it and says the VM exited, not that the guest closed the channel.
 */
static void test_channel_lost_vm_exits(void **state)
{
    (void)state;
    Run *run = run_new(guest_vanishes, NULL, NULL);

    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

    sbx_exec_start(run->exec);
    while (sbx_exec_result(run->exec) == NULL) { /* the session ended: the EOF was read */
        if (g_get_monotonic_time() > deadline) {
            fail_msg("the channel's end was not seen within 10 s");
        }
        g_main_context_iteration(NULL, FALSE);
    }
    fake_guest_join(run->src.guest);
    assert_int_equal(run->done, 0); /* the done waits for the VM's exit */
    assert_int_equal(run->src.releases, 0);
    run->src.exit_func(&run->src.base, "QEMU was killed by signal 9", run->src.exit_data);
    run_wait_done(run, 10000);
    const SbxRunResult *r = sbx_exec_result(run->exec);
    assert_int_equal(r->status, SBX_STATUS_CRASH);
    assert_non_null(strstr(r->error.message, "the VM exited: QEMU was killed by signal 9 "
                                             "(channel to the guest lost"));
    wait_released(run);
    run_free(run);
}

/* The channel ends and the VM lives (the guest's side closed it): after the grace, the done
 * says so. */
static void test_channel_lost_vm_lives(void **state)
{
    (void)state;
    Run *run = run_new(guest_vanishes, NULL, NULL);
    gint64 t0 = g_get_monotonic_time();

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    fake_guest_join(run->src.guest);
    const SbxRunResult *r = sbx_exec_result(run->exec);
    assert_int_equal(r->status, SBX_STATUS_CRASH);
    assert_true(g_str_has_prefix(r->error.message, "channel to the guest lost"));
    assert_true(g_get_monotonic_time() - t0 >= 900 * 1000); /* the grace was waited out */
    wait_released(run);
    run_free(run);
}

/* An abort before the start: done at once, nothing acquired. */
static void test_abort_before_start(void **state)
{
    (void)state;
    Run *run = run_new(NULL, NULL, NULL);

    sbx_exec_abort(run->exec, SBX_STATUS_CRASH, "tool catalog: no such file");
    assert_int_equal(run->done, 1);
    assert_string_equal(sbx_exec_failure(run->exec), "tool catalog: no such file");
    assert_int_equal(run->src.cancels + run->src.releases, 0);
    run_free(run);
}

/* ---- files in and out (exec-files.c) ------------------------------------------------------- */

/* The workspace the files guest serves (one test at a time). */
static FakeFiles *guest_ws;

/*
 * Hello, then file requests from guest_ws, and on the execute the "program": it checks that
 * the files given are there, writes out/new.txt, grows a.txt and leaves b.bin alone, then done.
 */
static void guest_files(FakeGuest *g)
{
    SbxMsg m = {0};

    if (fake_guest_hello(g) < 0) {
        return;
    }
    while (fake_guest_recv(g, &m) == 0) {
        int rc = 0;
        if (m.type == SBX_MSG_FILE) {
            rc = fake_files_serve_one(g, guest_ws, &m.file);
        } else if (m.type == SBX_MSG_EXECUTE) {
            g_autoptr(GBytes) a = fake_files_get(guest_ws, "a.txt");
            sbx_msg_clear(&g->execute);
            g->execute = m; /* the done names it */
            m = (SbxMsg){0};
            if (a == NULL || g_bytes_get_size(a) != 5) {
                fake_guest_fail(g, "a.txt was not put before the execute");
            }
            fake_files_set(guest_ws, "out/new.txt", "result", 6);
            fake_files_set(guest_ws, "a.txt", "hello world", 11);
            rc =
                fake_guest_started(g) < 0 || fake_guest_done(g, SBX_STATUS_OK, "1", 0) < 0 ? -1 : 0;
        } else if (m.type != SBX_MSG_ERROR) {
            fake_guest_fail(g, "unexpected %s", sbx_msg_type_name(m.type));
        }
        sbx_msg_clear(&m);
        if (rc < 0) {
            return;
        }
    }
}

static const guint8 b_bin[] = {0, 1, 2, 255, 254};

/* An execution with a.txt and dir/b.bin given, its changed files asked for. */
static Run *run_files(void)
{
    g_autoptr(GBytes) a = g_bytes_new_static("hello", 5);
    g_autoptr(GBytes) b = g_bytes_new_static(b_bin, sizeof(b_bin));
    SbxExecFileIn in[] = {{.path = "a.txt", .bytes = a}, {.path = "dir/b.bin", .bytes = b}};
    SbxExecRequest req = {.language = SBX_LANG_PYTHON,
                          .code = "1",
                          .timeout_ms = 10000,
                          .files = in,
                          .n_files = 2,
                          .with_files = TRUE};

    return run_new(guest_files, NULL, &req);
}

/* The files go in before the execute (the guest checks); new and changed ones come back with
 * their sizes, SHA-256 and contents; an unchanged one does not; the record has them. */
static void test_files_in_out(void **state)
{
    (void)state;
    guest_ws = fake_files_new();
    Run *run = run_files();
    gsize n = 0;
    gboolean truncated = TRUE;

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_null(sbx_exec_failure(run->exec));
    assert_int_equal(sbx_exec_result(run->exec)->status, SBX_STATUS_OK);
    g_autoptr(GBytes) b = fake_files_get(guest_ws, "dir/b.bin");
    assert_non_null(b);
    assert_memory_equal(g_bytes_get_data(b, NULL), b_bin, sizeof(b_bin));
    const SbxExecFileOut *out = sbx_exec_files_out(sbx_exec_files(run->exec), &n, &truncated);
    assert_int_equal(n, 2); /* in the listing's order; b.bin unchanged */
    assert_false(truncated);
    assert_string_equal(out[0].path, "a.txt");
    assert_int_equal(out[0].size, 11);
    g_autofree char *sha_a = g_compute_checksum_for_string(G_CHECKSUM_SHA256, "hello world", -1);
    assert_string_equal(out[0].sha256, sha_a);
    assert_int_equal(g_bytes_get_size(out[0].content), 11);
    assert_null(out[0].omitted);
    assert_string_equal(out[1].path, "out/new.txt");
    assert_memory_equal(g_bytes_get_data(out[1].content, NULL), "result", 6);
    g_autofree char *json = sbx_exec_files_json_of(run->exec, TRUE);
    assert_non_null(strstr(json, "\"content_base64\":\"cmVzdWx0\"")); /* "result" */
    assert_non_null(strstr(json, "\"truncated\":false,\"error\":null}"));
    g_autofree char *bare = sbx_exec_files_json_of(run->exec, FALSE);
    assert_null(strstr(bare, "content_base64"));
    assert_non_null(strstr(bare, sha_a));
    assert_null(run->src.guest->failure);
    run_free(run);
    fake_files_free(guest_ws);
}

/* A put the guest refuses: the execution fails before its execute, saying which file. */
static void test_files_put_refused(void **state)
{
    (void)state;
    guest_ws = fake_files_new();
    fake_files_fail(guest_ws, 1, "ENOSPC", "no room"); /* the second request: dir/b.bin */
    Run *run = run_files();

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    assert_null(sbx_exec_result(run->exec));
    assert_non_null(strstr(sbx_exec_failure(run->exec), "cannot put dir/b.bin"));
    assert_non_null(strstr(sbx_exec_failure(run->exec), "ENOSPC"));
    assert_int_equal(sbx_exec_exit_code(run->exec), SBX_EXIT_SANDBOX);
    g_autofree char *json = sbx_exec_files_json_of(run->exec, TRUE);
    assert_non_null(strstr(json, "\"error\":\"the program did not run\""));
    assert_null(run->src.guest->failure);
    run_free(run);
    fake_files_free(guest_ws);
}

/* A changed file the guest will not let be read: reported with why, the rest go on. */
static void test_files_read_refused(void **state)
{
    (void)state;
    guest_ws = fake_files_new();
    /* puts: a.txt, dir/b.bin; lists before and after; then the read of a.txt */
    fake_files_fail(guest_ws, 4, "EACCES", "no");
    Run *run = run_files();
    gsize n = 0;
    gboolean truncated;

    sbx_exec_start(run->exec);
    run_wait_done(run, 10000);
    const SbxExecFileOut *out = sbx_exec_files_out(sbx_exec_files(run->exec), &n, &truncated);
    assert_int_equal(n, 2);
    assert_non_null(strstr(out[0].omitted, "not read"));
    assert_string_equal(out[0].sha256, "");
    assert_null(out[0].content);
    assert_non_null(out[1].content);
    g_autofree char *json = sbx_exec_files_json_of(run->exec, TRUE);
    assert_non_null(strstr(json, "\"sha256\":null"));
    assert_null(run->src.guest->failure);
    run_free(run);
    fake_files_free(guest_ws);
}

/* The guest stops answering while the files come out: an abort ends the execution with its
 * outcome, and the files say why they are missing. */
static void test_files_abort_collecting(void **state)
{
    (void)state;
    guest_ws = fake_files_new();
    guest_ws->silent_from = 5; /* the first read after the run */
    Run *run = run_files();

    sbx_exec_start(run->exec);
    while (fake_files_count(guest_ws, SBX_FILE_READ) == 0) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
    assert_int_equal(run->done, 0);
    sbx_exec_abort(run->exec, SBX_STATUS_CANCELLED, "cancelled by the client");
    run_wait_done(run, 10000);
    assert_int_equal(sbx_exec_result(run->exec)->status, SBX_STATUS_OK);
    g_autofree char *json = sbx_exec_files_json_of(run->exec, TRUE);
    assert_non_null(strstr(json, "\"error\":\"not collected: cancelled by the client\""));
    run_free(run);
    fake_files_free(guest_ws);
}

/* ---- a lease: one VM for several executions ------------------------------------------------ */

/* A session's guest: hello (before any execute, the lease's handshake), then each execute gets
 * started and a done with kept while g->data counts down; 0 left: a done without kept. */
static void guest_session(FakeGuest *g)
{
    SbxMsg m = {.type = SBX_MSG_HELLO_OK};
    int keep_for = GPOINTER_TO_INT(g->data);

    if (fake_guest_recv(g, &g->hello) < 0 || g->hello.type != SBX_MSG_HELLO) {
        fake_guest_fail(g, "expected hello first");
        return;
    }
    m.hello_ok.version = SBX_PROTOCOL_VERSION;
    m.hello_ok.token = g->hello.hello.token;
    m.hello_ok.agent = "fake";
    m.hello_ok.languages = (char *[]){"javascript", NULL};
    if (fake_guest_send(g, &m) < 0) {
        return;
    }
    for (int n = 0;; n++) {
        sbx_msg_clear(&g->execute);
        if (fake_guest_recv(g, &g->execute) < 0) {
            return; /* the host closed: the lease's end */
        }
        if (g->execute.type != SBX_MSG_EXECUTE || !g->execute.execute.keep) {
            fake_guest_fail(g, "expected an execute with keep");
            return;
        }
        SbxMsg d = {.type = SBX_MSG_DONE};
        d.done.id = g->execute.execute.id;
        d.done.status = SBX_STATUS_OK;
        d.done.result_json = n == 0 ? "1" : "2";
        d.done.duration_ms = 1;
        d.done.kept = n < keep_for;
        if (fake_guest_started(g) < 0 || fake_guest_send(g, &d) < 0) {
            return;
        }
    }
}

typedef struct {
    int ready, lost, returned;
    char *error;
    char *lost_reason;
} LeaseEvents;

static void lease_ready(SbxExecLease *lease, const GError *error, gpointer data)
{
    LeaseEvents *ev = data;
    (void)lease;

    ev->ready++;
    ev->error = error != NULL ? g_strdup(error->message) : NULL;
}

static void lease_lost(SbxExecLease *lease, const char *reason, gpointer data)
{
    LeaseEvents *ev = data;
    (void)lease;

    ev->lost++;
    ev->lost_reason = g_strdup(reason);
}

static void lease_returned(SbxExecLease *lease, gpointer data)
{
    LeaseEvents *ev = data;
    (void)lease;

    ev->returned++;
}

static const SbxExecLeaseCallbacks lease_cb = {
    .ready = lease_ready, .lost = lease_lost, .returned = lease_returned};

static void wait_for(const int *counter, int value, const char *what)
{
    gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

    while (*counter < value) {
        if (g_get_monotonic_time() > deadline) {
            fail_msg("%s did not happen within 5 s", what);
        }
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
}

/* An execution on the lease's VM, started. */
static Run *lease_exec(SbxExecLease *lease)
{
    Run *run = g_new0(Run, 1);
    SbxExecRequest req = {
        .language = SBX_LANG_JAVASCRIPT, .code = "x", .timeout_ms = 10000, .keep = TRUE};

    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        run->out[i] = g_string_new(NULL);
    }
    run->exec = sbx_exec_new(&req, sbx_tools_new(sbx_catalog_new_empty(), NULL),
                             sbx_exec_lease_lend(lease), &run_sink, run);
    assert_true(sbx_exec_lease_lent(lease));
    assert_false(sbx_exec_lease_usable(lease));
    sbx_exec_start(run->exec);
    return run;
}

static void lease_exec_free(Run *run)
{
    sbx_exec_free(run->exec);
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        g_string_free(run->out[i], TRUE);
    }
    g_free(run);
}

/* One execution on the lease's VM; returns its result's kept. */
static gboolean lease_run(SbxExecLease *lease, const char *want_result)
{
    Run *run = lease_exec(lease);

    run_wait_done(run, 5000);
    const SbxRunResult *r = sbx_exec_result(run->exec);
    assert_non_null(r);
    assert_int_equal(r->status, SBX_STATUS_OK);
    assert_string_equal(r->result_json, want_result);
    gboolean kept = r->kept;
    /* its release does not touch the VM; the channel goes back at the free */
    for (int i = 0; i < 20; i++) {
        g_main_context_iteration(NULL, FALSE);
    }
    lease_exec_free(run);
    return kept;
}

/* A fake source for a lease (the lease frees it): its guest plays @keep_for kept executions;
 * @keep_for < 0: no guest (the acquire fails or never gets that far). */
static FakeSource *lease_source(int keep_for, guint delay_ms, gboolean *freed)
{
    FakeSource *src = g_new0(FakeSource, 1);

    src->base.ops = &fake_ops;
    src->base.start = "fake";
    src->fd = -1;
    src->delay_ms = delay_ms;
    src->freed = freed;
    if (keep_for >= 0) {
        src->guest = fake_guest_start(guest_session, GINT_TO_POINTER(keep_for), &src->fd);
    }
    return src;
}

/* The lease says hello once, lends the VM to three executions on one channel in turn (one lent
 * while another has the VM waits for its give-back), and kills the VM only at its end. */
static void test_lease_executions_in_turn(void **state)
{
    LeaseEvents ev = {0};
    gboolean freed = FALSE;
    FakeSource *src = lease_source(2, 1, &freed);
    FakeGuest *guest = src->guest;

    (void)state;
    SbxExecLease *lease = sbx_exec_lease_new(&src->base);

    sbx_exec_lease_start(lease, &lease_cb, &ev);
    wait_for(&ev.ready, 1, "the lease's start");
    assert_null(ev.error);
    assert_true(sbx_exec_lease_usable(lease));
    assert_non_null(sbx_exec_lease_session(lease)); /* hello said: files could go now */
    assert_true(lease_run(lease, "1"));
    wait_for(&ev.returned, 1, "the first give-back");
    assert_true(sbx_exec_lease_usable(lease));
    /* the third is lent while the second still has the VM: it waits for the give-back */
    Run *second = lease_exec(lease);
    run_wait_done(second, 5000);
    Run *third = lease_exec(lease);
    for (int i = 0; i < 50; i++) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
    assert_int_equal(third->done, 0);
    assert_string_equal(sbx_exec_result(second->exec)->result_json, "2");
    lease_exec_free(second);
    run_wait_done(third, 5000);
    assert_string_equal(sbx_exec_result(third->exec)->result_json, "2");
    assert_false(sbx_exec_result(third->exec)->kept); /* the guest kept two */
    lease_exec_free(third);
    wait_for(&ev.returned, 2, "the last give-back");
    assert_int_equal(src->releases, 0); /* the executions' ends did not kill the VM */
    assert_true(src->begun);
    assert_int_equal(ev.lost, 0);
    sbx_exec_lease_unref(lease);
    assert_int_equal(src->releases, 1);
    assert_true(freed);
    fake_guest_join(guest);
    assert_null(guest->failure);
    fake_guest_join_free(guest);
    g_free(src);
}

/* An execution whose runner was not kept leaves the lease usable (the owner decides: a session
 * ends); one that ends without the guest's done (the channel lost) makes the lease lost. */
static void test_lease_lost(void **state)
{
    LeaseEvents ev = {0};
    gboolean freed = FALSE;
    FakeSource *src = lease_source(0, 1, &freed);
    FakeGuest *guest = src->guest;

    (void)state;
    SbxExecLease *lease = sbx_exec_lease_new(&src->base);

    sbx_exec_lease_start(lease, &lease_cb, &ev);
    wait_for(&ev.ready, 1, "the lease's start");
    assert_false(lease_run(lease, "1")); /* not kept */
    wait_for(&ev.returned, 1, "the give-back");
    /* the VM dies between executions: lost, from the loop */
    src->exit_func(&src->base, "QEMU killed by signal 9", src->exit_data);
    assert_int_equal(ev.lost, 0);
    wait_for(&ev.lost, 1, "the loss");
    assert_non_null(strstr(ev.lost_reason, "QEMU killed by signal 9"));
    assert_false(sbx_exec_lease_usable(lease));
    assert_null(sbx_exec_lease_session(lease));
    sbx_exec_lease_close(lease);
    assert_int_equal(src->releases, 1);
    sbx_exec_lease_close(lease); /* idempotent */
    assert_int_equal(src->releases, 1);
    sbx_exec_lease_unref(lease);
    assert_true(freed);
    fake_guest_join_free(guest);
    g_free(ev.lost_reason);
    g_free(src);
}

/* The acquire fails: ready says why; closing while acquiring cancels it. */
static void test_lease_acquire_fails(void **state)
{
    LeaseEvents ev = {0};
    gboolean freed = FALSE;
    FakeSource *src = lease_source(-1, 0, &freed);

    (void)state;
    src->fail = TRUE;
    SbxExecLease *lease = sbx_exec_lease_new(&src->base);

    sbx_exec_lease_start(lease, &lease_cb, &ev);
    wait_for(&ev.ready, 1, "the lease's start");
    assert_non_null(strstr(ev.error, "no QEMU here"));
    assert_false(sbx_exec_lease_usable(lease));
    sbx_exec_lease_unref(lease);
    assert_true(freed);
    g_free(ev.error);
    g_free(src);

    /* closed (its last reference dropped) while acquiring: no callback, freed once it returned */
    memset(&ev, 0, sizeof(ev));
    freed = FALSE;
    src = lease_source(-1, 1000, &freed);
    lease = sbx_exec_lease_new(&src->base);
    sbx_exec_lease_start(lease, &lease_cb, &ev);
    sbx_exec_lease_unref(lease);
    assert_int_equal(src->cancels, 1);
    assert_false(freed);
    for (int i = 0; i < 50 && !freed; i++) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
    assert_true(freed);
    assert_int_equal(ev.ready, 0);
    g_free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok),
        cmocka_unit_test(test_collect),
        cmocka_unit_test(test_collect_live),
        cmocka_unit_test(test_tool_call),
        cmocka_unit_test(test_acquire_fails),
        cmocka_unit_test(test_tools_fail_while_acquiring),
        cmocka_unit_test(test_abort_while_acquiring),
        cmocka_unit_test(test_abort_while_running),
        cmocka_unit_test(test_vm_dies),
        cmocka_unit_test(test_channel_lost_vm_exits),
        cmocka_unit_test(test_channel_lost_vm_lives),
        cmocka_unit_test(test_abort_before_start),
        cmocka_unit_test(test_record_front_end_id),
        cmocka_unit_test(test_record_streamed),
        cmocka_unit_test(test_record_collected),
        cmocka_unit_test(test_call),
        cmocka_unit_test(test_no_call),
        cmocka_unit_test(test_record_over_cap),
        cmocka_unit_test(test_record_tool_call),
        cmocka_unit_test(test_record_failure),
        cmocka_unit_test(test_record_replay_inputs),
        cmocka_unit_test(test_record_aborts),
        cmocka_unit_test(test_record_store_fails),
        cmocka_unit_test(test_files_in_out),
        cmocka_unit_test(test_files_put_refused),
        cmocka_unit_test(test_files_read_refused),
        cmocka_unit_test(test_files_abort_collecting),
        cmocka_unit_test(test_lease_executions_in_turn),
        cmocka_unit_test(test_lease_lost),
        cmocka_unit_test(test_lease_acquire_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
