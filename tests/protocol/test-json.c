/*
 * The exact JSON module (protocol/json.h): number literals kept through a parse and a print,
 * the shortest double printer, the text helpers (minify, member text), the strict parser's
 * refusals, and exact decimal arithmetic on literals. Every expected value is written out
 * here, never computed by the code under test.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/json.h"
#include "protocol/limits.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static cJSON *parse_len(const char *text, size_t len)
{
    char *error = NULL;
    cJSON *v = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &error);

    if (!v)
        fail_msg("%s refused: %s", text, error ? error : "(no error)");
    assert_null(error);
    return v;
}

static cJSON *parse(const char *text)
{
    return parse_len(text, strlen(text));
}

/* Parse @text, print it, and compare with @expected; the tree is returned for more checks. */
static cJSON *check_print(const char *text, const char *expected)
{
    cJSON *v = parse(text);
    char *out = sbx_json_print(v);

    assert_non_null(out);
    if (strcmp(out, expected) != 0)
        fail_msg("print of %s: got %s, expected %s", text, out, expected);
    free(out);
    return v;
}

static void check_print_item(const cJSON *item, const char *expected)
{
    char *out = sbx_json_print(item);

    if (!out)
        fail_msg("print failed, expected %s", expected);
    if (strcmp(out, expected) != 0)
        fail_msg("print: got %s, expected %s", out, expected);
    free(out);
}

/* ---- literals through parse and print ------------------------------------------------------ */

static const char *const literals[] = {
    "9007199254740993",
    "12345678901234567890",
    "-9007199254740993",
    "1180591620717411303424",
    "0.30000000000000004",
    "1e400",
    "-1e400",
    "1e-400",
    "5e-324",
    "2.2250738585072014e-308",
    "4.9406564584124654e-324",
    "-0",
    "-0.0",
    "0.0",
    "0",
    "1E+2",
    "2.5e1",
    "1e-7",
    "100000000000000000000000000000000000000000000000000000000000000000000001",
    "123456789012345678901234567890.123456789012345678901234567890e-00000000000000000000000012",
    "1e999999999999999999",
};

static void test_literals_kept(void **state)
{
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(literals); i++) {
        const char *l = literals[i];
        char text[512], expected[512];
        cJSON *v;

        /* Alone, at the top. */
        v = check_print(l, l);
        assert_string_equal(sbx_json_number_text(v), l);
        cJSON_Delete(v);

        /* Nested, among whitespace; each occurrence keeps its own literal. */
        snprintf(text, sizeof(text),
                 " { \"a\" : [ %s , { \"b\" :\t%s } , [ [ %s ] ] ] ,\r\n \"c\" : %s } ", l, l, l,
                 l);
        snprintf(expected, sizeof(expected), "{\"a\":[%s,{\"b\":%s},[[%s]]],\"c\":%s}", l, l, l, l);
        v = check_print(text, expected);
        assert_string_equal(sbx_json_number_text(cJSON_GetObjectItem(v, "c")), l);
        assert_string_equal(sbx_json_number_text(cJSON_GetObjectItem(
                                cJSON_GetArrayItem(cJSON_GetObjectItem(v, "a"), 1), "b")),
                            l);
        /* A duplicate keeps the literal, and prints the same. */
        {
            cJSON *dup = cJSON_Duplicate(v, true);

            check_print_item(dup, expected);
            cJSON_Delete(dup);
        }
        cJSON_Delete(v);
    }
}

static void test_numbers_next_to_strings(void **state)
{
    cJSON *v;

    (void)state;
    /* Digits and minus signs inside strings and names are not numbers. */
    v = check_print("{\"-1\": \"2 -3 4e5\", \"x\\\"9\": [\"\\\\\", -7.5e-3, \"8\"], \"z\":10}",
                    "{\"-1\":\"2 -3 4e5\",\"x\\\"9\":[\"\\\\\",-7.5e-3,\"8\"],\"z\":10}");
    assert_string_equal(sbx_json_number_text(cJSON_GetArrayItem(cJSON_GetObjectItem(v, "x\"9"), 1)),
                        "-7.5e-3");
    assert_string_equal(sbx_json_number_text(cJSON_GetObjectItem(v, "z")), "10");
    assert_null(sbx_json_number_text(cJSON_GetObjectItem(v, "-1")));
    cJSON_Delete(v);
}

static void test_structure_and_order(void **state)
{
    (void)state;
    cJSON_Delete(check_print(" \n{ \"k2\" : [ 1 , { \"z\" : null , \"a\" : true } , [ ] , { } ] ,"
                             " \"k1\" : false , \"e\" : \"\" , \"A\" : [ [ [ ] ] ] }\t\r\n",
                             "{\"k2\":[1,{\"z\":null,\"a\":true},[],{}],\"k1\":false,\"e\":\"\","
                             "\"A\":[[[]]]}"));
    cJSON_Delete(check_print("\"just a string\"", "\"just a string\""));
    cJSON_Delete(check_print(" true ", "true"));
    cJSON_Delete(check_print("null", "null"));
    cJSON_Delete(check_print("[]", "[]"));
    cJSON_Delete(check_print("{}", "{}"));
    /* Text need not be NUL-terminated: only @len bytes count. */
    {
        cJSON *v = parse_len("[1,2]garbage", 5);

        check_print_item(v, "[1,2]");
        cJSON_Delete(v);
    }
}

/* ---- strings -------------------------------------------------------------------------------- */

