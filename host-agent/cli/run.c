/*
 * `sandbox run [OPTIONS] FILE|-`: run one program in a fresh VM and exit with its exit code.
 *
 * Load the profile, the image and the tool catalog; start the VM; take the channel to the guest
 * agent while the tools start (MCP servers list their tools); run the execution (output streamed
 * live, or collected for --json); relay tool calls to the providers; then kill the VM, wait for
 * every provider process to be reaped, and exit.
 * docs/cli.md is the user's side of this file.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/language.h"
#include "cli/out.h"
#include "cli/outcome.h"
#include "cli/prompt.h"
#include "cli/relay.h"
#include "cli/report.h"
#include "cli/serve-client.h"
#include "session.h"
#include "tools.h"
#include "vm.h"

/*
 * Largest --output-limit. In --json mode output is kept in memory up to the limit, so the
 * limit is also the host memory one run may use for output; 1 GiB is already generous.
 */
#define RUN_OUTPUT_LIMIT_MAX (1024ull * 1024 * 1024)

/* Largest --timeout: a day. An execution meant to run longer is a mistake in the request. */
#define RUN_TIMEOUT_MAX_S 86400.0

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
    gboolean json;
    gboolean debug;
    gboolean cold;
    gboolean no_serve;
    /* inputs */
    char *file;
    char *code;
    SbxLanguage language;
    guint timeout_ms;
    guint64 output_limit;
    SbxProfile *profile;
    SbxImage *image;
    SbxSnapshot *snapshot; /* restore from it; NULL with --cold */
    SbxCatalog *catalog;   /* checked, until the tools are built from it */
    SbxTools *tools;
    gboolean tools_ready;    /* MCP servers started and listed, in parallel with the VM start */
    char *tools_error;       /* they could not be */
    SbxApprovals *approvals; /* asked on the terminal (prompt), if there is one */
    SbxPrompt *prompt;
    /* running */
    SbxVm *vm;
    SbxSession *session;
    GCancellable *cancel; /* the VM start and the tool calls */
    gboolean vm_started;
    gboolean finished;          /* the execution ended, or never could start */
    gboolean reported;          /* the end was printed and the loop told to quit */
    const SbxRunResult *result; /* owned by the session */
    char *failure;              /* the sandbox failed before an execution result */
    SbxOut *out;                /* our stdout and stderr, never blocking the loop (out.h) */
} RunCtx;

/* ---- exit and report ---------------------------------------------------------------------- */

/* A one-line summary on stderr of how a streamed run ended, if not plainly. */
static void print_summary(RunCtx *ctx)
{
    const SbxRunResult *r = ctx->result;
    g_autofree char *text = sbx_outcome_summary(r, ctx->failure, ctx->output_limit);

    sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
    if (ctx->debug && ctx->vm != NULL && r != NULL && r->status != SBX_STATUS_OK) {
        g_autofree char *tail = g_strdup_printf("sandbox: guest console (last lines):\n%s\n",
                                                sbx_vm_console_tail(ctx->vm));
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, tail);
    }
}

/* Restore-to-ready (the whole start, RAM copy included) or cold boot to ready. */
static gint64 start_us(RunCtx *ctx)
{
    SbxVmRestoreTimes t;

    if (!ctx->vm_started) {
        return 0;
    }
    if (!sbx_vm_restored(ctx->vm)) {
        return sbx_vm_boot_us(ctx->vm);
    }
    sbx_vm_restore_times(ctx->vm, &t);
    return t.total;
}

static void print_report(RunCtx *ctx)
{
    gint64 boot_us = start_us(ctx);
    SbxReport rep = {
        .result = ctx->result,
        .failure = ctx->failure,
        .failure_status = ctx->cli->signal != 0 ? SBX_STATUS_TERMINATED : SBX_STATUS_CRASH,
        .ns = ctx->tools != NULL ? sbx_tools_namespace(ctx->tools) : NULL,
        .boot_ms = boot_us > 0 ? boot_us / 1000 : -1,
    };
    g_autofree char *json = sbx_report_json(&rep);
    /* Which start it was, as the report's first member (the report is one JSON object). */
    g_assert(json[0] == '{');
    g_autofree char *text = g_strdup_printf("{\"start\":\"%s\"%s%s", ctx->cold ? "cold" : "restore",
                                            json[1] == '}' ? "" : ",", json + 1);
    sbx_out_json(ctx->out, SBX_STREAM_STDOUT, text, strlen(text));
}

