/*
 * Fuzz target: the exact JSON module (protocol/json.h) on arbitrary bytes. Whatever
 * sbx_json_parse accepts must print, and the print must parse again to the same tree, every
 * number with the same literal, and print to the same bytes; the minified text and each
 * member's text must read as the same values; every literal must be an exact decimal whose
 * arithmetic agrees with the double cJSON read and, for plain integers, with strtoll. The
 * first 8 bytes, read as a double, must print in a form that strtod reads back bit for bit.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "protocol/json.h"
#include "protocol/limits.h"

/* Number nodes of both trees, for the checks between pairs of numbers. */
#define PAIRS_MAX 48

typedef struct {
    const cJSON *nodes[PAIRS_MAX];
    size_t n;
} Numbers;

static SbxDecimal literal_of(const cJSON *item)
{
    const char *lit = sbx_json_number_text(item);
    SbxDecimal d;

    FUZZ_CHECK(lit);
    FUZZ_CHECK(sbx_decimal_parse(lit, strlen(lit), &d));
    return d;
}

/* An optional minus and 1 to @max digits: what strtoll reads whole, when it fits. */
static bool plain_digits(const char *s, size_t max)
{
    size_t n = 0;

    if (*s == '-')
        s++;
    for (; *s >= '0' && *s <= '9'; s++)
        n++;
    return *s == '\0' && n >= 1 && n <= max;
}

/* A parsed number node: its literal as a decimal, against itself, its double and strtoll. */
static void check_number(const cJSON *item)
{
    static const SbxDecimal zero = {0};
    const char *lit = sbx_json_number_text(item);
    SbxDecimal d = literal_of(item), one;
    int64_t v = 0, v2 = 0;
    bool is_int, fits;
    int sign;

    FUZZ_CHECK(sbx_decimal_compare(&d, &d) == 0);
    /* What cJSON read, strtod reads; its sign is the literal's (or zero, if it underflows). */
    FUZZ_CHECK(strtod(lit, NULL) == item->valuedouble);
    sign = sbx_decimal_compare(&d, &zero);
    FUZZ_CHECK(sign == -sbx_decimal_compare(&zero, &d));
    if (item->valuedouble > 0)
        FUZZ_CHECK(sign == 1);
    if (item->valuedouble < 0)
        FUZZ_CHECK(sign == -1);
    if (sign == 0)
        FUZZ_CHECK(item->valuedouble == 0);

    is_int = sbx_decimal_is_integer(&d);
    fits = sbx_decimal_to_int64(&d, &v);
    FUZZ_CHECK(!fits || is_int);
    FUZZ_CHECK(sbx_json_int64(item, &v2) == fits);
    FUZZ_CHECK(!fits || v == v2);
    if (fits && v >= -9007199254740992 && v <= 9007199254740992)
        FUZZ_CHECK(item->valuedouble == (double)v);
    FUZZ_CHECK(sbx_decimal_parse("1", 1, &one));
    FUZZ_CHECK(sbx_decimal_multiple_of(&d, &one) == (is_int ? 1 : 0));
    if (d.n > 0)
        FUZZ_CHECK(sbx_decimal_multiple_of(&d, &d) == (d.n <= 19 ? 1 : -1));
    if (plain_digits(lit, SIZE_MAX)) {
        char *end;
        long long ll;

        FUZZ_CHECK(is_int);
        errno = 0;
        ll = strtoll(lit, &end, 10);
        FUZZ_CHECK(*end == '\0');
        FUZZ_CHECK(fits == (errno == 0));
        if (fits)
            FUZZ_CHECK(v == ll);
    }
}

/* Two parsed numbers: the exact order agrees with the doubles', and with strtoll's remainder. */
static void check_pair(const cJSON *x, const cJSON *y)
{
    SbxDecimal a = literal_of(x), b = literal_of(y);
    int c = sbx_decimal_compare(&a, &b);
    const char *lx = sbx_json_number_text(x), *ly = sbx_json_number_text(y);

    FUZZ_CHECK(c == -sbx_decimal_compare(&b, &a));
    /* strtod is monotonic: different doubles come from literals in the same order. */
    if (x->valuedouble < y->valuedouble)
        FUZZ_CHECK(c == -1);
    if (x->valuedouble > y->valuedouble)
        FUZZ_CHECK(c == 1);
    if (c == 0)
        FUZZ_CHECK(x->valuedouble == y->valuedouble);
    if (b.n > 0 && !b.negative) {
        int r = sbx_decimal_multiple_of(&a, &b);

        FUZZ_CHECK(b.n > 19 ? r == -1 : r == 0 || r == 1);
        if (plain_digits(lx, 18) && plain_digits(ly, 18))
            FUZZ_CHECK(r == (strtoll(lx, NULL, 10) % strtoll(ly, NULL, 10) == 0));
    }
}