static void test_strings(void **state)
{
    static const char text[] = "[\"\\u00e9\", \"a\\nb\", \"q\\\"q\", \"b\\\\s\", \"s\\/l\","
                               " \"\\ud83d\\ude00\", \"t\\tr\\r\", \"\\u0001\\u001F\\b\\f\","
                               " \"\xc3\xa9\xe2\x82\xac\", \"\\u007f\"]";
    /* What each string is, byte by byte. */
    static const char *const values[] = {
        "\xc3\xa9", "a\nb",         "q\"q",
        "b\\s",     "s/l",          "\xf0\x9f\x98\x80",
        "t\tr\r",   "\x01\x1f\b\f", "\xc3\xa9\xe2\x82\xac",
        "\x7f",
    };
    static const char expected[] = "[\"\xc3\xa9\",\"a\\nb\",\"q\\\"q\",\"b\\\\s\",\"s/l\","
                                   "\"\xf0\x9f\x98\x80\",\"t\\tr\\r\","
                                   "\"\\u0001\\u001f\\u0008\\u000c\",\"\xc3\xa9\xe2\x82\xac\","
                                   "\"\x7f\"]";
    cJSON *v = check_print(text, expected), *again;
    char *out;

    (void)state;
    assert_int_equal(cJSON_GetArraySize(v), ARRAY_SIZE(values));
    for (size_t i = 0; i < ARRAY_SIZE(values); i++)
        assert_string_equal(cJSON_GetArrayItem(v, (int)i)->valuestring, values[i]);
    /* The printed text reads back as the same strings. */
    out = sbx_json_print(v);
    again = parse(out);
    for (size_t i = 0; i < ARRAY_SIZE(values); i++)
        assert_string_equal(cJSON_GetArrayItem(again, (int)i)->valuestring, values[i]);
    free(out);
    cJSON_Delete(again);
    cJSON_Delete(v);

    /* Names are strings too, escaped the same way. */
    v = check_print("{\"k\\u00e9\\\"\\n\":1,\"\\\\\":2}", "{\"k\xc3\xa9\\\"\\n\":1,\"\\\\\":2}");
    assert_string_equal(v->child->string, "k\xc3\xa9\"\n");
    assert_string_equal(v->child->next->string, "\\");
    cJSON_Delete(v);

    /* Strings made in memory. */
    v = cJSON_CreateArray();
    cJSON_AddItemToArray(v, cJSON_CreateString("\x01\x1f\r\t\b\"\\/ \x7f\xc3\xa9"));
    cJSON_AddItemToArray(v, cJSON_CreateString(""));
    check_print_item(v, "[\"\\u0001\\u001f\\r\\t\\u0008\\\"\\\\/ \x7f\xc3\xa9\",\"\"]");
    cJSON_Delete(v);
}

/* ---- numbers made in memory ----------------------------------------------------------------- */

/* A number node of value @d: cJSON_CreateNumber would convert a NaN to int (undefined). */
static cJSON *number(double d)
{
    cJSON *n = cJSON_CreateNumber(0);

    n->valuedouble = d;
    return n;
}

static void check_number(double d, const char *expected)
{
    cJSON *v = cJSON_CreateArray();
    char want[64];

    cJSON_AddItemToArray(v, cJSON_CreateNumber(d));
    assert_null(sbx_json_number_text(v->child));
    snprintf(want, sizeof(want), "[%s]", expected);
    check_print_item(v, want);
    cJSON_Delete(v);
}

static void test_memory_numbers(void **state)
{
    char buf[SBX_JSON_DOUBLE_BUF];
    cJSON *v;

    (void)state;
    check_number(0.1, "0.1");
    check_number(1.5, "1.5");
    check_number(-1.5, "-1.5");
    check_number(0.0, "0");
    check_number(-0.0, "-0.0");
    check_number(5e-324, "5e-324");
    check_number(9007199254740991.0, "9007199254740991");
    check_number(-9007199254740991.0, "-9007199254740991");
    check_number(1e15, "1000000000000000");
    check_number(0.1 + 0.2, "0.30000000000000004");
    check_number(1.0 / 3, "0.3333333333333333");
    check_number(DBL_MAX, "1.7976931348623157e+308");
    check_number(2.2250738585072014e-308, "2.2250738585072014e-308");
    check_number(123456.789, "123456.789");
    check_number(42, "42");

    /* 1e21 is no integer below 2^53: shortest form, and it reads back as the same double. */
    assert_true(sbx_json_format_double(1e21, buf));
    assert_string_equal(buf, "1e+21");
    assert_true(strtod(buf, NULL) == 1e21);
    assert_true(sbx_json_format_double(9007199254740992.0, buf));
    assert_true(strtod(buf, NULL) == 9007199254740992.0);

    /* JSON has no infinity and no NaN: nothing is printed, at any depth. */
    assert_false(sbx_json_format_double(NAN, buf));
    assert_false(sbx_json_format_double(INFINITY, buf));
    assert_false(sbx_json_format_double(-INFINITY, buf));
    for (int i = 0; i < 3; i++) {
        double bad = i == 0 ? NAN : i == 1 ? INFINITY : -INFINITY;

        v = cJSON_CreateObject();
        cJSON_AddItemToObject(v, "a", cJSON_CreateArray());
        cJSON_AddItemToArray(cJSON_GetObjectItem(v, "a"), cJSON_CreateNumber(1));
        cJSON_AddItemToArray(cJSON_GetObjectItem(v, "a"), number(bad));
        assert_null(sbx_json_print(v));
        cJSON_Delete(v);
        v = number(bad);
        assert_null(sbx_json_print(v));
        cJSON_Delete(v);
    }

    /* A parsed 1e400 is infinite as a double, but has its literal. */
    v = parse("1e400");
    assert_true(isinf(v->valuedouble));
    check_print_item(v, "1e400");
    cJSON_Delete(v);
}

/* ---- the shortest double printer ------------------------------------------------------------ */

