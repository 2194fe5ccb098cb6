/*
 * The JSON builder and escaper (host-agent/base/json-builder.c): commas and nesting kept by the
 * builder, every value kind, strings of any bytes escaped into valid JSON that our strict parser
 * accepts (control characters escaped, NUL and invalid UTF-8 as U+FFFD), JSON texts of ours
 * inserted as they are.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "base/json-builder.h"
#include "protocol/json.h"
#include "protocol/limits.h"

/* @text parses as JSON (with the project's parser). */
static void assert_json(const char *text)
{
    cJSON *v = sbx_json_parse(text, strlen(text), SBX_JSON_DEPTH_MAX, NULL);

    if (v == NULL) {
        fail_msg("not JSON: %s", text);
    }
    cJSON_Delete(v);
}

static void test_nesting(void **state)
{
    SbxJsonb b;
    (void)state;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "a", "x");
    sbx_jsonb_key(&b, "list");
    sbx_jsonb_begin_array(&b);
    sbx_jsonb_int(&b, -1);
    sbx_jsonb_uint(&b, G_MAXUINT64);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_end_object(&b);
    sbx_jsonb_begin_array(&b);
    sbx_jsonb_end_array(&b);
    sbx_jsonb_bool(&b, TRUE);
    sbx_jsonb_null(&b);
    sbx_jsonb_string(&b, NULL);
    sbx_jsonb_end_array(&b);
    sbx_jsonb_member_bool(&b, "f", FALSE);
    sbx_jsonb_member_int(&b, "n", G_MININT64);
    sbx_jsonb_member_uint(&b, "u", 0);
    sbx_jsonb_member_raw(&b, "raw", "{\"big\":1e400,\"x\":0.10}");
    sbx_jsonb_member_raw(&b, "none", NULL);
    sbx_jsonb_end_object(&b);
    g_autofree char *text = sbx_jsonb_finish(&b);
    assert_string_equal(text,
                        "{\"a\":\"x\",\"list\":[-1,18446744073709551615,{},[],true,null,null],"
                        "\"f\":false,\"n\":-9223372036854775808,\"u\":0,"
                        "\"raw\":{\"big\":1e400,\"x\":0.10},\"none\":null}");
    assert_json(text);
}

/* Any bytes make a JSON string our parser accepts: escapes, NUL, controls, invalid UTF-8. */
static void test_escapes(void **state)
{
    static const char bytes[] = "q\"b\\n\nr\rt\t\x01\x1f\0z\xff\xc3(\xe2\x82\xac";
    g_autoptr(GString) out = g_string_new(NULL);
    (void)state;

    sbx_json_append_string(out, bytes, sizeof(bytes) - 1);
    assert_string_equal(out->str, "\"q\\\"b\\\\n\\nr\\rt\\t\\u0001\\u001f\xef\xbf\xbdz\xef\xbf\xbd"
                                  "\xef\xbf\xbd(\xe2\x82\xac\"");
    assert_json(out->str); /* the strict parser refuses U+0000: there is none */
}

/* Keys are escaped like values; a document can be dropped half-built. */
static void test_keys_and_clear(void **state)
{
    SbxJsonb b;
    (void)state;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "k\"\n", "v");
    sbx_jsonb_end_object(&b);
    g_autofree char *text = sbx_jsonb_finish(&b);
    assert_string_equal(text, "{\"k\\\"\\n\":\"v\"}");
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_array(&b);
    sbx_jsonb_clear(&b); /* ASan: nothing leaks */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_keys_and_clear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
