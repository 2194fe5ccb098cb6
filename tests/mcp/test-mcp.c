/*
 * The MCP client against tests/mcp/fake-mcp-server.py, a scripted stdio server (cmocka): the
 * catalog's mcp kind, discovery (pagination, protocol version, a schema we cannot compile, the
 * `tools` filter, destructiveHint), calls (structuredContent, isError, JSON-RPC errors, many in
 * flight), and a misbehaving server (bad JSON, a wrong id, an oversized line, its own requests,
 * a timeout with notifications/cancelled, a server that never answers, one that dies), and
 * streamable HTTP against tests/mcp/fake-mcp-http.py (session id, SSE, HTTP errors, DELETE).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcp-wire.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "tools-error.h"
#include "tools.h"

typedef struct {
    GMainLoop *loop;
    SbxTools *tools;
    GError *error;
    gboolean ready;
    guint pending;
    GPtrArray *results; /* char*: the result, or "ERR <code>: <message>" */
} Ctx;

static char *catalog_for(const char *mode, const char *extra)
{
    /*
     * `fail` is marked destructive, which the policy holds for an approval by default (no one
     * can approve here): a rule lets it run, so that its isError answer is what is tested.
     */
    return g_strdup_printf("{\"policy\": {\"rules\": [{\"match\": \"fake.fail\", "
                           "\"action\": \"allow\"}]}, "
                           "\"providers\": {\"fake\": {\"kind\": \"mcp\", \"command\": "
                           "[\"python3\", \"%s/fake-mcp-server.py\", \"%s\"]%s}}}",
                           SBX_TEST_DIR, mode, extra != NULL ? extra : "");
}

static void on_ready(SbxTools *tools, const GError *error, gpointer data)
{
    Ctx *c = data;
    (void)tools;
    c->ready = TRUE;
    c->error = error != NULL ? g_error_copy(error) : NULL;
    g_main_loop_quit(c->loop);
}

/* Start the fake server in @mode; TRUE if its tools were listed. */
static gboolean start(Ctx *c, const char *mode, const char *extra)
{
    g_autofree char *text = catalog_for(mode, extra);
    GError *error = NULL;
    SbxCatalog *cat = sbx_catalog_parse(text, strlen(text), "t.json", SBX_TEST_DIR, &error);

    assert_non_null(cat);
    c->loop = g_main_loop_new(NULL, FALSE);
    c->results = g_ptr_array_new_with_free_func(g_free);
    c->tools = sbx_tools_new(cat, &error);
    assert_non_null(c->tools);
    sbx_tools_start(c->tools, on_ready, c);
    g_main_loop_run(c->loop);
    return c->error == NULL;
}

static void stop(Ctx *c)
{
    sbx_tools_free(c->tools);
    g_main_loop_unref(c->loop);
    g_ptr_array_unref(c->results);
    g_clear_error(&c->error);
}

static void on_call(GObject *src, GAsyncResult *res, gpointer data)
{
    Ctx *c = data;
    GError *error = NULL;
    (void)src;

    char *r = sbx_tools_call_finish(c->tools, res, &error);
    g_ptr_array_add(c->results,
                    r != NULL ? r : g_strdup_printf("ERR %d: %s", error->code, error->message));
    g_clear_error(&error);
    if (--c->pending == 0) {
        g_main_loop_quit(c->loop);
    }
}

/* Call fake.@tool(@input) and wait: the result or "ERR code: message" (caller frees). */
static char *call(Ctx *c, const char *tool, const char *input)
{
    c->pending = 1;
    sbx_tools_call_async(c->tools, "fake", tool, input, NULL, on_call, c);
    g_main_loop_run(c->loop);
    return g_strdup(c->results->pdata[c->results->len - 1]);
}

static const SbxCatalogTool *find(Ctx *c, const char *name)
{
    const SbxCatalogProvider *p = &sbx_tools_catalog(c->tools)->providers[0];
    for (gsize i = 0; i < p->n_tools; i++) {
        if (strcmp(p->tools[i].name, name) == 0) {
            return &p->tools[i];
        }
    }
    return NULL;
}

