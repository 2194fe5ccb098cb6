/*
 * Fuzz target: the tool catalog (tools.json) from bytes, sbx_catalog_parse(), and for every
 * catalog that parses what is derived from it without starting a provider: the namespace and
 * the tool declarations (guest identifiers, built as tools.c builds them), the TypeScript and
 * Python types (render.c), the policy's decision for each tool and a few other names, each
 * http tool's request from an input that fills its URL template, the secrets of its headers,
 * and each tool's input schema on an empty object.
 * Checks: a refusal names the catalog; what parses keeps the catalog's rules (names, kinds and
 * their fields, absolute programs, limits); every name gets a guest identifier that is one
 * ([A-Za-z_][A-Za-z0-9_]*, not reserved) and maps back to it; the rendered types name every
 * provider and tool; the policy decides as its rules say (the first match, then the default, at
 * least approve when destructive) and a name's escaped glob matches it; an http tool's template
 * filled at call time is the URL checked at load time; a header's secrets all expand; a tool
 * process's environment (`env`, `env_pass`) never holds a SANDBOX_SECRET_* variable nor one the
 * catalog did not name or allow, and holds what it named. Nothing may crash or leak.
 */
#include <string.h>

#include "../protocol/fuzz.h"
#include "catalog-http.h"
#include "catalog.h"
#include "namespace.h"
#include "policy.h"
#include "protocol/limits.h"
#include "render.h"
#include "tool-proc.h"
#include "tools-error.h"

#define ORIGIN "fuzz.json"
#define BASE_DIR "/base"

/* A provider or tool name as catalog.c accepts it. */
static gboolean name_ok(const char *name)
{
    gsize len = strlen(name);

    for (const char *p = name; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            return FALSE;
        }
    }
    return len >= 1 && len <= SBX_NAME_MAX && g_utf8_validate(name, -1, NULL);
}

/*
 * A guest identifier: valid in JavaScript and Python, within SBX_NAME_MAX, not reserved. A
 * dunder name keeps its shape with the `_` suffix (`__proto__` is `__proto___`, as namespace.h
 * says): no dunder of either language any more, though sbx_namespace_is_reserved() says yes.
 */
static gboolean ident_ok(const char *ident)
{
    gboolean dunder_suffixed =
        ident != NULL && g_str_has_prefix(ident, "__") && g_str_has_suffix(ident, "___");

    if (ident == NULL || !(g_ascii_isalpha(ident[0]) || ident[0] == '_') ||
        strlen(ident) > SBX_NAME_MAX || (sbx_namespace_is_reserved(ident) && !dunder_suffixed)) {
        return FALSE;
    }
    for (const char *p = ident; *p != '\0'; p++) {
        if (!g_ascii_isalnum(*p) && *p != '_') {
            return FALSE;
        }
    }
    return TRUE;
}

static void check_tool(const SbxCatalogProvider *prov, const SbxCatalogTool *tool)
{
    FUZZ_CHECK(name_ok(tool->name));
    FUZZ_CHECK((tool->input_schema_json != NULL) == (tool->input_schema != NULL));
    FUZZ_CHECK((tool->output_schema_json != NULL) == (tool->output_schema != NULL));
    FUZZ_CHECK(tool->input_schema_json == NULL ||
               strlen(tool->input_schema_json) <= SBX_CATALOG_SCHEMA_MAX);
    FUZZ_CHECK(tool->description == NULL ||
               (strlen(tool->description) <= SBX_CATALOG_DESCRIPTION_MAX &&
                g_utf8_validate(tool->description, -1, NULL)));
    FUZZ_CHECK((tool->http != NULL) == (prov->kind == SBX_PROVIDER_HTTP));
    if (tool->input_schema != NULL) {
        g_autoptr(GError) error = NULL;
        if (!sbx_schema_validate(tool->input_schema, "input", "{}", &error)) {
            FUZZ_CHECK(error != NULL && g_str_has_prefix(error->message, "input"));
        }
    }
}

