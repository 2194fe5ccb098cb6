/*
 * The JSON Schema validator (host-agent/tools/schema.c): each keyword, messages with paths,
 * $ref resolution and loops, limits.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "schema.h"

/* Validate @inst against @schema; NULL @want: must pass; else the exact message. */
static void check(const char *schema, const char *inst, const char *want)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSchema) s = sbx_schema_compile(schema, &error);
    if (s == NULL) {
        fail_msg("schema %s does not compile: %s", schema, error->message);
    }
    gboolean ok = sbx_schema_validate(s, "input", inst, &error);
    if (want == NULL && !ok) {
        fail_msg("%s against %s: unexpected failure: %s", inst, schema, error->message);
    }
    if (want != NULL && ok) {
        fail_msg("%s against %s: passed, expected \"%s\"", inst, schema, want);
    }
    if (want != NULL && strcmp(error->message, want) != 0) {
        fail_msg("%s against %s: got \"%s\", expected \"%s\"", inst, schema, error->message, want);
    }
    if (want != NULL) {
        assert_int_equal(error->code, SBX_SCHEMA_ERROR_INVALID);
    }
}

#define OK(schema, inst) check(schema, inst, NULL)

/* Validation fails with any message (for keywords where the exact wording is not the point). */
static void bad(const char *schema, const char *inst)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSchema) s = sbx_schema_compile(schema, &error);
    assert_non_null(s);
    if (sbx_schema_validate(s, "input", inst, &error)) {
        fail_msg("%s against %s: passed, expected a failure", inst, schema);
    }
    assert_int_equal(error->code, SBX_SCHEMA_ERROR_INVALID);
}

/* The schema does not compile; its message contains @text. */
static void no_compile(const char *schema, const char *text)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSchema) s = sbx_schema_compile(schema, &error);
    if (s != NULL) {
        fail_msg("schema %s compiled", schema);
    }
    assert_int_equal(error->code, SBX_SCHEMA_ERROR_SCHEMA);
    if (strstr(error->message, text) == NULL) {
        fail_msg("\"%s\" does not mention \"%s\"", error->message, text);
    }
}

/* Validation gives up with SBX_SCHEMA_ERROR_TOO_COMPLEX within a second. */
static void too_complex(const char *schema, const char *inst)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSchema) s = sbx_schema_compile(schema, &error);
    assert_non_null(s);
    gint64 t0 = g_get_monotonic_time();
    assert_false(sbx_schema_validate(s, "input", inst, &error));
    assert_int_equal(error->code, SBX_SCHEMA_ERROR_TOO_COMPLEX);
    assert_true(g_get_monotonic_time() - t0 < G_USEC_PER_SEC);
}

static void test_type(void **state)
{
    (void)state;
    OK("{\"type\":\"integer\"}", "1");
    OK("{\"type\":\"integer\"}", "1.0"); /* a number with zero fraction */
    OK("{\"type\":\"integer\"}", "-3e2");
    check("{\"type\":\"integer\"}", "1.5", "input: expected an integer, got a number");
    OK("{\"type\":\"number\"}", "1.5");
    check("{\"type\":\"string\"}", "1", "input: expected a string, got a number");
    check("{\"type\":\"object\"}", "[]", "input: expected an object, got an array");
    check("{\"type\":\"array\"}", "{}", "input: expected an array, got an object");
    check("{\"type\":\"boolean\"}", "null", "input: expected a boolean, got null");
    check("{\"type\":\"null\"}", "false", "input: expected null, got a boolean");
    OK("{\"type\":[\"string\",\"null\"]}", "null");
    check("{\"type\":[\"string\",\"null\"]}", "3",
          "input: expected a string or null, got a number");
    check("{\"type\":[\"string\",\"integer\",\"null\"]}", "{}",
          "input: expected a string, an integer or null, got an object");
    no_compile("{\"type\":\"float\"}", "type: expected a type name");
}

