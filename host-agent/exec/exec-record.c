/*
 * An execution's record (exec-record.h): SbxRecord, SbxRecordCall and SbxRecordApproval filled
 * from the core's state, with the tool calls under their real names (as report.c shows them)
 * and each approval read back from its call's policy note (tools.h: the note says the approval
 * id, its outcome, who answered and when).
 */
#include "exec/exec-record.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "exec/report.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "vm/snapshot-pin.h"

/* The request and the source: what a record begins with. */
static void fill_begin(SbxRecord *r, const SbxExecRecordInput *in)
{
    r->id = (char *)in->id;
    r->tenant_id = (char *)in->info->tenant_id;
    r->front_end = (char *)in->info->front_end;
    r->language = (char *)sbx_language_name(in->language);
    r->code = (char *)in->code;
    r->entry = (char *)in->entry;
    r->args_json = (char *)in->args_json;
    r->kwargs_json = (char *)in->kwargs_json;
    r->profile = (char *)in->info->profile;
    r->snapshot_key = (char *)in->info->snapshot_key;
    r->image_id = (char *)in->info->image_id;
    r->catalog = (char *)in->info->catalog;
    r->session_id = (char *)in->info->session_id;
    r->created_at_ms = in->info->created_at_ms;
    r->timeout_ms = in->timeout_ms != 0 ? in->timeout_ms : SBX_SESSION_TIMEOUT_DEFAULT_MS;
    r->output_limit = (gint64)in->output_limit;
}

gboolean sbx_exec_record_begin(SbxStore *store, const SbxExecRecordInput *in, GError **error)
{
    SbxRecord r = {0};

    fill_begin(&r, in);
    /* Pinned first: a record never names a snapshot the collection could take from it. */
    return sbx_snapshot_pin(NULL, r.snapshot_key, sbx_store_path(store), error) &&
           sbx_records_begin(store, &r, error);
}

gboolean sbx_exec_records_pins_sync(SbxStore *store, guint *ret_removed, GError **error)
{
    g_autoptr(GHashTable) keys = NULL;
    GHashTableIter it;
    gpointer key;

    if (!sbx_records_snapshot_keys(store, &keys, error))
        return FALSE;
    /* Pinned: also the keys of records written before pins existed (one stat each). */
    g_hash_table_iter_init(&it, keys);
    while (g_hash_table_iter_next(&it, &key, NULL))
        if (!sbx_snapshot_pin(NULL, key, sbx_store_path(store), error))
            return FALSE;
    return sbx_snapshot_pins_sync(NULL, sbx_store_path(store), keys, ret_removed, error);
}

static char *error_json(const SbxError *e)
{
    GString *out = g_string_new(NULL);

    sbx_report_append_error(out, e);
    return g_string_free(out, FALSE);
}

/* The output of @stream: collected in the result, or kept by the core while it streamed. */
static void fill_output(const SbxExecRecordInput *in, SbxStream stream, char **ret_data,
                        gsize *ret_len, gboolean *ret_cut)
{
    const GByteArray *data = in->result != NULL && in->result->collected[stream] != NULL
                                 ? in->result->collected[stream]
                                 : in->kept[stream];

    *ret_data = data != NULL ? (char *)data->data : NULL;
    *ret_len = data != NULL ? data->len : 0;
    /* The session's flag is for both streams together: either may have been cut. */
    *ret_cut = in->kept_cut[stream] || (in->result != NULL && in->result->output_truncated);
}

/* The outcome columns; the caller frees *@ret_error_json. */
static void fill_outcome(SbxRecord *r, const SbxExecRecordInput *in, char **ret_error_json)
{
    const SbxRunResult *res = in->result;

    if (res != NULL) {
        r->status = (char *)sbx_status_name(res->status);
        r->has_exit_code = res->exit_code >= 0;
        r->exit_code = res->exit_code;
        r->result_json = res->result_json;
        *ret_error_json = res->has_error ? error_json(&res->error) : NULL;
        r->duration_ms = (gint64)res->duration_ms;
    } else {
        SbxError e = {.code = SBX_ERR_INTERNAL,
                      .message = (char *)(in->failure != NULL ? in->failure : "unknown failure")};
        r->status = (char *)sbx_status_name(in->failure_status);
        *ret_error_json = error_json(&e);
    }
    fill_output(in, SBX_STREAM_STDOUT, &r->stdout_data, &r->stdout_len, &r->stdout_truncated);
    fill_output(in, SBX_STREAM_STDERR, &r->stderr_data, &r->stderr_len, &r->stderr_truncated);
    r->started_at_ms = in->started_at_ms;
    r->boot_ms = in->boot_ms > 0 ? in->boot_ms : 0;
    r->files_json = (char *)in->files_json;
}

