/*
 * Loading and validating the tool catalog (see catalog.h, docs/tools.md).
 *
 * cJSON is used here only to read the file; nothing outside this file sees a cJSON value.
 */
#include "catalog.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog-http.h"
#include "catalog-private.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "tools-error.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/* The only catalog format version so far; bumped when a change is not backward compatible. */
#define CATALOG_VERSION 1

static void invalid(GError **error, const char *origin, const char *where, const char *fmt, ...)
    G_GNUC_PRINTF(4, 5);

static void invalid(GError **error, const char *origin, const char *where, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID, "%s: %s%s%s", origin, where,
                where[0] != '\0' ? ": " : "", msg);
}

/* "providers" + "." + key, quoting the key when it is not a plain word. */
static char *path_join(const char *parent, const char *key)
{
    gboolean plain = key[0] != '\0';
    for (const char *p = key; *p != '\0'; p++) {
        plain = plain && (g_ascii_isalnum(*p) || *p == '_' || *p == '-');
    }
    const char *sep = parent[0] != '\0' ? "." : "";
    return plain ? g_strdup_printf("%s%s%s", parent, sep, key)
                 : g_strdup_printf("%s%s\"%s\"", parent, sep, key);
}

/* Check every member of @obj is one of @known (NULL-terminated). Names are unique: the parse
 * refused a repeated one. */
static gboolean check_members(const cJSON *obj, const char *const *known, const char *origin,
                              const char *where, GError **error)
{
    const cJSON *m;

    cJSON_ArrayForEach(m, obj)
    {
        if (known != NULL && !g_strv_contains(known, m->string)) {
            invalid(error, origin, where, "unknown field \"%s\"", m->string);
            return FALSE;
        }
    }
    return TRUE;
}

/* A provider or tool name: 1..SBX_NAME_MAX bytes of UTF-8 without control characters. */
static gboolean check_name(const char *name, const char *origin, const char *where, GError **error)
{
    size_t len = strlen(name);
    if (len == 0 || len > SBX_NAME_MAX) {
        invalid(error, origin, where, "a name must have 1 to %d bytes", SBX_NAME_MAX);
        return FALSE;
    }
    if (!g_utf8_validate(name, len, NULL)) {
        invalid(error, origin, where, "the name is not valid UTF-8");
        return FALSE;
    }
    for (const char *p = name; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            invalid(error, origin, where, "the name contains a control character");
            return FALSE;
        }
    }
    return TRUE;
}

/* An optional string member of at most @max bytes, valid UTF-8; NULL if absent. */
static gboolean get_string(const cJSON *obj, const char *key, gsize max, char **ret,
                           const char *origin, const char *where, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    g_autofree char *at = path_join(where, key);

    if (v == NULL) {
        return TRUE;
    }
    if (!cJSON_IsString(v)) {
        invalid(error, origin, at, "expected a string");
        return FALSE;
    }
    if (strlen(v->valuestring) > max || !g_utf8_validate(v->valuestring, -1, NULL)) {
        invalid(error, origin, at, "expected UTF-8 text of at most %" G_GSIZE_FORMAT " bytes", max);
        return FALSE;
    }
    *ret = g_strdup(v->valuestring);
    return TRUE;
}

/*
 * Optional schema member @key of tool @obj: kept as compact text and compiled once, here, so a
 * broken schema is a catalog error naming the tool, never a surprise at call time.
 */
