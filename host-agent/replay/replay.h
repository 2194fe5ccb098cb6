/*
 * Replay (docs/replay.md): an execution's record turned back into what runs it again (the same
 * code, inputs, seed and clock reads; its tool calls answered from the record, or by the live
 * tools), the machine it ran on (its profile, image and snapshot, checked against this host),
 * and the verdict: the replay's outcome compared with the record's, field by field. The front
 * ends (`sandbox replay`, the API's POST .../replay) run it through the execution core.
 */
#pragma once

#include <glib.h>

#include "exec/exec.h"
#include "store/records.h"
#include "vm/image.h"
#include "vm/profile.h"
#include "vm/snapshot.h"

#define SBX_REPLAY_ERROR (sbx_replay_error_quark())
GQuark sbx_replay_error_quark(void);

typedef enum {
    SBX_REPLAY_ERROR_NOT_REPLAYABLE, /* the record says why (or is not finished) */
    SBX_REPLAY_ERROR_MACHINE,        /* its snapshot, image, profile or QEMU is not here */
    SBX_REPLAY_ERROR_RECORD,         /* the record cannot be read back (damaged) */
} SbxReplayError;

typedef struct SbxReplay SbxReplay;

/**
 * A replay of @record with its tool @calls (SbxRecordCall*, both taken, also on failure).
 * SBX_REPLAY_ERROR_NOT_REPLAYABLE when the record says it cannot be replayed (with its
 * reason), SBX_REPLAY_ERROR_RECORD when its seed or clock log do not read back.
 */
SbxReplay *sbx_replay_new(SbxRecord *record, GPtrArray *calls, GError **error);

/** The replay of record @id of @store (@tenant_id: only that tenant's; NULL: any). */
SbxReplay *sbx_replay_load(SbxStore *store, const char *tenant_id, const char *id, GError **error);

/**
 * The replays record @id needs (SbxReplay*, *@ret_chain): its own, after those of the
 * executions of its session before it, oldest first (their runners' state is its input); each
 * must be replayable (else SBX_REPLAY_ERROR_NOT_REPLAYABLE naming which is not).
 */
gboolean sbx_replay_load_chain(SbxStore *store, const char *tenant_id, const char *id,
                               GPtrArray **ret_chain, GError **error);

void sbx_replay_free(SbxReplay *replay);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxReplay, sbx_replay_free)

const SbxRecord *sbx_replay_record(const SbxReplay *replay);

/** The record's tool calls (SbxRecordCall*, in the order made). */
const GPtrArray *sbx_replay_calls(const SbxReplay *replay);

/** Whether sbx_replay_tools() was given live tools. */
gboolean sbx_replay_is_live(const SbxReplay *replay);

/**
 * The execution's request as recorded, with the record's seed and clock log (pointers into
 * @replay, which must outlive the request's use). The output is collected: it is compared.
 */
void sbx_replay_request(const SbxReplay *replay, SbxExecRequest *req);

/**
 * The tools of the replay: the namespace the guest was given, every call answered from the
 * record (sbx_tools_new_replay()). With @live (the live tools, taken), those instead: calls
 * reach the providers again and the verdict shows what changed.
 */
SbxTools *sbx_replay_tools(SbxReplay *replay, SbxTools *live, GError **error);

/* The machine a replay runs on (sbx_replay_machine()): the record's, found on this host. */
typedef struct {
    SbxProfile *profile;
    SbxImage *image;
    SbxSnapshot *snapshot; /* NULL: the record's execution booted cold */
} SbxReplayMachine;

void sbx_replay_machine_clear(SbxReplayMachine *m);

/* Where the record's machine is, when not where this host keeps it (a bundle's). */
typedef struct {
    const char *profile_path; /* NULL: the record's profile by name, installed */
    const char *image_dir;    /* NULL: the image that profile runs */
    const char *snapshot_dir; /* NULL: the record's snapshot kept in the snapshot cache */
} SbxReplayPlace;

