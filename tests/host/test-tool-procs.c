/*
 * How command tool processes start and how many run at once (tool-proc.h, tool-slots.h), with
 * tests/host/proc-tool.py as the tool: the environment is the allow-list plus the catalog's
 * `env_pass` and `env` (no SANDBOX_SECRET_*, no other variable of ours), the rlimits, and the
 * host-wide cap. main() sets SANDBOX_TOOL_PROCS=2 and a private XDG_RUNTIME_DIR before the first
 * call (the slots are configured once per process): 10 parallel calls never overlap more than
 * 2 and all complete, a queued call that is cancelled or times out never runs, slots held by
 * another process are waited for, the slot files are gone at the end, and a slots directory
 * others may use is refused.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool-proc.h"
#include "tool-slots.h"
#include "tools-error.h"
#include "tools.h"

#define CAP 2

static char *runtime_dir; /* the private XDG_RUNTIME_DIR: the slots directory goes under it */

typedef struct {
    char *dir;
    char *log;
} Fixture;

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);
    f->dir = g_dir_make_tmp("sbx-procs-XXXXXX", NULL);
    f->log = g_build_filename(f->dir, "log", NULL);
    *state = f;
    return f->dir != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    unlink(f->log);
    int r = rmdir(f->dir);
    g_free(f->log);
    g_free(f->dir);
    g_free(f);
    return r;
}

typedef struct {
    gboolean finished;
    char *result;
    GError *error;
    gint64 done_us;
} Outcome;

static void on_done(GObject *src, GAsyncResult *res, gpointer data)
{
    Outcome *o = data;
    (void)src;
    o->result = sbx_tools_call_finish(NULL, res, &o->error);
    o->finished = TRUE;
    o->done_us = g_get_monotonic_time();
}

static void outcome_clear(Outcome *o)
{
    g_free(o->result);
    g_clear_error(&o->error);
}

static void wait_all(Outcome *o, guint n, guint timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    guint done = 0;
    while (done < n && g_get_monotonic_time() < deadline) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
        done = 0;
        for (guint i = 0; i < n; i++) {
            done += o[i].finished;
        }
    }
    if (done < n) {
        fail_msg("%u of %u calls completed within %u ms", done, n, timeout_ms);
    }
}

/*
 * Waits are long: on a loaded 2-core machine a python3 behind a pyenv shim takes seconds to
 * start, and a call's timeout counts its time in the queue.
 */
#define CALL_TIMEOUT_MS 120000

/*
 * A catalog of proc-tool.py: provider "p" (@extra added to it; CALL_TIMEOUT_MS), "quick" (a
 * 300 ms timeout) and "sh" (the shell's ulimit).
 */
static SbxTools *load(Fixture *f, const char *extra)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *path = g_build_filename(f->dir, "tools.json", NULL);
    g_autofree char *json = g_strdup_printf(
        "{\"providers\": {"
        " \"p\": {\"kind\": \"command\", \"timeout_ms\": %d,"
        "  \"command\": [\"python3\", \"%s/proc-tool.py\"]%s,"
        "  \"tools\": {\"env\": {}, \"limits\": {}, \"stamp\": {}}},"
        " \"quick\": {\"kind\": \"command\", \"timeout_ms\": 300,"
        "  \"command\": [\"python3\", \"%s/proc-tool.py\"], \"tools\": {\"stamp\": {}}},"
        " \"sh\": {\"kind\": \"command\", \"command\": [\"/bin/sh\", \"-c\","
        "  \"printf '[\\\"%%s\\\",\\\"%%s\\\",\\\"%%s\\\",\\\"%%s\\\"]' $(ulimit -c) $(ulimit -Hc)"
        " $(ulimit -n) $(ulimit -Hn)\"], \"tools\": {\"ulimit\": {}}}"
        "}}",
        CALL_TIMEOUT_MS, SBX_TEST_DIR, extra != NULL ? extra : "", SBX_TEST_DIR);

    assert_true(g_file_set_contents(path, json, -1, &error));
    SbxTools *tools = sbx_tools_load(path, &error);
    unlink(path);
    if (tools == NULL) {
        fail_msg("sbx_tools_load: %s", error->message);
    }
    return tools;
}

