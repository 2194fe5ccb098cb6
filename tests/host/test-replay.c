/*
 * Replay (host-agent/replay/, tools/tools-replay.c) against the execution core on the fake
 * source (exec-fakes.h): an execution recorded with a real command tool, then replayed from its
 * record: the execute carries the record's seed and clock log, the tool call is answered from
 * the record without the provider, and the verdict is identical; a replay whose guest sends
 * another input, or whose record was changed, or whose live tool answers otherwise, diverges
 * with the first difference named; a call the original never got an answer to waits; a record
 * the guest called not replayable is refused with its reason.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <string.h>

#include <glib/gstdio.h>

#include "exec-fakes.h"
#include "replay/replay.h"
#include "store/store-private.h"

/* ---- guests ------------------------------------------------------------------------------- */

/*
 * One tool call of fake.echo with the input in g->data (default {"x":1}), its answer printed
 * (the result, or the error's code), then a done with a clock log and replayable.
 */
static void guest_echoes(FakeGuest *g)
{
    const char *input = g->data != NULL ? g->data : "{\"x\":1}";
    SbxMsg msg;

    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_tool_call(g, 1, "fake", "echo", input) < 0 || fake_guest_recv(g, &msg) < 0) {
        return;
    }
    g_autofree char *text =
        msg.type != SBX_MSG_TOOL_RESULT ? g_strdup("not a tool_result\n")
        : msg.tool_result.ok
            ? g_strdup_printf("%s\n", msg.tool_result.result_json)
            : g_strdup_printf("error %s\n", sbx_error_code_name(msg.tool_result.error.code));
    sbx_msg_clear(&msg);
    fake_guest_output(g, SBX_STREAM_STDOUT, text);
    g_autofree char *done = g_strdup_printf(
        "{\"type\":\"done\",\"id\":\"%s\",\"status\":\"ok\",\"exit_code\":0,\"duration_ms\":1,"
        "\"output_truncated\":false,\"clock_log\":[7,1800000000000123],\"replayable\":true}",
        g->execute.execute.id);
    fake_guest_send_json(g, done);
}

/* A tool call that the host never answers before the guest's done. */
static void guest_leaves_call(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0 ||
        fake_guest_tool_call(g, 1, "fake", "slow", "{\"s\":5}") < 0) {
        return;
    }
    g_autofree char *done = g_strdup_printf(
        "{\"type\":\"done\",\"id\":\"%s\",\"status\":\"ok\",\"exit_code\":0,\"duration_ms\":1,"
        "\"output_truncated\":false,\"clock_log\":[],\"replayable\":true}",
        g->execute.execute.id);
    fake_guest_send_json(g, done);
}

/* A guest that says its run cannot be replayed. */
static void guest_threads(FakeGuest *g)
{
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    g_autofree char *done = g_strdup_printf(
        "{\"type\":\"done\",\"id\":\"%s\",\"status\":\"ok\",\"exit_code\":0,\"duration_ms\":1,"
        "\"output_truncated\":false,\"clock_log\":[],\"replayable\":false,"
        "\"not_replayable\":\"a thread was started\"}",
        g->execute.execute.id);
    fake_guest_send_json(g, done);
}

/* ---- helpers ------------------------------------------------------------------------------ */

typedef struct {
    TmpStore *store;
    char *dir; /* where the fake tool's catalog is written */
    char *id;  /* the recorded execution */
} Fixture;

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);

    f->store = tmp_store_new();
    f->dir = g_dir_make_tmp("test-replay-XXXXXX", NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    Fixture *f = *state;

    tmp_store_free(f->store);
    assert_int_equal(g_rmdir(f->dir), 0); /* the catalog goes once loaded (harness.c) */
    g_free(f->dir);
    g_free(f->id);
    g_free(f);
    return 0;
}

