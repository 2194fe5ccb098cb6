/*
 * Encoder: a typed SbxMsg -> one frame. It applies the decoder's rules, so that what one agent
 * sends, the other accepts; a message that breaks them is the caller's bug (-EINVAL).
 *
 * Like the decoder, the helpers share a sticky error and do nothing after the first failure.
 */
#include "message.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "cJSON.h"
#include "frame.h"
#include "json-check.h"
#include "json.h"

typedef struct {
    int err; /* 0, -EINVAL or -ENOMEM */
} Enc;

typedef enum { REQUIRED, OPTIONAL } Presence;

static void invalid(Enc *e)
{
    if (!e->err)
        e->err = -EINVAL;
}

/* Add @item (which may be NULL: out of memory) to @o under @key; @item is consumed. */
static void add(Enc *e, cJSON *o, const char *key, cJSON *item)
{
    if (!item && !e->err)
        e->err = -ENOMEM;
    if (e->err || !cJSON_AddItemToObject(o, key, item)) {
        if (!e->err)
            e->err = -ENOMEM;
        cJSON_Delete(item);
    }
}

/* Append @item (consumed; NULL means out of memory) to the array @arr. */
static void add_to_array(Enc *e, cJSON *arr, cJSON *item)
{
    if (!e->err && item && cJSON_AddItemToArray(arr, item))
        return;
    if (!e->err)
        e->err = -ENOMEM;
    cJSON_Delete(item);
}

/* Common checks of a string field; returns false when there is nothing (more) to add. */
static bool string_ok(Enc *e, const char *s, Presence p)
{
    if (e->err)
        return false;
    if (!s && p == REQUIRED)
        invalid(e);
    return s != NULL && !e->err;
}

static void put_string(Enc *e, cJSON *o, const char *key, const char *s, Presence p, size_t max)
{
    if (!string_ok(e, s, p))
        return;
    if (strlen(s) > max)
        invalid(e);
    else
        add(e, o, key, cJSON_CreateString(s));
}

/* Required strings that must not be empty (tokens, the agent name). */
static void put_nonempty(Enc *e, cJSON *o, const char *key, const char *s, size_t max)
{
    if (s && !s[0])
        invalid(e);
    put_string(e, o, key, s, REQUIRED, max);
}

/* Text shown to people is cut at @max bytes (on a character boundary), as the decoder does. */
static void put_text(Enc *e, cJSON *o, const char *key, const char *s, Presence p, size_t max)
{
    char *cut;

    if (!string_ok(e, s, p))
        return;
    cut = strndup(s, sbx_utf8_truncated_len(s, max));
    add(e, o, key, cut ? cJSON_CreateString(cut) : NULL);
    free(cut);
}

static void put_id(Enc *e, cJSON *o, const char *key, const char *s)
{
    if (!sbx_id_valid(s))
        invalid(e);
    put_string(e, o, key, s, REQUIRED, SBX_ID_MAX);
}

static void put_ident(Enc *e, cJSON *o, const char *key, const char *s, Presence p)
{
    if (s && !sbx_identifier_valid(s))
        invalid(e);
    put_string(e, o, key, s, p, SBX_NAME_MAX);
}

/* Integers are written by us, not by cJSON, which prints 1.8e15 as "1.8e+15". */
static void put_int(Enc *e, cJSON *o, const char *key, int64_t v)
{
    char buf[32];

    if (e->err)
        return;
    snprintf(buf, sizeof(buf), "%" PRId64, v);
    add(e, o, key, cJSON_CreateRaw(buf));
}

static void put_uint(Enc *e, cJSON *o, const char *key, uint64_t v, uint64_t min, uint64_t max)
{
    if (v < min || v > max)
        invalid(e);
    put_int(e, o, key, (int64_t)v);
}

static void put_bool(Enc *e, cJSON *o, const char *key, bool v)
{
    if (!e->err)
        add(e, o, key, cJSON_CreateBool(v));
}