static void test_discovery(void **state)
{
    (void)state;
    Ctx c = {0};
    gsize n = 0;

    assert_true(start(&c, "ok", NULL));
    sbx_tools_decls(c.tools, &n);
    assert_int_equal(n, 6); /* two pages: 2 + 4 */
    assert_non_null(find(&c, "echo")->input_schema);
    assert_non_null(find(&c, "echo")->output_schema);
    assert_string_equal(find(&c, "echo")->description, "Echo text.");
    assert_true(find(&c, "fail")->destructive);
    assert_false(find(&c, "echo")->destructive);
    /* A schema our validator refuses: the tool stays, unchecked, with a warning. */
    assert_null(find(&c, "remote")->input_schema);
    const char *const *w = sbx_tools_warnings(c.tools);
    assert_non_null(w[0]);
    assert_non_null(strstr(w[0], "fake.remote: inputSchema not checked"));
    stop(&c);
}

/* Nameless entries warn a few times, not once each; an invalid description stays in bounds. */
static void test_nameless(void **state)
{
    (void)state;
    Ctx c = {0};
    guint n = 0;

    assert_true(start(&c, "nameless", NULL));
    for (const char *const *w = sbx_tools_warnings(c.tools); *w != NULL; w++) {
        n++;
    }
    assert_in_range(n, 2, 12); /* 100 skipped entries */
    const char *desc = find(&c, "bin")->description;
    assert_true(strlen(desc) <= SBX_CATALOG_DESCRIPTION_MAX);
    assert_true(g_utf8_validate(desc, -1, NULL));
    stop(&c);
}

static void test_filter(void **state)
{
    (void)state;
    Ctx c = {0};
    gsize n = 0;

    assert_true(start(&c, "ok", ", \"tools\": [\"echo\", \"slow\", \"absent\"]"));
    sbx_tools_decls(c.tools, &n);
    assert_int_equal(n, 2);
    assert_null(find(&c, "fail"));
    gboolean warned = FALSE;
    for (const char *const *w = sbx_tools_warnings(c.tools); *w != NULL; w++) {
        warned = warned || strstr(*w, "fake: \"tools\" names absent") != NULL;
    }
    assert_true(warned);
    stop(&c);
}

static void test_calls(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "ok", NULL));
    g_autofree char *r1 = call(&c, "echo", "{\"text\":\"hi\"}");
    assert_string_equal(r1, "{\"echo\":\"hi\"}"); /* structuredContent */
    g_autofree char *r2 = call(&c, "fail", "{}");
    g_autofree char *want = g_strdup_printf("ERR %d: it failed on purpose", SBX_ERR_TOOL);
    assert_string_equal(r2, want);               /* isError: tool_error */
    g_autofree char *r3 = call(&c, "die", "{}"); /* not in this mode */
    assert_non_null(strstr(r3, "no such tool (-32602)"));
    g_autofree char *r4 = call(&c, "echo", "{\"text\":1}"); /* inputSchema */
    assert_non_null(strstr(r4, "input.text: expected a string"));
    g_autofree char *r5 = call(&c, "echo", "[1]");
    assert_non_null(strstr(r5, "ERR"));
    stop(&c);
}

static void test_many_in_flight(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "ok", NULL));
    c.pending = 50;
    for (int i = 0; i < 50; i++) {
        g_autofree char *in = g_strdup_printf("{\"text\":\"n%d\"}", i);
        sbx_tools_call_async(c.tools, "fake", "echo", in, NULL, on_call, &c);
    }
    g_main_loop_run(c.loop);
    assert_int_equal(c.results->len, 50);
    for (int i = 0; i < 50; i++) {
        g_autofree char *want = g_strdup_printf("{\"echo\":\"n%d\"}", i);
        gboolean found = FALSE;
        for (guint j = 0; j < c.results->len; j++) {
            found = found || strcmp(c.results->pdata[j], want) == 0;
        }
        assert_true(found);
    }
    stop(&c);
}

static void test_bad_json_and_wrong_id(void **state)
{
    (void)state;
    Ctx c = {0};

    /* A line that is not JSON before the initialize answer: dropped, the start goes on. */
    assert_true(start(&c, "badjson", NULL));
    g_autofree char *r = call(&c, "echo", "{\"text\":\"x\"}");
    assert_string_equal(r, "{\"echo\":\"x\"}");
    stop(&c);

    /* Answers with ids we never sent are dropped; the right one still completes the call. */
    Ctx d = {0};
    assert_true(start(&d, "wrongid", NULL));
    g_autofree char *r2 = call(&d, "echo", "{\"text\":\"y\"}");
    assert_string_equal(r2, "{\"echo\":\"y\"}");
    stop(&d);
}

