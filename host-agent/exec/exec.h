/*
 * The execution core: one object that owns an execution from its start to its outcome, shared
 * by every front end (`sandbox run`, `sandbox serve`'s socket, the HTTP API). It gets a VM from
 * its source (source.h: a restore, a cold boot, a pool's claim) while the tools start (MCP
 * servers list their tools), runs the program through a session, relays the guest's tool calls
 * to the providers, kills the VM when the execution ends (one execution per VM), waits until
 * every provider process is reaped, and then tells its sink, where events go (a terminal, a
 * socket client, an HTTP stream), that it is done. The front ends parse requests and print;
 * the state machine is here, once.
 *
 * Runs on the GLib main loop of the thread that made it. Never free an exec from inside one of
 * its sink's callbacks (they may run inside a session callback): free it later, e.g. from an
 * idle callback.
 */
#pragma once

#include <gio/gio.h>

#include "approvals.h"
#include "exec/exec-files.h"
#include "exec/source.h"
#include "protocol/message.h"
#include "session.h"
#include "store/db.h"
#include "store/records.h"
#include "tools.h"

typedef struct SbxExec SbxExec;

/* What to run, checked by the front end (the call: exec/call.h). The strings are copied. */
typedef struct {
    const char *id; /* the front end's id for it (sbx_id_valid()), or NULL: a new random one */
    SbxLanguage language;
    const char *code;
    /* The function to call once the code ran, and its arguments (sbx_exec_call_check()). */
    const char *entry;       /* or NULL */
    const char *args_json;   /* a JSON array's text, or NULL */
    const char *kwargs_json; /* a JSON object's text (Python), or NULL */
    guint timeout_ms;        /* 0: SBX_SESSION_TIMEOUT_DEFAULT_MS */
    guint64 output_limit;    /* 0: SBX_SESSION_OUTPUT_LIMIT_DEFAULT */
    gboolean collect_output; /* keep the output for the report instead of streaming it */
    gboolean keep; /* a session's: the guest keeps its runner's state (SbxRunResult.kept) */
    /* Files put into the workspace before the execute (exec-files.h; bytes referenced). */
    const SbxExecFileIn *files;
    gsize n_files;
    /* Stage those and collect the files the program created or changed (sbx_exec_files()). */
    gboolean with_files;
    /* A replay's (docs/protocol.md, "Replay"): the record's seed of the runners' generators,
     * SBX_SEED_BYTES, used instead of a fresh one (NULL: fresh), and its clock log (NULL: not
     * a replay; else n_clock_log reads, at most SBX_CLOCK_READS_MAX). Copied. */
    const guint8 *seed;
    const guint64 *clock_log;
    gsize n_clock_log;
    /* A replay's order of asynchronous deliveries (a record's event_log: NULL, none; else
     * n_event_log entries, at most SBX_EVENT_LOG_MAX; copied), and its log_open: the original
     * was killed after its logs' last entries, so the replay waits past their ends. */
    const guint64 *event_log;
    gsize n_event_log;
    gboolean log_open;
} SbxExecRequest;

/* Where the events go. Every member is optional except done. */
typedef struct {
    /* The execution started (a server's job left its queue): its VM is being acquired. */
    void (*started)(gpointer data);
    /* Output accepted (within the limit), as it comes; not when collected. */
    void (*output)(gpointer data, SbxStream stream, const guint8 *bytes, gsize len);
    /* The same when collected (the report has it too): to show it live. Optional. */
    void (*collected_output)(gpointer data, SbxStream stream, const guint8 *bytes, gsize len);
    /* A tool call of the guest (real names, its input's JSON), on its way to the provider. */
    void (*tool_call)(gpointer data, guint32 call_id, const char *provider, const char *tool,
                      const char *input_json);
    /* Its answer went back to the guest (@ok: a result), or it was dropped at the end. */
    void (*tool_result)(gpointer data, guint32 call_id, gboolean ok, guint64 duration_ms);
    /* The tools started: their warnings (an MCP server's schema left unchecked, ...). */
    void (*warnings)(gpointer data, const char *const *warnings);
    /* The execution is over and every tool process reaped: the outcome can be read. Once. */
    void (*done)(gpointer data, SbxExec *exec);
} SbxExecSink;

