/*
 * `sandbox records list|show|prune|sessions|session|export` (docs/service.md, "Records"): the
 * operator's view of the execution and session records in the store, every tenant's, their
 * retention, and a record's portable bundle (replay/bundle.h). What a person reads is escaped for a
 * terminal (escape.h): code, output and a session's reason come from tenants, guests and QEMU.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/escape.h"
#include "cli/store-open.h"
#include "exec/exec-record.h"
#include "replay/bundle.h"
#include "store/records.h"
#include "store/sessions.h"
#include "store/tenants.h"

#define VERB "sandbox records"

typedef struct {
    char *db;
    gboolean json;
    char *tenant;
    char *status;
    char *session; /* list: only this session's executions */
    int limit;
    gint64 max_age_days; /* prune: 0 no bound */
    gint64 max_count;
    gint64 max_mib;
} RecordsOpts;

/* The subcommands, in the order of their names. */
typedef enum { SUB_LIST, SUB_SHOW, SUB_PRUNE, SUB_SESSIONS, SUB_SESSION, SUB_EXPORT } RecordsSub;
static const char *const SUB_NAMES[] = {"list", "show", "prune", "sessions", "session", "export"};

static gboolean parse(int argc, char **argv, RecordsSub sub, RecordsOpts *o, char **ret_id,
                      char **ret_file, GError **error)
{
    gboolean list = sub == SUB_LIST || sub == SUB_SESSIONS, prune = sub == SUB_PRUNE;
    gboolean export = sub == SUB_EXPORT;
    int want = list || prune ? 1 : export ? 3 : 2;
    const GOptionEntry common[] = {
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &o->db, "The store (default: docs/service.md)", "PATH"},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry json_entries[] = {
        {"json", 0, 0, G_OPTION_ARG_NONE, &o->json, "JSON instead of text", NULL},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry list_entries[] = {
        {"tenant", 0, 0, G_OPTION_ARG_STRING, &o->tenant, "Only this tenant's (name or id)",
         "NAME"},
        {"status", 0, 0, G_OPTION_ARG_STRING, &o->status, "Only of this status", "S"},
        {"limit", 0, 0, G_OPTION_ARG_INT, &o->limit, "At most N, newest first (default 50)", "N"},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry session_entries[] = {
        {"session", 0, 0, G_OPTION_ARG_STRING, &o->session, "Only the executions of this session",
         "ID"},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry prune_entries[] = {
        {"max-age-days", 0, 0, G_OPTION_ARG_INT64, &o->max_age_days,
         "Delete finished records created more than DAYS days ago", "DAYS"},
        {"max-count", 0, 0, G_OPTION_ARG_INT64, &o->max_count,
         "Keep only the newest N finished records", "N"},
        {"max-mib", 0, 0, G_OPTION_ARG_INT64, &o->max_mib,
         "Keep only the newest finished records that fit in N MiB", "N"},
        G_OPTION_ENTRY_NULL,
    };
    g_autofree char *prgname = g_strdup_printf(VERB " %s", argv[0]);
    g_autoptr(GOptionContext) oc = g_option_context_new(list || prune ? NULL
                                                        : export      ? "ID FILE"
                                                                      : "ID");
    g_set_prgname(prgname);
    g_option_context_add_main_entries(oc, common, NULL);
    if (!export) {
        g_option_context_add_main_entries(oc, json_entries, NULL);
    }
    if (list) {
        g_option_context_add_main_entries(oc, list_entries, NULL);
    }
    if (sub == SUB_LIST) {
        g_option_context_add_main_entries(oc, session_entries, NULL);
    }
    if (prune) {
        g_option_context_add_main_entries(oc, prune_entries, NULL);
    }
    g_option_context_set_description(
        oc, "Exit status: 0, 1 if there is no such record or session or the store fails, 2 for "
            "invalid usage.\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    if (argc != want) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED, "expected %s; see `%s --help`",
                    want == 1   ? "no argument"
                    : want == 3 ? "an ID and a FILE"
                                : "one ID",
                    prgname);
        return FALSE;
    }
    if (prune && (o->max_age_days < 0 || o->max_count < 0 || o->max_mib < 0 ||
                  o->max_age_days > SBX_RECORDS_AGE_MAX_DAYS || o->max_mib > SBX_RECORDS_MIB_MAX ||
                  (o->max_age_days == 0 && o->max_count == 0 && o->max_mib == 0))) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "expected --max-age-days (1 to %d), --max-count (1 or more) or --max-mib (1 "
                    "to %d), or several",
                    SBX_RECORDS_AGE_MAX_DAYS, SBX_RECORDS_MIB_MAX);
        return FALSE;
    }
    if (o->limit < 0 || o->limit > SBX_RECORDS_LIST_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "--limit: expected 1 to %d",
                    SBX_RECORDS_LIST_MAX);
        return FALSE;
    }
    *ret_id = list ? NULL : g_strdup(argv[1]);
    *ret_file = export ? g_strdup(argv[2]) : NULL;
    return TRUE;
}

