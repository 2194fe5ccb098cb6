/*
 * Byte-level checks that make cJSON's lenient parser safe for hostile input (json.c walks the
 * tree for the rest).
 */
#include "json-check.h"

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

/* The characters that may follow a backslash in a string (RFC 8259). */
static bool is_escape(unsigned char c)
{
    switch (c) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
    case 'u':
        return true;
    default:
        return false;
    }
}

static bool is_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* One byte inside a string; escapes are consumed whole. Returns NULL or the reason. */
static char *scan_string_byte(Scan *sc)
{
    unsigned char c = sc->s[sc->i];

    if (c < 0x20)
        return sbx_strdup_printf("byte %zu: control character in a string", sc->i);
    if (c == '"') {
        sc->in_string = false;
    } else if (c == '\\') {
        /* cJSON reads a \u escape whose four bytes are not all hex digits as U+0000, and so
         * cuts the string there ("rm\uZZZZ -rf /" would be "rm"): check every escape here. */
        if (sc->i + 1 >= sc->len || !is_escape(sc->s[sc->i + 1]))
            return sbx_strdup_printf("byte %zu: invalid escape in a string", sc->i);
        if (sc->s[sc->i + 1] == 'u') {
            if (sc->len - sc->i < 6 || !is_hex(sc->s[sc->i + 2]) || !is_hex(sc->s[sc->i + 3]) ||
                !is_hex(sc->s[sc->i + 4]) || !is_hex(sc->s[sc->i + 5]))
                return sbx_strdup_printf("byte %zu: \\u needs four hex digits", sc->i);
            if (memcmp(sc->s + sc->i + 2, "0000", 4) == 0)
                return sbx_strdup_printf("byte %zu: \\u0000 in a string is not allowed", sc->i);
        }
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

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* Where the digits starting at @i end. */
static size_t skip_digits(const unsigned char *s, size_t len, size_t i)
{
    while (i < len && is_digit(s[i]))
        i++;
    return i;
}

/*
 * The number token at sc->i, by RFC 8259's grammar:
 *   -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
 * cJSON hands anything strtod takes to strtod ("01", "1.", "-.5"); what the host forwards as
 * text must be JSON its reader's own parser takes, so the grammar is checked here. Leaves sc->i
 * on the token's last byte. Returns NULL or the reason.
 */
static char *scan_number(Scan *sc)
{
    const unsigned char *s = sc->s;
    size_t start = sc->i, i = sc->i, exp_start;

    if (s[i] == '-')
        i++;
    if (i < sc->len && s[i] == '0')
        i++;
    else if (i < sc->len && is_digit(s[i]))
        i = skip_digits(s, sc->len, i);
    else
        goto bad;
    if (i < sc->len && s[i] == '.') {
        if (i + 1 >= sc->len || !is_digit(s[i + 1]))
            goto bad;
        i = skip_digits(s, sc->len, i + 1);
    }
    if (i < sc->len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < sc->len && (s[i] == '+' || s[i] == '-'))
            i++;
        if (i >= sc->len || !is_digit(s[i]))
            goto bad;
        while (i < sc->len && s[i] == '0')
            i++;
        exp_start = i;
        i = skip_digits(s, sc->len, i);
        if (i - exp_start > SBX_JSON_EXPONENT_DIGITS)
            return sbx_strdup_printf("byte %zu: a number's exponent has more than %d digits", start,
                                     SBX_JSON_EXPONENT_DIGITS);
    }
    /* "01", "1.2.3", "1e5e5", "1-2": the token goes on where the grammar ended it. */
    if (i < sc->len &&
        (is_digit(s[i]) || s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-'))
        goto bad;
    sc->i = i - 1;
    return NULL;
bad:
    return sbx_strdup_printf("byte %zu: not a JSON number (RFC 8259)", start);
}

bool sbx_json_prescan(const char *text, size_t len, int max_depth, char **ret_error)
{
    Scan sc = {.s = (const unsigned char *)text, .len = len, .max_depth = max_depth};

    for (sc.i = 0; sc.i < len; sc.i++) {
        char *why;

        if (!sc.in_string && (sc.s[sc.i] == '-' || is_digit(sc.s[sc.i]))) {
            why = scan_number(&sc);
            if (why)
                return fail(ret_error, why);
            continue;
        }
        if (sc.s[sc.i] >= 0x80) {
            size_t n;

            /* JSON has nothing but ASCII outside strings. cJSON would skip a leading UTF-8
             * byte order mark, and the text helpers of json.c, which read the text as JSON's
             * grammar has it, would then cut it in the wrong places. */
            if (!sc.in_string)
                return fail(
                    ret_error,
                    sbx_strdup_printf("byte %zu: not JSON (non-ASCII outside a string)", sc.i));
            n = utf8_seq_len(sc.s + sc.i, len - sc.i);

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