/**
 * The record's machine: its profile, its image with the recorded image id, its snapshot (by key
 * in the cache, decompressed if kept compressed: vm/snapshot-pin.h) made by this QEMU, found at
 * @place (NULL: where this host keeps them). Anything missing or different is
 * SBX_REPLAY_ERROR_MACHINE naming it, before any QEMU starts.
 */
gboolean sbx_replay_machine(const SbxReplay *replay, const SbxReplayPlace *place,
                            SbxReplayMachine *ret, GError **error);

/* One difference between the record and the replay. Strings owned. */
typedef struct {
    char *what;     /* "tool call", "stdout", "stderr", "result", "error", "status", "exit code" */
    char *where;    /* "byte 12 (line 2)", "call 3 (gh.search)", or NULL */
    char *recorded; /* the record's value (an excerpt for output), or NULL: none */
    char *replayed; /* the replay's */
} SbxReplayDiff;

void sbx_replay_diff_free(SbxReplayDiff *diff);

/**
 * Compare the ended @exec (run with sbx_replay_request() and sbx_replay_tools()) with the
 * record: the tool calls (in order: names, inputs, and with live tools their answers), stdout,
 * stderr (bytes and truncation), result, error, status and exit code. Returns the differences
 * (SbxReplayDiff*), the first divergence first; empty: identical.
 */
GPtrArray *sbx_replay_compare(const SbxReplay *replay, const SbxExec *exec);

/**
 * The verdict as the API and `sandbox replay --json` print it: {"id", "verdict":
 * "identical"|"diverged", "divergence"?: the first, "differences"?: all (@all), "duration_ms",
 * "recorded_duration_ms"}. Caller frees.
 */
char *sbx_replay_verdict_json(const SbxReplay *replay, const GPtrArray *diffs, gboolean all,
                              gint64 replay_ms);

/** The first difference for people ("stdout at byte 12 (line 2): recorded "a", replayed "b""). */
char *sbx_replay_diff_text(const SbxReplayDiff *diff);

/*
 * Running: the chain of sbx_replay_load_chain() on its machine, each execution compared with its
 * record as it ends; the run stops at the first that differs.
 */
typedef struct SbxReplayRun SbxReplayRun;

/* The tools of @replay's execution (sbx_replay_tools() with the live ones, say), or NULL. */
typedef SbxTools *(*SbxReplayToolsFunc)(SbxReplay *replay, gpointer data, GError **error);

/* The run ended (from the loop: the run may be freed here): see diffs and failure. */
typedef void (*SbxReplayRunDone)(SbxReplayRun *run, gpointer data);

/**
 * A run of @chain (taken) on @machine (which must outlive the run). @tools_for makes each
 * execution's tools (NULL: answered from the record).
 */
SbxReplayRun *sbx_replay_run_new(GPtrArray *chain, const SbxReplayMachine *machine,
                                 SbxReplayToolsFunc tools_for, gpointer tools_data);

/** Start: the VM from the machine's snapshot, then the executions in turn; @done once. */
void sbx_replay_run_start(SbxReplayRun *run, SbxReplayRunDone done, gpointer data);

/** End it now (a signal, a client gone): done reports @why as its failure. */
void sbx_replay_run_abort(SbxReplayRun *run, const char *why);

/** Whether it ended (its VM is gone; done is on its way from the loop). */
gboolean sbx_replay_run_finished(const SbxReplayRun *run);

/** The differences of the first execution that differs, or of the last (empty: identical). */
const GPtrArray *sbx_replay_run_diffs(const SbxReplayRun *run);

/** Why it could not run (the VM did not start, the tools failed), or NULL. */
const char *sbx_replay_run_failure(const SbxReplayRun *run);

/** From the start to the last execution's end, the VM's restore included. */
gint64 sbx_replay_run_duration_ms(const SbxReplayRun *run);

/** The replay of the record asked for (the chain's last). */
const SbxReplay *sbx_replay_run_target(const SbxReplayRun *run);

/** Free @run (accepts NULL): its VM killed and reaped. */
void sbx_replay_run_free(SbxReplayRun *run);
