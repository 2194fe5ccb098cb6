/*
 * Fuzz target: the bodies of POST /v1/executions and POST /v1/sessions
 * (host-agent/server/http-request.c), the same bytes decoded as each, for a tenant with limits
 * of its own. Checks: an accepted execution holds what the server relies on (a known language,
 * UTF-8 code of at most 1 MiB, empty only with an entry, an allowed catalog or none, a timeout
 * and an output limit within the tenant's maxima, a function call the core accepts: an
 * identifier, args an array, kwargs an object for Python, both only with an entry, as their
 * minified JSON texts); an accepted session its timeouts within the maxima and a profile name
 * of 1..64 bytes or none; a refused one says why and holds nothing; decoding twice gives the
 * same. Everything is freed (ASan).
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

/* The same bytes as a session's creation (idle at most 600 s, lifetime at most 3600 s). */
static void session_body(const uint8_t *data, size_t size)
{
    g_auto(SbxHttpSessionCreate) a = {0};
    g_auto(SbxHttpSessionCreate) b = {0};
    g_autofree char *why = sbx_http_session_decode((const char *)data, size, 600, 3600, &a);
    g_autofree char *why_again = sbx_http_session_decode((const char *)data, size, 600, 3600, &b);

    FUZZ_CHECK((why == NULL) == (why_again == NULL));
    if (why != NULL) {
        FUZZ_CHECK(why[0] != '\0' && g_utf8_validate(why, -1, NULL));
        FUZZ_CHECK(a.profile == NULL && a.idle_timeout_s == 0 && a.max_lifetime_s == 0);
        return;
    }
    FUZZ_CHECK(a.idle_timeout_s <= 600 && a.max_lifetime_s <= 3600);
    FUZZ_CHECK(a.profile == NULL || (a.profile[0] != '\0' && strlen(a.profile) <= 64 &&
                                     g_utf8_validate(a.profile, -1, NULL)));
    FUZZ_CHECK(g_strcmp0(a.profile, b.profile) == 0 && a.idle_timeout_s == b.idle_timeout_s &&
               a.max_lifetime_s == b.max_lifetime_s);
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

    session_body(data, size);
    FUZZ_CHECK((why == NULL) == (why_again == NULL));
    if (why != NULL) {
        FUZZ_CHECK(why[0] != '\0' && g_utf8_validate(why, -1, NULL));
        FUZZ_CHECK(a.code == NULL && a.catalog == NULL);
        FUZZ_CHECK(a.entry == NULL && a.args_json == NULL && a.kwargs_json == NULL);
        FUZZ_CHECK(a.files == NULL && a.n_files == 0 && !a.with_files);
        return 0;
    }
    /* The files: what exec-files.h takes (the core asserts the paths), within the caps. */
    gsize total = 0;
    FUZZ_CHECK(a.n_files <= SBX_EXEC_FILES_IN_MAX && a.n_files == b.n_files);
    FUZZ_CHECK(a.with_files || a.n_files == 0);
    for (gsize i = 0; i < a.n_files; i++) {
        FUZZ_CHECK(sbx_workspace_path_valid(a.files[i].path));
        FUZZ_CHECK(g_bytes_equal(a.files[i].bytes, b.files[i].bytes));
        for (gsize j = 0; j < i; j++) {
            FUZZ_CHECK(strcmp(a.files[i].path, a.files[j].path) != 0);
        }
        total += g_bytes_get_size(a.files[i].bytes);
    }
    FUZZ_CHECK(total <= SBX_EXEC_FILES_IN_BYTES_MAX);
    /* The call: what exec/call.h allows (the core asserts it), its JSON as sent, minified. */
    FUZZ_CHECK(sbx_exec_call_check(a.language, a.entry, a.args_json, a.kwargs_json) == NULL);
    FUZZ_CHECK(a.entry == NULL || sbx_identifier_valid(a.entry));
    FUZZ_CHECK(is_json_of(a.args_json, '[') && is_json_of(a.kwargs_json, '{'));
    FUZZ_CHECK(a.kwargs_json == NULL || a.language == SBX_LANG_PYTHON);
    FUZZ_CHECK(a.entry != NULL || (a.args_json == NULL && a.kwargs_json == NULL));
    FUZZ_CHECK(g_strcmp0(a.entry, b.entry) == 0 && g_strcmp0(a.args_json, b.args_json) == 0);
    FUZZ_CHECK(g_strcmp0(a.kwargs_json, b.kwargs_json) == 0);
    FUZZ_CHECK(a.language < SBX_LANG__COUNT);
    /* empty code only with an entry: a session's earlier execution defined the function */
    FUZZ_CHECK(a.code != NULL && (a.code[0] != '\0' || a.entry != NULL) &&
               strlen(a.code) <= SBX_HTTP_CODE_MAX);
    FUZZ_CHECK(g_utf8_validate(a.code, -1, NULL));
    FUZZ_CHECK(a.catalog == NULL || g_strv_contains(catalogs, a.catalog));
    FUZZ_CHECK(a.timeout_ms >= 1 && a.timeout_ms <= limits.max_timeout_ms);
    FUZZ_CHECK(a.output_limit >= 1 && a.output_limit <= limits.max_output_bytes);
    FUZZ_CHECK(strcmp(a.code, b.code) == 0 && a.timeout_ms == b.timeout_ms);
    return 0;
}
