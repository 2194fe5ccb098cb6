/*
 * The files of `sandbox run` (docs/cli.md): --put LOCAL[=REMOTE] read and checked into the
 * execution's files (exec/exec-files.h), and the files it created or changed written under
 * --files-out DIR.
 */
#pragma once

#include <glib.h>

#include "exec/exec-files.h"

/**
 * Each of @puts (NULL-terminated; NULL: none) as a file for the workspace: LOCAL's bytes at
 * REMOTE (default: LOCAL's base name), a workspace path given once; at most
 * SBX_EXEC_FILES_IN_MAX files and SBX_EXEC_FILES_IN_BYTES_MAX bytes together. FALSE with a
 * message for the user otherwise.
 */
gboolean sbx_cli_files_read(char **puts, SbxExecFileIn **ret, gsize *ret_n, GError **error);

/** Free what sbx_cli_files_read() gave (accepts NULL). */
void sbx_cli_files_free(SbxExecFileIn *files, gsize n);

/**
 * Write each collected file of @files that came with its contents to @dir/PATH (directories
 * made as needed; a file replaced whole), and say on @log, one line each, what was written and
 * what was not (no contents: why; a write that failed). FALSE if any was not written.
 */
gboolean sbx_cli_files_write(const SbxExecFiles *files, const char *dir, GString *log);