/* Record an execution of @script with the fake tool into the fixture's store. */
static void record(Fixture *f, FakeGuestScript script)
{
    Run *run = run_new(script, harness_fake_tools(f->dir, 10000, NULL), NULL);

    sbx_exec_set_record(run->exec, f->store->store, &record_info);
    sbx_exec_start(run->exec);
    run_wait_done(run, 20000);
    f->id = g_strdup(sbx_exec_id(run->exec));
    run_free(run);
}

/* Replay the fixture's record on the fake source with @script (its data: @data); @live: the
 * fake tool's live tools instead of the record's answers. The differences. */
static GPtrArray *replay(Fixture *f, FakeGuestScript script, const char *data, gboolean live,
                         SbxExecute *ret_execute)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) chain = NULL;

    if (!sbx_replay_load_chain(f->store->store, NULL, f->id, &chain, &error)) {
        fail_msg("load: %s", error->message);
    }
    assert_int_equal(chain->len, 1);
    SbxReplay *r = chain->pdata[0];
    SbxTools *tools =
        sbx_replay_tools(r, live ? harness_fake_tools(f->dir, 10000, NULL) : NULL, &error);
    assert_non_null(tools);
    SbxExecRequest req;
    sbx_replay_request(r, &req);
    Run *run = run_new(NULL, tools, &req);
    run->src.guest = fake_guest_start(script, (gpointer)data, &run->src.fd);
    sbx_exec_start(run->exec);
    run_wait_done(run, 20000);
    fake_guest_join(run->src.guest);
    if (ret_execute != NULL) {
        const SbxExecute *x = &run->src.guest->execute.execute;
        ret_execute->seed = x->seed != NULL ? g_memdup2(x->seed, SBX_SEED_BYTES) : NULL;
        ret_execute->n_clock_log = x->n_clock_log;
        ret_execute->clock_log = g_memdup2(x->clock_log, MAX(x->n_clock_log, 1) * 8);
    }
    assert_int_equal(sbx_tools_in_flight(sbx_exec_tools(run->exec)), 0);
    GPtrArray *diffs = sbx_replay_compare(r, run->exec);
    run_free(run);
    return diffs;
}

static const SbxReplayDiff *first(const GPtrArray *diffs)
{
    assert_true(diffs->len > 0);
    return diffs->pdata[0];
}

/* ---- tests -------------------------------------------------------------------------------- */

/* Same guest, same record: identical, with the record's seed and clock log in the execute
 * (that the answer is the record's, not a provider's: test_changed_record). */
static void test_identical(void **state)
{
    Fixture *f = *state;
    SbxExecute x = {0};
    g_autoptr(SbxRecord) rec = NULL;
    g_autoptr(GError) error = NULL;

    record(f, guest_echoes);
    assert_true(sbx_records_get(f->store->store, NULL, f->id, &rec, &error));
    assert_true(rec->replayable);
    assert_non_null(strstr(rec->tools_json, "\"provider\":\"fake\""));
    g_autoptr(GPtrArray) diffs = replay(f, guest_echoes, NULL, FALSE, &x);
    assert_int_equal(diffs->len, 0);
    assert_non_null(x.seed);
    GString *s = g_string_new(NULL);
    for (int i = 0; i < SBX_SEED_BYTES; i++) {
        g_string_append_printf(s, "%02x", x.seed[i]);
    }
    assert_string_equal(s->str, rec->seed_hex);
    g_string_free(s, TRUE);
    assert_int_equal(x.n_clock_log, 2);
    assert_true(x.clock_log[0] == 7 && x.clock_log[1] == 1800000000000123ull);
    g_free(x.clock_log);
    g_free(x.seed);
}

