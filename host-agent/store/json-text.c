/*
 * JSON strings for the store's list/show output (store-private.h), with the host agent's one
 * escaper (base/json-builder.h): output bytes may hold NUL and invalid UTF-8, and the JSON
 * printed must still be valid.
 */
#include "store-private.h"

#include <string.h>

#include "base/json-builder.h"

void sbx_store_json_string(GString *out, const char *data, gsize len)
{
    if (data == NULL) {
        g_string_append(out, "null");
        return;
    }
    sbx_json_append_string(out, data, len);
}

void sbx_store_json_str(GString *out, const char *s)
{
    sbx_store_json_string(out, s, s != NULL ? strlen(s) : 0);
}
