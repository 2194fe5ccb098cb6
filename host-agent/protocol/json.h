/*
 * Exact JSON values: the one way every module parses and prints JSON that crosses a boundary
 * (docs/protocol.md, "Numbers").
 *
 * cJSON keeps a number only as a double, so a parse and a print lose every integer beyond 2^53
 * and every literal out of a double's range, and its printer cuts doubles to 15 digits when a
 * loose check says that is close enough. Here a number node also keeps its literal: after
 * sbx_json_parse() its `valuestring` holds the number's text exactly as it stood (cJSON_Delete
 * and cJSON_Duplicate free and copy it like a string's), and sbx_json_print() prints that text.
 * A number made in memory (cJSON_CreateNumber) has no literal and prints as an integer when it
 * is one, else in the shortest form that reads back as the same double.
 *
 * Rules for the rest of the code: parse with sbx_json_parse(), print with sbx_json_print(),
 * never cJSON_Parse*() or cJSON_Print*() (scripts/check-source refuses them), and never change a
 * parsed number in place (cJSON_SetNumberValue would leave the old literal behind).
 *
 * Pure C on libc and cJSON, like the rest of the protocol library: the guest agent links it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cJSON.h"

/**
 * Parse @len bytes of @text (need not be NUL-terminated) as one JSON value, strictly: the
 * checks of sbx_json_prescan() (UTF-8, no NUL, RFC 8259 numbers, nesting at most @max_depth,
 * at most SBX_JSON_VALUES_MAX values), the JSON grammar, nothing but whitespace after the
 * value, and no object with two members of one name. Every number node keeps its literal.
 * Returns the tree, or NULL with *@ret_error set to a malloc'd reason (NULL when out of memory;
 * @ret_error may be NULL).
 */
cJSON *sbx_json_parse(const char *text, size_t len, int max_depth, char **ret_error);

/**
 * Where sbx_json_parse()'s reason @why points in @text (@len bytes), for people: *@ret_line and
 * *@ret_col (1-based) of the byte its "byte N: " prefix names, and the reason after the prefix.
 * A reason without a position (a duplicate name) leaves line and column 0 and is returned whole.
 */
const char *sbx_json_error_where(const char *text, size_t len, const char *why, unsigned *ret_line,
                                 unsigned *ret_col);

/**
 * Compact JSON text of @item (malloc'd): no whitespace between tokens, strings as UTF-8 with
 * only `"`, `\` and control characters escaped, numbers as their literal (or, for a number made
 * in memory, as above), cJSON_Raw items as they are. NULL when out of memory, or when @item
 * holds a number without a literal that is not finite, or nests deeper than
 * SBX_JSON_PRINT_DEPTH_MAX.
 */
char *sbx_json_print(const cJSON *item);

/**
 * A copy of the JSON text @text (@len bytes, already checked by sbx_json_parse() or
 * sbx_json_prescan() plus cJSON) without the whitespace between tokens: the same value, the
 * same bytes for every string and number. malloc'd; NULL when out of memory.
 */
char *sbx_json_minify(const char *text, size_t len);

/**
 * Check @text as sbx_json_parse() does and return its minified copy (malloc'd), or NULL with
 * *@ret_error as sbx_json_parse() sets it. How a host forwards a value it need not change.
 */
char *sbx_json_normalize(const char *text, size_t len, int max_depth, char **ret_error);

/**
 * The text of member @member of the object @root, where @root was parsed from @text (@len
 * bytes) by sbx_json_parse(): the bytes that stood there, minified (malloc'd). NULL when out of
 * memory, or when @member is not a member of @root.
 */
char *sbx_json_member_text(const char *text, size_t len, const cJSON *root, const cJSON *member);

/**
 * The text of @item, a node anywhere in the tree @root that sbx_json_parse() made from @text
 * (@len bytes): the bytes that stood there, minified (malloc'd), as sbx_json_member_text() gives
 * a member's, also for an element of an array or a value nested deeper (at most
 * SBX_JSON_PRINT_DEPTH_MAX levels). NULL when out of memory, or when @item is not in @root.
 */
char *sbx_json_item_text(const char *text, size_t len, const cJSON *root, const cJSON *item);

/** The literal of the number node @item ("12345678901234567890"), or NULL (made in memory). */
const char *sbx_json_number_text(const cJSON *item);

/*
 * Shortest text that reads back (strtod) as @d: "0.1", "5e-324", "1e+21"; integers below 2^53
 * in full ("9007199254740991"), -0 as "-0.0". @buf holds at least SBX_JSON_DOUBLE_BUF bytes.
 * Returns false for infinities and NaN, which JSON cannot hold.
 */
#define SBX_JSON_DOUBLE_BUF 32
bool sbx_json_format_double(double d, char *buf);

/*
 * Trees built in memory can nest without cJSON's parse limit; the printer recurses, so it
 * refuses deeper than this. Parsed trees nest at most SBX_JSON_DEPTH_MAX; the host wraps a
 * parsed value in a few levels of its own (a JSON-RPC envelope, a report), far below 64.
 */
#define SBX_JSON_PRINT_DEPTH_MAX 64

/*
 * A JSON number literal as an exact decimal: value = (-1 if negative) 0.d1 d2 ... dn x 10^exp,
 * with d1 != 0 and dn != 0 (no leading or trailing zeros), or zero when n == 0. The digits are
 * not copied: they are the runs @a and @b of the literal (before and after its '.', less the
 * zeros), read through sbx_decimal_digit().
 */
typedef struct {
    bool negative;
    const char *a;
    size_t a_len;
    const char *b;
    size_t b_len;
    size_t n;    /* a_len + b_len */
    int64_t exp; /* meaningless for zero */
} SbxDecimal;

/**
 * Read the RFC 8259 number literal @text (@len bytes) into @out, pointing into @text. Returns
 * false when it is not one, or its exponent has more than SBX_JSON_EXPONENT_DIGITS digits.
 */
bool sbx_decimal_parse(const char *text, size_t len, SbxDecimal *out);

/**
 * The exact decimal of the number node @item: its literal, or for a number made in memory its
 * shortest double text, formatted into @buf (SBX_JSON_DOUBLE_BUF bytes). False if @item is not
 * a number, or a non-finite one without a literal.
 */
bool sbx_decimal_of(const cJSON *item, char *buf, SbxDecimal *out);

/** Digit @i (0-based, < n) of @d, as 0..9. */
int sbx_decimal_digit(const SbxDecimal *d, size_t i);

/** -1, 0 or 1 as @x is less than, equal to, or greater than @y, compared exactly (-0 == 0). */
int sbx_decimal_compare(const SbxDecimal *x, const SbxDecimal *y);

/** True if @d has no fractional part (1.0, 1e3 and 1.5e1 do; JSON Schema's "integer"). */
bool sbx_decimal_is_integer(const SbxDecimal *d);

/**
 * Whether @x is an integer multiple of @m (m > 0), exactly: 1 yes, 0 no, -1 when @m has more
 * than 19 significant digits (the remainder is computed modulo @m in 64-bit arithmetic).
 */
int sbx_decimal_multiple_of(const SbxDecimal *x, const SbxDecimal *m);

/** The value of @d if it is an integer in int64's range; false otherwise. */
bool sbx_decimal_to_int64(const SbxDecimal *d, int64_t *out);

/** The value of the number node @item if it is an integer in int64's range, exactly. */
bool sbx_json_int64(const cJSON *item, int64_t *out);