/* RFC 8259's number grammar, written out again: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool is_rfc_number(const char *s)
{
    if (*s == '-')
        s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9')
            s++;
    else
        return false;
    if (*s == '.') {
        if (!(*++s >= '0' && *s <= '9'))
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!(*s >= '0' && *s <= '9'))
            return false;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    return *s == '\0';
}

/* Significant digits of a decimal literal: those of its mantissa less leading (and trailing) zeros.
 */
static int significant_digits(const char *s)
{
    char digits[64];
    int n = 0, first = 0;

    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '0' && *s <= '9' && n < (int)sizeof(digits))
            digits[n++] = *s;
    while (first < n && digits[first] == '0')
        first++;
    while (n > first && digits[n - 1] == '0')
        n--;
    return n - first;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* @d formatted: an RFC 8259 number that reads back as exactly @d, with no fewer digits possible. */
static void check_format(double d)
{
    char buf[SBX_JSON_DOUBLE_BUF], shorter[512];
    double back;
    int p;

    assert_true(sbx_json_format_double(d, buf));
    assert_true(strlen(buf) < SBX_JSON_DOUBLE_BUF);
    if (!is_rfc_number(buf))
        fail_msg("%.17g formatted as %s: not a JSON number", d, buf);
    back = strtod(buf, NULL);
    if (memcmp(&back, &d, sizeof(d)) != 0)
        fail_msg("%.17g (%a) formatted as %s, which reads back as %a", d, d, buf, back);
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        /* Integers below 2^53 in full, without exponent or point ("-0.0" aside). */
        if (d != 0 && strpbrk(buf, ".eE"))
            fail_msg("integer %.17g formatted as %s", d, buf);
        return;
    }
    p = significant_digits(buf);
    assert_true(p >= 1 && p <= 17);
    if (p > 1) {
        snprintf(shorter, sizeof(shorter), "%.*g", p - 1, d);
        if (strtod(shorter, NULL) == d)
            fail_msg("%.17g formatted as %s, but %s is shorter", d, buf, shorter);
    }
}

static void test_format_double_many(void **state)
{
    static const double special[] = {
        DBL_MAX,
        -DBL_MAX,
        DBL_MIN,
        -DBL_MIN,
        DBL_TRUE_MIN,
        DBL_EPSILON,
        0.1,
        0.2,
        0.3,
        1e-7,
        1e21,
        1e22,
        1e23,
        9007199254740992.0,
        9007199254740994.0,
        1.0 / 3,
        2.0 / 3,
        100.5,
        123e-20,
        5e-324,
        1.7976931348623157e308,
        4.35,
        0.000001,
        1e16,
        123456789012345680.0,
    };
    uint64_t seed = 0x5eed5eed12345678ull;
    int checked = 0;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(special); i++)
        check_format(special[i]);
    /* Every power of two: where the gap to the next double below halves. */
    for (int e = -1074; e <= 1023; e++) {
        check_format(ldexp(1.0, e));
        check_format(-ldexp(1.0, e));
    }
    /* Random bit patterns: all exponents, subnormals included. */
    while (checked < 20000) {
        uint64_t bits = splitmix64(&seed);
        double d;

        memcpy(&d, &bits, sizeof(d));
        if (!isfinite(d))
            continue;
        check_format(d);
        checked++;
    }
    /* Short decimals: a literal of k significant digits reads as a double that is printed in at
     * most k, and (printed in full or not) reads back as that same double. */
    for (int i = 0; i < 20000; i++) {
        uint64_t r = splitmix64(&seed);
        int k = 1 + (int)(r % 17), exp10 = (int)((r >> 8) % 600) - 300;
        char lit[64], buf[SBX_JSON_DOUBLE_BUF];
        double d;

        uint64_t digits = splitmix64(&seed);

        lit[0] = (char)('1' + digits % 9);
        for (int j = 1; j < k; j++)
            lit[j] = (char)('0' + (digits >>= 3) % 10);
        snprintf(lit + k, sizeof(lit) - (size_t)k, "e%d", exp10);
        d = strtod(lit, NULL);
        if (d == 0 || !isfinite(d))
            continue;
        check_format(d);
        assert_true(sbx_json_format_double(d, buf));
        if (!(d == floor(d) && fabs(d) < 9007199254740992.0) &&
            significant_digits(buf) > significant_digits(lit))
            fail_msg("%s formatted as %s", lit, buf);
    }
}

/* ---- raw items and the printer's depth limit ----------------------------------------------- */

static cJSON *nested_arrays(int depth, cJSON *inner)
{
    cJSON *root = cJSON_CreateArray(), *cur = root;

    for (int i = 1; i < depth; i++) {
        cJSON *a = cJSON_CreateArray();

        cJSON_AddItemToArray(cur, a);
        cur = a;
    }
    if (inner)
        cJSON_AddItemToArray(cur, inner);
    return root;
}

