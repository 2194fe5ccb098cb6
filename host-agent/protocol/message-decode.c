/*
 * Decoder: one frame payload -> a typed SbxMsg. Everything here comes from a hostile peer.
 *
 * The field getters share a sticky error: after the first failure they do nothing, so each
 * message decoder is a flat list of fields and the first problem is the one reported.
 */
#include "message.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "cJSON.h"
#include "json-check.h"
#include "json.h"

typedef struct {
    const char *where; /* "tool_call", "done.error", ... prefix of error messages */
    int err;           /* 0, -EBADMSG or -ENOMEM */
    char *error;       /* the first failure, malloc'd */
    const char *text;  /* the payload, and its tree: values are copied from the text */
    size_t len;
    const cJSON *root;
} Dec;

typedef enum { REQUIRED, OPTIONAL } Presence;

static void fail(Dec *d, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(Dec *d, const char *field, const char *fmt, ...)
{
    va_list ap;
    char *what = NULL;

    if (d->err)
        return;
    d->err = -EBADMSG;
    va_start(ap, fmt);
    if (vasprintf(&what, fmt, ap) < 0)
        what = NULL;
    va_end(ap);
    if (what)
        d->error = sbx_strdup_printf("%s.%s: %s", d->where, field, what);
    free(what);
}

static void *check_alloc(Dec *d, void *p)
{
    if (!p && !d->err)
        d->err = -ENOMEM;
    return p;
}

/*
 * The member @key of @o, or NULL. A missing required member is an error; an optional member
 * that is null counts as absent.
 */
static const cJSON *member(Dec *d, const cJSON *o, const char *key, Presence p)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(o, key);

    if (d->err)
        return NULL;
    if (!item && p == REQUIRED)
        fail(d, key, "missing");
    if (item && p == OPTIONAL && cJSON_IsNull(item))
        return NULL;
    return item;
}

/* The string value of @key, borrowed from the tree, or NULL. */
static const char *get_borrowed(Dec *d, const cJSON *o, const char *key, Presence p,
                                const char *expected)
{
    const cJSON *item = member(d, o, key, p);

    if (!item)
        return NULL;
    if (!cJSON_IsString(item)) {
        fail(d, key, "expected %s", expected);
        return NULL;
    }
    return item->valuestring;
}

/* A string of at most @max bytes; longer is an error. */
static void get_string(Dec *d, const cJSON *o, const char *key, Presence p, size_t max, char **out)
{
    const char *s = get_borrowed(d, o, key, p, "a string");

    if (!s)
        return;
    if (strlen(s) > max)
        fail(d, key, "longer than %zu bytes", max);
    else
        *out = check_alloc(d, strdup(s));
}

/* A string of 1..@max bytes. */
static void get_nonempty(Dec *d, const cJSON *o, const char *key, size_t max, char **out)
{
    get_string(d, o, key, REQUIRED, max, out);
    if (*out && !(*out)[0])
        fail(d, key, "empty");
}

/* Text shown to people (error messages, stacks): longer than @max is cut, not refused. */
static void get_text(Dec *d, const cJSON *o, const char *key, Presence p, size_t max, char **out)
{
    const char *s = get_borrowed(d, o, key, p, "a string");

    if (s)
        *out = check_alloc(d, strndup(s, sbx_utf8_truncated_len(s, max)));
}

static void get_id(Dec *d, const cJSON *o, const char *key, char **out)
{
    const char *s = get_borrowed(d, o, key, REQUIRED, "an id");

    if (s && !sbx_id_valid(s))
        fail(d, key, "expected an id (1..%d of [A-Za-z0-9_.-])", SBX_ID_MAX);
    else if (s)
        *out = check_alloc(d, strdup(s));
}

static void get_ident(Dec *d, const cJSON *o, const char *key, Presence p, char **out)
{
    const char *s = get_borrowed(d, o, key, p, "an identifier");

    if (s && !sbx_identifier_valid(s))
        fail(d, key, "expected an identifier (1..%d of [A-Za-z_$][A-Za-z0-9_$]*)", SBX_NAME_MAX);
    else if (s)
        *out = check_alloc(d, strdup(s));
}

