/*
 * The HTTP API's execution object (host-agent/server/http-object.c) from a record, as a server
 * shows executions it no longer holds: every member of the Execution schema, the summary
 * without the large ones, output bytes as text, result literals kept, tool calls answered,
 * failed and never answered, and the statuses before and after the end.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cJSON.h>
#include <string.h>

#include "server/http-object.h"

static cJSON *parse(const char *text)
{
    cJSON *v = cJSON_Parse(text);
    if (v == NULL) {
        fail_msg("not JSON: %s", text);
    }
    return v;
}

static cJSON *member(const cJSON *obj, const char *name)
{
    cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (m == NULL) {
        fail_msg("no member %s", name);
    }
    return m;
}

static const char *const SUMMARY[] = {"id",         "status",      "language",   "created_at",
                                      "started_at", "finished_at", "timeout_ms", "output_limit",
                                      "catalog",    "session",     "exit_code",  "output_truncated",
                                      "duration_ms"};
static const char *const FULL_ONLY[] = {"result", "error", "stdout", "stderr", "tool_calls"};

static SbxRecord ended_record(void)
{
    static char out[] = "a\0b\xff\n";
    return (SbxRecord){
        .id = "ex_0a1b",
        .tenant_id = "t1",
        .language = "python",
        .catalog = "github",
        .timeout_ms = 30000,
        .output_limit = 100,
        .status = "ok",
        .has_exit_code = TRUE,
        .exit_code = 0,
        .result_json = "[1,2.50,1e400]",
        .stdout_data = out,
        .stdout_len = sizeof(out) - 1,
        .stderr_truncated = TRUE,
        .created_at_ms = 1795900086337,
        .started_at_ms = 1795900086340,
        .finished_at_ms = 1795900086375,
        .duration_ms = 34,
    };
}

static void test_ended_full(void **state)
{
    (void)state;
    SbxRecord r = ended_record();
    SbxRecordCall ok = {.call_id = 1,
                        .provider = "github",
                        .tool = "search",
                        .input_json = "{\"q\":\"x\"}",
                        .ok = TRUE,
                        .result_json = "{\"n\":3.0}",
                        .policy_json = "{\"decision\":\"allow\"}",
                        .duration_ms = 5};
    SbxRecordCall failed = {.call_id = 2,
                            .provider = "github",
                            .tool = "delete",
                            .input_json = "{}",
                            .error_json = "{\"code\":\"policy_denied\",\"type\":null,"
                                          "\"message\":\"no\",\"stack\":null}"};
    SbxRecordCall dropped = {.call_id = 3, .provider = "p", .tool = "t", .input_json = "1"};
    g_autoptr(GPtrArray) calls = g_ptr_array_new();
    SbxHttpObject o;

    g_ptr_array_add(calls, &ok);
    g_ptr_array_add(calls, &failed);
    g_ptr_array_add(calls, &dropped);
    g_autofree char *calls_json = sbx_http_object_calls_stored(calls);
    sbx_http_object_from_record(&o, &r, calls_json);
    g_autofree char *text = sbx_http_object_json(&o, TRUE);
    cJSON *v = parse(text);

    for (gsize i = 0; i < G_N_ELEMENTS(SUMMARY); i++) {
        member(v, SUMMARY[i]);
    }
    for (gsize i = 0; i < G_N_ELEMENTS(FULL_ONLY); i++) {
        member(v, FULL_ONLY[i]);
    }
    assert_string_equal(member(v, "id")->valuestring, "ex_0a1b");
    assert_string_equal(member(v, "status")->valuestring, "ok");
    assert_string_equal(member(v, "catalog")->valuestring, "github");
    assert_string_equal(member(v, "created_at")->valuestring, "2026-11-28T21:08:06.337000Z");
    assert_int_equal(member(v, "exit_code")->valueint, 0);
    assert_int_equal(member(v, "duration_ms")->valueint, 34);
    assert_true(cJSON_IsTrue(member(v, "output_truncated"))); /* stderr was cut */
    /* The result's literals as recorded, not re-printed numbers. */
    assert_non_null(strstr(text, "\"result\":[1,2.50,1e400]"));
    assert_true(cJSON_IsNull(member(v, "error")));
    assert_string_equal(member(v, "stdout")->valuestring, "a\xef\xbf\xbd"
                                                          "b\xef\xbf\xbd\n");
    assert_string_equal(member(v, "stderr")->valuestring, "");
    cJSON *tc = member(v, "tool_calls");
    assert_int_equal(cJSON_GetArraySize(tc), 3);
    cJSON *c0 = cJSON_GetArrayItem(tc, 0), *c1 = cJSON_GetArrayItem(tc, 1),
          *c2 = cJSON_GetArrayItem(tc, 2);
    assert_true(cJSON_IsTrue(member(c0, "ok")));
    assert_non_null(strstr(text, "\"result\":{\"n\":3.0}"));
    assert_true(cJSON_IsNull(member(c0, "error")));
    assert_int_equal(member(c0, "duration_ms")->valueint, 5);
    assert_string_equal(member(member(c0, "policy"), "decision")->valuestring, "allow");
    assert_true(cJSON_IsFalse(member(c1, "ok")));
    assert_string_equal(member(member(c1, "error"), "code")->valuestring, "policy_denied");
    assert_true(cJSON_IsNull(member(c1, "result")));
    /* Never answered (the execution ended first): ok and duration are null. */
    assert_true(cJSON_IsNull(member(c2, "ok")));
    assert_true(cJSON_IsNull(member(c2, "duration_ms")));
    assert_true(cJSON_IsNull(member(c2, "policy")));
    cJSON_Delete(v);
}