/* Who runs the execution and on what, for its record (docs/service.md, "Records"). Copied. */
typedef struct {
    const char *tenant_id;    /* NULL: a local run */
    const char *front_end;    /* "run", "serve", "http" */
    const char *profile;      /* the machine profile's name */
    const char *snapshot_key; /* NULL: a cold boot */
    const char *image_id;
    const char *catalog;        /* the tool catalog an API request named, or NULL */
    const char *session_id;     /* the session it runs in (store/sessions.h), or NULL: none */
    gint64 created_at_ms;       /* when the front end took the request (unix ms); 0: at the start */
    const char *not_replayable; /* the front end's reason a replay cannot redo it, or NULL */
} SbxExecRecordInfo;

/**
 * An execution of @req with @tools (taken; NULL: none) on a VM from @src (taken). Nothing
 * starts until sbx_exec_start(). @sink must outlive the exec.
 */
SbxExec *sbx_exec_new(const SbxExecRequest *req, SbxTools *tools, SbxExecSource *src,
                      const SbxExecSink *sink, gpointer sink_data);

/**
 * Record the execution in @store (which must outlive the exec): begun (status running) at
 * sbx_exec_start(), finished just before the sink's done, with the outcome, the output (kept up
 * to the record's cap also when streamed), the tool calls, their approvals, and the entropy and
 * clock the guest was given. Call before sbx_exec_start(). A store that fails does not fail the
 * execution: see sbx_exec_record_error().
 */
void sbx_exec_set_record(SbxExec *exec, SbxStore *store, const SbxExecRecordInfo *info);

/** The execution id (the session's, and the record's), from sbx_exec_new() on. */
const char *sbx_exec_id(const SbxExec *exec);

/** Why the record could not be written (the first failure), or NULL: a warning to print. */
const char *sbx_exec_record_error(const SbxExec *exec);

/**
 * Start: the VM's acquire and the tools' start, in parallel; the execute once both are ready.
 * Every failure ends in the sink's done, with sbx_exec_failure() set.
 */
void sbx_exec_start(SbxExec *exec);

/**
 * End the execution now with @status (terminated, cancelled) and @why: a signal, a client gone,
 * a shutdown. Before the VM is in hand the acquire is cancelled and the exec ends once it has
 * returned. No-op once the execution ended.
 */
void sbx_exec_abort(SbxExec *exec, SbxStatus status, const char *why);

/** The execution's result (owned by the exec), or NULL if none ran (see sbx_exec_failure()). */
const SbxRunResult *sbx_exec_result(const SbxExec *exec);

/** Why the sandbox failed before an execution result, or NULL. */
const char *sbx_exec_failure(const SbxExec *exec);

/** The status of such a failure (crash, or terminated/cancelled by an abort). */
SbxStatus sbx_exec_failure_status(const SbxExec *exec);

/** The exit code `sandbox run` ends with (docs/cli.md); only after done. */
int sbx_exec_exit_code(const SbxExec *exec);

/** What a streamed run prints on stderr at its end (may be ""; caller frees). */
char *sbx_exec_summary(const SbxExec *exec);

/**
 * The report (`sandbox run --json`'s object, docs/cli.md): `start` and the source's members
 * first, then @extra (members with a leading comma, or NULL), then the execution's. Caller frees.
 */
char *sbx_exec_report_json(const SbxExec *exec, const char *extra);

/**
 * The execution's files (with_files), once done: the collected ones (sbx_exec_files_out()).
 * NULL without with_files.
 */
const SbxExecFiles *sbx_exec_files(const SbxExec *exec);

/**
 * The API's `files` object of the execution (sbx_exec_files_json(), with why none were
 * collected), or NULL without with_files. Caller frees.
 */
char *sbx_exec_files_json_of(const SbxExec *exec, gboolean with_content);

/**
 * Once done: the outcome as the execution's record holds it (store/records.h: status, exit code,
 * result, error, output cut at the record's cap) and its tool calls with their answers
 * (*@ret_calls, SbxRecordCall*), whether or not it is recorded: what a replay compares.
 * Caller frees both.
 */
SbxRecord *sbx_exec_outcome_record(const SbxExec *exec, GPtrArray **ret_calls);

/** The VM, once acquired (its console, its PIDs), else NULL. */
SbxVm *sbx_exec_vm(const SbxExec *exec);

/** The tools (their warnings, namespace), or NULL. */
SbxTools *sbx_exec_tools(const SbxExec *exec);

/** The VM's start in milliseconds (restore-to-ready, boot), -1 if unknown. */
gint64 sbx_exec_boot_ms(const SbxExec *exec);

/** Whether the execution ended (the sink's done may still wait for tool processes). */
gboolean sbx_exec_finished(const SbxExec *exec);

/** Free @exec (accepts NULL): its VM is killed and its tool processes with it. */
void sbx_exec_free(SbxExec *exec);