/* An integer in [@min, @max], decided on its literal (1.0 is 1, 1.0000000000000001 is not).
 * Returns false when absent or invalid. */
static bool get_number(Dec *d, const cJSON *o, const char *key, Presence p, int64_t min,
                       int64_t max, int64_t *out)
{
    const cJSON *item = member(d, o, key, p);
    int64_t v;

    if (!item)
        return false;
    if (!sbx_json_int64(item, &v) || v < min || v > max) {
        fail(d, key, "expected an integer %" PRId64 "..%" PRId64, min, max);
        return false;
    }
    *out = v;
    return true;
}

static void get_u32(Dec *d, const cJSON *o, const char *key, Presence p, uint32_t min,
                    uint32_t *out)
{
    int64_t v;

    if (get_number(d, o, key, p, min, UINT32_MAX, &v))
        *out = (uint32_t)v;
}

static void get_u53(Dec *d, const cJSON *o, const char *key, Presence p, uint64_t *out)
{
    int64_t v;

    if (get_number(d, o, key, p, 0, (int64_t)SBX_JSON_INT_MAX, &v))
        *out = (uint64_t)v;
}

static void get_bool(Dec *d, const cJSON *o, const char *key, bool *out)
{
    const cJSON *item = member(d, o, key, REQUIRED);

    if (item && !cJSON_IsBool(item))
        fail(d, key, "expected true or false");
    else if (item)
        *out = cJSON_IsTrue(item);
}

/* Base64 of @min..@max bytes. The text length is checked before anything is decoded. */
static void get_base64(Dec *d, const cJSON *o, const char *key, size_t min, size_t max,
                       uint8_t **out, size_t *out_len)
{
    const char *s = get_borrowed(d, o, key, REQUIRED, "a base64 string");
    size_t n = s ? strlen(s) : 0;
    int r;

    if (!s)
        return;
    if (n > sbx_base64_encoded_len(max) || (r = sbx_base64_decode(s, n, out, out_len)) == -EINVAL) {
        fail(d, key, "expected base64 (RFC 4648, padded) of %zu..%zu bytes", min, max);
    } else if (r < 0) {
        check_alloc(d, NULL);
    } else if (*out_len < min || *out_len > max) {
        free(*out);
        *out = NULL;
        *out_len = 0;
        fail(d, key, "expected base64 (RFC 4648, padded) of %zu..%zu bytes", min, max);
    }
}

/*
 * Any JSON value, as the text the peer sent less the whitespace between tokens: never a
 * re-print, so every number keeps its literal (docs/protocol.md, "Numbers"). A required member
 * may be null (null is a value); an optional one that is null is absent unless @null_is_value.
 */
static const cJSON *get_json(Dec *d, const cJSON *o, const char *key, Presence p,
                             bool null_is_value, char **out)
{
    const cJSON *item = d->err ? NULL : cJSON_GetObjectItemCaseSensitive(o, key);

    if (!item && p == REQUIRED)
        fail(d, key, "missing");
    if (!item || (p == OPTIONAL && !null_is_value && cJSON_IsNull(item)))
        return NULL;
    *out = check_alloc(d, sbx_json_member_text(d->text, d->len, d->root, item));
    return item;
}

/*
 * A log of @key: an array of at most @max integers 0..2^53-1 (clock reads in microseconds, or
 * events). Present, even empty, is non-NULL. The array's size is checked before anything is
 * allocated.
 */