/* Quit once the execution is over and every provider process has been reaped. */
static void maybe_finish(RunCtx *ctx)
{
    if (ctx->reported || !ctx->finished ||
        (ctx->tools != NULL && sbx_tools_in_flight(ctx->tools) > 0)) {
        return;
    }
    ctx->reported = TRUE; /* other sources of this loop iteration may still run */
    int code = ctx->result != NULL ? sbx_outcome_exit_code(ctx->result) : SBX_EXIT_SANDBOX;
    if (ctx->cli->signal != 0) {
        code = SBX_EXIT_SIGNAL_BASE + ctx->cli->signal;
    }
    if (ctx->json) {
        print_report(ctx);
    } else {
        print_summary(ctx);
    }
    if (ctx->debug && ctx->result != NULL) {
        g_autofree char *times = g_strdup_printf(
            "sandbox: %s %" G_GINT64_FORMAT " ms, execution %" G_GUINT64_FORMAT " ms, status %s\n",
            ctx->cold ? "cold boot" : "restore", start_us(ctx) / 1000, ctx->result->duration_ms,
            sbx_status_name(ctx->result->status));
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, times);
    }
    sbx_cli_quit(ctx->cli, code);
}

/* The sandbox failed before (or instead of) an execution result. */
static void fail(RunCtx *ctx, const char *message)
{
    if (ctx->finished) {
        return;
    }
    ctx->failure = g_strdup(message);
    ctx->finished = TRUE;
    g_cancellable_cancel(ctx->cancel);
    if (ctx->vm != NULL) {
        sbx_vm_kill(ctx->vm);
    }
    maybe_finish(ctx);
}

/* ---- session callbacks -------------------------------------------------------------------- */

/* Queued, never written here: a reader that does not keep up must not stop the loop. */
static void on_output(SbxSession *s, SbxStream stream, const guint8 *data, gsize len,
                      gpointer user_data)
{
    RunCtx *ctx = user_data;
    (void)s;

    sbx_out_guest(ctx->out, stream, data, len);
}

static void on_tool_settled(gpointer user_data)
{
    maybe_finish(user_data);
}

static void on_tool_call(SbxSession *s, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json, gpointer user_data)
{
    RunCtx *ctx = user_data;

    sbx_relay_tool_call(s, ctx->tools, call_id, provider, tool, input_json, ctx->cancel,
                        on_tool_settled, ctx);
}

static void on_done(SbxSession *s, const SbxRunResult *result, gpointer user_data)
{
    RunCtx *ctx = user_data;
    (void)s;

    ctx->result = result;
    ctx->finished = TRUE;
    /* One program per VM: nothing of the guest outlives its result. */
    sbx_vm_kill(ctx->vm);
    g_cancellable_cancel(ctx->cancel);
    maybe_finish(ctx);
}

/* ---- VM ------------------------------------------------------------------------------------ */

static void on_vm_exit(SbxVm *vm, const char *reason, gpointer user_data)
{
    RunCtx *ctx = user_data;
    g_autofree char *msg = g_strdup_printf("the VM exited: %s", reason);
    (void)vm;

    if (ctx->session != NULL) {
        sbx_session_abort(ctx->session, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, msg);
    }
    fail(ctx, msg); /* no-op if the execution already ended */
}