/* No object of the tree has two members of one name (checked up to a bound, for speed). */
static void check_names_unique(const cJSON *object)
{
    size_t n = 0;

    for (const cJSON *a = object->child; a && n < 512; a = a->next, n++)
        for (const cJSON *b = a->next; b; b = b->next)
            FUZZ_CHECK(strcmp(a->string, b->string) != 0);
}

/* Walk two trees that must be the same value, node by node. */
static void check_same(const cJSON *a, const cJSON *b, Numbers *nums)
{
    for (; a && b; a = a->next, b = b->next) {
        FUZZ_CHECK((a->type & 0xff) == (b->type & 0xff));
        FUZZ_CHECK(!a->string == !b->string);
        if (a->string)
            FUZZ_CHECK(strcmp(a->string, b->string) == 0);
        if (cJSON_IsString(a)) {
            FUZZ_CHECK(a->valuestring && b->valuestring);
            FUZZ_CHECK(strcmp(a->valuestring, b->valuestring) == 0);
        } else if (cJSON_IsNumber(a)) {
            SbxDecimal da = literal_of(a), db = literal_of(b);

            FUZZ_CHECK(strcmp(sbx_json_number_text(a), sbx_json_number_text(b)) == 0);
            FUZZ_CHECK(sbx_decimal_compare(&da, &db) == 0);
            check_number(a);
            if (nums->n < PAIRS_MAX)
                nums->nodes[nums->n++] = a;
        } else if (cJSON_IsArray(a) || cJSON_IsObject(a)) {
            if (cJSON_IsObject(a))
                check_names_unique(a);
            check_same(a->child, b->child, nums);
        }
    }
    FUZZ_CHECK(!a && !b);
}

/* @text parses, and prints as @expected. */
static void check_prints_as(const char *text, size_t len, const char *expected)
{
    char *error = NULL, *out;
    cJSON *v = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &error);

    FUZZ_CHECK(v && !error);
    out = sbx_json_print(v);
    FUZZ_CHECK(out && strcmp(out, expected) == 0);
    free(out);
    cJSON_Delete(v);
}

static int significant_digits(const char *s)
{
    int n = 0, lead = 1, zeros = 0;

    for (; *s && *s != 'e'; s++) {
        if (*s < '0' || *s > '9')
            continue;
        if (*s == '0' && lead)
            continue;
        lead = 0;
        zeros = *s == '0' ? zeros + 1 : 0;
        n++;
    }
    return n - zeros;
}

/* The first 8 bytes as a double: printed exactly, shortest, and as a JSON number. */
static void check_double(const uint8_t *data, size_t size)
{
    char buf[SBX_JSON_DOUBLE_BUF], shorter[512];
    SbxDecimal d;
    double x, back;
    cJSON *n;
    int64_t v;
    int p;

    if (size < sizeof(x))
        return;
    memcpy(&x, data, sizeof(x));
    if (!isfinite(x)) {
        FUZZ_CHECK(!sbx_json_format_double(x, buf));
        return;
    }
    FUZZ_CHECK(sbx_json_format_double(x, buf));
    FUZZ_CHECK(strlen(buf) < SBX_JSON_DOUBLE_BUF);
    back = strtod(buf, NULL);
    FUZZ_CHECK(memcmp(&back, &x, sizeof(x)) == 0);
    FUZZ_CHECK(sbx_decimal_parse(buf, strlen(buf), &d));
    if (x == floor(x) && fabs(x) < 9007199254740992.0) {
        FUZZ_CHECK(x == 0 || !strpbrk(buf, ".e"));
        n = cJSON_CreateNumber(x);
        FUZZ_CHECK(sbx_json_int64(n, &v) && v == (int64_t)x);
        cJSON_Delete(n);
    } else {
        p = significant_digits(buf);
        FUZZ_CHECK(p >= 1 && p <= 17);
        if (p > 1) {
            snprintf(shorter, sizeof(shorter), "%.*g", p - 1, x);
            FUZZ_CHECK(strtod(shorter, NULL) != x);
        }
    }
}

