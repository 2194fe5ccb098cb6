/*
 * A record turned back into its execution (replay.h): the request with the record's seed and
 * clock log, the tools answering from the record, and the machine it ran on, found and checked.
 */
#include "replay/replay.h"

#include <string.h>

#include "protocol/json.h"
#include "protocol/limits.h"
#include "store/records.h"
#include "vm/snapshot-pin.h"

G_DEFINE_QUARK(sbx - replay - error - quark, sbx_replay_error)

/* A clock or event log is a flat array of integers. */
#define LOG_DEPTH 2

struct SbxReplay {
    SbxRecord *record;
    GPtrArray *calls; /* SbxRecordCall* */
    SbxLanguage language;
    guint8 seed[SBX_SEED_BYTES];
    guint64 *clock_log;
    gsize n_clock_log;
    guint64 *event_log; /* NULL: the record has none (an older runner: delivered as they come) */
    gsize n_event_log;
    gboolean live; /* the live tools answer, not the record */
};

void sbx_replay_free(SbxReplay *r)
{
    if (r == NULL) {
        return;
    }
    sbx_record_free(r->record);
    if (r->calls != NULL) {
        g_ptr_array_unref(r->calls);
    }
    g_free(r->clock_log);
    g_free(r->event_log);
    explicit_bzero(r->seed, sizeof(r->seed));
    g_free(r);
}

const SbxRecord *sbx_replay_record(const SbxReplay *r)
{
    return r->record;
}

const GPtrArray *sbx_replay_calls(const SbxReplay *r)
{
    return r->calls;
}

gboolean sbx_replay_is_live(const SbxReplay *r)
{
    return r->live;
}

static gboolean damaged(GError **error, const char *id, const char *what)
{
    g_set_error(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_RECORD, "record %s: %s", id, what);
    return FALSE;
}

static gboolean read_seed(SbxReplay *r, GError **error)
{
    const char *hex = r->record->seed_hex;

    if (hex == NULL || strlen(hex) != 2 * SBX_SEED_BYTES) {
        return damaged(error, r->record->id, "its seed is not 64 hex digits");
    }
    for (gsize i = 0; i < SBX_SEED_BYTES; i++) {
        int hi = g_ascii_xdigit_value(hex[2 * i]), lo = g_ascii_xdigit_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return damaged(error, r->record->id, "its seed is not 64 hex digits");
        }
        r->seed[i] = (guint8)(hi << 4 | lo);
    }
    return TRUE;
}

/* The log @text (a JSON array of at most @max integers 0..2^53-1) into *@ret, *@ret_n. */
static gboolean read_log(SbxReplay *r, const char *what, const char *text, gsize max, guint64 **ret,
                         gsize *ret_n, GError **error)
{
    g_autofree char *why = NULL;
    cJSON *arr = sbx_json_parse(text, strlen(text), LOG_DEPTH, &why);
    int n = cJSON_GetArraySize(arr);
    gsize i = 0;
    g_autofree char *bad = g_strdup_printf("its %s is not an array of integers", what);

    if (!cJSON_IsArray(arr) || (gsize)n > max) {
        cJSON_Delete(arr);
        return damaged(error, r->record->id, bad);
    }
    g_autofree guint64 *log = g_new0(guint64, MAX(n, 1));
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        int64_t x = -1;
        if (!sbx_json_int64(v, &x) || x < 0 || (guint64)x > SBX_JSON_INT_MAX) {
            cJSON_Delete(arr);
            return damaged(error, r->record->id, bad);
        }
        log[i++] = (guint64)x;
    }
    cJSON_Delete(arr);
    *ret = g_steal_pointer(&log);
    *ret_n = i;
    return TRUE;
}

static gboolean read_logs(SbxReplay *r, GError **error)
{
    const SbxRecord *rec = r->record;

    return read_log(r, "clock log", rec->clock_log_json != NULL ? rec->clock_log_json : "[]",
                    SBX_CLOCK_READS_MAX, &r->clock_log, &r->n_clock_log, error) &&
           (rec->event_log_json == NULL ||
            read_log(r, "event log", rec->event_log_json, SBX_EVENT_LOG_MAX, &r->event_log,
                     &r->n_event_log, error));
}

