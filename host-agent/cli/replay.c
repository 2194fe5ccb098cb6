/*
 * `sandbox replay [--live --tools FILE] [--json] [--db PATH] ID | --bundle FILE`: run a
 * recorded execution again on its snapshot with its seed, clock reads and recorded tool
 * results, and say whether it did the same (docs/cli.md, docs/replay.md). Exit 0 identical, 1
 * diverged, 2 cannot replay. A bundle (`sandbox records export`) brings its record, snapshot,
 * image and profile: no store is read.
 *
 * The record and its machine are found first (replay/replay.c), so that whatever is missing is
 * said before a VM starts; the execution core runs the replay; replay/verdict.c compares.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/json-builder.h"
#include "base/paths.h"
#include "cli/cli.h"
#include "cli/out.h"
#include "cli/store-open.h"
#include "replay/bundle.h"
#include "replay/replay.h"
#include "tools.h"

#define VERB "sandbox replay"

/* Exit statuses (docs/cli.md, "sandbox replay"). */
#define REPLAY_EXIT_IDENTICAL 0
#define REPLAY_EXIT_DIVERGED 1
#define REPLAY_EXIT_CANNOT 2

typedef struct {
    SbxCli *cli;
    /* options */
    gboolean json;
    gboolean live;
    char *tools_path;
    char *db;
    char *bundle_path;
    char *id; /* the record's (a bundle's, once open) */
    /* running */
    SbxBundle *bundle; /* --bundle's, unpacked in the state directory until the end */
    SbxReplayMachine machine;
    SbxReplayRun *run;
    SbxOut *out;
} ReplayCtx;

static ReplayCtx *replay_ctx;

/* It cannot be replayed here: why, on stderr (or as the JSON verdict), and exit 2. */
static int cannot(ReplayCtx *ctx, const char *verdict, const char *why)
{
    if (ctx->json) {
        g_autoptr(GString) s = g_string_new("{\"id\":");
        sbx_json_append_string(s, ctx->id, strlen(ctx->id));
        g_string_append_printf(s, ",\"verdict\":\"%s\",\"reason\":", verdict);
        sbx_json_append_string(s, why, strlen(why));
        g_string_append(s, "}\n");
        fputs(s->str, stdout);
    } else {
        fprintf(stderr, VERB ": %s\n", why);
    }
    return REPLAY_EXIT_CANNOT;
}

static void print_verdict(ReplayCtx *ctx, const GPtrArray *diffs)
{
    const SbxReplay *target = sbx_replay_run_target(ctx->run);
    gint64 ms = sbx_replay_run_duration_ms(ctx->run);

    if (ctx->json) {
        g_autofree char *json = sbx_replay_verdict_json(target, diffs, ctx->live, ms);
        sbx_out_json(ctx->out, SBX_STREAM_STDOUT, json, strlen(json));
        sbx_out_text(ctx->out, SBX_STREAM_STDOUT, "\n");
        return;
    }
    g_autoptr(GString) s = g_string_new(diffs->len == 0 ? "identical\n" : "diverged\n");
    /* A replay names its first divergence; a live one shows everything that changed. */
    for (guint i = 0; i < diffs->len && (i == 0 || ctx->live); i++) {
        g_autofree char *line = sbx_replay_diff_text(g_ptr_array_index(diffs, i));
        g_string_append_printf(s, "%s %s\n", i == 0 ? "first divergence:" : "also:", line);
    }
    sbx_out_text(ctx->out, SBX_STREAM_STDOUT, s->str);
}

static void on_done(SbxReplayRun *run, gpointer data)
{
    ReplayCtx *ctx = data;

    if (ctx->cli->signal != 0) {
        sbx_cli_quit(ctx->cli, SBX_EXIT_SIGNAL_BASE + ctx->cli->signal);
        return;
    }
    if (sbx_replay_run_failure(run) != NULL) {
        sbx_cli_quit(ctx->cli, cannot(ctx, "cannot_replay", sbx_replay_run_failure(run)));
        return;
    }
    const GPtrArray *diffs = sbx_replay_run_diffs(run);
    print_verdict(ctx, diffs);
    sbx_cli_quit(ctx->cli, diffs->len == 0 ? REPLAY_EXIT_IDENTICAL : REPLAY_EXIT_DIVERGED);
}