/* Another input: the call is answered with replay_divergence, and named first. */
static void test_other_input(void **state)
{
    Fixture *f = *state;

    record(f, guest_echoes);
    g_autoptr(GPtrArray) diffs = replay(f, guest_echoes, "{\"x\":2}", FALSE, NULL);
    const SbxReplayDiff *d = first(diffs);
    assert_string_equal(d->what, "tool call input");
    assert_string_equal(d->where, "call 1 (fake.echo)");
    assert_string_equal(d->recorded, "{\"x\":1}");
    assert_string_equal(d->replayed, "{\"x\":2}");
    /* the program printed the error it got: stdout differs too */
    assert_true(diffs->len >= 2);
    const SbxReplayDiff *out = diffs->pdata[1];
    assert_string_equal(out->what, "stdout");
    assert_non_null(strstr(out->replayed, "error replay_divergence"));
    g_autofree char *text = sbx_replay_diff_text(d);
    assert_string_equal(text, "tool call input at call 1 (fake.echo): recorded {\"x\":1}, "
                              "replayed {\"x\":2}");
}

/* A record whose tool result was changed: the replay's output shows it, at its byte. */
static void test_changed_record(void **state)
{
    Fixture *f = *state;
    char *err = NULL;

    record(f, guest_echoes);
    g_autofree char *sql = g_strdup_printf(
        "UPDATE tool_calls SET result_json = '{\"tool\":\"echo\",\"input\":{\"x\":3}}' "
        "WHERE execution_id = '%s'",
        f->id);
    assert_int_equal(sqlite3_exec(f->store->store->db, sql, NULL, NULL, &err), SQLITE_OK);
    g_autoptr(GPtrArray) diffs = replay(f, guest_echoes, NULL, FALSE, NULL);
    assert_int_equal(diffs->len, 1);
    const SbxReplayDiff *d = first(diffs);
    assert_string_equal(d->what, "stdout");
    assert_string_equal(d->where, "byte 28 (line 1)");
    assert_non_null(strstr(d->recorded, "1}}"));
    assert_non_null(strstr(d->replayed, "3}}"));
}

/* --live: the tool is called again; its answer is compared (here the same, so identical). */
static void test_live(void **state)
{
    Fixture *f = *state;
    char *err = NULL;

    record(f, guest_echoes);
    g_autoptr(GPtrArray) same = replay(f, guest_echoes, NULL, TRUE, NULL);
    assert_int_equal(same->len, 0);
    /* the record says the tool answered otherwise: a live replay shows what changed */
    g_autofree char *sql = g_strdup_printf(
        "UPDATE tool_calls SET result_json = '{\"was\":1}' WHERE execution_id = '%s'", f->id);
    assert_int_equal(sqlite3_exec(f->store->store->db, sql, NULL, NULL, &err), SQLITE_OK);
    g_autoptr(GPtrArray) diffs = replay(f, guest_echoes, NULL, TRUE, NULL);
    const SbxReplayDiff *d = first(diffs);
    assert_string_equal(d->what, "tool result");
    assert_string_equal(d->recorded, "{\"was\":1}");
    assert_non_null(strstr(d->replayed, "\"tool\":\"echo\""));
}

/* A call the original never got an answer to waits in the replay until the execution ends. */
static void test_unanswered_waits(void **state)
{
    Fixture *f = *state;

    record(f, guest_leaves_call);
    g_autoptr(GPtrArray) diffs = replay(f, guest_leaves_call, NULL, FALSE, NULL);
    assert_int_equal(diffs->len, 0);
}

/* The guest's word: not replayable, with its reason, before anything starts. */
static void test_not_replayable(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    GPtrArray *chain = NULL;

    record(f, guest_threads);
    assert_false(sbx_replay_load_chain(f->store->store, NULL, f->id, &chain, &error));
    assert_true(g_error_matches(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_NOT_REPLAYABLE));
    assert_non_null(strstr(error->message, "a thread was started"));
    assert_null(chain);
}

/* Another tenant's record is no record at all. */
static void test_other_tenant(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    GPtrArray *chain = NULL;

    record(f, guest_echoes);
    assert_false(sbx_replay_load_chain(f->store->store, "t-other", f->id, &chain, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_identical, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_input, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changed_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_live, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unanswered_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_replayable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_tenant, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
