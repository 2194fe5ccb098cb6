/*
 * The MCP server's protocol core (host-agent/mcp-server/, cmocka), played by a fake transport
 * that keeps what is sent and the executions started: initialize and the revision negotiated,
 * requests before it, the JSON-RPC errors, notifications never answered, tools/list per
 * revision, tools/call (arguments checked, values forwarded exactly, the report as content and
 * structuredContent, isError), progress, cancellation, the bound on calls in flight, ids, batches
 * in 2025-03-26 only, the discovery tools over a catalog, the session tools (definitions,
 * arguments, the ops called with the right values, results, the handles and their bound), and
 * the stdio framing (split lines, CRLF,
 * blank lines, a line over the limit).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mcp-server/mcp-server.h"
#include "protocol/json.h"
#include "protocol/limits.h"

typedef struct {
    SbxMcpServer *server;
    GPtrArray *sent;      /* char*: every message sent */
    GPtrArray *calls;     /* SbxMcpCall*: executions started, not finished */
    GPtrArray *args;      /* char*: "language|code|entry|args|kwargs|timeout" of each start */
    GPtrArray *cancelled; /* SbxMcpCall*: cancel callbacks */
} Fake;

static void on_send(gpointer data, const char *json, gsize len)
{
    Fake *f = data;
    assert_int_equal(strlen(json), len);
    assert_null(strchr(json, '\n')); /* one line each on stdio */
    g_ptr_array_add(f->sent, g_strndup(json, len));
}

static void on_execute(gpointer data, SbxMcpCall *call, const SbxMcpExecuteArgs *a)
{
    Fake *f = data;
    g_ptr_array_add(f->calls, call);
    g_ptr_array_add(f->args,
                    g_strdup_printf("%s|%s|%s|%s|%s|%u", sbx_language_name(a->language), a->code,
                                    a->entry ? a->entry : "-", a->args_json ? a->args_json : "-",
                                    a->kwargs_json ? a->kwargs_json : "-", a->timeout_ms));
}

static void on_cancel(gpointer data, SbxMcpCall *call)
{
    Fake *f = data;
    g_ptr_array_add(f->cancelled, call);
}

static const SbxMcpServerOps ops = {.send = on_send, .execute = on_execute, .cancel = on_cancel};

static Fake *fake_new_with(const SbxMcpServerOps *o)
{
    Fake *f = g_new0(Fake, 1);
    SbxMcpServerInfo info = {.name = "sandbox", .version = "9.9"};

    f->server = sbx_mcp_server_new(o, f, &info);
    f->sent = g_ptr_array_new_with_free_func(g_free);
    f->calls = g_ptr_array_new();
    f->args = g_ptr_array_new_with_free_func(g_free);
    f->cancelled = g_ptr_array_new();
    return f;
}

static Fake *fake_new(void)
{
    return fake_new_with(&ops);
}

static void fake_free(Fake *f)
{
    sbx_mcp_server_free(f->server);
    g_ptr_array_unref(f->sent);
    g_ptr_array_unref(f->calls);
    g_ptr_array_unref(f->args);
    g_ptr_array_unref(f->cancelled);
    g_free(f);
}

static void recv_text(Fake *f, const char *text)
{
    sbx_mcp_server_receive(f->server, text, strlen(text));
}

/* The one message sent since the last take (parsed; caller deletes). */
static cJSON *take(Fake *f)
{
    if (f->sent->len != 1) {
        fail_msg("expected one message sent, got %u%s%s", f->sent->len, f->sent->len ? ": " : "",
                 f->sent->len ? (char *)g_ptr_array_index(f->sent, 0) : "");
    }
    const char *text = g_ptr_array_index(f->sent, 0);
    cJSON *v = sbx_json_parse(text, strlen(text), SBX_JSON_DEPTH_MAX, NULL);
    assert_non_null(v);
    g_ptr_array_set_size(f->sent, 0);
    return v;
}

static const cJSON *get(const cJSON *v, const char *path)
{
    g_auto(GStrv) parts = g_strsplit(path, ".", -1);
    for (char **p = parts; *p != NULL && v != NULL; p++) {
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(*p))
                             : cJSON_GetObjectItemCaseSensitive(v, *p);
    }
    return v;
}

static const char *str(const cJSON *v, const char *path)
{
    const cJSON *s = get(v, path);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static gint64 num(const cJSON *v, const char *path)
{
    int64_t n = -99999;
    assert_true(sbx_json_int64(get(v, path), &n));
    return n;
}

static char *text_of(const cJSON *v, const char *path)
{
    return sbx_json_print(get(v, path));
}

/* The one message is an error with @code and id @id_json ("null" for none). */
static void expect_error(Fake *f, int code, const char *id_json)
{
    cJSON *v = take(f);
    char *id = text_of(v, "id");
    assert_int_equal(num(v, "error.code"), code);
    assert_string_equal(id, id_json);
    assert_non_null(str(v, "error.message"));
    assert_null(get(v, "result"));
    free(id);
    cJSON_Delete(v);
}

static void initialize(Fake *f, const char *version)
{
    g_autofree char *msg =
        g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                        "\"protocolVersion\":\"%s\",\"capabilities\":{},\"clientInfo\":{\"name\":"
                        "\"t\",\"version\":\"1\"}}}",
                        version);
    recv_text(f, msg);
    cJSON_Delete(take(f));
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    assert_int_equal(f->sent->len, 0);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static void test_initialize_versions(void **state)
{
    static const char *const cases[][2] = {
        {"2025-11-25", "2025-11-25"}, {"2025-06-18", "2025-06-18"}, {"2025-03-26", "2025-03-26"},
        {"2024-11-05", "2024-11-05"}, {"2099-01-01", "2025-11-25"}, {"2024-10-07", "2025-11-25"},
    };
    (void)state;
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        Fake *f = fake_new();
        g_autofree char *msg = g_strdup_printf(
            "{\"jsonrpc\":\"2.0\",\"id\":\"init-1\",\"method\":\"initialize\",\"params\":{"
            "\"protocolVersion\":\"%s\",\"capabilities\":{\"elicitation\":{}},\"clientInfo\":"
            "{\"name\":\"t\",\"version\":\"1\"}}}",
            cases[i][0]);
        recv_text(f, msg);
        cJSON *v = take(f);
        assert_string_equal(str(v, "jsonrpc"), "2.0");
        assert_string_equal(str(v, "id"), "init-1");
        assert_string_equal(str(v, "result.protocolVersion"), cases[i][1]);
        assert_string_equal(str(v, "result.serverInfo.name"), "sandbox");
        assert_string_equal(str(v, "result.serverInfo.version"), "9.9");
        assert_true(cJSON_IsObject(get(v, "result.capabilities.tools")));
        assert_true((get(v, "result.instructions") != NULL) ==
                    (strcmp(cases[i][1], "2025-03-26") >= 0));
        assert_string_equal(sbx_mcp_server_revision(f->server), cases[i][1]);
        cJSON_Delete(v);
        /* Once only. */
        recv_text(f, msg);
        expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "\"init-1\"");
        fake_free(f);
    }
}

static void test_before_initialize(void **state)
{
    Fake *f = fake_new();
    (void)state;

    /* ping is allowed; everything else is refused. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    cJSON *v = take(f);
    assert_true(cJSON_IsObject(get(v, "result")));
    assert_null(get(v, "result")->child);
    cJSON_Delete(v);
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "2");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":"
                 "\"execute\",\"arguments\":{\"language\":\"python\",\"code\":\"1\"}}}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "3");
    assert_int_equal(f->calls->len, 0);
    /* A cancel before initialize is ignored, like every notification we do not act on. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":3}}");
    assert_int_equal(f->sent->len, 0);
    /* initialize without its required params. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":{"
                 "\"capabilities\":{},\"clientInfo\":{}}}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "4");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"initialize\"}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "5");
    assert_null(sbx_mcp_server_revision(f->server));
    fake_free(f);
}

/* ---- JSON-RPC errors ------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"");
    expect_error(f, SBX_JSONRPC_PARSE_ERROR, "null");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}");
    expect_error(f, SBX_JSONRPC_PARSE_ERROR, "null"); /* duplicate names: not our JSON */
    recv_text(f, "\"ping\"");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    recv_text(f, "{\"id\":7,\"method\":\"ping\"}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "7");
    recv_text(f, "{\"jsonrpc\":\"1.0\",\"id\":\"x\",\"method\":\"ping\"}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "\"x\"");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":{\"a\":1},\"method\":\"ping\"}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":3}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "8");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\",\"params\":1}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "9");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/list\",\"params\":[]}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "10");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"resources/list\"}");
    expect_error(f, SBX_JSONRPC_METHOD_NOT_FOUND, "11");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/list\",\"params\":"
                 "{\"cursor\":\"abc\"}}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "12");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"tools/call\",\"params\":{}}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "13");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"tools/call\",\"params\":{\"name\":"
                 "\"execute\",\"arguments\":[]}}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "14");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/call\",\"params\":{\"name\":"
                 "\"rm_rf\",\"arguments\":{}}}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "15");
    /* Ids: numbers keep their literal, a string over the limit is no id. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890,\"method\":\"nope\"}");
    expect_error(f, SBX_JSONRPC_METHOD_NOT_FOUND, "12345678901234567890");
    g_autofree char *long_id = g_strnfill(SBX_MCP_SERVER_ID_MAX, 'i');
    g_autofree char *msg =
        g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"method\":\"ping\"}", long_id);
    recv_text(f, msg);
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    /* Not UTF-8, and a message over the limit. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}");
    expect_error(f, SBX_JSONRPC_PARSE_ERROR, "null");
    g_autofree char *big = g_strnfill(SBX_MCP_SERVER_MESSAGE_MAX + 1, ' ');
    sbx_mcp_server_receive(f->server, big, SBX_MCP_SERVER_MESSAGE_MAX + 1);
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    fake_free(f);
}

static void test_notifications_unanswered(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"tools/list\"}");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":\"nothing in flight\"}}");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\"}");
    recv_text(f, "{\"jsonrpc\":\"1.0\",\"method\":\"ping\"}");
    /* Responses: we sent no request, they answer nothing. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":1,\"message\":\"x\"}}");
    assert_int_equal(f->sent->len, 0);
    assert_int_equal(f->cancelled->len, 0);
    fake_free(f);
}

/* ---- tools/list ------------------------------------------------------------------------------ */

