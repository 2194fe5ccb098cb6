/*
 * MCP JSON-RPC framing and message parsing (see mcp-wire.h).
 */
#include "mcp-wire.h"

#include <gio/gio.h>
#include <string.h>

#include "protocol/json.h"
#include "protocol/limits.h"

struct SbxMcpFramer {
    SbxMcpFraming framing;
    gsize max;
    GByteArray *line;  /* the line being received */
    gboolean after_cr; /* SSE: the last byte ended a line with CR (a LF next belongs to it) */
    GString *data;     /* SSE: the event's data field so far */
    gboolean data_set; /* SSE: the event has a data field (possibly empty) */
    char *event;       /* SSE: the event's type, or NULL ("message") */
    char *id_buffer;   /* SSE: the `id` field's value so far, or NULL (kept across events) */
    char *last_id;     /* SSE: the id of the last event dispatched, or NULL */
    gint64 retry_ms;   /* SSE: the last valid `retry` field, or -1 */
    guint64 events;    /* SSE: events dispatched, empty ones (priming events) included */
    gboolean in_event; /* SSE: a field (not a comment) since the last blank line */
};

SbxMcpFramer *sbx_mcp_framer_new(SbxMcpFraming framing, gsize max)
{
    SbxMcpFramer *f = g_new0(SbxMcpFramer, 1);
    f->framing = framing;
    f->max = max;
    f->line = g_byte_array_new();
    f->data = g_string_new(NULL);
    f->retry_ms = -1;
    return f;
}

void sbx_mcp_framer_free(SbxMcpFramer *framer)
{
    if (framer == NULL) {
        return;
    }
    g_byte_array_unref(framer->line);
    g_string_free(framer->data, TRUE);
    g_free(framer->event);
    g_free(framer->id_buffer);
    g_free(framer->last_id);
    g_free(framer);
}

static void too_long(SbxMcpFramer *f, GError **error)
{
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                "a message longer than %" G_GSIZE_FORMAT " bytes", f->max);
}

/*
 * SSE: the blank line ends an event; only "message" events carry JSON-RPC. As the SSE standard
 * says, the event's id becomes the stream's last event id even when the event has no data (a
 * server's "priming" event: an id to resume from, nothing else).
 */
static void sse_dispatch(SbxMcpFramer *f, SbxMcpMessageFunc fn, gpointer user_data)
{
    gboolean is_message = f->event == NULL || strcmp(f->event, "message") == 0;

    if (g_strcmp0(f->last_id, f->id_buffer) != 0) {
        g_free(f->last_id);
        f->last_id = g_strdup(f->id_buffer);
    }
    f->events += f->in_event ? 1 : 0;
    f->in_event = FALSE;
    if (f->data_set && is_message && f->data->len > 0) {
        fn(f->data->str, f->data->len, user_data);
    }
    g_string_truncate(f->data, 0);
    f->data_set = FALSE;
    g_clear_pointer(&f->event, g_free);
}

/*
 * SSE: an `id` field. An empty value clears the id, as the standard says. It goes back to the
 * server as the Last-Event-ID header when a stream is resumed, so a value that could not be a
 * header value (a control character: the standard itself ignores ids with NUL) or is longer than
 * SBX_MCP_EVENT_ID_MAX is ignored.
 */
static void sse_id(SbxMcpFramer *f, const char *value, gsize len)
{
    if (len > SBX_MCP_EVENT_ID_MAX) {
        return;
    }
    for (gsize i = 0; i < len; i++) {
        if ((guchar)value[i] < 0x20 || value[i] == 0x7f) {
            return;
        }
    }
    g_free(f->id_buffer);
    f->id_buffer = len > 0 ? g_strndup(value, len) : NULL;
}

/* SSE: a `retry` field, ASCII digits only (anything else is ignored, as the standard says). */
static void sse_retry(SbxMcpFramer *f, const char *value, gsize len)
{
    gint64 ms = 0;

    if (len == 0) {
        return;
    }
    for (gsize i = 0; i < len; i++) {
        if (!g_ascii_isdigit(value[i])) {
            return;
        }
        ms = MIN(ms * 10 + (value[i] - '0'), G_MAXINT32); /* saturated: no overflow */
    }
    f->retry_ms = ms;
}

