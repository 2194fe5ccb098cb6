/*
 * The two MCP transports (see mcp-client.h for the interface they implement).
 */
#pragma once

#include "catalog.h"
#include "mcp-client.h"

/**
 * Start the stdio server of @config (`command`, `env`, `workdir`): a child process until the
 * transport is freed. Fails if the program cannot be started.
 */
SbxMcpTransport *sbx_mcp_stdio_new(const SbxCatalogProvider *config, GError **error);

/** A streamable HTTP connection to @config's `url` with its `headers`. */
SbxMcpTransport *sbx_mcp_http_new(const SbxCatalogProvider *config, GError **error);