static void test_raw_and_depth(void **state)
{
    char expected[2 * SBX_JSON_PRINT_DEPTH_MAX + 8];
    cJSON *v, *raw;
    size_t n = 0;

    (void)state;
    /* Raw text is printed as it is, whitespace and all. */
    v = cJSON_CreateObject();
    cJSON_AddItemToObject(v, "r", cJSON_CreateRaw("{\"x\": [1 ,2], \"y\":1e400}"));
    cJSON_AddItemToObject(v, "n", cJSON_CreateNumber(2));
    check_print_item(v, "{\"r\":{\"x\": [1 ,2], \"y\":1e400},\"n\":2}");
    /* A raw item without text cannot be printed. */
    raw = cJSON_GetObjectItem(v, "r");
    free(raw->valuestring);
    raw->valuestring = NULL;
    assert_null(sbx_json_print(v));
    cJSON_Delete(v);

    /* An item of no type. */
    v = cJSON_CreateArray();
    raw = cJSON_CreateNull();
    raw->type = cJSON_Invalid;
    cJSON_AddItemToArray(v, raw);
    assert_null(sbx_json_print(v));
    cJSON_Delete(v);

    /* SBX_JSON_PRINT_DEPTH_MAX arrays, a number in the innermost: printed. */
    for (int i = 0; i < SBX_JSON_PRINT_DEPTH_MAX; i++)
        expected[n++] = '[';
    expected[n++] = '7';
    for (int i = 0; i < SBX_JSON_PRINT_DEPTH_MAX; i++)
        expected[n++] = ']';
    expected[n] = '\0';
    v = nested_arrays(SBX_JSON_PRINT_DEPTH_MAX, cJSON_CreateNumber(7));
    check_print_item(v, expected);
    cJSON_Delete(v);
    /* One more level: refused, with and without anything inside. */
    v = nested_arrays(SBX_JSON_PRINT_DEPTH_MAX + 1, cJSON_CreateNumber(7));
    assert_null(sbx_json_print(v));
    cJSON_Delete(v);
    v = nested_arrays(SBX_JSON_PRINT_DEPTH_MAX + 1, NULL);
    assert_null(sbx_json_print(v));
    cJSON_Delete(v);
    v = nested_arrays(1000, NULL);
    assert_null(sbx_json_print(v));
    cJSON_Delete(v);
    /* Objects count as levels too. */
    v = cJSON_CreateObject();
    cJSON_AddItemToObject(v, "a", nested_arrays(SBX_JSON_PRINT_DEPTH_MAX, NULL));
    assert_null(sbx_json_print(v));
    cJSON_Delete(v);
    assert_null(sbx_json_print(NULL));
}

/* ---- member text ---------------------------------------------------------------------------- */

/* Parse @text (an object) and check the text of each member, in order, against @expected. */
static void check_members(const char *text, const char *const *expected, size_t n)
{
    cJSON *root = parse(text), *m, *other;
    size_t i = 0;

    assert_true(cJSON_IsObject(root));
    cJSON_ArrayForEach(m, root)
    {
        char *got = sbx_json_member_text(text, strlen(text), root, m);

        assert_true(i < n);
        if (!got || strcmp(got, expected[i]) != 0)
            fail_msg("member %zu (\"%s\") of %s: got %s, expected %s", i, m->string, text,
                     got ? got : "NULL", expected[i]);
        free(got);
        /* Nested members are not members of the root. */
        cJSON_ArrayForEach(other, m)
            assert_null(sbx_json_member_text(text, strlen(text), root, other));
        i++;
    }
    assert_int_equal(i, n);
    /* The root is not a member of itself. */
    assert_null(sbx_json_member_text(text, strlen(text), root, root));
    cJSON_Delete(root);
}

static void test_member_text(void **state)
{
    static const char odd[] =
        " \r\n{  \"a\" :  1 ,\"b\":{ \"c\" : [ 1 , \"x]}\" , {\"d\" :\"\\\"{\"} ] } ,\n"
        "\t\"e\" : \"sp ace\" ,\"f\":[ ],\"g\":-0.0e+0 , \"h\" : null,\"i\" :\"\\\\\",\"j\":"
        "{\"k\":{\"l\":[[\"]\",\"}\"],{}]}},\"m\":\"\\u00e9\\\"\"\t}\n ";
    static const char *const odd_members[] = {
        "1",
        "{\"c\":[1,\"x]}\",{\"d\":\"\\\"{\"}]}",
        "\"sp ace\"",
        "[]",
        "-0.0e+0",
        "null",
        "\"\\\\\"",
        "{\"k\":{\"l\":[[\"]\",\"}\"],{}]}}",
        "\"\\u00e9\\\"\"",
    };
    static const char *const e5[] = {"1e5"};
    static const char *const xy[] = {"\"]}\\\"\"", "true"};
    static const char *const last[] = {"[1,2]", "false"};
    static const char *const names[] = {"12345678901234567890", "\"v\""};
    cJSON *root, *other;

    (void)state;
    check_members(odd, odd_members, ARRAY_SIZE(odd_members));
    check_members("{\"a\": 1e5 }", e5, 1);
    check_members("{\"x\":\"]}\\\"\",\"y\":true}", xy, 2);
    check_members("{\"a\":[ 1 ,\n2 ] , \"b\" : false}", last, 2);
    check_members("{\"{\\\"}\":12345678901234567890,\":,\":\"v\"}", names, 2);

    /* Not a member: of another tree, or the root is no object. */
    root = parse("{\"a\":1}");
    other = parse("{\"a\":1}");
    assert_null(sbx_json_member_text("{\"a\":1}", 7, root, other->child));
    assert_null(sbx_json_member_text("{\"a\":1}", 7, root, NULL));
    cJSON_Delete(root);
    cJSON_Delete(other);
    root = parse("[1,2]");
    assert_null(sbx_json_member_text("[1,2]", 5, root, root->child));
    cJSON_Delete(root);
}

/* Every node of @root (parsed from @text): its item text reads back as the same value. */
static void check_items(const char *text, const cJSON *root, const cJSON *node)
{
    const cJSON *child;
    char *got = sbx_json_item_text(text, strlen(text), root, node);
    char *printed = sbx_json_print(node), *again;
    cJSON *v;

    assert_non_null(got);
    v = parse(got);
    again = sbx_json_print(v);
    if (strcmp(again, printed) != 0)
        fail_msg("item of %s: got %s, expected %s", text, got, printed);
    free(again);
    cJSON_Delete(v);
    free(got);
    free(printed);
    cJSON_ArrayForEach(child, node) check_items(text, root, child);
}