static void test_server_requests(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "ping", NULL));
    g_autofree char *r = call(&c, "slow", "{}"); /* no outputSchema: the text comes back as is */
    /* ping answered with {}, the unknown request with "method not found". */
    /* The fake's text is JSON quoted inside our JSON: \"result\": {} */
    if (strstr(r, "p1\\\", \\\"jsonrpc\\\": \\\"2.0\\\", \\\"result\\\": {}") == NULL ||
        strstr(r, "-32601") == NULL) {
        fail_msg("unexpected answers: %s", r);
    }
    stop(&c);
}

static void test_oversized(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "oversized", NULL));
    g_autofree char *r = call(&c, "echo", "{\"text\":\"big\"}");
    assert_non_null(strstr(r, "a message longer than 8388608 bytes"));
    stop(&c);
}

static void test_timeout_cancels(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "ok", ", \"timeout_ms\": 300"));
    g_autofree char *r = call(&c, "slow", "{}");
    assert_non_null(strstr(r, "tools/call timed out after 300 ms"));
    /* The connection is still usable afterwards. */
    g_autofree char *r2 = call(&c, "echo", "{\"text\":\"after\"}");
    assert_string_equal(r2, "{\"echo\":\"after\"}");
    /* The server got notifications/cancelled for the slow call (ids: 1 initialize, 2-3 list). */
    g_autofree char *r3 = call(&c, "cancelled", "{}");
    assert_string_equal(r3, "{\"ids\":[4]}");
    stop(&c);
}

static void test_startup_timeout(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_false(start(&c, "silent", ", \"startup_timeout_ms\": 300"));
    assert_non_null(strstr(c.error->message, "initialize timed out after"));
    stop(&c);
}

static void test_server_dies(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "die", NULL));
    g_autofree char *r = call(&c, "die", "{}");
    assert_non_null(strstr(r, "the server exited (status 3): fake server: dying on purpose"));
    g_autofree char *r2 = call(&c, "echo", "{\"text\":\"x\"}");
    assert_non_null(strstr(r2, "exited"));
    stop(&c);
}

/* A grandchild outside the process group holds stderr: the exit is reported anyway, soon. */
static void test_server_dies_stderr_held(void **state)
{
    (void)state;
    Ctx c = {0};

    assert_true(start(&c, "escape", ", \"timeout_ms\": 20000"));
    gint64 t0 = g_get_monotonic_time();
    g_autofree char *r = call(&c, "die", "{}");
    assert_non_null(strstr(r, "the server exited (status 3): fake server: dying on purpose"));
    assert_true(g_get_monotonic_time() - t0 < 4 * G_USEC_PER_SEC); /* the grandchild: 5 s */
    stop(&c);
}

static void test_free_while_starting(void **state)
{
    (void)state;
    g_autofree char *text = catalog_for("silent", NULL);
    SbxCatalog *cat = sbx_catalog_parse(text, strlen(text), "t.json", SBX_TEST_DIR, NULL);
    SbxTools *tools = sbx_tools_new(cat, NULL);
    Ctx c = {0};

    /* Freed before the server answered: the ready callback must never run. */
    sbx_tools_start(tools, on_ready, &c);
    g_main_context_iteration(NULL, FALSE);
    sbx_tools_free(tools);
    for (int i = 0; i < 20; i++) {
        g_main_context_iteration(NULL, FALSE);
    }
    assert_false(c.ready);
}

static gboolean cancel_soon(gpointer data)
{
    g_cancellable_cancel(data);
    return G_SOURCE_REMOVE;
}

static void test_cancel_notifies(void **state)
{
    (void)state;
    Ctx c = {0};
    g_autoptr(GCancellable) cancel = g_cancellable_new();

    assert_true(start(&c, "ok", NULL));
    c.pending = 1;
    sbx_tools_call_async(c.tools, "fake", "slow", "{}", cancel, on_call, &c);
    g_timeout_add(100, cancel_soon, cancel);
    g_main_loop_run(c.loop);
    assert_non_null(strstr(c.results->pdata[0], "cancelled"));
    /* The server was told (id 4: 1 initialize, 2-3 tools/list). */
    g_autofree char *r = call(&c, "cancelled", "{}");
    assert_string_equal(r, "{\"ids\":[4]}");
    stop(&c);
}