/* SSE: one line, "field: value" (one space after the colon is dropped) or ":comment". */
static gboolean sse_line(SbxMcpFramer *f, const char *line, gsize len, SbxMcpMessageFunc fn,
                         gpointer user_data, GError **error)
{
    if (len == 0) {
        sse_dispatch(f, fn, user_data);
        return TRUE;
    }
    const char *colon = memchr(line, ':', len);
    gsize name_len = colon != NULL ? (gsize)(colon - line) : len;
    const char *value = colon != NULL ? colon + 1 : line + len;
    gsize value_len = line + len - value;

    if (value_len > 0 && value[0] == ' ') {
        value++;
        value_len--;
    }
    f->in_event |= name_len > 0;
    if (name_len == 4 && memcmp(line, "data", 4) == 0) {
        if (f->data->len + value_len + 1 > f->max) {
            too_long(f, error);
            return FALSE;
        }
        if (f->data_set) {
            g_string_append_c(f->data, '\n');
        }
        g_string_append_len(f->data, value, value_len);
        f->data_set = TRUE;
    } else if (name_len == 5 && memcmp(line, "event", 5) == 0) {
        g_free(f->event);
        f->event = g_strndup(value, value_len);
    } else if (name_len == 2 && memcmp(line, "id", 2) == 0) {
        sse_id(f, value, value_len);
    } else if (name_len == 5 && memcmp(line, "retry", 5) == 0) {
        sse_retry(f, value, value_len);
    }
    /* Comments and unknown fields: nothing we use. */
    return TRUE;
}

static gboolean line_done(SbxMcpFramer *f, SbxMcpMessageFunc fn, gpointer user_data, GError **error)
{
    const char *text = (const char *)f->line->data;
    gsize len = f->line->len;
    gboolean ok = TRUE;

    if (f->framing == SBX_MCP_FRAMING_SSE) {
        ok = sse_line(f, text, len, fn, user_data, error);
    } else {
        if (len > 0 && text[len - 1] == '\r') {
            len--;
        }
        /* Blank lines between messages are harmless; skip them. */
        gsize i = 0;
        while (i < len && (text[i] == ' ' || text[i] == '\t')) {
            i++;
        }
        if (i < len) {
            fn(text, len, user_data);
        }
    }
    g_byte_array_set_size(f->line, 0);
    return ok;
}

gboolean sbx_mcp_framer_feed(SbxMcpFramer *f, const guint8 *data, gsize len, SbxMcpMessageFunc fn,
                             gpointer user_data, GError **error)
{
    gboolean sse = f->framing == SBX_MCP_FRAMING_SSE;

    while (len > 0) {
        if (sse && f->after_cr && data[0] == '\n') { /* the LF of a CRLF */
            data++;
            len--;
            f->after_cr = FALSE;
            continue;
        }
        f->after_cr = FALSE;
        const guint8 *nl = memchr(data, '\n', len);
        const guint8 *cr = sse ? memchr(data, '\r', nl != NULL ? (gsize)(nl - data) : len) : NULL;
        const guint8 *end = cr != NULL ? cr : nl;
        gsize take = end != NULL ? (gsize)(end - data) : len;

        if (f->line->len + take > f->max) {
            too_long(f, error);
            return FALSE;
        }
        g_byte_array_append(f->line, data, take);
        if (end == NULL) {
            return TRUE;
        }
        data += take + 1;
        len -= take + 1;
        f->after_cr = end == cr;
        if (!line_done(f, fn, user_data, error)) {
            return FALSE;
        }
    }
    return TRUE;
}

void sbx_mcp_framer_finish(SbxMcpFramer *f, SbxMcpMessageFunc fn, gpointer user_data)
{
    if (f->framing == SBX_MCP_FRAMING_LINES && f->line->len > 0) {
        line_done(f, fn, user_data, NULL);
    }
    g_byte_array_set_size(f->line, 0);
    g_string_truncate(f->data, 0);
    f->data_set = FALSE;
}

