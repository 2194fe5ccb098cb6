/*
 * JSON strings for the store's list/show output (store-private.h). Output bytes may hold NUL
 * and invalid UTF-8; the JSON printed must still be valid. (A copy of cli/report.c's escaper
 * until both move to a base layer.)
 */
#include "store-private.h"

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

void sbx_store_json_string(GString *out, const char *data, gsize len)
{
    if (data == NULL) {
        g_string_append(out, "null");
        return;
    }
    const char *p = data, *end = data + len;
    g_string_append_c(out, '"');
    while (p < end) {
        gunichar c = *p == '\0' ? 0 : g_utf8_get_char_validated(p, end - p);
        if (c == (gunichar)-1 || c == (gunichar)-2) {
            append_char(out, 0xfffd); /* one replacement per invalid byte */
            p++;
            continue;
        }
        append_char(out, c);
        p = c == 0 ? p + 1 : g_utf8_next_char(p);
    }
    g_string_append_c(out, '"');
}

void sbx_store_json_str(GString *out, const char *s)
{
    sbx_store_json_string(out, s, s != NULL ? strlen(s) : 0);
}
