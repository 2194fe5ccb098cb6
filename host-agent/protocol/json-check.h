/*
 * Checks on JSON text that cJSON does not make itself (json.c adds those on the tree). Internal to
 * the protocol module (it is the only user of cJSON for the protocol).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "cJSON.h"
#include "limits.h"

/**
 * Check JSON text before cJSON sees it: valid UTF-8 (no overlong forms, surrogates or code
 * points above U+10FFFF), no control characters other than tab, LF and CR outside strings and
 * none inside, escapes only as RFC 8259 spells them (a bad `\u` escape is code point 0 to cJSON,
 * which would cut the string there), no \u0000 escape (likewise), nothing but ASCII outside
 * strings (a byte order mark: cJSON skips it, the walk beside the tree would not), every number an
 * RFC 8259 literal with an exponent of at most SBX_JSON_EXPONENT_DIGITS digits, nesting at most
 * @max_depth, at most SBX_JSON_VALUES_MAX values. The rest of the grammar is cJSON's to check.
 * Returns true, or false with *@ret_error set to a malloc'd reason (if @ret_error is non-NULL).
 */
bool sbx_json_prescan(const char *text, size_t len, int max_depth, char **ret_error);

/**
 * Length of the longest prefix of the valid UTF-8 string @s that is at most @max bytes and
 * ends on a character boundary.
 */
size_t sbx_utf8_truncated_len(const char *s, size_t max);

/** malloc'd printf, or NULL when out of memory. */
char *sbx_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
