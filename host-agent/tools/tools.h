/*
 * The tools of one execution: a catalog, its namespace (real names <-> guest identifiers) and a
 * provider per catalog entry. Calls arrive with the identifiers the guest saw and are dispatched
 * to the provider by real name, once the catalog's policy allows them (policy.h, approvals.h).
 */
#pragma once

#include <gio/gio.h>

#include "approvals.h"
#include "catalog.h"
#include "namespace.h"
#include "protocol/message.h"

typedef struct SbxTools SbxTools;

/**
 * Build the tools of @catalog (ownership passes to the result, also on failure). MCP stdio
 * servers are spawned here; their tools are known once sbx_tools_start() is ready.
 */
SbxTools *sbx_tools_new(SbxCatalog *catalog, GError **error);

/**
 * Tools for listing the namespace only (`sandbox tools --types`): MCP providers are built (their
 * tools must be discovered with sbx_tools_start()), the others not, so no host secret is read.
 * Calls fail with SBX_ERR_TOOL.
 */
SbxTools *sbx_tools_new_listing(SbxCatalog *catalog, GError **error);

/** Load the catalog file @path (NULL: no tools) and build its tools. */
SbxTools *sbx_tools_load(const char *path, GError **error);

/* The tools are ready (@error NULL) or cannot be (the start-up of an MCP server failed). */
typedef void (*SbxToolsReadyFunc)(SbxTools *tools, const GError *error, gpointer user_data);

/**
 * Discover the tools of the providers that list their own (MCP: initialize, tools/list, each
 * server in parallel, within its `startup_timeout_ms`). @ready runs once on the caller's main
 * context, always after this returns and never after sbx_tools_free(). Once it reports success,
 * sbx_tools_decls(), sbx_tools_namespace() and sbx_tools_catalog() hold every tool. Call once.
 */
void sbx_tools_start(SbxTools *tools, SbxToolsReadyFunc ready, gpointer user_data);

/** The catalog, with the discovered tools once ready (for `sandbox tools --types`). */
const SbxCatalog *sbx_tools_catalog(const SbxTools *tools);

/**
 * Warnings of the start (a listed schema our validator refuses, so the tool is unchecked; a
 * listed tool without a valid name, skipped): NULL-terminated, owned by @tools.
 */
const char *const *sbx_tools_warnings(const SbxTools *tools);

/**
 * Free @tools. All calls must have completed (see sbx_tools_in_flight()). Accepts NULL.
 */
void sbx_tools_free(SbxTools *tools);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxTools, sbx_tools_free)

/** The namespace as the guest sees it: *@ret_n declarations, owned by @tools. */
const SbxToolDecl *sbx_tools_decls(const SbxTools *tools, gsize *ret_n);

/** The name map (for showing real names in reports). */
const SbxNamespace *sbx_tools_namespace(const SbxTools *tools);

/**
 * Call the tool the guest named @provider_ident.@tool_ident with @input_json (compact JSON from
 * the protocol decoder). An unknown name or an oversized input completes with an SBX_TOOL_ERROR
 * (never a crash). An input that fails the tool's input_schema completes with SBX_ERR_VALIDATION
 * and the provider is not called; a result that fails its output_schema, likewise. Then the
 * catalog's policy: a denied call completes with SBX_ERR_POLICY_DENIED, one that needs an
 * approval waits for it (sbx_tools_set_approvals()) and counts as in flight meanwhile. The
 * callback runs on the caller's main context, always after this returns.
 */
void sbx_tools_call_async(SbxTools *tools, const char *provider_ident, const char *tool_ident,
                          const char *input_json, GCancellable *cancellable,
                          GAsyncReadyCallback callback, gpointer user_data);

/**
 * The result (compact JSON, caller frees), or NULL with an SBX_TOOL_ERROR (code: an
 * SbxErrorCode) or G_IO_ERROR_CANCELLED.
 */
char *sbx_tools_call_finish(SbxTools *tools, GAsyncResult *result, GError **error);

/**
 * Where calls that the policy says need an approval wait (docs/tools.md, "Approvals"); it must
 * outlive every call. @origin says who runs them, for the person who answers (or NULL); each
 * approval's owner is @tools (SbxApproval.owner: one execution's approvals told apart).
 * Unset (NULL), such a call is denied at once with a message saying how to get approvals
 * (`sandbox serve`, or a terminal).
 */
void sbx_tools_set_approvals(SbxTools *tools, SbxApprovals *approvals, const char *origin);

/**
 * How the policy decided the call @result (as passed to the callback) for its record: a
 * compact JSON object ({"action":"approve","rule":"*.delete_*","approval":"approved",...}),
 * or NULL if the call ended before the policy was asked (unknown tool, oversized input).
 */
char *sbx_tools_call_policy(GAsyncResult *result);

/** Calls started and not yet completed (processes not yet reaped). */
guint sbx_tools_in_flight(const SbxTools *tools);

/*
 * Replay (docs/replay.md): a record keeps the tools the guest was given and every call with its
 * answer; a replay's tools give the guest the same namespace and answer each call from the
 * record, in the order the guest makes them, without any provider.
 */

/** The tools the guest is given, for a record: sbx_tools_new_replay()'s @given_json. */
char *sbx_tools_given_json(const SbxTools *tools);

/* One recorded call, with real names (the guest's when they did not resolve). */
typedef struct {
    char *provider;
    char *tool;
    char *input_json;  /* compact JSON */
    gboolean ok;       /* answered with result_json */
    char *result_json; /* when ok */
    char *error_json;  /* when answered with an error ({code, message, ...}); NULL and !ok:
                          never answered (the execution ended first) */
} SbxToolsRecordedCall;

void sbx_tools_recorded_call_free(SbxToolsRecordedCall *call);

typedef struct SbxToolsReplay SbxToolsReplay;

/** The record's calls (SbxToolsRecordedCall*, in the order made; the array is taken). */
SbxToolsReplay *sbx_tools_replay_new(GPtrArray *calls);
void sbx_tools_replay_free(SbxToolsReplay *replay);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxToolsReplay, sbx_tools_replay_free)

/**
 * The tools of a replay: the namespace of @given_json (a record's tools; NULL: none) and calls
 * answered by @replay (taken, also on failure). A call that is not the record's next one (another
 * tool, another input, one too many) is answered with a replay_divergence error and noted.
 */
SbxTools *sbx_tools_new_replay(const char *given_json, SbxToolsReplay *replay, GError **error);

/** Whether a call of the replay was not the record's next one (the verdict says which). */
gboolean sbx_tools_replay_diverged(const SbxTools *tools);
