/*
 * The body of POST /v1/executions (host-agent/server/http-request.c): the defaults, every
 * member, and a function call (entry, args, kwargs) kept as sent, its numbers' literals
 * unchanged; each refusal with the text the client gets (docs/api.md).
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "server/http-request.h"

static const char *const catalogs[] = {"web", NULL};
static const SbxHttpLimits limits = {
    .max_timeout_ms = 120000,
    .max_output_bytes = 1048576,
    .catalogs = catalogs,
};

/* @body must be accepted into @c. */
static void accept_body(const char *body, SbxHttpCreate *c)
{
    g_autofree char *why = sbx_http_create_decode(body, strlen(body), &limits, c);

    if (why != NULL) {
        fail_msg("%s: refused: %s", body, why);
    }
}

/* @body must be refused with @expect, holding nothing. */
static void refuse_body(const char *body, const char *expect)
{
    g_auto(SbxHttpCreate) c = {0};
    g_autofree char *why = sbx_http_create_decode(body, strlen(body), &limits, &c);

    if (why == NULL || strcmp(why, expect) != 0) {
        fail_msg("%s: expected \"%s\", got \"%s\"", body, expect, why ? why : "(accepted)");
    }
    assert_null(c.code);
    assert_null(c.entry);
    assert_null(c.args_json);
    assert_null(c.kwargs_json);
    assert_null(c.catalog);
    assert_null(c.files);
    assert_int_equal(c.n_files, 0);
    assert_false(c.with_files);
}

static void test_defaults(void **state)
{
    g_auto(SbxHttpCreate) c = {0};
    (void)state;

    accept_body("{\"language\":\"python\",\"code\":\"print(1)\"}", &c);
    assert_int_equal(c.language, SBX_LANG_PYTHON);
    assert_string_equal(c.code, "print(1)");
    assert_null(c.entry);
    assert_null(c.args_json);
    assert_null(c.kwargs_json);
    assert_null(c.catalog);
    assert_int_equal(c.timeout_ms, 30000);
    assert_int_equal(c.output_limit, 1048576); /* the default, capped by the tenant's */
    assert_false(c.with_files);
}

/* files: text as its UTF-8 bytes, base64 decoded; `[]` asks for the changed files alone. */
static void test_files(void **state)
{
    g_auto(SbxHttpCreate) c = {0};
    g_auto(SbxHttpCreate) none = {0};
    (void)state;

    accept_body("{\"language\":\"python\",\"code\":\"1\",\"files\":["
                "{\"path\":\"in/a.csv\",\"content\":\"x,y\\n\\u00e9\"},"
                "{\"path\":\"b.bin\",\"content_base64\":\"AAH/\"},"
                "{\"path\":\"empty\",\"content\":\"\"}]}",
                &c);
    assert_true(c.with_files);
    assert_int_equal(c.n_files, 3);
    assert_string_equal(c.files[0].path, "in/a.csv");
    assert_int_equal(g_bytes_get_size(c.files[0].bytes), 6);
    assert_memory_equal(g_bytes_get_data(c.files[0].bytes, NULL), "x,y\n\xc3\xa9", 6);
    assert_string_equal(c.files[1].path, "b.bin");
    assert_int_equal(g_bytes_get_size(c.files[1].bytes), 3);
    assert_memory_equal(g_bytes_get_data(c.files[1].bytes, NULL), "\x00\x01\xff", 3);
    assert_int_equal(g_bytes_get_size(c.files[2].bytes), 0);
    accept_body("{\"language\":\"python\",\"code\":\"1\",\"files\":[]}", &none);
    assert_true(none.with_files);
    assert_int_equal(none.n_files, 0);
}

/* Every way `files` can be wrong, and the caps: 64 files, 4 MiB in all. */
static void test_files_refused(void **state)
{
    static const char rule[] = "files: an array of at most 64 {\"path\", and \"content\" (text) "
                               "or \"content_base64\"}, 4 MiB in all";
    static const struct {
        const char *files;
        const char *why;
    } cases[] = {
        {"{}", rule},
        {"\"a\"", rule},
        {"[1]", rule},
        {"[{\"path\":\"a\"}]", rule},
        {"[{\"path\":\"a\",\"content\":\"x\",\"content_base64\":\"eA==\"}]", rule},
        {"[{\"path\":\"a\",\"content\":\"x\",\"mode\":1}]", rule},
        {"[{\"path\":1,\"content\":\"x\"}]", rule},
        {"[{\"path\":\"a\",\"contents\":\"x\"}]", rule},
        {"[{\"path\":\"../etc/passwd\",\"content\":\"x\"}]",
         "files: \"../etc/passwd\" is not a workspace path (relative, no . or .., at most 1024 "
         "bytes)"},
        {"[{\"path\":\"/abs\",\"content\":\"x\"}]",
         "files: \"/abs\" is not a workspace path (relative, no . or .., at most 1024 bytes)"},
        {"[{\"path\":\"a\",\"content_base64\":\"eA\"}]",
         "files: a: content must be text, content_base64 canonical base64"},
        {"[{\"path\":\"a\",\"content_base64\":5}]",
         "files: a: content must be text, content_base64 canonical base64"},
        {"[{\"path\":\"a\",\"content\":5}]",
         "files: a: content must be text, content_base64 canonical base64"},
        {"[{\"path\":\"a\",\"content\":\"x\"},{\"path\":\"a\",\"content\":\"y\"}]",
         "files: \"a\" twice"},
    };
    (void)state;

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *body = g_strdup_printf(
            "{\"language\":\"python\",\"code\":\"1\",\"files\":%s}", cases[i].files);
        refuse_body(body, cases[i].why);
    }
    /* 65 files */
    GString *many = g_string_new("{\"language\":\"python\",\"code\":\"1\",\"files\":[");
    for (int i = 0; i < 65; i++) {
        g_string_append_printf(many, "%s{\"path\":\"f%d\",\"content\":\"\"}", i ? "," : "", i);
    }
    g_string_append(many, "]}");
    refuse_body(many->str, rule);
    g_string_free(many, TRUE);
    /* 4 MiB + 1 byte over two files; 4 MiB exactly is taken */
    g_autofree char *half = g_strnfill(2 * 1024 * 1024, 'x');
    g_autofree char *over = g_strdup_printf(
        "{\"language\":\"python\",\"code\":\"1\",\"files\":[{\"path\":\"a\",\"content\":"
        "\"%s\"},{\"path\":\"b\",\"content\":\"%sx\"}]}",
        half, half);
    refuse_body(over, rule);
    g_auto(SbxHttpCreate) c = {0};
    over[strlen(over) - 5] = '"'; /* drop the one byte too many: ...x"}]} -> ..."}]} */
    memmove(over + strlen(over) - 4, over + strlen(over) - 3, 4);
    accept_body(over, &c);
    assert_int_equal(g_bytes_get_size(c.files[1].bytes), 2 * 1024 * 1024);
}