static void call(SbxTools *tools, const char *provider, const char *tool, const char *input,
                 GCancellable *cancel, Outcome *o)
{
    memset(o, 0, sizeof(*o));
    sbx_tools_call_async(tools, provider, tool, input, cancel, on_done, o);
    assert_false(o->finished);
}

/* The result of one call, as a JSON object (parsed with GLib's variant-free helpers: a dict). */
static char *call_sync(SbxTools *tools, const char *provider, const char *tool)
{
    Outcome o;
    call(tools, provider, tool, "{}", NULL, &o);
    wait_all(&o, 1, CALL_TIMEOUT_MS);
    if (o.error != NULL) {
        fail_msg("%s.%s: %s", provider, tool, o.error->message);
    }
    char *r = g_steal_pointer(&o.result);
    outcome_clear(&o);
    return r;
}

/* Whether the JSON text @json holds "@name":"@value" (the tool prints json.dump's spacing). */
static gboolean has_var(const char *json, const char *name, const char *value)
{
    g_autofree char *want = g_strdup_printf("\"%s\":\"%s\"", name, value);
    return strstr(json, want) != NULL;
}

/* The value of "@name" in the JSON text @json, a string without escapes ("" if absent). */
static char *var(const char *json, const char *name)
{
    g_autofree char *key = g_strdup_printf("\"%s\":\"", name);
    const char *at = strstr(json, key);
    const char *end = at != NULL ? strchr(at + strlen(key), '"') : NULL;
    return end != NULL ? g_strndup(at + strlen(key), end - at - strlen(key)) : g_strdup("");
}

static gboolean has_name(const char *json, const char *name)
{
    g_autofree char *want = g_strdup_printf("\"%s\":", name);
    return strstr(json, want) != NULL;
}

/* ---- the environment ---------------------------------------------------------------------- */

static void test_env(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools =
        load(f, ", \"env\": {\"SBX_SET\": \"from env\", \"TZ\": \"Etc/UTC\"},"
                " \"env_pass\": [\"SBX_PASSED\", \"SBX_UNSET_ON_HOST\"]");
    g_autofree char *env = call_sync(tools, "p", "env");

    /* The test's own variables (main()): only the named one reaches the tool. */
    assert_false(has_name(env, "SANDBOX_SECRET_TOKEN"));
    assert_null(strstr(env, "hunter2"));
    assert_false(has_name(env, "SBX_RANDOM_PARENT_VAR"));
    assert_false(has_name(env, SBX_TOOL_PROCS_ENV));
    assert_false(has_name(env, "XDG_RUNTIME_DIR"));
    assert_true(has_var(env, "SBX_PASSED", "passed on"));
    assert_false(has_name(env, "SBX_UNSET_ON_HOST"));
    assert_true(has_var(env, "SBX_SET", "from env"));
    /* The allow-list: as on the host; `env` overrides it. */
    /* python3 may be a pyenv shim, which puts its own directory first. */
    g_autofree char *path = var(env, "PATH");
    assert_true(g_str_has_suffix(path, g_getenv("PATH")));
    assert_true(has_var(env, "HOME", g_getenv("HOME")));
    assert_true(has_var(env, "LC_PAPER", "C"));
    assert_true(has_var(env, "TZ", "Etc/UTC"));

    /* Without `env`/`env_pass`: the allow-list only. */
    g_autoptr(SbxTools) plain = load(f, NULL);
    g_autofree char *env2 = call_sync(plain, "p", "env");
    assert_false(has_name(env2, "SBX_PASSED"));
    assert_false(has_name(env2, "SANDBOX_SECRET_TOKEN"));
    assert_true(has_var(env2, "HOME", g_getenv("HOME")));
    assert_true(has_var(env2, "TZ", "UTC"));
}

static void test_env_allowed(void **state)
{
    (void)state;
    assert_true(sbx_tool_env_allowed("PATH"));
    assert_true(sbx_tool_env_allowed("LC_ALL"));
    assert_false(sbx_tool_env_allowed("LC_"));
    assert_false(sbx_tool_env_allowed("SANDBOX_SECRET_X"));
    assert_false(sbx_tool_env_allowed("SANDBOX_SECRETS_FILE"));
    assert_false(sbx_tool_env_allowed("http_proxy"));
    assert_false(sbx_tool_env_allowed("LD_PRELOAD"));
}