static void test_tools_list(void **state)
{
    static const char *const revisions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
    (void)state;
    for (gsize i = 0; i < G_N_ELEMENTS(revisions); i++) {
        Fake *f = fake_new();
        initialize(f, revisions[i]);
        recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{}}");
        cJSON *v = take(f);
        const cJSON *tools = get(v, "result.tools");
        assert_int_equal(cJSON_GetArraySize(tools), 1);
        assert_string_equal(str(tools, "0.name"), "execute");
        assert_non_null(strstr(str(tools, "0.description"), "last expression"));
        assert_non_null(strstr(str(tools, "0.description"), "await tools."));
        assert_string_equal(str(tools, "0.inputSchema.type"), "object");
        assert_string_equal(str(tools, "0.inputSchema.required.0"), "language");
        assert_string_equal(str(tools, "0.inputSchema.required.1"), "code");
        assert_int_equal(num(tools, "0.inputSchema.properties.timeout_ms.maximum"),
                         SBX_MCP_EXECUTE_TIMEOUT_MAX_MS);
        gboolean structured = strcmp(revisions[i], "2025-06-18") >= 0;
        assert_true((get(tools, "0.outputSchema") != NULL) == structured);
        if (structured) {
            assert_string_equal(str(tools, "0.outputSchema.properties.status.type"), "string");
            assert_non_null(get(tools, "0.outputSchema.properties.result"));
        }
        gboolean annotated = strcmp(revisions[i], "2025-03-26") >= 0;
        assert_true((get(tools, "0.annotations") != NULL) == annotated);
        if (annotated) {
            assert_true(cJSON_IsFalse(get(tools, "0.annotations.readOnlyHint")));
            assert_true(cJSON_IsFalse(get(tools, "0.annotations.openWorldHint")));
            assert_true(cJSON_IsFalse(get(tools, "0.annotations.destructiveHint")));
        }
        cJSON_Delete(v);
        fake_free(f);
    }
}

/* ---- tools/call ------------------------------------------------------------------------------ */

static void call(Fake *f, const char *id, const char *arguments)
{
    g_autofree char *msg = g_strdup_printf(
        "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":"
        "\"execute\",\"arguments\":%s,\"_meta\":{\"progressToken\":1}}}",
        id, arguments);
    recv_text(f, msg);
}

static const char REPORT_OK[] =
    "{\"id\":\"e1\",\"start\":\"pool\",\"status\":\"ok\",\"exit_code\":0,\"result\":"
    "{\"n\":9007199254740993,\"x\":1e400},\"error\":null,\"stdout\":\"hello\\n\",\"stderr\":\"\","
    "\"output_truncated\":false,\"duration_ms\":153,\"tool_calls\":[],\"boot_ms\":null}";

static const char REPORT_THROW[] =
    "{\"status\":\"error\",\"exit_code\":1,\"result\":null,\"error\":{\"code\":\"runtime_error\","
    "\"type\":\"Error\",\"message\":\"boom\",\"stack\":\"Error: boom\\n    at main.js:1:7\"},"
    "\"stdout\":\"before\\n\",\"stderr\":\"\",\"output_truncated\":false,\"duration_ms\":80}";

static void test_call_ok(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    call(f, "\"c1\"",
         "{\"language\":\"python\",\"code\":\"def f(a, b=0): return a\",\"entry\":\"f\","
         "\"args\":[ 9007199254740993 , 1e400 ],\"kwargs\":{\"b\": -0.0},\"timeout_ms\":5000}");
    assert_int_equal(f->sent->len, 0);
    assert_int_equal(f->calls->len, 1);
    /* The arguments as sent (minified): no number changed. */
    assert_string_equal(g_ptr_array_index(f->args, 0),
                        "python|def f(a, b=0): return a|f|[9007199254740993,1e400]|{\"b\":-0.0}|"
                        "5000");
    assert_int_equal(sbx_mcp_server_calls(f->server), 1);
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_OK);
    assert_int_equal(sbx_mcp_server_calls(f->server), 0);
    cJSON *v = take(f);
    assert_string_equal(str(v, "id"), "c1");
    assert_true(cJSON_IsFalse(get(v, "result.isError")));
    assert_string_equal(str(v, "result.content.0.type"), "text");
    const char *text = str(v, "result.content.0.text");
    assert_non_null(strstr(text, "status: ok"));
    assert_non_null(strstr(text, "hello"));
    assert_non_null(strstr(text, "result: {\"n\":9007199254740993,\"x\":1e400}"));
    assert_null(get(v, "result.content.1"));
    char *sc = text_of(v, "result.structuredContent");
    assert_string_equal(sc, "{\"id\":\"e1\",\"status\":\"ok\",\"exit_code\":0,\"result\":{\"n\":"
                            "9007199254740993,\"x\":1e400},\"error\":null,\"stdout\":\"hello\\n\","
                            "\"stderr\":\"\",\"output_truncated\":false,\"duration_ms\":153}");
    free(sc);
    cJSON_Delete(v);
    /* Default timeout; no arguments at all is no code. */
    call(f, "2", "{\"language\":\"javascript\",\"code\":\"1\"}");
    assert_string_equal(g_ptr_array_index(f->args, 1), "javascript|1|-|-|-|30000");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 1), REPORT_THROW);
    cJSON_Delete(take(f));
    fake_free(f);
}

static void test_call_failed(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-06-18");
    call(f, "1", "{\"language\":\"javascript\",\"code\":\"throw new Error('boom')\"}");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_THROW);
    cJSON *v = take(f);
    assert_true(cJSON_IsTrue(get(v, "result.isError")));
    const char *text = str(v, "result.content.0.text");
    assert_non_null(strstr(text, "status: error (exit code 1"));
    assert_non_null(strstr(text, "error (runtime_error): Error: boom\n    at main.js:1:7"));
    assert_string_equal(str(v, "result.structuredContent.error.message"), "boom");
    assert_true(cJSON_IsNull(get(v, "result.structuredContent.result")));
    cJSON_Delete(v);
    /* ok but a non-zero exit code is a failure too; an unreadable report is a tool error. */
    call(f, "2", "{\"language\":\"javascript\",\"code\":\"process.exit(3)\"}");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 1),
                          "{\"status\":\"ok\",\"exit_code\":3}");
    v = take(f);
    assert_true(cJSON_IsTrue(get(v, "result.isError")));
    assert_int_equal(num(v, "result.structuredContent.exit_code"), 3);
    assert_string_equal(str(v, "result.structuredContent.stdout"), "");
    cJSON_Delete(v);
    call(f, "3", "{\"language\":\"javascript\",\"code\":\"1\"}");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 2), "not json");
    v = take(f);
    assert_true(cJSON_IsTrue(get(v, "result.isError")));
    assert_null(get(v, "result.structuredContent"));
    cJSON_Delete(v);
    fake_free(f);
}

static void test_call_old_revision(void **state)
{
    Fake *f = fake_new();
    (void)state;

    /* Before 2025-06-18: no structuredContent, the object as a second text. */
    initialize(f, "2025-03-26");
    call(f, "1", "{\"language\":\"javascript\",\"code\":\"1\"}");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_OK);
    cJSON *v = take(f);
    assert_null(get(v, "result.structuredContent"));
    const char *second = str(v, "result.content.1.text");
    assert_non_null(second);
    assert_non_null(strstr(second, "\"status\":\"ok\""));
    cJSON_Delete(v);
    fake_free(f);
}

