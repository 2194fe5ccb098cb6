/*
 * A record in its portable form (records.h, sbx_record_to_portable_json() and
 * sbx_record_from_json()): every field of SbxRecord, SbxRecordCall and SbxRecordApproval, so a
 * replay on another machine has all the original had. Unlike `records show --json` it loses
 * nothing: output travels as base64 (it is bytes: NUL and invalid UTF-8 survive), and JSON
 * fields travel as strings holding their text (so the document nests three levels whatever
 * they hold, under cJSON's nesting limit). One table of fields serves both directions.
 */
#include "records.h"

#include <cJSON.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/json-builder.h"
#include "protocol/json.h"
#include "protocol/limits.h"

typedef enum { F_STR, F_JSON, F_I64, F_INT, F_U32, F_BOOL, F_BYTES } Kind;

typedef struct {
    const char *name;
    Kind kind;
    size_t offset;
    size_t len_offset; /* F_BYTES: the gsize length beside the data */
} Field;

#define S(n, f)                                                                                    \
    {                                                                                              \
        n, F_STR, offsetof(SbxRecord, f), 0                                                        \
    }
#define J(n, f)                                                                                    \
    {                                                                                              \
        n, F_JSON, offsetof(SbxRecord, f), 0                                                       \
    }
#define I(n, f)                                                                                    \
    {                                                                                              \
        n, F_I64, offsetof(SbxRecord, f), 0                                                        \
    }
#define B(n, f)                                                                                    \
    {                                                                                              \
        n, F_BOOL, offsetof(SbxRecord, f), 0                                                       \
    }

static const Field record_fields[] = {
    S("id", id),
    S("tenant_id", tenant_id),
    S("front_end", front_end),
    S("language", language),
    S("code", code),
    S("code_sha256", code_sha256),
    S("entry", entry),
    J("args", args_json),
    J("kwargs", kwargs_json),
    S("profile", profile),
    S("snapshot_key", snapshot_key),
    S("image_id", image_id),
    S("catalog", catalog),
    S("session_id", session_id),
    I("timeout_ms", timeout_ms),
    I("output_limit", output_limit),
    S("status", status),
    B("has_exit_code", has_exit_code),
    {"exit_code", F_INT, offsetof(SbxRecord, exit_code), 0},
    J("result", result_json),
    J("error", error_json),
    {"stdout", F_BYTES, offsetof(SbxRecord, stdout_data), offsetof(SbxRecord, stdout_len)},
    B("stdout_truncated", stdout_truncated),
    {"stderr", F_BYTES, offsetof(SbxRecord, stderr_data), offsetof(SbxRecord, stderr_len)},
    B("stderr_truncated", stderr_truncated),
    I("created_at_ms", created_at_ms),
    I("started_at_ms", started_at_ms),
    I("finished_at_ms", finished_at_ms),
    I("boot_ms", boot_ms),
    I("duration_ms", duration_ms),
    S("entropy_hex", entropy_hex),
    I("guest_clock_ms", guest_clock_ms),
    J("files", files_json),
    S("seed_hex", seed_hex),
    J("clock_log", clock_log_json),
    B("has_replayable", has_replayable),
    B("replayable", replayable),
    S("not_replayable", not_replayable),
    J("tools", tools_json),
    J("event_log", event_log_json),
    B("has_log_open", has_log_open),
    B("log_open", log_open),
};

#undef S
#undef J
#undef I
#undef B
#define S(n, f)                                                                                    \
    {                                                                                              \
        n, F_STR, offsetof(SbxRecordCall, f), 0                                                    \
    }
#define J(n, f)                                                                                    \
    {                                                                                              \
        n, F_JSON, offsetof(SbxRecordCall, f), 0                                                   \
    }

static const Field call_fields[] = {
    {"seq", F_U32, offsetof(SbxRecordCall, seq), 0},
    {"call_id", F_U32, offsetof(SbxRecordCall, call_id), 0},
    S("provider", provider),
    S("tool", tool),
    J("input", input_json),
    {"ok", F_BOOL, offsetof(SbxRecordCall, ok), 0},
    J("result", result_json),
    J("error", error_json),
    J("policy", policy_json),
    {"duration_ms", F_I64, offsetof(SbxRecordCall, duration_ms), 0},
};

#undef S
#undef J
#define S(n, f)                                                                                    \
    {                                                                                              \
        n, F_STR, offsetof(SbxRecordApproval, f), 0                                                \
    }

static const Field approval_fields[] = {
    {"seq", F_U32, offsetof(SbxRecordApproval, seq), 0},
    S("approval_id", approval_id),
    S("provider", provider),
    S("tool", tool),
    S("decision", decision),
    S("answered_by", answered_by),
    {"asked_at_ms", F_I64, offsetof(SbxRecordApproval, asked_at_ms), 0},
    {"answered_at_ms", F_I64, offsetof(SbxRecordApproval, answered_at_ms), 0},
};

#undef S

#define AT(base, off, type) ((type *)((char *)(base) + (off)))