static void on_signal(SbxCli *cli, gpointer data)
{
    ReplayCtx *ctx = data;
    g_autofree char *why =
        g_strdup_printf("interrupted by %s", cli->signal == SIGINT ? "SIGINT" : "SIGTERM");

    sbx_replay_run_abort(ctx->run, why);
}

static gboolean parse_options(ReplayCtx *ctx, int argc, char **argv, GError **error)
{
    const GOptionEntry entries[] = {
        {"live", 0, 0, G_OPTION_ARG_NONE, &ctx->live,
         "Call the live tools (--tools) instead of answering from the record, and show what "
         "changed",
         NULL},
        {"tools", 't', 0, G_OPTION_ARG_FILENAME, &ctx->tools_path,
         "The tool catalog of a --live replay", "FILE"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &ctx->json, "Print the verdict as one JSON object", NULL},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &ctx->db,
         "The store (default: sandbox.db in the state directory)", "PATH"},
        {"bundle", 0, 0, G_OPTION_ARG_FILENAME, &ctx->bundle_path,
         "Replay the execution of this bundle (sandbox records export) instead of a record of "
         "the store",
         "FILE"},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(GOptionContext) oc =
        g_option_context_new("ID - run a recorded execution again and compare");
    g_set_prgname(VERB);
    g_option_context_add_main_entries(oc, entries, NULL);
    g_option_context_set_description(
        oc, "Exit status: 0 identical, 1 diverged, 2 cannot replay (or invalid usage).\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    if (argc != (ctx->bundle_path != NULL ? 1 : 2)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    ctx->bundle_path != NULL
                        ? "--bundle names the execution: no id with it"
                        : "expected one execution id; see `sandbox replay --help`");
        return FALSE;
    }
    if (ctx->tools_path != NULL && !ctx->live) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    "--tools is for --live: a replay answers tool calls from the record");
        return FALSE;
    }
    ctx->id = g_strdup(ctx->bundle_path != NULL ? ctx->bundle_path : argv[1]);
    return TRUE;
}

/* --live: each execution's tools are the catalog's providers, called again. */
static SbxTools *live_tools(SbxReplay *replay, gpointer data, GError **error)
{
    ReplayCtx *ctx = data;
    SbxCatalog *catalog = ctx->tools_path != NULL ? sbx_catalog_load(ctx->tools_path, error)
                                                  : sbx_catalog_new_empty();
    SbxTools *live = catalog != NULL ? sbx_tools_new(catalog, error) : NULL;

    return live != NULL ? sbx_replay_tools(replay, live, error) : NULL;
}

/* The chain of a record of the store (an execution of a session: those before it too). A store
 * that cannot be opened is a reason like the others: said once, by cannot() (in --json too). */
static gboolean load_from_store(ReplayCtx *ctx, GPtrArray **ret_chain, GError **error)
{
    g_autoptr(SbxStore) store = sbx_cli_store_try_open(ctx->db, error);

    return store != NULL && sbx_replay_load_chain(store, NULL, ctx->id, ret_chain, error);
}

/* The bundle's record (after its session's executions before it, if any), unpacked into the
 * state directory with its machine. */
static gboolean load_from_bundle(ReplayCtx *ctx, GPtrArray **ret_chain, GError **error)
{
    g_autofree char *state = sbx_paths_state_dir();
    g_autoptr(GPtrArray) chain = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_replay_free);
    g_autoptr(GPtrArray) before = NULL, before_calls = NULL;
    g_autoptr(SbxRecord) rec = NULL;
    g_autoptr(GPtrArray) calls = NULL;

    if (g_mkdir_with_parents(state, 0700) != 0 ||
        !sbx_bundle_open(ctx->bundle_path, state, &ctx->bundle, error)) {
        if (error != NULL && *error == NULL) {
            g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(errno), "%s: %s", state,
                        g_strerror(errno));
        }
        return FALSE;
    }
    sbx_bundle_take_session(ctx->bundle, &before, &before_calls);
    sbx_bundle_take_record(ctx->bundle, &rec, &calls);
    g_free(ctx->id);
    ctx->id = g_strdup(rec->id);
    /* each replay takes its record and calls; what is left on a failure goes with the arrays */
    for (guint i = 1; before->len > 0; i++) {
        SbxRecord *b_rec = g_ptr_array_steal_index(before, 0);
        SbxReplay *r = sbx_replay_new(b_rec, g_ptr_array_steal_index(before_calls, 0), error);
        if (r == NULL) {
            g_prefix_error(error, "execution %u of its session: ", i);
            return FALSE;
        }
        g_ptr_array_add(chain, r);
    }
    SbxReplay *r = sbx_replay_new(g_steal_pointer(&rec), g_steal_pointer(&calls), error);
    if (r == NULL) {
        return FALSE;
    }
    g_ptr_array_add(chain, r);
    *ret_chain = g_steal_pointer(&chain);
    return TRUE;
}