/* The string member @key of the JSON object @obj ("" if none). */
static const char *member_string(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/*
 * A stdio server's environment is the allow-list plus the catalog's `env_pass` and `env`: no
 * SANDBOX_SECRET_*, no other variable of ours (tool-proc.h); and its rlimits.
 */
static void test_env(void **state)
{
    (void)state;
    Ctx c = {0};

    g_setenv("SANDBOX_SECRET_MCP_TOKEN", "hunter3", TRUE);
    g_setenv("SBX_MCP_RANDOM", "x", TRUE);
    g_setenv("SBX_MCP_PASSED", "passed on", TRUE);
    assert_true(start(&c, "env",
                      ", \"env\": {\"SBX_MCP_SET\": \"set\"}, \"env_pass\": [\"SBX_MCP_PASSED\"]"));
    g_autofree char *r = call(&c, "echo", "{\"text\":\"\"}");
    cJSON *outer = sbx_json_parse(r, strlen(r), SBX_JSON_DEPTH_MAX, NULL);
    assert_non_null(outer);
    const char *text = member_string(outer, "echo");
    cJSON *got = sbx_json_parse(text, strlen(text), SBX_JSON_DEPTH_MAX, NULL);
    assert_non_null(got);
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(got, "env");
    assert_true(cJSON_IsObject(env));
    assert_null(cJSON_GetObjectItemCaseSensitive(env, "SANDBOX_SECRET_MCP_TOKEN"));
    assert_null(cJSON_GetObjectItemCaseSensitive(env, "SBX_MCP_RANDOM"));
    assert_string_equal(member_string(env, "SBX_MCP_PASSED"), "passed on");
    assert_string_equal(member_string(env, "SBX_MCP_SET"), "set");
    /* python3 may be a pyenv shim, which puts its own directory first. */
    assert_true(g_str_has_suffix(member_string(env, "PATH"), g_getenv("PATH")));
    assert_string_equal(member_string(env, "HOME"), g_getenv("HOME"));
    assert_null(strstr(r, "hunter3"));
    /* No core dumps; at most 1024 files open unless it raises that (to at most 4096). */
    const cJSON *core = cJSON_GetObjectItemCaseSensitive(got, "core");
    assert_string_equal(cJSON_GetArrayItem(core, 0)->valuestring, "0");
    assert_string_equal(cJSON_GetArrayItem(core, 1)->valuestring, "0");
    const cJSON *nofile = cJSON_GetObjectItemCaseSensitive(got, "nofile");
    assert_true(atoi(cJSON_GetArrayItem(nofile, 0)->valuestring) <= 1024);
    assert_true(atoi(cJSON_GetArrayItem(nofile, 1)->valuestring) <= 4096);
    cJSON_Delete(got);
    cJSON_Delete(outer);
    g_unsetenv("SANDBOX_SECRET_MCP_TOKEN");
    g_unsetenv("SBX_MCP_RANDOM");
    g_unsetenv("SBX_MCP_PASSED");
    stop(&c);
}

/*
 * Start tests/mcp/fake-mcp-http.py on 127.0.0.1 (its stdout in @ret_out) and the tools of a
 * catalog pointing at it, listed.
 */
static GSubprocess *http_start(Ctx *c, GDataInputStream **ret_out)
{
    g_autofree char *script = g_build_filename(SBX_TEST_DIR, "fake-mcp-http.py", NULL);
    GError *error = NULL;
    GSubprocess *server =
        g_subprocess_new(G_SUBPROCESS_FLAGS_STDOUT_PIPE, &error, "python3", script, NULL);
    assert_non_null(server);
    GDataInputStream *out = g_data_input_stream_new(g_subprocess_get_stdout_pipe(server));
    g_autofree char *port = g_data_input_stream_read_line(out, NULL, NULL, &error);
    assert_non_null(port);

    g_autofree char *text = g_strdup_printf(
        "{\"providers\": {\"fake\": {\"kind\": \"mcp\", \"url\": \"http://127.0.0.1:%s/mcp\", "
        "\"headers\": {\"X-Test\": \"1\"}, \"timeout_ms\": 3000}}}",
        port);
    c->loop = g_main_loop_new(NULL, FALSE);
    c->results = g_ptr_array_new_with_free_func(g_free);
    c->tools = sbx_tools_new(sbx_catalog_parse(text, strlen(text), "t.json", "/tmp", NULL), NULL);
    sbx_tools_start(c->tools, on_ready, c);
    g_main_loop_run(c->loop);
    if (c->error != NULL) {
        fail_msg("start: %s", c->error->message);
    }
    *ret_out = out;
    return server;
}

/* Streamable HTTP against tests/mcp/fake-mcp-http.py on 127.0.0.1. */
static void test_http(void **state)
{
    (void)state;
    Ctx c = {0};
    g_autoptr(GDataInputStream) out = NULL;
    g_autoptr(GSubprocess) server = http_start(&c, &out);
    gsize n = 0;
    sbx_tools_decls(c.tools, &n);
    assert_int_equal(n, 17); /* listed over SSE, after a ping and a notification */

    g_autofree char *r1 = call(&c, "echo", "{\"text\":\"hi\"}");
    assert_string_equal(r1, "{\"echo\":\"hi\"}"); /* session id and version headers sent */
    g_autofree char *r2 = call(&c, "sse", "{}");
    assert_string_equal(r2, "[{\"type\":\"text\",\"text\":\"from sse\"}]");
    g_autofree char *r3 = call(&c, "status500", "{}");
    assert_non_null(strstr(r3, "HTTP status 500"));
    g_autofree char *r4 = call(&c, "log", "{}"); /* our answer to the server's ping */
    assert_string_equal(r4,
                        "{\"pings\":[{\"jsonrpc\":\"2.0\",\"id\":\"srv-ping\",\"result\":{}}]}");
    /* 8 calls of 1 s at once end within the 3 s timeout: they are not queued 2 at a time. */
    c.pending = 8;
    for (int i = 0; i < 8; i++) {
        sbx_tools_call_async(c.tools, "fake", "slow", "{}", NULL, on_call, &c);
    }
    g_main_loop_run(c.loop);
    for (guint i = c.results->len - 8; i < c.results->len; i++) {
        assert_string_equal(c.results->pdata[i], "{}");
    }
    /* A redirect would re-send the catalog's headers (secrets) elsewhere: not followed. */
    g_autofree char *r5 = call(&c, "redirect", "{}");
    if (strstr(r5, "redirects are not followed") == NULL) {
        fail_msg("redirect: %s", r5);
    }
    /* A request answered 202 is never answered: it fails at once, not at its timeout. */
    g_autofree char *r6 = call(&c, "accepted", "{}");
    if (strstr(r6, "HTTP status 202 without an answer") == NULL) {
        fail_msg("202: %s", r6);
    }
    /* Pings whose answers the server never acknowledges: the connection is failed (last). */
    g_autofree char *r7 = call(&c, "flood", "{}");
    if (strstr(r7, "unacknowledged") == NULL) {
        fail_msg("flood: %s", r7);
    }

    /* Freeing the tools ends the session with a DELETE (sent on the loop). */
    sbx_tools_free(g_steal_pointer(&c.tools));
    for (int i = 0; i < 100; i++) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(10 * 1000);
    }
    g_subprocess_force_exit(server);
    g_subprocess_wait(server, NULL, NULL);
    g_autofree char *rest = g_data_input_stream_read_upto(out, "", 0, NULL, NULL, NULL);
    if (rest == NULL || strstr(rest, "DELETE sess-1") == NULL) {
        fail_msg("no DELETE of the session: %s", rest != NULL ? rest : "(nothing)");
    }
    stop(&c);
}

