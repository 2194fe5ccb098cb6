/*
 * The execution object of the HTTP API (docs/api.md, "The execution object") as JSON, from
 * either of its sources: an execution the front end holds (http-exec.c) or a record read back
 * from the store (an execution the server forgot, or one from before a restart). One writer,
 * so both look the same to a client.
 */
#include "server/http-object.h"

#include <string.h>

#include "base/json-builder.h"

static char *iso_time(gint64 us)
{
    g_autoptr(GDateTime) s = g_date_time_new_from_unix_utc(us / G_USEC_PER_SEC);
    g_autoptr(GDateTime) t = g_date_time_add(s, us % G_USEC_PER_SEC);

    return g_date_time_format_iso8601(t);
}

void sbx_http_member_time(SbxJsonb *b, const char *key, gint64 us)
{
    g_autofree char *text = us > 0 ? iso_time(us) : NULL;

    sbx_jsonb_member_string(b, key, text);
}

static void member_output(SbxJsonb *b, const char *key, const char *data, gsize len)
{
    sbx_jsonb_key(b, key);
    sbx_jsonb_string_len(b, data != NULL ? data : "", data != NULL ? len : 0);
}

char *sbx_http_object_json(const SbxHttpObject *o, gboolean full)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "id", o->id);
    sbx_jsonb_member_string(&b, "status", o->status);
    sbx_jsonb_member_string(&b, "language", o->language);
    sbx_http_member_time(&b, "created_at", o->created_us);
    sbx_http_member_time(&b, "started_at", o->started_us);
    sbx_http_member_time(&b, "finished_at", o->finished_us);
    sbx_jsonb_member_uint(&b, "timeout_ms", o->timeout_ms);
    sbx_jsonb_member_uint(&b, "output_limit", o->output_limit);
    sbx_jsonb_member_string(&b, "catalog", o->catalog);
    sbx_jsonb_member_string(&b, "session", o->session);
    sbx_jsonb_key(&b, "exit_code");
    if (o->ended && o->has_exit_code) {
        sbx_jsonb_int(&b, o->exit_code);
    } else {
        sbx_jsonb_null(&b);
    }
    sbx_jsonb_member_bool(&b, "output_truncated", o->ended && o->output_truncated);
    sbx_jsonb_key(&b, "duration_ms");
    if (o->ended && o->has_duration) {
        sbx_jsonb_uint(&b, o->duration_ms);
    } else {
        sbx_jsonb_null(&b);
    }
    if (full) {
        sbx_jsonb_member_raw(&b, "result", o->ended ? o->result_json : NULL);
        sbx_jsonb_member_raw(&b, "error", o->ended ? o->error_json : NULL);
        member_output(&b, "stdout", o->out[SBX_STREAM_STDOUT], o->out_len[SBX_STREAM_STDOUT]);
        member_output(&b, "stderr", o->out[SBX_STREAM_STDERR], o->out_len[SBX_STREAM_STDERR]);
        sbx_jsonb_member_raw(&b, "tool_calls",
                             o->tool_calls_json != NULL ? o->tool_calls_json : "[]");
        sbx_jsonb_member_raw(&b, "files", o->ended ? o->files_json : NULL);
    }
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

/* One tool call as the API shows it; @ok_json "true", "false" or "null" (never answered). */
static void call_json(SbxJsonb *b, guint32 call_id, const char *provider, const char *tool,
                      const char *input_json, const char *ok_json, const char *result_json,
                      const char *error_json, gboolean has_duration, guint64 duration_ms,
                      const char *policy_json)
{
    sbx_jsonb_begin_object(b);
    sbx_jsonb_member_uint(b, "call_id", call_id);
    sbx_jsonb_member_string(b, "provider", provider);
    sbx_jsonb_member_string(b, "tool", tool);
    sbx_jsonb_member_raw(b, "input", input_json);
    sbx_jsonb_member_raw(b, "ok", ok_json);
    sbx_jsonb_member_raw(b, "result", result_json);
    sbx_jsonb_member_raw(b, "error", error_json);
    sbx_jsonb_key(b, "duration_ms");
    if (has_duration) {
        sbx_jsonb_uint(b, duration_ms);
    } else {
        sbx_jsonb_null(b);
    }
    sbx_jsonb_member_raw(b, "policy", policy_json);
    sbx_jsonb_end_object(b);
}

char *sbx_http_object_calls_live(const SbxRunResult *r, const SbxNamespace *ns)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; r != NULL && r->tool_calls != NULL && i < r->tool_calls->len; i++) {
        const SbxToolRecord *t = g_ptr_array_index(r->tool_calls, i);
        const char *provider = t->provider, *tool = t->tool;
        g_autofree char *error = NULL;
        if (ns != NULL) {
            sbx_namespace_resolve(ns, t->provider, t->tool, &provider, &tool);
        }
        if (t->answered && !t->ok) {
            error = sbx_report_error_json(&t->error);
        }
        call_json(&b, t->call_id, provider, tool, t->input_json,
                  !t->answered ? "null"
                  : t->ok      ? "true"
                               : "false",
                  t->answered && t->ok ? t->result_json : NULL, error, t->answered, t->duration_ms,
                  t->policy_json);
    }
    sbx_jsonb_end_array(&b);
    return sbx_jsonb_finish(&b);
}

char *sbx_http_object_calls_stored(const GPtrArray *calls)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; calls != NULL && i < calls->len; i++) {
        const SbxRecordCall *c = g_ptr_array_index(calls, i);
        /* A record's call was answered or dropped at the end: dropped ones have neither. */
        gboolean answered = c->ok || c->error_json != NULL;
        call_json(&b, c->call_id, c->provider, c->tool, c->input_json,
                  !answered ? "null"
                  : c->ok   ? "true"
                            : "false",
                  c->result_json, c->error_json, answered, (guint64)MAX(c->duration_ms, 0),
                  c->policy_json);
    }
    sbx_jsonb_end_array(&b);
    return sbx_jsonb_finish(&b);
}

void sbx_http_object_from_record(SbxHttpObject *o, const SbxRecord *r, const char *calls_json)
{
    gboolean running = g_strcmp0(r->status, "running") == 0 || g_strcmp0(r->status, "queued") == 0;

    *o = (SbxHttpObject){
        .id = r->id,
        .status = r->status,
        .language = r->language,
        .catalog = r->catalog,
        .session = r->session_id,
        .created_us = r->created_at_ms * 1000,
        .started_us = r->started_at_ms * 1000,
        .finished_us = r->finished_at_ms * 1000,
        .timeout_ms = (guint64)MAX(r->timeout_ms, 0),
        .output_limit = (guint64)MAX(r->output_limit, 0),
        .ended = !running,
        .has_exit_code = r->has_exit_code,
        .exit_code = r->exit_code,
        .result_json = r->result_json,
        .error_json = r->error_json,
        .output_truncated = r->stdout_truncated || r->stderr_truncated,
        /* NULL in the record (read as 0): it never ran to a result (interrupted, failed). */
        .has_duration = r->has_exit_code || r->duration_ms > 0,
        .duration_ms = (guint64)MAX(r->duration_ms, 0),
        .out = {r->stdout_data, r->stderr_data},
        .out_len = {r->stdout_len, r->stderr_len},
        .tool_calls_json = calls_json,
        .files_json = r->files_json,
    };
}