static void get_log(Dec *d, const cJSON *o, const char *key, size_t max, uint64_t **out,
                    size_t *n_out)
{
    const cJSON *arr = member(d, o, key, OPTIONAL);
    const cJSON *c;
    size_t n = 0;

    if (!arr)
        return;
    if (!cJSON_IsArray(arr) || (size_t)cJSON_GetArraySize(arr) > max) {
        fail(d, key, "expected an array of at most %zu integers", max);
        return;
    }
    *out = check_alloc(d, calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(**out)));
    if (!*out)
        return;
    cJSON_ArrayForEach(c, arr)
    {
        int64_t v;

        if (!sbx_json_int64(c, &v) || v < 0 || (uint64_t)v > SBX_JSON_INT_MAX) {
            fail(d, key, "expected integers 0..%llu", SBX_JSON_INT_MAX);
            return;
        }
        (*out)[n++] = (uint64_t)v;
    }
    *n_out = n;
}

static void get_clock_log(Dec *d, const cJSON *o, uint64_t **out, size_t *n_out)
{
    get_log(d, o, "clock_log", SBX_CLOCK_READS_MAX, out, n_out);
}

static void get_error(Dec *d, const cJSON *o, const char *key, Presence p, SbxError *e, bool *has)
{
    const cJSON *item = member(d, o, key, p);
    const char *where = d->where;
    char path[64];
    const char *code;

    if (!item)
        return;
    if (!cJSON_IsObject(item)) {
        fail(d, key, "expected an object {code, type?, message, stack?}");
        return;
    }
    snprintf(path, sizeof(path), "%s.%s", where, key);
    d->where = path;
    code = get_borrowed(d, item, "code", REQUIRED, "an error code");
    if (code && sbx_error_code_from_name(code, &e->code) < 0)
        fail(d, "code", "expected an error code such as \"runtime_error\"");
    get_text(d, item, "type", OPTIONAL, SBX_NAME_MAX, &e->type);
    get_text(d, item, "message", REQUIRED, SBX_ERROR_TEXT_MAX, &e->message);
    get_text(d, item, "stack", OPTIONAL, SBX_ERROR_TEXT_MAX, &e->stack);
    d->where = where;
    if (has)
        *has = true;
}
static void decode_hello(Dec *d, const cJSON *o, SbxHello *m)
{
    int64_t t;

    get_u32(d, o, "version", REQUIRED, 0, &m->version);
    get_nonempty(d, o, "token", SBX_TOKEN_MAX, &m->token);
    get_base64(d, o, "entropy", SBX_ENTROPY_MIN, SBX_ENTROPY_MAX, &m->entropy, &m->entropy_len);
    if (get_number(d, o, "time_us", REQUIRED, 0, (int64_t)SBX_JSON_INT_MAX, &t))
        m->time_us = t;
    if (member(d, o, "warm_up", OPTIONAL))
        get_bool(d, o, "warm_up", &m->warm_up);
    if (get_number(d, o, "warm_wait_ms", OPTIONAL, 1, SBX_WARM_WAIT_MAX_MS, &t))
        m->warm_wait_ms = (uint32_t)t;
}

static void decode_languages(Dec *d, const cJSON *o, SbxHelloOk *m)
{
    const cJSON *arr = member(d, o, "languages", REQUIRED);
    const cJSON *c;
    size_t i = 0;

    if (!arr)
        return;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > SBX_LANGUAGES_MAX) {
        fail(d, "languages", "expected an array of at most %d identifiers", SBX_LANGUAGES_MAX);
        return;
    }
    m->languages = check_alloc(d, calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(char *)));
    cJSON_ArrayForEach(c, arr)
    {
        if (!m->languages || d->err)
            return;
        if (!cJSON_IsString(c) || !sbx_identifier_valid(c->valuestring))
            fail(d, "languages", "expected an array of at most %d identifiers", SBX_LANGUAGES_MAX);
        else
            m->languages[i++] = check_alloc(d, strdup(c->valuestring));
    }
}

static void decode_hello_ok(Dec *d, const cJSON *o, SbxHelloOk *m)
{
    get_u32(d, o, "version", REQUIRED, 0, &m->version);
    get_nonempty(d, o, "token", SBX_TOKEN_MAX, &m->token);
    get_nonempty(d, o, "agent", SBX_NAME_MAX, &m->agent);
    decode_languages(d, o, m);
}

