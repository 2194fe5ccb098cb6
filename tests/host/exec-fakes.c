/*
 * Fakes the execution core's tests share (exec-fakes.h): a VM source whose guest is a fake
 * guest thread, a sink that records what it hears, and a temporary store.
 */
#include "exec-fakes.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

/* ---- the fake source ---------------------------------------------------------------------- */

static gboolean acquired(gpointer data)
{
    FakeSource *s = data;
    g_autoptr(GError) error = NULL;

    s->timer = 0;
    s->acquiring = FALSE;
    if (s->fail || s->cancels > 0) {
        error = g_error_new_literal(G_IO_ERROR, G_IO_ERROR_FAILED,
                                    s->fail ? "cannot start the VM: no QEMU here" : "cancelled");
    }
    s->done(&s->base, error, s->data);
    return G_SOURCE_REMOVE;
}

static void fake_acquire(SbxExecSource *src, SbxExecAcquiredFunc done, gpointer data)
{
    FakeSource *s = (FakeSource *)src;

    s->done = done;
    s->data = data;
    s->acquiring = TRUE;
    s->timer = g_timeout_add(s->delay_ms, acquired, s);
}

static void fake_cancel(SbxExecSource *src)
{
    FakeSource *s = (FakeSource *)src;

    if (s->acquiring) {
        s->cancels++;
        g_source_remove(s->timer);
        s->timer = g_idle_add(acquired, s); /* the done still comes, from the loop */
    }
}

static SbxVm *fake_vm(SbxExecSource *src)
{
    (void)src;
    return NULL;
}

static void fake_watch(SbxExecSource *src, SbxExecVmExitFunc func, gpointer data)
{
    FakeSource *s = (FakeSource *)src;

    s->exit_func = func;
    s->exit_data = data;
}

static void fake_begin(SbxExecSource *src)
{
    ((FakeSource *)src)->begun = TRUE;
}

static SbxSession *fake_take_session(SbxExecSource *src, GError **error)
{
    static const SbxSessionCallbacks none = {0};
    FakeSource *s = (FakeSource *)src;
    int fd = s->fd;

    s->fd = -1;
    return sbx_session_new(fd, &none, NULL, error);
}

static void fake_describe(SbxExecSource *src, GString *out)
{
    (void)src;
    g_string_append(out, ",\"fake\":true");
}

static gint64 fake_boot_us(SbxExecSource *src)
{
    (void)src;
    return 7000;
}

static void fake_release(SbxExecSource *src)
{
    ((FakeSource *)src)->releases++;
}

static void fake_free(SbxExecSource *src)
{
    FakeSource *s = (FakeSource *)src;

    g_assert(s->timer == 0); /* the core frees a source only once its acquire returned */
    if (s->fd >= 0) {
        close(s->fd);
    }
    *s->freed = TRUE;
}

const SbxExecSourceOps fake_ops = {
    .acquire = fake_acquire,
    .cancel = fake_cancel,
    .vm = fake_vm,
    .watch = fake_watch,
    .begin = fake_begin,
    .take_session = fake_take_session,
    .describe = fake_describe,
    .boot_us = fake_boot_us,
    .release = fake_release,
    .free = fake_free,
};

/* ---- the recording sink ------------------------------------------------------------------- */

static void on_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    Run *run = data;

    g_string_append_len(run->out[stream], (const char *)bytes, len);
}

static void on_warnings(gpointer data, const char *const *warnings)
{
    Run *run = data;

    run->warnings += g_strv_length((char **)warnings);
}

static void on_done(gpointer data, SbxExec *exec)
{
    Run *run = data;

    run->done++;
    run->tools_in_flight_at_done = sbx_tools_in_flight(sbx_exec_tools(exec));
}

const SbxExecSink run_sink = {.output = on_output, .warnings = on_warnings, .done = on_done};
/* A sink that shows collected output live (sandbox mcp's progress). */
static const SbxExecSink live_sink = {
    .collected_output = on_output, .warnings = on_warnings, .done = on_done};
gboolean use_live_sink;

/*
 * An execution of @code on the fake source with @script as its guest (NULL: none, the acquire
 * never gets that far), with @tools (NULL: an empty catalog).
 */
