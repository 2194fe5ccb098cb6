/*
 * The verdict of a replay (replay.h): the replay's outcome, as its record would hold it, compared
 * with the record field by field (tool calls, stdout, stderr, result, error, status, exit code),
 * in the order a program produces them, so that the first difference is the first divergence.
 */
#include <string.h>

#include "base/json-builder.h"
#include "replay/replay.h"

/* Bytes of output shown on each side of a difference: enough to recognise the place. */
#define EXCERPT_BEFORE 24
#define EXCERPT_AFTER 56

/* A value shown whole up to this many bytes, cut beyond (inputs and results go to 1 MiB). */
#define SHOWN_MAX 240

void sbx_replay_diff_free(SbxReplayDiff *d)
{
    if (d == NULL) {
        return;
    }
    g_free(d->what);
    g_free(d->where);
    g_free(d->recorded);
    g_free(d->replayed);
    g_free(d);
}

static char *shown(const char *s)
{
    if (s == NULL) {
        return NULL;
    }
    gsize len = strlen(s);
    return len <= SHOWN_MAX ? g_strdup(s) : g_strdup_printf("%.*s...", SHOWN_MAX, s);
}

/* Takes @where. */
static void add(GPtrArray *diffs, const char *what, char *where, const char *recorded,
                const char *replayed)
{
    SbxReplayDiff *d = g_new0(SbxReplayDiff, 1);

    d->what = g_strdup(what);
    d->where = where;
    d->recorded = shown(recorded);
    d->replayed = shown(replayed);
    g_ptr_array_add(diffs, d);
}

/* ---- the tool calls ----------------------------------------------------------------------- */

static char *call_where(guint i, const SbxRecordCall *c)
{
    return g_strdup_printf("call %u (%s.%s)", i + 1, c->provider, c->tool);
}

static char *call_answer(const SbxRecordCall *c)
{
    if (c->ok) {
        return g_strdup(c->result_json != NULL ? c->result_json : "null");
    }
    return g_strdup(c->error_json != NULL ? c->error_json : "(no answer)");
}

/* One call of each, the same position @i; @answers: compare what they were answered too. */
static void compare_call(GPtrArray *diffs, guint i, const SbxRecordCall *a, const SbxRecordCall *b,
                         gboolean answers)
{
    if (strcmp(a->provider, b->provider) != 0 || strcmp(a->tool, b->tool) != 0) {
        g_autofree char *ta = g_strdup_printf("%s.%s", a->provider, a->tool);
        g_autofree char *tb = g_strdup_printf("%s.%s", b->provider, b->tool);
        add(diffs, "tool call", g_strdup_printf("call %u", i + 1), ta, tb);
        return;
    }
    if (strcmp(a->input_json, b->input_json) != 0) {
        add(diffs, "tool call input", call_where(i, a), a->input_json, b->input_json);
        return;
    }
    g_autofree char *ra = call_answer(a);
    g_autofree char *rb = call_answer(b);
    if (answers && strcmp(ra, rb) != 0) {
        add(diffs, "tool result", call_where(i, a), ra, rb);
    }
}

static void compare_calls(GPtrArray *diffs, const GPtrArray *rec, const GPtrArray *rep,
                          gboolean answers)
{
    guint n = MIN(rec->len, rep->len);

    for (guint i = 0; i < n; i++) {
        compare_call(diffs, i, g_ptr_array_index(rec, i), g_ptr_array_index(rep, i), answers);
    }
    if (rec->len != rep->len) {
        g_autofree char *a = g_strdup_printf("%u calls", rec->len);
        g_autofree char *b = g_strdup_printf("%u calls", rep->len);
        add(diffs, "tool calls", NULL, a, b);
    }
}

/* ---- output and the outcome --------------------------------------------------------------- */

/* @len bytes of @data from @at, at most @max, as a JSON string (any bytes shown safely). */
static char *excerpt(const char *data, gsize len, gsize at, gsize max)
{
    g_autoptr(GString) out = g_string_new(NULL);
    gsize n = at < len ? MIN(max, len - at) : 0;

    sbx_json_append_string(out, data + MIN(at, len), n);
    if (at + n < len) {
        g_string_append(out, "...");
    }
    return g_string_free(g_steal_pointer(&out), FALSE);
}