static void start_execution(RunCtx *ctx)
{
    /* --json collects the output for the report instead of streaming it. */
    static const SbxSessionCallbacks streaming = {
        .on_output = on_output,
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    static const SbxSessionCallbacks collecting = {
        .on_tool_call = on_tool_call,
        .on_done = on_done,
    };
    g_autoptr(GError) error = NULL;
    gsize n_tools = 0;
    const SbxToolDecl *decls = sbx_tools_decls(ctx->tools, &n_tools);
    SbxRunRequest req = {
        .language = ctx->language,
        .code = ctx->code,
        .tools = decls,
        .n_tools = n_tools,
        .output_limit = ctx->output_limit,
        .timeout_ms = ctx->timeout_ms,
        .collect_output = ctx->json,
    };

    ctx->session = sbx_session_new(sbx_vm_take_channel(ctx->vm),
                                   ctx->json ? &collecting : &streaming, ctx, &error);
    if (ctx->session == NULL || !sbx_session_run(ctx->session, &req, &error)) {
        g_autofree char *msg = g_strdup_printf("cannot start the execution: %s", error->message);
        fail(ctx, msg);
        return;
    }
    sbx_vm_execution_begin(ctx->vm);
}

static void on_vm_started(GObject *src, GAsyncResult *res, gpointer user_data)
{
    RunCtx *ctx = user_data;
    g_autoptr(GError) error = NULL;
    (void)src;

    if (!sbx_vm_start_finish(ctx->vm, res, &error)) {
        g_autofree char *msg = g_strdup_printf("cannot start the VM: %s", error->message);
        fail(ctx, ctx->cli->signal != 0      ? "interrupted while the VM was starting"
                  : ctx->tools_error != NULL ? ctx->tools_error
                                             : msg);
        return;
    }
    ctx->vm_started = TRUE;
    if (ctx->cli->signal != 0) {
        fail(ctx, "interrupted while the VM was starting");
        return;
    }
    sbx_vm_set_exit_handler(ctx->vm, on_vm_exit, ctx);
    if (ctx->tools_error != NULL) {
        fail(ctx, ctx->tools_error);
    } else if (ctx->tools_ready) {
        start_execution(ctx);
    } /* else on_tools_ready starts it */
}

static void on_tools_ready(SbxTools *tools, const GError *error, gpointer user_data)
{
    RunCtx *ctx = user_data;

    for (const char *const *w = sbx_tools_warnings(tools); *w != NULL; w++) {
        g_autofree char *text = g_strdup_printf("sandbox: warning: %s\n", *w);
        sbx_out_text(ctx->out, SBX_STREAM_STDERR, text);
    }
    if (error != NULL) {
        ctx->tools_error = g_strdup_printf("cannot start the tools: %s", error->message);
        g_cancellable_cancel(ctx->cancel); /* the VM start, if still running, fails with it */
        if (ctx->vm_started) {
            fail(ctx, ctx->tools_error);
        }
        return;
    }
    ctx->tools_ready = TRUE;
    if (ctx->vm_started && !ctx->finished) {
        start_execution(ctx);
    }
}

static void on_signal(SbxCli *cli, gpointer data)
{
    RunCtx *ctx = data;
    g_autofree char *msg =
        g_strdup_printf("interrupted by %s", cli->signal == SIGINT ? "SIGINT" : "SIGTERM");

    g_cancellable_cancel(ctx->cancel);
    if (ctx->session != NULL) {
        sbx_session_abort(ctx->session, SBX_STATUS_TERMINATED, SBX_ERR_INTERNAL, msg);
    }
    if (ctx->vm_started) {
        fail(ctx, msg);
    }
    /* Still starting: the cancelled start completes and fails, which finishes the run. */
}

/* ---- inputs -------------------------------------------------------------------------------- */

/* Read the program: at most SBX_FRAME_MAX bytes of UTF-8 without NUL (docs/protocol.md). */
static char *read_program(const char *path, GError **error)
{
    int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
    g_autoptr(GByteArray) buf = g_byte_array_new();
    guint8 chunk[64 * 1024];

    if (fd < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "open `%s`: %s", path,
                    g_strerror(errno));
        return NULL;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0 || buf->len + n > SBX_FRAME_MAX) {
            int err = errno;
            close(fd);
            if (n < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(err), "read `%s`: %s", path,
                            g_strerror(err));
                return NULL;
            }
            if (n > 0) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                            "%s: a program may have at most %u bytes", path, SBX_FRAME_MAX);
                return NULL;
            }
            break;
        }
        g_byte_array_append(buf, chunk, n);
    }
    if (memchr(buf->data, '\0', buf->len) != NULL ||
        !g_utf8_validate((const char *)buf->data, buf->len, NULL)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%s: not UTF-8 text", path);
        return NULL;
    }
    g_byte_array_append(buf, (const guint8 *)"", 1);
    return (char *)g_byte_array_free(g_steal_pointer(&buf), FALSE);
}

static gboolean pick_language(RunCtx *ctx, GError **error)
{
    return sbx_cli_language_pick(ctx->lang_opt, ctx->file, &ctx->language, error);
}

static gboolean parse_timeout(RunCtx *ctx, GError **error)
{
    char *end = NULL;
    double s;

    if (ctx->timeout_opt == NULL) {
        ctx->timeout_ms = SBX_SESSION_TIMEOUT_DEFAULT_MS;
        return TRUE;
    }
    s = g_ascii_strtod(ctx->timeout_opt, &end);
    if (end == ctx->timeout_opt || *end != '\0' || !(s > 0) || s > RUN_TIMEOUT_MAX_S) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--timeout: expected seconds, more than 0 and at most %.0f", RUN_TIMEOUT_MAX_S);
        return FALSE;
    }
    ctx->timeout_ms = (guint)ceil(s * 1000);
    return TRUE;
}

