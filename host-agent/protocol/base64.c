/*
 * Strict base64. Strict because a peer that may send the same bytes in two spellings makes
 * records and replays ambiguous, and because a lenient decoder is one more parser to get wrong.
 */
#include "base64.h"

#include <errno.h>
#include <stdlib.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sbx_base64_encoded_len(size_t len)
{
    return (len + 2) / 3 * 4;
}

int sbx_base64_encode(const uint8_t *data, size_t len, char **ret)
{
    char *out = malloc(sbx_base64_encoded_len(len) + 1);
    char *p = out;

    if (!out)
        return -ENOMEM;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        size_t n = len - i < 3 ? len - i : 3;

        if (n > 1)
            v |= (uint32_t)data[i + 1] << 8;
        if (n > 2)
            v |= data[i + 2];
        *p++ = alphabet[(v >> 18) & 63];
        *p++ = alphabet[(v >> 12) & 63];
        *p++ = n > 1 ? alphabet[(v >> 6) & 63] : '=';
        *p++ = n > 2 ? alphabet[v & 63] : '=';
    }
    *p = '\0';
    *ret = out;
    return 0;
}

/* Value of a base64 character, or -1. */
static int sextet(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/*
 * Decode one group of 4 characters into @out; returns the number of bytes (1..3) or -EINVAL.
 * Padding is only allowed when @last.
 */
static int decode_group(const unsigned char *g, int last, uint8_t *out)
{
    int pad = (g[3] == '=') + (g[3] == '=' && g[2] == '=');
    uint32_t v = 0;

    if (pad && !last)
        return -EINVAL;
    for (int k = 0; k < 4 - pad; k++) {
        int s = sextet(g[k]);

        if (s < 0)
            return -EINVAL;
        v = v << 6 | (uint32_t)s;
    }
    v <<= 6 * pad;
    /* Canonical form: the bits padding leaves unused must be zero. */
    if ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff)))
        return -EINVAL;
    out[0] = (uint8_t)(v >> 16);
    out[1] = (uint8_t)(v >> 8);
    out[2] = (uint8_t)v;
    return 3 - pad;
}

int sbx_base64_decode(const char *text, size_t len, uint8_t **ret, size_t *ret_len)
{
    const unsigned char *t = (const unsigned char *)text;
    uint8_t *out;
    size_t n = 0;

    if (len % 4 != 0)
        return -EINVAL;
    out = malloc(len / 4 * 3 + 1);
    if (!out)
        return -ENOMEM;
    for (size_t i = 0; i < len; i += 4) {
        int r = decode_group(t + i, i + 4 == len, out + n);

        if (r < 0) {
            free(out);
            return r;
        }
        n += (size_t)r;
    }
    *ret = out;
    *ret_len = n;
    return 0;
}