/* libsoup makes a request of @url (soup_message_new(): SOUP_HTTP_URI_FLAGS, an http(s) host). */
static gboolean soup_would_send(const char *url)
{
    const GUriFlags soup_flags = G_URI_FLAGS_HAS_PASSWORD | G_URI_FLAGS_ENCODED_PATH |
                                 G_URI_FLAGS_ENCODED_QUERY | G_URI_FLAGS_ENCODED_FRAGMENT |
                                 G_URI_FLAGS_SCHEME_NORMALIZE;
    g_autoptr(GUri) uri = g_uri_parse(url, soup_flags, NULL);
    const char *scheme = uri != NULL ? g_uri_get_scheme(uri) : NULL;
    const char *host = uri != NULL ? g_uri_get_host(uri) : NULL;

    return scheme != NULL && (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0) &&
           host != NULL && host[0] != '\0';
}

/*
 * A tool process's environment from the catalog (`env`, `env_pass`): valid names, never one of
 * the http provider's secrets, no name in both, none twice in `env_pass`; and the environment
 * built from it has no secret whatever the host holds.
 */
static void check_env(const SbxCatalogProvider *prov)
{
    g_autoptr(GHashTable) names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);

    for (char **e = prov->env; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        FUZZ_CHECK(eq != NULL && eq != *e);
        char *name = g_strndup(*e, eq - *e);
        FUZZ_CHECK(!g_str_has_prefix(name, SBX_CATALOG_SECRET_ENV_PREFIX));
        FUZZ_CHECK(g_hash_table_add(names, name)); /* object members are unique */
    }
    for (char **n = prov->env_pass; n != NULL && *n != NULL; n++) {
        FUZZ_CHECK(**n != '\0' && strchr(*n, '=') == NULL);
        FUZZ_CHECK(!g_str_has_prefix(*n, SBX_CATALOG_SECRET_ENV_PREFIX));
        FUZZ_CHECK(g_hash_table_add(names, g_strdup(*n)));
    }
    FUZZ_CHECK(g_hash_table_size(names) <= 2 * SBX_CATALOG_ENV_MAX);

    /* The process's environment, from a host that holds a secret, a stray variable, and every
     * `env_pass` name. */
    g_auto(GStrv) host = g_new0(char *, 1);
    host = g_environ_setenv(host, "SANDBOX_SECRET_TOKEN", "s", TRUE);
    host = g_environ_setenv(host, "SBX_FUZZ_STRAY", "x", TRUE);
    host = g_environ_setenv(host, "HOME", "/home/h", TRUE);
    for (char **n = prov->env_pass; n != NULL && *n != NULL; n++) {
        host = g_environ_setenv(host, *n, "passed", TRUE);
    }
    g_auto(GStrv) env = sbx_tool_environ(prov, host);
    for (char **e = env; *e != NULL; e++) {
        FUZZ_CHECK(!g_str_has_prefix(*e, SBX_CATALOG_SECRET_ENV_PREFIX));
    }
    FUZZ_CHECK(g_environ_getenv(env, "SBX_FUZZ_STRAY") == NULL ||
               g_hash_table_contains(names, "SBX_FUZZ_STRAY"));
    FUZZ_CHECK(g_environ_getenv(env, "HOME") != NULL);
    for (char **e = prov->env; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        g_autofree char *name = g_strndup(*e, eq - *e);
        FUZZ_CHECK(g_strcmp0(g_environ_getenv(env, name), eq + 1) == 0); /* `env` wins */
    }
    for (char **n = prov->env_pass; n != NULL && *n != NULL; n++) {
        FUZZ_CHECK(g_strcmp0(g_environ_getenv(env, *n), "passed") == 0);
    }
}

