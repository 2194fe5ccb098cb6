/*
 * Kind `http` of the catalog (catalog-http.h): parsing the endpoints when the catalog loads,
 * and turning a call's input into a URL and a body when a call comes.
 */
#include "catalog-http.h"

#include <string.h>

#include "catalog-private.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "tools-error.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

const char *const sbx_catalog_http_provider_fields[] = {"kind", "timeout_ms", "headers", "tools",
                                                        NULL};
const char *const sbx_catalog_http_tool_fields[] = {
    "description", "input_schema", "output_schema", "method", "url", "headers", NULL};

static const char *const methods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", NULL};

/* Headers libsoup sets from the request itself: a catalog value would contradict it. */
static const char *const reserved_headers[] = {"host", "content-length", "transfer-encoding",
                                               "connection", NULL};

static const char SECRET_PREFIX[] = "${secret:";

void sbx_http_endpoint_free(SbxHttpEndpoint *ep)
{
    if (ep == NULL) {
        return;
    }
    g_free(ep->method);
    g_free(ep->url);
    g_strfreev(ep->header_names);
    g_strfreev(ep->header_values);
    g_free(ep);
}

gboolean sbx_http_method_has_body(const char *method)
{
    return strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
           strcmp(method, "PATCH") == 0;
}

/* [A-Za-z0-9_]{1,SBX_HTTP_NAME_MAX}: placeholder and secret names. */
static gboolean word_valid(const char *s, gsize len)
{
    if (len == 0 || len > SBX_HTTP_NAME_MAX) {
        return FALSE;
    }
    for (gsize i = 0; i < len; i++) {
        if (!g_ascii_isalnum(s[i]) && s[i] != '_') {
            return FALSE;
        }
    }
    return TRUE;
}

/* ---- header values: literal text and ${secret:NAME} ---------------------------------- */

char *sbx_http_expand_secrets(const char *value_template, SbxSecretLookup lookup, gpointer data,
                              GError **error)
{
    g_autoptr(GString) out = g_string_new(NULL);
    const char *p = value_template;

    for (const char *ref; (ref = strstr(p, SECRET_PREFIX)) != NULL;) {
        const char *name = ref + strlen(SECRET_PREFIX);
        const char *end = strchr(name, '}');
        g_string_append_len(out, p, ref - p);
        if (end == NULL || !word_valid(name, end - name)) {
            g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_TOOL, "invalid secret reference");
            return NULL;
        }
        g_autofree char *n = g_strndup(name, end - name);
        g_autofree char *value = lookup(n, data, error);
        if (value == NULL) {
            return NULL;
        }
        g_string_append(out, value);
        p = end + 1;
    }
    g_string_append(out, p);
    return g_string_free(g_steal_pointer(&out), FALSE);
}

/* Header value template: printable text; `${` only as the start of ${secret:NAME}. */
static gboolean header_value_valid(const char *v, const char **why)
{
    if (strlen(v) > SBX_HTTP_HEADER_VALUE_MAX || !g_utf8_validate(v, -1, NULL)) {
        *why = "expected UTF-8 text of at most 8192 bytes";
        return FALSE;
    }
    for (const char *p = v; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            *why = "control characters (such as a line break) are not allowed";
            return FALSE;
        }
        if (p[0] == '$' && p[1] == '{') {
            const char *name = p + strlen(SECRET_PREFIX);
            const char *end = strchr(p, '}');
            if (strncmp(p, SECRET_PREFIX, strlen(SECRET_PREFIX)) != 0 || end == NULL ||
                !word_valid(name, end - name)) {
                *why = "`${` starts a secret reference: ${secret:NAME}, NAME of [A-Za-z0-9_]";
                return FALSE;
            }
        }
    }
    return TRUE;
}