static gboolean parse_schema(const cJSON *obj, const char *key, char **ret_json,
                             SbxSchema **ret_schema, const char *origin, const char *where,
                             GError **error)
{
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(obj, key);
    g_autofree char *at = path_join(where, key);
    g_autoptr(GError) local = NULL;

    if (schema == NULL) {
        return TRUE;
    }
    if (!cJSON_IsObject(schema)) {
        invalid(error, origin, at, "expected a JSON Schema object");
        return FALSE;
    }
    *ret_json = sbx_json_print(schema);
    if (*ret_json == NULL) {
        invalid(error, origin, at, "out of memory");
        return FALSE;
    }
    if (strlen(*ret_json) > SBX_CATALOG_SCHEMA_MAX) {
        invalid(error, origin, at, "schema larger than %d bytes", SBX_CATALOG_SCHEMA_MAX);
        return FALSE;
    }
    *ret_schema = sbx_schema_compile(*ret_json, &local);
    if (*ret_schema == NULL) {
        invalid(error, origin, at, "%s", local->message);
        return FALSE;
    }
    return TRUE;
}

static gboolean parse_tool(const cJSON *obj, SbxCatalogTool *tool, SbxProviderKind kind,
                           const char *origin, const char *where, GError **error)
{
    static const char *const known_command[] = {"description", "input_schema", "output_schema",
                                                NULL};
    const char *const *known =
        kind == SBX_PROVIDER_HTTP ? sbx_catalog_http_tool_fields : known_command;

    if (!check_name(obj->string, origin, where, error)) {
        return FALSE;
    }
    tool->name = g_strdup(obj->string);
    if (!cJSON_IsObject(obj)) {
        invalid(error, origin, where, "expected an object");
        return FALSE;
    }
    return check_members(obj, known, origin, where, error) &&
           get_string(obj, "description", SBX_CATALOG_DESCRIPTION_MAX, &tool->description, origin,
                      where, error) &&
           parse_schema(obj, "input_schema", &tool->input_schema_json, &tool->input_schema, origin,
                        where, error) &&
           parse_schema(obj, "output_schema", &tool->output_schema_json, &tool->output_schema,
                        origin, where, error) &&
           (kind != SBX_PROVIDER_HTTP ||
            sbx_catalog_http_parse_tool(obj, tool, origin, where, error));
}