static void test_call_bad_arguments(void **state)
{
    static const char *const bad[][2] = {
        {"{}", "language"},
        {"{\"language\":\"ruby\",\"code\":\"1\"}", "language"},
        {"{\"language\":\"python\"}", "code"},
        {"{\"language\":\"python\",\"code\":\"\"}", "code"},
        {"{\"language\":\"python\",\"code\":7}", "code"},
        {"{\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":0}", "timeout_ms"},
        {"{\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":600001}", "timeout_ms"},
        {"{\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":1.5}", "timeout_ms"},
        {"{\"language\":\"python\",\"code\":\"1\",\"session\":\"s\"}", "session"},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"no-ident\"}", "entry"},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":5}", "entry"},
        {"{\"language\":\"python\",\"code\":\"1\",\"args\":[1]}", "args"},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"args\":{}}", "args"},
        {"{\"language\":\"javascript\",\"code\":\"1\",\"entry\":\"f\",\"kwargs\":{}}", "kwargs"},
    };
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        call(f, "1", bad[i][0]);
        cJSON *v = take(f);
        assert_true(cJSON_IsTrue(get(v, "result.isError")));
        const char *text = str(v, "result.content.0.text");
        if (strstr(text, bad[i][1]) == NULL) {
            fail_msg("%s: \"%s\" does not name %s", bad[i][0], text, bad[i][1]);
        }
        cJSON_Delete(v);
    }
    assert_int_equal(f->calls->len, 0);
    /* Code over 1 MiB. */
    g_autofree char *code = g_strnfill(SBX_MCP_EXECUTE_CODE_MAX + 1, 'x');
    g_autofree char *args = g_strdup_printf("{\"language\":\"python\",\"code\":\"%s\"}", code);
    call(f, "1", args);
    cJSON *v = take(f);
    assert_true(cJSON_IsTrue(get(v, "result.isError")));
    cJSON_Delete(v);
    /* An entry with empty code is fine (the function must exist, the guest says if not). */
    call(f, "1",
         "{\"language\":\"python\",\"code\":\"\",\"entry\":\"f\",\"args\":[],"
         "\"kwargs\":null}");
    assert_int_equal(f->calls->len, 1);
    assert_string_equal(g_ptr_array_index(f->args, 0), "python||f|[]|-|30000");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_OK);
    cJSON_Delete(take(f));
    fake_free(f);
}

static void test_cancel(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    call(f, "\"a\"", "{\"language\":\"python\",\"code\":\"1\"}");
    call(f, "7", "{\"language\":\"python\",\"code\":\"2\"}");
    /* The id must match as sent: "7" is not 7. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":\"7\",\"reason\":\"x\"}}");
    assert_int_equal(f->cancelled->len, 0);
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":7,\"reason\":\"user\"}}");
    assert_int_equal(f->cancelled->len, 1);
    assert_ptr_equal(g_ptr_array_index(f->cancelled, 0), g_ptr_array_index(f->calls, 1));
    /* Once only. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":7}}");
    assert_int_equal(f->cancelled->len, 1);
    /* Its finish is due, and answers nothing; the other call answers. */
    assert_int_equal(sbx_mcp_server_calls(f->server), 2);
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 1), REPORT_OK);
    assert_int_equal(f->sent->len, 0);
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_OK);
    cJSON *v = take(f);
    assert_string_equal(str(v, "id"), "a");
    cJSON_Delete(v);
    /* Its id is free again. */
    call(f, "7", "{\"language\":\"python\",\"code\":\"3\"}");
    assert_int_equal(f->calls->len, 3);
    assert_int_equal(f->sent->len, 0);
    fake_free(f); /* a call in flight is forgotten */
}

static void test_progress(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    call(f, "1", "{\"language\":\"python\",\"code\":\"1\"}"); /* progressToken 1 */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                 "\"name\":\"execute\",\"arguments\":{\"language\":\"python\",\"code\":\"2\"},"
                 "\"_meta\":{\"progressToken\":\"tok\"}}}");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{"
                 "\"name\":\"execute\",\"arguments\":{\"language\":\"python\",\"code\":\"3\"}}}");
    SbxMcpCall *one = g_ptr_array_index(f->calls, 0), *tok = g_ptr_array_index(f->calls, 1);
    SbxMcpCall *none = g_ptr_array_index(f->calls, 2);
    assert_true(sbx_mcp_call_wants_progress(one));
    assert_true(sbx_mcp_call_wants_progress(tok));
    assert_false(sbx_mcp_call_wants_progress(none));
    sbx_mcp_server_progress(f->server, tok, 5, 30, "running for 5 s");
    cJSON *v = take(f);
    assert_string_equal(str(v, "method"), "notifications/progress");
    assert_null(get(v, "id"));
    assert_string_equal(str(v, "params.progressToken"), "tok");
    assert_int_equal(num(v, "params.progress"), 5);
    assert_int_equal(num(v, "params.total"), 30);
    assert_string_equal(str(v, "params.message"), "running for 5 s");
    cJSON_Delete(v);
    /* Progress only grows; none without a token; the token's type is kept. */
    sbx_mcp_server_progress(f->server, tok, 5, 30, NULL);
    sbx_mcp_server_progress(f->server, none, 1, 0, NULL);
    assert_int_equal(f->sent->len, 0);
    sbx_mcp_server_progress(f->server, one, 1, 0, NULL);
    v = take(f);
    assert_int_equal(num(v, "params.progressToken"), 1);
    assert_null(get(v, "params.total"));
    assert_null(get(v, "params.message"));
    cJSON_Delete(v);
    /* None once cancelled. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":2}}");
    sbx_mcp_server_progress(f->server, tok, 10, 30, NULL);
    assert_int_equal(f->sent->len, 0);
    fake_free(f);
}

/* The program's output as the message of progress: held between notifications, by stream. */
static void test_output(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    call(f, "1", "{\"language\":\"python\",\"code\":\"1\"}"); /* progressToken 1 */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                 "\"name\":\"execute\",\"arguments\":{\"language\":\"python\",\"code\":\"2\"}}}");
    SbxMcpCall *one = g_ptr_array_index(f->calls, 0), *none = g_ptr_array_index(f->calls, 1);
    const guint8 *hello = (const guint8 *)"hello\n", *world = (const guint8 *)"world\n";
    /* The first output goes out at once, however early. */
    sbx_mcp_server_output(f->server, one, SBX_STREAM_STDOUT, hello, 6, 40, 30000);
    cJSON *v = take(f);
    assert_int_equal(num(v, "params.progress"), 40);
    assert_int_equal(num(v, "params.total"), 30000);
    assert_string_equal(str(v, "params.message"), "hello\n");
    cJSON_Delete(v);
    /* Within 100 ms: held, then sent with the next output past them. */
    sbx_mcp_server_output(f->server, one, SBX_STREAM_STDOUT, world, 6, 120, 30000);
    assert_int_equal(f->sent->len, 0);
    sbx_mcp_server_output(f->server, one, SBX_STREAM_STDOUT, hello, 6, 260, 30000);
    v = take(f);
    assert_int_equal(num(v, "params.progress"), 260);
    assert_string_equal(str(v, "params.message"), "world\nhello\n");
    cJSON_Delete(v);
    /* Another stream: the output held of the first goes first, then the new one is held. */
    sbx_mcp_server_output(f->server, one, SBX_STREAM_STDOUT, world, 6, 270, 30000);
    sbx_mcp_server_output(f->server, one, SBX_STREAM_STDERR, (const guint8 *)"oops\xff", 5, 280,
                          30000);
    v = take(f);
    assert_int_equal(num(v, "params.progress"), 280);
    assert_string_equal(str(v, "params.message"), "world\n");
    cJSON_Delete(v);
    assert_int_equal(f->sent->len, 0); /* stderr held: no 100 ms since that one */
    /* A tick sends the held output instead of its own message; not UTF-8 shown as U+FFFD. */
    sbx_mcp_server_progress(f->server, one, 5000, 30000, "running for 5 s");
    v = take(f);
    assert_int_equal(num(v, "params.progress"), 5000);
    assert_string_equal(str(v, "params.message"), "stderr: oops\xef\xbf\xbd");
    cJSON_Delete(v);
    /* A burst is cut at SBX_MCP_OUTPUT_HELD_MAX; none without a token. */
    g_autofree guint8 *big = g_malloc(SBX_MCP_OUTPUT_HELD_MAX + 100);
    memset(big, 'x', SBX_MCP_OUTPUT_HELD_MAX + 100);
    sbx_mcp_server_output(f->server, one, SBX_STREAM_STDOUT, big, SBX_MCP_OUTPUT_HELD_MAX + 100,
                          6000, 30000);
    v = take(f);
    assert_int_equal(strlen(str(v, "params.message")), SBX_MCP_OUTPUT_HELD_MAX);
    cJSON_Delete(v);
    sbx_mcp_server_output(f->server, none, SBX_STREAM_STDOUT, hello, 6, 7000, 30000);
    assert_int_equal(f->sent->len, 0);
    fake_free(f); /* output still held is freed with its call */
}