static void decode_tool_decl(Dec *d, const cJSON *o, SbxToolDecl *t)
{
    get_ident(d, o, "provider", REQUIRED, &t->provider);
    get_ident(d, o, "name", REQUIRED, &t->name);
    /* Bounded by the frame only: MCP descriptions can be long and only the host writes them. */
    get_string(d, o, "description", OPTIONAL, SBX_FRAME_MAX, &t->description);
}

static void decode_tools(Dec *d, const cJSON *o, SbxExecute *m)
{
    const cJSON *arr = member(d, o, "tools", REQUIRED);
    const cJSON *c;
    const char *where = d->where;
    char path[64];
    size_t n;

    if (!arr)
        return;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > SBX_TOOLS_MAX) {
        fail(d, "tools", "expected an array of at most %d tools", SBX_TOOLS_MAX);
        return;
    }
    n = (size_t)cJSON_GetArraySize(arr);
    m->tools = n ? check_alloc(d, calloc(n, sizeof(*m->tools))) : NULL;
    if (n && !m->tools)
        return;
    m->n_tools = n;
    n = 0;
    cJSON_ArrayForEach(c, arr)
    {
        if (!cJSON_IsObject(c)) {
            fail(d, "tools", "expected an array of {provider, name, description?}");
            return;
        }
        snprintf(path, sizeof(path), "%s.tools[%zu]", where, n);
        d->where = path;
        decode_tool_decl(d, c, &m->tools[n++]);
        d->where = where;
    }
}

static void decode_execute(Dec *d, const cJSON *o, SbxExecute *m)
{
    const char *lang;
    const cJSON *args;
    int64_t v;

    get_id(d, o, "id", &m->id);
    lang = get_borrowed(d, o, "language", REQUIRED, "a language");
    if (lang && sbx_language_from_name(lang, &m->language) < 0)
        fail(d, "language", "expected \"javascript\" or \"python\"");
    get_string(d, o, "code", REQUIRED, SBX_FRAME_MAX, &m->code);
    get_ident(d, o, "entry", OPTIONAL, &m->entry);
    args = get_json(d, o, "args", OPTIONAL, false, &m->args_json);
    if (args && !cJSON_IsArray(args))
        fail(d, "args", "expected an array");
    args = get_json(d, o, "kwargs", OPTIONAL, false, &m->kwargs_json);
    if (args && !cJSON_IsObject(args))
        fail(d, "kwargs", "expected an object");
    if (member(d, o, "keep", OPTIONAL))
        get_bool(d, o, "keep", &m->keep);
    decode_tools(d, o, m);
    get_u53(d, o, "output_limit", OPTIONAL, &m->output_limit);
    if (get_number(d, o, "timeout_ms", OPTIONAL, 0, UINT32_MAX, &v))
        m->timeout_ms = (uint32_t)v;
    if (get_number(d, o, "time_us", OPTIONAL, 1, (int64_t)SBX_JSON_INT_MAX, &v))
        m->time_us = v;
    if (member(d, o, "entropy", OPTIONAL))
        get_base64(d, o, "entropy", SBX_ENTROPY_MIN, SBX_ENTROPY_MAX, &m->entropy, &m->entropy_len);
    if (member(d, o, "seed", OPTIONAL)) {
        size_t n = 0;

        get_base64(d, o, "seed", SBX_SEED_BYTES, SBX_SEED_BYTES, &m->seed, &n);
    }
    get_clock_log(d, o, &m->clock_log, &m->n_clock_log);
    get_log(d, o, "event_log", SBX_EVENT_LOG_MAX, &m->event_log, &m->n_event_log);
    if (member(d, o, "log_open", OPTIONAL))
        get_bool(d, o, "log_open", &m->log_open);
}

