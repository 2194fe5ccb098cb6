/*
 * `sandbox run [OPTIONS] FILE|-`: run one program in a fresh VM and exit with its exit code.
 *
 * Load the profile, the image and the tool catalog, and check the function to call if one is
 * given (--entry, --args, --kwargs); start the VM; take the channel to the guest agent while the
 * tools start (MCP servers list their tools); run the execution (output streamed live, or
 * collected for --json); relay tool calls to the providers; then kill the VM, wait for every
 * provider process to be reaped, and exit.
 * docs/cli.md is the user's side of this file.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/language.h"
#include "cli/out.h"
#include "cli/program.h"
#include "cli/prompt.h"
#include "cli/run-files.h"
#include "cli/run-replay.h"
#include "cli/serve-client.h"
#include "cli/store-open.h"
#include "exec/exec.h"
#include "exec/outcome.h"
#include "exec/report.h"
#include "session.h"
#include "store/db.h"
#include "tools.h"
#include "vm.h"

/*
 * Default machine profiles. A restore is fastest over virtio-serial (in the snapshot, RAM mapped
 * copy-on-write: ~35-60 ms to the channel instead of ~140-190 ms with the bridge's vsock, and
 * less memory per VM; docs/snapshot.md "Channel attachments"); q35-serial's pooled executions
 * measured steadier than microvm-serial's. A cold boot is fastest on microvm
 * (shared/FINDINGS.md).
 */
#define RUN_PROFILE_DEFAULT "q35-serial"
#define RUN_PROFILE_DEFAULT_COLD "microvm"

typedef struct {
    SbxCli *cli;
    /* options */
    char *lang_opt;
    char *profile_name;
    char *tools_path;
    char *timeout_opt;
    char *output_limit_opt;
    char *entry;      /* --entry */
    char *args_opt;   /* --args, as given */
    char *kwargs_opt; /* --kwargs, as given */
    gboolean json;
    gboolean debug;
    gboolean cold;
    gboolean no_serve;
    char **puts;                 /* --put LOCAL[=REMOTE], repeated */
    char *files_out;             /* --files-out DIR */
    char *seed_opt;              /* --seed HEX, as given */
    char *clock_log_path;        /* --clock-log FILE */
    guint8 seed[SBX_SEED_BYTES]; /* --seed, parsed */
    guint64 *clock_log;          /* --clock-log's reads, or NULL */
    gsize n_clock_log;
    char *event_log_path; /* --event-log FILE */
    guint64 *event_log;   /* --event-log's entries, or NULL */
    gsize n_event_log;
    gboolean log_open; /* --log-open */
    /* inputs */
    char *file;
    char *code;
    SbxLanguage language;
    guint timeout_ms;
    guint64 output_limit;
    char *args_json;      /* --args checked and minified (numbers as written), or NULL */
    char *kwargs_json;    /* --kwargs, the same */
    SbxExecFileIn *files; /* --put's, read */
    gsize n_files;
    SbxProfile *profile;
    SbxImage *image;
    SbxSnapshot *snapshot;   /* restore from it; NULL with --cold */
    SbxCatalog *catalog;     /* checked, until the tools are built from it */
    SbxApprovals *approvals; /* asked on the terminal (prompt), if there is one */
    SbxPrompt *prompt;
    /* running: the execution core (exec.h) does the work, this file prints */
    SbxExec *exec;
    SbxStore *store; /* where the execution is recorded, or NULL */
    SbxOut *out;     /* our stdout and stderr, never blocking the loop (out.h) */
} RunCtx;

/* ---- printing ----------------------------------------------------------------------------- */

/* A one-line summary on stderr of how a streamed run ended, if not plainly. */
static void print_summary(RunCtx *ctx)
{
    const SbxRunResult *r = sbx_exec_result(ctx->exec);
    SbxVm *vm = sbx_exec_vm(ctx->exec);
    g_autofree char *text = sbx_exec_summary(ctx->exec);

    sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
    if (ctx->debug && vm != NULL && r != NULL && r->status != SBX_STATUS_OK) {
        g_autofree char *tail =
            g_strdup_printf("sandbox: guest console (last lines):\n%s\n", sbx_vm_console_tail(vm));
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, tail);
    }
}

static gboolean with_files(const RunCtx *ctx)
{
    return ctx->n_files > 0 || ctx->files_out != NULL;
}

