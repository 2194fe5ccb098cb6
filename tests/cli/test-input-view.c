/*
 * A tool call's input as people see it (host-agent/cli/input-view.c): pretty-printed with
 * every string and number kept, escaped, folded to the width, never cut.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "cli/escape.h"
#include "cli/input-view.h"

static void test_pretty(void **state)
{
    static const char in[] =
        "{\"a\":[1,2.50e3,{}],\"b\":{\"c\":\"x,y:{[\\\"]\"},\"d\":[],\"e\":null}";
    guint lines = 0;
    g_autofree char *v = sbx_input_view(in, strlen(in), 0, "> ", &lines);
    (void)state;

    assert_string_equal(v, "> {\n"
                           ">   \"a\": [\n"
                           ">     1,\n"
                           ">     2.50e3,\n"
                           ">     {}\n"
                           ">   ],\n"
                           ">   \"b\": {\n"
                           ">     \"c\": \"x,y:{[\\\"]\"\n"
                           ">   },\n"
                           ">   \"d\": [],\n"
                           ">   \"e\": null\n"
                           "> }\n");
    assert_int_equal(lines, 12);
}

/* Remove the layout (prefix, line breaks, indentation, ": ") again: the escaped input is left. */
static char *unfold(const char *view, const char *prefix)
{
    GString *s = g_string_new(NULL);
    gsize plen = strlen(prefix);

    for (const char *p = view; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl);
        assert_memory_equal(p, prefix, plen);
        g_string_append_len(s, p + plen, nl - p - plen);
        p = nl + 1;
    }
    return g_string_free(s, FALSE);
}

/* A 5 KB string: folded to the width, each line within it, nothing lost. */
static void test_fold_long_string(void **state)
{
    g_autoptr(GString) in = g_string_new("{\"text\":\"");
    guint lines = 0;
    (void)state;

    for (int i = 0; i < 5000; i++) {
        g_string_append_c(in, 'a' + i % 26);
    }
    g_string_append(in, "\"}");
    g_autofree char *v = sbx_input_view(in->str, in->len, 80, "  ", &lines);
    gchar **rows = g_strsplit(v, "\n", -1);
    guint n = g_strv_length(rows) - 1; /* the last is empty: every line ends with \n */
    assert_int_equal(n, lines);
    for (guint i = 0; i < n; i++) {
        assert_true(sbx_input_view_columns(rows[i]) <= 80);
    }
    g_strfreev(rows);
    assert_true(lines >= 5000 / 78 + 2);
    g_autofree char *flat = unfold(v, "  ");
    /* the layout added "  " before "text" and ": " after it, and line breaks around */
    g_autofree char *want = g_strdup_printf("{  \"text\": \"%.*s\"}", 5000, in->str + 9);
    assert_string_equal(flat, want);
}

/* Wide characters count two columns, and are never split. */
static void test_fold_wide(void **state)
{
    g_autoptr(GString) in = g_string_new("\"");
    (void)state;

    for (int i = 0; i < 100; i++) {
        g_string_append(in, "中");
    }
    g_string_append(in, "\"");
    g_autofree char *v = sbx_input_view(in->str, in->len, 25, "", NULL);
    gchar **rows = g_strsplit(v, "\n", -1);
    for (guint i = 0; rows[i] != NULL && rows[i][0] != '\0'; i++) {
        assert_true(sbx_input_view_columns(rows[i]) <= 25);
        assert_true(g_utf8_validate(rows[i], -1, NULL));
    }
    g_strfreev(rows);
}

/* Controls inside strings (raw DEL, C1; escapes stay the text they are) are shown escaped. */
static void test_escaped(void **state)
{
    static const char in[] = "[\"\x7f\xc2\x9b[2J\",\"\\u001b[31m\",\"\xff\"]";
    g_autofree char *v = sbx_input_view(in, strlen(in), 0, "", NULL);
    (void)state;

    assert_string_equal(v, "[\n  \"\\x7f\\u009b[2J\",\n  \"\\u001b[31m\",\n  \"\\xff\"\n]\n");
}

/* Deep nesting is indented at most SBX_INPUT_VIEW_INDENT_MAX levels; cut text still shows. */
static void test_hostile_text(void **state)
{
    g_autoptr(GString) in = g_string_new(NULL);
    guint lines = 0;
    (void)state;

    for (int i = 0; i < 1000; i++) {
        g_string_append_c(in, '[');
    }
    g_autofree char *v = sbx_input_view(in->str, in->len, 0, "", &lines);
    assert_int_equal(lines, 1001); /* the last holds the indentation after the last "[" */
    assert_true(strlen(v) <= 1000 * (2 + 2 * SBX_INPUT_VIEW_INDENT_MAX));
    g_autofree char *cut = sbx_input_view("{\"a\":\"unterminat", 16, 0, "", NULL);
    assert_string_equal(cut, "{\n  \"a\": \"unterminat\n");
    g_autofree char *empty = sbx_input_view("", 0, 80, "  ", &lines);
    assert_string_equal(empty, "  \n");
    assert_int_equal(lines, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretty),       cmocka_unit_test(test_fold_long_string),
        cmocka_unit_test(test_fold_wide),    cmocka_unit_test(test_escaped),
        cmocka_unit_test(test_hostile_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
