/*
 * Fuzz target: a bundle from another machine (host-agent/replay/bundle-read.c). The input is
 * the bundle file; sbx_bundle_open() must either give a bundle or fail with an error, and
 * sbx_bundle_free() (or the failure) must leave nothing behind in the work directory.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdlib.h>

#include "replay/bundle.h"

static char *top;
static char *file;
static char *work;

static void cleanup(void)
{
    g_unlink(file);
    g_rmdir(work);
    g_rmdir(top);
    g_free(file);
    g_free(work);
    g_free(top);
}

static gboolean empty_or_gone(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    return d == NULL || g_dir_read_name(d) == NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    SbxBundle *b = NULL;
    GError *error = NULL;

    if (top == NULL) {
        top = g_dir_make_tmp("sbx-fuzz-bundle-XXXXXX", NULL);
        if (top == NULL)
            abort();
        file = g_build_filename(top, "in.bundle", NULL);
        work = g_build_filename(top, "work", NULL);
        atexit(cleanup);
    }
    if (!g_file_set_contents(file, (const char *)data, (gssize)size, NULL))
        abort();
    gboolean ok = sbx_bundle_open(file, work, &b, &error);
    if (ok != (b != NULL) || ok == (error != NULL))
        abort();
    sbx_bundle_free(b);
    g_clear_error(&error);
    if (!empty_or_gone(work))
        abort();
    return 0;
}
