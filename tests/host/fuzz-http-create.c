/*
 * Fuzz target: the body of POST /v1/executions (host-agent/server/http-request.c), decoded for a
 * tenant with limits of its own. Checks: an accepted body holds what the server relies on (a
 * known language, non-empty UTF-8 code of at most 1 MiB, an allowed catalog or none, a timeout
 * and an output limit within the tenant's maxima, a function call the core accepts: an
 * identifier, args an array, kwargs an object for Python, both only with an entry, as their
 * minified JSON texts); a refused one says why and holds nothing;
 * decoding twice gives the same. Everything is freed (ASan).
 */
#include <string.h>

#include <glib.h>

#include "../protocol/fuzz.h"
#include "exec/call.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "server/http-request.h"

/* @text (NULL: none) is the minified text of a JSON array or object (@kind '[' or '{'). */
static gboolean is_json_of(const char *text, char kind)
{
    if (text == NULL) {
        return TRUE;
    }
    cJSON *v = sbx_json_parse(text, strlen(text), SBX_JSON_DEPTH_MAX, NULL);
    char *min = sbx_json_minify(text, strlen(text));
    gboolean ok = (kind == '[' ? cJSON_IsArray(v) : cJSON_IsObject(v)) && min != NULL &&
                  strcmp(min, text) == 0;

    free(min);
    cJSON_Delete(v);
    return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const catalogs[] = {"web", "db", NULL};
    const SbxHttpLimits limits = {
        .max_timeout_ms = 120000,
        .max_output_bytes = 1048576,
        .catalogs = catalogs,
    };
    g_auto(SbxHttpCreate) a = {0};
    g_auto(SbxHttpCreate) b = {0};
    g_autofree char *why = sbx_http_create_decode((const char *)data, size, &limits, &a);
    g_autofree char *why_again = sbx_http_create_decode((const char *)data, size, &limits, &b);

    FUZZ_CHECK((why == NULL) == (why_again == NULL));
    if (why != NULL) {
        FUZZ_CHECK(why[0] != '\0' && g_utf8_validate(why, -1, NULL));
        FUZZ_CHECK(a.code == NULL && a.catalog == NULL);
        FUZZ_CHECK(a.entry == NULL && a.args_json == NULL && a.kwargs_json == NULL);
        return 0;
    }
    /* The call: what exec/call.h allows (the core asserts it), its JSON as sent, minified. */
    FUZZ_CHECK(sbx_exec_call_check(a.language, a.entry, a.args_json, a.kwargs_json) == NULL);
    FUZZ_CHECK(a.entry == NULL || sbx_identifier_valid(a.entry));
    FUZZ_CHECK(is_json_of(a.args_json, '[') && is_json_of(a.kwargs_json, '{'));
    FUZZ_CHECK(a.kwargs_json == NULL || a.language == SBX_LANG_PYTHON);
    FUZZ_CHECK(a.entry != NULL || (a.args_json == NULL && a.kwargs_json == NULL));
    FUZZ_CHECK(g_strcmp0(a.entry, b.entry) == 0 && g_strcmp0(a.args_json, b.args_json) == 0);
    FUZZ_CHECK(g_strcmp0(a.kwargs_json, b.kwargs_json) == 0);
    FUZZ_CHECK(a.language < SBX_LANG__COUNT);
    FUZZ_CHECK(a.code != NULL && a.code[0] != '\0' && strlen(a.code) <= SBX_HTTP_CODE_MAX);
    FUZZ_CHECK(g_utf8_validate(a.code, -1, NULL));
    FUZZ_CHECK(a.catalog == NULL || g_strv_contains(catalogs, a.catalog));
    FUZZ_CHECK(a.timeout_ms >= 1 && a.timeout_ms <= limits.max_timeout_ms);
    FUZZ_CHECK(a.output_limit >= 1 && a.output_limit <= limits.max_output_bytes);
    FUZZ_CHECK(strcmp(a.code, b.code) == 0 && a.timeout_ms == b.timeout_ms);
    return 0;
}