SbxReplay *sbx_replay_new(SbxRecord *record, GPtrArray *calls, GError **error)
{
    g_autoptr(SbxReplay) r = g_new0(SbxReplay, 1);

    r->record = record;
    r->calls = calls;
    if (!record->has_replayable || !record->replayable) {
        g_set_error(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_NOT_REPLAYABLE,
                    "record %s is not replayable: %s", record->id,
                    record->not_replayable != NULL ? record->not_replayable
                    : record->has_replayable       ? "the guest did not say why"
                                                   : "it is not finished, or older than replay");
        return NULL;
    }
    if (record->language == NULL || sbx_language_from_name(record->language, &r->language) != 0) {
        damaged(error, record->id, "its language is unknown");
        return NULL;
    }
    if (!read_seed(r, error) || !read_logs(r, error)) {
        return NULL;
    }
    return g_steal_pointer(&r);
}

SbxReplay *sbx_replay_load(SbxStore *store, const char *tenant_id, const char *id, GError **error)
{
    SbxRecord *rec = NULL;
    GPtrArray *calls = NULL;
    g_autoptr(GPtrArray) approvals = NULL;

    if (!sbx_records_get(store, tenant_id, id, &rec, error)) {
        return NULL;
    }
    if (!sbx_records_get_calls(store, tenant_id, id, &calls, &approvals, error)) {
        sbx_record_free(rec);
        return NULL;
    }
    return sbx_replay_new(rec, calls, error);
}

/* The executions of session @session_id before record @target, oldest first, into @chain. */
static gboolean load_session_before(SbxStore *store, const char *tenant_id, const SbxRecord *target,
                                    GPtrArray *chain, GError **error)
{
    g_autoptr(GPtrArray) list = NULL;
    SbxRecordFilter f = {
        .tenant_id = tenant_id,
        .session_id = target->session_id,
        .limit = SBX_RECORDS_LIST_MAX,
        .oldest_first = TRUE,
    };

    if (!sbx_records_list(store, &f, &list, error)) {
        return FALSE;
    }
    for (guint i = 0; i < list->len; i++) {
        const SbxRecord *r = g_ptr_array_index(list, i);
        if (strcmp(r->id, target->id) == 0) {
            return TRUE;
        }
        g_autoptr(GError) local = NULL;
        SbxReplay *before = sbx_replay_load(store, tenant_id, r->id, &local);
        if (before == NULL) {
            g_set_error(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_NOT_REPLAYABLE,
                        "record %s is not replayable: execution %u of its session is not: %s",
                        target->id, i + 1, local->message);
            return FALSE;
        }
        g_ptr_array_add(chain, before);
    }
    g_set_error(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_NOT_REPLAYABLE,
                "record %s is not replayable: more than %d executions of its session before it",
                target->id, SBX_RECORDS_LIST_MAX - 1);
    return FALSE;
}

gboolean sbx_replay_load_chain(SbxStore *store, const char *tenant_id, const char *id,
                               GPtrArray **ret_chain, GError **error)
{
    g_autoptr(GPtrArray) chain = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_replay_free);
    SbxReplay *target = sbx_replay_load(store, tenant_id, id, error);

    if (target == NULL) {
        return FALSE;
    }
    if (target->record->session_id != NULL &&
        !load_session_before(store, tenant_id, target->record, chain, error)) {
        sbx_replay_free(target);
        return FALSE;
    }
    g_ptr_array_add(chain, target);
    *ret_chain = g_steal_pointer(&chain);
    return TRUE;
}

