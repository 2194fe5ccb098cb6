/*
 * Where `sandbox serve` listens, and the check that nobody else can reach or replace it.
 */
#include "server/path.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gio/gio.h>

#include "base/paths.h"

char *sbx_serve_socket_path(const char *opt)
{
    const char *env = g_getenv("SANDBOX_SERVE_SOCKET");
    g_autofree char *dir = NULL;

    if (opt != NULL) {
        return g_strdup(opt);
    }
    if (env != NULL && *env != '\0') {
        return g_strdup(env);
    }
    /* $RUNTIME_DIRECTORY (the service), $XDG_RUNTIME_DIR/sandbox, /tmp/sandbox-$UID */
    dir = sbx_paths_runtime_dir();
    return g_build_filename(dir, "sandbox.sock", NULL);
}

gboolean sbx_serve_check_dir(const char *dir, GError **error)
{
    struct stat st;

    if (lstat(dir, &st) < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "%s: %s", dir,
                    g_strerror(errno));
        return FALSE;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_PERMISSION_DENIED,
                    "%s must be a directory owned by us with mode 0700", dir);
        return FALSE;
    }
    return TRUE;
}
