/*
 * Execution records (docs/service.md, "Records"): every execution with what ran, how, what came
 * of it, its tool calls and approvals, and the entropy and clock its guest was given (what a
 * replay needs). Plain structs filled by the front end; nothing here knows a VM. An execution
 * of a session (sessions.h) names it by its session_id.
 */
#pragma once

#include "db.h"

/* stdout and stderr kept per record, each: 1 MiB shows any output a person reads whole and
 * keeps a record of a chatty program (output limits go to 1 GiB) from filling the disk; beyond
 * it the stream is cut and flagged. */
#define SBX_RECORD_OUTPUT_MAX (1024 * 1024)

/* Code, arguments, result and error texts: the largest a protocol frame carries (4 MiB), so a
 * valid execution always fits; larger is a caller's bug, refused. */
#define SBX_RECORD_TEXT_MAX (4 * 1024 * 1024)

/* Tool calls and approvals per record: the session records at most 1024 calls (the rest are
 * counted as dropped), and each call has at most one approval. */
#define SBX_RECORD_CALLS_MAX 1024

/* Records one list returns: a page a person or a client reads; more by the cursor. */
#define SBX_RECORDS_LIST_MAX 1000
#define SBX_RECORDS_LIST_DEFAULT 50

/* A retention age in days: 100 years is "keep", and ages in seconds stay far from overflow. */
#define SBX_RECORDS_AGE_MAX_DAYS 36500

/* A retention bound on bytes, in MiB (`serve --keep-mib`, `records prune --max-mib`): 2^30 MiB
 * (1 PiB) is more than any host's disk, and the bound in bytes stays far from overflow. */
#define SBX_RECORDS_MIB_MAX (1 << 30)

/* Ids (execution, approval, call) and short names (status, front end, language): as the
 * protocol's ids (SBX_ID_MAX). */
#define SBX_RECORD_ID_MAX 64

typedef struct {
    char *id;        /* the execution id */
    char *tenant_id; /* NULL: a local run (`sandbox run`, or serve without tenants) */
    char *front_end; /* "run", "serve", "http" */
    char *language;
    char *code;        /* UTF-8 text */
    char *code_sha256; /* hex; computed by the store (ignored when given) */
    char *entry;       /* entry point, or NULL */
    char *args_json;   /* arguments (JSON text), or NULL */
    char *kwargs_json; /* keyword arguments (a JSON object's text), or NULL */
    char *profile;
    char *snapshot_key;
    char *image_id;
    char *catalog;    /* the tool catalog named by an API request, or NULL */
    char *session_id; /* the session (sessions.h) it ran in, or NULL: an execution of its own */
    gint64 timeout_ms;
    gint64 output_limit;
    char *status; /* "queued", "running", then the outcome ("ok", "error", "timeout", ...),
                     "interrupted" if the server ended first */
    gboolean has_exit_code;
    int exit_code;
    char *result_json; /* JSON text, or NULL */
    char *error_json;  /* JSON text, or NULL */
    char *stdout_data; /* bytes (not NUL-terminated in meaning; NUL-terminated in memory) */
    gsize stdout_len;
    gboolean stdout_truncated; /* cut (by the output limit, or the record's cap) */
    char *stderr_data;
    gsize stderr_len;
    gboolean stderr_truncated;
    gint64 created_at_ms; /* unix ms; 0 at sbx_records_begin(): now */
    gint64 started_at_ms; /* 0: unknown */
    gint64 finished_at_ms;
    gint64 boot_ms;     /* VM restore, boot or pool claim */
    gint64 duration_ms; /* the execution in the guest */
    char *entropy_hex;  /* the entropy the guest was given, hex */
    gint64 guest_clock_ms;
    /* The files it took in and returned, the API's `files` object without contents (JSON
     * text), or NULL: it had none. Written at the finish. */
    char *files_json;
    /* What a replay needs (docs/protocol.md, "Replay"), written at the finish: the seed of
     * the runners' generators (hex), the program's clock reads (a JSON array of integers, at
     * most SBX_CLOCK_READS_MAX; NULL: none reported), and the verdict: has_replayable FALSE
     * when unknown (recorded before schema 5, or not finished); not_replayable says why not. */
    char *seed_hex;
    char *clock_log_json;
    gboolean has_replayable;
    gboolean replayable;
    char *not_replayable;
    /* The order of its asynchronous deliveries (a JSON array of integers, at most
     * SBX_EVENT_LOG_MAX; NULL: none reported), and log_open: it was killed after its logs'
     * last entries (has_log_open FALSE: unknown, recorded before schema 6). */
    char *event_log_json;
    gboolean has_log_open;
    gboolean log_open;
    /* The tools the guest was given, for a replay's namespace (written at the finish): a JSON
     * array of {"provider", "tools": [{"name", "description"?}]} with real names, in the
     * catalog's order; NULL: recorded before schema 6 (a replay then gives no tools). */
    char *tools_json;
} SbxRecord;