void sbx_replay_request(const SbxReplay *r, SbxExecRequest *req)
{
    const SbxRecord *rec = r->record;

    *req = (SbxExecRequest){
        .language = r->language,
        .code = rec->code,
        .entry = rec->entry,
        .args_json = rec->args_json,
        .kwargs_json = rec->kwargs_json,
        .timeout_ms = (guint)rec->timeout_ms,
        .output_limit = (guint64)rec->output_limit,
        .collect_output = TRUE,
        .seed = r->seed,
        .clock_log = r->clock_log,
        .n_clock_log = r->n_clock_log,
        .event_log = r->event_log,
        .n_event_log = r->n_event_log,
        .log_open = rec->has_log_open && rec->log_open,
    };
}

SbxTools *sbx_replay_tools(SbxReplay *r, SbxTools *live, GError **error)
{
    r->live = live != NULL;
    if (live != NULL) {
        return live;
    }
    GPtrArray *calls = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_tools_recorded_call_free);
    for (guint i = 0; i < r->calls->len; i++) {
        const SbxRecordCall *c = g_ptr_array_index(r->calls, i);
        SbxToolsRecordedCall *t = g_new0(SbxToolsRecordedCall, 1);
        *t = (SbxToolsRecordedCall){
            .provider = g_strdup(c->provider),
            .tool = g_strdup(c->tool),
            .input_json = g_strdup(c->input_json),
            .ok = c->ok,
            .result_json = g_strdup(c->ok && c->result_json == NULL ? "null" : c->result_json),
            .error_json = g_strdup(c->error_json),
        };
        g_ptr_array_add(calls, t);
    }
    return sbx_tools_new_replay(r->record->tools_json, sbx_tools_replay_new(calls), error);
}

/* ---- the machine -------------------------------------------------------------------------- */

void sbx_replay_machine_clear(SbxReplayMachine *m)
{
    g_clear_pointer(&m->snapshot, sbx_snapshot_free);
    g_clear_pointer(&m->image, sbx_image_free);
    g_clear_pointer(&m->profile, sbx_profile_free);
}

static gboolean machine_error(GError **error, GError *cause, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

static gboolean machine_error(GError **error, GError *cause, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *what = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_MACHINE, "%s%s%s", what,
                cause != NULL ? ": " : "", cause != NULL ? cause->message : "");
    if (cause != NULL) {
        g_error_free(cause);
    }
    return FALSE;
}

gboolean sbx_replay_machine(const SbxReplay *r, const SbxReplayPlace *place, SbxReplayMachine *ret,
                            GError **error)
{
    static const SbxReplayPlace here = {0};
    const SbxRecord *rec = r->record;
    SbxReplayMachine m = {0};
    GError *cause = NULL;

    place = place != NULL ? place : &here;
    if (rec->profile == NULL || rec->image_id == NULL) {
        return machine_error(error, NULL, "record %s names no profile or image", rec->id);
    }
    m.profile = place->profile_path != NULL ? sbx_profile_load(place->profile_path, &cause)
                                            : sbx_profile_load_named(NULL, rec->profile, &cause);
    if (m.profile == NULL) {
        return machine_error(error, cause, "the profile %s of record %s", rec->profile, rec->id);
    }
    m.image = place->image_dir != NULL ? sbx_image_open(place->image_dir, &cause)
                                       : sbx_image_open_for(m.profile, &cause);
    if (m.image == NULL) {
        sbx_replay_machine_clear(&m);
        return machine_error(error, cause, "the image of record %s", rec->id);
    }
    if (strcmp(m.image->hash, rec->image_id) != 0) {
        machine_error(error, NULL, "the image differs: record %s ran on image %s, this host has %s",
                      rec->id, rec->image_id, m.image->hash);
        sbx_replay_machine_clear(&m);
        return FALSE;
    }
    if (place->snapshot_dir != NULL) {
        m.snapshot = sbx_snapshot_open(place->snapshot_dir, m.profile, m.image, &cause);
    } else if (rec->snapshot_key != NULL) {
        m.snapshot =
            sbx_snapshot_find_kept(NULL, rec->id, rec->snapshot_key, m.profile, m.image, &cause);
    }
    if (m.snapshot == NULL && cause != NULL) {
        sbx_replay_machine_clear(&m);
        return machine_error(error, cause, "cannot replay");
    }
    *ret = m;
    return TRUE;
}
