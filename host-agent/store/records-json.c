/*
 * Records as JSON (records.h), for `sandbox records list|show --json` and the API: built as
 * text, because output is bytes that may hold NUL and invalid UTF-8, and the JSON fields are
 * stored as the valid JSON text they were checked to be, copied as is.
 */
#include "records.h"

#include <string.h>

#include "store-private.h"

/* A JSON text or null. */
static void append_raw(GString *out, const char *key, const char *json)
{
    g_string_append_printf(out, ",\"%s\":%s", key, json != NULL ? json : "null");
}

static void append_str(GString *out, const char *key, const char *s)
{
    g_string_append_printf(out, ",\"%s\":", key);
    sbx_store_json_str(out, s);
}

/* A time or duration in ms, null if 0 (not known). */
static void append_ms(GString *out, const char *key, gint64 v)
{
    if (v != 0) {
        g_string_append_printf(out, ",\"%s\":%" G_GINT64_FORMAT, key, v);
    } else {
        g_string_append_printf(out, ",\"%s\":null", key);
    }
}

static void append_record(GString *out, const SbxRecord *r)
{
    g_string_append(out, "{\"id\":");
    sbx_store_json_str(out, r->id);
    append_str(out, "tenant_id", r->tenant_id);
    append_str(out, "front_end", r->front_end);
    append_str(out, "language", r->language);
    append_str(out, "code", r->code);
    append_str(out, "code_sha256", r->code_sha256);
    append_str(out, "entry", r->entry);
    append_raw(out, "args", r->args_json);
    append_raw(out, "kwargs", r->kwargs_json);
    append_str(out, "profile", r->profile);
    append_str(out, "snapshot_key", r->snapshot_key);
    append_str(out, "image_id", r->image_id);
    append_str(out, "catalog", r->catalog);
    append_str(out, "session_id", r->session_id);
    g_string_append_printf(
        out, ",\"timeout_ms\":%" G_GINT64_FORMAT ",\"output_limit\":%" G_GINT64_FORMAT,
        r->timeout_ms, r->output_limit);
    append_str(out, "status", r->status);
    if (r->has_exit_code) {
        g_string_append_printf(out, ",\"exit_code\":%d", r->exit_code);
    } else {
        g_string_append(out, ",\"exit_code\":null");
    }
    append_raw(out, "result", r->result_json);
    append_raw(out, "error", r->error_json);
    append_raw(out, "files", r->files_json);
    g_string_append(out, ",\"stdout\":");
    sbx_store_json_string(out, r->stdout_data, r->stdout_len);
    g_string_append(out, ",\"stderr\":");
    sbx_store_json_string(out, r->stderr_data, r->stderr_len);
    g_string_append_printf(out, ",\"stdout_truncated\":%s,\"stderr_truncated\":%s",
                           r->stdout_truncated ? "true" : "false",
                           r->stderr_truncated ? "true" : "false");
    append_ms(out, "created_at", r->created_at_ms);
    append_ms(out, "started_at", r->started_at_ms);
    append_ms(out, "finished_at", r->finished_at_ms);
    append_ms(out, "boot_ms", r->boot_ms);
    append_ms(out, "duration_ms", r->duration_ms);
    append_str(out, "entropy", r->entropy_hex);
    append_ms(out, "guest_clock_ms", r->guest_clock_ms);
    append_str(out, "seed", r->seed_hex);
    append_raw(out, "clock_log", r->clock_log_json);
    if (r->has_replayable) {
        g_string_append_printf(out, ",\"replayable\":%s", r->replayable ? "true" : "false");
    } else {
        g_string_append(out, ",\"replayable\":null");
    }
    append_str(out, "not_replayable", r->not_replayable);
    append_raw(out, "event_log", r->event_log_json);
    if (r->has_log_open) {
        g_string_append_printf(out, ",\"log_open\":%s", r->log_open ? "true" : "false");
    } else {
        g_string_append(out, ",\"log_open\":null");
    }
    append_raw(out, "tools", r->tools_json);
}

static void append_call(GString *out, const SbxRecordCall *c)
{
    g_string_append_printf(out, "{\"seq\":%u,\"call_id\":%u", c->seq, c->call_id);
    append_str(out, "provider", c->provider);
    append_str(out, "tool", c->tool);
    append_raw(out, "input", c->input_json);
    g_string_append_printf(out, ",\"ok\":%s", c->ok ? "true" : "false");
    append_raw(out, "result", c->result_json);
    append_raw(out, "error", c->error_json);
    append_raw(out, "policy", c->policy_json);
    g_string_append_printf(out, ",\"duration_ms\":%" G_GINT64_FORMAT "}", c->duration_ms);
}

static void append_approval(GString *out, const SbxRecordApproval *a)
{
    g_string_append_printf(out, "{\"seq\":%u", a->seq);
    append_str(out, "id", a->approval_id);
    append_str(out, "provider", a->provider);
    append_str(out, "tool", a->tool);
    append_str(out, "decision", a->decision);
    append_str(out, "answered_by", a->answered_by);
    append_ms(out, "asked_at", a->asked_at_ms);
    append_ms(out, "answered_at", a->answered_at_ms);
    g_string_append_c(out, '}');
}

char *sbx_record_to_json(const SbxRecord *rec)
{
    GString *out = g_string_new(NULL);

    append_record(out, rec);
    g_string_append_c(out, '}');
    return g_string_free(out, FALSE);
}

char *sbx_record_to_json_full(const SbxRecord *rec, const GPtrArray *calls,
                              const GPtrArray *approvals)
{
    GString *out = g_string_new(NULL);

    append_record(out, rec);
    g_string_append(out, ",\"tool_calls\":[");
    for (guint i = 0; calls != NULL && i < calls->len; i++) {
        g_string_append(out, i > 0 ? "," : "");
        append_call(out, g_ptr_array_index(calls, i));
    }
    g_string_append(out, "],\"approvals\":[");
    for (guint i = 0; approvals != NULL && i < approvals->len; i++) {
        g_string_append(out, i > 0 ? "," : "");
        append_approval(out, g_ptr_array_index(approvals, i));
    }
    g_string_append(out, "]}");
    return g_string_free(out, FALSE);
}