/* BYTES, optionally with a binary suffix: 1048576, 1024K, 1M, 1G. */
static gboolean parse_output_limit(RunCtx *ctx, GError **error)
{
    char *end = NULL;
    guint64 v, mult = 1;

    if (ctx->output_limit_opt == NULL) {
        ctx->output_limit = SBX_SESSION_OUTPUT_LIMIT_DEFAULT;
        return TRUE;
    }
    v = g_ascii_strtoull(ctx->output_limit_opt, &end, 10);
    if (end != ctx->output_limit_opt && *end != '\0' && end[1] == '\0') {
        mult = *end == 'K' || *end == 'k' ? 1024
               : *end == 'M'              ? 1024 * 1024
               : *end == 'G'              ? 1024 * 1024 * 1024
                                          : 0;
        end += mult != 0;
    }
    if (end == ctx->output_limit_opt || *end != '\0' || v == 0 || mult == 0 ||
        v > RUN_OUTPUT_LIMIT_MAX / mult) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--output-limit: expected 1 to %llu bytes (suffixes K, M, G allowed)",
                    RUN_OUTPUT_LIMIT_MAX);
        return FALSE;
    }
    ctx->output_limit = v * mult;
    return TRUE;
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
    return parse_timeout(ctx, error) && parse_output_limit(ctx, error) && pick_language(ctx, error);
}

/* Everything from the user: options, program, catalog. A failure is invalid usage. */
static gboolean load_user_inputs(RunCtx *ctx, int argc, char **argv, GError **error)
{
    if (!parse_options(ctx, argc, argv, error)) {
        return FALSE;
    }
    ctx->code = read_program(ctx->file, error);
    if (ctx->code == NULL) {
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
 * (the pool holds restored VMs) nor --debug (the guest console is the server's).
 */
static gboolean try_serve(RunCtx *ctx)
{
    SbxServeClientRequest req = {
        .language = ctx->language,
        .code = ctx->code,
        .tools_path = ctx->tools_path,
        .timeout_ms = ctx->timeout_ms,
        .output_limit = ctx->output_limit,
        .profile = ctx->profile_name,
        .json = ctx->json,
        .out = ctx->out,
    };

    return !ctx->cold && !ctx->debug && !ctx->no_serve && sbx_serve_client_try(ctx->cli, &req);
}

static int run_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    RunCtx *ctx = run_ctx = g_new0(RunCtx, 1);

    ctx->cli = cli;
    ctx->cancel = g_cancellable_new();
    if (!load_user_inputs(ctx, argc, argv, &error)) {
        fprintf(stderr, "sandbox run: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    /* From here on stdout and stderr are written through it, never blocking the loop. */
    ctx->out = sbx_out_new();
    if (try_serve(ctx)) {
        return -1;
    }
    /* Spawns the MCP stdio servers; they list their tools while the VM starts. */
    ctx->tools = sbx_tools_new(g_steal_pointer(&ctx->catalog), &error);
    if (ctx->tools == NULL) {
        fprintf(stderr, "sandbox run: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    /* Approvals are asked on the terminal; without one, such calls are denied at once. */
    ctx->approvals = sbx_approvals_new();
    ctx->prompt = sbx_prompt_new(ctx->approvals);
    if (ctx->prompt != NULL) {
        sbx_tools_set_approvals(ctx->tools, ctx->approvals, NULL);
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
        ctx->finished = TRUE;
        ctx->failure = g_strdup(error->message);
        ctx->json ? print_report(ctx) : print_summary(ctx);
        return SBX_EXIT_SANDBOX;
    }
    SbxVmOptions opts = {.console_to_stderr = ctx->debug, .snapshot = ctx->snapshot};
    ctx->vm = sbx_vm_new(ctx->profile, ctx->image, &opts);
    cli->on_signal = on_signal;
    cli->data = ctx;
    sbx_vm_start_async(ctx->vm, ctx->cancel, on_vm_started, ctx);
    sbx_tools_start(ctx->tools, on_tools_ready, ctx);
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
    sbx_session_free(ctx->session); /* ctx->result points into it: gone from here on */
    sbx_vm_free(ctx->vm);
    sbx_prompt_free(ctx->prompt);
    sbx_tools_free(ctx->tools);
    sbx_approvals_free(ctx->approvals); /* after the calls: nothing waits any more */
    sbx_catalog_free(ctx->catalog);
    g_free(ctx->tools_error);
    sbx_snapshot_free(ctx->snapshot);
    sbx_image_free(ctx->image);
    sbx_profile_free(ctx->profile);
    /* Last: nothing of the run is left while a slow reader takes the rest (bounded). */
    sbx_out_free(ctx->out);
    g_clear_object(&ctx->cancel);
    g_free(ctx->failure);
    g_free(ctx->code);
    g_free(ctx->file);
    g_free(ctx->lang_opt);
    g_free(ctx->profile_name);
    g_free(ctx->tools_path);
    g_free(ctx->timeout_opt);
    g_free(ctx->output_limit_opt);
    g_free(ctx);
    run_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_run = {
    .name = "run",
    .summary = "Run a program (JavaScript or Python) in a fresh VM",
    .start = run_start,
    .cleanup = run_cleanup,
};