static void test_calls_bounded(void **state)
{
    Fake *f = fake_new();
    (void)state;

    initialize(f, "2025-11-25");
    for (int i = 0; i < SBX_MCP_SERVER_CALLS_MAX; i++) {
        g_autofree char *id = g_strdup_printf("%d", i);
        call(f, id, "{\"language\":\"python\",\"code\":\"1\"}");
    }
    assert_int_equal(f->sent->len, 0);
    /* A request still in flight's id. */
    call(f, "3", "{\"language\":\"python\",\"code\":\"1\"}");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "3");
    call(f, "99", "{\"language\":\"python\",\"code\":\"1\"}");
    cJSON *v = take(f);
    assert_true(cJSON_IsTrue(get(v, "result.isError")));
    assert_non_null(strstr(str(v, "result.content.0.text"), "too many"));
    cJSON_Delete(v);
    assert_int_equal(f->calls->len, SBX_MCP_SERVER_CALLS_MAX);
    /* One finished: room for one more. */
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_OK);
    cJSON_Delete(take(f));
    call(f, "99", "{\"language\":\"python\",\"code\":\"1\"}");
    assert_int_equal(f->calls->len, SBX_MCP_SERVER_CALLS_MAX + 1);
    assert_int_equal(f->sent->len, 0);
    fake_free(f);
}

/* ---- discovery ------------------------------------------------------------------------------- */

#define CMD "\"kind\": \"command\", \"command\": [\"/bin/cat\"]"

static const char CATALOG[] =
    "{\"providers\": {"
    "\"git-hub\": {" CMD ", \"tools\": {"
    "  \"search-issues\": {\"description\": \"Find issues\\nby words\", \"input_schema\": "
    "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}}},"
    "\"calc\": {" CMD ", \"tools\": {\"add\": {\"description\": \"a + b\", \"input_schema\": "
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\"}, \"b\": {\"type\": "
    "\"number\"}}, \"required\": [\"a\", \"b\"]}, \"output_schema\": {\"type\": \"number\"}},"
    "  \"sub\": {\"description\": \"a - b\"}}}}}";

/* Call discovery tool @name with @arguments: the result's text (isError must be @is_error). */
static char *discover(Fake *f, const char *name, const char *arguments, gboolean is_error)
{
    g_autofree char *msg = g_strdup_printf(
        "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
        "\"arguments\":%s}}",
        name, arguments);
    recv_text(f, msg);
    cJSON *v = take(f);
    assert_true(cJSON_IsBool(get(v, "result.isError")));
    assert_int_equal(cJSON_IsTrue(get(v, "result.isError")), is_error);
    char *text = g_strdup(str(v, "result.content.0.text"));
    cJSON_Delete(v);
    return text;
}

static void expect_in(const char *text, const char *needle)
{
    if (text == NULL) {
        fail_msg("expected `%s` in a text, got none", needle);
    }
    if (strstr(text, needle) == NULL) {
        fail_msg("expected `%s` in:\n%s", needle, text);
    }
}

static void test_discovery(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) catalog =
        sbx_catalog_parse(CATALOG, strlen(CATALOG), "t.json", "/", &error);
    Fake *f = fake_new();
    (void)state;

    assert_non_null(catalog);
    /* Without a catalog: execute alone. */
    initialize(f, "2025-11-25");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    cJSON *v = take(f);
    assert_int_equal(cJSON_GetArraySize(get(v, "result.tools")), 1);
    assert_null(strstr(str(v, "result.tools.0.description"), "search_tools"));
    cJSON_Delete(v);
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{"
                 "\"name\":\"list_providers\",\"arguments\":{}}}");
    expect_error(f, SBX_JSONRPC_INVALID_PARAMS, "2");

    sbx_mcp_server_set_catalog(f->server, catalog);
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    v = take(f);
    const cJSON *tools = get(v, "result.tools");
    assert_int_equal(cJSON_GetArraySize(tools), 4);
    expect_in(str(tools, "0.description"), "search_tools");
    assert_string_equal(str(tools, "1.name"), "list_providers");
    assert_string_equal(str(tools, "2.name"), "search_tools");
    assert_string_equal(str(tools, "3.name"), "get_tool_types");
    for (int i = 1; i <= 3; i++) {
        g_autofree char *path = g_strdup_printf("%d.annotations.readOnlyHint", i);
        assert_true(cJSON_IsTrue(get(tools, path)));
    }
    cJSON_Delete(v);

    g_autofree char *list = discover(f, "list_providers", "{}", FALSE);
    expect_in(list, "2 providers of host tools.");
    expect_in(list, "- git-hub (command, 1 tool): tools.git_hub\n");
    expect_in(list, "- calc (command, 2 tools): tools.calc\n");
    g_autofree char *list_bad = discover(f, "list_providers", "{\"x\":1}", TRUE);
    expect_in(list_bad, "takes no arguments");

    g_autofree char *issue = discover(f, "search_tools", "{\"query\":\"ISSUES find\"}", FALSE);
    expect_in(issue, "1 tool matches (1 shown");
    expect_in(issue, "- git-hub.search-issues: tools.git_hub.search_issues(input) - Find issues\n");
    g_autofree char *all = discover(f, "search_tools", "{\"query\":\"\",\"limit\":2}", FALSE);
    expect_in(all, "3 tools match (2 shown");
    g_autofree char *calc =
        discover(f, "search_tools", "{\"query\":\" \",\"provider\":\"calc\"}", FALSE);
    expect_in(calc, "2 tools match (2 shown");
    expect_in(calc, "- calc.sub: tools.calc.sub(input) - a - b\n");
    g_autofree char *nothing = discover(f, "search_tools", "{\"query\":\"zebra\"}", FALSE);
    expect_in(nothing, "0 tools match");
    g_autofree char *bad1 = discover(f, "search_tools", "{}", TRUE);
    expect_in(bad1, "query");
    g_autofree char *bad2 = discover(f, "search_tools", "{\"query\":\"a\",\"limit\":51}", TRUE);
    expect_in(bad2, "limit");

    g_autofree char *ts = discover(f, "get_tool_types", "{\"tools\":[\"calc.add\"]}", FALSE);
    expect_in(ts, "    add(input: { a: number; b: number; }): Promise<number>;\n");
    assert_null(strstr(ts, "git_hub"));
    assert_null(strstr(ts, "sub("));
    g_autofree char *py =
        discover(f, "get_tool_types",
                 "{\"tools\":[\"git-hub.search-issues\"],\"language\":\"python\"}", FALSE);
    expect_in(py, "    def search_issues(self, input: _Input0_search_issues) -> Any:");
    g_autofree char *unknown =
        discover(f, "get_tool_types", "{\"tools\":[\"calc.add\",\"nope.x\",7]}", TRUE);
    expect_in(unknown, "no such tools: nope.x, (not a string)");
    g_autofree char *bad3 = discover(f, "get_tool_types", "{\"tools\":[]}", TRUE);
    g_autofree char *bad4 =
        discover(f, "get_tool_types", "{\"tools\":[\"calc.add\"],\"language\":\"rb\"}", TRUE);
    expect_in(bad3, "tools");
    expect_in(bad4, "language");
    fake_free(f);
}

/* ---- batches --------------------------------------------------------------------------------- */

static const char BATCH[] =
    "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"},"
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"execute\","
    "\"arguments\":{\"language\":\"javascript\",\"code\":\"x\",\"entry\":\"f\",\"args\":[1e400]}}},"
    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"nope\"}]";

static void test_batches(void **state)
{
    Fake *f = fake_new();
    (void)state;

    /* Not before initialize, not in revisions other than 2025-03-26. */
    recv_text(f, BATCH);
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    initialize(f, "2025-11-25");
    recv_text(f, BATCH);
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    assert_int_equal(f->calls->len, 0);
    fake_free(f);

    f = fake_new();
    initialize(f, "2025-03-26");
    recv_text(f, "[]");
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    /* Held until its call finished, then one array of the answers (not the notification's). */
    recv_text(f, BATCH);
    assert_int_equal(f->sent->len, 0);
    assert_int_equal(f->calls->len, 1);
    assert_string_equal(g_ptr_array_index(f->args, 0), "javascript|x|f|[1e400]|-|30000");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 0), REPORT_OK);
    cJSON *v = take(f);
    assert_int_equal(cJSON_GetArraySize(v), 3);
    assert_int_equal(num(v, "0.id"), 1);
    assert_int_equal(num(v, "1.id"), 3);
    assert_int_equal(num(v, "1.error.code"), SBX_JSONRPC_METHOD_NOT_FOUND);
    assert_int_equal(num(v, "2.id"), 2);
    assert_non_null(get(v, "2.result.content"));
    cJSON_Delete(v);
    /* Only notifications: nothing at all; bad elements answered each. */
    recv_text(f, "[{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}]");
    assert_int_equal(f->sent->len, 0);
    recv_text(f, "[1,{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}]");
    v = take(f);
    assert_int_equal(cJSON_GetArraySize(v), 2);
    assert_int_equal(num(v, "0.error.code"), SBX_JSONRPC_INVALID_REQUEST);
    assert_string_equal(str(v, "1.id"), "p");
    cJSON_Delete(v);
    /* Too many. */
    GString *many = g_string_new("[");
    for (int i = 0; i <= SBX_MCP_SERVER_BATCH_MAX; i++) {
        g_string_append_printf(many, "%s{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}",
                               i ? "," : "", i);
    }
    g_string_append_c(many, ']');
    recv_text(f, many->str);
    g_string_free(many, TRUE);
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    /* A batch with a call in flight, its call cancelled: the rest still comes. */
    recv_text(f, BATCH);
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":2}}");
    sbx_mcp_server_finish(f->server, g_ptr_array_index(f->calls, 1), REPORT_OK);
    v = take(f);
    assert_int_equal(cJSON_GetArraySize(v), 2);
    cJSON_Delete(v);
    /* Freed with a batch held. */
    recv_text(f, BATCH);
    fake_free(f);
}