/* @name is the wire name of an enum value, NULL when the value is out of range. */
static void put_enum(Enc *e, cJSON *o, const char *key, const char *name)
{
    if (!name)
        invalid(e);
    else if (!e->err)
        add(e, o, key, cJSON_CreateString(name));
}

static void put_base64(Enc *e, cJSON *o, const char *key, const uint8_t *data, size_t len,
                       size_t min, size_t max)
{
    char *text = NULL;

    if (e->err)
        return;
    if (!data || len < min || len > max) {
        invalid(e);
        return;
    }
    if (sbx_base64_encode(data, len, &text) < 0)
        e->err = -ENOMEM;
    else
        add(e, o, key, cJSON_CreateString(text));
    free(text);
}

/*
 * Embed the JSON text @json as it is, less the whitespace between tokens (never re-printed: a
 * number keeps its literal). It is checked like a received message, one level shallower since
 * it sits inside the message object.
 */
static void put_json(Enc *e, cJSON *o, const char *key, const char *json, Presence p,
                     bool array_only)
{
    cJSON *v;
    char *text;

    if (!string_ok(e, json, p))
        return;
    v = sbx_json_parse(json, strlen(json), SBX_JSON_DEPTH_MAX - 1, NULL);
    if (!v || (array_only && !cJSON_IsArray(v))) {
        invalid(e);
        cJSON_Delete(v);
        return;
    }
    cJSON_Delete(v);
    text = sbx_json_minify(json, strlen(json));
    add(e, o, key, text ? cJSON_CreateRaw(text) : NULL);
    free(text);
}

/* A log (NULL: absent) as @key: at most @max integers 0..2^53-1. */
static void put_log(Enc *e, cJSON *o, const char *key, const uint64_t *log, size_t n, size_t max)
{
    cJSON *arr;

    if (e->err || !log)
        return;
    if (n > max) {
        invalid(e);
        return;
    }
    arr = cJSON_CreateArray();
    for (size_t i = 0; i < n && !e->err; i++) {
        char buf[32];

        if (log[i] > SBX_JSON_INT_MAX) {
            invalid(e);
            break;
        }
        snprintf(buf, sizeof(buf), "%" PRIu64, log[i]);
        add_to_array(e, arr, cJSON_CreateRaw(buf));
    }
    add(e, o, key, arr);
}

/* A clock log (NULL: absent): at most SBX_CLOCK_READS_MAX integers 0..2^53-1. */
static void put_clock_log(Enc *e, cJSON *o, const uint64_t *log, size_t n)
{
    put_log(e, o, "clock_log", log, n, SBX_CLOCK_READS_MAX);
}

static void put_error(Enc *e, cJSON *o, const char *key, const SbxError *err)
{
    cJSON *eo = cJSON_CreateObject();

    put_enum(e, eo, "code", sbx_error_code_name(err->code));
    put_text(e, eo, "type", err->type, OPTIONAL, SBX_NAME_MAX);
    put_text(e, eo, "message", err->message, REQUIRED, SBX_ERROR_TEXT_MAX);
    put_text(e, eo, "stack", err->stack, OPTIONAL, SBX_ERROR_TEXT_MAX);
    add(e, o, key, eo);
}

static void encode_hello(Enc *e, cJSON *o, const SbxHello *m)
{
    put_uint(e, o, "version", m->version, 0, UINT32_MAX);
    put_nonempty(e, o, "token", m->token, SBX_TOKEN_MAX);
    put_base64(e, o, "entropy", m->entropy, m->entropy_len, SBX_ENTROPY_MIN, SBX_ENTROPY_MAX);
    if (m->time_us < 0)
        invalid(e);
    put_uint(e, o, "time_us", (uint64_t)m->time_us, 0, SBX_JSON_INT_MAX);
    if (m->warm_up)
        put_bool(e, o, "warm_up", true);
    if (m->warm_wait_ms)
        put_uint(e, o, "warm_wait_ms", m->warm_wait_ms, 1, SBX_WARM_WAIT_MAX_MS);
}

