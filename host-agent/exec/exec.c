/*
 * The execution core's state machine (exec.h): the VM's acquire and the tools' start in
 * parallel, the execute once both are ready, the session's events to the sink, tool calls to
 * the providers, the VM killed at the end, the sink's done once every tool process is reaped.
 */
#include "exec/exec.h"

#include <string.h>

#include "exec/call.h"
#include "exec/exec-record.h"
#include "exec/outcome.h"
#include "exec/relay.h"
#include "exec/report.h"

/*
 * A channel lost under an execution: when QEMU died (killed from outside, crashed), its exit is
 * seen a few milliseconds after the channel's end. The outcome waits this long for it, so it
 * says what happened to the VM rather than blame the guest (tests/hostile/README.md, finding 1);
 * a guest that closed the channel with its VM alive costs this much more before its done.
 */
#define SBX_EXEC_VM_EXIT_GRACE_MS 1000

struct SbxExec {
    char id[SBX_ID_MAX + 1];
    /* the request */
    SbxLanguage language;
    char *code;
    char *entry;       /* or NULL */
    char *args_json;   /* or NULL */
    char *kwargs_json; /* or NULL */
    guint timeout_ms;
    guint64 output_limit;
    gboolean collect_output;
    gboolean keep;
    SbxExecFiles *files; /* with_files; else NULL */
    gsize n_files_in;    /* files put in before the execute */
    guint8 seed[SBX_SEED_BYTES];
    gboolean has_seed;  /* a replay's seed: else the session makes a fresh one */
    guint64 *clock_log; /* a replay's clock log, or NULL */
    gsize n_clock_log;
    guint64 *event_log; /* a replay's event log, or NULL */
    gsize n_event_log;
    gboolean log_open;
    /* where events go */
    const SbxExecSink *sink;
    gpointer sink_data;
    /* the parts */
    SbxExecSource *src;
    SbxTools *tools;
    SbxSession *session;
    GCancellable *cancel; /* the tool calls */
    /* progress */
    gboolean started;
    gboolean acquiring;   /* the source's acquire has not returned yet */
    gboolean vm_ready;    /* a VM in hand */
    gboolean tools_ready; /* started (MCP servers listed their tools) */
    gboolean staging;     /* the files go in before the execute */
    gboolean collecting;  /* the changed files come out after the done */
    char *files_missing;  /* why the files were not collected, or NULL */
    gboolean aborted;     /* sbx_exec_abort(): no files are collected */
    /* A failure or an abort while acquiring: the exec ends with it once the acquire returned. */
    char *pending;
    SbxStatus pending_status;
    /* the end */
    gboolean finished;          /* the execution ended, or never could start */
    gboolean reported;          /* the sink's done ran */
    guint release_source;       /* the VM's release after the end, once the loop is idle */
    guint grace_source;         /* the channel was lost: waiting for the VM's exit */
    const SbxRunResult *result; /* owned by the session */
    char *failure;              /* the sandbox failed before an execution result */
    SbxStatus failure_status;
    /* the record (sbx_exec_set_record()) */
    SbxStore *store; /* NULL: none */
    SbxExecRecordInfo info;
    gboolean record_begun;
    char *record_error;
    gint64 started_at_ms;
    GByteArray *kept[SBX_STREAM__COUNT]; /* streamed output, up to the record's cap */
    gboolean kept_cut[SBX_STREAM__COUNT];
};

/* ---- the record --------------------------------------------------------------------------- */