typedef struct {
    guint seq; /* position in the record, from 0 (set by the store) */
    guint32 call_id;
    char *provider; /* real names */
    char *tool;
    char *input_json;
    gboolean ok;
    char *result_json; /* JSON text or NULL */
    char *error_json;
    char *policy_json; /* how the policy decided, or NULL */
    gint64 duration_ms;
} SbxRecordCall;

typedef struct {
    guint seq; /* set by the store */
    char *approval_id;
    char *provider;
    char *tool;
    char *decision;    /* "approved", "denied", "timed_out", "cancelled", "unavailable" */
    char *answered_by; /* who answered, or NULL (nobody: timed out, cancelled) */
    gint64 asked_at_ms;
    gint64 answered_at_ms; /* 0: not answered */
} SbxRecordApproval;

typedef struct {
    const char *tenant_id;   /* NULL: every tenant's and local runs */
    const char *status;      /* NULL: any */
    gint64 created_after_ms; /* 0: no bound (exclusive) */
    gint64 created_before_ms;
    /* The cursor: records older than (created_at, id) of the last one of the previous page
     * (newest first); cursor_id NULL: from the newest. */
    gint64 cursor_created_ms;
    const char *cursor_id;
    guint limit;            /* 0: SBX_RECORDS_LIST_DEFAULT; capped at SBX_RECORDS_LIST_MAX */
    const char *session_id; /* NULL: any; else only the executions of that session */
    /* Oldest first (a session's executions in the order they ran): the cursor then means
     * records newer than (created_at, id) of the previous page's last one. */
    gboolean oldest_first;
} SbxRecordFilter;

void sbx_record_free(SbxRecord *rec);
void sbx_record_call_free(SbxRecordCall *call);
void sbx_record_approval_free(SbxRecordApproval *approval);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxRecord, sbx_record_free)

/**
 * Record that execution @rec->id starts (status "running", or "queued" if @rec->status says
 * so), with what runs and how (id, front_end, language, code, ... guest_clock_ms); the outcome
 * fields are ignored. SBX_STORE_ERROR_EXISTS if the id is taken.
 */
gboolean sbx_records_begin(SbxStore *store, const SbxRecord *rec, GError **error);

/**
 * Record the end of execution @rec->id: its status (not "running" or "queued"), exit code,
 * result, error, output (each stream cut at SBX_RECORD_OUTPUT_MAX and flagged), timings, and
 * its @calls and @approvals, in one transaction: durable when this returns TRUE.
 */
gboolean sbx_records_finish(SbxStore *store, const SbxRecord *rec, const SbxRecordCall *calls,
                            gsize n_calls, const SbxRecordApproval *approvals, gsize n_approvals,
                            GError **error);

/**
 * Record @id whole. With @tenant_id, only a record of that tenant: another's is
 * SBX_STORE_ERROR_NOT_FOUND, as a missing one (NULL: any record, the operator's view).
 */
gboolean sbx_records_get(SbxStore *store, const char *tenant_id, const char *id, SbxRecord **ret,
                         GError **error);

/**
 * The tool calls (SbxRecordCall *) and approvals (SbxRecordApproval *) of record @id, in order;
 * the arrays own them. @tenant_id as for sbx_records_get().
 */
gboolean sbx_records_get_calls(SbxStore *store, const char *tenant_id, const char *id,
                               GPtrArray **ret_calls, GPtrArray **ret_approvals, GError **error);

/**
 * Records matching @f (NULL: all), newest first, at most its limit: SbxRecord * without code,
 * arguments, result, error and output (read those with sbx_records_get()).
 */
gboolean sbx_records_list(SbxStore *store, const SbxRecordFilter *f, GPtrArray **ret,
                          GError **error);

