/*
 * `sandbox run --seed HEX --clock-log FILE --event-log FILE`: the replay inputs parsed and
 * checked (run-replay.h).
 */
#include "cli/run-replay.h"

#include <cJSON.h>
#include <gio/gio.h>
#include <string.h>

#include "protocol/json.h"

gboolean sbx_cli_seed_parse(const char *hex, guint8 seed[SBX_SEED_BYTES], GError **error)
{
    if (strlen(hex) != 2 * SBX_SEED_BYTES) {
        goto bad;
    }
    for (gsize i = 0; i < SBX_SEED_BYTES; i++) {
        int hi = g_ascii_xdigit_value(hex[2 * i]);
        int lo = g_ascii_xdigit_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            goto bad;
        }
        seed[i] = (guint8)(hi << 4 | lo);
    }
    return TRUE;
bad:
    g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                "--seed: expected %d hex digits (a record's seed)", 2 * SBX_SEED_BYTES);
    return FALSE;
}

/* The reads of the array @arr into a new array; FALSE if one is no integer 0..2^53-1. */
static gboolean reads_of(const cJSON *arr, guint64 **ret, gsize *ret_n)
{
    gsize n = (gsize)cJSON_GetArraySize(arr);
    g_autofree guint64 *log = g_new(guint64, MAX(n, 1));
    const cJSON *c;
    gsize i = 0;

    cJSON_ArrayForEach(c, arr)
    {
        gint64 v;
        if (!sbx_json_int64(c, &v) || v < 0 || (guint64)v > SBX_JSON_INT_MAX) {
            return FALSE;
        }
        log[i++] = (guint64)v;
    }
    *ret = g_steal_pointer(&log);
    *ret_n = n;
    return TRUE;
}

/* A JSON array of at most @max integers 0..2^53-1 in @path, for the option @opt ("--x"). */
static gboolean log_read(const char *opt, const char *what, gsize max, const char *path,
                         guint64 **ret, gsize *ret_n, GError **error)
{
    g_autoptr(GFile) file = g_file_new_for_commandline_arg(path);
    g_autoptr(GFileInfo) info = g_file_query_info(file, G_FILE_ATTRIBUTE_STANDARD_SIZE,
                                                  G_FILE_QUERY_INFO_NONE, NULL, error);
    g_autofree char *text = NULL;
    gsize len = 0;

    if (info == NULL) {
        g_prefix_error(error, "%s: ", opt);
        return FALSE;
    }
    if (g_file_info_get_size(info) > SBX_CLI_CLOCK_LOG_FILE_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "%s: %s is larger than %u bytes", opt, path, SBX_CLI_CLOCK_LOG_FILE_MAX);
        return FALSE;
    }
    if (!g_file_load_contents(file, NULL, &text, &len, NULL, error)) {
        g_prefix_error(error, "%s: ", opt);
        return FALSE;
    }
    cJSON *v = len <= SBX_CLI_CLOCK_LOG_FILE_MAX
                   ? sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, NULL)
                   : NULL;
    gboolean ok = v != NULL && cJSON_IsArray(v) && (gsize)cJSON_GetArraySize(v) <= max &&
                  reads_of(v, ret, ret_n);
    cJSON_Delete(v);
    if (!ok) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "%s: %s is not a JSON array of at most %zu integers 0..2^53-1 (a record's "
                    "%s)",
                    opt, path, max, what);
    }
    return ok;
}

gboolean sbx_cli_clock_log_read(const char *path, guint64 **ret, gsize *ret_n, GError **error)
{
    return log_read("--clock-log", "clock_log", SBX_CLOCK_READS_MAX, path, ret, ret_n, error);
}

gboolean sbx_cli_event_log_read(const char *path, guint64 **ret, gsize *ret_n, GError **error)
{
    return log_read("--event-log", "event_log", SBX_EVENT_LOG_MAX, path, ret, ret_n, error);
}