/*
 * entry, args and kwargs as sent, minified: 2^53 + 1, a number beyond a double, a negative
 * zero and an escape reach the execute byte for byte (never parsed and printed again).
 */
static void test_call(void **state)
{
    g_auto(SbxHttpCreate) py = {0};
    g_auto(SbxHttpCreate) js = {0};
    g_auto(SbxHttpCreate) nulls = {0};
    (void)state;

    accept_body("{\"language\":\"python\",\"code\":\"def f(*a, **k): pass\",\"entry\":\"f\","
                "\"args\": [ 9007199254740993, 1e400, -0.0, \"\\u00e9\" ],"
                "\"kwargs\": {\"x\" : 1.50, \"y\": [ ]},\"catalog\":\"web\",\"timeout_ms\":1e3}",
                &py);
    assert_string_equal(py.entry, "f");
    assert_string_equal(py.args_json, "[9007199254740993,1e400,-0.0,\"\\u00e9\"]");
    assert_string_equal(py.kwargs_json, "{\"x\":1.50,\"y\":[]}");
    assert_string_equal(py.catalog, "web");
    assert_int_equal(py.timeout_ms, 1000);

    accept_body("{\"language\":\"javascript\",\"code\":\"function $f() {}\",\"entry\":\"$f\"}",
                &js);
    assert_string_equal(js.entry, "$f");
    assert_null(js.args_json);

    accept_body("{\"language\":\"typescript\",\"code\":\"1\",\"entry\":null,\"args\":null,"
                "\"kwargs\":null}",
                &nulls);
    assert_null(nulls.entry);
    assert_null(nulls.args_json);
    assert_null(nulls.kwargs_json);
}

static void test_refused(void **state)
{
    static const char entry_rule[] =
        "entry: an identifier, the name of the function to call ([A-Za-z_$][A-Za-z0-9_$]*, at "
        "most 128 characters)";
    static const char not_array[] = "args: a JSON array (the function's positional arguments)";
    static const char not_object[] = "kwargs: a JSON object (the function's keyword arguments)";
    static const char js_kwargs[] = "kwargs: keyword arguments are for Python only (JavaScript "
                                    "and TypeScript functions take args)";
    g_autofree char *long_name = g_strnfill(129, 'f');
    g_autofree char *too_long =
        g_strdup_printf("{\"language\":\"python\",\"code\":\"1\",\"entry\":\"%s\"}", long_name);
    static const struct {
        const char *body;
        const char *why;
    } cases[] = {
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"9lives\"}", entry_rule},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"\"}", entry_rule},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"os.system\"}", entry_rule},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":true}", entry_rule},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"args\":{\"a\":1}}", not_array},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"args\":\"[1]\"}", not_array},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"kwargs\":[1]}", not_object},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"kwargs\":3}", not_object},
        {"{\"language\":\"python\",\"code\":\"1\",\"args\":[]}",
         "args: only with an entry (the function to call)"},
        {"{\"language\":\"python\",\"code\":\"1\",\"kwargs\":{\"a\":1}}",
         "kwargs: only with an entry (the function to call)"},
        {"{\"language\":\"javascript\",\"code\":\"1\",\"entry\":\"f\",\"kwargs\":{}}", js_kwargs},
        {"{\"language\":\"typescript\",\"code\":\"1\",\"entry\":\"f\",\"kwargs\":{\"a\":1}}",
         js_kwargs},
        {"{\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"arg\":[]}",
         "unknown member \"arg\""},
    };
    (void)state;

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        refuse_body(cases[i].body, cases[i].why);
    }
    refuse_body(too_long, entry_rule);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),      cmocka_unit_test(test_call),
        cmocka_unit_test(test_refused),       cmocka_unit_test(test_files),
        cmocka_unit_test(test_files_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
