/*
 * JSON number literals as exact decimals (json.h): comparison, "is an integer", "is a multiple
 * of", and the integer value, without a double in between. What the schema validator and the
 * protocol's integer fields decide numbers by.
 */
#include "json.h"

#include <stdint.h>
#include <string.h>

#include "limits.h"

static bool digit_at(const char *s, size_t len, size_t i)
{
    return i < len && s[i] >= '0' && s[i] <= '9';
}

/* The exponent part at @i (after 'e'): its value, with the grammar's and our limit's checks. */
static bool parse_exponent(const char *s, size_t len, size_t i, int64_t *out)
{
    bool negative = false;
    int64_t e = 0;
    int digits = 0;

    if (i < len && (s[i] == '+' || s[i] == '-'))
        negative = s[i++] == '-';
    if (!digit_at(s, len, i))
        return false;
    while (i < len && s[i] == '0')
        i++;
    for (; digit_at(s, len, i); i++) {
        if (++digits > SBX_JSON_EXPONENT_DIGITS)
            return false;
        e = e * 10 + (s[i] - '0');
    }
    *out = negative ? -e : e;
    return i == len;
}

/* Set @out's digit runs from the integer part @ip and the fraction @fp (digits only). */
static void set_digits(SbxDecimal *out, const char *ip, size_t il, const char *fp, size_t fl,
                       int64_t e)
{
    size_t total = il + fl, f = 0, l;

#define D(k) ((k) < il ? ip[(k)] : fp[(k)-il])
    while (f < total && D(f) == '0')
        f++;
    if (f == total) {
        out->n = 0; /* zero, whatever its sign and exponent */
        return;
    }
    l = total - 1;
    while (D(l) == '0')
        l--;
#undef D
    out->exp = (int64_t)il - (int64_t)f + e;
    if (f >= il) {
        out->b = fp + (f - il);
        out->b_len = l - f + 1;
    } else if (l < il) {
        out->a = ip + f;
        out->a_len = l - f + 1;
    } else {
        out->a = ip + f;
        out->a_len = il - f;
        out->b = fp;
        out->b_len = l - il + 1;
    }
    out->n = out->a_len + out->b_len;
}

bool sbx_decimal_parse(const char *text, size_t len, SbxDecimal *out)
{
    size_t i = 0, ip, il, fp = 0, fl = 0;
    int64_t e = 0;

    memset(out, 0, sizeof(*out));
    if (i < len && text[i] == '-') {
        out->negative = true;
        i++;
    }
    ip = i;
    if (i < len && text[i] == '0')
        i++;
    else if (digit_at(text, len, i))
        while (digit_at(text, len, i))
            i++;
    else
        return false;
    il = i - ip;
    if (i < len && text[i] == '.') {
        fp = ++i;
        while (digit_at(text, len, i))
            i++;
        fl = i - fp;
        if (fl == 0)
            return false;
    }
    if (i < len && (text[i] == 'e' || text[i] == 'E')) {
        if (!parse_exponent(text, len, i + 1, &e))
            return false;
    } else if (i != len) {
        return false;
    }
    set_digits(out, text + ip, il, text + fp, fl, e);
    return true;
}

bool sbx_decimal_of(const cJSON *item, char *buf, SbxDecimal *out)
{
    const char *text = sbx_json_number_text(item);

    if (!cJSON_IsNumber(item))
        return false;
    if (!text) {
        if (!sbx_json_format_double(item->valuedouble, buf))
            return false;
        text = buf;
    }
    return sbx_decimal_parse(text, strlen(text), out);
}

int sbx_decimal_digit(const SbxDecimal *d, size_t i)
{
    return (i < d->a_len ? d->a[i] : d->b[i - d->a_len]) - '0';
}

static int sign_of(const SbxDecimal *d)
{
    return d->n == 0 ? 0 : d->negative ? -1 : 1;
}

int sbx_decimal_compare(const SbxDecimal *x, const SbxDecimal *y)
{
    int sx = sign_of(x), sy = sign_of(y), mag = 0;

    if (sx != sy)
        return sx < sy ? -1 : 1;
    if (sx == 0)
        return 0;
    /* Same sign: compare magnitudes, 0.d1d2... x 10^exp with d1 != 0. */
    if (x->exp != y->exp) {
        mag = x->exp < y->exp ? -1 : 1;
    } else {
        size_t n = x->n < y->n ? x->n : y->n;

        for (size_t i = 0; i < n && mag == 0; i++)
            mag = sbx_decimal_digit(x, i) - sbx_decimal_digit(y, i);
        if (mag == 0 && x->n != y->n)
            mag = x->n < y->n ? -1 : 1;
        mag = mag < 0 ? -1 : mag > 0;
    }
    return sx * mag;
}

bool sbx_decimal_is_integer(const SbxDecimal *d)
{
    /* value = D x 10^(exp - n), D an integer without trailing zeros */
    return d->n == 0 || d->exp >= (int64_t)d->n;
}

/* (a * b) mod m without overflow. */
static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
    return (uint64_t)((unsigned __int128)a * b % m);
}

/* 10^k mod m, by squaring. */
static uint64_t pow10mod(int64_t k, uint64_t m)
{
    uint64_t r = 1 % m, base = 10 % m;

    for (; k > 0; k >>= 1) {
        if (k & 1)
            r = mulmod(r, base, m);
        base = mulmod(base, base, m);
    }
    return r;
}

int sbx_decimal_multiple_of(const SbxDecimal *x, const SbxDecimal *m)
{
    uint64_t dm = 0, r = 0;
    int64_t xv, xm;

    if (m->n > 19 || m->n == 0)
        return -1; /* D_m below 10^19 fits in 64 bits */
    if (x->n == 0)
        return 1;
    /* x / m = (D_x x 10^xv) / (D_m x 10^xm). With xv < xm, D_m x 10^(xm-xv) would have to
     * divide D_x, which has no trailing zero: never. Else D_m must divide D_x x 10^(xv-xm). */
    xv = x->exp - (int64_t)x->n;
    xm = m->exp - (int64_t)m->n;
    if (xv < xm)
        return 0;
    for (size_t i = 0; i < m->n; i++)
        dm = dm * 10 + (uint64_t)sbx_decimal_digit(m, i);
    for (size_t i = 0; i < x->n; i++)
        r = (uint64_t)(((unsigned __int128)r * 10 + (uint64_t)sbx_decimal_digit(x, i)) % dm);
    return mulmod(r, pow10mod(xv - xm, dm), dm) == 0;
}

bool sbx_decimal_to_int64(const SbxDecimal *d, int64_t *out)
{
    unsigned __int128 v = 0;

    if (!sbx_decimal_is_integer(d))
        return false;
    if (d->n == 0) {
        *out = 0;
        return true;
    }
    if (d->exp > 19) /* at least 10^19: beyond int64 */
        return false;
    for (int64_t i = 0; i < d->exp; i++)
        v = v * 10 + (i < (int64_t)d->n ? (unsigned)sbx_decimal_digit(d, (size_t)i) : 0);
    if (v > (unsigned __int128)INT64_MAX + (d->negative ? 1 : 0))
        return false;
    if (!d->negative)
        *out = (int64_t)v;
    else
        *out = v > INT64_MAX ? INT64_MIN : -(int64_t)v;
    return true;
}

bool sbx_json_int64(const cJSON *item, int64_t *out)
{
    char buf[SBX_JSON_DOUBLE_BUF];
    SbxDecimal d;

    return sbx_decimal_of(item, buf, &d) && sbx_decimal_to_int64(&d, out);
}