/*
 * Streamable HTTP, an SSE stream that ends before its answer (2025-11-25's polling): resumed by a
 * GET with Last-Event-ID after the server's `retry`, the answer taken from that stream (left open
 * by the server: the client leaves it), twice in a row, not at all without an event id, and given
 * up after a few GETs that bring nothing.
 */
static void test_http_resume(void **state)
{
    (void)state;
    Ctx c = {0};
    g_autoptr(GDataInputStream) out = NULL;
    g_autoptr(GSubprocess) server = http_start(&c, &out);

    g_autofree char *r1 = call(&c, "resume", "{}");
    assert_string_equal(r1, "[{\"type\":\"text\",\"text\":\"resumed\"}]");
    g_autofree char *r2 = call(&c, "resume_twice", "{}");
    assert_string_equal(r2, "[{\"type\":\"text\",\"text\":\"resumed\"}]");
    g_autofree char *r3 = call(&c, "noresume", "{}");
    if (strstr(r3, "ended without an answer") == NULL) {
        fail_msg("noresume: %s", r3);
    }
    g_autofree char *r4 = call(&c, "gone", "{}"); /* given up, not its 3 s timeout */
    if (strstr(r4, "resumed 4 times in a row without an event") == NULL) {
        fail_msg("gone: %s", r4);
    }

    /* The GETs: Last-Event-ID of the stream each resumes, after the server's retry (200 ms). */
    g_autofree char *log = call(&c, "resumes", "{}");
    cJSON *root = sbx_json_parse(log, strlen(log), SBX_JSON_DEPTH_MAX, NULL);
    assert_non_null(root);
    const cJSON *gets = cJSON_GetObjectItem(root, "gets");
    assert_int_equal(cJSON_GetArraySize(gets), 1 + 2 + 4); /* resume, twice, gone's 4 tries */
    const char *want[] = {"r-1", "r-1", "r-3", "r-1", "r-1", "r-1", "r-1"};
    for (int i = 0; i < 7; i++) {
        const cJSON *g = cJSON_GetArrayItem(gets, i);
        assert_string_equal(cJSON_GetObjectItem(g, "last_event_id")->valuestring, want[i]);
        int after = cJSON_GetObjectItem(g, "after_ms")->valueint;
        int retry = i < 3 ? 200 : 50;
        /* Never early; late by at most what a loaded machine adds (gone's: since its POST). */
        if (after < retry - 10 || after > retry + 5000) {
            fail_msg("GET %d came %d ms after its stream ended (retry %d ms)", i, after, retry);
        }
    }
    cJSON_Delete(root);
    g_subprocess_force_exit(server);
    g_subprocess_wait(server, NULL, NULL);
    stop(&c);
}