/* Minified text: no whitespace outside strings. */
static void check_minified(const char *s)
{
    bool in_string = false;

    for (; *s; s++) {
        if (in_string && *s == '\\')
            s++;
        else if (*s == '"')
            in_string = !in_string;
        else if (!in_string)
            FUZZ_CHECK(*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r');
    }
}

static void check_members(const uint8_t *data, size_t size, const cJSON *root, const char *min)
{
    const cJSON *m;

    if (!cJSON_IsObject(root)) {
        /* Elements of an array are no members. */
        if (root->child)
            FUZZ_CHECK(!sbx_json_member_text((const char *)data, size, root, root->child));
        return;
    }
    cJSON_ArrayForEach(m, root)
    {
        char *text = sbx_json_member_text((const char *)data, size, root, m);
        char *printed = sbx_json_print(m);

        FUZZ_CHECK(text && printed);
        /* The member's bytes, minified: found in the minified whole, read as the same value. */
        FUZZ_CHECK(strstr(min, text));
        check_minified(text);
        check_prints_as(text, strlen(text), printed);
        /* A member of a member is not one of the root. */
        if (m->child)
            FUZZ_CHECK(!sbx_json_member_text((const char *)data, size, root, m->child));
        free(text);
        free(printed);
    }
}

/* Every node's text (sbx_json_item_text()): in the minified whole, read as the same value. */
static void check_items(const uint8_t *data, size_t size, const cJSON *root, const cJSON *node,
                        const char *min, int *budget)
{
    const cJSON *child;
    char *text, *printed;

    /* Each node walks the text again: the first 64 nodes (depth first), so that wide inputs
     * stay linear. */
    if ((*budget)-- <= 0)
        return;
    text = sbx_json_item_text((const char *)data, size, root, node);
    printed = sbx_json_print(node);
    FUZZ_CHECK(text && printed);
    FUZZ_CHECK(strstr(min, text));
    check_prints_as(text, strlen(text), printed);
    free(text);
    free(printed);
    cJSON_ArrayForEach(child, node) check_items(data, size, root, child, min, budget);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *error = NULL, *p1, *p2, *min, *norm;
    cJSON *root, *again, *dup;
    Numbers nums = {0};

    check_double(data, size);
    root = sbx_json_parse((const char *)data, size, SBX_JSON_DEPTH_MAX, &error);
    if (!root) {
        FUZZ_CHECK(error);
        free(error);
        FUZZ_CHECK(!sbx_json_normalize((const char *)data, size, SBX_JSON_DEPTH_MAX, NULL));
        return 0;
    }
    FUZZ_CHECK(!error);

    /* print(parse(print(parse(x)))) == print(parse(x)), and the trees are the same. */
    p1 = sbx_json_print(root);
    FUZZ_CHECK(p1);
    again = sbx_json_parse(p1, strlen(p1), SBX_JSON_DEPTH_MAX, &error);
    FUZZ_CHECK(again && !error);
    p2 = sbx_json_print(again);
    FUZZ_CHECK(p2 && strcmp(p1, p2) == 0);
    check_same(root, again, &nums);
    for (size_t i = 0; i < nums.n; i++)
        for (size_t j = 0; j < nums.n; j++)
            check_pair(nums.nodes[i], nums.nodes[j]);

    /* Printed text has no whitespace to remove. */
    min = sbx_json_minify(p1, strlen(p1));
    FUZZ_CHECK(min && strcmp(min, p1) == 0);
    free(min);

    /* The input minified reads as the same value; normalizing is parsing then minifying. */
    min = sbx_json_minify((const char *)data, size);
    FUZZ_CHECK(min && strlen(min) <= size);
    check_minified(min);
    check_minified(p1);
    check_prints_as(min, strlen(min), p1);
    norm = sbx_json_normalize((const char *)data, size, SBX_JSON_DEPTH_MAX, &error);
    FUZZ_CHECK(norm && !error && strcmp(norm, min) == 0);
    free(norm);

    check_members(data, size, root, min);
    {
        int budget = 64;
        check_items(data, size, root, root, min, &budget);
    }

    /* A duplicate carries the literals. */
    dup = cJSON_Duplicate(root, true);
    FUZZ_CHECK(dup);
    free(p2);
    p2 = sbx_json_print(dup);
    FUZZ_CHECK(p2 && strcmp(p1, p2) == 0);

    cJSON_Delete(dup);
    cJSON_Delete(again);
    cJSON_Delete(root);
    free(min);
    free(p1);
    free(p2);
    return 0;
}