static void record_input(const SbxExec *exec, SbxExecRecordInput *in, SbxSessionGiven *given,
                         const char *files_json, const char *tools_json)
{
    *in = (SbxExecRecordInput){
        .id = exec->id,
        .info = &exec->info,
        .language = exec->language,
        .code = exec->code,
        .entry = exec->entry,
        .args_json = exec->args_json,
        .kwargs_json = exec->kwargs_json,
        .timeout_ms = exec->timeout_ms,
        .output_limit = exec->output_limit,
        .started_at_ms = exec->started_at_ms,
        .boot_ms = sbx_exec_boot_ms(exec),
        .result = exec->result,
        .failure = exec->failure,
        .failure_status = exec->failure_status,
        .kept = {exec->kept[0], exec->kept[1]},
        .kept_cut = {exec->kept_cut[0], exec->kept_cut[1]},
        .ns = sbx_tools_namespace(exec->tools),
        .given = exec->session != NULL && sbx_session_given(exec->session, given) ? given : NULL,
        .files_json = files_json,
        .files_in = exec->files != NULL && exec->n_files_in > 0,
        .tools_json = tools_json,
    };
}

SbxRecord *sbx_exec_outcome_record(const SbxExec *exec, GPtrArray **ret_calls)
{
    SbxExecRecordInput in;
    SbxSessionGiven given;

    g_return_val_if_fail(exec->reported, NULL);
    record_input(exec, &in, &given, NULL, NULL);
    SbxRecord *r = sbx_exec_record_view(&in, ret_calls);
    explicit_bzero(&given, sizeof(given));
    return r;
}

/* Keep the first failure: the front end warns about it; the execution goes on regardless. */
static void record_failed(SbxExec *exec, GError *error)
{
    if (exec->record_error == NULL) {
        exec->record_error = g_strdup(error->message);
    }
    g_error_free(error);
}

static void record_begin(SbxExec *exec)
{
    SbxExecRecordInput in;
    SbxSessionGiven given;
    GError *error = NULL;

    record_input(exec, &in, &given, NULL, NULL);
    exec->record_begun = sbx_exec_record_begin(exec->store, &in, &error);
    if (!exec->record_begun) {
        record_failed(exec, error);
    }
}

static void record_finish(SbxExec *exec)
{
    SbxExecRecordInput in;
    SbxSessionGiven given;
    GError *error = NULL;

    if (!exec->record_begun) {
        record_begin(exec); /* ended before its start (an abort), or the begin failed */
    }
    g_autofree char *files = sbx_exec_files_json_of(exec, FALSE);
    g_autofree char *tools = exec->tools != NULL ? sbx_tools_given_json(exec->tools) : NULL;
    record_input(exec, &in, &given, files, tools);
    if (exec->record_begun && !sbx_exec_record_finish(exec->store, &in, &error)) {
        record_failed(exec, error);
    }
    explicit_bzero(&given, sizeof(given));
}

/* Streamed output, kept for the record up to its cap; beyond, the stream is flagged cut. */
static void record_output(SbxExec *exec, SbxStream stream, const guint8 *data, gsize len)
{
    GByteArray *kept = exec->kept[stream];
    gsize room = SBX_RECORD_OUTPUT_MAX - kept->len;

    g_byte_array_append(kept, data, MIN(len, room));
    exec->kept_cut[stream] |= len > room;
}

/* ---- the end ------------------------------------------------------------------------------ */

/* Done once the execution is over and every provider process has been reaped. */
static void maybe_finish(SbxExec *exec)
{
    if (exec->reported || !exec->finished || exec->grace_source != 0 || exec->collecting ||
        (exec->tools != NULL && sbx_tools_in_flight(exec->tools) > 0)) {
        return;
    }
    exec->reported = TRUE;
    if (exec->store != NULL) {
        record_finish(exec); /* durable before anyone hears of the end */
    }
    exec->sink->done(exec->sink_data, exec);
}

static void release_vm(SbxExec *exec)
{
    if (exec->vm_ready) {
        exec->src->ops->release(exec->src);
    }
}

/* The sandbox failed before (or instead of) an execution result. */
static void fail(SbxExec *exec, SbxStatus status, const char *message)
{
    if (exec->finished) {
        return;
    }
    exec->failure = g_strdup(message);
    exec->failure_status = status;
    exec->finished = TRUE;
    if (exec->staging) {
        exec->staging = FALSE;
        sbx_exec_files_cancel(exec->files);
    }
    g_cancellable_cancel(exec->cancel);
    release_vm(exec);
    maybe_finish(exec);
}