/* A header name: an HTTP token (RFC 9110), not one libsoup sets itself. */
static gboolean header_name_valid(const char *n)
{
    static const char tchar[] = "!#$%&'*+-.^_`|~";
    gsize len = strlen(n);

    if (len == 0 || len > SBX_HTTP_HEADER_NAME_MAX) {
        return FALSE;
    }
    for (const char *p = n; *p != '\0'; p++) {
        if (!g_ascii_isalnum(*p) && strchr(tchar, *p) == NULL) {
            return FALSE;
        }
    }
    g_autofree char *lower = g_ascii_strdown(n, -1);
    return !g_strv_contains(reserved_headers, lower);
}

static gboolean parse_headers(const cJSON *obj, SbxHttpEndpoint *ep, const char *origin,
                              const char *where, GError **error)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "headers");
    g_autofree char *at = sbx_catalog_path_join(where, "headers");
    const cJSON *m;
    gsize n = 0;

    ep->header_names = g_new0(char *, 1);
    ep->header_values = g_new0(char *, 1);
    if (h == NULL) {
        return TRUE;
    }
    if (!cJSON_IsObject(h) || cJSON_GetArraySize(h) > SBX_HTTP_HEADERS_MAX) {
        sbx_catalog_invalid(error, origin, at, "expected an object of at most %d headers",
                            SBX_HTTP_HEADERS_MAX);
        return FALSE;
    }
    if (!sbx_catalog_check_members(h, NULL, origin, at, error)) {
        return FALSE;
    }
    g_strfreev(ep->header_names);
    g_strfreev(ep->header_values);
    ep->header_names = g_new0(char *, cJSON_GetArraySize(h) + 1);
    ep->header_values = g_new0(char *, cJSON_GetArraySize(h) + 1);
    cJSON_ArrayForEach(m, h)
    {
        g_autofree char *h_at = sbx_catalog_path_join(at, m->string);
        const char *why = "expected a string";
        if (!header_name_valid(m->string)) {
            sbx_catalog_invalid(error, origin, h_at,
                                "not a header name the catalog may set (an HTTP token; not "
                                "Host, Content-Length, Transfer-Encoding, Connection)");
            return FALSE;
        }
        if (!cJSON_IsString(m) || !header_value_valid(m->valuestring, &why)) {
            sbx_catalog_invalid(error, origin, h_at, "%s", why);
            return FALSE;
        }
        ep->header_names[n] = g_strdup(m->string);
        ep->header_values[n++] = g_strdup(m->valuestring);
    }
    ep->n_headers = n;
    return TRUE;
}

gboolean sbx_catalog_http_parse_provider(const cJSON *obj, SbxCatalogProvider *prov,
                                         const char *origin, const char *where, GError **error)
{
    prov->http = g_new0(SbxHttpEndpoint, 1);
    return parse_headers(obj, prov->http, origin, where, error);
}

/* ---- URL templates -------------------------------------------------------------------- */

/*
 * Check a URL template: http:// or https://, a literal authority (a placeholder there would let
 * the guest pick the host that receives the headers, secrets included), placeholders `{name}`
 * only after it, no fragment, and a valid URL once every placeholder is filled.
 */