/* A catalog naming a secret in `env` or `env_pass` is refused, naming the field. */
static void test_env_catalog_errors(void **state)
{
    (void)state;
    static const struct {
        const char *provider;
        const char *message;
    } bad[] = {
        {"\"env_pass\": [\"SANDBOX_SECRET_TOKEN\"]",
         "t.json: providers.p.env_pass[0]: SANDBOX_SECRET_* variables hold the http provider's"},
        {"\"env\": {\"SANDBOX_SECRET_TOKEN\": \"x\"}",
         "t.json: providers.p.env.SANDBOX_SECRET_TOKEN: SANDBOX_SECRET_* variables"},
        {"\"env_pass\": [\"A\", \"A\"]", "providers.p.env_pass[1]: A is named twice"},
        {"\"env\": {\"A\": \"1\"}, \"env_pass\": [\"A\"]",
         "providers.p.env_pass[0]: A is also set in \"env\""},
        {"\"env_pass\": [\"A=B\"]", "providers.p.env_pass[0]: not a variable name"},
        {"\"env_pass\": [\"\"]", "providers.p.env_pass[0]: not a variable name"},
        {"\"env_pass\": [1]", "providers.p.env_pass[0]: expected a variable name"},
        {"\"env_pass\": \"HOME\"", "providers.p.env_pass: expected an array"},
        {"\"env\": {\"A\": 1}", "providers.p.env.A: expected a string"},
        {"\"env\": {\"A\": \"a\\nb\"}", "providers.p.env.A: expected a string"},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        for (int mcp = 0; mcp < 2; mcp++) {
            g_autoptr(GError) error = NULL;
            g_autofree char *json = g_strdup_printf(
                "{\"providers\": {\"p\": {\"kind\": \"%s\", \"command\": [\"x\"], %s%s}}}",
                mcp ? "mcp" : "command", bad[i].provider, mcp ? "" : ", \"tools\": {}");
            g_autoptr(SbxCatalog) cat =
                sbx_catalog_parse(json, strlen(json), "t.json", "/", &error);
            if (cat != NULL) {
                fail_msg("accepted: %s", json);
            }
            if (strstr(error->message, bad[i].message) == NULL) {
                fail_msg("for %s\n  got:      %s\n  expected: %s", json, error->message,
                         bad[i].message);
            }
        }
    }
    /* Not for an http server, nor an http provider. */
    const char *url = "{\"providers\": {\"p\": {\"kind\": \"mcp\", \"url\": \"http://a/\","
                      " \"env_pass\": [\"HOME\"]}}}";
    g_autoptr(GError) error = NULL;
    assert_null(sbx_catalog_parse(url, strlen(url), "t.json", "/", &error));
    assert_non_null(strstr(error->message, "\"env_pass\" are for a \"command\" server"));
    g_clear_error(&error);
    const char *http = "{\"providers\": {\"p\": {\"kind\": \"http\", \"env\": {}, \"tools\": {}}}}";
    assert_null(sbx_catalog_parse(http, strlen(http), "t.json", "/", &error));
    assert_non_null(strstr(error->message, "providers.p: unknown field \"env\""));
}

/* ---- rlimits -------------------------------------------------------------------------------- */

static void test_limits(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = load(f, NULL);
    struct rlimit own;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &own), 0);
    rlim_t hard = MIN(own.rlim_max, (rlim_t)SBX_TOOL_NOFILE_HARD);
    rlim_t soft = MIN(hard, (rlim_t)SBX_TOOL_NOFILE_SOFT);

    g_autofree char *limits = call_sync(tools, "p", "limits");
    g_autofree char *want = g_strdup_printf("{\"core\":[0,0],\"nofile\":[%lu,%lu]}",
                                            (unsigned long)soft, (unsigned long)hard);
    assert_string_equal(limits, want);
    /* The same through the shell's ulimit: -c -Hc -n -Hn. */
    g_autofree char *ulimit = call_sync(tools, "sh", "ulimit");
    g_autofree char *want_sh =
        g_strdup_printf("[\"0\",\"0\",\"%lu\",\"%lu\"]", (unsigned long)soft, (unsigned long)hard);
    assert_string_equal(ulimit, want_sh);
}