/* Fail now, or once the acquire returned (its VM, if any, goes with the exec). */
static void fail_when_acquired(SbxExec *exec, SbxStatus status, const char *message)
{
    if (!exec->acquiring) {
        fail(exec, status, message);
        return;
    }
    if (exec->pending == NULL) {
        exec->pending = g_strdup(message);
        exec->pending_status = status;
    }
    g_cancellable_cancel(exec->cancel);
    exec->src->ops->cancel(exec->src);
}

/* ---- session callbacks -------------------------------------------------------------------- */

static void on_output(SbxSession *s, SbxStream stream, const guint8 *data, gsize len,
                      gpointer user_data)
{
    SbxExec *exec = user_data;
    (void)s;

    if (exec->kept[stream] != NULL) {
        record_output(exec, stream, data, len);
    }
    if (!exec->collect_output && exec->sink->output != NULL) {
        exec->sink->output(exec->sink_data, stream, data, len);
    } else if (exec->collect_output && exec->sink->collected_output != NULL) {
        exec->sink->collected_output(exec->sink_data, stream, data, len);
    }
}

static void on_tool_settled(gpointer user_data, guint32 call_id, gboolean ok, guint64 duration_ms)
{
    SbxExec *exec = user_data;

    if (exec->sink->tool_result != NULL) {
        exec->sink->tool_result(exec->sink_data, call_id, ok, duration_ms);
    }
    maybe_finish(exec);
}

static void on_tool_call(SbxSession *s, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json, gpointer user_data)
{
    SbxExec *exec = user_data;

    if (exec->sink->tool_call != NULL) {
        const char *real_provider = provider, *real_tool = tool;
        sbx_namespace_resolve(sbx_tools_namespace(exec->tools), provider, tool, &real_provider,
                              &real_tool);
        exec->sink->tool_call(exec->sink_data, call_id, real_provider, real_tool, input_json);
    }
    sbx_relay_tool_call(s, exec->tools, call_id, provider, tool, input_json, exec->cancel,
                        on_tool_settled, exec);
}

static gboolean release_later(gpointer data)
{
    SbxExec *exec = data;

    exec->release_source = 0;
    release_vm(exec);
    return G_SOURCE_REMOVE;
}

/* The execution is over and its outcome settled: the sink hears of it, then the VM goes. */
static void end_now(SbxExec *exec)
{
    maybe_finish(exec); /* the sink hears of it before the kill's reaping wait */
    /*
     * The kill waits for QEMU's end (tens of ms under load): at low priority, after what the
     * loop has ready, so a front end's answer that the loop writes (HTTP) goes out first. The
     * VM's program has ended; sbx_exec_free() releases it at once if it comes first.
     */
    exec->release_source = g_idle_add_full(G_PRIORITY_LOW, release_later, exec, NULL);
}

static gboolean grace_over(gpointer data)
{
    SbxExec *exec = data;

    exec->grace_source = 0; /* the VM lives: the guest's side closed the channel */
    end_now(exec);
    return G_SOURCE_REMOVE;
}

static void on_collected(SbxExecFiles *files, const GError *error, gpointer data)
{
    SbxExec *exec = data;
    (void)files;

    exec->collecting = FALSE;
    if (error != NULL) {
        exec->files_missing = g_strdup(error->message);
    }
    end_now(exec);
}

