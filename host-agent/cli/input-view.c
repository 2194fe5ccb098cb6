/* A tool call's input for people: pretty, safe for a terminal, folded (input-view.h). */
#include "cli/input-view.h"

#include <string.h>

#include "cli/escape.h"

static void new_line(GString *out, guint depth)
{
    g_string_append_c(out, '\n');
    for (guint i = 0; i < MIN(depth, SBX_INPUT_VIEW_INDENT_MAX); i++) {
        g_string_append(out, "  ");
    }
}

static gboolean is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* A bracket outside strings at @i: "{}" and "[]" stay whole, others open a level. */
static gsize open_level(const char *s, gsize len, gsize i, guint *depth, GString *out)
{
    gsize j = i + 1;

    while (j < len && is_space(s[j])) {
        j++;
    }
    g_string_append_c(out, s[i]);
    if (j < len && s[j] == (s[i] == '{' ? '}' : ']')) {
        g_string_append_c(out, s[j]);
        return j;
    }
    new_line(out, ++*depth);
    return i;
}

/* One member or element a line; strings (with their escapes) and literals kept byte for byte. */
static GString *pretty(const char *s, gsize len)
{
    GString *out = g_string_sized_new(len + len / 4 + 16);
    guint depth = 0;
    gboolean in_string = FALSE;

    for (gsize i = 0; i < len; i++) {
        char c = s[i];
        if (in_string) {
            g_string_append_c(out, c);
            if (c == '\\' && i + 1 < len) {
                g_string_append_c(out, s[++i]);
            } else if (c == '"') {
                in_string = FALSE;
            }
        } else if (c == '{' || c == '[') {
            i = open_level(s, len, i, &depth, out);
        } else if (c == '}' || c == ']') {
            depth = depth > 0 ? depth - 1 : 0;
            new_line(out, depth);
            g_string_append_c(out, c);
        } else if (c == ',') {
            g_string_append_c(out, c);
            new_line(out, depth);
        } else if (c == ':') {
            g_string_append(out, ": ");
        } else if (!is_space(c)) {
            in_string = c == '"';
            g_string_append_c(out, c);
        }
    }
    return out;
}

static guint char_columns(gunichar c)
{
    if (c == '\t') {
        return 8; /* at most: the terminal moves to the next multiple of 8 */
    }
    if (g_unichar_iszerowidth(c)) {
        return 0;
    }
    return g_unichar_iswide(c) ? 2 : 1;
}

guint sbx_input_view_columns(const char *text)
{
    guint cols = 0;

    for (const char *p = text; *p != '\0'; p = g_utf8_next_char(p)) {
        cols += char_columns(g_utf8_get_char(p));
    }
    return cols;
}

/* @text (valid UTF-8, lines ending in \n or not) folded at @width, each line after @prefix. */
static GString *fold(const char *text, guint width, const char *prefix, guint *ret_lines)
{
    GString *out = g_string_sized_new(strlen(text) + strlen(text) / 8 + 64);
    guint start = sbx_input_view_columns(prefix), col = start, lines = 1;
    const char *p = text;

    if (width != 0) {
        width = MAX(width, start + SBX_INPUT_VIEW_WIDTH_MIN);
    }
    g_string_append(out, prefix);
    while (*p != '\0') {
        const char *next = g_utf8_next_char(p);
        gunichar c = g_utf8_get_char(p);
        guint w = char_columns(c);
        if (c == '\n' || (width != 0 && col + w > width && col > start)) {
            g_string_append_c(out, '\n');
            g_string_append(out, prefix);
            col = start;
            lines++;
            if (c == '\n') {
                p = next;
                continue;
            }
        }
        g_string_append_len(out, p, next - p);
        col += w;
        p = next;
    }
    g_string_append_c(out, '\n');
    if (ret_lines != NULL) {
        *ret_lines = lines;
    }
    return out;
}

char *sbx_input_view(const char *json, gsize len, guint width, const char *prefix, guint *ret_lines)
{
    g_autoptr(GString) laid_out = pretty(json, len);
    g_autofree char *safe = sbx_escape(laid_out->str, laid_out->len, SBX_ESCAPE_TEXT);

    return g_string_free(fold(safe, width, prefix, ret_lines), FALSE);
}