/* The report, with the files object (without their contents: --files-out has them). */
static void print_report(RunCtx *ctx)
{
    g_autofree char *files = sbx_exec_files_json_of(ctx->exec, FALSE);
    g_autofree char *extra = files != NULL ? g_strdup_printf(",\"files\":%s", files) : NULL;
    g_autofree char *text = sbx_exec_report_json(ctx->exec, extra);

    sbx_out_json(ctx->out, SBX_STREAM_STDOUT, text, strlen(text));
}

/* --files-out: the files the program created or changed, and a line each on stderr. */
static void write_files(RunCtx *ctx)
{
    g_autoptr(GString) log = g_string_new(NULL);
    const SbxExecFiles *f = sbx_exec_files(ctx->exec);

    if (f != NULL && sbx_exec_result(ctx->exec) != NULL) {
        sbx_cli_files_write(f, ctx->files_out, log);
    }
    sbx_out_text(ctx->out, SBX_STREAM_STDERR, log->str);
}

/* The execution is over and every provider process reaped: print how it ended, and quit. */
static void on_done(gpointer data, SbxExec *exec)
{
    RunCtx *ctx = data;
    const SbxRunResult *r = sbx_exec_result(exec);
    int code = sbx_exec_exit_code(exec);

    if (ctx->cli->signal != 0) {
        code = SBX_EXIT_SIGNAL_BASE + ctx->cli->signal;
    }
    if (ctx->files_out != NULL) {
        write_files(ctx);
    }
    if (ctx->json) {
        print_report(ctx);
    } else {
        print_summary(ctx);
    }
    if (sbx_exec_record_error(exec) != NULL) {
        g_autofree char *warning = g_strdup_printf("sandbox: warning: the record of this run: %s\n",
                                                   sbx_exec_record_error(exec));
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, warning);
    }
    if (ctx->debug && r != NULL) {
        g_autofree char *times = g_strdup_printf(
            "sandbox: %s %" G_GINT64_FORMAT " ms, execution %" G_GUINT64_FORMAT " ms, status %s\n",
            ctx->cold ? "cold boot" : "restore", sbx_exec_boot_ms(exec), r->duration_ms,
            sbx_status_name(r->status));
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, times);
    }
    sbx_cli_quit(ctx->cli, code);
}

/* Queued, never written here: a reader that does not keep up must not stop the loop. */
static void on_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    RunCtx *ctx = data;

    sbx_out_guest(ctx->out, stream, bytes, len);
}

static void on_warnings(gpointer data, const char *const *warnings)
{
    RunCtx *ctx = data;

    for (const char *const *w = warnings; *w != NULL; w++) {
        g_autofree char *text = g_strdup_printf("sandbox: warning: %s\n", *w);
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
    }
}

/* The sandbox failed before an execution could start (image, profile, snapshot). */
static void print_failure(RunCtx *ctx, const char *failure)
{
    SbxReport rep = {.failure = failure, .failure_status = SBX_STATUS_CRASH, .boot_ms = -1};
    g_autofree char *report = sbx_report_json(&rep);

    if (ctx->json) {
        g_autofree char *text =
            g_strdup_printf("{\"start\":\"%s\",%s", ctx->cold ? "cold" : "restore", report + 1);
        sbx_out_json(ctx->out, SBX_STREAM_STDOUT, text, strlen(text));
    } else {
        g_autofree char *summary = sbx_outcome_summary(NULL, failure, ctx->output_limit);
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, summary);
    }
}

static void on_signal(SbxCli *cli, gpointer data)
{
    RunCtx *ctx = data;
    g_autofree char *msg =
        g_strdup_printf("interrupted by %s", cli->signal == SIGINT ? "SIGINT" : "SIGTERM");

    sbx_exec_abort(ctx->exec, SBX_STATUS_TERMINATED, msg);
}

/* ---- inputs -------------------------------------------------------------------------------- */

static gboolean pick_language(RunCtx *ctx, GError **error)
{
    return sbx_cli_language_pick(ctx->lang_opt, ctx->file, &ctx->language, error);
}