static void test_properties_and_paths(void **state)
{
    (void)state;
    const char *s = "{\"type\":\"object\",\"required\":[\"q\"],\"properties\":{\"q\":{\"type\":"
                    "\"string\"},\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\","
                    "\"properties\":{\"name\":{\"type\":\"string\"}}}}}}";
    OK(s, "{\"q\":\"x\",\"items\":[{\"name\":\"a\"},{},{\"name\":\"c\"}],\"other\":1}");
    check(s, "{\"items\":[]}", "input: missing required property \"q\"");
    check(s, "{\"q\":\"x\",\"items\":[{\"name\":\"a\"},{},{\"name\":7}]}",
          "input.items[2].name: expected a string, got a number");
    /* Keys that are not identifiers are quoted, long ones cut. */
    check("{\"properties\":{\"a b\":{\"type\":\"string\"}}}", "{\"a b\":1}",
          "input[\"a b\"]: expected a string, got a number");
    check("{\"properties\":{\"a\\\"b\":{\"type\":\"string\"}}}", "{\"a\\\"b\":1}",
          "input[\"a\\\"b\"]: expected a string, got a number");
    check("{\"properties\":{\"h\u00e9\\n\":{\"type\":\"string\"}}}", "{\"h\u00e9\\n\":1}",
          "input[\"h\u00e9\\u000a\"]: expected a string, got a number");
    g_autofree char *long_key = g_strnfill(100, 'k');
    g_autofree char *ls = g_strdup_printf("{\"properties\":{\"%s\":false}}", long_key);
    g_autofree char *li = g_strdup_printf("{\"%s\":1}", long_key);
    g_autofree char *lm =
        g_strdup_printf("input[\"%.64s...\"]: no value is allowed here", long_key);
    check(ls, li, lm);
    /* required and properties apply to objects only. */
    OK("{\"required\":[\"q\"],\"properties\":{\"q\":{\"type\":\"string\"}}}", "[1]");
}

static void test_additional_properties(void **state)
{
    (void)state;
    const char *s = "{\"properties\":{\"a\":{}},\"patternProperties\":{\"^x_\":{\"type\":"
                    "\"integer\"}},\"additionalProperties\":false}";
    OK(s, "{\"a\":1,\"x_1\":2}");
    check(s, "{\"a\":1,\"b\":2}", "input: unknown property \"b\"");
    check(s, "{\"x_1\":\"no\"}", "input.x_1: expected an integer, got a string");
    check("{\"additionalProperties\":{\"type\":\"boolean\"}}", "{\"k\":1}",
          "input.k: expected a boolean, got a number");
    check("{\"minProperties\":2}", "{\"a\":1}", "input: expected at least 2 properties, got 1");
    check("{\"maxProperties\":0}", "{\"a\":1}", "input: expected at most 0 properties, got 1");
}

static void test_items(void **state)
{
    (void)state;
    check("{\"items\":{\"type\":\"integer\"}}", "[1,2,\"x\"]",
          "input[2]: expected an integer, got a string");
    /* 2020-12: prefixItems then items for the rest. */
    const char *s = "{\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"integer\"}}";
    OK(s, "[\"a\",1,2]");
    check(s, "[1]", "input[0]: expected a string, got a number");
    check(s, "[\"a\",\"b\"]", "input[1]: expected an integer, got a string");
    /* Draft 4-2019: items as an array is the tuple, additionalItems the rest. */
    OK("{\"items\":[{\"type\":\"string\"}],\"additionalItems\":false}", "[\"a\"]");
    check("{\"items\":[{\"type\":\"string\"}],\"additionalItems\":false}", "[\"a\",1]",
          "input[1]: no value is allowed here");
    check("{\"minItems\":2}", "[1]", "input: expected at least 2 items, got 1");
    check("{\"maxItems\":1}", "[1,2]", "input: expected at most 1 items, got 2");
    check("{\"uniqueItems\":true}", "[1,{\"a\":[1]},2,{\"a\":[1.0]}]",
          "input: items 1 and 3 are equal (uniqueItems)");
    OK("{\"uniqueItems\":true}", "[1,\"1\",[1],{\"a\":1},{\"a\":2}]");
}