/* ---- writing ------------------------------------------------------------------------------ */

static void write_field(SbxJsonb *b, const Field *f, const void *obj)
{
    sbx_jsonb_key(b, f->name);
    switch (f->kind) {
    case F_STR:
    case F_JSON:
        sbx_jsonb_string(b, *AT(obj, f->offset, char *const));
        break;
    case F_I64:
        sbx_jsonb_int(b, *AT(obj, f->offset, const gint64));
        break;
    case F_INT:
        sbx_jsonb_int(b, *AT(obj, f->offset, const int));
        break;
    case F_U32:
        sbx_jsonb_uint(b, *AT(obj, f->offset, const guint32));
        break;
    case F_BOOL:
        sbx_jsonb_bool(b, *AT(obj, f->offset, const gboolean));
        break;
    case F_BYTES: {
        const char *data = *AT(obj, f->offset, char *const);
        g_autofree char *b64 =
            data != NULL ? g_base64_encode((const guchar *)data, *AT(obj, f->len_offset, gsize))
                         : NULL;
        sbx_jsonb_string(b, b64);
        break;
    }
    }
}

static void write_object(SbxJsonb *b, const Field *fields, gsize n, const void *obj)
{
    sbx_jsonb_begin_object(b);
    for (gsize i = 0; i < n; i++) {
        write_field(b, &fields[i], obj);
    }
    sbx_jsonb_end_object(b);
}

char *sbx_record_to_portable_json(const SbxRecord *rec, const GPtrArray *calls,
                                  const GPtrArray *approvals)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "format", SBX_RECORD_PORTABLE_FORMAT);
    sbx_jsonb_key(&b, "record");
    write_object(&b, record_fields, G_N_ELEMENTS(record_fields), rec);
    sbx_jsonb_key(&b, "tool_calls");
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; calls != NULL && i < calls->len; i++) {
        write_object(&b, call_fields, G_N_ELEMENTS(call_fields), g_ptr_array_index(calls, i));
    }
    sbx_jsonb_end_array(&b);
    sbx_jsonb_key(&b, "approvals");
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; approvals != NULL && i < approvals->len; i++) {
        write_object(&b, approval_fields, G_N_ELEMENTS(approval_fields),
                     g_ptr_array_index(approvals, i));
    }
    sbx_jsonb_end_array(&b);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

/* ---- reading ------------------------------------------------------------------------------ */

static gboolean bad(GError **error, const char *what, const char *name, const char *why)
{
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID, "portable record: %s %s: %s", what,
                name, why);
    return FALSE;
}

/* A string field: null, or text within SBX_RECORD_TEXT_MAX; an F_JSON one must hold JSON. */
static gboolean read_text(const cJSON *v, const Field *f, const char *what, char **out,
                          GError **error)
{
    if (cJSON_IsNull(v)) {
        return TRUE;
    }
    if (!cJSON_IsString(v)) {
        return bad(error, what, f->name, "not a string or null");
    }
    if (strlen(v->valuestring) > SBX_RECORD_TEXT_MAX) {
        return bad(error, what, f->name, "longer than the record's text limit");
    }
    if (f->kind == F_JSON) {
        char *why = NULL;
        char *norm =
            sbx_json_normalize(v->valuestring, strlen(v->valuestring), SBX_JSON_DEPTH_MAX, &why);
        gboolean ok = norm != NULL;

        free(why);
        free(norm);
        if (!ok) {
            return bad(error, what, f->name, "not JSON text");
        }
    }
    *out = g_strdup(v->valuestring);
    return TRUE;
}

/* Output bytes: null, or base64 of at most SBX_RECORD_OUTPUT_MAX bytes. */
static gboolean read_bytes(const cJSON *v, const Field *f, const char *what, void *obj,
                           GError **error)
{
    gsize len = 0;

    if (cJSON_IsNull(v)) {
        return TRUE;
    }
    /* base64 is 4 characters for 3 bytes: check before decoding anything. */
    if (!cJSON_IsString(v) || strlen(v->valuestring) > (SBX_RECORD_OUTPUT_MAX / 3 + 1) * 4) {
        return bad(error, what, f->name, "not base64 of at most the record's output limit");
    }
    guchar *data = g_base64_decode(v->valuestring, &len);
    if (len > SBX_RECORD_OUTPUT_MAX) {
        g_free(data);
        return bad(error, what, f->name, "more than the record's output limit");
    }
    /* NUL-terminated in memory, as the store gives it. */
    data = g_realloc(data, len + 1);
    data[len] = '\0';
    *AT(obj, f->offset, char *) = (char *)data;
    *AT(obj, f->len_offset, gsize) = len;
    return TRUE;
}