static gboolean parse_options(RunCtx *ctx, int argc, char **argv, GError **error)
{
    const GOptionEntry entries[] = {
        {"lang", 'l', 0, G_OPTION_ARG_STRING, &ctx->lang_opt,
         "Language (default: from the file extension)", "javascript|typescript|python"},
        {"profile", 'p', 0, G_OPTION_ARG_STRING, &ctx->profile_name,
         "Machine profile (default: " RUN_PROFILE_DEFAULT ", with --cold " RUN_PROFILE_DEFAULT_COLD
         ")",
         "NAME"},
        {"tools", 't', 0, G_OPTION_ARG_FILENAME, &ctx->tools_path, "Tool catalog", "FILE"},
        {"timeout", 0, 0, G_OPTION_ARG_STRING, &ctx->timeout_opt,
         "Wall-clock limit of the execution (default: 30)", "SECONDS"},
        {"output-limit", 0, 0, G_OPTION_ARG_STRING, &ctx->output_limit_opt,
         "Cap on stdout+stderr (default: 10M)", "BYTES"},
        /* FILENAME: the bytes as given (no conversion from the locale); checked below. */
        {"entry", 0, 0, G_OPTION_ARG_FILENAME, &ctx->entry,
         "Call this function once the program ran; its value is the result", "NAME"},
        {"args", 0, 0, G_OPTION_ARG_FILENAME, &ctx->args_opt,
         "The function's positional arguments (with --entry)", "JSON-ARRAY"},
        {"kwargs", 0, 0, G_OPTION_ARG_FILENAME, &ctx->kwargs_opt,
         "The function's keyword arguments (with --entry; Python only)", "JSON-OBJECT"},
        {"put", 0, 0, G_OPTION_ARG_FILENAME_ARRAY, &ctx->puts,
         "Put a file into the workspace first (repeatable; REMOTE: its base name)",
         "LOCAL[=REMOTE]"},
        {"files-out", 0, 0, G_OPTION_ARG_FILENAME, &ctx->files_out,
         "Write the files the program created or changed under DIR", "DIR"},
        {"seed", 0, 0, G_OPTION_ARG_STRING, &ctx->seed_opt,
         "Seed the program's random generators with this (a record's seed) instead of a fresh "
         "one",
         "HEX"},
        {"clock-log", 0, 0, G_OPTION_ARG_FILENAME, &ctx->clock_log_path,
         "Replay these clock reads (a record's clock_log, a JSON array) to the program", "FILE"},
        {"event-log", 0, 0, G_OPTION_ARG_FILENAME, &ctx->event_log_path,
         "Deliver timers and tool results in this order (a record's event_log, a JSON array)",
         "FILE"},
        {"log-open", 0, 0, G_OPTION_ARG_NONE, &ctx->log_open,
         "The replayed run was killed (a record's log_open): past the logs' ends, wait", NULL},
        {"json", 0, 0, G_OPTION_ARG_NONE, &ctx->json, "Print one JSON object at the end", NULL},
        {"debug", 0, 0, G_OPTION_ARG_NONE, &ctx->debug, "Show the guest console and timings", NULL},
        {"cold", 0, 0, G_OPTION_ARG_NONE, &ctx->cold,
         "Boot the VM instead of restoring it from the snapshot", NULL},
        {"no-serve", 0, 0, G_OPTION_ARG_NONE, &ctx->no_serve,
         "Restore a VM here even if `sandbox serve` runs", NULL},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(GOptionContext) oc = g_option_context_new("FILE|- - run a program in a fresh VM");
    g_set_prgname("sandbox run");
    g_option_context_add_main_entries(oc, entries, NULL);
    g_option_context_set_description(oc, "Exit status: the program's; 124 timeout, 125 sandbox "
                                         "failure, 2 invalid usage, 130/143 interrupted.\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    if (argc != 2) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    "expected one program file (or - for stdin); see `sandbox run --help`");
        return FALSE;
    }
    ctx->file = g_strdup(argv[1]);
    if (ctx->seed_opt != NULL && !sbx_cli_seed_parse(ctx->seed_opt, ctx->seed, error)) {
        return FALSE;
    }
    if (ctx->clock_log_path != NULL &&
        !sbx_cli_clock_log_read(ctx->clock_log_path, &ctx->clock_log, &ctx->n_clock_log, error)) {
        return FALSE;
    }
    if (ctx->event_log_path != NULL &&
        !sbx_cli_event_log_read(ctx->event_log_path, &ctx->event_log, &ctx->n_event_log, error)) {
        return FALSE;
    }
    return sbx_cli_parse_timeout(ctx->timeout_opt, &ctx->timeout_ms, error) &&
           sbx_cli_parse_output_limit(ctx->output_limit_opt, &ctx->output_limit, error) &&
           pick_language(ctx, error) &&
           sbx_cli_parse_call(ctx->language, ctx->entry, ctx->args_opt, ctx->kwargs_opt,
                              &ctx->args_json, &ctx->kwargs_json, error);
}

/* Everything from the user: options, program, catalog. A failure is invalid usage. */
static gboolean load_user_inputs(RunCtx *ctx, int argc, char **argv, GError **error)
{
    if (!parse_options(ctx, argc, argv, error)) {
        return FALSE;
    }
    ctx->code = sbx_cli_read_program(ctx->file, error);
    if (ctx->code == NULL || !sbx_cli_files_read(ctx->puts, &ctx->files, &ctx->n_files, error)) {
        return FALSE;
    }
    /*
     * Only checked here: the providers (and the host secrets they read) belong to whoever runs
     * the program, `sandbox serve` when it takes the run.
     */
    ctx->catalog = ctx->tools_path != NULL ? sbx_catalog_load(ctx->tools_path, error)
                                           : sbx_catalog_new_empty();
    return ctx->catalog != NULL;
}

/* ---- the verb ------------------------------------------------------------------------------ */

static RunCtx *run_ctx;

static void on_make_snapshot(const char *dir, gpointer data)
{
    RunCtx *ctx = data;

    fprintf(stderr, "sandbox: making the %s snapshot (once per image and profile): %s\n",
            sbx_profile_name(ctx->profile), dir);
}

/* The snapshot to restore from, made first if missing (this blocks: before the loop runs). */
static SbxSnapshot *ensure_snapshot(RunCtx *ctx, GError **error)
{
    SbxSnapshotOptions so = {
        .on_make = on_make_snapshot,
        .user_data = ctx,
        .console_to_stderr = ctx->debug,
    };
    SbxSnapshot *snap = sbx_snapshot_ensure(ctx->profile, ctx->image, &so, error);

    if (snap == NULL) {
        g_prefix_error(error, "no snapshot to restore (--cold boots without one): ");
    }
    return snap;
}

/*
 * Send the run to `sandbox serve`'s warm pool if one answers (docs/pool.md). Not with --cold
 * (the pool holds restored VMs) nor --debug (the guest console is the server's), nor with
 * files (--put, --files-out): the socket's messages do not carry them (a server's VM takes
 * files through a session: `sandbox session put/get`), nor with a replay's inputs (--seed,
 * --clock-log, --event-log, --log-open), which they do not carry either.
 */
static gboolean try_serve(RunCtx *ctx)
{
    SbxServeClientRequest req = {
        .language = ctx->language,
        .code = ctx->code,
        .entry = ctx->entry,
        .args_json = ctx->args_json,
        .kwargs_json = ctx->kwargs_json,
        .tools_path = ctx->tools_path,
        .timeout_ms = ctx->timeout_ms,
        .output_limit = ctx->output_limit,
        .profile = ctx->profile_name,
        .json = ctx->json,
        .out = ctx->out,
    };

    return !ctx->cold && !ctx->debug && !ctx->no_serve && !with_files(ctx) &&
           ctx->seed_opt == NULL && ctx->clock_log == NULL && ctx->event_log == NULL &&
           !ctx->log_open && sbx_serve_client_try(ctx->cli, &req);
}

/*
 * Record the execution in the store (docs/service.md, "Records") unless SANDBOX_RECORDS=off;
 * a store that cannot be opened is a warning, not a failure of the run.
 */
static void set_record(RunCtx *ctx)
{
    ctx->store = sbx_cli_store_open_records(ctx->out, "sandbox: warning: this run is not recorded");
    if (ctx->store == NULL) {
        return;
    }
    SbxExecRecordInfo info = {
        .front_end = "run",
        .profile = sbx_profile_name(ctx->profile),
        .snapshot_key = ctx->snapshot != NULL ? sbx_snapshot_inputs(ctx->snapshot)->key : NULL,
        .image_id = ctx->image->hash,
    };
    sbx_exec_set_record(ctx->exec, ctx->store, &info);
}

static int run_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    RunCtx *ctx = run_ctx = g_new0(RunCtx, 1);

    ctx->cli = cli;
    if (!load_user_inputs(ctx, argc, argv, &error)) {
        fprintf(stderr, "sandbox run: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    /* From here on stdout and stderr are written through it, never blocking the loop. */
    ctx->out = sbx_out_new();
    if (try_serve(ctx)) {
        return -1;
    }
    const char *profile = ctx->profile_name != NULL ? ctx->profile_name
                          : ctx->cold               ? RUN_PROFILE_DEFAULT_COLD
                                                    : RUN_PROFILE_DEFAULT;
    ctx->profile = sbx_profile_load_named(NULL, profile, &error);
    if (ctx->profile != NULL) {
        ctx->image = sbx_image_open_for(ctx->profile, &error);
    }
    if (ctx->image != NULL && !ctx->cold) {
        ctx->snapshot = ensure_snapshot(ctx, &error);
    }
    if (ctx->image == NULL || (!ctx->cold && ctx->snapshot == NULL)) {
        print_failure(ctx, error->message);
        return SBX_EXIT_SANDBOX;
    }
    /* Made once the snapshot is there (making one takes a while, and its failure is the
     * sandbox's, not the catalog's, which load_user_inputs() checked). */
    g_autoptr(SbxTools) tools = sbx_tools_new(g_steal_pointer(&ctx->catalog), &error);
    if (tools == NULL) {
        fprintf(stderr, "sandbox run: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    /* Approvals are asked on the terminal; without one, such calls are denied at once. */
    ctx->approvals = sbx_approvals_new();
    ctx->prompt = sbx_prompt_new(ctx->approvals);
    if (ctx->prompt != NULL) {
        sbx_tools_set_approvals(tools, ctx->approvals, NULL);
    }
    static const SbxExecSink sink = {
        .output = on_output,
        .warnings = on_warnings,
        .done = on_done,
    };
    SbxVmOptions opts = {.console_to_stderr = ctx->debug};
    SbxExecRequest req = {
        .language = ctx->language,
        .code = ctx->code,
        .entry = ctx->entry,
        .args_json = ctx->args_json,
        .kwargs_json = ctx->kwargs_json,
        .timeout_ms = ctx->timeout_ms,
        .output_limit = ctx->output_limit,
        .collect_output = ctx->json, /* --json: the output goes into the report */
        .files = ctx->files,
        .n_files = ctx->n_files,
        .with_files = with_files(ctx),
        .seed = ctx->seed_opt != NULL ? ctx->seed : NULL,
        .clock_log = ctx->clock_log,
        .n_clock_log = ctx->n_clock_log,
        .event_log = ctx->event_log,
        .n_event_log = ctx->n_event_log,
        .log_open = ctx->log_open,
    };
    SbxExecSource *src = sbx_exec_source_new_vm(ctx->profile, ctx->image, ctx->snapshot, &opts);
    ctx->exec = sbx_exec_new(&req, g_steal_pointer(&tools), src, &sink, ctx);
    set_record(ctx);
    cli->on_signal = on_signal;
    cli->data = ctx;
    sbx_exec_start(ctx->exec);
    return -1;
}

static void run_cleanup(SbxCli *cli)
{
    RunCtx *ctx = run_ctx;
    (void)cli;

    if (ctx == NULL) {
        return;
    }
    sbx_serve_client_cleanup();
    sbx_exec_free(ctx->exec); /* its VM and tool processes killed and reaped */
    sbx_store_close(ctx->store);
    sbx_prompt_free(ctx->prompt);
    sbx_approvals_free(ctx->approvals); /* after the calls: nothing waits any more */
    sbx_catalog_free(ctx->catalog);
    sbx_snapshot_free(ctx->snapshot);
    sbx_image_free(ctx->image);
    sbx_profile_free(ctx->profile);
    /* Last: nothing of the run is left while a slow reader takes the rest (bounded). */
    sbx_out_free(ctx->out);
    g_free(ctx->code);
    g_free(ctx->file);
    g_free(ctx->lang_opt);
    g_free(ctx->profile_name);
    g_free(ctx->tools_path);
    g_free(ctx->timeout_opt);
    g_free(ctx->output_limit_opt);
    g_free(ctx->entry);
    g_free(ctx->args_opt);
    g_free(ctx->kwargs_opt);
    g_free(ctx->args_json);
    g_free(ctx->kwargs_json);
    sbx_cli_files_free(ctx->files, ctx->n_files);
    g_strfreev(ctx->puts);
    g_free(ctx->files_out);
    g_free(ctx->seed_opt);
    g_free(ctx->clock_log_path);
    g_free(ctx->clock_log);
    g_free(ctx->event_log_path);
    g_free(ctx->event_log);
    g_free(ctx);
    run_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_run = {
    .name = "run",
    .summary = "Run a program (JavaScript or Python) in a fresh VM",
    .start = run_start,
    .cleanup = run_cleanup,
};