/* A call as recorded, under its real names; strings borrowed except error_json (caller's). */
static void fill_call(SbxRecordCall *c, const SbxToolRecord *t, const SbxNamespace *ns)
{
    const char *provider = t->provider, *tool = t->tool;

    if (ns != NULL) {
        sbx_namespace_resolve(ns, t->provider, t->tool, &provider, &tool);
    }
    c->call_id = t->call_id;
    c->provider = (char *)provider;
    c->tool = (char *)tool;
    c->input_json = t->input_json;
    c->ok = t->answered && t->ok;
    c->result_json = c->ok ? t->result_json : NULL;
    c->error_json = t->answered && !t->ok ? error_json(&t->error) : NULL;
    c->policy_json = t->policy_json;
    c->duration_ms = (gint64)t->duration_ms;
}

static const char *member_string(const cJSON *obj, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);

    return cJSON_IsString(m) ? m->valuestring : NULL;
}

static gint64 member_ms(const cJSON *obj, const char *name)
{
    int64_t v = 0;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);

    return m != NULL && sbx_json_int64(m, &v) && v > 0 ? v : 0;
}

/*
 * The approval of call @c, from its policy note (tools.h), into @a (strings owned). FALSE if
 * the call asked for none.
 */
static gboolean fill_approval(SbxRecordApproval *a, const SbxRecordCall *c)
{
    if (c->policy_json == NULL) {
        return FALSE;
    }
    char *why = NULL;
    cJSON *note = sbx_json_parse(c->policy_json, strlen(c->policy_json), SBX_JSON_DEPTH_MAX, &why);
    free(why);
    const char *id = member_string(note, "approval_id");
    if (id != NULL) {
        const char *decision = member_string(note, "approval");
        a->approval_id = g_strdup(id);
        a->provider = g_strdup(c->provider);
        a->tool = g_strdup(c->tool);
        a->decision = g_strdup(decision != NULL ? decision : "cancelled");
        a->answered_by = g_strdup(member_string(note, "answered_by"));
        a->asked_at_ms = member_ms(note, "asked_at_ms");
        a->answered_at_ms = member_ms(note, "answered_at_ms");
    }
    cJSON_Delete(note);
    return id != NULL;
}

static void clear_approval(SbxRecordApproval *a)
{
    g_free(a->approval_id);
    g_free(a->provider);
    g_free(a->tool);
    g_free(a->decision);
    g_free(a->answered_by);
}

static char *hex(const guint8 *bytes, gsize len)
{
    GString *out = g_string_sized_new(len * 2);

    for (gsize i = 0; i < len; i++) {
        g_string_append_printf(out, "%02x", bytes[i]);
    }
    return g_string_free(out, FALSE);
}

/* A log as a JSON array of integers (each at most 2^53-1: the decoder checked). */
static char *log_json(const guint64 *log, gsize n)
{
    GString *out = g_string_sized_new(2 + n * 17);

    g_string_append_c(out, '[');
    for (gsize i = 0; i < n; i++) {
        g_string_append_printf(out, "%s%" G_GUINT64_FORMAT, i > 0 ? "," : "", log[i]);
    }
    g_string_append_c(out, ']');
    return g_string_free(out, FALSE);
}

/* Why the host cannot replay the execution although its guest could, or NULL. */
static const char *host_not_replayable(const SbxExecRecordInput *in)
{
    const SbxRunResult *res = in->result;

    if (res->tool_calls_dropped > 0) {
        return "more tool calls than a record keeps (1024)";
    }
    for (guint i = 0; res->tool_calls != NULL && i < res->tool_calls->len; i++) {
        const SbxToolRecord *t = g_ptr_array_index(res->tool_calls, i);
        if (t->result_dropped) {
            return "a tool result larger than the record keeps";
        }
    }
    if (in->info->not_replayable != NULL) {
        return in->info->not_replayable;
    }
    if (in->files_in) {
        return "files were put into the workspace (a record keeps their names and digests, not "
               "their contents)";
    }
    return NULL;
}

/*
 * What a replay needs (docs/protocol.md, "Replay") into @r: the seed, the clock log, and
 * whether the run can be replayed. Only the guest's own word makes it replayable; every other
 * end (no execution, no runner's done) is not, with a reason. Strings into @seed and @clock.
 */
static void fill_replay(SbxRecord *r, const SbxExecRecordInput *in, char **seed, char **clock,
                        char **events)
{
    const SbxRunResult *res = in->result;

    if (in->given != NULL && in->given->has_seed) {
        r->seed_hex = *seed = hex(in->given->seed, sizeof(in->given->seed));
    }
    r->has_replayable = TRUE;
    if (res == NULL) {
        r->not_replayable = (char *)"the execution did not run";
        return;
    }
    if (res->clock_log != NULL) {
        r->clock_log_json = *clock = log_json(res->clock_log, res->n_clock_log);
    }
    if (res->event_log != NULL) {
        r->event_log_json = *events = log_json(res->event_log, res->n_event_log);
    }
    r->has_log_open = TRUE;
    r->log_open = res->log_open;
    const char *host_why = host_not_replayable(in);
    r->replayable = res->replayable && r->seed_hex != NULL && host_why == NULL;
    if (r->replayable) {
        return;
    }
    if (res->replayable && host_why != NULL) {
        r->not_replayable = (char *)host_why;
        return;
    }
    r->not_replayable =
        res->not_replayable != NULL
            ? res->not_replayable
            : (char *)"the guest reported no clock log (the program ended without the runner's "
                      "done, and not by a kill: an exit, a broken protocol, or an older guest)";
}