/*
 * The id of tenant @name_or_id: a tenant's, or, if none has that name or id, @name_or_id itself
 * when it has the form of an id (the records of a removed tenant stay).
 */
static gboolean tenant_id(SbxStore *store, const char *name_or_id, char **ret, GError **error)
{
    g_autoptr(SbxTenant) t = NULL;
    g_autoptr(GError) local = NULL;

    if (sbx_tenant_get(store, name_or_id, &t, &local)) {
        *ret = g_strdup(t->id);
        return TRUE;
    }
    if (g_error_matches(local, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND) &&
        g_str_has_prefix(name_or_id, "t_")) {
        *ret = g_strdup(name_or_id);
        return TRUE;
    }
    g_propagate_error(error, g_steal_pointer(&local));
    return FALSE;
}

/* Unix ms as local time, "2024-05-01 12:00:00", or "-". */
static char *time_text(gint64 ms)
{
    g_autoptr(GDateTime) t = ms != 0 ? g_date_time_new_from_unix_local(ms / 1000) : NULL;
    return t != NULL ? g_date_time_format(t, "%F %T") : g_strdup("-");
}

/* The heading of print_line()'s columns. */
#define RECORD_HEADER "ID\tCREATED\tTENANT\tFRONT END\tLANGUAGE\tSTATUS\tEXIT\tDURATION\n"

static void print_line(const SbxRecord *r)
{
    g_autofree char *created = time_text(r->created_at_ms);
    g_autofree char *exit_code =
        r->has_exit_code ? g_strdup_printf("%d", r->exit_code) : g_strdup("-");
    g_autofree char *line =
        g_strdup_printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%" G_GINT64_FORMAT " ms\n", r->id, created,
                        r->tenant_id != NULL ? r->tenant_id : "-", r->front_end, r->language,
                        r->status, exit_code, r->duration_ms);
    g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
    fputs(safe, stdout);
}

