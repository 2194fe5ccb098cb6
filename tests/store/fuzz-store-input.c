/*
 * Fuzz target: the bytes a client hands the store. The first byte picks the path (modulo 4):
 * even, the input is an `Authorization: Bearer` token (sbx_tenant_authenticate() against a
 * store with one tenant: it must refuse anything but that tenant's key, with
 * SBX_STORE_ERROR_AUTH); 1, the input is the result and the code of an execution's record
 * (sbx_records_finish() of an id that does not exist: the checks run, nothing is written, so
 * the store does not grow); 3, the input is a session's end reason (bounded and made UTF-8
 * before the write, which finds no such session) and a session id a client asks for.
 */
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/records.h"
#include "store/sessions.h"
#include "store/tenants.h"

static SbxStore *store;
static char *store_dir;
static char *store_key;

static void remove_store(void)
{
    const char *names[] = {"sandbox.db", "sandbox.db-wal", "sandbox.db-shm", "sandbox.db.lock"};

    sbx_store_close(store);
    for (gsize i = 0; i < G_N_ELEMENTS(names); i++) {
        g_autofree char *p = g_build_filename(store_dir, names[i], NULL);
        g_unlink(p);
    }
    g_rmdir(store_dir);
    g_free(store_dir);
    g_free(store_key);
}

static void make_store(void)
{
    store_dir = g_dir_make_tmp("sbx-fuzz-store-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(store_dir, "sandbox.db", NULL);
    store = store_dir != NULL ? sbx_store_open(path, NULL) : NULL;
    if (store == NULL || !sbx_tenant_add(store, "fuzz", NULL, NULL, &store_key, NULL)) {
        abort();
    }
    atexit(remove_store);
}

static void try_bearer(const char *text)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxTenant) t = NULL;

    if (sbx_tenant_authenticate(store, text, &t, &error) != (strcmp(text, store_key) == 0)) {
        abort();
    }
    if (error != NULL && !g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_AUTH)) {
        abort();
    }
}

static void try_record(const char *text)
{
    g_autoptr(GError) error = NULL;
    SbxRecord r = {.id = "fuzz-none", .status = "ok", .result_json = (char *)text};
    SbxRecordCall call = {.provider = "p", .tool = "t", .input_json = (char *)text};

    if (sbx_records_finish(store, &r, &call, 1, NULL, 0, &error) ||
        (!g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID) &&
         !g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND))) {
        abort();
    }
}

static void try_session(const char *text)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSessionRecord) s = NULL;

    if (sbx_session_records_end(store, "fuzz-none", "crashed", text, 0, &error) ||
        !g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND)) {
        abort();
    }
    g_clear_error(&error);
    if (sbx_session_records_get(store, NULL, text, &s, &error) ||
        !g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND)) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    if (store == NULL) {
        make_store();
    }
    g_autofree char *text = g_strndup((const char *)data + 1, size - 1); /* to the first NUL */
    if (data[0] % 2 == 0) {
        try_bearer(text);
    } else if (data[0] % 4 == 1) {
        try_record(text);
    } else {
        try_session(text);
    }
    return 0;
}