static void test_item_text(void **state)
{
    static const char odd[] =
        " \r\n{  \"a\" :  1 ,\"b\":{ \"c\" : [ 1 , \"x]}\" , {\"d\" :\"\\\"{\"} ] } ,\n"
        "\t\"e\" : \"sp ace\" ,\"f\":[ ],\"g\":-0.0e+0 , \"h\" : null,\"i\" :\"\\\\\",\"j\":"
        "{\"k\":{\"l\":[[\"]\",\"}\"],{}]}},\"m\":\"\\u00e9\\\"\"\t}\n ";
    static const char arr[] = " [ 1 , [ \"a,]\" , { \"b\" : [ 9007199254740993 ] } ] , null ] ";
    cJSON *root = parse(odd), *other, *l;
    char *got;

    (void)state;
    check_items(odd, root, root);
    /* j.k.l[0][1]: a string that holds a brace, inside nested arrays. */
    l = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "j"), "k"), "l");
    got = sbx_json_item_text(odd, strlen(odd), root, cJSON_GetArrayItem(l->child, 1));
    assert_string_equal(got, "\"}\"");
    free(got);
    /* Not in the tree. */
    other = parse("{\"a\":1}");
    assert_null(sbx_json_item_text(odd, strlen(odd), root, other->child));
    cJSON_Delete(other);
    cJSON_Delete(root);

    root = parse(arr);
    check_items(arr, root, root);
    got = sbx_json_item_text(arr, strlen(arr), root, root->child->next->child->next->child);
    assert_string_equal(got, "[9007199254740993]");
    free(got);
    got = sbx_json_item_text(arr, strlen(arr), root, root);
    assert_string_equal(got, "[1,[\"a,]\",{\"b\":[9007199254740993]}],null]");
    free(got);
    cJSON_Delete(root);
}

/* ---- minify and normalize ------------------------------------------------------------------ */

static void test_minify(void **state)
{
    static const char text[] = " [ \"a b\\t \" ,\n { \"k y\" : \"\\\\\" , \"q\" : \"\\\" x \" } ,"
                               " 1e400 , \"  \" ] \r\n";
    static const char expected[] =
        "[\"a b\\t \",{\"k y\":\"\\\\\",\"q\":\"\\\" x \"},1e400,\"  \"]";
    char *out, *error = NULL;

    (void)state;
    out = sbx_json_minify(text, strlen(text));
    assert_string_equal(out, expected);
    free(out);
    /* Only @len bytes are read. */
    out = sbx_json_minify("[ 1 ]   ", 5);
    assert_string_equal(out, "[1]");
    free(out);

    out = sbx_json_normalize(text, strlen(text), SBX_JSON_DEPTH_MAX, &error);
    assert_null(error);
    assert_string_equal(out, expected);
    free(out);
    out = sbx_json_normalize("[1,]", 4, SBX_JSON_DEPTH_MAX, &error);
    assert_null(out);
    assert_non_null(error);
    free(error);
    out = sbx_json_normalize("[[1]]", 5, 1, &error);
    assert_null(out);
    assert_non_null(error);
    free(error);
}

/* ---- what the parser refuses ---------------------------------------------------------------- */

static void expect_reject_depth(const char *text, size_t len, int max_depth, const char *reason)
{
    char *error = NULL;
    cJSON *v = sbx_json_parse(text, len, max_depth, &error);

    if (v)
        fail_msg("accepted: %.*s", (int)len, text);
    if (!error)
        fail_msg("no error for: %.*s", (int)len, text);
    if (reason && !strstr(error, reason))
        fail_msg("error \"%s\" for %.*s does not contain \"%s\"", error, (int)len, text, reason);
    free(error);
    /* Without a place for the error, too. */
    assert_null(sbx_json_parse(text, len, max_depth, NULL));
}

static void expect_reject(const char *text, const char *reason)
{
    expect_reject_depth(text, strlen(text), SBX_JSON_DEPTH_MAX, reason);
}

