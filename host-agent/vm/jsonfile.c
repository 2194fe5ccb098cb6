/* Bounded reading and parsing of small JSON files (see jsonfile.h). */
#include "jsonfile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Line and column (1-based) of byte @offset in @text, for parse errors. */
static void line_col(const char *text, gsize offset, guint *ret_line, guint *ret_col)
{
    guint line = 1, col = 1;

    for (gsize i = 0; i < offset && text[i]; i++) {
        if (text[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    *ret_line = line;
    *ret_col = col;
}

cJSON *sbx_json_parse_strict(const char *text, gsize len)
{
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, 0);

    for (; v && end && (gsize)(end - text) < len; end++) {
        if (!g_ascii_isspace(*end)) {
            cJSON_Delete(v);
            return NULL;
        }
    }
    return v;
}

static cJSON *parse_object(const char *name, const char *text, gsize len, GQuark domain, int code,
                           GError **error)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    guint line, col;

    if (!root) {
        line_col(text, end && end >= text ? (gsize)(end - text) : 0, &line, &col);
        g_set_error(error, domain, code,
                    "%s: invalid JSON (or nested deeper than allowed) "
                    "near line %u column %u",
                    name, line, col);
        return NULL;
    }
    /* Trailing bytes after the value: only whitespace is allowed. */
    for (; end && (gsize)(end - text) < len; end++) {
        if (!g_ascii_isspace(*end)) {
            cJSON_Delete(root);
            line_col(text, (gsize)(end - text), &line, &col);
            g_set_error(error, domain, code,
                        "%s: unexpected text after the JSON value at "
                        "line %u column %u",
                        name, line, col);
            return NULL;
        }
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
    return parse_object(name, text, len, domain, code, error);
}
