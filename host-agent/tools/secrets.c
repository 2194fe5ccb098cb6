/*
 * Host secrets (secrets.h).
 */
#include "secrets.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools-error.h"

char *sbx_secrets_file_path(void)
{
    const char *env = g_getenv("SANDBOX_SECRETS_FILE");

    if (env != NULL && env[0] != '\0') {
        return g_strdup(env);
    }
    return g_build_filename(g_get_user_config_dir(), "sandbox", "secrets", NULL);
}

/* Read the secrets file if it exists; *@ret_text NULL if it does not. */
static gboolean read_file(const char *path, char **ret_text, GError **error)
{
    struct stat st;
    /* O_NONBLOCK: a FIFO there would block the loop in open(); it is refused below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

    *ret_text = NULL;
    if (fd < 0 && errno == ENOENT) {
        return TRUE;
    }
    if (fd < 0) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO, "open `%s`: %s", path,
                    g_strerror(errno));
        return FALSE;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
        (st.st_mode & 077) != 0 || st.st_size > SBX_SECRETS_FILE_MAX) {
        close(fd);
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO,
                    "refusing the secrets file `%s`: it must be a regular file of at most %d "
                    "bytes, owned by this user, that nobody else may read or write (chmod 600)",
                    path, SBX_SECRETS_FILE_MAX);
        return FALSE;
    }
    g_autofree char *buf = g_malloc(st.st_size + 1);
    ssize_t n = read(fd, buf, st.st_size);
    close(fd);
    if (n != st.st_size) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO, "read `%s`: %s", path,
                    n < 0 ? g_strerror(errno) : "short read");
        return FALSE;
    }
    buf[n] = '\0';
    *ret_text = g_steal_pointer(&buf);
    return TRUE;
}

/* Free @lines, wiped first: they hold other secrets too. */
static void wipe_lines(char **lines)
{
    for (char **l = lines; *l != NULL; l++) {
        memset(*l, 0, strlen(*l));
    }
    g_strfreev(lines);
}

/* The value of @name in the file's text, or NULL. */
static char *find_in(const char *text, const char *name)
{
    char **lines = g_strsplit(text, "\n", -1);
    gsize nlen = strlen(name);
    char *v = NULL;

    for (char **l = lines; *l != NULL && v == NULL; l++) {
        if (strncmp(*l, name, nlen) == 0 && (*l)[nlen] == '=') {
            v = g_strdup(*l + nlen + 1);
            gsize len = strlen(v);
            if (len > 0 && v[len - 1] == '\r') {
                v[len - 1] = '\0';
            }
        }
    }
    wipe_lines(lines);
    return v;
}

/* A header value must not carry a line break or NUL: it could add headers of its own. */
static gboolean value_ok(const char *name, const char *value, GError **error)
{
    for (const char *p = value; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 && *p != '\t') {
            g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID,
                        "secret %s holds a control character (a line break?)", name);
            return FALSE;
        }
    }
    return TRUE;
}

char *sbx_secret_lookup(const char *name, gpointer unused, GError **error)
{
    g_autofree char *var = g_strconcat("SANDBOX_SECRET_", name, NULL);
    const char *env = g_getenv(var);
    g_autofree char *path = sbx_secrets_file_path();
    g_autofree char *text = NULL;
    (void)unused;

    if (env != NULL) {
        return value_ok(name, env, error) ? g_strdup(env) : NULL;
    }
    if (!read_file(path, &text, error)) {
        return NULL;
    }
    g_autofree char *value = text != NULL ? find_in(text, name) : NULL;
    if (text != NULL) {
        memset(text, 0, strlen(text)); /* other secrets need not linger in freed memory */
    }
    if (value == NULL) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID,
                    "secret %s is not set: set the environment variable %s or add a line "
                    "%s=... to %s",
                    name, var, name, path);
        return NULL;
    }
    return value_ok(name, value, error) ? g_steal_pointer(&value) : NULL;
}
