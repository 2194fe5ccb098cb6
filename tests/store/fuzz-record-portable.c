/*
 * Fuzz target: a record in the portable form (store/records-portable.c), as a bundle from
 * another machine carries it. sbx_record_from_json() must accept it or fail with an error; what
 * it accepts must print (sbx_record_to_portable_json()) to a text it parses again to the same
 * text: nothing a replay reads is lost or changed on the way.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/records.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *round_trip(const char *text, size_t len)
{
    SbxRecord *rec = NULL;
    GPtrArray *calls = NULL, *approvals = NULL;
    GError *error = NULL;
    char *out = NULL;

    if (sbx_record_from_json(text, len, &rec, &calls, &approvals, &error)) {
        if (error != NULL || rec == NULL || calls == NULL || approvals == NULL)
            abort();
        out = sbx_record_to_portable_json(rec, calls, approvals);
        sbx_record_free(rec);
        g_ptr_array_unref(calls);
        g_ptr_array_unref(approvals);
    } else if (error == NULL) {
        abort();
    }
    g_clear_error(&error);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *once = round_trip((const char *)data, size);

    if (once != NULL) {
        char *twice = round_trip(once, strlen(once));

        if (twice == NULL || strcmp(once, twice) != 0)
            abort();
        g_free(twice);
    }
    g_free(once);
    return 0;
}