static void encode_hello_ok(Enc *e, cJSON *o, const SbxHelloOk *m)
{
    cJSON *arr = cJSON_CreateArray();
    size_t n = 0;

    put_uint(e, o, "version", m->version, 0, UINT32_MAX);
    put_nonempty(e, o, "token", m->token, SBX_TOKEN_MAX);
    put_nonempty(e, o, "agent", m->agent, SBX_NAME_MAX);
    for (; m->languages && m->languages[n] && !e->err; n++) {
        if (n >= SBX_LANGUAGES_MAX || !sbx_identifier_valid(m->languages[n]))
            invalid(e);
        else
            add_to_array(e, arr, cJSON_CreateString(m->languages[n]));
    }
    add(e, o, "languages", arr);
}

static void encode_tools(Enc *e, cJSON *o, const SbxExecute *m)
{
    cJSON *arr = cJSON_CreateArray();

    if (m->n_tools > SBX_TOOLS_MAX || (m->n_tools && !m->tools))
        invalid(e);
    for (size_t i = 0; i < m->n_tools && !e->err; i++) {
        const SbxToolDecl *t = &m->tools[i];
        cJSON *to = cJSON_CreateObject();

        put_ident(e, to, "provider", t->provider, REQUIRED);
        put_ident(e, to, "name", t->name, REQUIRED);
        put_string(e, to, "description", t->description, OPTIONAL, SBX_FRAME_MAX);
        add_to_array(e, arr, to);
    }
    add(e, o, "tools", arr);
}

static void encode_execute(Enc *e, cJSON *o, const SbxExecute *m)
{
    put_id(e, o, "id", m->id);
    put_enum(e, o, "language", sbx_language_name(m->language));
    put_string(e, o, "code", m->code, REQUIRED, SBX_FRAME_MAX);
    put_ident(e, o, "entry", m->entry, OPTIONAL);
    put_json(e, o, "args", m->args_json, OPTIONAL, true);
    put_json(e, o, "kwargs", m->kwargs_json, OPTIONAL, false);
    if (m->kwargs_json && m->kwargs_json[strspn(m->kwargs_json, " \t\r\n")] != '{')
        invalid(e);
    if (m->keep)
        put_bool(e, o, "keep", true);
    encode_tools(e, o, m);
    if (m->output_limit)
        put_uint(e, o, "output_limit", m->output_limit, 0, SBX_JSON_INT_MAX);
    if (m->timeout_ms)
        put_uint(e, o, "timeout_ms", m->timeout_ms, 0, UINT32_MAX);
    if (m->time_us < 0)
        invalid(e);
    else if (m->time_us)
        put_uint(e, o, "time_us", (uint64_t)m->time_us, 1, SBX_JSON_INT_MAX);
    if (m->entropy)
        put_base64(e, o, "entropy", m->entropy, m->entropy_len, SBX_ENTROPY_MIN, SBX_ENTROPY_MAX);
    if (m->seed)
        put_base64(e, o, "seed", m->seed, SBX_SEED_BYTES, SBX_SEED_BYTES, SBX_SEED_BYTES);
    put_clock_log(e, o, m->clock_log, m->n_clock_log);
    put_log(e, o, "event_log", m->event_log, m->n_event_log, SBX_EVENT_LOG_MAX);
    if (m->log_open)
        put_bool(e, o, "log_open", true);
}

static void encode_replay_log(Enc *e, cJSON *o, const SbxReplayLog *m)
{
    put_id(e, o, "id", m->id);
    put_log(e, o, "clock", m->clock, m->n_clock, SBX_REPLAY_LOG_BATCH_MAX);
    put_log(e, o, "events", m->events, m->n_events, SBX_REPLAY_LOG_BATCH_MAX);
    put_text(e, o, "not_replayable", m->not_replayable, OPTIONAL, SBX_REASON_MAX);
}

