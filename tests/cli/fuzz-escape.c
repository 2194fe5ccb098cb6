/*
 * Fuzz target: the terminal escaper (host-agent/cli/escape.c) and the view of a tool input
 * built on it (host-agent/cli/input-view.c), over any bytes: what a guest prints, what a guest
 * passes as a tool input. The first input byte picks a width; the rest is the data.
 * Checks: the text form holds no control a terminal obeys (C0 but \n and \t, DEL, C1) and is
 * valid UTF-8; cutting the stream into chunks (sizes from the data's bytes) changes nothing;
 * text that is valid UTF-8 without such controls passes unchanged; the JSON form is valid UTF-8
 * without them either, and valid JSON stays JSON of the same value; the view holds no such
 * control, its lines end in \n, start with the prefix and fit the width, and it has as many
 * lines as it says. Everything is freed (ASan).
 */
#include <string.h>

#include <glib.h>

#include "../protocol/fuzz.h"
#include "cli/escape.h"
#include "cli/input-view.h"
#include "protocol/json.h"
#include "protocol/limits.h"

/* @s (@len bytes) is valid UTF-8 without a control a terminal obeys. */
static gboolean safe(const char *s, gsize len)
{
    const char *end = s + len;

    if (!g_utf8_validate(s, len, NULL)) {
        return FALSE;
    }
    for (const char *p = s; p < end; p = g_utf8_next_char(p)) {
        gunichar c = g_utf8_get_char(p);
        if ((c < 0x20 && c != '\n' && c != '\t') || (c >= 0x7f && c <= 0x9f)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* Escaped in chunks whose sizes come from the data itself: the same as whole. */
static void check_chunks(const guint8 *data, gsize size, const char *whole)
{
    g_autoptr(GString) out = g_string_new(NULL);
    SbxEscaper e;
    gsize at = 0, k = 0;

    sbx_escaper_init(&e, SBX_ESCAPE_TEXT);
    while (at < size) {
        gsize want = (gsize)(data[k++ % size] % 7) + 1; /* not inside MIN(): evaluated twice */
        gsize n = MIN(size - at, want);
        sbx_escaper_feed(&e, data + at, n, out);
        at += n;
    }
    sbx_escaper_finish(&e, out);
    FUZZ_CHECK(strcmp(out->str, whole) == 0);
}

static void check_json(const char *data, gsize size)
{
    g_autofree char *esc = sbx_escape(data, size, SBX_ESCAPE_JSON);
    FUZZ_CHECK(safe(esc, strlen(esc)));
    cJSON *in = sbx_json_parse(data, size, SBX_JSON_DEPTH_MAX, NULL);
    if (in == NULL) {
        return;
    }
    cJSON *out = sbx_json_parse(esc, strlen(esc), SBX_JSON_DEPTH_MAX, NULL);
    FUZZ_CHECK(out != NULL);
    char *a = sbx_json_print(in), *b = sbx_json_print(out);
    FUZZ_CHECK(a != NULL && b != NULL && strcmp(a, b) == 0);
    free(a);
    free(b);
    cJSON_Delete(in);
    cJSON_Delete(out);
}

static void check_view(const char *data, gsize size, guint width)
{
    guint lines = 0, counted = 0;
    g_autofree char *view = sbx_input_view(data, size, width, "> ", &lines);
    gsize len = strlen(view);

    FUZZ_CHECK(safe(view, len) && len > 0 && view[len - 1] == '\n');
    for (char *p = view; *p != '\0'; counted++) {
        char *nl = strchr(p, '\n');
        FUZZ_CHECK(nl != NULL && strncmp(p, "> ", 2) == 0);
        *nl = '\0';
        FUZZ_CHECK(width == 0 ||
                   sbx_input_view_columns(p) <= MAX(width, SBX_INPUT_VIEW_WIDTH_MIN + 2));
        p = nl + 1;
    }
    FUZZ_CHECK(counted == lines);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    guint width = data[0] % 4 == 0 ? 0 : data[0]; /* 0: not folded */
    data++;
    size--;
    const char *text = (const char *)data;
    g_autofree char *whole = sbx_escape(text, size, SBX_ESCAPE_TEXT);

    FUZZ_CHECK(safe(whole, strlen(whole)));
    if (safe(text, size) && memchr(text, '\0', size) == NULL) {
        FUZZ_CHECK(strlen(whole) == size && memcmp(whole, text, size) == 0);
    }
    if (size > 0) {
        check_chunks(data, size, whole);
    }
    check_json(text, size);
    check_view(text, size, width);
    return 0;
}
