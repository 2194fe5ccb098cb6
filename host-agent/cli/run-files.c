/*
 * `sandbox run --put` and `--files-out` (run-files.h). The paths written come from the guest:
 * they are workspace paths (relative, no `.` or `..`: the protocol's decoder checked every
 * listed path), so each lands below the directory the user named.
 */
#include "cli/run-files.h"

#include <errno.h>
#include <string.h>

#include <glib/gstdio.h>

/* One --put: LOCAL[=REMOTE] into @f; @total counts the bytes so far. */
static gboolean read_one(const char *put, SbxExecFileIn *f, gsize *total, GError **error)
{
    const char *eq = strrchr(put, '=');
    g_autofree char *local = eq != NULL ? g_strndup(put, eq - put) : g_strdup(put);
    g_autofree char *remote = eq != NULL ? g_strdup(eq + 1) : g_path_get_basename(local);
    char *data = NULL;
    gsize len = 0;

    if (!sbx_workspace_path_valid(remote)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--put %s: \"%s\" is not a workspace path (relative, no . or .., at most "
                    "1024 bytes)",
                    put, remote);
        return FALSE;
    }
    if (!g_file_get_contents(local, &data, &len, error)) {
        g_prefix_error(error, "--put: ");
        return FALSE;
    }
    *total += len;
    f->path = g_steal_pointer(&remote);
    f->bytes = g_bytes_new_take(data, len);
    return TRUE;
}

gboolean sbx_cli_files_read(char **puts, SbxExecFileIn **ret, gsize *ret_n, GError **error)
{
    guint n = puts != NULL ? g_strv_length(puts) : 0;
    SbxExecFileIn *files = g_new0(SbxExecFileIn, n + 1);
    gsize total = 0;

    *ret = NULL;
    *ret_n = 0;
    if (n > SBX_EXEC_FILES_IN_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--put: at most %d files (more go through a session: `sandbox session put`)",
                    SBX_EXEC_FILES_IN_MAX);
        g_free(files);
        return FALSE;
    }
    for (guint i = 0; i < n; i++) {
        gboolean ok = read_one(puts[i], &files[i], &total, error);
        for (guint j = 0; ok && j < i; j++) {
            if (strcmp(files[j].path, files[i].path) == 0) {
                g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                            "--put: two files at %s", files[i].path);
                ok = FALSE;
            }
        }
        if (ok && total > SBX_EXEC_FILES_IN_BYTES_MAX) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "--put: the files add up to more than %u MiB (larger ones go through a "
                        "session: `sandbox session put`)",
                        SBX_EXEC_FILES_IN_BYTES_MAX >> 20);
            ok = FALSE;
        }
        if (!ok) {
            sbx_cli_files_free(files, i + 1);
            return FALSE;
        }
    }
    *ret = files;
    *ret_n = n;
    return TRUE;
}

void sbx_cli_files_free(SbxExecFileIn *files, gsize n)
{
    for (gsize i = 0; files != NULL && i < n; i++) {
        g_free(files[i].path);
        if (files[i].bytes != NULL) {
            g_bytes_unref(files[i].bytes);
        }
    }
    g_free(files);
}

/* Write @o under @dir; FALSE with @error. */
static gboolean write_one(const SbxExecFileOut *o, const char *dir, char **ret_path, GError **error)
{
    g_autofree char *path = g_build_filename(dir, o->path, NULL);
    g_autofree char *parent = g_path_get_dirname(path);
    gsize len = 0;
    const char *data = g_bytes_get_data(o->content, &len);

    *ret_path = g_strdup(path);
    if (g_mkdir_with_parents(parent, 0755) < 0) {
        int e = errno;
        g_set_error(error, G_FILE_ERROR, g_file_error_from_errno(e), "%s: %s", parent,
                    g_strerror(e));
        return FALSE;
    }
    return g_file_set_contents(path, data != NULL ? data : "", (gssize)len, error);
}

gboolean sbx_cli_files_write(const SbxExecFiles *files, const char *dir, GString *log)
{
    gsize n = 0;
    gboolean truncated = FALSE, all = TRUE;
    const SbxExecFileOut *out = sbx_exec_files_out(files, &n, &truncated);

    for (gsize i = 0; i < n; i++) {
        g_autoptr(GError) error = NULL;
        g_autofree char *path = NULL;
        if (out[i].content == NULL) {
            g_string_append_printf(log,
                                   "sandbox: %s (%" G_GUINT64_FORMAT " bytes) not written: %s\n",
                                   out[i].path, out[i].size, out[i].omitted);
            all = FALSE;
        } else if (!write_one(&out[i], dir, &path, &error)) {
            g_string_append_printf(log, "sandbox: %s not written: %s\n", out[i].path,
                                   error->message);
            all = FALSE;
        } else {
            g_string_append_printf(log, "sandbox: wrote %s (%" G_GUINT64_FORMAT " bytes)\n", path,
                                   out[i].size);
        }
    }
    if (truncated) {
        g_string_append_printf(log, "sandbox: more files changed than the %d returned\n",
                               SBX_EXEC_FILES_OUT_MAX);
    }
    return all && !truncated;
}