/* ---- the host-wide cap ---------------------------------------------------------------------- */

typedef struct {
    char what[8];
    int id;
    double t;
} Stamp;

/* The log's lines in order of time (each process appends its own two). */
static GArray *read_stamps(const char *log)
{
    g_autofree char *text = NULL;
    GArray *stamps = g_array_new(FALSE, TRUE, sizeof(Stamp));

    if (!g_file_get_contents(log, &text, NULL, NULL)) {
        return stamps;
    }
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l != NULL; l++) {
        Stamp s = {0};
        if (sscanf(*l, "%7s %d %lf", s.what, &s.id, &s.t) == 3) {
            g_array_append_val(stamps, s);
        }
    }
    return stamps;
}

/* The most calls running at once, from their start and end stamps. */
static int max_overlap(GArray *stamps)
{
    int most = 0;
    for (guint i = 0; i < stamps->len; i++) {
        const Stamp *a = &g_array_index(stamps, Stamp, i);
        if (strcmp(a->what, "start") != 0) {
            continue;
        }
        int running = 0; /* calls started by a->t and not ended before it */
        for (guint j = 0; j < stamps->len; j++) {
            const Stamp *b = &g_array_index(stamps, Stamp, j);
            running += strcmp(b->what, "start") == 0 && b->t <= a->t;
            running -= strcmp(b->what, "end") == 0 && b->t < a->t;
        }
        most = MAX(most, running);
    }
    return most;
}

static gboolean ran(GArray *stamps, int id)
{
    for (guint i = 0; i < stamps->len; i++) {
        if (g_array_index(stamps, Stamp, i).id == id) {
            return TRUE;
        }
    }
    return FALSE;
}

static gboolean slots_dir_gone(void)
{
    g_autofree char *dir = g_build_filename(runtime_dir, "sandbox-tool-slots", NULL);
    return !g_file_test(dir, G_FILE_TEST_EXISTS);
}

static void test_cap(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = load(f, NULL);
    Outcome o[10];

    assert_int_equal(sbx_tool_slots_cap(NULL), CAP);
    /* Each call sleeps 1 s: far longer than a Python tool's start on a loaded machine (0.3 s
     * was not: two calls of a slow start did not overlap, and "the cap is used" failed). */
    for (int i = 0; i < 10; i++) {
        g_autofree char *in = g_strdup_printf("{\"id\":%d,\"log\":\"%s\",\"s\":1}", i, f->log);
        call(tools, "p", "stamp", in, NULL, &o[i]);
    }
    assert_int_equal(sbx_tool_slots_waiting(), 10 - CAP); /* two started, the rest queued */
    wait_all(o, 10, CALL_TIMEOUT_MS);
    for (int i = 0; i < 10; i++) {
        g_autofree char *want = g_strdup_printf("{\"id\":%d}", i);
        if (o[i].error != NULL) {
            fail_msg("call %d: %s", i, o[i].error->message);
        }
        assert_string_equal(o[i].result, want);
        outcome_clear(&o[i]);
    }
    g_autoptr(GArray) stamps = read_stamps(f->log);
    assert_int_equal(stamps->len, 20);
    assert_int_equal(max_overlap(stamps), CAP); /* never more, and the cap is used */
    /* In order of the calls: the queue is first come, first served. */
    for (int i = 0; i < CAP; i++) {
        assert_true(g_array_index(stamps, Stamp, i).id < CAP);
    }
    assert_int_equal(sbx_tool_slots_waiting(), 0);
    assert_true(slots_dir_gone()); /* every slot file removed, then the directory */
}

/* Two long calls hold the slots; a third, queued, is cancelled (or times out) and never runs. */
static void hold_both(Fixture *f, SbxTools *tools, Outcome *holders)
{
    for (int i = 0; i < CAP; i++) {
        g_autofree char *in = g_strdup_printf("{\"id\":%d,\"log\":\"%s\",\"s\":1.5}", i, f->log);
        call(tools, "p", "stamp", in, NULL, &holders[i]);
    }
}

