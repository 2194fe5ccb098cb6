/*
 * Test harness for the session (see harness.h).
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness.h"

#include <string.h>
#include <unistd.h>

#include "tools-error.h"

static void on_output(SbxSession *s, SbxStream stream, const guint8 *data, gsize len,
                      gpointer user_data)
{
    Harness *h = user_data;
    (void)s;
    g_string_append_len(h->streamed[stream], (const char *)data, len);
}

typedef struct {
    Harness *h;
    guint32 call_id;
} Call;

static void on_tool_done(GObject *src, GAsyncResult *res, gpointer data)
{
    Call *c = data;
    g_autoptr(GError) error = NULL;
    (void)src;

    g_autofree char *result = sbx_tools_call_finish(c->h->tools, res, &error);
    if (c->h->session == NULL) {
        /* the test closed the session first */
    } else if (result != NULL) {
        sbx_session_tool_result(c->h->session, c->call_id, result, NULL);
    } else {
        SbxError e = {.code = error->domain == SBX_TOOL_ERROR ? (SbxErrorCode)error->code
                                                              : SBX_ERR_INTERNAL,
                      .message = error->message};
        sbx_session_tool_result(c->h->session, c->call_id, NULL, &e);
    }
    g_free(c);
}

static void on_tool_call(SbxSession *s, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json, gpointer user_data)
{
    Harness *h = user_data;
    (void)s;

    if (h->answer_nothing || h->tools == NULL) {
        g_ptr_array_add(h->held_calls, GUINT_TO_POINTER(call_id));
        return;
    }
    Call *c = g_new0(Call, 1);
    c->h = h;
    c->call_id = call_id;
    sbx_tools_call_async(h->tools, provider, tool, input_json, h->cancel, on_tool_done, c);
}

static void on_done(SbxSession *s, const SbxRunResult *result, gpointer user_data)
{
    Harness *h = user_data;
    (void)s;
    h->done_count++;
    h->result = result;
}

static void on_broken(SbxSession *s, const char *reason, gpointer user_data)
{
    Harness *h = user_data;
    (void)s;
    h->broken_count++;
    g_free(h->broken_reason);
    h->broken_reason = g_strdup(reason);
}

Harness *harness_new(SbxTools *tools)
{
    Harness *h = g_new0(Harness, 1);
    h->tools = tools;
    h->cancel = g_cancellable_new();
    h->held_calls = g_ptr_array_new();
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        h->streamed[i] = g_string_new(NULL);
    }
    return h;
}

static const SbxSessionCallbacks harness_callbacks = {
    .on_output = on_output,
    .on_tool_call = on_tool_call,
    .on_done = on_done,
    .on_broken = on_broken,
};

gboolean harness_try_start_fd(Harness *h, int fd, const SbxRunRequest *req, GError **error)
{
    SbxRunRequest def = {
        .language = SBX_LANG_JAVASCRIPT,
        .code = "console.log('hi')",
        .timeout_ms = 10000,
        .collect_output = TRUE,
    };

    if (req == NULL) {
        req = &def;
    }
    if (h->tools != NULL && req->n_tools == 0) {
        def = *req;
        def.tools = sbx_tools_decls(h->tools, &def.n_tools);
        req = &def;
    }
    h->session = sbx_session_new(fd, &harness_callbacks, h, error);
    return h->session != NULL && sbx_session_run(h->session, req, error);
}

void harness_start_fd(Harness *h, int fd, const SbxRunRequest *req)
{
    g_autoptr(GError) error = NULL;

    if (!harness_try_start_fd(h, fd, req, &error)) {
        fail_msg("starting the session: %s", error->message);
    }
}

void harness_start(Harness *h, FakeGuestScript script, gpointer data, const SbxRunRequest *req)
{
    int fd = -1;

    h->guest = fake_guest_start(script, data, &fd);
    assert_non_null(h->guest);
    harness_start_fd(h, fd, req);
}

static gboolean wake(gpointer data)
{
    (void)data;
    return G_SOURCE_CONTINUE;
}

/* Iterate the default context until @pred or @timeout_ms; returns pred's last value. */
static gboolean spin_until(gboolean (*pred)(Harness *, int), Harness *h, int arg, guint timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    guint tick = g_timeout_add(20, wake, NULL);

    while (!pred(h, arg) && g_get_monotonic_time() < deadline) {
        g_main_context_iteration(NULL, TRUE);
    }
    g_source_remove(tick);
    return pred(h, arg);
}

static gboolean done_reached(Harness *h, int n)
{
    return h->done_count >= n;
}

static gboolean broken_reached(Harness *h, int n)
{
    return h->broken_count >= n;
}

static gboolean never(Harness *h, int n)
{
    (void)h;
    (void)n;
    return FALSE;
}

static gboolean tools_idle(Harness *h, int n)
{
    (void)n;
    return h->tools == NULL || sbx_tools_in_flight(h->tools) == 0;
}

void harness_wait_done(Harness *h, int n, guint timeout_ms)
{
    if (!spin_until(done_reached, h, n, timeout_ms)) {
        fail_msg("on_done not called %d time(s) within %u ms", n, timeout_ms);
    }
}

void harness_wait_broken(Harness *h, guint timeout_ms)
{
    if (!spin_until(broken_reached, h, 1, timeout_ms)) {
        fail_msg("on_broken not called within %u ms", timeout_ms);
    }
}

void harness_spin(guint ms)
{
    spin_until(never, NULL, 0, ms);
}

void harness_free(Harness *h, gboolean allow_guest_failure)
{
    g_cancellable_cancel(h->cancel);
    assert_true(spin_until(tools_idle, h, 0, 10000));
    sbx_session_free(h->session);
    if (h->guest != NULL) {
        if (!allow_guest_failure && h->guest->failure != NULL) {
            g_autofree char *f = g_strdup(h->guest->failure);
            fake_guest_join_free(h->guest);
            fail_msg("fake guest: %s", f);
        }
        fake_guest_join_free(h->guest);
    }
    sbx_tools_free(h->tools);
    g_object_unref(h->cancel);
    g_ptr_array_unref(h->held_calls);
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        g_string_free(h->streamed[i], TRUE);
    }
    g_free(h->broken_reason);
    g_free(h);
}

SbxTools *harness_fake_tools(const char *dir, guint timeout_ms, const char *extra_args)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *path = g_build_filename(dir, "tools.json", NULL);
    g_autofree char *json = g_strdup_printf(
        "{\"providers\": {"
        " \"fake\": {\"kind\": \"command\", \"timeout_ms\": %u,"
        "  \"command\": [\"python3\", \"%s/fake-tool.py\"%s],"
        "  \"tools\": {\"echo\": {\"description\": \"Echo\"}, \"fail\": {}, \"garbage\": {},"
        "   \"flood\": {}, \"slow\": {}, \"sleep\": {}, \"do.it\": {}}},"
        " \"my-tools\": {\"kind\": \"command\","
        "  \"command\": [\"python3\", \"%s/fake-tool.py\"%s],"
        "  \"tools\": {\"echo\": {}, \"do.it\": {}}}"
        "}}",
        timeout_ms, SBX_TEST_DIR, extra_args != NULL ? extra_args : "", SBX_TEST_DIR,
        extra_args != NULL ? extra_args : "");

    assert_true(g_file_set_contents(path, json, -1, &error));
    SbxTools *tools = sbx_tools_load(path, &error);
    if (tools == NULL) {
        fail_msg("sbx_tools_load: %s", error->message);
    }
    unlink(path);
    return tools;
}

const char *harness_error(const Harness *h)
{
    return h->result != NULL && h->result->has_error ? h->result->error.message : "";
}