static gboolean parse_tools(const cJSON *obj, SbxCatalogProvider *prov, gsize *total,
                            const char *origin, const char *where, GError **error)
{
    g_autofree char *at = path_join(where, "tools");
    const cJSON *m;

    if (!cJSON_IsObject(obj)) {
        invalid(error, origin, at, "expected an object mapping tool names to tools");
        return FALSE;
    }
    if (!check_members(obj, NULL, origin, at, error)) {
        return FALSE;
    }
    gsize n = cJSON_GetArraySize(obj);
    if (n > SBX_TOOLS_MAX - *total) {
        invalid(error, origin, at, "more than %d tools in the catalog", SBX_TOOLS_MAX);
        return FALSE;
    }
    *total += n;
    prov->tools = g_new0(SbxCatalogTool, n);
    cJSON_ArrayForEach(m, obj)
    {
        g_autofree char *tool_at = path_join(at, m->string);
        if (!parse_tool(m, &prov->tools[prov->n_tools++], prov->kind, origin, tool_at, error)) {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean parse_argv(const cJSON *arr, SbxCatalogProvider *prov, const char *base_dir,
                           const char *origin, const char *where, GError **error)
{
    int n = cJSON_GetArraySize(arr);
    const cJSON *a;
    int i = 0;

    if (!cJSON_IsArray(arr) || n < 1 || n > SBX_CATALOG_ARGV_MAX) {
        invalid(error, origin, where, "expected an array of 1 to %d strings (program, args...)",
                SBX_CATALOG_ARGV_MAX);
        return FALSE;
    }
    prov->command = g_new0(char *, n + 1);
    cJSON_ArrayForEach(a, arr)
    {
        if (!cJSON_IsString(a) || a->valuestring[0] == '\0' ||
            strlen(a->valuestring) > SBX_CATALOG_ARG_LEN_MAX) {
            invalid(error, origin, where,
                    "argument %d: expected a non-empty string of at most %d "
                    "bytes",
                    i, SBX_CATALOG_ARG_LEN_MAX);
            return FALSE;
        }
        prov->command[i++] = g_strdup(a->valuestring);
    }
    /* "./tool.py" means next to the catalog; "python3" is looked up in PATH at spawn time. */
    if (strchr(prov->command[0], '/') != NULL && !g_path_is_absolute(prov->command[0])) {
        char *abs = g_build_filename(base_dir, prov->command[0], NULL);
        g_free(prov->command[0]);
        prov->command[0] = abs;
    }
    prov->workdir = g_strdup(base_dir);
    return TRUE;
}

static gboolean parse_timeout(const cJSON *obj, SbxCatalogProvider *prov, const char *origin,
                              const char *where, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "timeout_ms");
    g_autofree char *at = path_join(where, "timeout_ms");

    prov->timeout_ms = SBX_CATALOG_TIMEOUT_DEFAULT_MS;
    if (v == NULL) {
        return TRUE;
    }
    int64_t ms;
    if (!sbx_json_int64(v, &ms) || ms < 1 || ms > SBX_CATALOG_TIMEOUT_MAX_MS) {
        invalid(error, origin, at, "expected an integer from 1 to %d", SBX_CATALOG_TIMEOUT_MAX_MS);
        return FALSE;
    }
    prov->timeout_ms = (guint)ms;
    return TRUE;
}

/* ---- kind mcp ------------------------------------------------------------------------------ */

/* An integer member from 1 to SBX_CATALOG_TIMEOUT_MAX_MS; if absent, @ret keeps its default. */
static gboolean get_ms(const cJSON *obj, const char *key, guint *ret, const char *origin,
                       const char *where, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    g_autofree char *at = path_join(where, key);

    if (v == NULL) {
        return TRUE;
    }
    int64_t ms;
    if (!sbx_json_int64(v, &ms) || ms < 1 || ms > SBX_CATALOG_TIMEOUT_MAX_MS) {
        invalid(error, origin, at, "expected an integer from 1 to %d", SBX_CATALOG_TIMEOUT_MAX_MS);
        return FALSE;
    }
    *ret = (guint)ms;
    return TRUE;
}

/*
 * A variable name for a tool process's environment (`env`, `env_pass`): 1..4096 bytes without
 * '=' or a control character, and never one of the http provider's secrets.
 */
static gboolean check_env_name(const char *name, const char *origin, const char *where,
                               GError **error)
{
    gboolean ok = name[0] != '\0' && strlen(name) <= SBX_CATALOG_ARG_LEN_MAX;
    for (const char *p = name; *p != '\0'; p++) {
        ok = ok && *p != '=' && (unsigned char)*p >= 0x20 && *p != 0x7f;
    }
    if (!ok) {
        invalid(error, origin, where, "not a variable name");
        return FALSE;
    }
    if (g_str_has_prefix(name, SBX_CATALOG_SECRET_ENV_PREFIX)) {
        invalid(error, origin, where,
                "%s* variables hold the http provider's secrets and are never given to a tool "
                "process (use ${secret:NAME} in an http provider's headers)",
                SBX_CATALOG_SECRET_ENV_PREFIX);
        return FALSE;
    }
    return TRUE;
}

/*
 * An object of strings as a flat list: "NAME=value" entries (@env) or name, value pairs
 * (HTTP headers). Names: check_env_name() (env) or an HTTP token (headers); values: at most
 * SBX_CATALOG_ARG_LEN_MAX bytes, no control character (a CR or LF would split a header).
 */
static gboolean get_pairs(const cJSON *obj, const char *key, gboolean env, gsize max, char ***ret,
                          const char *origin, const char *where, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    g_autofree char *at = path_join(where, key);
    g_autoptr(GPtrArray) out = g_ptr_array_new_with_free_func(g_free);
    const cJSON *m;

    if (v == NULL) {
        return TRUE;
    }
    if (!cJSON_IsObject(v) || (gsize)cJSON_GetArraySize(v) > max) {
        invalid(error, origin, at, "expected an object of at most %" G_GSIZE_FORMAT " strings",
                max);
        return FALSE;
    }
    if (!check_members(v, NULL, origin, at, error)) {
        return FALSE;
    }
    cJSON_ArrayForEach(m, v)
    {
        g_autofree char *m_at = path_join(at, m->string);
        gboolean name_ok = m->string[0] != '\0' && strlen(m->string) <= SBX_CATALOG_ARG_LEN_MAX;
        for (const char *p = m->string; *p != '\0'; p++) {
            name_ok = name_ok && (g_ascii_isalnum(*p) || strchr("!#$%&'*+-.^_`|~", *p));
        }
        if (env && !check_env_name(m->string, origin, m_at, error)) {
            return FALSE;
        }
        if (!env && !name_ok) {
            invalid(error, origin, m_at, "not a header name");
            return FALSE;
        }
        gboolean value_ok = cJSON_IsString(m) && strlen(m->valuestring) <= SBX_CATALOG_ARG_LEN_MAX;
        for (const char *p = value_ok ? m->valuestring : ""; *p != '\0'; p++) {
            value_ok = value_ok && (unsigned char)*p >= 0x20 && *p != 0x7f;
        }
        if (!value_ok) {
            invalid(error, origin, m_at,
                    "expected a string of at most %d bytes without control characters",
                    SBX_CATALOG_ARG_LEN_MAX);
            return FALSE;
        }
        if (env) {
            g_ptr_array_add(out, g_strdup_printf("%s=%s", m->string, m->valuestring));
        } else {
            g_ptr_array_add(out, g_strdup(m->string));
            g_ptr_array_add(out, g_strdup(m->valuestring));
        }
    }
    g_ptr_array_add(out, NULL);
    *ret = (char **)g_ptr_array_free(g_steal_pointer(&out), FALSE);
    return TRUE;
}

typedef gboolean (*NameCheck)(const char *name, const char *origin, const char *where,
                              GError **error);

/*
 * An array of at most @max names at @key (absent: *@ret stays NULL), each passing @check and,
 * with @unique, not listed twice; a NULL-terminated copy in *@ret. @what names one ("tool").
 */
static gboolean get_names(const cJSON *obj, const char *key, int max, const char *what,
                          NameCheck check, gboolean unique, char ***ret, const char *origin,
                          const char *where, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    g_autofree char *at = path_join(where, key);
    const cJSON *a;
    gsize i = 0;

    if (v == NULL) {
        return TRUE;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > max) {
        invalid(error, origin, at, "expected an array of at most %d %s names", max, what);
        return FALSE;
    }
    *ret = g_new0(char *, cJSON_GetArraySize(v) + 1);
    cJSON_ArrayForEach(a, v)
    {
        g_autofree char *a_at = g_strdup_printf("%s[%" G_GSIZE_FORMAT "]", at, i);
        if (!cJSON_IsString(a)) {
            invalid(error, origin, a_at, "expected a %s name", what);
            return FALSE;
        }
        if (!check(a->valuestring, origin, a_at, error)) {
            return FALSE;
        }
        if (unique && g_strv_contains((const char *const *)*ret, a->valuestring)) {
            invalid(error, origin, a_at, "%s is named twice", a->valuestring);
            return FALSE;
        }
        (*ret)[i++] = g_strdup(a->valuestring);
    }
    return TRUE;
}

/*
 * `env` then `env_pass`: a tool process's environment beyond the allow-list (child.h).
 * `env_pass` names host variables it gets too (when set on the host): unique, and not also in
 * `env`: one place says where a variable comes from.
 */
static gboolean get_env(const cJSON *obj, SbxCatalogProvider *prov, const char *origin,
                        const char *where, GError **error)
{
    if (!get_pairs(obj, "env", TRUE, SBX_CATALOG_ENV_MAX, &prov->env, origin, where, error) ||
        !get_names(obj, "env_pass", SBX_CATALOG_ENV_MAX, "variable", check_env_name, TRUE,
                   &prov->env_pass, origin, where, error)) {
        return FALSE;
    }
    for (gsize i = 0; prov->env_pass != NULL && prov->env_pass[i] != NULL; i++) {
        const char *name = prov->env_pass[i];
        gsize len = strlen(name);
        for (char **e = prov->env; e != NULL && *e != NULL; e++) {
            if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') {
                g_autofree char *key = path_join(where, "env_pass");
                g_autofree char *at = g_strdup_printf("%s[%" G_GSIZE_FORMAT "]", key, i);
                invalid(error, origin, at, "%s is also set in \"env\"", name);
                return FALSE;
            }
        }
    }
    return TRUE;
}

/* `tools`: the names of the listed tools to expose (the rest are hidden from the guest). */
static gboolean get_tool_filter(const cJSON *obj, SbxCatalogProvider *prov, const char *origin,
                                const char *where, GError **error)
{
    return get_names(obj, "tools", SBX_TOOLS_MAX, "tool", check_name, FALSE, &prov->only_tools,
                     origin, where, error);
}

/*
 * `url`: an http or https URL with a host (loopback or not: the user's choice, as with any
 * server). Without a host ("https:x") libsoup makes no request of it (soup_message_new() NULL).
 */
static gboolean get_url(const cJSON *obj, SbxCatalogProvider *prov, const char *origin,
                        const char *where, GError **error)
{
    g_autofree char *at = path_join(where, "url");

    if (!get_string(obj, "url", SBX_CATALOG_ARG_LEN_MAX, &prov->url, origin, where, error)) {
        return FALSE;
    }
    g_autoptr(GUri) uri = prov->url != NULL ? g_uri_parse(prov->url, G_URI_FLAGS_NONE, NULL) : NULL;
    const char *host = uri != NULL ? g_uri_get_host(uri) : NULL;
    if (prov->url != NULL && (uri == NULL || host == NULL || host[0] == '\0' ||
                              (g_strcmp0(g_uri_get_scheme(uri), "http") != 0 &&
                               g_strcmp0(g_uri_get_scheme(uri), "https") != 0))) {
        invalid(error, origin, at, "expected an http:// or https:// URL with a host");
        return FALSE;
    }
    return TRUE;
}

/*
 * Kind mcp: a server started as a child process (`command`, `env`, `cwd`) or reached over
 * streamable HTTP (`url`, `headers`). Its tools are not in the file: the server lists them when
 * the tools are started (tools.c), optionally filtered by `tools`.
 */
static gboolean parse_mcp_provider(const cJSON *obj, SbxCatalogProvider *prov, const char *base_dir,
                                   const char *origin, const char *where, GError **error)
{
    static const char *const known[] = {
        "kind",  "command",    "env",     "env_pass",           "cwd", "url",
        "tools", "timeout_ms", "headers", "startup_timeout_ms", NULL};
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(obj, "command");
    g_autofree char *cmd_at = path_join(where, "command");
    g_autofree char *cwd = NULL;

    prov->timeout_ms = SBX_CATALOG_TIMEOUT_DEFAULT_MS;
    prov->startup_timeout_ms = SBX_CATALOG_STARTUP_TIMEOUT_DEFAULT_MS;
    if (!check_members(obj, known, origin, where, error) ||
        !get_ms(obj, "timeout_ms", &prov->timeout_ms, origin, where, error) ||
        !get_ms(obj, "startup_timeout_ms", &prov->startup_timeout_ms, origin, where, error) ||
        !get_url(obj, prov, origin, where, error) ||
        !get_tool_filter(obj, prov, origin, where, error) ||
        !get_string(obj, "cwd", SBX_CATALOG_ARG_LEN_MAX, &cwd, origin, where, error) ||
        !get_env(obj, prov, origin, where, error) ||
        !get_pairs(obj, "headers", FALSE, SBX_CATALOG_HEADERS_MAX, &prov->headers, origin, where,
                   error)) {
        return FALSE;
    }
    if ((cmd == NULL) == (prov->url == NULL)) {
        invalid(error, origin, where,
                "an mcp provider needs exactly one of \"command\" (stdio) "
                "and \"url\" (streamable HTTP)");
        return FALSE;
    }
    if (prov->url != NULL && (cwd != NULL || prov->env != NULL || prov->env_pass != NULL)) {
        invalid(error, origin, where,
                "\"cwd\", \"env\" and \"env_pass\" are for a \"command\" server");
        return FALSE;
    }
    if (cmd != NULL && prov->headers != NULL) {
        invalid(error, origin, where, "\"headers\" are for a \"url\" server");
        return FALSE;
    }
    if (cmd != NULL && !parse_argv(cmd, prov, base_dir, origin, cmd_at, error)) {
        return FALSE;
    }
    if (cwd != NULL) { /* relative to the catalog's directory, like the program */
        g_free(prov->workdir);
        prov->workdir = g_canonicalize_filename(cwd, base_dir);
    }
    return TRUE;
}

static gboolean parse_kind(const cJSON *obj, SbxCatalogProvider *prov, const char *origin,
                           const char *where, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "kind");
    g_autofree char *at = path_join(where, "kind");

    if (v == NULL) {
        invalid(error, origin, where, "missing field \"kind\"");
        return FALSE;
    }
    if (!cJSON_IsString(v)) {
        invalid(error, origin, at, "expected a string");
        return FALSE;
    }
    if (strcmp(v->valuestring, "command") == 0) {
        prov->kind = SBX_PROVIDER_COMMAND;
        return TRUE;
    }
    if (strcmp(v->valuestring, "mcp") == 0) {
        prov->kind = SBX_PROVIDER_MCP;
        return TRUE;
    }
    if (strcmp(v->valuestring, "http") == 0) {
        prov->kind = SBX_PROVIDER_HTTP;
        return TRUE;
    }
    invalid(error, origin, at,
            "unsupported provider kind \"%.64s\" (supported: command, mcp, http)", v->valuestring);
    return FALSE;
}