static void test_rejects(void **state)
{
    static const char *const not_numbers[] = {
        "01",   "-01",  "1.",   ".5",  "-",     "+1",    "1e",         "1e+",
        "1E-",  "0x10", "1.e5", "--1", "1-2",   "1e5e5", "1.2.3",      "[01]",
        "[1.]", "[-]",  "-.5",  "00",  "1e+-1", "[1,-]", "{\"a\":.1}",
    };
    static const char *const not_json[] = {
        "",
        " ",
        "[1,]",
        "[1 2]",
        "{\"a\" 1}",
        "{'a':1}",
        "[1]]",
        "[1] x",
        "[1]}",
        "1 2",
        "\"abc",
        "[",
        "{\"a\":1,}",
        "nul",
        "NaN",
        "Infinity",
        "-Infinity",
        "True",
        "[\"\\x\"]",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\u12\"",
        "{1:2}",
        "[]{}",
        "\"a\" \"b\"",
    };
    char exp_digits[64], deep[128];
    cJSON *v;

    (void)state;
    /* Two members of one name, at any level, however spelled. */
    expect_reject("{\"a\":1,\"a\":2}", "duplicate");
    expect_reject("{\"a\":1,\"b\":2,\"a\":1}", "duplicate");
    expect_reject("[{\"x\":{\"b\":1,\"b\":1}}]", "duplicate");
    expect_reject("{\"a\":1,\"\\u0061\":2}", "duplicate");
    cJSON_Delete(parse("{\"a\":{\"a\":1},\"b\":{\"a\":2}}")); /* one name in two objects */

    for (size_t i = 0; i < ARRAY_SIZE(not_numbers); i++)
        expect_reject(not_numbers[i], NULL);
    expect_reject("[1.]", "RFC 8259");
    expect_reject("01", "RFC 8259");
    for (size_t i = 0; i < ARRAY_SIZE(not_json); i++)
        expect_reject(not_json[i], NULL);
    expect_reject("[1] x", "byte 4");

    /* Exponents of SBX_JSON_EXPONENT_DIGITS digits at most, not counting leading zeros. */
    memset(exp_digits, 0, sizeof(exp_digits));
    strcpy(exp_digits, "1e");
    memset(exp_digits + 2, '9', SBX_JSON_EXPONENT_DIGITS);
    v = check_print(exp_digits, exp_digits);
    cJSON_Delete(v);
    exp_digits[2 + SBX_JSON_EXPONENT_DIGITS] = '9';
    expect_reject(exp_digits, "exponent");
    cJSON_Delete(
        check_print("1e-0000000000000000000000000000001", "1e-0000000000000000000000000000001"));
    expect_reject("[1E+1000000000000000000]", "exponent");

    /* Nesting: max_depth levels of arrays and objects. */
    v = sbx_json_parse("[{\"a\":[1]}]", 11, 3, NULL);
    assert_non_null(v);
    cJSON_Delete(v);
    expect_reject_depth("[{\"a\":[[1]]}]", 13, 3, "nested deeper");
    expect_reject_depth("[[[[]]]]", 8, 3, "nested deeper");
    /* Past cJSON's own limit, whatever max_depth says. */
    memset(deep, '[', 40);
    memset(deep + 40, ']', 40);
    expect_reject_depth(deep, 80, SBX_JSON_DEPTH_MAX, NULL);
    expect_reject_depth(deep, 80, 1000, NULL);

    /* NUL: escaped, raw in a string, raw outside. */
    expect_reject("\"a\\u0000b\"", "\\u0000");
    expect_reject("{\"\\u0000\":1}", "\\u0000");
    expect_reject_depth("\"a\0b\"", 5, SBX_JSON_DEPTH_MAX, "control character");
    expect_reject_depth("[1]\0", 4, SBX_JSON_DEPTH_MAX, "control character");
    expect_reject_depth("\"\\\0\"", 4, SBX_JSON_DEPTH_MAX, "invalid escape");
    cJSON_Delete(check_print("\"\\\\u0000\"", "\"\\\\u0000\"")); /* a backslash, then text */

    /* Every escape checked: cJSON alone reads a \u of other than four hex digits as U+0000,
     * cutting the string (or a member's name) there. */
    expect_reject("[\"rm\\uZZZZ -rf /\"]", "four hex digits");
    expect_reject("{\"a\\u00g1\":1}", "four hex digits");
    expect_reject("[\"\\u'03f\"]", "four hex digits");
    expect_reject("[\"\\u12\"]", "four hex digits");
    expect_reject("\"\\u", "four hex digits");
    expect_reject("[\"\\uD83D\\uzzzz\"]", "four hex digits");
    expect_reject("[\"\\a\"]", "invalid escape");
    expect_reject("[\"\\U00e9\"]", "invalid escape");
    expect_reject("[\"\\\xc3\xa9\"]", "invalid escape");
    expect_reject_depth("[\"\\us\\\0l\"]", 10, SBX_JSON_DEPTH_MAX, "four hex digits");
    expect_reject_depth("\"\\", 2, SBX_JSON_DEPTH_MAX, "invalid escape");
    cJSON_Delete(check_print("[\"\\u00E9\\uABCD\\uabcd\\u0041\"]",
                             "[\"\xc3\xa9\xea\xaf\x8d\xea\xaf\x8d"
                             "A\"]"));

    /* Control characters, and bytes that are not UTF-8. */
    expect_reject("\"a\tb\"", "control character");
    expect_reject("[1,\f2]", "control character");
    expect_reject("\"\xc3\"", "UTF-8");
    expect_reject("\"\xc0\xaf\"", "UTF-8");
    expect_reject("\"\xed\xa0\x80\"", "UTF-8");     /* a surrogate */
    expect_reject("\"\xf4\x90\x80\x80\"", "UTF-8"); /* above U+10FFFF */
    /* Nothing but ASCII outside strings: not even a byte order mark. */
    expect_reject("\xef\xbb\xbf{\"a\":1}", "non-ASCII");
    expect_reject("[1,\xc2\xa0"
                  "2]",
                  "non-ASCII");
}

/* ---- exact decimals ------------------------------------------------------------------------- */

static SbxDecimal dec(const char *s)
{
    SbxDecimal d;

    if (!sbx_decimal_parse(s, strlen(s), &d))
        fail_msg("sbx_decimal_parse refused %s", s);
    return d;
}