static void test_queued_cancelled(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = load(f, NULL);
    g_autoptr(GCancellable) cancel = g_cancellable_new();
    g_autofree char *in = g_strdup_printf("{\"id\":99,\"log\":\"%s\",\"s\":0}", f->log);
    Outcome holders[CAP], q;

    hold_both(f, tools, holders);
    call(tools, "p", "stamp", in, cancel, &q);
    assert_int_equal(sbx_tool_slots_waiting(), 1);
    for (int i = 0; i < 50; i++) { /* a while in the queue */
        g_main_context_iteration(NULL, FALSE);
        g_usleep(2000);
    }
    assert_false(q.finished);
    g_cancellable_cancel(cancel);
    assert_int_equal(sbx_tool_slots_waiting(), 0);
    wait_all(&q, 1, 1000); /* at once, not when a slot frees */
    assert_false(holders[0].finished || holders[1].finished);
    assert_true(g_error_matches(q.error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    wait_all(holders, CAP, CALL_TIMEOUT_MS);
    assert_int_equal(sbx_tools_in_flight(tools), 0);
    g_autoptr(GArray) stamps = read_stamps(f->log);
    assert_false(ran(stamps, 99));
    assert_int_equal(stamps->len, 2 * CAP);
    outcome_clear(&q);
    outcome_clear(&holders[0]);
    outcome_clear(&holders[1]);
    assert_true(slots_dir_gone());
}

static void test_queued_timeout(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = load(f, NULL);
    g_autofree char *in = g_strdup_printf("{\"id\":99,\"log\":\"%s\",\"s\":0}", f->log);
    Outcome holders[CAP], q;

    hold_both(f, tools, holders);
    gint64 t0 = g_get_monotonic_time();
    call(tools, "quick", "stamp", in, NULL, &q); /* timeout_ms 300 */
    wait_all(&q, 1, 5000);
    assert_true(q.done_us - t0 >= 300 * 1000);
    assert_false(holders[0].finished || holders[1].finished);
    assert_non_null(q.error);
    assert_int_equal(q.error->code, SBX_ERR_TOOL);
    if (strstr(q.error->message, "timed out after 300 ms waiting to start: the host's 2 tool "
                                 "process slots (SANDBOX_TOOL_PROCS) stayed taken") == NULL) {
        fail_msg("unexpected: %s", q.error->message);
    }
    wait_all(holders, CAP, CALL_TIMEOUT_MS);
    g_autoptr(GArray) stamps = read_stamps(f->log);
    assert_false(ran(stamps, 99));
    outcome_clear(&q);
    outcome_clear(&holders[0]);
    outcome_clear(&holders[1]);
    assert_true(slots_dir_gone());
}

/*
 * Slots held by another process (a python3 that takes both lock files as sandbox does, holds
 * them 1 s, then removes them and exits): a call waits for them, then runs.
 */
static void test_other_process(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = load(f, NULL);
    g_autofree char *dir = g_build_filename(runtime_dir, "sandbox-tool-slots", NULL);
    g_autofree char *ready = g_build_filename(f->dir, "ready", NULL);
    g_autofree char *in = g_strdup_printf("{\"id\":7,\"log\":\"%s\",\"s\":0}", f->log);
    g_autofree char *script =
        g_strdup_printf("import fcntl, os, time\n"
                        "os.makedirs('%s', mode=0o700, exist_ok=True)\n"
                        "fs = [open('%s/slot-%%d' %% i, 'w') for i in range(%d)]\n"
                        "for f in fs: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                        "open('%s', 'w').close()\n"
                        "time.sleep(1)\n"
                        "for i in range(%d): os.unlink('%s/slot-%%d' %% i)\n",
                        dir, dir, CAP, ready, CAP, dir);
    const char *argv[] = {"python3", "-c", script, NULL};
    g_autoptr(GError) error = NULL;
    GPid pid;
    Outcome o;

    assert_true(g_spawn_async(NULL, (char **)argv, NULL,
                              G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid,
                              &error));
    for (int i = 0; i < 6000 && !g_file_test(ready, G_FILE_TEST_EXISTS); i++) {
        g_usleep(10000);
    }
    assert_true(g_file_test(ready, G_FILE_TEST_EXISTS));
    gint64 t0 = g_get_monotonic_time();
    call(tools, "p", "stamp", in, NULL, &o);
    assert_int_equal(sbx_tool_slots_waiting(), 1);
    wait_all(&o, 1, CALL_TIMEOUT_MS);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_null(o.error);
    assert_string_equal(o.result, "{\"id\":7}");
    assert_true(o.done_us - t0 >= 500 * 1000); /* it waited for the other process */
    outcome_clear(&o);
    unlink(ready);
    assert_true(slots_dir_gone());
}

/* A slots directory others may use (in /tmp another user could have made it) is refused. */
static void test_dir_refused(void **state)
{
    Fixture *f = *state;
    g_autoptr(SbxTools) tools = load(f, NULL);
    g_autofree char *dir = g_build_filename(runtime_dir, "sandbox-tool-slots", NULL);
    Outcome o;

    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0755), 0);
    call(tools, "p", "env", "{}", NULL, &o);
    wait_all(&o, 1, CALL_TIMEOUT_MS);
    assert_non_null(o.error);
    assert_int_equal(o.error->code, SBX_ERR_TOOL);
    if (strstr(o.error->message, "cannot start provider \"p\": refusing the tool process slots "
                                 "directory") == NULL) {
        fail_msg("unexpected: %s", o.error->message);
    }
    outcome_clear(&o);
    assert_int_equal(rmdir(dir), 0);
}