static void compare_stream(GPtrArray *diffs, const char *what, const char *a, gsize a_len,
                           gboolean a_cut, const char *b, gsize b_len, gboolean b_cut)
{
    gsize n = MIN(a_len, b_len), i = 0, line = 1;

    while (i < n && a[i] == b[i]) {
        line += a[i] == '\n';
        i++;
    }
    if (i == n && a_len == b_len) {
        if (a_cut != b_cut) {
            add(diffs, what, g_strdup("its end"), a_cut ? "cut" : "whole", b_cut ? "cut" : "whole");
        }
        return;
    }
    gsize from = i > EXCERPT_BEFORE ? i - EXCERPT_BEFORE : 0;
    g_autofree char *ea = excerpt(a, a_len, from, EXCERPT_BEFORE + EXCERPT_AFTER);
    g_autofree char *eb = excerpt(b, b_len, from, EXCERPT_BEFORE + EXCERPT_AFTER);
    add(diffs, what,
        g_strdup_printf("byte %" G_GSIZE_FORMAT " (line %" G_GSIZE_FORMAT ")", i, line), ea, eb);
}

static void compare_text(GPtrArray *diffs, const char *what, const char *a, const char *b)
{
    if (g_strcmp0(a, b) != 0) {
        add(diffs, what, NULL, a != NULL ? a : "(none)", b != NULL ? b : "(none)");
    }
}

static char *exit_code_text(const SbxRecord *r)
{
    return r->has_exit_code ? g_strdup_printf("%d", r->exit_code) : g_strdup("(none)");
}

GPtrArray *sbx_replay_compare(const SbxReplay *replay, const SbxExec *exec)
{
    const SbxRecord *rec = sbx_replay_record(replay);
    g_autoptr(GPtrArray) calls = NULL;
    g_autoptr(SbxRecord) rep = sbx_exec_outcome_record(exec, &calls);
    GPtrArray *diffs = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_replay_diff_free);
    /* Answers differ only with live tools: the record's are the replay's otherwise. */
    compare_calls(diffs, sbx_replay_calls(replay), calls, sbx_replay_is_live(replay));
    compare_stream(diffs, "stdout", rec->stdout_data, rec->stdout_len, rec->stdout_truncated,
                   rep->stdout_data, rep->stdout_len, rep->stdout_truncated);
    compare_stream(diffs, "stderr", rec->stderr_data, rec->stderr_len, rec->stderr_truncated,
                   rep->stderr_data, rep->stderr_len, rep->stderr_truncated);
    compare_text(diffs, "result", rec->result_json, rep->result_json);
    compare_text(diffs, "error", rec->error_json, rep->error_json);
    compare_text(diffs, "status", rec->status, rep->status);
    g_autofree char *ca = exit_code_text(rec);
    g_autofree char *cb = exit_code_text(rep);
    compare_text(diffs, "exit code", ca, cb);
    return diffs;
}

/* ---- saying it ---------------------------------------------------------------------------- */

char *sbx_replay_diff_text(const SbxReplayDiff *d)
{
    return g_strdup_printf("%s%s%s: recorded %s, replayed %s", d->what,
                           d->where != NULL ? " at " : "", d->where != NULL ? d->where : "",
                           d->recorded != NULL ? d->recorded : "(none)",
                           d->replayed != NULL ? d->replayed : "(none)");
}

static void diff_json(SbxJsonb *b, const SbxReplayDiff *d)
{
    sbx_jsonb_begin_object(b);
    sbx_jsonb_member_string(b, "what", d->what);
    sbx_jsonb_member_string(b, "where", d->where);
    sbx_jsonb_member_string(b, "recorded", d->recorded);
    sbx_jsonb_member_string(b, "replayed", d->replayed);
    sbx_jsonb_end_object(b);
}

char *sbx_replay_verdict_json(const SbxReplay *replay, const GPtrArray *diffs, gboolean all,
                              gint64 replay_ms)
{
    const SbxRecord *rec = sbx_replay_record(replay);
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "id", rec->id);
    sbx_jsonb_member_string(&b, "verdict", diffs->len == 0 ? "identical" : "diverged");
    if (diffs->len > 0) {
        sbx_jsonb_key(&b, "divergence");
        diff_json(&b, g_ptr_array_index(diffs, 0));
    }
    if (all) {
        sbx_jsonb_key(&b, "differences");
        sbx_jsonb_begin_array(&b);
        for (guint i = 0; i < diffs->len; i++) {
            diff_json(&b, g_ptr_array_index(diffs, i));
        }
        sbx_jsonb_end_array(&b);
    }
    sbx_jsonb_member_int(&b, "duration_ms", replay_ms);
    sbx_jsonb_member_int(&b, "recorded_duration_ms", rec->duration_ms);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}