static gboolean parse_command(const cJSON *obj, SbxCatalogProvider *prov, const char *base_dir,
                              const char *origin, const char *where, GError **error)
{
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(obj, "command");
    g_autofree char *cmd_at = path_join(where, "command");
    if (cmd == NULL) {
        invalid(error, origin, where, "missing field \"command\" (required for kind command)");
        return FALSE;
    }
    return parse_argv(cmd, prov, base_dir, origin, cmd_at, error) &&
           get_env(obj, prov, origin, where, error);
}

static gboolean parse_provider(const cJSON *obj, SbxCatalogProvider *prov, gsize *total,
                               const char *base_dir, const char *origin, const char *where,
                               GError **error)
{
    static const char *const known[] = {"kind",       "command", "env", "env_pass",
                                        "timeout_ms", "tools",   NULL};

    if (!check_name(obj->string, origin, where, error)) {
        return FALSE;
    }
    prov->name = g_strdup(obj->string);
    if (!cJSON_IsObject(obj)) {
        invalid(error, origin, where, "expected an object");
        return FALSE;
    }
    if (!parse_kind(obj, prov, origin, where, error)) {
        return FALSE;
    }
    if (prov->kind == SBX_PROVIDER_MCP) {
        return parse_mcp_provider(obj, prov, base_dir, origin, where, error);
    }
    if (!check_members(obj,
                       prov->kind == SBX_PROVIDER_HTTP ? sbx_catalog_http_provider_fields : known,
                       origin, where, error) ||
        !parse_timeout(obj, prov, origin, where, error)) {
        return FALSE;
    }
    if (prov->kind == SBX_PROVIDER_HTTP
            ? !sbx_catalog_http_parse_provider(obj, prov, origin, where, error)
            : !parse_command(obj, prov, base_dir, origin, where, error)) {
        return FALSE;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(obj, "tools");
    if (tools == NULL) {
        invalid(error, origin, where, "missing field \"tools\"");
        return FALSE;
    }
    return parse_tools(tools, prov, total, origin, where, error);
}

static gboolean parse_version(const cJSON *root, const char *origin, GError **error)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");

    int64_t version;
    if (v != NULL && (!sbx_json_int64(v, &version) || version != CATALOG_VERSION)) {
        invalid(error, origin, "version", "unsupported catalog version (this build reads %d)",
                CATALOG_VERSION);
        return FALSE;
    }
    return TRUE;
}