/* ---- stdio ----------------------------------------------------------------------------------- */

static void feed(Fake *f, const char *s)
{
    sbx_mcp_server_feed(f->server, (const guint8 *)s, strlen(s));
}

static void test_stdio_lines(void **state)
{
    Fake *f = fake_new();
    (void)state;

    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":1,");
    feed(f, "\"method\":\"ping\"}");
    assert_int_equal(f->sent->len, 0);
    feed(f, "\r\n\n   \n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n{\"jsonrpc\":");
    assert_int_equal(f->sent->len, 2);
    g_ptr_array_set_size(f->sent, 0);
    /* A line over the limit: answered once, skipped to its newline; the next line is read. */
    g_autofree char *big = g_strnfill(SBX_MCP_SERVER_MESSAGE_MAX, 'x');
    feed(f, big);
    expect_error(f, SBX_JSONRPC_INVALID_REQUEST, "null");
    feed(f, big);
    assert_int_equal(f->sent->len, 0);
    feed(f, "yy\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
    cJSON *v = take(f);
    assert_int_equal(num(v, "id"), 3);
    cJSON_Delete(v);
    /* The last line without its newline counts at the end. */
    feed(f, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}");
    sbx_mcp_server_feed_end(f->server);
    v = take(f);
    assert_int_equal(num(v, "id"), 4);
    cJSON_Delete(v);
    fake_free(f);
}

/* ---- sessions -------------------------------------------------------------------------------- */

/* The session ops log into args as "tool|session|path|hex of the bytes", like execute's. */
static void log_op(Fake *f, SbxMcpCall *call, const char *what)
{
    g_ptr_array_add(f->calls, call);
    g_ptr_array_add(f->args, g_strdup(what));
}

static void on_session_open(gpointer data, SbxMcpCall *call, guint idle_timeout_s,
                            guint max_lifetime_s)
{
    g_autofree char *what = idle_timeout_s == 0 && max_lifetime_s == 0
                                ? g_strdup("open")
                                : g_strdup_printf("open|%u|%u", idle_timeout_s, max_lifetime_s);
    log_op(data, call, what);
}

static void on_session_close(gpointer data, SbxMcpCall *call, const char *session)
{
    g_autofree char *what = g_strdup_printf("close|%s", session);
    log_op(data, call, what);
}

static void on_file_write(gpointer data, SbxMcpCall *call, const char *session, const char *path,
                          const guint8 *bytes, gsize len)
{
    GString *what = g_string_new(NULL);

    assert_int_equal(sbx_mcp_call_tool(call), SBX_MCP_TOOL_FILE_WRITE);
    g_string_printf(what, "write|%s|%s|", session, path);
    for (gsize i = 0; i < len; i++) {
        g_string_append_printf(what, "%02x", bytes[i]);
    }
    log_op(data, call, what->str);
    g_string_free(what, TRUE);
}

static void on_file_read(gpointer data, SbxMcpCall *call, const char *session, const char *path)
{
    g_autofree char *what = g_strdup_printf("read|%s|%s", session, path);
    log_op(data, call, what);
}

static const SbxMcpServerOps session_ops = {
    .send = on_send,
    .execute = on_execute,
    .cancel = on_cancel,
    .session_open = on_session_open,
    .session_close = on_session_close,
    .file_write = on_file_write,
    .file_read = on_file_read,
};

/* tools/call of @name with @arguments, each with an id of its own. */
static void call_tool(Fake *f, const char *name, const char *arguments)
{
    static int id = 100;
    g_autofree char *msg = g_strdup_printf(
        "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
        "\"arguments\":%s}}",
        id++, name, arguments);
    recv_text(f, msg);
}

/* The last op logged is @what; its call is returned. */
static SbxMcpCall *last_op(Fake *f, const char *what)
{
    assert_true(f->args->len > 0);
    assert_string_equal(g_ptr_array_index(f->args, f->args->len - 1), what);
    return g_ptr_array_index(f->calls, f->calls->len - 1);
}

/* Take the one answer: a tool result with isError @is_error (parsed; caller deletes). */
static cJSON *take_result(Fake *f, gboolean is_error)
{
    cJSON *v = take(f);
    assert_true(cJSON_IsBool(get(v, "result.isError")));
    if (cJSON_IsTrue(get(v, "result.isError")) != is_error) {
        fail_msg("isError is not %d: %s", is_error, str(v, "result.content.0.text"));
    }
    return v;
}

/* Open a session that finishes as @handle. */
static void open_session(Fake *f, const char *handle)
{
    SbxMcpSessionOutcome o = {.session = handle, .idle_timeout_s = 600, .max_lifetime_s = 3600};

    call_tool(f, "session_open", "{}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "open"), &o);
    cJSON_Delete(take_result(f, FALSE));
}

static void test_session_tools_list(void **state)
{
    static const char *const revisions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};
    /* name, readOnlyHint, destructiveHint, idempotentHint */
    static const struct {
        const char *name;
        gboolean ro, destructive, idempotent;
    } want[] = {
        {"session_open", FALSE, FALSE, FALSE},
        {"session_close", FALSE, TRUE, TRUE},
        {"file_write", FALSE, TRUE, TRUE},
        {"file_read", TRUE, FALSE, TRUE},
    };
    (void)state;
    for (gsize r = 0; r < G_N_ELEMENTS(revisions); r++) {
        Fake *f = fake_new_with(&session_ops);
        initialize(f, revisions[r]);
        recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
        cJSON *v = take(f);
        const cJSON *tools = get(v, "result.tools");
        assert_int_equal(cJSON_GetArraySize(tools), 5);
        assert_string_equal(str(tools, "0.name"), "execute");
        assert_string_equal(str(tools, "0.inputSchema.properties.session.type"), "string");
        expect_in(str(tools, "0.description"), "session_open");
        for (gsize i = 0; i < G_N_ELEMENTS(want); i++) {
            const cJSON *t = cJSON_GetArrayItem(tools, (int)i + 1);
            assert_string_equal(str(t, "name"), want[i].name);
            expect_in(str(t, "description"), "session");
            assert_string_equal(str(t, "inputSchema.type"), "object");
            assert_true(cJSON_IsFalse(get(t, "inputSchema.additionalProperties")));
            assert_true((get(t, "outputSchema") != NULL) ==
                        (strcmp(revisions[r], "2025-06-18") >= 0));
            if (strcmp(revisions[r], "2025-03-26") < 0) {
                assert_null(get(t, "annotations"));
                continue;
            }
            assert_int_equal(cJSON_IsTrue(get(t, "annotations.readOnlyHint")), want[i].ro);
            assert_int_equal(cJSON_IsTrue(get(t, "annotations.destructiveHint")),
                             want[i].destructive);
            assert_int_equal(cJSON_IsTrue(get(t, "annotations.idempotentHint")),
                             want[i].idempotent);
            assert_true(cJSON_IsFalse(get(t, "annotations.openWorldHint")));
        }
        cJSON_Delete(v);
        fake_free(f);
    }
}

