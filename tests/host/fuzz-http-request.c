/*
 * Fuzz target: what a guest controls of an http tool call (its input, any JSON) through
 * sbx_http_build_request(), and policy globs against names. Byte 0 picks a URL template and
 * method (or, when odd above 0x80, the glob mode: "glob\0name"); the rest is the input.
 * Checks: a built URL always keeps the template's scheme, host and path prefix (the input
 * cannot move the request elsewhere), parses as a URL, and stays within SBX_HTTP_URL_MAX; a
 * body is a JSON object.
 */
#include <cJSON.h>
#include <glib.h>
#include <string.h>

#include "../protocol/fuzz.h"
#include "catalog-http.h"
#include "policy.h"

static const struct {
    const char *method;
    const char *url;
    const char *prefix; /* what no input may change */
} templates[] = {
    {"GET", "https://h.example/repos/{owner}/{repo}", "https://h.example/repos/"},
    {"DELETE", "http://h.example:8080/x?fixed=1", "http://h.example:8080/x?fixed=1"},
    {"POST", "https://h.example/items/{id}/sub", "https://h.example/items/"},
    {"PATCH", "https://h.example/{a}{b}", "https://h.example/"},
};

static void fuzz_glob(const uint8_t *data, size_t size)
{
    g_autofree char *text = g_strndup((const char *)data, size);
    const char *name = text + strlen(text) + 1;
    if ((size_t)(name - text) > size || !sbx_glob_valid(text) || !g_utf8_validate(name, -1, NULL)) {
        return;
    }
    gboolean m = sbx_glob_match(text, name);
    if (strchr(text, '*') == NULL && strchr(text, '?') == NULL && strchr(text, '\\') == NULL) {
        FUZZ_CHECK(m == (strcmp(text, name) == 0)); /* a literal glob is equality */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    if (data[0] >= 0x80 && (data[0] & 1)) {
        fuzz_glob(data + 1, size - 1);
        return 0;
    }
    gsize t = data[0] % G_N_ELEMENTS(templates);
    SbxHttpEndpoint ep = {.method = (char *)templates[t].method, .url = (char *)templates[t].url};
    g_autofree char *input = g_strndup((const char *)data + 1, size - 1);
    g_autofree char *url = NULL, *body = NULL;
    g_autoptr(GError) error = NULL;

    if (!sbx_http_build_request(&ep, input, &url, &body, &error)) {
        FUZZ_CHECK(error != NULL && error->message != NULL);
        return 0;
    }
    FUZZ_CHECK(g_str_has_prefix(url, templates[t].prefix));
    FUZZ_CHECK(strlen(url) <= SBX_HTTP_URL_MAX);
    g_autoptr(GUri) uri = g_uri_parse(url, G_URI_FLAGS_ENCODED, NULL); /* bytes as sent */
    FUZZ_CHECK(uri != NULL && strcmp(g_uri_get_host(uri), "h.example") == 0);
    FUZZ_CHECK((body != NULL) == sbx_http_method_has_body(ep.method));
    if (body != NULL) {
        cJSON *b = cJSON_Parse(body);
        FUZZ_CHECK(cJSON_IsObject(b));
        cJSON_Delete(b);
    }
    return 0;
}