/* The fields of @prov's kind, and only those. */
static void check_provider(const SbxCatalogProvider *prov)
{
    FUZZ_CHECK(name_ok(prov->name));
    FUZZ_CHECK(prov->timeout_ms >= 1 && prov->timeout_ms <= SBX_CATALOG_TIMEOUT_MAX_MS);
    if (prov->command != NULL) {
        gsize n = g_strv_length(prov->command);
        FUZZ_CHECK(n >= 1 && n <= SBX_CATALOG_ARGV_MAX && prov->command[0][0] != '\0');
        /* A program path is absolute, or a bare name looked up in PATH. */
        FUZZ_CHECK(strchr(prov->command[0], '/') == NULL || g_path_is_absolute(prov->command[0]));
        FUZZ_CHECK(prov->workdir != NULL && g_path_is_absolute(prov->workdir));
    }
    switch (prov->kind) {
    case SBX_PROVIDER_COMMAND:
        FUZZ_CHECK(prov->command != NULL && prov->http == NULL && prov->url == NULL);
        FUZZ_CHECK(strcmp(prov->workdir, BASE_DIR) == 0);
        check_env(prov);
        break;
    case SBX_PROVIDER_MCP:
        FUZZ_CHECK((prov->command == NULL) != (prov->url == NULL)); /* exactly one */
        FUZZ_CHECK(prov->url == NULL || soup_would_send(prov->url));
        FUZZ_CHECK(prov->url == NULL || (prov->env == NULL && prov->env_pass == NULL));
        FUZZ_CHECK(prov->command == NULL || prov->headers == NULL);
        FUZZ_CHECK(prov->headers == NULL || g_strv_length(prov->headers) % 2 == 0);
        FUZZ_CHECK(prov->n_tools == 0); /* listed by the server, later */
        check_env(prov);
        for (char **t = prov->only_tools; t != NULL && *t != NULL; t++) {
            FUZZ_CHECK(name_ok(*t));
        }
        break;
    case SBX_PROVIDER_HTTP:
        FUZZ_CHECK(prov->http != NULL && prov->command == NULL && prov->url == NULL);
        FUZZ_CHECK(prov->env == NULL && prov->env_pass == NULL);
        break;
    default:
        FUZZ_CHECK(!"a provider kind out of range");
    }
    for (gsize j = 0; j < prov->n_tools; j++) {
        check_tool(prov, &prov->tools[j]);
    }
}

/* ---- the namespace and the declarations ---------------------------------------------- */

/* The namespace as tools.c and render.c build it; a valid catalog always has one. */
static SbxNamespace *build_namespace(const SbxCatalog *cat)
{
    g_autoptr(GError) error = NULL;
    SbxNamespace *ns = sbx_namespace_new();

    FUZZ_CHECK(sbx_catalog_build_namespace(cat, ns, &error));
    return ns;
}

/* Every name has an identifier that is one, and resolving it gives the name back. */
static void check_namespace(const SbxCatalog *cat, const SbxNamespace *ns)
{
    for (gsize i = 0; i < cat->n_providers; i++) {
        const SbxCatalogProvider *p = &cat->providers[i];
        const char *pid = sbx_namespace_provider_ident(ns, p->name);
        FUZZ_CHECK(ident_ok(pid));
        for (gsize j = 0; j < p->n_tools; j++) {
            const char *tid = sbx_namespace_tool_ident(ns, p->name, p->tools[j].name);
            const char *real_p = NULL, *real_t = NULL;
            FUZZ_CHECK(ident_ok(tid));
            FUZZ_CHECK(sbx_namespace_resolve(ns, pid, tid, &real_p, &real_t));
            FUZZ_CHECK(strcmp(real_p, p->name) == 0 && strcmp(real_t, p->tools[j].name) == 0);
        }
    }
}