static void decode_replay_log(Dec *d, const cJSON *o, SbxReplayLog *m)
{
    get_id(d, o, "id", &m->id);
    get_log(d, o, "clock", SBX_REPLAY_LOG_BATCH_MAX, &m->clock, &m->n_clock);
    get_log(d, o, "events", SBX_REPLAY_LOG_BATCH_MAX, &m->events, &m->n_events);
    get_text(d, o, "not_replayable", OPTIONAL, SBX_REASON_MAX, &m->not_replayable);
}

static void decode_output(Dec *d, const cJSON *o, SbxOutput *m)
{
    const char *stream;

    get_id(d, o, "id", &m->id);
    stream = get_borrowed(d, o, "stream", REQUIRED, "a stream");
    if (stream && sbx_stream_from_name(stream, &m->stream) < 0)
        fail(d, "stream", "expected \"stdout\" or \"stderr\"");
    get_base64(d, o, "data", 1, SBX_OUTPUT_CHUNK_MAX, &m->data, &m->len);
}

static void decode_tool_call(Dec *d, const cJSON *o, SbxToolCall *m)
{
    get_id(d, o, "id", &m->id);
    get_u32(d, o, "call_id", REQUIRED, 1, &m->call_id);
    get_ident(d, o, "provider", REQUIRED, &m->provider);
    get_ident(d, o, "tool", REQUIRED, &m->tool);
    get_json(d, o, "input", REQUIRED, true, &m->input_json);
    get_log(d, o, "clock", SBX_REPLAY_LOG_BATCH_MAX, &m->clock, &m->n_clock);
    get_log(d, o, "events", SBX_REPLAY_LOG_BATCH_MAX, &m->events, &m->n_events);
    get_text(d, o, "not_replayable", OPTIONAL, SBX_REASON_MAX, &m->not_replayable);
}

static void decode_tool_result(Dec *d, const cJSON *o, SbxToolResult *m)
{
    get_id(d, o, "id", &m->id);
    get_u32(d, o, "call_id", REQUIRED, 1, &m->call_id);
    get_bool(d, o, "ok", &m->ok);
    if (d->err)
        return;
    if (m->ok)
        get_json(d, o, "result", REQUIRED, true, &m->result_json);
    else
        get_error(d, o, "error", REQUIRED, &m->error, NULL);
}

static void decode_done(Dec *d, const cJSON *o, SbxDone *m)
{
    const char *status;
    int64_t v;

    get_id(d, o, "id", &m->id);
    status = get_borrowed(d, o, "status", REQUIRED, "a status");
    if (status && sbx_status_from_name(status, &m->status) < 0)
        fail(d, "status", "expected a status such as \"ok\" or \"error\"");
    get_json(d, o, "result", OPTIONAL, true, &m->result_json);
    get_error(d, o, "error", OPTIONAL, &m->error, &m->has_error);
    if (get_number(d, o, "exit_code", REQUIRED, INT32_MIN, INT32_MAX, &v))
        m->exit_code = (int32_t)v;
    get_u53(d, o, "duration_ms", REQUIRED, &m->duration_ms);
    get_bool(d, o, "output_truncated", &m->output_truncated);
    if (member(d, o, "kept", OPTIONAL))
        get_bool(d, o, "kept", &m->kept);
    get_clock_log(d, o, &m->clock_log, &m->n_clock_log);
    if (member(d, o, "replayable", OPTIONAL)) {
        get_bool(d, o, "replayable", &m->replayable);
        m->has_replayable = true;
    }
    get_text(d, o, "not_replayable", OPTIONAL, SBX_REASON_MAX, &m->not_replayable);
}

static void decode_error_msg(Dec *d, const cJSON *o, SbxErrorMsg *m)
{
    const char *code = get_borrowed(d, o, "code", REQUIRED, "an error code");

    if (code && sbx_error_code_from_name(code, &m->code) < 0)
        fail(d, "code", "expected an error code such as \"protocol_error\"");
    get_text(d, o, "message", REQUIRED, SBX_ERROR_TEXT_MAX, &m->message);
}