static void test_session_calls(void **state)
{
    Fake *f = fake_new_with(&session_ops);
    SbxMcpCall *c;
    (void)state;

    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                 "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{"
                 "\"name\":\"t\",\"version\":\"1\"}}}");
    cJSON *init = take(f);
    expect_in(str(init, "result.instructions"), "session_open");
    cJSON_Delete(init);
    /* Open: the handle and limits come back. */
    call_tool(f, "session_open", "{}");
    assert_int_equal(f->sent->len, 0);
    SbxMcpSessionOutcome opened = {
        .session = "se_1", .idle_timeout_s = 600, .max_lifetime_s = 3600};
    sbx_mcp_server_finish_session(f->server, last_op(f, "open"), &opened);
    cJSON *v = take_result(f, FALSE);
    assert_string_equal(str(v, "result.structuredContent.session"), "se_1");
    assert_int_equal(num(v, "result.structuredContent.idle_timeout_s"), 600);
    assert_int_equal(num(v, "result.structuredContent.max_lifetime_s"), 3600);
    expect_in(str(v, "result.content.0.text"), "se_1");
    cJSON_Delete(v);
    g_auto(GStrv) open_now = sbx_mcp_server_sessions(f->server);
    assert_int_equal(g_strv_length(open_now), 1);
    assert_string_equal(open_now[0], "se_1");
    /* The limits asked for go to the op as they were asked (checked); a failed open is no
     * session. */
    call_tool(f, "session_open", "{\"idle_timeout_s\":5,\"max_lifetime_s\":86400}");
    SbxMcpSessionOutcome refused = {.error_code = "unavailable", .error = "full"};
    sbx_mcp_server_finish_session(f->server, last_op(f, "open|5|86400"), &refused);
    cJSON_Delete(take_result(f, TRUE));

    /* execute in it; in a session not opened here: refused, no op. */
    call(f, "6", "{\"language\":\"python\",\"code\":\"x + 1\",\"session\":\"se_1\"}");
    c = g_ptr_array_index(f->calls, f->calls->len - 1);
    assert_int_equal(sbx_mcp_call_tool(c), SBX_MCP_TOOL_EXECUTE);
    guint ops_before = f->args->len;
    call(f, "7", "{\"language\":\"python\",\"code\":\"1\",\"session\":\"se_2\"}");
    v = take_result(f, TRUE);
    expect_in(str(v, "result.content.0.text"), "se_2");
    cJSON_Delete(v);
    assert_int_equal(f->args->len, ops_before);
    sbx_mcp_server_finish(f->server, c, REPORT_OK);
    cJSON_Delete(take(f));

    /* Writes: text as UTF-8 bytes, base64 decoded (a NUL, 0xff). */
    call_tool(f, "file_write",
              "{\"session\":\"se_1\",\"path\":\"d/a.txt\",\"content\":\"h\\u00e9\"}");
    c = last_op(f, "write|se_1|d/a.txt|68c3a9");
    SbxMcpSessionOutcome wrote = {.size = 3, .sha256 = "abc"};
    sbx_mcp_server_finish_session(f->server, c, &wrote);
    v = take_result(f, FALSE);
    assert_string_equal(str(v, "result.structuredContent.path"), "d/a.txt");
    assert_int_equal(num(v, "result.structuredContent.size"), 3);
    assert_string_equal(str(v, "result.structuredContent.sha256"), "abc");
    cJSON_Delete(v);
    call_tool(f, "file_write",
              "{\"session\":\"se_1\",\"path\":\"b.bin\",\"content\":\"AAEC/w==\","
              "\"encoding\":\"base64\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "write|se_1|b.bin|000102ff"), &wrote);
    cJSON_Delete(take_result(f, FALSE));

    /* Reads: binary as base64, text as UTF-8 unless base64 is asked for. */
    static const guint8 binary[] = {0, 1, 2, 0xff};
    SbxMcpSessionOutcome got = {.size = 4, .sha256 = "def", .data = binary};
    call_tool(f, "file_read", "{\"session\":\"se_1\",\"path\":\"b.bin\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "read|se_1|b.bin"), &got);
    v = take_result(f, FALSE);
    assert_string_equal(str(v, "result.structuredContent.encoding"), "base64");
    assert_string_equal(str(v, "result.structuredContent.content"), "AAEC/w==");
    assert_int_equal(num(v, "result.structuredContent.size"), 4);
    cJSON_Delete(v);
    SbxMcpSessionOutcome text = {.size = 3, .sha256 = "0", .data = (const guint8 *)"h\xc3\xa9"};
    call_tool(f, "file_read", "{\"session\":\"se_1\",\"path\":\"d/a.txt\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "read|se_1|d/a.txt"), &text);
    v = take_result(f, FALSE);
    assert_string_equal(str(v, "result.structuredContent.encoding"), "utf-8");
    assert_string_equal(str(v, "result.structuredContent.content"), "h\xc3\xa9");
    expect_in(str(v, "result.content.0.text"), "h\xc3\xa9");
    cJSON_Delete(v);
    call_tool(f, "file_read",
              "{\"session\":\"se_1\",\"path\":\"d/a.txt\",\"encoding\":\"base64\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "read|se_1|d/a.txt"), &text);
    v = take_result(f, FALSE);
    assert_string_equal(str(v, "result.structuredContent.content"), "aMOp");
    cJSON_Delete(v);
    /* A file over the cap (its size only): a tool error that says what to do. */
    SbxMcpSessionOutcome large = {.size = SBX_MCP_FILE_MAX + 1, .sha256 = "0"};
    call_tool(f, "file_read", "{\"session\":\"se_1\",\"path\":\"big\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "read|se_1|big"), &large);
    v = take_result(f, TRUE);
    expect_in(str(v, "result.content.0.text"), "too_large");
    expect_in(str(v, "result.content.0.text"), "execute");
    cJSON_Delete(v);
    /* The transport's error: a tool error with its code and reason; the handle stays. */
    SbxMcpSessionOutcome missing = {.error_code = "not_found", .error = "no file \"nope\""};
    call_tool(f, "file_read", "{\"session\":\"se_1\",\"path\":\"nope\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "read|se_1|nope"), &missing);
    v = take_result(f, TRUE);
    expect_in(str(v, "result.content.0.text"), "not_found");
    expect_in(str(v, "result.content.0.text"), "no file");
    assert_null(get(v, "result.structuredContent"));
    cJSON_Delete(v);

    /* Close: the op, then the handle is no longer accepted. */
    call_tool(f, "session_close", "{\"session\":\"se_1\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "close|se_1"), &(SbxMcpSessionOutcome){0});
    v = take_result(f, FALSE);
    assert_true(cJSON_IsTrue(get(v, "result.structuredContent.closed")));
    cJSON_Delete(v);
    g_auto(GStrv) none = sbx_mcp_server_sessions(f->server);
    assert_int_equal(g_strv_length(none), 0);
    ops_before = f->args->len;
    call_tool(f, "file_read", "{\"session\":\"se_1\",\"path\":\"d/a.txt\"}");
    cJSON_Delete(take_result(f, TRUE));
    assert_int_equal(f->args->len, ops_before);

    /* A session gone (ended on the server's side): its handle is forgotten. */
    open_session(f, "se_3");
    SbxMcpSessionOutcome ended = {.error_code = "ended", .error = "expired", .gone = TRUE};
    call_tool(f, "file_write", "{\"session\":\"se_3\",\"path\":\"x\",\"content\":\"\"}");
    sbx_mcp_server_finish_session(f->server, last_op(f, "write|se_3|x|"), &ended);
    cJSON_Delete(take_result(f, TRUE));
    g_auto(GStrv) gone = sbx_mcp_server_sessions(f->server);
    assert_int_equal(g_strv_length(gone), 0);
    assert_int_equal(sbx_mcp_server_calls(f->server), 0);
    fake_free(f);
}

static void test_session_bad_arguments(void **state)
{
    static const char *const bad[][3] = {
        {"session_open", "{\"profile\":\"x\"}", "profile"},
        {"session_open", "{\"idle_timeout_s\":0}", "idle_timeout_s"},
        {"session_open", "{\"idle_timeout_s\":\"60\"}", "idle_timeout_s"},
        {"session_open", "{\"idle_timeout_s\":1.5}", "idle_timeout_s"},
        {"session_open", "{\"max_lifetime_s\":86401}", "max_lifetime_s"},
        {"session_close", "{}", "session"},
        {"session_close", "{\"session\":\"a b\"}", "session"},
        {"file_read", "{\"session\":\"se_1\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"../etc/passwd\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"/etc/passwd\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"a//b\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"a/./b\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"a\\u0001\"}", "path"},
        {"file_read", "{\"session\":\"se_1\",\"path\":\"a\",\"encoding\":\"latin1\"}", "encoding"},
        {"file_write", "{\"session\":\"se_1\",\"path\":\"a\"}", "content"},
        {"file_write", "{\"session\":\"se_1\",\"path\":\"a\",\"content\":7}", "content"},
        {"file_write",
         "{\"session\":\"se_1\",\"path\":\"a\",\"content\":\"AAE\",\"encoding\":\"base64\"}",
         "base64"},
        {"file_write",
         "{\"session\":\"se_1\",\"path\":\"a\",\"content\":\"AA E=\",\"encoding\":\"base64\"}",
         "base64"},
        {"file_write", "{\"session\":\"se_1\",\"path\":\"a\",\"content\":\"\",\"mode\":1}", "mode"},
        {"file_write", "{\"session\":\"se_9\",\"path\":\"a\",\"content\":\"\"}", "se_9"},
    };
    Fake *f = fake_new_with(&session_ops);
    (void)state;

    initialize(f, "2025-11-25");
    open_session(f, "se_1");
    guint ops_before = f->args->len;
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        call_tool(f, bad[i][0], bad[i][1]);
        if (f->sent->len != 1) {
            fail_msg("%s %s: no answer", bad[i][0], bad[i][1]);
        }
        cJSON *v = take_result(f, TRUE);
        const char *text = str(v, "result.content.0.text");
        if (strstr(text, bad[i][2]) == NULL) {
            fail_msg("%s %s: \"%s\" does not name %s", bad[i][0], bad[i][1], text, bad[i][2]);
        }
        cJSON_Delete(v);
    }
    /* Content over the cap, as text and as base64. */
    g_autofree char *big = g_strnfill(SBX_MCP_FILE_MAX + 1, 'x');
    g_autofree char *args =
        g_strdup_printf("{\"session\":\"se_1\",\"path\":\"a\",\"content\":\"%s\"}", big);
    call_tool(f, "file_write", args);
    cJSON_Delete(take_result(f, TRUE));
    g_autofree guint8 *zeros = g_malloc0(SBX_MCP_FILE_MAX + 1);
    g_autofree char *b64 = g_base64_encode(zeros, SBX_MCP_FILE_MAX + 1);
    g_autofree char *args64 = g_strdup_printf(
        "{\"session\":\"se_1\",\"path\":\"a\",\"content\":\"%s\",\"encoding\":\"base64\"}", b64);
    call_tool(f, "file_write", args64);
    cJSON_Delete(take_result(f, TRUE));
    assert_int_equal(f->args->len, ops_before);
    /* Exactly the cap is fine. */
    g_autofree char *cap = g_base64_encode(zeros, SBX_MCP_FILE_MAX);
    g_autofree char *args_cap = g_strdup_printf(
        "{\"session\":\"se_1\",\"path\":\"a\",\"content\":\"%s\",\"encoding\":\"base64\"}", cap);
    call_tool(f, "file_write", args_cap);
    assert_int_equal(f->args->len, ops_before + 1);
    sbx_mcp_server_finish_session(f->server, g_ptr_array_index(f->calls, f->calls->len - 1),
                                  &(SbxMcpSessionOutcome){.size = SBX_MCP_FILE_MAX});
    cJSON_Delete(take_result(f, FALSE));
    fake_free(f);
}

static void test_session_bound(void **state)
{
    Fake *f = fake_new_with(&session_ops);
    SbxMcpCall *opens[SBX_MCP_SESSIONS_MAX];
    (void)state;

    initialize(f, "2025-11-25");
    /* Opens in flight count. */
    for (int i = 0; i < SBX_MCP_SESSIONS_MAX; i++) {
        call_tool(f, "session_open", "{}");
        opens[i] = last_op(f, "open");
    }
    call_tool(f, "session_open", "{}");
    cJSON *v = take_result(f, TRUE);
    expect_in(str(v, "result.content.0.text"), "session_close");
    cJSON_Delete(v);
    /* A failed open frees its place. */
    sbx_mcp_server_finish_session(
        f->server, opens[0], &(SbxMcpSessionOutcome){.error_code = "unavailable", .error = "no"});
    cJSON_Delete(take_result(f, TRUE));
    for (int i = 1; i < SBX_MCP_SESSIONS_MAX; i++) {
        g_autofree char *handle = g_strdup_printf("se_%d", i);
        sbx_mcp_server_finish_session(f->server, opens[i],
                                      &(SbxMcpSessionOutcome){.session = handle});
        cJSON_Delete(take_result(f, FALSE));
    }
    open_session(f, "se_9");
    call_tool(f, "session_open", "{}");
    cJSON_Delete(take_result(f, TRUE));
    g_auto(GStrv) open_now = sbx_mcp_server_sessions(f->server);
    assert_int_equal(g_strv_length(open_now), SBX_MCP_SESSIONS_MAX);
    fake_free(f);
}

static void test_session_cancelled_open(void **state)
{
    Fake *f = fake_new_with(&session_ops);
    (void)state;

    initialize(f, "2025-11-25");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"id\":\"o\",\"method\":\"tools/call\",\"params\":"
                 "{\"name\":\"session_open\",\"arguments\":{}}}");
    SbxMcpCall *c = last_op(f, "open");
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":\"o\"}}");
    assert_int_equal(f->cancelled->len, 1);
    assert_ptr_equal(g_ptr_array_index(f->cancelled, 0), c);
    sbx_mcp_server_finish_session(f->server, c, &(SbxMcpSessionOutcome){.session = "se_5"});
    assert_int_equal(f->sent->len, 0); /* no answer after a cancel */
    g_auto(GStrv) open_now = sbx_mcp_server_sessions(f->server);
    assert_int_equal(g_strv_length(open_now), 1);
    assert_string_equal(open_now[0], "se_5");
    /* Without the session ops: no session tools, and execute takes no session. */
    Fake *plain = fake_new();
    initialize(plain, "2025-11-25");
    recv_text(plain, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":"
                     "{\"name\":\"session_open\",\"arguments\":{}}}");
    expect_error(plain, SBX_JSONRPC_INVALID_PARAMS, "5");
    call(plain, "6", "{\"language\":\"python\",\"code\":\"1\",\"session\":\"se_5\"}");
    cJSON *v = take_result(plain, TRUE);
    expect_in(str(v, "result.content.0.text"), "no sessions");
    cJSON_Delete(v);
    fake_free(plain);
    fake_free(f);
}

/* ---- approvals through the client (elicitation) -------------------------------------------------
 */

/* Initialize with @caps as the client's capabilities. */
static void initialize_caps(Fake *f, const char *version, const char *caps)
{
    g_autofree char *msg =
        g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                        "\"protocolVersion\":\"%s\",\"capabilities\":%s,\"clientInfo\":{\"name\":"
                        "\"claude-code\",\"version\":\"1\"}}}",
                        version, caps);
    recv_text(f, msg);
    cJSON_Delete(take(f));
}

/* The outcomes of the elicitations, in the order their funcs were called. */
static GArray *outcomes;

static void on_elicit(SbxMcpServer *server, SbxMcpElicitOutcome outcome, gpointer data)
{
    (void)server;
    assert_ptr_equal(data, &outcomes);
    g_array_append_val(outcomes, outcome);
}

static const SbxMcpApprovalAsk ASK = {.provider = "github",
                                      .tool = "delete_repo",
                                      .input_json = "{\"repo\":\"old\"}",
                                      .timeout_ms = 60000};

static guint64 ask(Fake *f, SbxMcpCall *c)
{
    return sbx_mcp_server_elicit_approval(f->server, c, &ASK, on_elicit, &outcomes);
}

static SbxMcpElicitOutcome last_outcome(void)
{
    assert_true(outcomes->len > 0);
    return g_array_index(outcomes, SbxMcpElicitOutcome, outcomes->len - 1);
}

static void test_elicit_capability(void **state)
{
    static const struct {
        const char *version, *caps;
        gboolean can;
    } cases[] = {
        {"2025-11-25", "{}", FALSE},
        {"2025-11-25", "{\"elicitation\":{}}", TRUE},
        {"2025-11-25", "{\"elicitation\":{\"form\":{}}}", TRUE},
        {"2025-11-25", "{\"elicitation\":{\"url\":{}}}", FALSE},
        {"2025-11-25", "{\"elicitation\":true}", FALSE},
        {"2025-06-18", "{\"elicitation\":{}}", TRUE},
        {"2025-03-26", "{\"elicitation\":{}}", FALSE},
    };
    (void)state;
    outcomes = g_array_new(FALSE, FALSE, sizeof(SbxMcpElicitOutcome));
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        Fake *f = fake_new();
        assert_false(sbx_mcp_server_can_elicit(f->server));
        assert_null(sbx_mcp_server_client_name(f->server));
        initialize_caps(f, cases[i].version, cases[i].caps);
        assert_int_equal(sbx_mcp_server_can_elicit(f->server), cases[i].can);
        assert_string_equal(sbx_mcp_server_client_name(f->server), "claude-code");
        call(f, "1", "{\"language\":\"python\",\"code\":\"1\"}");
        guint64 id = ask(f, g_ptr_array_index(f->calls, 0));
        /* A client that cannot be asked is not: nothing sent, no func (the API's approvals). */
        assert_int_equal(id != 0, cases[i].can);
        assert_int_equal(f->sent->len, cases[i].can ? 1 : 0);
        g_ptr_array_set_size(f->sent, 0);
        fake_free(f);
    }
    /* Only the free of the ones asked: cancelled, told to nobody. */
    assert_int_equal(outcomes->len, 3);
    g_array_unref(outcomes);
}

static void test_elicit_answers(void **state)
{
    static const struct {
        const char *result;
        SbxMcpElicitOutcome outcome;
    } cases[] = {
        {"\"result\":{\"action\":\"accept\",\"content\":{\"approve\":true}}",
         SBX_MCP_ELICIT_APPROVED},
        {"\"result\":{\"action\":\"accept\",\"content\":{\"approve\":false}}",
         SBX_MCP_ELICIT_DENIED},
        {"\"result\":{\"action\":\"accept\",\"content\":{\"approve\":\"true\"}}",
         SBX_MCP_ELICIT_DENIED},
        {"\"result\":{\"action\":\"accept\"}", SBX_MCP_ELICIT_DENIED},
        {"\"result\":{\"action\":\"decline\"}", SBX_MCP_ELICIT_DENIED},
        {"\"result\":{\"action\":\"cancel\"}", SBX_MCP_ELICIT_DENIED},
        {"\"result\":{\"action\":\"decline\",\"content\":{\"approve\":true}}",
         SBX_MCP_ELICIT_DENIED},
        {"\"error\":{\"code\":-32601,\"message\":\"no\"}", SBX_MCP_ELICIT_DENIED},
        {"\"result\":\"accept\"", SBX_MCP_ELICIT_DENIED},
        {"\"result\":[1,2]", SBX_MCP_ELICIT_DENIED},
        {"\"result\":null", SBX_MCP_ELICIT_DENIED},
    };
    Fake *f = fake_new();
    (void)state;

    outcomes = g_array_new(FALSE, FALSE, sizeof(SbxMcpElicitOutcome));
    initialize_caps(f, "2025-11-25", "{\"elicitation\":{}}");
    call(f, "\"c\"", "{\"language\":\"python\",\"code\":\"1\"}");
    SbxMcpCall *c = g_ptr_array_index(f->calls, 0);
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        guint64 id = ask(f, c);
        assert_true(id > 0);
        assert_ptr_equal(sbx_mcp_server_elicit_call(f->server, id), c);
        cJSON *v = take(f);
        assert_int_equal(num(v, "id"), (gint64)id);
        assert_string_equal(str(v, "method"), "elicitation/create");
        expect_in(str(v, "params.message"), "delete_repo");
        expect_in(str(v, "params.message"), "github");
        expect_in(str(v, "params.message"), "{\"repo\":\"old\"}");
        assert_string_equal(str(v, "params.requestedSchema.type"), "object");
        assert_string_equal(str(v, "params.requestedSchema.properties.approve.type"), "boolean");
        assert_string_equal(str(v, "params.requestedSchema.required.0"), "approve");
        cJSON_Delete(v);
        /* Unknown ids and ids of another type answer nothing of ours: ignored. */
        g_autofree char *other = g_strdup_printf(
            "{\"jsonrpc\":\"2.0\",\"id\":%" G_GUINT64_FORMAT ",%s}", id + 1000, cases[i].result);
        g_autofree char *as_string = g_strdup_printf(
            "{\"jsonrpc\":\"2.0\",\"id\":\"%" G_GUINT64_FORMAT "\",%s}", id, cases[i].result);
        recv_text(f, other);
        recv_text(f, as_string);
        assert_int_equal(outcomes->len, i);
        g_autofree char *answer = g_strdup_printf(
            "{\"jsonrpc\":\"2.0\",\"id\":%" G_GUINT64_FORMAT ",%s}", id, cases[i].result);
        recv_text(f, answer);
        assert_int_equal(outcomes->len, i + 1);
        assert_int_equal(last_outcome(), cases[i].outcome);
        /* Answered: nothing sent back, a second answer ignored. */
        recv_text(f, answer);
        assert_int_equal(outcomes->len, i + 1);
        assert_int_equal(f->sent->len, 0);
        assert_int_equal(sbx_mcp_server_elicits(f->server), 0);
    }
    /* A long input is cut in the message, its size said. */
    GString *big = g_string_new("{\"text\":\"");
    for (int i = 0; i < 3000; i++) {
        g_string_append(big, "\xc3\xa9"); /* two bytes each: a cut must not split one */
    }
    g_string_append(big, "\"}");
    SbxMcpApprovalAsk long_ask = ASK;
    long_ask.input_json = big->str;
    assert_true(sbx_mcp_server_elicit_approval(f->server, c, &long_ask, on_elicit, &outcomes) > 0);
    cJSON *v = take(f);
    expect_in(str(v, "params.message"), "(6011 bytes in all)");
    assert_true(strlen(str(v, "params.message")) < SBX_MCP_ELICIT_INPUT_MAX + 400);
    assert_true(g_utf8_validate(str(v, "params.message"), -1, NULL));
    cJSON_Delete(v);
    g_string_free(big, TRUE);
    /* The call's finish withdraws it: notifications/cancelled, then the call's answer. */
    sbx_mcp_server_finish(f->server, c, REPORT_OK);
    assert_int_equal(last_outcome(), SBX_MCP_ELICIT_CANCELLED);
    assert_int_equal(f->sent->len, 2);
    expect_in(g_ptr_array_index(f->sent, 0), "\"method\":\"notifications/cancelled\"");
    expect_in(g_ptr_array_index(f->sent, 1), "\"id\":\"c\"");
    g_ptr_array_set_size(f->sent, 0);
    fake_free(f);
    g_array_unref(outcomes);
}

static gboolean quit_loop(gpointer data)
{
    g_main_loop_quit(data);
    return G_SOURCE_REMOVE;
}

static void test_elicit_bound_cancel_timeout(void **state)
{
    Fake *f = fake_new();
    (void)state;

    outcomes = g_array_new(FALSE, FALSE, sizeof(SbxMcpElicitOutcome));
    initialize_caps(f, "2025-11-25", "{\"elicitation\":{}}");
    call(f, "1", "{\"language\":\"python\",\"code\":\"1\"}");
    call(f, "2", "{\"language\":\"python\",\"code\":\"1\"}");
    SbxMcpCall *c1 = g_ptr_array_index(f->calls, 0);
    SbxMcpCall *c2 = g_ptr_array_index(f->calls, 1);
    guint64 ids[SBX_MCP_ELICITS_MAX];
    for (int i = 0; i < SBX_MCP_ELICITS_MAX; i++) {
        ids[i] = ask(f, i % 2 ? c2 : c1);
        assert_true(ids[i] > 0);
    }
    /* Bounded: one more is not asked (it waits for the API's approvals). */
    assert_int_equal(ask(f, c1), 0);
    assert_int_equal(f->sent->len, SBX_MCP_ELICITS_MAX);
    g_ptr_array_set_size(f->sent, 0);
    /* Withdrawn: the client told, func CANCELLED; then a late answer is ignored. */
    sbx_mcp_server_elicit_cancel(f->server, ids[0]);
    cJSON *v = take(f);
    assert_string_equal(str(v, "method"), "notifications/cancelled");
    assert_int_equal(num(v, "params.requestId"), (gint64)ids[0]);
    cJSON_Delete(v);
    assert_int_equal(last_outcome(), SBX_MCP_ELICIT_CANCELLED);
    sbx_mcp_server_elicit_cancel(f->server, ids[0]); /* twice: nothing */
    assert_int_equal(f->sent->len, 0);
    assert_int_equal(ask(f, c1) > 0, TRUE); /* room again */
    g_ptr_array_set_size(f->sent, 0);
    /* A cancelled call's approvals are not asked. */
    recv_text(f, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                 "{\"requestId\":2}}");
    guint before = outcomes->len;
    for (int i = 1; i < SBX_MCP_ELICITS_MAX; i += 2) {
        sbx_mcp_server_elicit_cancel(f->server, ids[i]); /* c2's */
    }
    g_ptr_array_set_size(f->sent, 0);
    assert_int_equal(outcomes->len, before + SBX_MCP_ELICITS_MAX / 2);
    assert_int_equal(ask(f, c2), 0);
    /* Timed out: TIMED_OUT, the client told; its late answer ignored. */
    SbxMcpApprovalAsk quick = ASK;
    quick.timeout_ms = 20;
    guint64 q = sbx_mcp_server_elicit_approval(f->server, c1, &quick, on_elicit, &outcomes);
    assert_true(q > 0);
    g_ptr_array_set_size(f->sent, 0);
    before = outcomes->len;
    g_autoptr(GMainLoop) loop = g_main_loop_new(NULL, FALSE);
    guint guard = g_timeout_add(5000, quit_loop, loop);
    while (outcomes->len == before && g_main_context_iteration(NULL, TRUE)) {
    }
    g_source_remove(guard);
    assert_int_equal(outcomes->len, before + 1);
    assert_int_equal(last_outcome(), SBX_MCP_ELICIT_TIMED_OUT);
    v = take(f);
    assert_string_equal(str(v, "method"), "notifications/cancelled");
    assert_int_equal(num(v, "params.requestId"), (gint64)q);
    cJSON_Delete(v);
    g_autofree char *late =
        g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":%" G_GUINT64_FORMAT
                        ",\"result\":{\"action\":\"accept\",\"content\":{\"approve\":true}}}",
                        q);
    recv_text(f, late);
    assert_int_equal(outcomes->len, before + 1);
    /* The free ends the rest: CANCELLED, nothing sent. */
    guint left = sbx_mcp_server_elicits(f->server);
    assert_true(left > 0);
    before = outcomes->len;
    sbx_mcp_server_free(f->server);
    f->server = NULL;
    assert_int_equal(outcomes->len, before + left);
    assert_int_equal(f->sent->len, 0);
    fake_free(f);
    g_array_unref(outcomes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_initialize_versions),
        cmocka_unit_test(test_before_initialize),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_notifications_unanswered),
        cmocka_unit_test(test_tools_list),
        cmocka_unit_test(test_call_ok),
        cmocka_unit_test(test_call_failed),
        cmocka_unit_test(test_call_old_revision),
        cmocka_unit_test(test_call_bad_arguments),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_output),
        cmocka_unit_test(test_calls_bounded),
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_stdio_lines),
        cmocka_unit_test(test_session_tools_list),
        cmocka_unit_test(test_session_calls),
        cmocka_unit_test(test_session_bad_arguments),
        cmocka_unit_test(test_session_bound),
        cmocka_unit_test(test_session_cancelled_open),
        cmocka_unit_test(test_elicit_capability),
        cmocka_unit_test(test_elicit_answers),
        cmocka_unit_test(test_elicit_bound_cancel_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