static void test_enum_const(void **state)
{
    (void)state;
    OK("{\"enum\":[1,\"a\",{\"x\":[1,2]}]}", "1.0");
    OK("{\"enum\":[1,\"a\",{\"x\":[1,2],\"y\":null}]}", "{\"y\":null,\"x\":[1.0,2]}");
    check("{\"enum\":[\"a\",\"b\"]}", "\"c\"", "input: expected one of [\"a\",\"b\"]");
    bad("{\"enum\":[{\"x\":1}]}", "{\"x\":1,\"y\":2}");
    bad("{\"enum\":[[1,2]]}", "[1,2,3]");
    bad("{\"enum\":[false]}", "0");
    bad("{\"enum\":[null]}", "false");
    OK("{\"const\":{\"a\":[true]}}", "{\"a\":[true]}");
    check("{\"const\":5}", "6", "input: expected the value 5");
    no_compile("{\"enum\":3}", "enum: expected an array");
}

static void test_numbers(void **state)
{
    (void)state;
    OK("{\"minimum\":1,\"maximum\":3}", "3");
    check("{\"minimum\":1}", "0.5", "input: expected a number >= 1, got 0.5");
    check("{\"maximum\":3}", "4", "input: expected a number <= 3, got 4");
    check("{\"exclusiveMinimum\":1}", "1", "input: expected a number > 1, got 1");
    check("{\"exclusiveMaximum\":3}", "3", "input: expected a number < 3, got 3");
    OK("{\"exclusiveMaximum\":3}", "2.99");
    /* Draft 4's boolean form modifies minimum/maximum. */
    check("{\"maximum\":3,\"exclusiveMaximum\":true}", "3", "input: expected a number < 3, got 3");
    OK("{\"maximum\":3,\"exclusiveMaximum\":false}", "3");
    OK("{\"minimum\":1}", "\"not a number\""); /* applies to numbers only */
    OK("{\"multipleOf\":0.0001}", "0.0075");   /* 74.99999999999999 in floating point */
    OK("{\"multipleOf\":2}", "1e300");
    check("{\"multipleOf\":1.5}", "35", "input: expected a multiple of 1.5, got 35");
    no_compile("{\"multipleOf\":0}", "multipleOf: expected a number greater than 0");
    no_compile("{\"minimum\":\"1\"}", "minimum: expected a number");
}

/*
 * Numbers beyond a double are decided on their literals (issue: a 20-digit integer is an
 * integer; 2^53 + 1 is not 2^53). Each of these failed when numbers were compared as doubles.
 */
static void test_exact_numbers(void **state)
{
    (void)state;
    OK("{\"type\":\"integer\"}", "12345678901234567890");
    OK("{\"type\":\"integer\"}", "-123456789012345678901234567890");
    OK("{\"type\":\"integer\"}", "1e400");
    OK("{\"type\":\"integer\"}", "1.5e1");
    bad("{\"type\":\"integer\"}", "1.0000000000000001"); /* 1.0 as a double */
    bad("{\"type\":\"integer\"}", "9007199254740993.5");
    check("{\"maximum\":9007199254740992}", "9007199254740993",
          "input: expected a number <= 9007199254740992, got 9007199254740993");
    OK("{\"maximum\":9007199254740993}", "9007199254740993");
    check("{\"minimum\":-9007199254740992}", "-9007199254740993",
          "input: expected a number >= -9007199254740992, got -9007199254740993");
    check("{\"exclusiveMaximum\":0.30000000000000004}", "0.30000000000000004",
          "input: expected a number < 0.30000000000000004, got 0.30000000000000004");
    OK("{\"exclusiveMaximum\":0.30000000000000004}", "0.3");
    OK("{\"maximum\":1e308}", "-1e400");
    bad("{\"maximum\":1e308}", "1e400");
    OK("{\"minimum\":0,\"exclusiveMinimum\":true}", "1e-400");
    OK("{\"multipleOf\":3}", "12345678901234567893"); /* digit sum 93 */
    check("{\"multipleOf\":3}", "12345678901234567891",
          "input: expected a multiple of 3, got 12345678901234567891");
    OK("{\"multipleOf\":10}", "12345678901234567890");
    OK("{\"multipleOf\":0.01}", "19.99");
    bad("{\"multipleOf\":0.01}", "19.999");
    OK("{\"multipleOf\":1e-400}", "3e-399");
    bad("{\"multipleOf\":7}", "1e400");
    OK("{\"multipleOf\":5}", "1e400");
    no_compile("{\"multipleOf\":12345678901234567890.1}",
               "multipleOf: more than 19 significant digits are not supported");
    no_compile("{\"multipleOf\":-0.0}", "multipleOf: expected a number greater than 0");
    /* Equality is by value: 1, 1.0 and 10e-1 are one number; 2^53 and 2^53 + 1 are two. */
    OK("{\"const\":1}", "10e-1");
    OK("{\"const\":-0}", "0.0");
    check("{\"const\":9007199254740992}", "9007199254740993",
          "input: expected the value 9007199254740992");
    OK("{\"enum\":[18446744073709551616]}", "18446744073709551616.0");
    bad("{\"uniqueItems\":false,\"items\":{\"const\":12345678901234567890}}",
        "[12345678901234567890,12345678901234567891]");
    bad("{\"uniqueItems\":true}", "[12345678901234567890,1.234567890123456789e19]");
    OK("{\"uniqueItems\":true}", "[9007199254740992,9007199254740993]");
}

