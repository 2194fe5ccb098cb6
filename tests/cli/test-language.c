/*
 * The language of a `sandbox run` (host-agent/cli/language.c): --lang by its protocol name, else
 * the file's extension (.ts and .mts are TypeScript); a name that says nothing, or an unknown
 * --lang, is refused with a message that lists what would do.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "cli/language.h"

static void expect_file(const char *path, SbxLanguage want)
{
    SbxLanguage got = SBX_LANG__COUNT;

    assert_true(sbx_cli_language_of_file(path, &got));
    assert_int_equal(got, want);
}

static void expect_no_file(const char *path)
{
    SbxLanguage got = SBX_LANG__COUNT;

    assert_false(sbx_cli_language_of_file(path, &got));
    assert_int_equal(got, SBX_LANG__COUNT); /* untouched */
}

static void test_extensions(void **state)
{
    (void)state;
    expect_file("hello.js", SBX_LANG_JAVASCRIPT);
    expect_file("dir.ts/hello.mjs", SBX_LANG_JAVASCRIPT);
    expect_file("hello.ts", SBX_LANG_TYPESCRIPT);
    expect_file("/abs/path/main.mts", SBX_LANG_TYPESCRIPT);
    expect_file("x.d.ts", SBX_LANG_TYPESCRIPT);
    expect_file("script.py", SBX_LANG_PYTHON);
    expect_no_file("-");
    expect_no_file("hello.tsx");   /* JSX: node's stripping does not take it */
    expect_no_file("hello.TS");    /* case matters, as for .js and .py */
    expect_no_file("dir.ts/file"); /* the name's end, not a folder's */
    expect_no_file("hello.cjs");
    expect_no_file("");
    expect_no_file(NULL);
}

static void test_pick(void **state)
{
    SbxLanguage l = SBX_LANG__COUNT;
    GError *error = NULL;

    (void)state;
    /* --lang wins over the extension. */
    assert_true(sbx_cli_language_pick("typescript", "a.js", &l, &error));
    assert_int_equal(l, SBX_LANG_TYPESCRIPT);
    assert_true(sbx_cli_language_pick("javascript", "a.ts", &l, &error));
    assert_int_equal(l, SBX_LANG_JAVASCRIPT);
    assert_true(sbx_cli_language_pick(NULL, "a.mts", &l, &error));
    assert_int_equal(l, SBX_LANG_TYPESCRIPT);
    assert_true(sbx_cli_language_pick("python", "-", &l, &error));
    assert_int_equal(l, SBX_LANG_PYTHON);
    assert_null(error);

    /* Protocol names only: "ts" is refused, and the message names the three. */
    l = SBX_LANG__COUNT;
    assert_false(sbx_cli_language_pick("ts", "a.ts", &l, &error));
    assert_int_equal(l, SBX_LANG__COUNT);
    assert_non_null(error);
    assert_string_equal(error->message,
                        "--lang: unknown language \"ts\" (javascript, typescript or python)");
    g_clear_error(&error);

    /* stdin, or a name that says nothing. */
    assert_false(sbx_cli_language_pick(NULL, "-", &l, &error));
    assert_non_null(strstr(error->message, "use --lang javascript|typescript|python"));
    assert_non_null(strstr(error->message, ".ts .mts"));
    g_clear_error(&error);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extensions),
        cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