static void on_done(SbxSession *s, const SbxRunResult *result, gpointer user_data)
{
    SbxExec *exec = user_data;

    exec->result = result;
    exec->finished = TRUE;
    g_cancellable_cancel(exec->cancel);
    if (result->channel_lost && exec->vm_ready) {
        exec->grace_source = g_timeout_add(SBX_EXEC_VM_EXIT_GRACE_MS, grace_over, exec);
        exec->files_missing = exec->files != NULL ? g_strdup("the guest's channel was lost") : NULL;
        return;
    }
    if (exec->files != NULL && !exec->aborted && sbx_session_is_ready(s)) {
        /* before the sink hears of the end: the files are part of the outcome */
        exec->collecting = TRUE;
        sbx_exec_files_collect(exec->files, s, on_collected, exec);
        return;
    }
    if (exec->files != NULL) {
        exec->files_missing =
            g_strdup(exec->aborted ? "the execution was stopped"
                                   : "the guest agent cannot serve files any more");
    }
    end_now(exec);
}

/* ---- the start ---------------------------------------------------------------------------- */

/*
 * SANDBOX_REPLAY=off: executions are not recorded for a replay (no seed: the runners draw from
 * the kernel and log nothing for it; records say not replayable). For an operator who does not
 * want it, and for scripts/bench to measure what recording costs. Read once.
 */
static gboolean replay_recording_off(void)
{
    static gsize once;
    static gboolean off;

    if (g_once_init_enter(&once)) {
        off = g_strcmp0(g_getenv("SANDBOX_REPLAY"), "off") == 0;
        g_once_init_leave(&once, 1);
    }
    return off;
}

