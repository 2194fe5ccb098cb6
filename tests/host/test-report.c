/*
 * The --json report of `sandbox run` (host-agent/exec/report.c): valid JSON whatever the bytes
 * of the output, real tool names, the failure form.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cJSON.h>
#include <string.h>

#include "exec/report.h"
#include "session.h"
#include "tools.h"

static cJSON *parse(const char *text)
{
    cJSON *v = cJSON_Parse(text);
    if (v == NULL) {
        fail_msg("not JSON: %s", text);
    }
    return v;
}

static void test_escaping(void **state)
{
    (void)state;
    static const char bytes[] = "a\0b\"\\\n\t\x01\x7f\xff\xc3\xa9\xe2\x82";
    GString *s = g_string_new(NULL);

    sbx_json_append_string(s, bytes, sizeof(bytes) - 1);
    assert_string_equal(s->str, "\"a\xef\xbf\xbd"
                                "b\\\"\\\\\\n\\t\\u0001\x7f\xef\xbf\xbd\xc3\xa9"
                                "\xef\xbf\xbd\xef\xbf\xbd\"");
    g_autofree char *doc = g_strdup_printf("[%s]", s->str);
    cJSON *v = parse(doc);
    cJSON_Delete(v);
    g_string_free(s, TRUE);
}

static void test_result(void **state)
{
    (void)state;
    SbxRunResult r = {.status = SBX_STATUS_ERROR, .exit_code = 1, .has_error = TRUE};
    SbxToolRecord ok = {.call_id = 1,
                        .provider = "my_tools",
                        .tool = "do_it",
                        .input_json = "{\"a\":1}",
                        .answered = TRUE,
                        .ok = TRUE,
                        .result_json = "[1,2]",
                        .duration_ms = 5};
    SbxToolRecord bad = {.call_id = 2,
                         .provider = "ghost",
                         .tool = "x",
                         .input_json = "null",
                         .answered = TRUE,
                         .error = {.code = SBX_ERR_POLICY_DENIED, .message = "no"},
                         .policy_json = "{\"action\":\"deny\",\"rule\":\"ghost.*\"}"};
    SbxToolRecord open = {.call_id = 3, .provider = "my_tools", .tool = "do_it", .input_json = "0"};
    const char *providers[] = {"my-tools"};
    const char *t0[] = {"do.it", NULL};
    const char *const *tools[] = {t0};
    g_autoptr(SbxNamespace) ns = sbx_namespace_new();

    assert_true(sbx_namespace_build(ns, providers, tools, 1, NULL));
    r.error.code = SBX_ERR_RUNTIME;
    r.error.type = "TypeError";
    r.error.message = "bad \"thing\"";
    r.collected[SBX_STREAM_STDOUT] = g_byte_array_new();
    g_byte_array_append(r.collected[SBX_STREAM_STDOUT], (const guint8 *)"out\0put", 7);
    r.tool_calls = g_ptr_array_new();
    g_ptr_array_add(r.tool_calls, &ok);
    g_ptr_array_add(r.tool_calls, &bad);
    g_ptr_array_add(r.tool_calls, &open);
    r.duration_ms = 12;
    SbxReport rep = {.result = &r, .ns = ns, .boot_ms = 1500};

    g_autofree char *text = sbx_report_json(&rep);
    cJSON *v = parse(text);
    assert_string_equal(cJSON_GetObjectItem(v, "status")->valuestring, "error");
    assert_int_equal(cJSON_GetObjectItem(v, "exit_code")->valueint, 1);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(v, "result")));
    cJSON *err = cJSON_GetObjectItem(v, "error");
    assert_string_equal(cJSON_GetObjectItem(err, "code")->valuestring, "runtime_error");
    assert_string_equal(cJSON_GetObjectItem(err, "message")->valuestring, "bad \"thing\"");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(err, "stack")));
    assert_string_equal(cJSON_GetObjectItem(v, "stderr")->valuestring, "");
    assert_int_equal(cJSON_GetObjectItem(v, "boot_ms")->valueint, 1500);
    cJSON *calls = cJSON_GetObjectItem(v, "tool_calls");
    assert_int_equal(cJSON_GetArraySize(calls), 3);
    cJSON *c0 = cJSON_GetArrayItem(calls, 0);
    assert_string_equal(cJSON_GetObjectItem(c0, "provider")->valuestring, "my-tools");
    assert_string_equal(cJSON_GetObjectItem(c0, "tool")->valuestring, "do.it");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(c0, "result")), 2);
    cJSON *c1 = cJSON_GetArrayItem(calls, 1);
    assert_string_equal(cJSON_GetObjectItem(c1, "provider")->valuestring, "ghost");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(c1, "ok")));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(c1, "error"), "code")->valuestring,
                        "policy_denied");
    cJSON *pol = cJSON_GetObjectItem(c1, "policy");
    assert_string_equal(cJSON_GetObjectItem(pol, "action")->valuestring, "deny");
    assert_string_equal(cJSON_GetObjectItem(pol, "rule")->valuestring, "ghost.*");
    assert_null(cJSON_GetObjectItem(c0, "policy")); /* no decision recorded: no field */
    cJSON *c2 = cJSON_GetArrayItem(calls, 2);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(c2, "answered")));
    assert_null(cJSON_GetObjectItem(c2, "ok"));
    cJSON_Delete(v);
    g_byte_array_unref(r.collected[SBX_STREAM_STDOUT]);
    g_ptr_array_unref(r.tool_calls);
}

static void test_failure(void **state)
{
    (void)state;
    SbxReport rep = {
        .failure = "the VM did not boot\n", .failure_status = SBX_STATUS_CRASH, .boot_ms = -1};
    g_autofree char *text = sbx_report_json(&rep);
    cJSON *v = parse(text);

    assert_string_equal(cJSON_GetObjectItem(v, "status")->valuestring, "crash");
    assert_string_equal(
        cJSON_GetObjectItem(cJSON_GetObjectItem(v, "error"), "message")->valuestring,
        "the VM did not boot\n");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(v, "tool_calls")), 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(v, "boot_ms")));
    assert_true(text[strlen(text) - 1] == '\n');
    cJSON_Delete(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_result),
        cmocka_unit_test(test_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