static gboolean url_template_valid(const char *url, const char **why)
{
    gsize len = strlen(url);
    const char *scheme_end = strstr(url, "://");

    if (len == 0 || len > SBX_HTTP_URL_TEMPLATE_MAX || !g_str_is_ascii(url)) {
        *why = "expected an ASCII URL of at most 4096 bytes";
        return FALSE;
    }
    if (!g_str_has_prefix(url, "http://") && !g_str_has_prefix(url, "https://")) {
        *why = "only http:// and https:// URLs";
        return FALSE;
    }
    const char *path = scheme_end + 3 + strcspn(scheme_end + 3, "/?#");
    if (memchr(url, '{', path - url) != NULL || memchr(url, '}', path - url) != NULL) {
        *why = "no placeholder in the scheme or host (it would choose where the headers go)";
        return FALSE;
    }
    if (strchr(url, '#') != NULL) {
        *why = "no fragment (#): it is never sent";
        return FALSE;
    }
    g_autoptr(GString) filled = g_string_new(NULL);
    for (const char *p = url; *p != '\0'; p++) {
        if (*p == '}') {
            *why = "a `}` without its `{`";
            return FALSE;
        }
        if (*p != '{') {
            g_string_append_c(filled, *p);
            continue;
        }
        const char *end = strchr(p, '}');
        if (end == NULL || !word_valid(p + 1, end - p - 1)) {
            *why = "a placeholder is {name}, name of [A-Za-z0-9_] (1 to 128)";
            return FALSE;
        }
        g_string_append_c(filled, 'x');
        p = end;
    }
    g_autoptr(GUri) uri = g_uri_parse(filled->str, G_URI_FLAGS_NONE, NULL);
    if (uri == NULL || g_uri_get_host(uri) == NULL || g_uri_get_host(uri)[0] == '\0') {
        *why = "not a valid absolute URL with a host";
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_catalog_http_parse_tool(const cJSON *obj, SbxCatalogTool *tool, const char *origin,
                                     const char *where, GError **error)
{
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(obj, "method");
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(obj, "url");
    g_autofree char *m_at = sbx_catalog_path_join(where, "method");
    g_autofree char *u_at = sbx_catalog_path_join(where, "url");
    const char *why = "expected a string";

    tool->http = g_new0(SbxHttpEndpoint, 1);
    if (method != NULL &&
        (!cJSON_IsString(method) || !g_strv_contains(methods, method->valuestring))) {
        sbx_catalog_invalid(error, origin, m_at, "expected one of GET, POST, PUT, PATCH, DELETE");
        return FALSE;
    }
    tool->http->method = g_strdup(method != NULL ? method->valuestring : "GET");
    if (url == NULL) {
        sbx_catalog_invalid(error, origin, where, "missing field \"url\" (required for kind http)");
        return FALSE;
    }
    if (!cJSON_IsString(url) || !url_template_valid(url->valuestring, &why)) {
        sbx_catalog_invalid(error, origin, u_at, "%s", why);
        return FALSE;
    }
    tool->http->url = g_strdup(url->valuestring);
    return parse_headers(obj, tool->http, origin, where, error);
}

/* ---- a call's request ----------------------------------------------------------------- */

static void input_error(GError **error, const char *member, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

static void input_error(GError **error, const char *member, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_VALIDATION, "input%s%.128s%s: %s",
                member != NULL ? "[\"" : "", member != NULL ? member : "",
                member != NULL ? "\"]" : "", msg);
}

/* A scalar as text: a string as is, a number as its literal, a boolean as its JSON text. */
static char *scalar_text(const cJSON *v)
{
    if (cJSON_IsString(v)) {
        return g_strdup(v->valuestring);
    }
    if (cJSON_IsNumber(v) || cJSON_IsBool(v)) {
        char *s = sbx_json_print(v);
        char *copy = g_strdup(s);
        free(s);
        return copy;
    }
    return NULL;
}

/*
 * Percent-encode a path value: everything but the unreserved characters (RFC 3986), so `/`,
 * `?` and `%` cannot change the URL's structure.
 */
static char *encode_component(const char *value)
{
    return g_uri_escape_string(value, NULL, FALSE);
}

/* Fill the template's placeholders from @input, detaching the members used. */
static gboolean fill_template(const char *tmpl, cJSON *input, GString *url, GError **error)
{
    g_autoptr(GPtrArray) used = g_ptr_array_new_with_free_func(g_free);

    for (const char *p = tmpl; *p != '\0'; p++) {
        if (*p != '{') {
            g_string_append_c(url, *p);
            continue;
        }
        const char *end = strchr(p, '}'); /* the template was checked at load */
        g_autofree char *name = g_strndup(p + 1, end - p - 1);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(input, name);
        g_autofree char *text = v != NULL ? scalar_text(v) : NULL;
        if (v == NULL) {
            input_error(error, NULL, "missing property \"%s\" (it goes in the URL)", name);
            return FALSE;
        }
        if (text == NULL || text[0] == '\0') {
            input_error(error, name,
                        "expected a non-empty string, a number or a boolean (it "
                        "goes in the URL)");
            return FALSE;
        }
        if (strspn(text, ".") == strlen(text)) {
            /* `.` and `..` would move in the path: URL parsers resolve them, %2E included. */
            input_error(error, name, "\"%s\" cannot go in the URL (it would change the path)",
                        text);
            return FALSE;
        }
        g_autofree char *enc = encode_component(text);
        g_string_append(url, enc);
        g_ptr_array_add(used, g_steal_pointer(&name));
        p = end;
    }
    for (guint i = 0; i < used->len; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(input, used->pdata[i]);
    }
    return TRUE;
}

static gboolean flat_array(const cJSON *v)
{
    const cJSON *e;

    if (!cJSON_IsArray(v)) {
        return FALSE;
    }
    cJSON_ArrayForEach(e, v)
    {
        if (cJSON_IsArray(e) || cJSON_IsObject(e)) {
            return FALSE;
        }
    }
    return TRUE;
}

static void append_param(GString *url, gboolean *first, const char *key, const char *value)
{
    g_autofree char *k = g_uri_escape_string(key, NULL, FALSE);
    g_autofree char *v = g_uri_escape_string(value, NULL, FALSE);
    g_string_append_printf(url, "%s%s=%s", *first ? "" : "&", k, v);
    *first = FALSE;
}

/*
 * The rest of the input as a query: a scalar as `key=text`, null left out, an array of
 * scalars as `key=a&key=b`, anything else (objects, nested arrays) as `key=<compact JSON>`.
 */
static void append_query(GString *url, const cJSON *input)
{
    gboolean first = TRUE;
    const cJSON *m;

    if (input->child == NULL) {
        return;
    }
    g_string_append_c(url, strchr(url->str, '?') != NULL ? '&' : '?');
    gsize mark = url->len;
    cJSON_ArrayForEach(m, input)
    {
        g_autofree char *text = scalar_text(m);
        const cJSON *e;
        if (cJSON_IsNull(m)) {
            continue;
        }
        if (text != NULL) {
            append_param(url, &first, m->string, text);
        } else if (flat_array(m)) {
            cJSON_ArrayForEach(e, m)
            {
                g_autofree char *et = scalar_text(e);
                if (et != NULL) {
                    append_param(url, &first, m->string, et);
                }
            }
        } else {
            char *json = sbx_json_print(m);
            append_param(url, &first, m->string, json != NULL ? json : "null");
            free(json);
        }
    }
    if (url->len == mark) {
        g_string_truncate(url, mark - 1); /* only nulls: no `?` */
    }
}

gboolean sbx_http_build_request(const SbxHttpEndpoint *ep, const char *input_json, char **ret_url,
                                char **ret_body, GError **error)
{
    g_autoptr(cJSON) input =
        sbx_json_parse(input_json, strlen(input_json), SBX_JSON_DEPTH_MAX, NULL);
    g_autoptr(GString) url = g_string_new(NULL);

    if (!cJSON_IsObject(input)) {
        input_error(error, NULL, "expected an object (an http tool's input names its members)");
        return FALSE;
    }
    if (!fill_template(ep->url, input, url, error)) {
        return FALSE;
    }
    g_autofree char *body = NULL;
    if (sbx_http_method_has_body(ep->method)) {
        /* What the URL's placeholders left of the input; numbers print as their literals. */
        char *text = sbx_json_print(input);
        body = g_strdup(text);
        free(text);
    } else {
        append_query(url, input);
    }
    if (url->len > SBX_HTTP_URL_MAX) {
        input_error(error, NULL,
                    "the URL would be longer than %d bytes (a %s sends the input "
                    "in the URL)",
                    SBX_HTTP_URL_MAX, ep->method);
        return FALSE;
    }
    *ret_url = g_string_free(g_steal_pointer(&url), FALSE);
    *ret_body = g_steal_pointer(&body);
    return TRUE;
}
