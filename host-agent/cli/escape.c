/* Control characters and invalid UTF-8 made visible for a terminal (escape.h). */
#include "cli/escape.h"

#include <string.h>

void sbx_escaper_init(SbxEscaper *e, SbxEscapeMode mode)
{
    memset(e, 0, sizeof(*e));
    e->mode = mode;
}

/* Byte @b of no UTF-8 character. */
static void put_invalid(const SbxEscaper *e, guint8 b, GString *out)
{
    if (e->mode == SBX_ESCAPE_JSON) {
        g_string_append(out, "\\ufffd"); /* JSON text cannot hold the byte itself */
    } else {
        g_string_append_printf(out, "\\x%02x", b);
    }
}

/* The control character @cp (C0, DEL or C1). */
static void put_control(const SbxEscaper *e, guint cp, GString *out)
{
    if (e->mode == SBX_ESCAPE_JSON || cp > 0x7f) {
        g_string_append_printf(out, "\\u%04x", cp);
    } else {
        g_string_append_printf(out, "\\x%02x", cp);
    }
}

/* ASCII that a terminal only prints (and the two controls we let through). */
static gboolean ascii_plain(guint8 b)
{
    return (b >= 0x20 && b < 0x7f) || b == '\n' || b == '\t';
}

/* Length of the UTF-8 sequence that lead byte @b starts; 0 if it starts none. */
static guint8 sequence_length(guint8 b)
{
    return b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
}

/*
 * Whether @b may follow what is held. The second byte's range depends on the lead (Unicode,
 * Table 3-7): this rules out overlong forms, surrogates and code points above U+10FFFF.
 */
static gboolean continues(const SbxEscaper *e, guint8 b)
{
    guint8 lo = 0x80, hi = 0xbf;

    if (e->n_held == 1) {
        guint8 lead = e->held[0];
        lo = lead == 0xe0 ? 0xa0 : lead == 0xf0 ? 0x90 : 0x80;
        hi = lead == 0xed ? 0x9f : lead == 0xf4 ? 0x8f : 0xbf;
    }
    return b >= lo && b <= hi;
}

/* The held sequence is complete: a C1 control is shown, any other character kept. */
static void put_held(SbxEscaper *e, GString *out)
{
    if (e->need == 2 && e->held[0] == 0xc2 && e->held[1] <= 0x9f) {
        put_control(e, e->held[1], out); /* U+0080..U+009F */
    } else {
        g_string_append_len(out, (const char *)e->held, e->n_held);
    }
    e->n_held = 0;
}

static void drop_held(SbxEscaper *e, GString *out)
{
    for (guint8 i = 0; i < e->n_held; i++) {
        put_invalid(e, e->held[i], out);
    }
    e->n_held = 0;
}

/* One byte that starts something (no sequence is held). */
static void put_start(SbxEscaper *e, guint8 b, GString *out)
{
    guint8 n = sequence_length(b);

    if (b == '\r' && e->mode == SBX_ESCAPE_JSON) {
        g_string_append_c(out, ' '); /* valid JSON holds a raw CR only as whitespace */
    } else if (b < 0x80) {
        put_control(e, b, out); /* plain ASCII was appended by the caller */
    } else if (n == 0) {
        put_invalid(e, b, out);
    } else {
        e->held[0] = b;
        e->n_held = 1;
        e->need = n;
    }
}

void sbx_escaper_feed(SbxEscaper *e, const guint8 *data, gsize len, GString *out)
{
    gsize i = 0;

    while (i < len) {
        guint8 b = data[i];
        if (e->n_held > 0) {
            if (continues(e, b)) {
                e->held[e->n_held++] = b;
                i++;
                if (e->n_held == e->need) {
                    put_held(e, out);
                }
                continue;
            }
            drop_held(e, out); /* and @b starts afresh */
        }
        gsize run = i;
        while (run < len && ascii_plain(data[run])) {
            run++;
        }
        if (run > i) {
            g_string_append_len(out, (const char *)data + i, run - i);
            i = run;
            continue;
        }
        put_start(e, b, out);
        i++;
    }
}

void sbx_escaper_finish(SbxEscaper *e, GString *out)
{
    drop_held(e, out);
}

char *sbx_escape(const char *text, gssize len, SbxEscapeMode mode)
{
    gsize n = len < 0 ? strlen(text) : (gsize)len;
    GString *out = g_string_sized_new(n + 16);
    SbxEscaper e;

    sbx_escaper_init(&e, mode);
    sbx_escaper_feed(&e, (const guint8 *)text, n, out);
    sbx_escaper_finish(&e, out);
    return g_string_free(out, FALSE);
}