/*
 * Where the bundle's machine is: its profile and snapshot as unpacked; its image this host's own
 * when that is the record's, else the bundle's, placed where the VM's jail can read it.
 */
static gboolean bundle_place(ReplayCtx *ctx, const SbxReplay *target, SbxReplayPlace *place,
                             GError **error)
{
    g_autoptr(SbxProfile) profile = sbx_profile_load(sbx_bundle_profile_path(ctx->bundle), error);
    g_autoptr(SbxImage) local = profile != NULL ? sbx_image_open_for(profile, NULL) : NULL;

    if (profile == NULL) {
        return FALSE;
    }
    place->profile_path = sbx_bundle_profile_path(ctx->bundle);
    place->snapshot_dir = sbx_bundle_snapshot_dir(ctx->bundle);
    if (local != NULL && strcmp(local->hash, sbx_replay_record(target)->image_id) == 0) {
        return TRUE; /* place->image_dir NULL: the profile's, this host's */
    }
    g_autofree char *images = sbx_paths_images_dir();
    if (!sbx_bundle_place_image(ctx->bundle, images, error)) {
        return FALSE;
    }
    place->image_dir = sbx_bundle_image_dir(ctx->bundle);
    return TRUE;
}

static int replay_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) chain = NULL;
    ReplayCtx *ctx = replay_ctx = g_new0(ReplayCtx, 1);

    ctx->cli = cli;
    if (!parse_options(ctx, argc, argv, &error)) {
        fprintf(stderr, VERB ": %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    gboolean ok = ctx->bundle_path != NULL ? load_from_bundle(ctx, &chain, &error)
                                           : load_from_store(ctx, &chain, &error);
    if (!ok) {
        gboolean not_replayable =
            g_error_matches(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_NOT_REPLAYABLE);
        return cannot(ctx, not_replayable ? "not_replayable" : "cannot_replay", error->message);
    }
    const SbxReplay *target = g_ptr_array_index(chain, chain->len - 1);
    SbxReplayPlace place = {0};
    if (ctx->bundle != NULL && !bundle_place(ctx, target, &place, &error)) {
        return cannot(ctx, "cannot_replay", error->message);
    }
    if (!sbx_replay_machine(target, ctx->bundle != NULL ? &place : NULL, &ctx->machine, &error)) {
        return cannot(ctx, "cannot_replay", error->message);
    }
    ctx->out = sbx_out_new();
    ctx->run = sbx_replay_run_new(g_steal_pointer(&chain), &ctx->machine,
                                  ctx->live ? live_tools : NULL, ctx);
    cli->on_signal = on_signal;
    cli->data = ctx;
    sbx_replay_run_start(ctx->run, on_done, ctx);
    return -1;
}

static void replay_cleanup(SbxCli *cli)
{
    ReplayCtx *ctx = replay_ctx;
    (void)cli;

    if (ctx == NULL) {
        return;
    }
    sbx_replay_run_free(ctx->run); /* its VM killed and reaped */
    sbx_replay_machine_clear(&ctx->machine);
    sbx_bundle_free(ctx->bundle); /* after the VM: its files were the VM's */
    sbx_out_free(ctx->out);       /* last: what is queued is written first (bounded) */
    g_free(ctx->tools_path);
    g_free(ctx->db);
    g_free(ctx->bundle_path);
    g_free(ctx->id);
    g_free(ctx);
    replay_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_replay = {
    .name = "replay",
    .summary = "Run a recorded execution again and say whether it did the same",
    .start = replay_start,
    .cleanup = replay_cleanup,
};