static void test_strings(void **state)
{
    (void)state;
    /* Code points, not bytes: "héllo" is 6 bytes, 5 characters; an emoji is one. */
    OK("{\"maxLength\":5}", "\"h\\u00e9llo\"");
    OK("{\"maxLength\":5}", "\"héllo\"");
    OK("{\"maxLength\":1}", "\"\\ud83d\\ude00\"");
    check("{\"minLength\":2}", "\"\\ud83d\\ude00\"",
          "input: expected at least 2 characters, got 1");
    check("{\"maxLength\":2}", "\"abc\"", "input: expected at most 2 characters, got 3");
    no_compile("{\"maxLength\":-1}", "maxLength: expected a non-negative integer");
    no_compile("{\"minLength\":1.5}", "minLength: expected a non-negative integer");
}

static void test_pattern(void **state)
{
    (void)state;
    OK("{\"pattern\":\"b+\"}", "\"abbbc\""); /* unanchored search */
    check("{\"pattern\":\"^[a-z]+$\"}", "\"ab1\"",
          "input: does not match the pattern \"^[a-z]+$\"");
    /* ECMA: $ is the very end, not "before a final newline". */
    bad("{\"pattern\":\"^abc$\"}", "\"abc\\n\"");
    OK("{\"pattern\":\"^\\\\p{L}+$\"}", "\"héllo\"");  /* Unicode classes */
    OK("{\"pattern\":\"^.$\"}", "\"\\ud83d\\ude00\""); /* one code point */
    OK("{\"pattern\":\"^a\"}", "12");                  /* strings only */
    /* \d and \w are ASCII as in ECMA-262, in and out of classes; other escapes are kept. */
    bad("{\"pattern\":\"^\\\\d$\"}", "\"\u0663\"");
    bad("{\"pattern\":\"^\\\\w$\"}", "\"\u00e9\"");
    OK("{\"pattern\":\"^[\\\\d.]+$\"}", "\"1.5\"");
    bad("{\"pattern\":\"^[\\\\w]$\"}", "\"\u00e9\"");
    OK("{\"pattern\":\"^\\\\D\\\\W$\"}", "\"\u00e9 \"");
    OK("{\"pattern\":\"^\\\\\\\\d$\"}", "\"\\\\d\""); /* an escaped backslash, then d */
    OK("{\"pattern\":\"^[]\\\\d]+$\"}", "\"]1\"");    /* PCRE: ']' first is a literal */
    OK("{\"pattern\":\"^\\\\[\\\\d\\\\]$\"}", "\"[7]\"");
    no_compile("{\"properties\":{\"q\":{\"pattern\":\"([a-z\"}}}", "properties.q.pattern: invalid");
    no_compile("{\"patternProperties\":{\"(\":{}}}", "patternProperties: invalid regular");
    /* Catastrophic backtracking hits PCRE2's match limit: an error, quickly. */
    too_complex("{\"pattern\":\"^(a+)+$\"}", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\"");
    /* Many matches just under the limit (the clock backstop). */
    g_autoptr(GString) many = g_string_new("[");
    for (int i = 0; i < 2000; i++) {
        g_string_append_printf(many, "%s\"aaaaaaaaaaaaaaaaaa!\"", i > 0 ? "," : "");
    }
    g_string_append(many, "]");
    too_complex("{\"items\":{\"not\":{\"pattern\":\"^(a+)+$\"}}}", many->str);
    /* A schema may not raise the match limits again. */
    no_compile("{\"pattern\":\"(*LIMIT_MATCH=99999999)a\"}", "start-of-pattern options");
}