/* The types name every provider and tool by its identifier (unless the text is too large). */
static void check_render(const SbxCatalog *cat, const SbxNamespace *ns, SbxRenderLang lang)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *text = sbx_render_types(cat, lang, &error);

    if (text == NULL) {
        FUZZ_CHECK(error != NULL && strstr(error->message, "exceed") != NULL);
        return;
    }
    FUZZ_CHECK(g_utf8_validate(text, -1, NULL) && strlen(text) <= SBX_RENDER_OUTPUT_MAX);
    for (gsize i = 0; i < cat->n_providers; i++) {
        const SbxCatalogProvider *p = &cat->providers[i];
        const char *pid = sbx_namespace_provider_ident(ns, p->name);
        g_autofree char *pdecl = lang == SBX_RENDER_TS
                                     ? g_strdup_printf("\n  %s: {\n", pid)
                                     : g_strdup_printf("class _provider_%s:", pid);
        FUZZ_CHECK(strstr(text, pdecl) != NULL);
        for (gsize j = 0; j < p->n_tools; j++) {
            const char *tid = sbx_namespace_tool_ident(ns, p->name, p->tools[j].name);
            g_autofree char *tdecl = lang == SBX_RENDER_TS
                                         ? g_strdup_printf("\n    %s(input: ", tid)
                                         : g_strdup_printf("\n    def %s(self, input: ", tid);
            FUZZ_CHECK(strstr(text, tdecl) != NULL);
        }
    }
}

/* ---- the policy ------------------------------------------------------------------------ */

/* @name as a glob that matches only it: `*`, `?` and `\` escaped. */
static char *escape_glob(const char *name)
{
    GString *g = g_string_new(NULL);

    for (const char *p = name; *p != '\0'; p++) {
        if (*p == '*' || *p == '?' || *p == '\\') {
            g_string_append_c(g, '\\');
        }
        g_string_append_c(g, *p);
    }
    return g_string_free(g, FALSE);
}

static void check_decision(const SbxPolicy *policy, const char *provider, const char *tool)
{
    g_autofree char *name = g_strconcat(provider, ".", tool, NULL);
    g_autofree char *escaped = escape_glob(name);
    gsize first = 0;

    while (first < policy->n_rules && !sbx_glob_match(policy->rules[first].glob, name)) {
        first++;
    }
    for (int destructive = 0; destructive <= 1; destructive++) {
        SbxPolicyDecision d = sbx_policy_decide(policy, provider, tool, destructive);
        if (first < policy->n_rules) { /* the first rule that matches decides */
            FUZZ_CHECK(d.rule == policy->rules[first].glob);
            FUZZ_CHECK(d.action == policy->rules[first].action);
        } else {
            SbxPolicyAction least = destructive ? SBX_POLICY_APPROVE : SBX_POLICY_ALLOW;
            FUZZ_CHECK(d.rule == NULL && d.action == MAX(policy->fallback, least));
        }
    }
    if (g_utf8_validate(name, -1, NULL) && strlen(escaped) <= SBX_POLICY_GLOB_MAX) {
        FUZZ_CHECK(sbx_glob_valid(escaped) && sbx_glob_match(escaped, name));
    }
}

static void check_policy(const SbxCatalog *cat)
{
    static const char *const others[][2] = {
        {"", ""}, {"a", "b"}, {"x", "delete_y"}, {"github", "delete_repo"}, {"é", "*?\\"},
    };
    const SbxPolicy *policy = &cat->policy;

    FUZZ_CHECK(policy->n_rules <= SBX_POLICY_RULES_MAX);
    FUZZ_CHECK(policy->fallback <= SBX_POLICY_DENY);
    FUZZ_CHECK(policy->approval_timeout_ms >= 1 &&
               policy->approval_timeout_ms <= SBX_POLICY_APPROVAL_TIMEOUT_MAX_MS);
    for (gsize i = 0; i < policy->n_rules; i++) {
        FUZZ_CHECK(sbx_glob_valid(policy->rules[i].glob));
        FUZZ_CHECK(policy->rules[i].action <= SBX_POLICY_DENY);
    }
    for (gsize i = 0; i < cat->n_providers; i++) {
        const SbxCatalogProvider *p = &cat->providers[i];
        for (gsize j = 0; j < p->n_tools; j++) {
            check_decision(policy, p->name, p->tools[j].name);
        }
    }
    for (gsize i = 0; i < G_N_ELEMENTS(others); i++) {
        check_decision(policy, others[i][0], others[i][1]);
    }
}

/* ---- http endpoints -------------------------------------------------------------------- */

static char *fake_secret(const char *name, gpointer data, GError **error)
{
    (void)name;
    (void)error;
    (*(guint *)data)++;
    return g_strdup("S");
}