static gboolean parse_root(const cJSON *root, SbxCatalog *cat, const char *base_dir, GError **error)
{
    static const char *const known[] = {"version", "providers", "policy", NULL};
    const cJSON *m;
    gsize total = 0;

    if (!cJSON_IsObject(root)) {
        invalid(error, cat->origin, "", "expected a JSON object at the top level");
        return FALSE;
    }
    if (!check_members(root, known, cat->origin, "", error) ||
        !parse_version(root, cat->origin, error)) {
        return FALSE;
    }
    const cJSON *provs = cJSON_GetObjectItemCaseSensitive(root, "providers");
    if (!cJSON_IsObject(provs)) {
        invalid(error, cat->origin, "providers", "expected an object mapping names to providers");
        return FALSE;
    }
    if (!check_members(provs, NULL, cat->origin, "providers", error)) {
        return FALSE;
    }
    cat->providers = g_new0(SbxCatalogProvider, cJSON_GetArraySize(provs));
    cJSON_ArrayForEach(m, provs)
    {
        g_autofree char *at = path_join("providers", m->string);
        SbxCatalogProvider *prov = &cat->providers[cat->n_providers++];
        if (!parse_provider(m, prov, &total, base_dir, cat->origin, at, error)) {
            return FALSE;
        }
    }
    return sbx_catalog_parse_policy(root, cat, error);
}

