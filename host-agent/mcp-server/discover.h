/*
 * The MCP server's discovery tools (docs/mcp-server.md, "Discovery"): what the host tools of the
 * catalog are, read progressively so that an agent reads only what it needs: list_providers,
 * search_tools (by words in names and descriptions), get_tool_types (the TypeScript or Python
 * declarations of the chosen tools, as `sandbox tools --types` renders them). Pure: a listed
 * catalog in (its MCP providers' tools discovered), text out.
 */
#pragma once

#include <glib.h>

#include "base/json-builder.h"
#include "catalog.h"

/* A search_tools query: 256 bytes, a few words. */
#define SBX_MCP_DISCOVER_QUERY_MAX 256

/* Tools a search answers at most (its limit's maximum; default 10): a page a model reads. */
#define SBX_MCP_DISCOVER_RESULTS_MAX 50
#define SBX_MCP_DISCOVER_RESULTS_DEFAULT 10

/* Tools get_tool_types renders in one call: the ones an agent is about to use, not all. */
#define SBX_MCP_DISCOVER_TYPES_MAX 32

/* A tool's description in a list or search result: its first line, cut to 200 bytes. */
#define SBX_MCP_DISCOVER_SUMMARY_MAX 200

/** Whether @name is one of the discovery tools. */
gboolean sbx_mcp_discover_is_tool(const char *name);

/** Append the discovery tools' definitions (tools/list elements) to @b, for @revision. */
void sbx_mcp_discover_definitions(SbxJsonb *b, const char *revision);

/**
 * Call discovery tool @name with the arguments @args_text (@len bytes, a JSON object's text) on
 * @catalog: the CallToolResult's JSON text (a tool error for wrong arguments). Caller frees.
 */
char *sbx_mcp_discover_call(const SbxCatalog *catalog, const char *name, const char *args_text,
                            gsize len);
