/*
 * A tool provider: something that answers tool calls (a local command, an HTTP JSON endpoint;
 * MCP servers later). Calls are asynchronous on the GLib main loop and never block it.
 */
#pragma once

#include <gio/gio.h>

#include "catalog.h"

/*
 * Largest tool result (compact JSON) a provider may return. It travels to the guest in one
 * `tool_result` frame (SBX_FRAME_MAX = 4 MiB) and is kept in the execution's record; 1 MiB is
 * plenty for JSON data and keeps a chatty tool from filling either.
 */
#define SBX_TOOL_RESULT_MAX (1024 * 1024)

/* Largest tool input accepted from the guest (compact JSON), for the same reasons. */
#define SBX_TOOL_INPUT_MAX (1024 * 1024)

typedef struct SbxProvider SbxProvider;

typedef struct {
    /* Start a call of tool @tool (real name) with @input_json (compact JSON). */
    void (*call_async)(SbxProvider *provider, const char *tool, const char *input_json,
                       GCancellable *cancellable, GAsyncReadyCallback callback, gpointer user_data);
    /* The result as compact JSON, or NULL with an SBX_TOOL_ERROR or G_IO_ERROR_CANCELLED. */
    char *(*call_finish)(SbxProvider *provider, GAsyncResult *result, GError **error);
    void (*free)(SbxProvider *provider);
    /*
     * Kinds whose tools come from the provider itself (mcp: start the server, initialize, list);
     * NULL for the others. The finish gives the tools (*@ret_n of them, caller frees with
     * sbx_catalog_tools_free) and appends warnings (char*) about tools kept unchecked or skipped.
     */
    void (*discover_async)(SbxProvider *provider, GCancellable *cancellable,
                           GAsyncReadyCallback callback, gpointer user_data);
    SbxCatalogTool *(*discover_finish)(SbxProvider *provider, GAsyncResult *result, gsize *ret_n,
                                       GPtrArray *warnings, GError **error);
} SbxProviderOps;

struct SbxProvider {
    const SbxProviderOps *ops;
    char *name; /* real name */
};

/** Create the provider that @config describes. */
SbxProvider *sbx_provider_new(const SbxCatalogProvider *config, GError **error);

/**
 * Call @tool (real name) with @input_json. The callback runs on the thread-default main
 * context of the caller. Cancelling @cancellable ends the call promptly (a process is killed
 * and reaped first); the result is then G_IO_ERROR_CANCELLED.
 */
void sbx_provider_call_async(SbxProvider *provider, const char *tool, const char *input_json,
                             GCancellable *cancellable, GAsyncReadyCallback callback,
                             gpointer user_data);

/** Finish a call: compact JSON (caller frees) or NULL with @error set. */
char *sbx_provider_call_finish(SbxProvider *provider, GAsyncResult *result, GError **error);

/** Free @provider. No call may be in flight. Accepts NULL. */
void sbx_provider_free(SbxProvider *provider);

/**
 * The command provider (command.c). Fails (SBX_CATALOG_ERROR) when SANDBOX_TOOL_PROCS is not a
 * valid cap (tool-slots.h).
 */
SbxProvider *sbx_command_provider_new(const SbxCatalogProvider *config, GError **error);

/**
 * The MCP provider (mcp.c): a stdio server is started at once; nothing is sent before
 * discover_async. @config must outlive the provider.
 */
SbxProvider *sbx_mcp_provider_new(const SbxCatalogProvider *config, GError **error);

/**
 * The http provider (http.c). Fails (SBX_CATALOG_ERROR) when a `${secret:NAME}` of its
 * headers cannot be found; the message names the secret, never a value.
 */
SbxProvider *sbx_http_provider_new(const SbxCatalogProvider *config, GError **error);