static void check_digits(const char *s, bool negative, const char *digits, int64_t exp)
{
    SbxDecimal d = dec(s);
    size_t n = strlen(digits);

    assert_int_equal(d.negative, negative);
    if (d.n != n)
        fail_msg("%s: %zu digits, expected %s", s, d.n, digits);
    assert_int_equal(d.a_len + d.b_len, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(sbx_decimal_digit(&d, i), digits[i] - '0');
    if (n)
        assert_int_equal(d.exp, exp);
}

static void test_decimal_parse(void **state)
{
    static const char *const bad[] = {
        "",    "-",     "01",       "1.",  ".5",
        "+1",  "1e",    "1e+",      " 1",  "1 ",
        "0x1", "1e5.0", "Infinity", "--0", "1e1234567890123456789",
    };
    char buf[SBX_JSON_DOUBLE_BUF];
    SbxDecimal d;
    cJSON *v;

    (void)state;
    check_digits("0", false, "", 0);
    check_digits("-0.000e7", true, "", 0);
    check_digits("123", false, "123", 3);
    check_digits("120.0340e-2", false, "120034", 1);
    check_digits("0.05", false, "5", -1);
    check_digits("-100", true, "1", 3);
    check_digits("1e400", false, "1", 401);
    check_digits("10.01E+1", false, "1001", 3);
    check_digits("0.000123e-00010", false, "123", -13);
    check_digits("1e123456789012345678", false, "1", 123456789012345679);
    check_digits("1e-123456789012345678", false, "1", -123456789012345677);
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        if (sbx_decimal_parse(bad[i], strlen(bad[i]), &d))
            fail_msg("sbx_decimal_parse accepted \"%s\"", bad[i]);
    /* Only @len bytes are read. */
    assert_true(sbx_decimal_parse("12.5xyz", 4, &d));
    assert_int_equal(d.n, 3);
    assert_true(sbx_decimal_parse("125", 2, &d));
    assert_int_equal(d.n, 2);

    /* Of a node: its literal, or the shortest text of a number made in memory. */
    v = parse("[1.50e1, \"1\"]");
    assert_true(sbx_decimal_of(v->child, buf, &d));
    assert_int_equal(d.n, 2);
    assert_int_equal(d.exp, 2);
    assert_false(sbx_decimal_of(v->child->next, buf, &d));
    cJSON_Delete(v);
    v = cJSON_CreateNumber(0.1);
    assert_true(sbx_decimal_of(v, buf, &d));
    assert_int_equal(d.n, 1);
    assert_int_equal(sbx_decimal_digit(&d, 0), 1);
    assert_int_equal(d.exp, 0);
    cJSON_Delete(v);
    v = number(INFINITY);
    assert_false(sbx_decimal_of(v, buf, &d));
    cJSON_Delete(v);
}

static int cmp(const char *x, const char *y)
{
    SbxDecimal a = dec(x), b = dec(y);

    return sbx_decimal_compare(&a, &b);
}

/* @x < @y, and so @y > @x. */
static void check_less(const char *x, const char *y)
{
    if (cmp(x, y) != -1 || cmp(y, x) != 1)
        fail_msg("expected %s < %s", x, y);
}

static void check_equal(const char *x, const char *y)
{
    if (cmp(x, y) != 0 || cmp(y, x) != 0)
        fail_msg("expected %s == %s", x, y);
}

static void test_decimal_compare(void **state)
{
    /* Ascending, every neighbour strictly less. */
    static const char *const ascending[] = {
        "-1e400",
        "-1e399",
        "-1180591620717411303424",
        "-9007199254740993",
        "-9007199254740992",
        "-1.5",
        "-1",
        "-0.1",
        "-1e-400",
        "0",
        "1e-400",
        "5e-324",
        "0.1",
        "0.30000000000000004",
        "1",
        "1.0000000000000001",
        "1.5",
        "9007199254740992",
        "9007199254740993",
        "12345678901234567890",
        "972783798187987123879878123.18878137",
        "972783798187987123879878123.188781371",
        "1e399",
        "1e400",
    };

    (void)state;
    check_equal("1", "1.0");
    check_equal("1", "10e-1");
    check_equal("1", "0.1e1");
    check_equal("1.0", "0.1e1");
    check_equal("-0", "0");
    check_equal("-0.0e5", "0e-5");
    check_equal("100", "1e2");
    check_equal("100", "1E+2");
    check_equal("-2.5e1", "-25");
    check_equal("12345678901234567890", "1234567890123456789e1");
    check_equal("1e400", "1e400");
    check_less("9007199254740992", "9007199254740993");
    check_less("972783798187987123879878123.18878137", "972783798187987123879878123.188781371");
    check_less("-972783798187987123879878123.188781371", "-972783798187987123879878123.18878137");
    check_less("-2", "-1");
    check_less("-1e-400", "0");
    check_less("-1e-400", "-0");
    check_less("0", "1e-400");
    check_less("0.99", "1");
    check_less("1e399", "1e400");
    check_less("1e-400", "1e-399");
    for (size_t i = 0; i < ARRAY_SIZE(ascending); i++)
        for (size_t j = 0; j < ARRAY_SIZE(ascending); j++) {
            int want = i < j ? -1 : i > j ? 1 : 0;

            if (cmp(ascending[i], ascending[j]) != want)
                fail_msg("compare(%s, %s) != %d", ascending[i], ascending[j], want);
        }
}

static bool is_int(const char *s)
{
    SbxDecimal d = dec(s);

    return sbx_decimal_is_integer(&d);
}

static void test_decimal_is_integer(void **state)
{
    static const char *const yes[] = {
        "0",       "-0",       "-0.0",
        "0e-400",  "1",        "1.0",
        "1e3",     "1.5e1",    "0.1e1",
        "-7",      "1e400",    "12345678910111213141516171819202122232425262728293031",
        "120.000", "1234.5e1", "-9223372036854775809",
        "100e-2",
    };
    static const char *const no[] = {
        "1.5",
        "1e-1",
        "0.5",
        "-0.5",
        "1.0000000000000001",
        "1e-400",
        "1234.56e1",
        "10e-2",
        "12345678910111213141516171819202122232425262728293031.5",
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
        if (!is_int(yes[i]))
            fail_msg("%s is an integer", yes[i]);
    for (size_t i = 0; i < ARRAY_SIZE(no); i++)
        if (is_int(no[i]))
            fail_msg("%s is no integer", no[i]);
}

static int mult(const char *x, const char *m)
{
    SbxDecimal a = dec(x), b = dec(m);

    return sbx_decimal_multiple_of(&a, &b);
}

static void test_decimal_multiple_of(void **state)
{
    static const struct {
        const char *x, *m;
        int want;
    } cases[] = {
        {"0.0075", "0.0001", 1},
        {"0.00751", "0.0001", 0},
        {"4.5", "1.5", 1},
        {"-4.5", "1.5", 1},
        {"35", "1.5", 0},
        {"36", "1.5", 1},
        {"1e308", "0.123456789", 0},
        {"12345678901234567890", "10", 1},
        {"12345678901234567890", "3", 1}, /* digit sum 90 */
        {"12345678901234567891", "3", 0}, /* digit sum 91 */
        {"12345678901234567893", "3", 1}, /* digit sum 93 */
        {"1e400", "7", 0},
        {"1e400", "5", 1},
        {"1e400", "1e399", 1},
        {"1e399", "1e400", 0},
        {"7e400", "7", 1},
        {"0", "7", 1},
        {"-0.0", "0.123", 1},
        {"0", "12345678901234567891", -1},  /* 20 significant digits */
        {"10", "12345678901234567891", -1}, /* 20 significant digits */
        {"10", "1234567890123456789", 0},   /* 19: computed */
        {"2469135780246913578", "1234567890123456789", 1},
        {"9999999999999999999e5", "9999999999999999999", 1},
        {"1e-400", "1e-401", 1},
        {"1e-401", "1e-400", 0},
        {"1", "0.1", 1},
        {"0.3", "0.1", 1},
        {"0.30000000000000004", "0.1", 0},
        {"5", "1", 1},
        {"5.5", "1", 0},
        {"2", "0.5e1", 0},
        {"10", "0.5e1", 1},
        {"1e20", "1e19", 1},
        {"12", "1.2e1", 1},
        {"24e-1", "1.2", 1},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        int got = mult(cases[i].x, cases[i].m);

        if (got != cases[i].want)
            fail_msg("multiple_of(%s, %s) = %d, expected %d", cases[i].x, cases[i].m, got,
                     cases[i].want);
    }
}

static void test_decimal_to_int64(void **state)
{
    static const struct {
        const char *s;
        int64_t want;
    } ok[] = {
        {"9223372036854775807", INT64_MAX},
        {"-9223372036854775808", INT64_MIN},
        {"9.223372036854775807e18", INT64_MAX},
        {"-92233720368547758.08e2", INT64_MIN},
        {"4.0e3", 4000},
        {"-0", 0},
        {"0e999", 0},
        {"1e18", 1000000000000000000},
        {"-1", -1},
        {"100e-2", 1},
        {"9007199254740993", 9007199254740993},
        {"1234567890123456789", 1234567890123456789},
    };
    static const char *const bad[] = {
        "9223372036854775808",
        "-9223372036854775809",
        "1.5",
        "1e19",
        "-1e19",
        "1e400",
        "0.5",
        "18446744073709551616",
        "99999999999999999999",
        "1e-400",
        "9223372036854775807.5",
    };
    SbxDecimal d;
    int64_t v;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
        d = dec(ok[i].s);
        v = 12345;
        if (!sbx_decimal_to_int64(&d, &v) || v != ok[i].want)
            fail_msg("%s: expected %lld", ok[i].s, (long long)ok[i].want);
    }
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        d = dec(bad[i]);
        if (sbx_decimal_to_int64(&d, &v))
            fail_msg("%s read as int64 %lld", bad[i], (long long)v);
    }
}