/* Report a JSON syntax error with its line and column. */
/* @why is sbx_json_parse()'s reason (NULL: out of memory), shown with its line:column. */
static void syntax_error(const char *text, gsize len, const char *why, const char *origin,
                         GError **error)
{
    guint line, col;
    const char *rest = why != NULL ? sbx_json_error_where(text, len, why, &line, &col) : NULL;

    if (rest == NULL || line == 0) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID, "%s: %s", origin,
                    why != NULL ? why : "out of memory");
        return;
    }
    g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID, "%s:%u:%u: %s", origin, line,
                col, rest);
}

SbxCatalog *sbx_catalog_parse(const char *text, gsize len, const char *origin, const char *base_dir,
                              GError **error)
{
    g_autofree char *why = NULL;

    if (len > SBX_CATALOG_FILE_MAX) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO, "%s: larger than %d bytes",
                    origin, SBX_CATALOG_FILE_MAX);
        return NULL;
    }
    g_autoptr(cJSON) root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    if (root == NULL) {
        syntax_error(text, len, why, origin, error);
        return NULL;
    }
    g_autoptr(SbxCatalog) cat = sbx_catalog_new_empty();
    g_free(cat->origin);
    cat->origin = g_strdup(origin);
    if (!parse_root(root, cat, base_dir, error)) {
        return NULL;
    }
    return g_steal_pointer(&cat);
}