Run *run_new(FakeGuestScript script, SbxTools *tools, const SbxExecRequest *req)
{
    Run *run = g_new0(Run, 1);
    SbxExecRequest dflt = {.language = SBX_LANG_JAVASCRIPT, .code = "1", .timeout_ms = 10000};

    run->src.base.ops = &fake_ops;
    run->src.base.start = "fake";
    run->src.fd = -1;
    run->src.delay_ms = 10;
    run->src.freed = &run->src_freed;
    if (script != NULL) {
        run->src.guest = fake_guest_start(script, NULL, &run->src.fd);
    }
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        run->out[i] = g_string_new(NULL);
    }
    if (tools == NULL) {
        tools = sbx_tools_new(sbx_catalog_new_empty(), NULL);
    }
    run->exec = sbx_exec_new(req != NULL ? req : &dflt, tools, &run->src.base,
                             use_live_sink ? &live_sink : &run_sink, run);
    return run;
}

/*
 * After the done, the VM is released once the loop has nothing else ready (what a front end
 * writes from the loop goes out first): not in the iteration of the done, within 5 s.
 */
void wait_released(Run *run)
{
    gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;

    assert_int_equal(run->src.releases, 0);
    while (run->src.releases == 0) {
        if (g_get_monotonic_time() > deadline) {
            fail_msg("the VM was not released within 5 s of the done");
        }
        g_main_context_iteration(NULL, FALSE);
    }
    assert_int_equal(run->src.releases, 1);
}

/* Run the loop until the sink's done (fails the test after @timeout_ms). */
void run_wait_done(Run *run, guint timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + timeout_ms * 1000ll;

    while (run->done == 0) {
        if (g_get_monotonic_time() > deadline) {
            fail_msg("the execution did not end within %u ms", timeout_ms);
        }
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
}

/* The report, parsed enough for the test: its text. */
char *report(Run *run)
{
    return sbx_exec_report_json(run->exec, ",\"extra\":1");
}

void run_free(Run *run)
{
    FakeGuest *guest = run->src.guest;

    sbx_exec_free(run->exec);
    assert_true(run->src_freed);
    if (guest != NULL) {
        fake_guest_join_free(guest);
    }
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        g_string_free(run->out[i], TRUE);
    }
    g_free(run);
}

/* ---- records ------------------------------------------------------------------------------ */

TmpStore *tmp_store_new(void)
{
    g_autoptr(GError) error = NULL;
    TmpStore *t = g_new0(TmpStore, 1);

    t->dir = g_dir_make_tmp("test-exec-db-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(t->dir, "sandbox.db", NULL);
    t->store = sbx_store_open(path, &error);
    if (t->store == NULL) {
        fail_msg("sbx_store_open: %s", error->message);
    }
    return t;
}

void tmp_store_free(TmpStore *t)
{
    static const char *const files[] = {"sandbox.db", "sandbox.db-wal", "sandbox.db-shm",
                                        "sandbox.db.lock"};

    sbx_store_close(t->store);
    for (gsize i = 0; i < G_N_ELEMENTS(files); i++) {
        g_autofree char *path = g_build_filename(t->dir, files[i], NULL);
        unlink(path);
    }
    assert_int_equal(g_rmdir(t->dir), 0);
    g_free(t->dir);
    g_free(t);
}

const SbxExecRecordInfo record_info = {
    .front_end = "run",
    .profile = "q35-serial",
    .snapshot_key = "snapkey",
    .image_id = "img-1",
};

/* The record of @run (read back from @t), with its tool calls and approvals. */
SbxRecord *record_of(TmpStore *t, Run *run, GPtrArray **ret_calls, GPtrArray **ret_appr)
{
    g_autoptr(GError) error = NULL;
    SbxRecord *r = NULL;
    GPtrArray *calls = NULL, *approvals = NULL;

    assert_null(sbx_exec_record_error(run->exec));
    if (!sbx_records_get(t->store, NULL, sbx_exec_id(run->exec), &r, &error) ||
        !sbx_records_get_calls(t->store, NULL, sbx_exec_id(run->exec), &calls, &approvals,
                               &error)) {
        fail_msg("the record: %s", error->message);
    }
    if (ret_calls != NULL) {
        *ret_calls = calls;
    } else {
        g_ptr_array_unref(calls);
    }
    if (ret_appr != NULL) {
        *ret_appr = approvals;
    } else {
        g_ptr_array_unref(approvals);
    }
    return r;
}
