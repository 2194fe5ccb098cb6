/*
 * The JSON builder and escaper (json-builder.h).
 */
#include "base/json-builder.h"

#include <string.h>

static void append_char(GString *out, gunichar c)
{
    switch (c) {
    case '"':
        g_string_append(out, "\\\"");
        break;
    case '\\':
        g_string_append(out, "\\\\");
        break;
    case '\n':
        g_string_append(out, "\\n");
        break;
    case '\r':
        g_string_append(out, "\\r");
        break;
    case '\t':
        g_string_append(out, "\\t");
        break;
    default:
        if (c < 0x20) {
            g_string_append_printf(out, "\\u%04x", c);
        } else {
            g_string_append_unichar(out, c);
        }
    }
}

void sbx_json_append_string(GString *out, const char *data, gsize len)
{
    const char *p = data, *end = data + len;

    g_string_append_c(out, '"');
    while (p < end) {
        gunichar c = *p == '\0' ? 0 : g_utf8_get_char_validated(p, end - p);
        if (c == 0 || c == (gunichar)-1 || c == (gunichar)-2) {
            /* One replacement per invalid byte, and for NUL: our JSON never holds U+0000. */
            append_char(out, 0xfffd);
            p++;
            continue;
        }
        append_char(out, c);
        p = g_utf8_next_char(p);
    }
    g_string_append_c(out, '"');
}

void sbx_jsonb_init(SbxJsonb *b)
{
    memset(b, 0, sizeof(*b));
    b->out = g_string_new(NULL);
}

char *sbx_jsonb_finish(SbxJsonb *b)
{
    g_assert(b->depth == 0);
    return g_string_free(g_steal_pointer(&b->out), FALSE);
}

void sbx_jsonb_clear(SbxJsonb *b)
{
    if (b->out != NULL) {
        g_string_free(g_steal_pointer(&b->out), TRUE);
    }
}

/* Before a value: the comma after a previous one, unless it follows its key. */
static void value_start(SbxJsonb *b)
{
    if (b->after_key) {
        b->after_key = FALSE;
        return;
    }
    if (b->want_comma[b->depth]) {
        g_string_append_c(b->out, ',');
    }
    b->want_comma[b->depth] = TRUE;
}

static void nest_open(SbxJsonb *b, char c)
{
    value_start(b);
    g_assert(b->depth < SBX_JSONB_DEPTH_MAX); /* our documents only: a programmer error */
    g_string_append_c(b->out, c);
    b->want_comma[++b->depth] = FALSE;
}

static void nest_close(SbxJsonb *b, char c)
{
    g_assert(b->depth > 0 && !b->after_key);
    g_string_append_c(b->out, c);
    b->depth--;
}

void sbx_jsonb_begin_object(SbxJsonb *b)
{
    nest_open(b, '{');
}

void sbx_jsonb_end_object(SbxJsonb *b)
{
    nest_close(b, '}');
}

void sbx_jsonb_begin_array(SbxJsonb *b)
{
    nest_open(b, '[');
}

void sbx_jsonb_end_array(SbxJsonb *b)
{
    nest_close(b, ']');
}

void sbx_jsonb_key(SbxJsonb *b, const char *key)
{
    value_start(b);
    sbx_json_append_string(b->out, key, strlen(key));
    g_string_append_c(b->out, ':');
    b->after_key = TRUE;
}

void sbx_jsonb_string_len(SbxJsonb *b, const char *s, gsize len)
{
    value_start(b);
    sbx_json_append_string(b->out, s, len);
}

void sbx_jsonb_string(SbxJsonb *b, const char *s)
{
    if (s == NULL) {
        sbx_jsonb_null(b);
    } else {
        sbx_jsonb_string_len(b, s, strlen(s));
    }
}

void sbx_jsonb_int(SbxJsonb *b, gint64 v)
{
    value_start(b);
    g_string_append_printf(b->out, "%" G_GINT64_FORMAT, v);
}

void sbx_jsonb_uint(SbxJsonb *b, guint64 v)
{
    value_start(b);
    g_string_append_printf(b->out, "%" G_GUINT64_FORMAT, v);
}

void sbx_jsonb_bool(SbxJsonb *b, gboolean v)
{
    value_start(b);
    g_string_append(b->out, v ? "true" : "false");
}

void sbx_jsonb_null(SbxJsonb *b)
{
    value_start(b);
    g_string_append(b->out, "null");
}

void sbx_jsonb_raw(SbxJsonb *b, const char *json)
{
    value_start(b);
    g_string_append(b->out, json != NULL ? json : "null");
}

void sbx_jsonb_member_string(SbxJsonb *b, const char *key, const char *s)
{
    sbx_jsonb_key(b, key);
    sbx_jsonb_string(b, s);
}

void sbx_jsonb_member_int(SbxJsonb *b, const char *key, gint64 v)
{
    sbx_jsonb_key(b, key);
    sbx_jsonb_int(b, v);
}

void sbx_jsonb_member_uint(SbxJsonb *b, const char *key, guint64 v)
{
    sbx_jsonb_key(b, key);
    sbx_jsonb_uint(b, v);
}

void sbx_jsonb_member_bool(SbxJsonb *b, const char *key, gboolean v)
{
    sbx_jsonb_key(b, key);
    sbx_jsonb_bool(b, v);
}

void sbx_jsonb_member_raw(SbxJsonb *b, const char *key, const char *json)
{
    sbx_jsonb_key(b, key);
    sbx_jsonb_raw(b, json);
}