static void test_combinators(void **state)
{
    (void)state;
    const char *any = "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\",\"minimum\":0}]}";
    OK(any, "\"x\"");
    OK(any, "3");
    check(any, "-1", "input: does not match any of the schemas in anyOf");
    const char *one = "{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":2}]}";
    OK(one, "1");
    OK(one, "2.5");
    check(one, "3", "input: matches more than one of the schemas in oneOf (0 and 1)");
    check(one, "1.5", "input: does not match any of the schemas in oneOf");
    const char *all = "{\"allOf\":[{\"type\":\"object\"},{\"required\":[\"a\"]}]}";
    OK(all, "{\"a\":1}");
    check(all, "{}", "input: missing required property \"a\"");
    check("{\"not\":{\"type\":\"string\"}}", "\"x\"",
          "input: must not match the schema in \"not\"");
    OK("{\"not\":{\"type\":\"string\"}}", "1");
    /* A failure inside anyOf does not leak its own message. */
    check("{\"properties\":{\"v\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}}}",
          "{\"v\":1}", "input.v: does not match any of the schemas in anyOf");
    no_compile("{\"anyOf\":[]}", "anyOf: expected a non-empty array");
}

static void test_ref(void **state)
{
    (void)state;
    OK("{\"definitions\":{\"n\":{\"type\":\"integer\"}},\"items\":{\"$ref\":\"#/definitions/n\"}}",
       "[1,2]");
    check("{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"properties\":{\"a\":{\"$ref\":"
          "\"#/$defs/n\"}}}",
          "{\"a\":\"x\"}", "input.a: expected an integer, got a string");
    /* Recursion through "#": a tree of any depth (bounded by the instance). */
    const char *tree = "{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\","
                       "\"items\":{\"$ref\":\"#\"}}},\"additionalProperties\":false}";
    OK(tree, "{\"kids\":[{\"kids\":[]},{\"kids\":[{}]}]}");
    check(tree, "{\"kids\":[{\"kids\":[{\"x\":1}]}]}",
          "input.kids[0].kids[0]: unknown property \"x\"");
    /* JSON-pointer escapes ~0 ~1, percent-encoding, array indexes. */
    OK("{\"$defs\":{\"a/b\":{\"type\":\"string\"},\"c~d\":{\"type\":\"integer\"},\"e%f\":true},"
       "\"prefixItems\":[{\"$ref\":\"#/$defs/a~1b\"},{\"$ref\":\"#/$defs/c~0d\"},"
       "{\"$ref\":\"#/$defs/e%25f\"},{\"$ref\":\"#/prefixItems/1\"}]}",
       "[\"s\",1,null,2]");
    /* 2020-12: siblings of $ref apply too. */
    bad("{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"maxLength\":1}",
        "\"ab\"");
    no_compile("{\"$ref\":\"http://example.com/s.json\"}", "only local references");
    no_compile("{\"$ref\":\"#/$defs/missing\"}", "does not name a part of this schema");
    no_compile("{\"$ref\":\"#/a~2\",\"a~2\":{}}", "does not name");
    no_compile("{\"$ref\":\"#anchor\"}", "only local references");
    no_compile("{\"$ref\":5}", "$ref: expected a string");
}