static void test_summary(void **state)
{
    (void)state;
    SbxRecord r = ended_record();
    SbxHttpObject o;

    sbx_http_object_from_record(&o, &r, NULL);
    g_autofree char *text = sbx_http_object_json(&o, FALSE);
    cJSON *v = parse(text);
    for (gsize i = 0; i < G_N_ELEMENTS(SUMMARY); i++) {
        member(v, SUMMARY[i]);
    }
    for (gsize i = 0; i < G_N_ELEMENTS(FULL_ONLY); i++) {
        assert_null(cJSON_GetObjectItemCaseSensitive(v, FULL_ONLY[i]));
    }
    assert_int_equal(cJSON_GetArraySize(v), G_N_ELEMENTS(SUMMARY));
    cJSON_Delete(v);
}

/* Interrupted by a server's end: ended, but no exit code, duration or result. */
static void test_interrupted(void **state)
{
    (void)state;
    SbxRecord r = {.id = "ex_1",
                   .language = "javascript",
                   .timeout_ms = 1000,
                   .output_limit = 10,
                   .status = "interrupted",
                   .created_at_ms = 1000,
                   .started_at_ms = 1001,
                   .finished_at_ms = 5000};
    SbxHttpObject o;

    sbx_http_object_from_record(&o, &r, NULL);
    g_autofree char *text = sbx_http_object_json(&o, TRUE);
    cJSON *v = parse(text);
    assert_string_equal(member(v, "status")->valuestring, "interrupted");
    assert_true(cJSON_IsNull(member(v, "exit_code")));
    assert_true(cJSON_IsNull(member(v, "duration_ms")));
    assert_true(cJSON_IsNull(member(v, "result")));
    assert_true(cJSON_IsNull(member(v, "catalog")));
    assert_string_equal(member(v, "finished_at")->valuestring, "1970-01-01T00:00:05Z");
    assert_int_equal(cJSON_GetArraySize(member(v, "tool_calls")), 0);
    cJSON_Delete(v);
}

/* A record still running (a live execution's): the outcome stays null whatever is stored. */
static void test_running(void **state)
{
    (void)state;
    SbxRecord r = ended_record();
    SbxHttpObject o;

    r.status = "running";
    r.finished_at_ms = 0;
    sbx_http_object_from_record(&o, &r, NULL);
    g_autofree char *text = sbx_http_object_json(&o, TRUE);
    cJSON *v = parse(text);
    assert_true(cJSON_IsNull(member(v, "finished_at")));
    assert_true(cJSON_IsNull(member(v, "exit_code")));
    assert_true(cJSON_IsNull(member(v, "result")));
    assert_true(cJSON_IsNull(member(v, "duration_ms")));
    assert_true(cJSON_IsFalse(member(v, "output_truncated")));
    cJSON_Delete(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ended_full),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_interrupted),
        cmocka_unit_test(test_running),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
