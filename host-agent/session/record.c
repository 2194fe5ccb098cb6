/*
 * Tool call record and SbxError helpers (see record.h).
 */
#include "record.h"

#include <string.h>

/* Cut @s to at most @max bytes without splitting a UTF-8 sequence; always valid UTF-8. */
static char *utf8_cut(const char *s, gsize max)
{
    if (s == NULL) {
        return NULL;
    }
    gsize len = strlen(s);
    if (len > max) {
        len = max;
        while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80) {
            len--;
        }
    }
    return g_utf8_make_valid(s, len);
}

void sbx_error_clear(SbxError *error)
{
    g_free(error->type);
    g_free(error->message);
    g_free(error->stack);
    memset(error, 0, sizeof(*error));
}

void sbx_error_copy(SbxError *dst, const SbxError *src)
{
    dst->code = src->code;
    dst->type = utf8_cut(src->type, SBX_NAME_MAX);
    dst->message = utf8_cut(src->message != NULL ? src->message : "", SBX_ERROR_TEXT_MAX);
    dst->stack = utf8_cut(src->stack, SBX_ERROR_TEXT_MAX);
}

void sbx_tool_record_free(SbxToolRecord *record)
{
    if (record == NULL) {
        return;
    }
    g_free(record->provider);
    g_free(record->tool);
    g_free(record->input_json);
    g_free(record->result_json);
    g_free(record->policy_json);
    sbx_error_clear(&record->error);
    g_free(record);
}

SbxToolRecord *sbx_record_add(SbxRunResult *result, gsize *bytes, guint32 call_id,
                              const char *provider, const char *tool, const char *input_json)
{
    gsize need = strlen(provider) + strlen(tool) + strlen(input_json);

    if (result->tool_calls->len >= SBX_SESSION_RECORD_CALLS_MAX ||
        need > SBX_SESSION_RECORD_BYTES_MAX - *bytes) {
        result->tool_calls_dropped++;
        return NULL;
    }
    SbxToolRecord *rec = g_new0(SbxToolRecord, 1);
    rec->call_id = call_id;
    rec->provider = g_strdup(provider);
    rec->tool = g_strdup(tool);
    rec->input_json = g_strdup(input_json);
    *bytes += need;
    g_ptr_array_add(result->tool_calls, rec);
    return rec;
}

void sbx_record_answer(gsize *bytes, SbxToolRecord *rec, const char *result_json,
                       const SbxError *error, guint64 duration_ms)
{
    if (rec == NULL) {
        return;
    }
    rec->answered = TRUE;
    rec->duration_ms = duration_ms;
    rec->ok = error == NULL;
    if (error != NULL) {
        sbx_error_copy(&rec->error, error);
        *bytes += strlen(rec->error.message);
        return;
    }
    gsize need = strlen(result_json);
    if (need > SBX_SESSION_RECORD_BYTES_MAX - *bytes) {
        rec->result_dropped = TRUE;
        return;
    }
    rec->result_json = g_strdup(result_json);
    *bytes += need;
}

void sbx_run_result_clear(SbxRunResult *result)
{
    g_free(result->result_json);
    g_free(result->clock_log);
    g_free(result->event_log);
    g_free(result->not_replayable);
    sbx_error_clear(&result->error);
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        if (result->collected[i] != NULL) {
            g_byte_array_unref(result->collected[i]);
        }
    }
    if (result->tool_calls != NULL) {
        g_ptr_array_unref(result->tool_calls);
    }
    memset(result, 0, sizeof(*result));
}