/* Read at most SBX_CATALOG_FILE_MAX bytes of @path; the size is checked before reading. */
static char *read_bounded(const char *path, gsize *ret_len, GError **error)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO, "open `%s`: %s", path,
                    g_strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SBX_CATALOG_FILE_MAX) {
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO,
                    "%s: not a regular file of at most %d bytes", path, SBX_CATALOG_FILE_MAX);
        close(fd);
        return NULL;
    }
    g_autofree char *buf = g_malloc(st.st_size + 1);
    gsize got = 0;
    while (got < (gsize)st.st_size) {
        ssize_t n = read(fd, buf + got, st.st_size - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO, "read `%s`: %s", path,
                        n < 0 ? g_strerror(errno) : "file shrank while reading");
            close(fd);
            return NULL;
        }
        got += n;
    }
    close(fd);
    buf[got] = '\0';
    *ret_len = got;
    return g_steal_pointer(&buf);
}

SbxCatalog *sbx_catalog_load(const char *path, GError **error)
{
    gsize len = 0;
    g_autofree char *text = read_bounded(path, &len, error);
    if (text == NULL) {
        return NULL;
    }
    g_autofree char *abs = g_canonicalize_filename(path, NULL);
    g_autofree char *dir = g_path_get_dirname(abs);
    return sbx_catalog_parse(text, len, path, dir, error);
}