const char *sbx_mcp_framer_last_event_id(const SbxMcpFramer *framer)
{
    return framer->last_id;
}

gint64 sbx_mcp_framer_retry_ms(const SbxMcpFramer *framer)
{
    return framer->retry_ms;
}

guint64 sbx_mcp_framer_events(const SbxMcpFramer *framer)
{
    return framer->events;
}

/* ---- messages ---------------------------------------------------------------------------- */

static SbxMcpMessage *bad(SbxMcpMessage *m, GError **error, const char *what)
{
    g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "not a JSON-RPC 2.0 message: %s", what);
    sbx_mcp_message_free(m);
    return NULL;
}

/* An id is a string or an integer (JSON-RPC allows numbers; fractions are not used). */
static gboolean read_id(SbxMcpMessage *m, const cJSON *id)
{
    m->id = id;
    if (cJSON_IsString(id)) {
        return TRUE;
    }
    if (!cJSON_IsNumber(id)) {
        return FALSE;
    }
    int64_t v;
    m->id_is_int = sbx_json_int64(id, &v);
    m->id_int = m->id_is_int ? v : 0;
    return TRUE;
}

static SbxMcpMessage *parse_error_member(SbxMcpMessage *m, const cJSON *err, GError **error)
{
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");

    if (!cJSON_IsObject(err) || !cJSON_IsNumber(code)) {
        return bad(m, error, "\"error\" without a numeric code");
    }
    m->kind = SBX_MCP_MSG_ERROR;
    int64_t c;
    m->error_code = sbx_json_int64(code, &c) ? c : 0;
    m->error_message = cJSON_IsString(msg) ? msg->valuestring : "";
    return m;
}

SbxMcpMessage *sbx_mcp_message_parse(const char *text, gsize len, GError **error)
{
    SbxMcpMessage *m = g_new0(SbxMcpMessage, 1);

    g_autofree char *why = NULL;
    g_autofree char *valid = NULL;
    /* A server's invalid UTF-8 (a description in Latin-1) costs it those characters (U+FFFD),
     * not the whole message: JSON is UTF-8, so no valid value changes. */
    if (!g_utf8_validate_len(text, len, NULL)) {
        valid = g_utf8_make_valid(text, len);
        text = valid;
        len = strlen(valid);
    }
    m->root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    if (m->root == NULL) {
        return bad(m, error, why != NULL ? why : "out of memory");
    }
    if (!cJSON_IsObject(m->root)) {
        return bad(m, error, "not an object (batches are not supported)");
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m->root, "jsonrpc");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(m->root, "method");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(m->root, "id");
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(m->root, "result");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(m->root, "error");

    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0) {
        return bad(m, error, "\"jsonrpc\" is not \"2.0\"");
    }
    if (method != NULL) {
        if (!cJSON_IsString(method)) {
            return bad(m, error, "\"method\" is not a string");
        }
        m->method = method->valuestring;
        m->params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
        if (id == NULL) {
            m->kind = SBX_MCP_MSG_NOTIFICATION;
            return m;
        }
        m->kind = SBX_MCP_MSG_REQUEST;
        return read_id(m, id) ? m : bad(m, error, "a request id that is not a string or number");
    }
    if (err != NULL) {
        /* An error about a request the server could not even read has a null id. */
        if (!cJSON_IsNull(id) && (id == NULL || !read_id(m, id))) {
            return bad(m, error, "an error with a bad id");
        }
        m->id = id;
        return parse_error_member(m, err, error);
    }
    if (result == NULL || id == NULL || !read_id(m, id)) {
        return bad(m, error, "neither a request, a notification, a result nor an error");
    }
    m->kind = SBX_MCP_MSG_RESULT;
    m->result = result;
    return m;
}

void sbx_mcp_message_free(SbxMcpMessage *msg)
{
    if (msg == NULL) {
        return;
    }
    cJSON_Delete(msg->root);
    g_free(msg);
}
