/*
 * Byte-level and tree-level checks that make cJSON's lenient parser safe for hostile input.
 */
#include "json-check.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sbx_strdup_printf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

static bool fail(char **ret_error, char *msg)
{
    if (ret_error)
        *ret_error = msg;
    else
        free(msg);
    return false;
}

/*
 * Length of the UTF-8 sequence at @s (at most @avail bytes), or 0 if it is not valid:
 * the shortest form only, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
 */
static size_t utf8_seq_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t cp, min;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n > avail)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

typedef struct {
    const unsigned char *s;
    size_t len;
    size_t i;
    int depth;
    int max_depth;
    size_t values;
    bool in_string;
} Scan;

/* One byte inside a string; escapes are consumed whole. Returns NULL or the reason. */
static char *scan_string_byte(Scan *sc)
{
    unsigned char c = sc->s[sc->i];

    if (c < 0x20)
        return sbx_strdup_printf("byte %zu: control character in a string", sc->i);
    if (c == '"') {
        sc->in_string = false;
    } else if (c == '\\' && sc->i + 1 < sc->len) {
        if (sc->s[sc->i + 1] == 'u' && sc->len - sc->i >= 6 &&
            memcmp(sc->s + sc->i + 2, "0000", 4) == 0)
            return sbx_strdup_printf("byte %zu: \\u0000 in a string is not allowed", sc->i);
        sc->i++; /* the escaped character is never a quote that ends the string */
    }
    return NULL;
}

/* One byte outside strings. Returns NULL or the reason. */
static char *scan_structure_byte(Scan *sc)
{
    unsigned char c = sc->s[sc->i];

    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
        return sbx_strdup_printf("byte %zu: control character", sc->i);
    switch (c) {
    case '"':
        sc->in_string = true;
        break;
    case '[':
    case '{':
        if (++sc->depth > sc->max_depth)
            return sbx_strdup_printf("byte %zu: nested deeper than %d levels", sc->i,
                                     sc->max_depth);
        sc->values++;
        break;
    case ']':
    case '}':
        sc->depth--;
        break;
    case ',':
        sc->values++;
        break;
    }
    if (sc->values >= SBX_JSON_VALUES_MAX)
        return sbx_strdup_printf("more than %d JSON values", SBX_JSON_VALUES_MAX);
    return NULL;
}

bool sbx_json_prescan(const char *text, size_t len, int max_depth, char **ret_error)
{
    Scan sc = {.s = (const unsigned char *)text, .len = len, .max_depth = max_depth};

    for (sc.i = 0; sc.i < len; sc.i++) {
        char *why;

        if (sc.s[sc.i] >= 0x80) {
            size_t n = utf8_seq_len(sc.s + sc.i, len - sc.i);

            if (n == 0)
                return fail(ret_error, sbx_strdup_printf("byte %zu: invalid UTF-8", sc.i));
            sc.i += n - 1;
            continue;
        }
        why = sc.in_string ? scan_string_byte(&sc) : scan_structure_byte(&sc);
        if (why)
            return fail(ret_error, why);
    }
    return true;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sort the member names of @obj (n of them) and look for two equal neighbours. */
static bool names_unique(const cJSON *obj, size_t n, char **ret_error)
{
    const char **names = malloc(n * sizeof(*names));
    const cJSON *c;
    size_t i = 0;
    bool ok = true;

    if (!names)
        return fail(ret_error, NULL);
    cJSON_ArrayForEach(c, obj) names[i++] = c->string;
    qsort(names, n, sizeof(*names), cmp_names);
    for (i = 1; i < n && ok; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            ok = fail(ret_error, sbx_strdup_printf("duplicate member name"));
    free(names);
    return ok;
}

bool sbx_json_tree_valid(const cJSON *item, char **ret_error)
{
    const cJSON *c;
    size_t n = 0;

    if (cJSON_IsNumber(item) && !isfinite(item->valuedouble))
        return fail(ret_error, sbx_strdup_printf("number out of range"));
    if (!cJSON_IsArray(item) && !cJSON_IsObject(item))
        return true;
    /* Recursion is bounded by the nesting limit checked before parsing. */
    cJSON_ArrayForEach(c, item)
    {
        if (!sbx_json_tree_valid(c, ret_error))
            return false;
        n++;
    }
    if (cJSON_IsObject(item) && n > 1)
        return names_unique(item, n, ret_error);
    return true;
}

size_t sbx_utf8_truncated_len(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n <= max)
        return n;
    n = max;
    /* Back up over continuation bytes so the cut falls before a lead byte. */
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return n;
}