/* What fake-mcp-http.py's elicit tools answer when we answer right (ids with @prefix). */
static char *expected_answers(const char *prefix)
{
    return g_strdup_printf(
        "{\"answers\":[{\"jsonrpc\":\"2.0\",\"id\":\"%selicit-1\",\"result\":{\"action\":"
        "\"decline\"}},{\"jsonrpc\":\"2.0\",\"id\":\"%ssample-1\",\"error\":{\"code\":-32601,"
        "\"message\":\"method not found\"}},{\"jsonrpc\":\"2.0\",\"id\":\"%sroots-1\",\"error\":{"
        "\"code\":-32601,\"message\":\"method not "
        "found\"}},{\"jsonrpc\":\"2.0\",\"id\":\"%sodd-1\","
        "\"error\":{\"code\":-32601,\"message\":\"method not found\"}}]}",
        prefix, prefix, prefix, prefix);
}

/*
 * Streamable HTTP, the server's requests on a call's stream and on the general stream:
 * elicitation/create is declined, sampling, roots and an unknown method get -32601; the call
 * goes on and is answered. The general stream, ended by the server, is reopened with its id.
 */
static void test_http_server_requests(void **state)
{
    (void)state;
    Ctx c = {0};
    g_autoptr(GDataInputStream) out = NULL;
    g_autoptr(GSubprocess) server = http_start(&c, &out);

    g_autofree char *r = call(&c, "elicit", "{}");
    g_autofree char *want = expected_answers("");
    assert_string_equal(r, want);
    /* The same asked on the general stream (the GET opened once initialized). */
    g_autofree char *g = call(&c, "elicit_general", "{}");
    g_autofree char *want_g = expected_answers("g-");
    assert_string_equal(g, want_g);
    /* The general stream ends (after an event with an id): reopened with it, after its retry. */
    g_autofree char *e = call(&c, "end_general", "{}");
    assert_string_equal(e, "{}");
    char *gets = NULL;
    for (int i = 0; i < 40; i++) { /* 2 s at most: the retry is 100 ms */
        g_free(gets);
        gets = call(&c, "generals", "{}");
        if (strcmp(gets, "{\"gets\":[\"-\"]}") != 0) {
            break;
        }
        g_usleep(50 * 1000);
    }
    assert_string_equal(gets, "{\"gets\":[\"-\",\"g-7\"]}");
    g_free(gets);
    g_subprocess_force_exit(server);
    g_subprocess_wait(server, NULL, NULL);
    stop(&c);
}

static void expect_catalog_error(const char *provider_json, const char *needle)
{
    g_autofree char *text = g_strdup_printf("{\"providers\": {\"m\": %s}}", provider_json);
    GError *error = NULL;
    SbxCatalog *cat = sbx_catalog_parse(text, strlen(text), "t.json", "/tmp", &error);

    assert_null(cat);
    if (strstr(error->message, needle) == NULL) {
        fail_msg("expected \"%s\" in \"%s\"", needle, error->message);
    }
    g_error_free(error);
}