static gboolean read_int(const cJSON *v, const Field *f, const char *what, void *obj,
                         GError **error)
{
    int64_t n;

    if (!sbx_json_int64(v, &n)) {
        return bad(error, what, f->name, "not an integer");
    }
    if (f->kind == F_INT) {
        if (n < G_MININT || n > G_MAXINT) {
            return bad(error, what, f->name, "out of range");
        }
        *AT(obj, f->offset, int) = (int)n;
    } else if (f->kind == F_U32) {
        if (n < 0 || n > G_MAXUINT32) {
            return bad(error, what, f->name, "out of range");
        }
        *AT(obj, f->offset, guint32) = (guint32)n;
    } else {
        *AT(obj, f->offset, gint64) = n;
    }
    return TRUE;
}

/* Fill @obj from the object @o: every field of @fields must be there, nothing else. */
static gboolean read_object(const cJSON *o, const Field *fields, gsize n, const char *what,
                            void *obj, GError **error)
{
    if (!cJSON_IsObject(o) || (gsize)cJSON_GetArraySize(o) != n) {
        return bad(error, what, "", "not an object with exactly its fields");
    }
    for (gsize i = 0; i < n; i++) {
        const Field *f = &fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, f->name);
        gboolean ok = TRUE;

        if (v == NULL) {
            return bad(error, what, f->name, "missing");
        }
        switch (f->kind) {
        case F_STR:
        case F_JSON:
            ok = read_text(v, f, what, AT(obj, f->offset, char *), error);
            break;
        case F_I64:
        case F_INT:
        case F_U32:
            ok = read_int(v, f, what, obj, error);
            break;
        case F_BOOL:
            ok = cJSON_IsBool(v) || bad(error, what, f->name, "not a boolean");
            *AT(obj, f->offset, gboolean) = cJSON_IsTrue(v);
            break;
        case F_BYTES:
            ok = read_bytes(v, f, what, obj, error);
            break;
        }
        if (!ok) {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean read_list(const cJSON *arr, const char *what, gboolean calls, GPtrArray **ret,
                          GError **error)
{
    g_autoptr(GPtrArray) list = g_ptr_array_new_with_free_func(
        calls ? (GDestroyNotify)sbx_record_call_free : (GDestroyNotify)sbx_record_approval_free);
    const cJSON *o;

    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > SBX_RECORD_CALLS_MAX) {
        return bad(error, what, "", "not an array of at most the record's calls");
    }
    cJSON_ArrayForEach(o, arr)
    {
        void *item =
            calls ? (void *)g_new0(SbxRecordCall, 1) : (void *)g_new0(SbxRecordApproval, 1);

        g_ptr_array_add(list, item);
        if (calls ? !read_object(o, call_fields, G_N_ELEMENTS(call_fields), what, item, error)
                  : !read_object(o, approval_fields, G_N_ELEMENTS(approval_fields), what, item,
                                 error)) {
            return FALSE;
        }
    }
    *ret = g_steal_pointer(&list);
    return TRUE;
}

static gboolean from_tree(const cJSON *root, SbxRecord **ret_rec, GPtrArray **ret_calls,
                          GPtrArray **ret_approvals, GError **error)
{
    g_autoptr(SbxRecord) rec = g_new0(SbxRecord, 1);
    g_autoptr(GPtrArray) calls = NULL, approvals = NULL;
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");

    if (!cJSON_IsObject(root) || cJSON_GetArraySize(root) != 4 || !cJSON_IsString(format) ||
        strcmp(format->valuestring, SBX_RECORD_PORTABLE_FORMAT) != 0) {
        return bad(error, "document", "", "not of format " SBX_RECORD_PORTABLE_FORMAT);
    }
    if (!read_object(cJSON_GetObjectItemCaseSensitive(root, "record"), record_fields,
                     G_N_ELEMENTS(record_fields), "record", rec, error) ||
        !read_list(cJSON_GetObjectItemCaseSensitive(root, "tool_calls"), "tool call", TRUE, &calls,
                   error) ||
        !read_list(cJSON_GetObjectItemCaseSensitive(root, "approvals"), "approval", FALSE,
                   &approvals, error)) {
        return FALSE;
    }
    if (rec->id == NULL || strlen(rec->id) > SBX_RECORD_ID_MAX) {
        return bad(error, "record", "id", "missing or longer than an id");
    }
    *ret_rec = g_steal_pointer(&rec);
    *ret_calls = g_steal_pointer(&calls);
    *ret_approvals = g_steal_pointer(&approvals);
    return TRUE;
}

gboolean sbx_record_from_json(const char *text, gsize len, SbxRecord **ret_rec,
                              GPtrArray **ret_calls, GPtrArray **ret_approvals, GError **error)
{
    char *why = NULL;
    cJSON *root;
    gboolean ok;

    if (len > SBX_RECORD_PORTABLE_MAX) {
        return bad(error, "document", "", "larger than SBX_RECORD_PORTABLE_MAX");
    }
    /* The document nests 3 levels (object, array, call): far below the limit. */
    root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    if (root == NULL) {
        g_autofree char *reason = g_strdup(why != NULL ? why : "out of memory");

        free(why);
        return bad(error, "document", "", reason);
    }
    ok = from_tree(root, ret_rec, ret_calls, ret_approvals, error);
    cJSON_Delete(root);
    return ok;
}
