/*
 * How a tool process starts (command tools, one per call; MCP stdio servers): its environment
 * (an allow-list of the host agent's, then the catalog's `env_pass` and `env`) and, in the child
 * before exec, its own process group, PR_SET_PDEATHSIG (both base/child.h, the mechanism QEMU's
 * process uses too) and resource limits. Why each variable and each limit: docs/tools.md,
 * "Tool processes".
 */
#pragma once

#include <gio/gio.h>

#include "base/child.h"
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

/* A tool process's stdin, stdout and stderr, our ends (each closes its pipe when freed). */
typedef struct {
    GOutputStream *in;
    GInputStream *out;
    GInputStream *err;
} SbxToolPipes;

/**
 * Start @argv as a tool process (sbx_child_spawn()): stdin, stdout and stderr piped (set in
 * @ret_pipes), run in @workdir with exactly @envp (the program is looked up in its PATH), and in
 * the child before exec: a process group of its own, SIGKILL when the host agent dies, no core
 * dumps, RLIMIT_NOFILE as above. The caller owns the child: sbx_child_free() kills its group and
 * reaps it. NULL with an SBX_CHILD_ERROR if it cannot start.
 */
SbxChild *sbx_tool_spawn(const char *const *argv, const char *workdir, char *const *envp,
                         SbxToolPipes *ret_pipes, GError **error);

/** Unref the three streams (closing our ends of the pipes) and set them to NULL. */
void sbx_tool_pipes_clear(SbxToolPipes *pipes);