/* Every `${secret:NAME}` a header was accepted with expands, and nothing like one is left. */
static void check_headers(const SbxHttpEndpoint *ep)
{
    FUZZ_CHECK(ep->header_names != NULL && ep->header_values != NULL);
    FUZZ_CHECK(g_strv_length(ep->header_names) == ep->n_headers);
    for (gsize i = 0; i < ep->n_headers; i++) {
        g_autoptr(GError) error = NULL;
        guint lookups = 0, refs = 0;
        for (const char *p = ep->header_values[i]; (p = strstr(p, "${secret:")) != NULL; p++) {
            refs++;
        }
        g_autofree char *value =
            sbx_http_expand_secrets(ep->header_values[i], fake_secret, &lookups, &error);
        FUZZ_CHECK(value != NULL && lookups == refs && strstr(value, "${") == NULL);
        for (const char *p = value; *p != '\0'; p++) {
            FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f); /* no header splitting */
        }
    }
}

/*
 * The request of a call whose input gives "x" to each placeholder: the template filled as at
 * load time (where it was checked to be a valid URL), nothing else, and an empty body.
 */
static void check_request(const SbxHttpEndpoint *ep)
{
    g_autoptr(GString) input = g_string_new("{");
    g_autoptr(GString) filled = g_string_new(NULL);
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_autoptr(GError) error = NULL;
    g_autofree char *url = NULL, *body = NULL;

    for (const char *p = ep->url; *p != '\0'; p++) {
        const char *end = *p == '{' ? strchr(p, '}') : NULL;
        if (end == NULL) {
            g_string_append_c(filled, *p);
            continue;
        }
        char *name = g_strndup(p + 1, end - p - 1); /* [A-Za-z0-9_]: no escaping needed */
        if (g_hash_table_add(seen, name)) {
            g_string_append_printf(input, "%s\"%s\":\"x\"", input->len > 1 ? "," : "", name);
        }
        g_string_append_c(filled, 'x');
        p = end;
    }
    g_string_append_c(input, '}');
    FUZZ_CHECK(sbx_http_build_request(ep, input->str, &url, &body, &error));
    FUZZ_CHECK(strcmp(url, filled->str) == 0);
    FUZZ_CHECK(sbx_http_method_has_body(ep->method) ? strcmp(body, "{}") == 0 : body == NULL);
    FUZZ_CHECK(soup_would_send(url));
}

static void check_http(const SbxCatalog *cat)
{
    for (gsize i = 0; i < cat->n_providers; i++) {
        const SbxCatalogProvider *p = &cat->providers[i];
        if (p->kind != SBX_PROVIDER_HTTP) {
            continue;
        }
        FUZZ_CHECK(p->http->method == NULL && p->http->url == NULL);
        check_headers(p->http);
        for (gsize j = 0; j < p->n_tools; j++) {
            const SbxHttpEndpoint *ep = p->tools[j].http;
            FUZZ_CHECK(ep->method != NULL && ep->url != NULL);
            check_headers(ep);
            check_request(ep);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat =
        sbx_catalog_parse((const char *)data, size, ORIGIN, BASE_DIR, &error);

    if (cat == NULL) {
        FUZZ_CHECK(error != NULL && error->domain == SBX_CATALOG_ERROR);
        FUZZ_CHECK(g_str_has_prefix(error->message, ORIGIN));
        return 0;
    }
    FUZZ_CHECK(error == NULL && strcmp(cat->origin, ORIGIN) == 0);
    gsize tools = 0;
    for (gsize i = 0; i < cat->n_providers; i++) {
        check_provider(&cat->providers[i]);
        tools += cat->providers[i].n_tools;
    }
    FUZZ_CHECK(tools <= SBX_TOOLS_MAX);
    g_autoptr(SbxNamespace) ns = build_namespace(cat);
    check_namespace(cat, ns);
    check_render(cat, ns, SBX_RENDER_TS);
    check_render(cat, ns, SBX_RENDER_PY);
    check_policy(cat);
    check_http(cat);
    return 0;
}