static void encode_output(Enc *e, cJSON *o, const SbxOutput *m)
{
    put_id(e, o, "id", m->id);
    put_enum(e, o, "stream", sbx_stream_name(m->stream));
    put_base64(e, o, "data", m->data, m->len, 1, SBX_OUTPUT_CHUNK_MAX);
}

static void encode_tool_call(Enc *e, cJSON *o, const SbxToolCall *m)
{
    put_id(e, o, "id", m->id);
    put_uint(e, o, "call_id", m->call_id, 1, UINT32_MAX);
    put_ident(e, o, "provider", m->provider, REQUIRED);
    put_ident(e, o, "tool", m->tool, REQUIRED);
    put_json(e, o, "input", m->input_json, REQUIRED, false);
    put_log(e, o, "clock", m->clock, m->n_clock, SBX_REPLAY_LOG_BATCH_MAX);
    put_log(e, o, "events", m->events, m->n_events, SBX_REPLAY_LOG_BATCH_MAX);
    put_text(e, o, "not_replayable", m->not_replayable, OPTIONAL, SBX_REASON_MAX);
}

static void encode_tool_result(Enc *e, cJSON *o, const SbxToolResult *m)
{
    put_id(e, o, "id", m->id);
    put_uint(e, o, "call_id", m->call_id, 1, UINT32_MAX);
    put_bool(e, o, "ok", m->ok);
    if (m->ok)
        put_json(e, o, "result", m->result_json, REQUIRED, false);
    else
        put_error(e, o, "error", &m->error);
}

static void encode_done(Enc *e, cJSON *o, const SbxDone *m)
{
    put_id(e, o, "id", m->id);
    put_enum(e, o, "status", sbx_status_name(m->status));
    put_json(e, o, "result", m->result_json, OPTIONAL, false);
    if (m->has_error)
        put_error(e, o, "error", &m->error);
    put_int(e, o, "exit_code", m->exit_code);
    put_uint(e, o, "duration_ms", m->duration_ms, 0, SBX_JSON_INT_MAX);
    put_bool(e, o, "output_truncated", m->output_truncated);
    if (m->kept)
        put_bool(e, o, "kept", true);
    put_clock_log(e, o, m->clock_log, m->n_clock_log);
    if (m->has_replayable)
        put_bool(e, o, "replayable", m->replayable);
    put_text(e, o, "not_replayable", m->not_replayable, OPTIONAL, SBX_REASON_MAX);
}

static void put_path(Enc *e, cJSON *o, const char *key, const char *path, Presence p)
{
    if (path && !sbx_workspace_path_valid(path))
        invalid(e);
    put_string(e, o, key, path, p, SBX_PATH_MAX);
}

/* The bytes of the data frame that follows (the caller sends it); none: no member. */
static void put_data_len(Enc *e, cJSON *o, size_t len)
{
    if (len)
        put_uint(e, o, "data_len", len, 1, SBX_FILE_CHUNK_MAX);
}

static void encode_file(Enc *e, cJSON *o, const SbxFile *m)
{
    put_uint(e, o, "seq", m->seq, 0, UINT32_MAX);
    put_enum(e, o, "op", sbx_file_op_name(m->op));
    put_path(e, o, "path", m->path, m->op == SBX_FILE_LIST ? OPTIONAL : REQUIRED);
    switch (m->op) {
    case SBX_FILE_WRITE:
        put_uint(e, o, "offset", m->offset, 0, SBX_JSON_INT_MAX);
        put_data_len(e, o, m->len);
        put_bool(e, o, "last", m->last);
        break;
    case SBX_FILE_READ:
        put_uint(e, o, "offset", m->offset, 0, SBX_JSON_INT_MAX);
        put_uint(e, o, "length", m->length, 1, SBX_FILE_CHUNK_MAX);
        break;
    default:
        break;
    }
}