static void test_catalog(void **state)
{
    (void)state;
    const char *ok =
        "{\"providers\": {\"m\": {\"kind\": \"mcp\", \"url\": \"http://127.0.0.1:1/mcp\","
        " \"headers\": {\"Authorization\": \"Bearer x\"}, \"startup_timeout_ms\": 5,"
        " \"tools\": [\"a\"]}}}";
    GError *error = NULL;
    SbxCatalog *cat = sbx_catalog_parse(ok, strlen(ok), "t.json", "/tmp", &error);
    assert_non_null(cat);
    assert_string_equal(cat->providers[0].headers[0], "Authorization");
    assert_string_equal(cat->providers[0].headers[1], "Bearer x");
    assert_int_equal(cat->providers[0].startup_timeout_ms, 5);
    assert_string_equal(cat->providers[0].only_tools[0], "a");
    sbx_catalog_free(cat);

    expect_catalog_error("{\"kind\": \"mcp\"}", "exactly one of \"command\"");
    expect_catalog_error("{\"kind\": \"mcp\", \"command\": [\"x\"], \"url\": \"http://a/\"}",
                         "exactly one of");
    expect_catalog_error("{\"kind\": \"mcp\", \"url\": \"ftp://a/\"}", "http:// or https://");
    /* No host: libsoup makes no request of it (fuzz-catalog found `sandbox tools` crashing). */
    expect_catalog_error("{\"kind\": \"mcp\", \"url\": \"https:cp\"}", "URL with a host");
    expect_catalog_error("{\"kind\": \"mcp\", \"url\": \"http:///mcp\"}", "URL with a host");
    expect_catalog_error(
        "{\"kind\": \"mcp\", \"url\": \"http://a/\", \"headers\": {\"X\": \"a\\nb\"}}",
        "without control characters");
    expect_catalog_error(
        "{\"kind\": \"mcp\", \"url\": \"http://a/\", \"headers\": {\"a b\": \"c\"}}",
        "not a header name");
    expect_catalog_error("{\"kind\": \"mcp\", \"command\": [\"x\"], \"env\": {\"A=B\": \"c\"}}",
                         "not a variable name");
    expect_catalog_error("{\"kind\": \"mcp\", \"command\": [\"x\"], \"headers\": {}}",
                         "\"headers\" are for a \"url\" server");
    expect_catalog_error("{\"kind\": \"mcp\", \"command\": [\"x\"], \"tools\": {}}",
                         "expected an array");
    expect_catalog_error("{\"kind\": \"mcp\", \"command\": [\"x\"], \"startup_timeout_ms\": 0}",
                         "startup_timeout_ms: expected an integer");
    expect_catalog_error("{\"kind\": \"mcp\", \"command\": [\"x\"], \"comand\": 1}",
                         "unknown field \"comand\"");
}

/* The framer on fragments: lines, CRLF, SSE events split anywhere, and the size limit. */
static void collect(const char *text, gsize len, gpointer data)
{
    g_ptr_array_add(data, g_strndup(text, len));
}

static void test_framing(void **state)
{
    (void)state;
    g_autoptr(GPtrArray) got = g_ptr_array_new_with_free_func(g_free);
    const char *sse = ": comment\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n"
                      "event: other\ndata: skip\n\ndata:{\"b\":2}\n\n";
    g_autoptr(SbxMcpFramer) f = sbx_mcp_framer_new(SBX_MCP_FRAMING_SSE, 64);

    for (const char *p = sse; *p != '\0'; p++) { /* one byte at a time */
        assert_true(sbx_mcp_framer_feed(f, (const guint8 *)p, 1, collect, got, NULL));
    }
    assert_int_equal(got->len, 2);
    assert_string_equal(got->pdata[0], "{\"a\":\n1}");
    assert_string_equal(got->pdata[1], "{\"b\":2}");

    g_autoptr(SbxMcpFramer) l = sbx_mcp_framer_new(SBX_MCP_FRAMING_LINES, 16);
    g_ptr_array_set_size(got, 0);
    const char *lines = "{\"x\":1}\r\n\n  \n{\"y\":2}";
    assert_true(sbx_mcp_framer_feed(l, (const guint8 *)lines, strlen(lines), collect, got, NULL));
    sbx_mcp_framer_finish(l, collect, got);
    assert_int_equal(got->len, 2);
    assert_string_equal(got->pdata[1], "{\"y\":2}");
    GError *error = NULL;
    const char *big = "01234567890123456789";
    assert_false(sbx_mcp_framer_feed(l, (const guint8 *)big, strlen(big), collect, got, &error));
    assert_non_null(strstr(error->message, "longer than 16 bytes"));
    g_error_free(error);
}

