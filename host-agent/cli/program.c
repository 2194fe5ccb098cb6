/*
 * What a program's run takes from the command line (program.h): the program's text, its limits
 * and the function to call, checked before anything starts.
 */
#include "cli/program.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <gio/gio.h>

#include "exec/call.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "session.h"

/* Read the program: at most SBX_FRAME_MAX bytes of UTF-8 without NUL (docs/protocol.md). */
char *sbx_cli_read_program(const char *path, GError **error)
{
    int fd = strcmp(path, "-") == 0 ? dup(STDIN_FILENO) : open(path, O_RDONLY | O_CLOEXEC);
    g_autoptr(GByteArray) buf = g_byte_array_new();
    guint8 chunk[64 * 1024];

    if (fd < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "open `%s`: %s", path,
                    g_strerror(errno));
        return NULL;
    }
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0 || buf->len + n > SBX_FRAME_MAX) {
            int err = errno;
            close(fd);
            if (n < 0) {
                g_set_error(error, G_IO_ERROR, g_io_error_from_errno(err), "read `%s`: %s", path,
                            g_strerror(err));
                return NULL;
            }
            if (n > 0) {
                g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                            "%s: a program may have at most %u bytes", path, SBX_FRAME_MAX);
                return NULL;
            }
            break;
        }
        g_byte_array_append(buf, chunk, n);
    }
    if (memchr(buf->data, '\0', buf->len) != NULL ||
        !g_utf8_validate((const char *)buf->data, buf->len, NULL)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA, "%s: not UTF-8 text", path);
        return NULL;
    }
    g_byte_array_append(buf, (const guint8 *)"", 1);
    return (char *)g_byte_array_free(g_steal_pointer(&buf), FALSE);
}

gboolean sbx_cli_check_program(const char *code, GError **error)
{
    if (strlen(code) > SBX_FRAME_MAX) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                    "the program may have at most %u bytes", SBX_FRAME_MAX);
        return FALSE;
    }
    if (!g_utf8_validate(code, -1, NULL)) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                            "the program is not UTF-8 text");
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_cli_parse_timeout(const char *opt, guint *ret_ms, GError **error)
{
    char *end = NULL;
    double s;

    if (opt == NULL) {
        *ret_ms = SBX_SESSION_TIMEOUT_DEFAULT_MS;
        return TRUE;
    }
    s = g_ascii_strtod(opt, &end);
    if (end == opt || *end != '\0' || !(s > 0) || s > SBX_CLI_TIMEOUT_MAX_S) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--timeout: expected seconds, more than 0 and at most %.0f",
                    SBX_CLI_TIMEOUT_MAX_S);
        return FALSE;
    }
    *ret_ms = (guint)ceil(s * 1000);
    return TRUE;
}

/* BYTES, optionally with a binary suffix: 1048576, 1024K, 1M, 1G. */
gboolean sbx_cli_parse_output_limit(const char *opt, guint64 *ret, GError **error)
{
    char *end = NULL;
    guint64 v, mult = 1;

    if (opt == NULL) {
        *ret = SBX_SESSION_OUTPUT_LIMIT_DEFAULT;
        return TRUE;
    }
    v = g_ascii_strtoull(opt, &end, 10);
    if (end != opt && *end != '\0' && end[1] == '\0') {
        mult = *end == 'K' || *end == 'k' ? 1024
               : *end == 'M'              ? 1024 * 1024
               : *end == 'G'              ? 1024 * 1024 * 1024
                                          : 0;
        end += mult != 0;
    }
    if (end == opt || *end != '\0' || v == 0 || mult == 0 || v > SBX_CLI_OUTPUT_LIMIT_MAX / mult) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--output-limit: expected 1 to %llu bytes (suffixes K, M, G allowed)",
                    SBX_CLI_OUTPUT_LIMIT_MAX);
        return FALSE;
    }
    *ret = v * mult;
    return TRUE;
}

/*
 * The JSON of option @name (@text, NULL: not given) into *@ret: checked as the protocol checks a
 * message's value (docs/protocol.md) and minified, its numbers' literals unchanged.
 */
static gboolean parse_json_opt(const char *name, const char *text, char **ret, GError **error)
{
    char *why = NULL;
    char *json;
    unsigned line, col;

    if (text == NULL) {
        return TRUE;
    }
    /* One level below the top: the value nests inside the execute message. */
    json = sbx_json_normalize(text, strlen(text), SBX_JSON_DEPTH_MAX - 1, &why);
    if (json == NULL) {
        const char *rest =
            why != NULL ? sbx_json_error_where(text, strlen(text), why, &line, &col) : NULL;
        if (rest == NULL) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s: out of memory", name);
        } else if (line > 0) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "%s: not JSON: line %u column %u: %s", name, line, col, rest);
        } else {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s: not JSON: %s", name,
                        rest);
        }
        free(why);
        return FALSE;
    }
    *ret = g_strdup(json);
    free(json);
    return TRUE;
}

gboolean sbx_cli_parse_call(SbxLanguage language, const char *entry, const char *args,
                            const char *kwargs, char **ret_args_json, char **ret_kwargs_json,
                            GError **error)
{
    const char *why;

    if (!parse_json_opt("--args", args, ret_args_json, error) ||
        !parse_json_opt("--kwargs", kwargs, ret_kwargs_json, error)) {
        return FALSE;
    }
    why = sbx_exec_call_check(language, entry, *ret_args_json, *ret_kwargs_json);
    if (why != NULL) {
        /* Its words name the member (`args: ...`): here the option. */
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "--%s", why);
        return FALSE;
    }
    return TRUE;
}