static void get_path(Dec *d, const cJSON *o, const char *key, Presence p, char **out)
{
    const char *s = get_borrowed(d, o, key, p, "a workspace path");

    if (s && !sbx_workspace_path_valid(s))
        fail(d, key, "expected a workspace path (relative, 1..%d bytes, no \".\" or \"..\")",
             SBX_PATH_MAX);
    else if (s)
        *out = check_alloc(d, strdup(s));
}

/* The bytes of a data frame that follows: data_len 1..SBX_FILE_CHUNK_MAX, absent is none. */
static void get_data_len(Dec *d, const cJSON *o, size_t *len)
{
    int64_t v;

    if (get_number(d, o, "data_len", OPTIONAL, 1, SBX_FILE_CHUNK_MAX, &v))
        *len = (size_t)v;
}

static void decode_file(Dec *d, const cJSON *o, SbxFile *m)
{
    const char *op;

    get_u32(d, o, "seq", REQUIRED, 0, &m->seq);
    op = get_borrowed(d, o, "op", REQUIRED, "a file operation");
    if (op && sbx_file_op_from_name(op, &m->op) < 0)
        fail(d, "op", "expected \"write\", \"read\", \"list\" or \"delete\"");
    if (d->err)
        return;
    get_path(d, o, "path", m->op == SBX_FILE_LIST ? OPTIONAL : REQUIRED, &m->path);
    switch (m->op) {
    case SBX_FILE_WRITE:
        get_u53(d, o, "offset", REQUIRED, &m->offset);
        get_data_len(d, o, &m->len);
        get_bool(d, o, "last", &m->last);
        break;
    case SBX_FILE_READ:
        get_u53(d, o, "offset", REQUIRED, &m->offset);
        get_u32(d, o, "length", REQUIRED, 1, &m->length);
        if (!d->err && m->length > SBX_FILE_CHUNK_MAX)
            fail(d, "length", "expected an integer 1..%d", SBX_FILE_CHUNK_MAX);
        break;
    default:
        break;
    }
}

static void decode_entry(Dec *d, const cJSON *o, SbxFileEntry *e)
{
    const char *type;

    get_path(d, o, "path", REQUIRED, &e->path);
    type = get_borrowed(d, o, "type", REQUIRED, "a file type");
    if (type && sbx_file_type_from_name(type, &e->type) < 0)
        fail(d, "type", "expected \"file\", \"dir\", \"symlink\" or \"other\"");
    get_u53(d, o, "size", REQUIRED, &e->size);
    get_u53(d, o, "mtime_us", REQUIRED, &e->mtime_us);
}

static void decode_entries(Dec *d, const cJSON *o, SbxFileResult *m)
{
    const cJSON *arr = member(d, o, "entries", OPTIONAL);
    const cJSON *c;
    const char *where = d->where;
    char path[64];
    size_t n;

    if (!arr)
        return;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > SBX_FILE_LIST_MAX) {
        fail(d, "entries", "expected an array of at most %d entries", SBX_FILE_LIST_MAX);
        return;
    }
    n = (size_t)cJSON_GetArraySize(arr);
    /* present, even empty, is non-NULL: a re-encode writes it again */
    m->entries = check_alloc(d, calloc(n ? n : 1, sizeof(*m->entries)));
    if (!m->entries)
        return;
    m->n_entries = n;
    n = 0;
    cJSON_ArrayForEach(c, arr)
    {
        if (!cJSON_IsObject(c)) {
            fail(d, "entries", "expected an array of {path, type, size, mtime_us}");
            return;
        }
        snprintf(path, sizeof(path), "%s.entries[%zu]", where, n);
        d->where = path;
        decode_entry(d, c, &m->entries[n++]);
        d->where = where;
    }
}