static int do_list(SbxStore *store, const RecordsOpts *o)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *tenant = NULL;
    g_autoptr(GPtrArray) list = NULL;

    if (o->tenant != NULL && !tenant_id(store, o->tenant, &tenant, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    SbxRecordFilter f = {.tenant_id = tenant,
                         .status = o->status,
                         .session_id = o->session,
                         .limit = (guint)o->limit};
    if (!sbx_records_list(store, &f, &list, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    if (!o->json && list->len > 0) {
        printf(RECORD_HEADER);
    }
    printf(o->json ? "[" : "");
    for (guint i = 0; i < list->len; i++) {
        if (o->json) {
            g_autofree char *json = sbx_record_to_json(g_ptr_array_index(list, i));
            printf("%s%s", i > 0 ? ",\n" : "\n", json);
        } else {
            print_line(g_ptr_array_index(list, i));
        }
    }
    printf(o->json ? "\n]\n" : "");
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

/* A titled block of bytes, escaped for a terminal. */
static void print_block(const char *title, const char *data, gsize len, gboolean cut)
{
    g_autofree char *safe =
        sbx_escape(data != NULL ? data : "", data != NULL ? (gssize)len : 0, SBX_ESCAPE_TEXT);
    gsize n = strlen(safe);

    printf("--- %s%s\n%s%s", title, cut ? " (truncated)" : "", safe,
           n > 0 && safe[n - 1] != '\n' ? "\n" : "");
}

/* "key: value" of a text field (NULL: "-"), escaped. */
static void print_field(const char *key, const char *value)
{
    g_autofree char *safe = sbx_escape(value != NULL ? value : "-", -1, SBX_ESCAPE_TEXT);
    printf("%-14s %s\n", key, safe);
}

static void print_record(const SbxRecord *r)
{
    g_autofree char *created = time_text(r->created_at_ms);
    g_autofree char *finished = time_text(r->finished_at_ms);
    g_autofree char *exit_code = r->has_exit_code ? g_strdup_printf("%d", r->exit_code) : NULL;
    g_autofree char *limits =
        g_strdup_printf("timeout %" G_GINT64_FORMAT " ms, output %" G_GINT64_FORMAT " bytes",
                        r->timeout_ms, r->output_limit);
    g_autofree char *times = g_strdup_printf(
        "boot %" G_GINT64_FORMAT " ms, run %" G_GINT64_FORMAT " ms", r->boot_ms, r->duration_ms);
    const char *fields[][2] = {
        {"id:", r->id},
        {"tenant:", r->tenant_id},
        {"session:", r->session_id},
        {"front end:", r->front_end},
        {"language:", r->language},
        {"code sha256:", r->code_sha256},
        {"entry:", r->entry},
        {"args:", r->args_json},
        {"profile:", r->profile},
        {"snapshot key:", r->snapshot_key},
        {"image:", r->image_id},
        {"limits:", limits},
        {"status:", r->status},
        {"exit code:", exit_code},
        {"result:", r->result_json},
        {"error:", r->error_json},
        {"created:", created},
        {"finished:", finished},
        {"timings:", times},
        {"entropy:", r->entropy_hex},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(fields); i++) {
        print_field(fields[i][0], fields[i][1]);
    }
    print_block("code", r->code, r->code != NULL ? strlen(r->code) : 0, FALSE);
    print_block("stdout", r->stdout_data, r->stdout_len, r->stdout_truncated);
    print_block("stderr", r->stderr_data, r->stderr_len, r->stderr_truncated);
}

static void print_calls(const GPtrArray *calls, const GPtrArray *approvals)
{
    for (guint i = 0; i < calls->len; i++) {
        const SbxRecordCall *c = g_ptr_array_index(calls, i);
        g_autofree char *line =
            g_strdup_printf("call %u: %s.%s %s -> %s %s (%" G_GINT64_FORMAT " ms)%s%s\n",
                            c->call_id, c->provider, c->tool, c->input_json, c->ok ? "ok" : "error",
                            c->ok ? (c->result_json != NULL ? c->result_json : "-")
                                  : (c->error_json != NULL ? c->error_json : "-"),
                            c->duration_ms, c->policy_json != NULL ? " policy " : "",
                            c->policy_json != NULL ? c->policy_json : "");
        g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
        fputs(safe, stdout);
    }
    for (guint i = 0; i < approvals->len; i++) {
        const SbxRecordApproval *a = g_ptr_array_index(approvals, i);
        g_autofree char *asked = time_text(a->asked_at_ms);
        g_autofree char *line = g_strdup_printf(
            "approval %s: %s.%s asked %s, %s by %s\n", a->approval_id, a->provider, a->tool, asked,
            a->decision, a->answered_by != NULL ? a->answered_by : "nobody");
        g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
        fputs(safe, stdout);
    }
}

static int do_show(SbxStore *store, const char *id, const RecordsOpts *o)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxRecord) r = NULL;
    g_autoptr(GPtrArray) calls = NULL;
    g_autoptr(GPtrArray) approvals = NULL;

    if (!sbx_records_get(store, NULL, id, &r, &error) ||
        !sbx_records_get_calls(store, NULL, id, &calls, &approvals, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    if (o->json) {
        g_autofree char *json = sbx_record_to_json_full(r, calls, approvals);
        printf("%s\n", json);
    } else {
        print_record(r);
        if (calls->len > 0 || approvals->len > 0) {
            printf("--- tool calls and approvals\n");
            print_calls(calls, approvals);
        }
    }
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

/* Unix ms as a duration in seconds, "-" for 0 (none). */
static char *seconds_text(gint64 ms)
{
    return ms != 0 ? g_strdup_printf("%" G_GINT64_FORMAT " s", ms / 1000) : g_strdup("-");
}

static void print_session_line(const SbxSessionRecord *s)
{
    g_autofree char *created = time_text(s->created_at_ms);
    g_autofree char *ended = time_text(s->ended_at_ms);
    g_autofree char *line = g_strdup_printf(
        "%s\t%s\t%s\t%s\t%s\t%s\t%" G_GUINT64_FORMAT "\n", s->id, created,
        s->tenant_id != NULL ? s->tenant_id : "-", s->profile, s->status, ended, s->executions);
    g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
    fputs(safe, stdout);
}

static int do_sessions(SbxStore *store, const RecordsOpts *o)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *tenant = NULL;
    g_autoptr(GPtrArray) list = NULL;

    if (o->tenant != NULL && !tenant_id(store, o->tenant, &tenant, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    SbxSessionFilter f = {.tenant_id = tenant, .status = o->status, .limit = (guint)o->limit};
    if (!sbx_session_records_list(store, &f, &list, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    if (!o->json && list->len > 0) {
        printf("ID\tCREATED\tTENANT\tPROFILE\tSTATUS\tENDED\tEXECUTIONS\n");
    }
    printf(o->json ? "[" : "");
    for (guint i = 0; i < list->len; i++) {
        if (o->json) {
            g_autofree char *json = sbx_session_record_to_json(g_ptr_array_index(list, i));
            printf("%s%s", i > 0 ? ",\n" : "\n", json);
        } else {
            print_session_line(g_ptr_array_index(list, i));
        }
    }
    printf(o->json ? "\n]\n" : "");
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

static void print_session(const SbxSessionRecord *s)
{
    g_autofree char *created = time_text(s->created_at_ms);
    g_autofree char *ended = time_text(s->ended_at_ms);
    g_autofree char *memory =
        s->memory_mib != 0 ? g_strdup_printf("%" G_GUINT64_FORMAT " MiB", s->memory_mib) : NULL;
    g_autofree char *idle = seconds_text(s->idle_timeout_ms);
    g_autofree char *lifetime = seconds_text(s->max_lifetime_ms);
    g_autofree char *count = g_strdup_printf("%" G_GUINT64_FORMAT, s->executions);
    const char *fields[][2] = {
        {"id:", s->id},
        {"tenant:", s->tenant_id},
        {"profile:", s->profile},
        {"memory:", memory},
        {"created:", created},
        {"idle timeout:", idle},
        {"max lifetime:", lifetime},
        {"status:", s->status},
        {"reason:", s->reason},
        {"ended:", ended},
        {"executions:", count},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(fields); i++) {
        print_field(fields[i][0], fields[i][1]);
    }
}

/*
 * Every execution record of session @id, oldest first (the order they ran), a page at a time:
 * a session's count has no bound of its own, so nothing holds them all.
 */
static gboolean print_session_executions(SbxStore *store, const char *id, gboolean json,
                                         GError **error)
{
    SbxRecordFilter f = {.session_id = id, .oldest_first = TRUE, .limit = SBX_RECORDS_LIST_MAX};
    g_autofree char *cursor = NULL;
    guint n = 0;

    for (;;) {
        g_autoptr(GPtrArray) page = NULL;
        f.cursor_id = cursor;
        if (!sbx_records_list(store, &f, &page, error)) {
            return FALSE;
        }
        for (guint i = 0; i < page->len; i++, n++) {
            if (json) {
                g_autofree char *text = sbx_record_to_json(g_ptr_array_index(page, i));
                printf("%s%s", n > 0 ? ",\n" : "\n", text);
            } else {
                printf(n == 0 ? "--- executions\n" RECORD_HEADER : "");
                print_line(g_ptr_array_index(page, i));
            }
        }
        if (page->len < f.limit) {
            return TRUE;
        }
        const SbxRecord *last = g_ptr_array_index(page, page->len - 1);
        g_free(cursor);
        cursor = g_strdup(last->id);
        f.cursor_created_ms = last->created_at_ms;
    }
}

/* `session ID`: the session and its executions; --json {"session": {...}, "executions": [...]}. */
static int do_session(SbxStore *store, const char *id, const RecordsOpts *o)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSessionRecord) s = NULL;

    if (!sbx_session_records_get(store, NULL, id, &s, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    if (o->json) {
        g_autofree char *json = sbx_session_record_to_json(s);
        printf("{\"session\":%s,\"executions\":[", json);
    } else {
        print_session(s);
    }
    if (!print_session_executions(store, id, o->json, &error)) {
        fflush(stdout);
        return sbx_cli_store_fail(VERB, error);
    }
    printf(o->json ? "\n]}\n" : "");
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

static int do_prune(SbxStore *store, const RecordsOpts *o)
{
    g_autoptr(GError) error = NULL;
    guint deleted = 0, sessions = 0, snapshots = 0;

    if (!sbx_records_prune(store,
                           &(SbxRecordsPrune){.max_age_s = (guint64)o->max_age_days * 86400,
                                              .max_count = (guint64)o->max_count,
                                              .max_bytes = (guint64)o->max_mib * 1024 * 1024},
                           &deleted, &sessions, NULL, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    /* Every time, not only when this one deleted: a server's pruning may have failed to. */
    if (!sbx_exec_records_pins_sync(store, &snapshots, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    printf("%u record%s and %u session%s deleted\n", deleted, deleted == 1 ? "" : "s", sessions,
           sessions == 1 ? "" : "s");
    if (snapshots > 0) {
        printf("%u kept snapshot%s no record refers to removed\n", snapshots,
               snapshots == 1 ? "" : "s");
    }
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

static int do_export(SbxStore *store, const char *id, const char *file)
{
    g_autoptr(GError) error = NULL;

    if (!sbx_bundle_export(store, NULL, id, file, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    printf("record %s exported to %s\n", id, file);
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: " VERB " list [--tenant NAME] [--status S] [--session ID] [--limit N] "
                 "[--json]\n"
                 "       " VERB " show ID [--json]\n"
                 "       " VERB " sessions [--tenant NAME] [--status S] [--limit N] [--json]\n"
                 "       " VERB " session ID [--json]\n"
                 "       " VERB " prune [--max-age-days DAYS] [--max-count N] [--max-mib N]\n"
                 "       " VERB " export ID FILE\n"
                 "Each takes --db PATH (the store; default $SANDBOX_STATE_DIR/sandbox.db, else "
                 "$XDG_STATE_HOME/sandbox/sandbox.db). `" VERB " SUBCOMMAND --help` for more.\n");
}

static int records_start(SbxCli *cli, int argc, char **argv)
{
    int rc = SBX_EXIT_USAGE;
    int sub = sbx_cli_subcommand(VERB, argc, argv, SUB_NAMES, G_N_ELEMENTS(SUB_NAMES), usage, &rc);

    (void)cli;
    if (sub < 0) {
        return rc;
    }
    RecordsOpts o = {0};
    g_autofree char *id = NULL, *file = NULL;
    g_autoptr(GError) error = NULL;
    if (!parse(argc - 1, argv + 1, (RecordsSub)sub, &o, &id, &file, &error)) {
        fprintf(stderr, VERB ": %s\n", error->message);
    } else {
        g_autoptr(SbxStore) store = sbx_cli_store_open(VERB, o.db);
        rc = store == NULL         ? SBX_EXIT_STORE
             : sub == SUB_PRUNE    ? do_prune(store, &o)
             : sub == SUB_LIST     ? do_list(store, &o)
             : sub == SUB_SESSIONS ? do_sessions(store, &o)
             : sub == SUB_SESSION  ? do_session(store, id, &o)
             : sub == SUB_EXPORT   ? do_export(store, id, file)
                                   : do_show(store, id, &o);
    }
    g_free(o.db);
    g_free(o.tenant);
    g_free(o.status);
    g_free(o.session);
    return rc;
}

const SbxCliVerb sbx_cli_verb_records = {
    .name = "records",
    .summary = "List, show, prune and export the records of executions and sessions",
    .start = records_start,
};
