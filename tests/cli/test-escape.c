/*
 * The terminal escaper (host-agent/cli/escape.c): what is shown, what passes unchanged, and
 * that a stream cut into chunks anywhere (a UTF-8 character split between two output frames)
 * gives the same result as the whole.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "cli/escape.h"

static void expect_text(const char *in, gsize len, const char *want)
{
    g_autofree char *got = sbx_escape(in, len, SBX_ESCAPE_TEXT);

    assert_string_equal(got, want);
}

static void test_controls_shown(void **state)
{
    (void)state;
    expect_text("\x1b[2J\x1b]0;title\x07", 14, "\\x1b[2J\\x1b]0;title\\x07");
    expect_text("line\roverwritten", 16, "line\\x0doverwritten");
    expect_text("a\bb\x7f\f\v", 6, "a\\x08b\\x7f\\x0c\\x0b");
    expect_text("nul\0x", 5, "nul\\x00x");
    /* C1 controls in UTF-8: CSI (U+009B), NEL (U+0085), U+0080 */
    expect_text("\xc2\x9b"
                "31m \xc2\x85 \xc2\x80",
                11, "\\u009b31m \\u0085 \\u0080");
}

static void test_text_unchanged(void **state)
{
    static const char text[] =
        "plain ASCII, tabs\tand\nnewlines; é ü 中文 🙂 \xc2\xa0 (NBSP) \\x1b";
    (void)state;

    expect_text(text, strlen(text), text);
    expect_text("", 0, "");
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    expect_text("\xff\xfe", 2, "\\xff\\xfe");
    expect_text("\xc3", 1, "\\xc3");                            /* cut short at the end */
    expect_text("\xc3(", 2, "\\xc3(");                          /* not a continuation */
    expect_text("\xc0\xaf", 2, "\\xc0\\xaf");                   /* overlong */
    expect_text("\xed\xa0\x80", 3, "\\xed\\xa0\\x80");          /* a surrogate */
    expect_text("\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
    expect_text("\xe2\x82\x1b", 3, "\\xe2\\x82\\x1b");          /* ESC ends the sequence */
    expect_text("\x80\xbf", 2, "\\x80\\xbf");                   /* lone continuations */
}

static void test_json_mode(void **state)
{
    static const char in[] = "{\"a\":\"\x7f\xc2\x9b\xff\",\"b\":\"\xc3\xa9\"}";
    g_autofree char *got = sbx_escape(in, -1, SBX_ESCAPE_JSON);
    (void)state;

    assert_string_equal(got, "{\"a\":\"\\u007f\\u009b\\ufffd\",\"b\":\"\xc3\xa9\"}");
    g_autofree char *nl = sbx_escape("[1,\n2]\x1b", -1, SBX_ESCAPE_JSON);
    assert_string_equal(nl, "[1,\n2]\\u001b");
}

/* @in escaped in chunks cut at @cuts (ascending offsets) equals @in escaped whole. */
static void check_split(const char *in, gsize len, const gsize *cuts, gsize n_cuts)
{
    g_autofree char *whole = sbx_escape(in, len, SBX_ESCAPE_TEXT);
    g_autoptr(GString) out = g_string_new(NULL);
    SbxEscaper e;
    gsize at = 0;

    sbx_escaper_init(&e, SBX_ESCAPE_TEXT);
    for (gsize i = 0; i <= n_cuts; i++) {
        gsize end = i < n_cuts ? cuts[i] : len;
        sbx_escaper_feed(&e, (const guint8 *)in + at, end - at, out);
        at = end;
    }
    sbx_escaper_finish(&e, out);
    assert_string_equal(out->str, whole);
}

static void test_split_chunks(void **state)
{
    static const char in[] = "é中🙂\xc2\x9b\x1b[0m\xe2\x82\xff\xf0\x9f\x99x\xc3";
    const gsize len = sizeof(in) - 1;
    (void)state;

    /* Every single cut and every pair of cuts, one byte chunks included. */
    for (gsize a = 0; a <= len; a++) {
        check_split(in, len, &a, 1);
        for (gsize b = a; b <= len; b++) {
            gsize cuts[] = {a, b};
            check_split(in, len, cuts, 2);
        }
    }
    gsize bytes[sizeof(in)];
    for (gsize i = 0; i < len; i++) {
        bytes[i] = i + 1;
    }
    check_split(in, len, bytes, len - 1);
}

/* A character split between two chunks is not invalid: it comes out whole, after the second. */
static void test_split_character_held(void **state)
{
    g_autoptr(GString) out = g_string_new(NULL);
    SbxEscaper e;
    (void)state;

    sbx_escaper_init(&e, SBX_ESCAPE_TEXT);
    sbx_escaper_feed(&e, (const guint8 *)"a\xf0\x9f", 3, out);
    assert_string_equal(out->str, "a");
    sbx_escaper_feed(&e, (const guint8 *)"\x99", 1, out);
    assert_string_equal(out->str, "a");
    sbx_escaper_feed(&e,
                     (const guint8 *)"\x82"
                                     "b\xc2",
                     3, out);
    assert_string_equal(out->str, "a\xf0\x9f\x99\x82"
                                  "b");
    sbx_escaper_feed(&e, (const guint8 *)"\x9b", 1, out); /* the second half of a C1 control */
    assert_string_equal(out->str, "a\xf0\x9f\x99\x82"
                                  "b\\u009b");
    sbx_escaper_feed(&e, (const guint8 *)"\xe4\xb8", 2, out);
    sbx_escaper_finish(&e, out); /* the stream ended inside a character */
    assert_string_equal(out->str, "a\xf0\x9f\x99\x82"
                                  "b\\u009b\\xe4\\xb8");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_controls_shown), cmocka_unit_test(test_text_unchanged),
        cmocka_unit_test(test_invalid_utf8),   cmocka_unit_test(test_json_mode),
        cmocka_unit_test(test_split_chunks),   cmocka_unit_test(test_split_character_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