static void decode_file_result(Dec *d, const cJSON *o, SbxFileResult *m)
{
    get_u32(d, o, "seq", REQUIRED, 0, &m->seq);
    get_bool(d, o, "ok", &m->ok);
    if (d->err)
        return;
    if (!m->ok) {
        get_error(d, o, "error", REQUIRED, &m->error, NULL);
        return;
    }
    get_u53(d, o, "size", OPTIONAL, &m->size);
    get_data_len(d, o, &m->len);
    decode_entries(d, o, m);
    if (member(d, o, "truncated", OPTIONAL))
        get_bool(d, o, "truncated", &m->truncated);
}

static void decode_body(Dec *d, const cJSON *o, SbxMsg *m)
{
    switch (m->type) {
    case SBX_MSG_HELLO:
        return decode_hello(d, o, &m->hello);
    case SBX_MSG_HELLO_OK:
        return decode_hello_ok(d, o, &m->hello_ok);
    case SBX_MSG_EXECUTE:
        return decode_execute(d, o, &m->execute);
    case SBX_MSG_STARTED:
        return get_id(d, o, "id", &m->started.id);
    case SBX_MSG_OUTPUT:
        return decode_output(d, o, &m->output);
    case SBX_MSG_TOOL_CALL:
        return decode_tool_call(d, o, &m->tool_call);
    case SBX_MSG_TOOL_RESULT:
        return decode_tool_result(d, o, &m->tool_result);
    case SBX_MSG_CANCEL:
        return get_id(d, o, "id", &m->cancel.id);
    case SBX_MSG_DONE:
        return decode_done(d, o, &m->done);
    case SBX_MSG_PING:
    case SBX_MSG_PONG:
        return get_u32(d, o, "seq", REQUIRED, 0, &m->ping.seq);
    case SBX_MSG_ERROR:
        return decode_error_msg(d, o, &m->error);
    case SBX_MSG_FILE:
        return decode_file(d, o, &m->file);
    case SBX_MSG_FILE_RESULT:
        return decode_file_result(d, o, &m->file_result);
    case SBX_MSG_REPLAY_LOG:
        return decode_replay_log(d, o, &m->replay_log);
    default:
        return;
    }
}

/* Parse @json into a tree whose every byte, number and name has been checked. */
static cJSON *parse(Dec *d, const char *json, size_t len)
{
    char *why = NULL;
    cJSON *root;

    if (len == 0 || len > SBX_FRAME_MAX) {
        d->err = -EBADMSG;
        d->error = sbx_strdup_printf("message: length %zu not in 1..%u", len, SBX_FRAME_MAX);
        return NULL;
    }
    root = sbx_json_parse(json, len, SBX_JSON_DEPTH_MAX, &why);
    if (!root) {
        d->err = why ? -EBADMSG : -ENOMEM;
        d->error = why ? sbx_strdup_printf("message: %s", why) : NULL;
        free(why);
    }
    return root;
}

static void decode_root(Dec *d, const cJSON *root, SbxMsg *out)
{
    const char *type;

    if (!cJSON_IsObject(root)) {
        d->err = -EBADMSG;
        d->error = sbx_strdup_printf("message: expected a JSON object");
        return;
    }
    d->where = "message";
    type = get_borrowed(d, root, "type", REQUIRED, "a message type");
    if (type && sbx_msg_type_from_name(type, &out->type) < 0)
        fail(d, "type", "unknown message type");
    if (d->err)
        return;
    d->where = sbx_msg_type_name(out->type);
    decode_body(d, root, out);
}

int sbx_msg_decode(const char *json, size_t len, SbxMsg *out, char **ret_error)
{
    Dec d = {.where = "message", .text = json, .len = len};
    cJSON *root;

    memset(out, 0, sizeof(*out));
    if (ret_error)
        *ret_error = NULL;
    root = parse(&d, json, len);
    d.root = root;
    if (root)
        decode_root(&d, root, out);
    cJSON_Delete(root);
    if (!d.err)
        return 0;
    sbx_msg_clear(out);
    if (ret_error && d.err == -EBADMSG)
        *ret_error = d.error;
    else
        free(d.error);
    return d.err;
}
