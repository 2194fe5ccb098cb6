/*
 * Strict base64 (RFC 4648 section 4, standard alphabet, padded) for the protocol's byte fields.
 * Internal to the protocol module.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/** Length of the base64 text for @len bytes, without the NUL. */
size_t sbx_base64_encoded_len(size_t len);

/**
 * Encode @len bytes of @data as base64 into a malloc'd NUL-terminated string *@ret.
 * Returns 0 or -ENOMEM.
 */
int sbx_base64_encode(const uint8_t *data, size_t len, char **ret);

/**
 * Decode the canonical base64 text @text (@len chars): length a multiple of 4, only alphabet
 * characters, '=' only as 1 or 2 final padding characters, unused bits zero. No whitespace.
 * On success *@ret (malloc'd, at least 1 byte even when empty) and *@ret_len are set.
 * Returns 0, -EINVAL for text that is not canonical base64, -ENOMEM.
 */
int sbx_base64_decode(const char *text, size_t len, uint8_t **ret, size_t *ret_len);