gboolean sbx_exec_record_finish(SbxStore *store, const SbxExecRecordInput *in, GError **error)
{
    g_autofree char *seed = NULL;
    g_autofree char *clock = NULL;
    g_autofree char *events = NULL;
    SbxRecord r = {0};
    g_autofree char *err_json = NULL;
    g_autofree char *entropy = NULL;
    const GPtrArray *tc = in->result != NULL ? in->result->tool_calls : NULL;
    guint n = tc != NULL ? MIN(tc->len, (guint)SBX_RECORD_CALLS_MAX) : 0;
    g_autofree SbxRecordCall *calls = g_new0(SbxRecordCall, MAX(n, 1));
    g_autofree SbxRecordApproval *approvals = g_new0(SbxRecordApproval, MAX(n, 1));
    gsize n_approvals = 0;

    fill_begin(&r, in);
    fill_outcome(&r, in, &err_json);
    r.error_json = err_json;
    if (in->given != NULL && in->given->entropy_len > 0) {
        r.entropy_hex = entropy = hex(in->given->entropy, in->given->entropy_len);
        r.guest_clock_ms = in->given->time_us / 1000;
    }
    fill_replay(&r, in, &seed, &clock, &events);
    r.tools_json = (char *)in->tools_json;
    for (guint i = 0; i < n; i++) {
        fill_call(&calls[i], g_ptr_array_index(tc, i), in->ns);
        n_approvals += fill_approval(&approvals[n_approvals], &calls[i]);
    }
    gboolean ok = sbx_records_finish(store, &r, calls, n, approvals, n_approvals, error);
    for (guint i = 0; i < n; i++) {
        g_free(calls[i].error_json);
    }
    for (gsize i = 0; i < n_approvals; i++) {
        clear_approval(&approvals[i]);
    }
    if (entropy != NULL) {
        explicit_bzero(entropy, strlen(entropy));
    }
    if (seed != NULL) {
        explicit_bzero(seed, strlen(seed));
    }
    return ok;
}

/* @len bytes of @data, NUL-terminated (as a record read from the store holds them). */
static char *bytes_copy(const char *data, gsize len)
{
    char *copy = g_malloc(len + 1);

    if (len > 0) {
        memcpy(copy, data, len);
    }
    copy[len] = '\0';
    return copy;
}

SbxRecord *sbx_exec_record_view(const SbxExecRecordInput *in, GPtrArray **ret_calls)
{
    SbxRecord r = {0};
    char *err = NULL;
    SbxRecord *out = g_new0(SbxRecord, 1);
    const GPtrArray *tc = in->result != NULL ? in->result->tool_calls : NULL;

    fill_begin(&r, in);
    fill_outcome(&r, in, &err);
    out->id = g_strdup(r.id);
    out->status = g_strdup(r.status);
    out->has_exit_code = r.has_exit_code;
    out->exit_code = r.exit_code;
    out->result_json = g_strdup(r.result_json);
    out->error_json = err;
    out->duration_ms = r.duration_ms;
    out->stdout_truncated = r.stdout_truncated;
    out->stderr_truncated = r.stderr_truncated;
    out->stdout_len = MIN(r.stdout_len, (gsize)SBX_RECORD_OUTPUT_MAX);
    out->stderr_len = MIN(r.stderr_len, (gsize)SBX_RECORD_OUTPUT_MAX);
    out->stdout_truncated |= out->stdout_len < r.stdout_len;
    out->stderr_truncated |= out->stderr_len < r.stderr_len;
    out->stdout_data = bytes_copy(r.stdout_data, out->stdout_len);
    out->stderr_data = bytes_copy(r.stderr_data, out->stderr_len);
    *ret_calls = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_record_call_free);
    for (guint i = 0; tc != NULL && i < tc->len; i++) {
        SbxRecordCall c = {0};
        SbxRecordCall *copy = g_new0(SbxRecordCall, 1);
        fill_call(&c, g_ptr_array_index(tc, i), in->ns);
        *copy = (SbxRecordCall){
            .seq = i,
            .call_id = c.call_id,
            .provider = g_strdup(c.provider),
            .tool = g_strdup(c.tool),
            .input_json = g_strdup(c.input_json),
            .ok = c.ok,
            .result_json = g_strdup(c.result_json),
            .error_json = c.error_json, /* fill_call's copy */
            .duration_ms = c.duration_ms,
        };
        g_ptr_array_add(*ret_calls, copy);
    }
    return out;
}