/* What sbx_records_prune() deletes: each bound 0 is no such bound. */
typedef struct {
    guint64 max_age_s; /* finished records created more than this ago */
    guint64 max_count; /* all but the newest this many finished ones */
    guint64 max_bytes; /* then the oldest finished ones until the rest's sizes fit in this */
    guint max_deleted; /* at most this many deleted by max_bytes in one call */
} SbxRecordsPrune;

/**
 * Delete finished records (not running or queued) by @bounds: created more than max_age_s ago,
 * all but the newest max_count finished ones, then the oldest finished ones until the sizes of
 * those left sum to at most max_bytes (at most max_deleted of them: *@ret_more is then TRUE
 * when that many went and more may have to); their tool calls and approvals go with them. A
 * record's size is the bytes of its texts, output, tool calls and approvals, computed when it
 * is finished (or interrupted); a running one counts for nothing and is never deleted. Then,
 * in the same transaction, session records (sessions.h) by the rules of age and count: ended
 * sessions created more than max_age_s ago and all but the newest max_count ended ones, each
 * only once none of its execution records is left (an open session is never deleted; a session
 * has no size). *@ret_deleted and *@ret_sessions (any of the three may be NULL): how many
 * records and sessions. The file does not shrink: SQLite reuses the pages freed.
 */
gboolean sbx_records_prune(SbxStore *store, const SbxRecordsPrune *bounds, guint *ret_deleted,
                           guint *ret_sessions, gboolean *ret_more, GError **error);

/** What sbx_records_set_on_finished() calls: @size_bytes, the size of the record finished. */
typedef void (*SbxRecordsFinishedFunc)(guint64 size_bytes, gpointer data);

/**
 * Call @func (NULL: nothing) with @data after each sbx_records_finish() on @store that
 * committed, in its caller's thread: how a server's retention learns how many bytes were
 * written since it last pruned (server/retention.h). One at a time: a second replaces the first.
 */
void sbx_records_set_on_finished(SbxStore *store, SbxRecordsFinishedFunc func, gpointer data);

/** @rec as a JSON object, a new string (fields list leaves out are null). */
char *sbx_record_to_json(const SbxRecord *rec);

/**
 * @rec with its tool calls and approvals (either may be NULL: not shown) as a JSON object with
 * "tool_calls" and "approvals" arrays, a new string.
 */
char *sbx_record_to_json_full(const SbxRecord *rec, const GPtrArray *calls,
                              const GPtrArray *approvals);

/* The portable form's format (sbx_record_to_portable_json()): bumped when its fields change. */
#define SBX_RECORD_PORTABLE_FORMAT "sbx-record-1"

/* A portable record: five texts at SBX_RECORD_TEXT_MAX (code, args, kwargs, result, error),
 * both outputs as base64, and up to SBX_RECORD_CALLS_MAX calls whose inputs and results are
 * what a tool answered (bounded by the session's 4 MiB frames, most far smaller): 64 MiB holds
 * any record the store keeps but the most extreme, and bounds what a bundle makes us parse. */
#define SBX_RECORD_PORTABLE_MAX (64 * 1024 * 1024)

/**
 * @rec with its tool calls and approvals (either may be NULL: none) in the portable form, a
 * new string: every field, output as base64, JSON fields as strings holding their text (so
 * nothing is lost, whatever the output's bytes or the JSON's depth). For bundles (replay/).
 */
char *sbx_record_to_portable_json(const SbxRecord *rec, const GPtrArray *calls,
                                  const GPtrArray *approvals);

/**
 * Parse @len bytes of @text, a record in the portable form (untrusted: from another machine):
 * every field present with its type, texts within SBX_RECORD_TEXT_MAX, JSON fields valid JSON,
 * output within SBX_RECORD_OUTPUT_MAX, at most SBX_RECORD_CALLS_MAX calls and approvals.
 * *@ret_rec, *@ret_calls (SbxRecordCall *) and *@ret_approvals (SbxRecordApproval *) are the
 * caller's; FALSE with SBX_STORE_ERROR_INVALID saying which field is wrong.
 */
gboolean sbx_record_from_json(const char *text, gsize len, SbxRecord **ret_rec,
                              GPtrArray **ret_calls, GPtrArray **ret_approvals, GError **error);

/**
 * The snapshot keys the records of @store name (each once; a set of strings, the caller's):
 * what the snapshot collection must keep for replays (vm/snapshot-pin.h, docs/snapshot.md).
 */
gboolean sbx_records_snapshot_keys(SbxStore *store, GHashTable **ret, GError **error);