/* A bad SANDBOX_TOOL_PROCS is refused when the providers are built: checked in a child. */
static void test_bad_cap(void **state)
{
    (void)state;
    g_autofree char *out = NULL;
    g_autofree char *exe = g_file_read_link("/proc/self/exe", NULL);
    const char *argv[] = {exe, "--bad-cap", NULL};
    const char *envp[] = {"SANDBOX_TOOL_PROCS=0", NULL};
    int status = -1;

    assert_true(g_spawn_sync(NULL, (char **)argv, (char **)envp, G_SPAWN_DEFAULT, NULL, NULL, &out,
                             NULL, &status, NULL));
    assert_true(g_spawn_check_wait_status(status, NULL));
    assert_string_equal(out, "SANDBOX_TOOL_PROCS: expected an integer from 1 to 1024, not \"0\"\n");
}

/* The child of test_bad_cap: build a command provider, print the error. */
static int bad_cap_child(void)
{
    const char *json =
        "{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"x\"], \"tools\": {}}}}";
    g_autoptr(GError) error = NULL;
    SbxCatalog *cat = sbx_catalog_parse(json, strlen(json), "t.json", "/", &error);
    g_autoptr(SbxTools) tools = sbx_tools_new(cat, &error);
    printf("%s\n", tools == NULL ? error->message : "accepted");
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_allowed),
        cmocka_unit_test(test_env_catalog_errors),
        cmocka_unit_test_setup_teardown(test_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queued_cancelled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queued_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_process, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_refused, setup, teardown),
        cmocka_unit_test(test_bad_cap),
    };
    if (argc > 1 && strcmp(argv[1], "--bad-cap") == 0) {
        return bad_cap_child();
    }
    signal(SIGPIPE, SIG_IGN);
    runtime_dir = g_dir_make_tmp("sbx-procs-run-XXXXXX", NULL);
    g_assert(runtime_dir != NULL);
    /* Before the first call: the slots read these once. */
    g_setenv(SBX_TOOL_PROCS_ENV, G_STRINGIFY(CAP), TRUE);
    g_setenv("XDG_RUNTIME_DIR", runtime_dir, TRUE);
    /* What must not reach a tool, and what may. */
    g_setenv("SANDBOX_SECRET_TOKEN", "hunter2", TRUE);
    g_setenv("SBX_RANDOM_PARENT_VAR", "x", TRUE);
    g_setenv("SBX_PASSED", "passed on", TRUE);
    g_unsetenv("SBX_UNSET_ON_HOST");
    g_setenv("LC_PAPER", "C", TRUE);
    g_setenv("TZ", "UTC", TRUE);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (rmdir(runtime_dir) < 0) {
        fprintf(stderr, "left behind in %s\n", runtime_dir);
        failed++;
    }
    g_free(runtime_dir);
    return failed;
}
