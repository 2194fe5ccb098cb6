/*
 * Opening the store for a verb, and its errors as exit codes; the store executions are recorded
 * in (store-open.h).
 */
#include "cli/store-open.h"

#include <stdio.h>

#include "cli/cli.h"

SbxStore *sbx_cli_store_try_open(const char *path, GError **error)
{
    g_autofree char *fallback = path == NULL ? sbx_store_default_path() : NULL;

    /* `sandbox serve` may be using it: its running executions are not interrupted. */
    return sbx_store_open_client(path != NULL ? path : fallback, error);
}

SbxStore *sbx_cli_store_open(const char *verb, const char *path)
{
    g_autoptr(GError) error = NULL;
    SbxStore *store = sbx_cli_store_try_open(path, &error);

    if (store == NULL) {
        fprintf(stderr, "%s: %s\n", verb, error->message);
    }
    return store;
}

SbxStore *sbx_cli_store_open_records(SbxOut *out, const char *unrecorded)
{
    g_autoptr(GError) error = NULL;
    SbxStore *store;

    if (g_strcmp0(g_getenv("SANDBOX_RECORDS"), "off") == 0) {
        return NULL;
    }
    store = sbx_cli_store_try_open(NULL, &error);
    if (store == NULL) {
        g_autofree char *warning = g_strdup_printf("%s: %s\n", unrecorded, error->message);
        sbx_out_text(out, SBX_STREAM_STDERR, warning);
    }
    return store;
}

int sbx_cli_store_fail(const char *verb, const GError *error)
{
    fprintf(stderr, "%s: %s\n", verb, error->message);
    return g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID) ? SBX_EXIT_USAGE
                                                                            : SBX_EXIT_STORE;
}
