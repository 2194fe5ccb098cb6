/* Bounded reading and parsing of small JSON files (see jsonfile.h). */
#include "jsonfile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "protocol/json.h"
#include "protocol/limits.h"

/* Read at most @max_bytes from @fd; one byte more means the file is too large. */
static int read_bounded(int fd, gsize max_bytes, char **ret_buf, gsize *ret_len)
{
    g_autofree char *buf = g_malloc(max_bytes + 2);
    gsize len = 0;

    while (len <= max_bytes) {
        ssize_t n = read(fd, buf + len, max_bytes + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        len += (gsize)n;
    }
    if (len > max_bytes)
        return -EFBIG;
    buf[len] = '\0';
    *ret_buf = g_steal_pointer(&buf);
    *ret_len = len;
    return 0;
}

cJSON *sbx_json_object_parse(const char *name, const char *text, gsize len, GQuark domain, int code,
                             GError **error)
{
    g_autofree char *why = NULL;
    cJSON *root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    guint line, col;

    if (!root) {
        const char *rest =
            why ? sbx_json_error_where(text, len, why, &line, &col) : "out of memory";
        if (why && line > 0)
            g_set_error(error, domain, code, "%s: line %u column %u: %s", name, line, col, rest);
        else
            g_set_error(error, domain, code, "%s: %s", name, rest);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        g_set_error(error, domain, code, "%s: expected a JSON object", name);
        return NULL;
    }
    return root;
}

cJSON *sbx_json_file_load(const char *path, gsize max_bytes, GQuark domain, int code,
                          GError **error)
{
    g_autofree char *name = g_path_get_basename(path);
    g_autofree char *text = NULL;
    gsize len = 0;
    struct stat st;
    int fd, r;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        g_set_error(error, domain, code, "%s: cannot open: %s", path, g_strerror(e));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        g_set_error(error, domain, code, "%s: not a regular file", path);
        return NULL;
    }
    /* Refused before reading; read_bounded() still stops at the limit if the file grows. */
    r = (gsize)st.st_size > max_bytes ? -EFBIG : read_bounded(fd, max_bytes, &text, &len);
    close(fd);
    if (r == -EFBIG) {
        g_set_error(error, domain, code, "%s: larger than %" G_GSIZE_FORMAT " bytes", name,
                    max_bytes);
        return NULL;
    }
    if (r < 0) {
        g_set_error(error, domain, code, "%s: read: %s", path, g_strerror(-r));
        return NULL;
    }
    return sbx_json_object_parse(name, text, len, domain, code, error);
}