static void run(SbxExec *exec)
{
    /* Collected output goes into the result (the report), and to the sink's collected_output
     * if it has one. */
    static const SbxSessionCallbacks streaming = {
        .on_output = on_output,
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    static const SbxSessionCallbacks collecting = {
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    static const SbxSessionCallbacks collecting_live = {
        .on_output = on_output,
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    g_autoptr(GError) error = NULL;
    gsize n_tools = 0;
    const SbxToolDecl *decls = sbx_tools_decls(exec->tools, &n_tools);
    SbxRunRequest req = {
        .id = exec->id,
        .language = exec->language,
        .code = exec->code,
        .entry = exec->entry,
        .args_json = exec->args_json,
        .kwargs_json = exec->kwargs_json,
        .tools = decls,
        .n_tools = n_tools,
        .output_limit = exec->output_limit,
        .timeout_ms = exec->timeout_ms,
        .collect_output = exec->collect_output,
        .keep = exec->keep,
        .seed = exec->has_seed ? exec->seed : NULL,
        .no_seed = !exec->has_seed && replay_recording_off(),
        .clock_log = exec->clock_log,
        .n_clock_log = exec->n_clock_log,
        .event_log = exec->event_log,
        .n_event_log = exec->n_event_log,
        .log_open = exec->log_open,
    };

    sbx_session_set_callbacks(exec->session,
                              !exec->collect_output                  ? &streaming
                              : exec->sink->collected_output != NULL ? &collecting_live
                                                                     : &collecting,
                              exec);
    if (!sbx_session_run(exec->session, &req, &error)) {
        g_autofree char *msg = g_strdup_printf("cannot start the execution: %s", error->message);
        fail(exec, SBX_STATUS_CRASH, msg);
        return;
    }
    exec->started_at_ms = g_get_real_time() / 1000;
    exec->src->ops->begin(exec->src);
}

static void on_staged(SbxExecFiles *files, const GError *error, gpointer data)
{
    SbxExec *exec = data;
    (void)files;

    exec->staging = FALSE;
    if (error != NULL) {
        fail(exec, SBX_STATUS_CRASH, error->message);
        return;
    }
    run(exec);
}

/* The VM's session taken; the files staged first, if any, then the run. */
static void execute(SbxExec *exec)
{
    g_autoptr(GError) error = NULL;

    exec->session = exec->src->ops->take_session(exec->src, &error);
    if (exec->session == NULL) {
        fail(exec, SBX_STATUS_CRASH, error->message);
        return;
    }
    if (exec->files == NULL) {
        run(exec);
        return;
    }
    exec->staging = TRUE;
    sbx_exec_files_stage(exec->files, exec->session, on_staged, exec);
}

static void maybe_execute(SbxExec *exec)
{
    if (exec->vm_ready && exec->tools_ready && !exec->finished && exec->session == NULL) {
        execute(exec);
    }
}

static void on_vm_exit(SbxExecSource *src, const char *reason, gpointer user_data)
{
    SbxExec *exec = user_data;
    g_autofree char *msg = g_strdup_printf("the VM exited: %s", reason);
    (void)src;

    if (exec->grace_source != 0) {
        /* The channel's end came first: the outcome says why it ended. */
        g_autofree char *why = g_strdup_printf("%s (%s)", msg, exec->result->error.message);
        g_clear_handle_id(&exec->grace_source, g_source_remove);
        sbx_session_amend_error(exec->session, why);
        end_now(exec);
        return;
    }
    if (exec->session != NULL) {
        sbx_session_abort(exec->session, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, msg);
    }
    fail(exec, SBX_STATUS_CRASH, msg); /* no-op if the execution already ended */
}

static void on_acquired(SbxExecSource *src, const GError *error, gpointer data)
{
    SbxExec *exec = data;

    exec->acquiring = FALSE;
    exec->vm_ready = error == NULL;
    if (exec->pending != NULL) {
        fail(exec, exec->pending_status, exec->pending); /* releases the VM, if any */
        return;
    }
    if (error != NULL) {
        fail(exec, SBX_STATUS_CRASH, error->message);
        return;
    }
    src->ops->watch(src, on_vm_exit, exec);
    maybe_execute(exec);
}

static void on_tools_ready(SbxTools *tools, const GError *error, gpointer user_data)
{
    SbxExec *exec = user_data;
    const char *const *warnings = sbx_tools_warnings(tools);

    if (exec->sink->warnings != NULL && warnings != NULL && *warnings != NULL) {
        exec->sink->warnings(exec->sink_data, warnings);
    }
    if (error != NULL) {
        g_autofree char *msg = g_strdup_printf("cannot start the tools: %s", error->message);
        fail_when_acquired(exec, SBX_STATUS_CRASH, msg);
        return;
    }
    exec->tools_ready = TRUE;
    maybe_execute(exec);
}

/* ---- the API ------------------------------------------------------------------------------ */

SbxExec *sbx_exec_new(const SbxExecRequest *req, SbxTools *tools, SbxExecSource *src,
                      const SbxExecSink *sink, gpointer sink_data)
{
    SbxExec *exec = g_new0(SbxExec, 1);

    g_assert(tools != NULL && src != NULL && sink != NULL && sink->done != NULL);
    /* The front end checked the call: a client's text never reaches here unchecked. */
    g_assert(sbx_exec_call_check(req->language, req->entry, req->args_json, req->kwargs_json) ==
             NULL);
    exec->language = req->language;
    exec->code = g_strdup(req->code);
    exec->entry = g_strdup(req->entry);
    exec->args_json = g_strdup(req->args_json);
    exec->kwargs_json = g_strdup(req->kwargs_json);
    exec->timeout_ms = req->timeout_ms;
    exec->output_limit =
        req->output_limit != 0 ? req->output_limit : SBX_SESSION_OUTPUT_LIMIT_DEFAULT;
    exec->collect_output = req->collect_output;
    exec->keep = req->keep;
    exec->files = req->with_files ? sbx_exec_files_new(req->files, req->n_files) : NULL;
    exec->n_files_in = req->n_files;
    g_assert(req->n_clock_log <= SBX_CLOCK_READS_MAX);
    g_assert(req->n_event_log <= SBX_EVENT_LOG_MAX);
    if (req->seed != NULL) {
        memcpy(exec->seed, req->seed, sizeof(exec->seed));
        exec->has_seed = TRUE;
    }
    if (req->clock_log != NULL) {
        exec->clock_log = g_memdup2(req->clock_log, MAX(req->n_clock_log, 1) * sizeof(guint64));
        exec->n_clock_log = req->n_clock_log;
    }
    if (req->event_log != NULL) {
        exec->event_log = g_memdup2(req->event_log, MAX(req->n_event_log, 1) * sizeof(guint64));
        exec->n_event_log = req->n_event_log;
    }
    exec->log_open = req->log_open;
    exec->tools = tools;
    exec->src = src;
    exec->sink = sink;
    exec->sink_data = sink_data;
    exec->cancel = g_cancellable_new();
    exec->failure_status = SBX_STATUS_CRASH;
    if (req->id != NULL) {
        g_assert(sbx_id_valid(req->id)); /* the front end's own id, not a client's text */
        g_strlcpy(exec->id, req->id, sizeof(exec->id));
    } else if (!sbx_session_new_execution_id(exec->id, NULL)) {
        /* No getrandom(): an id only needs to be unique, not secret. */
        g_snprintf(exec->id, sizeof(exec->id), "x%08x%08x", g_random_int(), g_random_int());
    }
    return exec;
}

void sbx_exec_set_record(SbxExec *exec, SbxStore *store, const SbxExecRecordInfo *info)
{
    g_assert(!exec->started && exec->store == NULL && info->front_end != NULL);
    exec->store = store;
    exec->info.tenant_id = g_strdup(info->tenant_id);
    exec->info.front_end = g_strdup(info->front_end);
    exec->info.profile = g_strdup(info->profile);
    exec->info.snapshot_key = g_strdup(info->snapshot_key);
    exec->info.image_id = g_strdup(info->image_id);
    exec->info.catalog = g_strdup(info->catalog);
    exec->info.session_id = g_strdup(info->session_id);
    exec->info.created_at_ms = info->created_at_ms;
    exec->info.not_replayable = g_strdup(info->not_replayable);
    if (!exec->collect_output) {
        for (int i = 0; i < SBX_STREAM__COUNT; i++) {
            exec->kept[i] = g_byte_array_new();
        }
    }
}

const char *sbx_exec_id(const SbxExec *exec)
{
    return exec->id;
}

const char *sbx_exec_record_error(const SbxExec *exec)
{
    return exec->record_error;
}

void sbx_exec_start(SbxExec *exec)
{
    g_assert(!exec->started);
    exec->started = TRUE;
    exec->acquiring = TRUE;
    if (exec->sink->started != NULL) {
        exec->sink->started(exec->sink_data);
    }
    exec->src->ops->acquire(exec->src, on_acquired, exec);
    /* Spawns the MCP stdio servers; they list their tools while the VM starts. */
    sbx_tools_start(exec->tools, on_tools_ready, exec);
    if (exec->store != NULL) {
        record_begin(exec); /* its fsync while the VM starts: both callbacks come from the loop */
    }
}

void sbx_exec_abort(SbxExec *exec, SbxStatus status, const char *why)
{
    if (exec->collecting) {
        /* the program's outcome stands; its files are given up */
        exec->collecting = FALSE;
        sbx_exec_files_cancel(exec->files);
        exec->files_missing = g_strdup_printf("not collected: %s", why);
        end_now(exec);
        return;
    }
    if (exec->finished) {
        return;
    }
    exec->aborted = TRUE;
    g_cancellable_cancel(exec->cancel);
    if (exec->session != NULL) {
        sbx_session_abort(exec->session, status, SBX_ERR_INTERNAL, why); /* ends it: on_done */
    }
    if (!exec->started) {
        fail(exec, status, why);
        return;
    }
    fail_when_acquired(exec, status, why); /* no-op once the execution ended */
}

const SbxRunResult *sbx_exec_result(const SbxExec *exec)
{
    return exec->result;
}

const char *sbx_exec_failure(const SbxExec *exec)
{
    return exec->failure;
}

SbxStatus sbx_exec_failure_status(const SbxExec *exec)
{
    return exec->failure_status;
}

int sbx_exec_exit_code(const SbxExec *exec)
{
    return exec->result != NULL ? sbx_outcome_exit_code(exec->result) : SBX_EXIT_SANDBOX;
}

char *sbx_exec_summary(const SbxExec *exec)
{
    return sbx_outcome_summary(exec->result, exec->failure, exec->output_limit);
}

gint64 sbx_exec_boot_ms(const SbxExec *exec)
{
    gint64 us = exec->vm_ready ? exec->src->ops->boot_us(exec->src) : 0;

    return us > 0 ? us / 1000 : -1;
}

char *sbx_exec_report_json(const SbxExec *exec, const char *extra)
{
    SbxReport rep = {
        .result = exec->result,
        .failure = exec->failure,
        .failure_status = exec->failure_status,
        .ns = sbx_tools_namespace(exec->tools),
        .boot_ms = sbx_exec_boot_ms(exec),
    };
    g_autofree char *report = sbx_report_json(&rep);
    GString *out = g_string_new("{\"start\":");

    sbx_json_append_string(out, exec->src->start, strlen(exec->src->start));
    exec->src->ops->describe(exec->src, out);
    if (extra != NULL) {
        g_string_append(out, extra);
    }
    /* The execution's members, its id (its record's) first: the report is one JSON object. */
    g_string_append_printf(out, ",\"id\":\"%s\"", exec->id);
    g_assert(report[0] == '{');
    if (report[1] != '}') {
        g_string_append_c(out, ',');
    }
    g_string_append(out, report + 1);
    return g_string_free(out, FALSE);
}

const SbxExecFiles *sbx_exec_files(const SbxExec *exec)
{
    return exec->files;
}

char *sbx_exec_files_json_of(const SbxExec *exec, gboolean with_content)
{
    const char *why = exec->files_missing;

    if (exec->files == NULL) {
        return NULL;
    }
    if (why == NULL && exec->result == NULL) {
        why = "the program did not run";
    }
    return sbx_exec_files_json(exec->files, why, with_content);
}

SbxVm *sbx_exec_vm(const SbxExec *exec)
{
    return exec->src->ops->vm(exec->src);
}

SbxTools *sbx_exec_tools(const SbxExec *exec)
{
    return exec->tools;
}

gboolean sbx_exec_finished(const SbxExec *exec)
{
    return exec->finished;
}

void sbx_exec_free(SbxExec *exec)
{
    if (exec == NULL) {
        return;
    }
    g_clear_handle_id(&exec->grace_source, g_source_remove);
    if (exec->release_source != 0) {
        g_clear_handle_id(&exec->release_source, g_source_remove);
        release_vm(exec);
    }
    sbx_exec_files_free(g_steal_pointer(&exec->files)); /* cancels a stage in progress */
    /* exec->result points into the session: gone from here on */
    if (exec->session != NULL && exec->src->ops->give_back != NULL) {
        exec->src->ops->give_back(exec->src, g_steal_pointer(&exec->session));
    }
    sbx_session_free(exec->session);
    sbx_exec_source_free(exec->src); /* kills and reaps the VM */
    sbx_tools_free(exec->tools);     /* kills and reaps the provider processes */
    g_clear_object(&exec->cancel);
    g_free(exec->pending);
    g_free(exec->files_missing);
    g_free(exec->failure);
    g_free(exec->code);
    g_free(exec->entry);
    g_free(exec->args_json);
    g_free(exec->kwargs_json);
    g_free(exec->clock_log);
    g_free(exec->event_log);
    explicit_bzero(exec->seed, sizeof(exec->seed));
    g_free(exec->record_error);
    g_free((char *)exec->info.tenant_id);
    g_free((char *)exec->info.front_end);
    g_free((char *)exec->info.profile);
    g_free((char *)exec->info.snapshot_key);
    g_free((char *)exec->info.image_id);
    g_free((char *)exec->info.catalog);
    g_free((char *)exec->info.session_id);
    g_free((char *)exec->info.not_replayable);
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        if (exec->kept[i] != NULL) {
            g_byte_array_unref(exec->kept[i]);
        }
    }
    g_free(exec);
}