/* Feed @text to @f at once, collecting messages into @got. */
static void feed(SbxMcpFramer *f, const char *text, GPtrArray *got)
{
    assert_true(sbx_mcp_framer_feed(f, (const guint8 *)text, strlen(text), collect, got, NULL));
}

/*
 * SSE: what resuming a stream needs: the last event id (a priming event's too, kept across
 * events, cleared by an empty id, ids with control characters or too long ignored), the last
 * valid retry, the events counted (comments and blank lines are none).
 */
static void test_framing_resume(void **state)
{
    (void)state;
    g_autoptr(GPtrArray) got = g_ptr_array_new_with_free_func(g_free);
    g_autoptr(SbxMcpFramer) f = sbx_mcp_framer_new(SBX_MCP_FRAMING_SSE, 4096);

    assert_null(sbx_mcp_framer_last_event_id(f));
    assert_int_equal(sbx_mcp_framer_retry_ms(f), -1);
    feed(f, ": hello\n\n\n", got);
    assert_int_equal(sbx_mcp_framer_events(f), 0);
    feed(f, "id: ev-1\nretry: 500\ndata: \n\n", got); /* a priming event: no message */
    assert_int_equal(got->len, 0);
    assert_string_equal(sbx_mcp_framer_last_event_id(f), "ev-1");
    assert_int_equal(sbx_mcp_framer_retry_ms(f), 500);
    assert_int_equal(sbx_mcp_framer_events(f), 1);
    feed(f, "retry: 12x\nretry: -5\nid: a\tb\ndata: {}\n\n", got); /* all three ignored */
    assert_string_equal(sbx_mcp_framer_last_event_id(f), "ev-1");
    assert_int_equal(sbx_mcp_framer_retry_ms(f), 500);
    assert_int_equal(got->len, 1);
    feed(f, "retry: 99999999999999999999\nid: ev-2\n", got); /* not dispatched yet */
    assert_string_equal(sbx_mcp_framer_last_event_id(f), "ev-1");
    feed(f, "\n", got);
    assert_string_equal(sbx_mcp_framer_last_event_id(f), "ev-2");
    assert_int_equal(sbx_mcp_framer_retry_ms(f), G_MAXINT32);
    g_autofree char *long_id = g_strnfill(SBX_MCP_EVENT_ID_MAX + 1, 'x');
    g_autofree char *ev = g_strdup_printf("id: %s\ndata: {}\n\n", long_id);
    feed(f, ev, got);
    assert_string_equal(sbx_mcp_framer_last_event_id(f), "ev-2");
    feed(f, "id\ndata: {}\n\n", got); /* an empty id clears it */
    assert_null(sbx_mcp_framer_last_event_id(f));
    assert_int_equal(sbx_mcp_framer_events(f), 5);
}

static void test_messages(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "[]",
        "{}",
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1}",
        "{\"jsonrpc\":\"2.0\",\"method\":1}",
        "{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":1}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"no code\"}}",
        "not json",
    };
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        GError *error = NULL;
        assert_null(sbx_mcp_message_parse(bad[i], strlen(bad[i]), &error));
        g_error_free(error);
    }
    const char *ok = "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32000,\"message\":\"m\"}}";
    g_autoptr(SbxMcpMessage) m = sbx_mcp_message_parse(ok, strlen(ok), NULL);
    assert_int_equal(m->kind, SBX_MCP_MSG_ERROR);
    assert_true(m->id_is_int);
    assert_int_equal(m->id_int, 7);
    assert_int_equal(m->error_code, -32000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_catalog),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_framing_resume),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_calls),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_bad_json_and_wrong_id),
        cmocka_unit_test(test_server_requests),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_timeout_cancels),
        cmocka_unit_test(test_startup_timeout),
        cmocka_unit_test(test_server_dies),
        cmocka_unit_test(test_free_while_starting),
        cmocka_unit_test(test_cancel_notifies),
        cmocka_unit_test(test_nameless),
        cmocka_unit_test(test_server_dies_stderr_held),
        cmocka_unit_test(test_http),
        cmocka_unit_test(test_http_resume),
        cmocka_unit_test(test_http_server_requests),
        cmocka_unit_test(test_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