static void encode_file_result(Enc *e, cJSON *o, const SbxFileResult *m)
{
    cJSON *arr;

    put_uint(e, o, "seq", m->seq, 0, UINT32_MAX);
    put_bool(e, o, "ok", m->ok);
    if (!m->ok) {
        put_error(e, o, "error", &m->error);
        return;
    }
    if (m->size)
        put_uint(e, o, "size", m->size, 0, SBX_JSON_INT_MAX);
    put_data_len(e, o, m->len);
    if (!m->entries) {
        if (m->n_entries)
            invalid(e);
        goto truncated;
    }
    if (m->n_entries > SBX_FILE_LIST_MAX) {
        invalid(e);
        return;
    }
    arr = cJSON_CreateArray();
    for (size_t i = 0; i < m->n_entries && !e->err; i++) {
        const SbxFileEntry *en = &m->entries[i];
        cJSON *eo = cJSON_CreateObject();

        put_path(e, eo, "path", en->path, REQUIRED);
        put_enum(e, eo, "type", sbx_file_type_name(en->type));
        put_uint(e, eo, "size", en->size, 0, SBX_JSON_INT_MAX);
        put_uint(e, eo, "mtime_us", en->mtime_us, 0, SBX_JSON_INT_MAX);
        add_to_array(e, arr, eo);
    }
    add(e, o, "entries", arr);
truncated:
    if (m->truncated)
        put_bool(e, o, "truncated", true);
}

static void encode_body(Enc *e, cJSON *o, const SbxMsg *m)
{
    switch (m->type) {
    case SBX_MSG_HELLO:
        return encode_hello(e, o, &m->hello);
    case SBX_MSG_HELLO_OK:
        return encode_hello_ok(e, o, &m->hello_ok);
    case SBX_MSG_EXECUTE:
        return encode_execute(e, o, &m->execute);
    case SBX_MSG_STARTED:
        return put_id(e, o, "id", m->started.id);
    case SBX_MSG_OUTPUT:
        return encode_output(e, o, &m->output);
    case SBX_MSG_TOOL_CALL:
        return encode_tool_call(e, o, &m->tool_call);
    case SBX_MSG_TOOL_RESULT:
        return encode_tool_result(e, o, &m->tool_result);
    case SBX_MSG_CANCEL:
        return put_id(e, o, "id", m->cancel.id);
    case SBX_MSG_DONE:
        return encode_done(e, o, &m->done);
    case SBX_MSG_PING:
    case SBX_MSG_PONG:
        return put_uint(e, o, "seq", m->ping.seq, 0, UINT32_MAX);
    case SBX_MSG_ERROR:
        put_enum(e, o, "code", sbx_error_code_name(m->error.code));
        return put_text(e, o, "message", m->error.message, REQUIRED, SBX_ERROR_TEXT_MAX);
    case SBX_MSG_FILE:
        return encode_file(e, o, &m->file);
    case SBX_MSG_FILE_RESULT:
        return encode_file_result(e, o, &m->file_result);
    case SBX_MSG_REPLAY_LOG:
        return encode_replay_log(e, o, &m->replay_log);
    default:
        return invalid(e);
    }
}

/*
 * The printed message is scanned like a received one: this catches strings that are not
 * UTF-8, which cJSON would print as they are and the peer would refuse.
 */
static int finish(char *json, uint8_t **ret_frame, size_t *ret_len)
{
    size_t len = strlen(json);

    if (len > SBX_FRAME_MAX)
        return -EMSGSIZE;
    if (!sbx_json_prescan(json, len, SBX_JSON_DEPTH_MAX, NULL))
        return -EINVAL;
    return sbx_frame_encode(json, len, ret_frame, ret_len);
}

int sbx_msg_encode(const SbxMsg *msg, uint8_t **ret_frame, size_t *ret_len)
{
    Enc e = {0};
    cJSON *o = cJSON_CreateObject();
    char *json = NULL;
    int r;

    put_enum(&e, o, "type", sbx_msg_type_name(msg->type));
    encode_body(&e, o, msg);
    if (!e.err && !(json = sbx_json_print(o)))
        e.err = -ENOMEM;
    cJSON_Delete(o);
    if (e.err)
        return e.err;
    r = finish(json, ret_frame, ret_len);
    free(json);
    return r;
}