static void test_json_int64(void **state)
{
    cJSON *root = parse("[9223372036854775807, -9223372036854775808, 9223372036854775808,"
                        " 1.5, 4.0e3, -0, 1e19, \"5\", true, null, 9007199254740993]");
    static const struct {
        bool ok;
        int64_t want;
    } expect[] = {
        {true, INT64_MAX},
        {true, INT64_MIN},
        {false, 0},
        {false, 0},
        {true, 4000},
        {true, 0},
        {false, 0},
        {false, 0},
        {false, 0},
        {false, 0},
        {true, 9007199254740993},
    };
    cJSON *item, *mem;
    size_t i = 0;
    int64_t v;

    (void)state;
    cJSON_ArrayForEach(item, root)
    {
        bool ok = sbx_json_int64(item, &v);

        assert_true(i < ARRAY_SIZE(expect));
        if (ok != expect[i].ok || (ok && v != expect[i].want))
            fail_msg("element %zu: ok %d value %lld", i, ok, (long long)v);
        i++;
    }
    assert_int_equal(i, ARRAY_SIZE(expect));
    cJSON_Delete(root);

    /* Numbers made in memory: exactly, or not at all. */
    mem = cJSON_CreateNumber(42);
    assert_true(sbx_json_int64(mem, &v));
    assert_int_equal(v, 42);
    cJSON_Delete(mem);
    mem = cJSON_CreateNumber(-9007199254740991.0);
    assert_true(sbx_json_int64(mem, &v));
    assert_true(v == -9007199254740991);
    cJSON_Delete(mem);
    mem = cJSON_CreateNumber(0.5);
    assert_false(sbx_json_int64(mem, &v));
    cJSON_Delete(mem);
    mem = cJSON_CreateNumber(1e300);
    assert_false(sbx_json_int64(mem, &v));
    cJSON_Delete(mem);
    mem = number(NAN);
    assert_false(sbx_json_int64(mem, &v));
    cJSON_Delete(mem);
    assert_false(sbx_json_int64(NULL, &v));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_kept),
        cmocka_unit_test(test_numbers_next_to_strings),
        cmocka_unit_test(test_structure_and_order),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_memory_numbers),
        cmocka_unit_test(test_format_double_many),
        cmocka_unit_test(test_raw_and_depth),
        cmocka_unit_test(test_member_text),
        cmocka_unit_test(test_minify),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_decimal_parse),
        cmocka_unit_test(test_decimal_compare),
        cmocka_unit_test(test_decimal_is_integer),
        cmocka_unit_test(test_decimal_multiple_of),
        cmocka_unit_test(test_decimal_to_int64),
        cmocka_unit_test(test_json_int64),
        cmocka_unit_test(test_item_text),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