gboolean sbx_catalog_build_namespace(const SbxCatalog *catalog, SbxNamespace *ns, GError **error)
{
    gsize n = catalog->n_providers;
    g_autofree const char **provs = g_new0(const char *, n + 1);
    g_autofree const char *const **tools = g_new0(const char *const *, n + 1);
    g_autoptr(GPtrArray) lists = g_ptr_array_new_with_free_func(g_free);
    for (gsize i = 0; i < n; i++) {
        const SbxCatalogProvider *p = &catalog->providers[i];
        const char **names = g_new0(const char *, p->n_tools + 1);
        for (gsize j = 0; j < p->n_tools; j++) {
            names[j] = p->tools[j].name;
        }
        g_ptr_array_add(lists, names);
        provs[i] = p->name;
        tools[i] = names;
    }
    if (!sbx_namespace_build(ns, provs, tools, n, error)) {
        g_prefix_error(error, "%s: ", catalog->origin);
        return FALSE;
    }
    return TRUE;
}

SbxCatalog *sbx_catalog_new_empty(void)
{
    SbxCatalog *cat = g_new0(SbxCatalog, 1);
    cat->origin = g_strdup("(no catalog)");
    sbx_policy_init(&cat->policy);
    return cat;
}

void sbx_catalog_tools_free(SbxCatalogTool *tools, gsize n)
{
    for (gsize i = 0; i < n; i++) {
        g_free(tools[i].name);
        g_free(tools[i].description);
        cJSON_free(tools[i].input_schema_json);
        cJSON_free(tools[i].output_schema_json);
        sbx_schema_free(tools[i].input_schema);
        sbx_schema_free(tools[i].output_schema);
        sbx_http_endpoint_free(tools[i].http);
    }
    g_free(tools);
}

static void provider_clear(SbxCatalogProvider *prov)
{
    sbx_catalog_tools_free(prov->tools, prov->n_tools);
    sbx_http_endpoint_free(prov->http);
    g_strfreev(prov->command);
    g_strfreev(prov->env);
    g_strfreev(prov->env_pass);
    g_free(prov->url);
    g_strfreev(prov->headers);
    g_strfreev(prov->only_tools);
    g_free(prov->workdir);
    g_free(prov->name);
}

void sbx_catalog_free(SbxCatalog *catalog)
{
    if (catalog == NULL) {
        return;
    }
    for (gsize i = 0; i < catalog->n_providers; i++) {
        provider_clear(&catalog->providers[i]);
    }
    g_free(catalog->providers);
    sbx_policy_clear(&catalog->policy);
    g_free(catalog->origin);
    g_free(catalog);
}

/* ---- for the kinds' and the policy's parsers (catalog-private.h) ---------------------- */

void sbx_catalog_invalid(GError **error, const char *origin, const char *where, const char *fmt,
                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    invalid(error, origin, where, "%s", msg);
}

char *sbx_catalog_path_join(const char *parent, const char *key)
{
    return path_join(parent, key);
}

gboolean sbx_catalog_check_members(const cJSON *obj, const char *const *known, const char *origin,
                                   const char *where, GError **error)
{
    return check_members(obj, known, origin, where, error);
}
