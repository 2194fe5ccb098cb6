/*
 * How a tool process starts (command tools, one per call; MCP stdio servers): its environment
 * (an allow-list of the host agent's, then the catalog's `env_pass` and `env`) and, in the child
 * before exec, its own process group, PR_SET_PDEATHSIG and resource limits. Why each variable
 * and each limit: docs/tools.md, "Tool processes".
 */
#pragma once

#include <gio/gio.h>

#include "catalog.h"

/*
 * RLIMIT_NOFILE of a tool process. Soft 1024: what programs expect (select() cannot take a
 * descriptor of 1024 or more, FD_SETSIZE), whatever the host agent raised its own to. Hard 4096:
 * a program that knows it needs more may raise its soft limit that far (Go's runtime does it by
 * itself), not to the host's maximum: a leaking tool stops at 4096 files, not at a million.
 * Neither is ever above the host agent's own hard limit.
 */
#define SBX_TOOL_NOFILE_SOFT 1024
#define SBX_TOOL_NOFILE_HARD 4096

/** TRUE if the host variable @name reaches tool processes without being named in the catalog. */
gboolean sbx_tool_env_allowed(const char *name);

/**
 * The environment of @config's process (kind command or mcp stdio), from @host (the host
 * agent's, as g_get_environ()): the allowed variables, then the `env_pass` ones set in @host,
 * then `env` (which wins). Never a SBX_CATALOG_SECRET_ENV_PREFIX variable. Free with g_strfreev.
 */
char **sbx_tool_environ(const SbxCatalogProvider *config, char *const *host);

/**
 * A launcher for a tool process: stdin, stdout and stderr piped, run in @workdir with exactly
 * @envp (the program is looked up in its PATH), and in the child before exec: a process group
 * of its own, SIGKILL when the host agent dies, no core dumps, RLIMIT_NOFILE as above.
 */
GSubprocessLauncher *sbx_tool_launcher_new(const char *workdir, char *const *envp);
