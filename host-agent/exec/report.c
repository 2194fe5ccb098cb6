/*
 * The JSON report of `sandbox run --json` (see report.h). Built by hand rather than with cJSON:
 * output bytes may hold NUL and invalid UTF-8, and JSON values from the guest are already
 * validated compact JSON that is copied as is.
 */
#include "exec/report.h"

#include <string.h>

static void append_str(GString *out, const char *s)
{
    if (s == NULL) {
        g_string_append(out, "null");
    } else {
        sbx_json_append_string(out, s, strlen(s));
    }
}

void sbx_report_append_error(GString *out, const SbxError *e)
{
    g_string_append(out, "{\"code\":");
    append_str(out, sbx_error_code_name(e->code));
    g_string_append(out, ",\"type\":");
    append_str(out, e->type);
    g_string_append(out, ",\"message\":");
    append_str(out, e->message);
    g_string_append(out, ",\"stack\":");
    append_str(out, e->stack);
    g_string_append_c(out, '}');
}

static void append_call(GString *out, const SbxToolRecord *rec, const SbxNamespace *ns)
{
    const char *provider = rec->provider, *tool = rec->tool;

    if (ns != NULL) {
        sbx_namespace_resolve(ns, rec->provider, rec->tool, &provider, &tool);
    }
    g_string_append_printf(out, "{\"call_id\":%u,\"provider\":", rec->call_id);
    append_str(out, provider);
    g_string_append(out, ",\"tool\":");
    append_str(out, tool);
    g_string_append_printf(out, ",\"input\":%s,\"answered\":%s", rec->input_json,
                           rec->answered ? "true" : "false");
    if (rec->answered) {
        g_string_append_printf(out, ",\"ok\":%s", rec->ok ? "true" : "false");
        if (rec->ok) {
            g_string_append_printf(out, ",\"result\":%s",
                                   rec->result_json != NULL ? rec->result_json : "null");
            if (rec->result_dropped) {
                g_string_append(out, ",\"result_dropped\":true");
            }
        } else {
            g_string_append(out, ",\"error\":");
            sbx_report_append_error(out, &rec->error);
        }
        g_string_append_printf(out, ",\"duration_ms\":%" G_GUINT64_FORMAT, rec->duration_ms);
    }
    if (rec->policy_json != NULL) {
        g_string_append_printf(out, ",\"policy\":%s", rec->policy_json);
    }
    g_string_append_c(out, '}');
}

static void append_output(GString *out, const char *key, const GByteArray *data)
{
    g_string_append_printf(out, ",\"%s\":", key);
    if (data == NULL) {
        g_string_append(out, "\"\"");
    } else {
        sbx_json_append_string(out, (const char *)data->data, data->len);
    }
}

static void append_result(GString *out, const SbxRunResult *r, const SbxNamespace *ns)
{
    g_string_append(out, "{\"status\":");
    append_str(out, sbx_status_name(r->status));
    g_string_append_printf(out, ",\"exit_code\":%d,\"result\":%s,\"error\":", r->exit_code,
                           r->result_json != NULL ? r->result_json : "null");
    if (r->has_error) {
        sbx_report_append_error(out, &r->error);
    } else {
        g_string_append(out, "null");
    }
    append_output(out, "stdout", r->collected[SBX_STREAM_STDOUT]);
    append_output(out, "stderr", r->collected[SBX_STREAM_STDERR]);
    g_string_append_printf(out, ",\"output_truncated\":%s,\"duration_ms\":%" G_GUINT64_FORMAT,
                           r->output_truncated ? "true" : "false", r->duration_ms);
    g_string_append(out, ",\"tool_calls\":[");
    for (guint i = 0; r->tool_calls != NULL && i < r->tool_calls->len; i++) {
        g_string_append(out, i > 0 ? "," : "");
        append_call(out, g_ptr_array_index(r->tool_calls, i), ns);
    }
    g_string_append_printf(out, "],\"tool_calls_dropped\":%u", r->tool_calls_dropped);
}

static void append_failure(GString *out, SbxStatus status, const char *failure)
{
    SbxError e = {.code = SBX_ERR_INTERNAL, .message = (char *)failure};

    g_string_append(out, "{\"status\":");
    append_str(out, sbx_status_name(status));
    g_string_append(out, ",\"exit_code\":-1,\"result\":null,\"error\":");
    sbx_report_append_error(out, &e);
    g_string_append(out, ",\"stdout\":\"\",\"stderr\":\"\",\"output_truncated\":false,"
                         "\"duration_ms\":0,\"tool_calls\":[],\"tool_calls_dropped\":0");
}

char *sbx_report_error_json(const SbxError *e)
{
    GString *out = g_string_new(NULL);

    sbx_report_append_error(out, e);
    return g_string_free(out, FALSE);
}

char *sbx_report_tool_calls_json(const SbxRunResult *r, const SbxNamespace *ns)
{
    GString *out = g_string_new("[");

    for (guint i = 0; r->tool_calls != NULL && i < r->tool_calls->len; i++) {
        g_string_append(out, i > 0 ? "," : "");
        append_call(out, g_ptr_array_index(r->tool_calls, i), ns);
    }
    g_string_append_c(out, ']');
    return g_string_free(out, FALSE);
}

char *sbx_report_json(const SbxReport *report)
{
    GString *out = g_string_new(NULL);

    if (report->result != NULL) {
        append_result(out, report->result, report->ns);
    } else {
        append_failure(out, report->failure_status,
                       report->failure != NULL ? report->failure : "unknown failure");
    }
    if (report->boot_ms >= 0) {
        g_string_append_printf(out, ",\"boot_ms\":%" G_GINT64_FORMAT, report->boot_ms);
    } else {
        g_string_append(out, ",\"boot_ms\":null");
    }
    g_string_append(out, "}\n");
    return g_string_free(out, FALSE);
}
