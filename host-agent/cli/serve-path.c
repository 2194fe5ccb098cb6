/*
 * Where `sandbox serve` listens, and the check that nobody else can reach or replace it.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "cli/serve.h"

char *sbx_serve_socket_path(const char *opt)
{
    const char *env = g_getenv("SANDBOX_SERVE_SOCKET");
    const char *xdg = g_getenv("XDG_RUNTIME_DIR");

    if (opt != NULL) {
        return g_strdup(opt);
    }
    if (env != NULL && *env != '\0') {
        return g_strdup(env);
    }
    if (xdg != NULL && *xdg == '/') {
        return g_build_filename(xdg, "sandbox", "sandbox.sock", NULL);
    }
    return g_strdup_printf("/tmp/sandbox-%u/sandbox.sock", (unsigned)getuid());
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