static void test_ref_loops(void **state)
{
    (void)state;
    /* Compiling a loop terminates; validating it stops at the depth limit, with an error. */
    too_complex("{\"$ref\":\"#\"}", "1");
    too_complex("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":"
                "\"#/$defs/a\"}]}},\"$ref\":\"#/$defs/a\"}",
                "{}");
    /* A loop under "not" is still an error, not a pass. */
    too_complex("{\"not\":{\"$ref\":\"#\"}}", "1");
    /* A long chain of $refs: compiling it would recurse once per hop, so it is refused. */
    g_autoptr(GString) chain = g_string_new("{\"$ref\":\"#/$defs/a0\",\"$defs\":{");
    for (int i = 0; i < 5000; i++) {
        g_string_append_printf(chain, "\"a%d\":{\"$ref\":\"#/$defs/a%d\"},", i, i + 1);
    }
    g_string_append(chain, "\"a5000\":true}}");
    no_compile(chain->str, "nested more than 256 levels deep");
    /* A shorter one compiles, and validation follows it. */
    OK("{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/"
       "b\"},\"b\":{\"type\":\"string\"}}}",
       "\"s\"");
}

static void test_boolean_and_unknown(void **state)
{
    (void)state;
    OK("true", "{\"anything\":[1]}");
    check("false", "1", "input: no value is allowed here");
    check("{\"properties\":{\"a\":false}}", "{\"a\":1}", "input.a: no value is allowed here");
    OK("{\"format\":\"email\",\"x-vendor\":{\"pattern\":\"(\"},\"description\":\"d\"}", "\"x\"");
    OK("{}", "null");
    no_compile("{\"type\":\"string\",\"type\":\"integer\"}", "duplicate member name");
    no_compile("[]", "expected a schema");
    no_compile("{\"properties\":{\"a\":3}}", "properties.a: expected a schema");
}

static void test_limits(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSchema) s = sbx_schema_compile("{}", &error);

    /* Not JSON, trailing data, nesting beyond cJSON's limit. */
    assert_false(sbx_schema_validate(s, "input", "{", &error));
    assert_int_equal(error->code, SBX_SCHEMA_ERROR_JSON);
    g_clear_error(&error);
    assert_false(sbx_schema_validate(s, "input", "1 2", &error));
    g_clear_error(&error);
    g_autofree char *deep = g_strnfill(40, '[');
    assert_false(sbx_schema_validate(s, "input", deep, &error));
    assert_int_equal(error->code, SBX_SCHEMA_ERROR_JSON);
    g_clear_error(&error);
    no_compile("{\"a\":", "not one JSON value");

    /* A schema over the size limit. */
    g_autoptr(GString) big = g_string_new("{\"description\":\"");
    for (int i = 0; i < SBX_SCHEMA_TEXT_MAX; i++) {
        g_string_append_c(big, 'x');
    }
    g_string_append(big, "\"}");
    no_compile(big->str, "larger than");

    /* Quadratic work (uniqueItems over 20 000 distinct objects) runs out of budget, fast. */
    g_autoptr(GString) arr = g_string_new("[");
    for (int i = 0; i < 20000; i++) {
        g_string_append_printf(arr, "%s{\"k\":%d}", i > 0 ? "," : "", i);
    }
    g_string_append(arr, "]");
    too_complex("{\"uniqueItems\":true}", arr->str);
    /* Linear work on the same input is fine. */
    OK("{\"items\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\"}}}}", arr->str);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type),
        cmocka_unit_test(test_properties_and_paths),
        cmocka_unit_test(test_additional_properties),
        cmocka_unit_test(test_items),
        cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_exact_numbers),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_pattern),
        cmocka_unit_test(test_combinators),
        cmocka_unit_test(test_ref),
        cmocka_unit_test(test_ref_loops),
        cmocka_unit_test(test_boolean_and_unknown),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
