/*
 * The MCP provider: a real MCP client (protocol 2025-11-25) over stdio or streamable HTTP.
 * Discovery: `initialize`, `notifications/initialized`, then `tools/list` following
 * `nextCursor`; the listed tools become the provider's namespace. Calls: `tools/call`, any
 * number in flight on one server; the result is `structuredContent` when present, otherwise the
 * `content` array; `isError` or a JSON-RPC error is a tool_error. docs/tools.md, "MCP".
 */
#include <cJSON.h>
#include <string.h>

#include "mcp-client.h"
#include "mcp-transports.h"
#include "mcp-wire.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "provider.h"
#include "tools-error.h"

/*
 * The version we ask for, and every version we can speak (the server picks). What 2025-11-25
 * asks of a client that declares no capabilities is resuming a stream the server ends early
 * (mcp-http.c); its other additions are capabilities we do not declare (tasks, URL
 * elicitation, tools in sampling) or metadata we may ignore (icons).
 */
#define MCP_PROTOCOL_VERSION "2025-11-25"
static const char *const supported_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                 "2024-11-05", NULL};

/*
 * Pages of tools/list followed: a server that keeps answering with a nextCursor (or with empty
 * pages) would otherwise hold the start-up until its timeout. 128 pages of 8 tools is already
 * SBX_TOOLS_MAX.
 */
#define MCP_LIST_PAGES_MAX 128

/* A tool error's message: the text content, cut (the guest gets it in an exception). */
#define MCP_ERROR_TEXT_MAX (SBX_ERROR_TEXT_MAX / 2)

typedef struct {
    SbxProvider base;
    const SbxCatalogProvider *config;
    SbxMcpClient *client;
} McpProvider;

/* ---- discovery --------------------------------------------------------------------------- */

typedef struct {
    McpProvider *p;
    gint64 deadline; /* monotonic us: the start-up timeout */
    guint pages;
    GArray *tools;       /* SbxCatalogTool */
    GHashTable *names;   /* names taken */
    GPtrArray *warnings; /* char* */
    guint nameless;      /* listed entries skipped for their name */
} Discovery;

/*
 * Skipped entries warned about one by one: pages of nameless entries do not count toward
 * SBX_TOOLS_MAX, and a warning each could make millions (all sent in serve's done frame).
 */
#define NAMELESS_WARNINGS_MAX 8

static void discovery_free(gpointer data)
{
    Discovery *d = data;
    gsize n = d->tools->len;
    sbx_catalog_tools_free((SbxCatalogTool *)(void *)g_array_free(d->tools, FALSE), n);
    g_hash_table_destroy(d->names);
    g_ptr_array_unref(d->warnings);
    g_free(d);
}

/* Milliseconds left before the start-up deadline (at least 1: the timer then fires at once). */
static guint remaining_ms(const Discovery *d)
{
    gint64 left = (d->deadline - g_get_monotonic_time()) / 1000;
    return left > 0 ? (guint)left : 1;
}

static void discovery_fail(GTask *task, const GError *error)
{
    Discovery *d = g_task_get_task_data(task);

    if (error->domain == SBX_TOOL_ERROR && g_get_monotonic_time() >= d->deadline - 5000) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "MCP server \"%s\" did not start within %u ms "
                                "(startup_timeout_ms): %s",
                                d->p->base.name, d->p->config->startup_timeout_ms, error->message);
        return;
    }
    g_task_return_error(task, g_error_copy(error));
}

/* A description of at most SBX_CATALOG_DESCRIPTION_MAX bytes, cut on a character. */
static char *cut_description(const char *text)
{
    gsize len = strlen(text);
    g_autofree char *valid = NULL;
    if (!g_utf8_validate(text, len, NULL)) { /* U+FFFD (3 bytes) per bad byte: cut after */
        valid = g_utf8_make_valid(text, MIN(len, SBX_CATALOG_DESCRIPTION_MAX));
        text = valid;
        len = strlen(valid);
    }
    if (len <= SBX_CATALOG_DESCRIPTION_MAX) {
        return g_strdup(text);
    }
    const char *end = g_utf8_find_prev_char(text, text + SBX_CATALOG_DESCRIPTION_MAX + 1);
    return g_strndup(text, end - text);
}

/*
 * A listed schema: compiled, or left unchecked with a warning when our validator rejects it (an
 * unsupported $ref, a keyword value we refuse, too large). The server checks its own input
 * anyway, so the tool stays usable; hiding it would be the bigger surprise.
 */
static void take_schema(Discovery *d, const char *tool, const char *what, const cJSON *schema,
                        char **ret_json, SbxSchema **ret_schema)
{
    g_autoptr(GError) error = NULL;

    if (schema == NULL) {
        return;
    }
    char *json = cJSON_IsObject(schema) ? sbx_json_print(schema) : NULL;
    if (json == NULL || strlen(json) > SBX_SCHEMA_TEXT_MAX) {
        g_ptr_array_add(d->warnings,
                        g_strdup_printf("%s.%s: %s is not an object of at most %d "
                                        "bytes; not checked",
                                        d->p->base.name, tool, what, SBX_SCHEMA_TEXT_MAX));
        free(json);
        return;
    }
    *ret_schema = sbx_schema_compile(json, &error);
    if (*ret_schema == NULL) {
        g_ptr_array_add(d->warnings, g_strdup_printf("%s.%s: %s not checked: %s", d->p->base.name,
                                                     tool, what, error->message));
    }
    *ret_json = json; /* kept either way: `sandbox tools --types` renders it */
}

static gboolean name_ok(const char *name)
{
    gsize len = strlen(name);
    if (len == 0 || len > SBX_NAME_MAX || !g_utf8_validate(name, len, NULL)) {
        return FALSE;
    }
    for (const char *c = name; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            return FALSE;
        }
    }
    return TRUE;
}

/* One entry of a tools/list page. FALSE only when the tool limit is reached. */
static gboolean take_tool(Discovery *d, const cJSON *t, GError **error)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
    const cJSON *ann = cJSON_GetObjectItemCaseSensitive(t, "annotations");
    const char *const *only = (const char *const *)d->p->config->only_tools;

    if (!cJSON_IsString(name) || !name_ok(name->valuestring)) {
        if (++d->nameless <= NAMELESS_WARNINGS_MAX) {
            g_ptr_array_add(d->warnings, g_strdup_printf("%s: a listed tool without a valid name "
                                                         "(1 to %d bytes of UTF-8); skipped",
                                                         d->p->base.name, SBX_NAME_MAX));
        } else if (d->nameless == NAMELESS_WARNINGS_MAX + 1) {
            g_ptr_array_add(d->warnings,
                            g_strdup_printf("%s: more listed tools without a valid name; skipped "
                                            "(not reported one by one)",
                                            d->p->base.name));
        }
        return TRUE;
    }
    if ((only != NULL && !g_strv_contains(only, name->valuestring)) ||
        g_hash_table_contains(d->names, name->valuestring)) {
        return TRUE; /* filtered out, or listed twice (the first one counts) */
    }
    if (d->tools->len >= SBX_TOOLS_MAX) {
        g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                    "MCP server \"%s\" lists more than %d tools", d->p->base.name, SBX_TOOLS_MAX);
        return FALSE;
    }
    SbxCatalogTool tool = {.name = g_strdup(name->valuestring)};
    if (cJSON_IsString(desc)) {
        tool.description = cut_description(desc->valuestring);
    }
    take_schema(d, tool.name, "inputSchema", cJSON_GetObjectItemCaseSensitive(t, "inputSchema"),
                &tool.input_schema_json, &tool.input_schema);
    take_schema(d, tool.name, "outputSchema", cJSON_GetObjectItemCaseSensitive(t, "outputSchema"),
                &tool.output_schema_json, &tool.output_schema);
    /*
     * Only an explicit destructiveHint counts. The spec's default is "destructive" for a tool
     * that is not read-only, but most servers annotate nothing: that default would put every
     * call of every unannotated tool behind an approval.
     */
    const cJSON *hint = cJSON_GetObjectItemCaseSensitive(ann, "destructiveHint");
    const cJSON *ro = cJSON_GetObjectItemCaseSensitive(ann, "readOnlyHint");
    tool.destructive = cJSON_IsTrue(hint) && !cJSON_IsTrue(ro);
    g_array_append_val(d->tools, tool);
    g_hash_table_add(d->names, g_array_index(d->tools, SbxCatalogTool, d->tools->len - 1).name);
    return TRUE;
}

static void list_page(GTask *task, const char *cursor);

/* A name in the `tools` filter that the server did not list: a typo, or a tool that went away. */
static void warn_missing(Discovery *d)
{
    for (char **n = d->p->config->only_tools; n != NULL && *n != NULL; n++) {
        if (!g_hash_table_contains(d->names, *n)) {
            g_ptr_array_add(d->warnings, g_strdup_printf("%s: \"tools\" names %s, which the "
                                                         "server does not list",
                                                         d->p->base.name, *n));
        }
    }
}

static void on_list(const cJSON *result, const GError *error, gpointer data)
{
    GTask *task = data;
    Discovery *d = g_task_get_task_data(task);
    GError *local = NULL;
    const cJSON *t;

    if (error != NULL) {
        discovery_fail(task, error);
        g_object_unref(task);
        return;
    }
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(result, "tools");
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(result, "nextCursor");
    if (!cJSON_IsArray(tools)) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "MCP server \"%s\": tools/list answered without a tools array",
                                d->p->base.name);
        g_object_unref(task);
        return;
    }
    cJSON_ArrayForEach(t, tools)
    {
        if (cJSON_IsObject(t) && !take_tool(d, t, &local)) {
            g_task_return_error(task, local);
            g_object_unref(task);
            return;
        }
    }
    if (cJSON_IsString(next)) { /* opaque, sent back as is (bounded by SBX_MCP_MESSAGE_MAX) */
        if (++d->pages >= MCP_LIST_PAGES_MAX) {
            g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                    "MCP server \"%s\": tools/list has more than %d pages",
                                    d->p->base.name, MCP_LIST_PAGES_MAX);
            g_object_unref(task);
            return;
        }
        list_page(task, next->valuestring); /* keeps the reference */
        return;
    }
    warn_missing(d);
    g_task_return_boolean(task, TRUE);
    g_object_unref(task);
}

static void list_page(GTask *task, const char *cursor)
{
    Discovery *d = g_task_get_task_data(task);
    cJSON *params = NULL;

    if (cursor != NULL) {
        params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "cursor", cursor);
    }
    sbx_mcp_client_request(d->p->client, "tools/list", params, remaining_ms(d),
                           g_task_get_cancellable(task), on_list, task);
}

static void on_initialize(const cJSON *result, const GError *error, gpointer data)
{
    GTask *task = data;
    Discovery *d = g_task_get_task_data(task);
    if (error != NULL) {
        discovery_fail(task, error);
        g_object_unref(task);
        return;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(result, "protocolVersion");
    if (!cJSON_IsString(v) || !g_strv_contains(supported_versions, v->valuestring)) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "MCP server \"%s\" answered protocol version %.32s (supported: "
                                "2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05)",
                                d->p->base.name, cJSON_IsString(v) ? v->valuestring : "(none)");
        g_object_unref(task);
        return;
    }
    sbx_mcp_client_negotiated(d->p->client, v->valuestring);
    sbx_mcp_client_notify(d->p->client, "notifications/initialized", NULL);
    const cJSON *caps = cJSON_GetObjectItemCaseSensitive(result, "capabilities");
    if (cJSON_GetObjectItemCaseSensitive(caps, "tools") == NULL) {
        g_task_return_boolean(task, TRUE); /* a server without tools: an empty namespace */
        g_object_unref(task);
        return;
    }
    list_page(task, NULL);
}

static void mcp_discover_async(SbxProvider *provider, GCancellable *cancellable,
                               GAsyncReadyCallback callback, gpointer user_data)
{
    McpProvider *p = (McpProvider *)provider;
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);
    Discovery *d = g_new0(Discovery, 1);

    d->p = p;
    d->deadline = g_get_monotonic_time() + (gint64)p->config->startup_timeout_ms * 1000;
    d->tools = g_array_new(FALSE, TRUE, sizeof(SbxCatalogTool));
    d->names = g_hash_table_new(g_str_hash, g_str_equal);
    d->warnings = g_ptr_array_new_with_free_func(g_free);
    g_task_set_task_data(task, d, discovery_free);

    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "protocolVersion", MCP_PROTOCOL_VERSION);
    cJSON_AddObjectToObject(params, "capabilities");
    cJSON *info = cJSON_AddObjectToObject(params, "clientInfo");
    cJSON_AddStringToObject(info, "name", "sandbox");
    cJSON_AddStringToObject(info, "version", "0.1");
    sbx_mcp_client_request(p->client, "initialize", params, remaining_ms(d), cancellable,
                           on_initialize, task);
}

static SbxCatalogTool *mcp_discover_finish(SbxProvider *provider, GAsyncResult *result,
                                           gsize *ret_n, GPtrArray *warnings, GError **error)
{
    (void)provider;
    if (!g_task_propagate_boolean(G_TASK(result), error)) {
        return NULL;
    }
    Discovery *d = g_task_get_task_data(G_TASK(result));
    for (guint i = 0; i < d->warnings->len; i++) {
        g_ptr_array_add(warnings, g_strdup(d->warnings->pdata[i]));
    }
    *ret_n = d->tools->len;
    SbxCatalogTool *tools = (SbxCatalogTool *)(void *)g_array_free(d->tools, FALSE);
    d->tools = g_array_new(FALSE, TRUE, sizeof(SbxCatalogTool));
    return tools;
}

/* ---- calls ------------------------------------------------------------------------------- */

/* The text items of a result's content, joined: the message of a tool error. */
static char *content_text(const cJSON *result)
{
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(result, "content");
    g_autoptr(GString) out = g_string_new(NULL);
    const cJSON *item;

    if (!cJSON_IsArray(content)) {
        return g_strdup("(no message)");
    }
    cJSON_ArrayForEach(item, content)
    {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "text");
        if (cJSON_IsString(text) && out->len < MCP_ERROR_TEXT_MAX) {
            g_string_append_printf(out, "%s%.*s", out->len > 0 ? "\n" : "", MCP_ERROR_TEXT_MAX,
                                   text->valuestring);
        }
    }
    if (out->len > MCP_ERROR_TEXT_MAX) {
        const char *end = g_utf8_find_prev_char(out->str, out->str + MCP_ERROR_TEXT_MAX + 1);
        g_string_truncate(out, end - out->str);
    }
    return g_strdup(out->len > 0 ? out->str : "(no message)");
}

static void on_call(const cJSON *result, const GError *error, gpointer data)
{
    g_autoptr(GTask) task = data;
    const char *tool = g_task_get_task_data(task);

    if (error != NULL) {
        g_task_return_error(task, g_error_copy(error));
        return;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "isError"))) {
        g_autofree char *text = content_text(result);
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL, "%s", text);
        return;
    }
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(result, "structuredContent");
    if (value == NULL) {
        value = cJSON_GetObjectItemCaseSensitive(result, "content");
    }
    /* The message was parsed by sbx_json_parse(): numbers print as their literals. */
    char *json = value != NULL ? sbx_json_print(value) : NULL;
    if (json == NULL || strlen(json) > SBX_TOOL_RESULT_MAX) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                json == NULL ? "tool \"%s\": a result without content"
                                             : "tool \"%s\": a result larger than 1 MiB",
                                tool);
        free(json);
        return;
    }
    g_task_return_pointer(task, g_strdup(json), g_free);
    free(json);
}

static void mcp_call_async(SbxProvider *provider, const char *tool, const char *input_json,
                           GCancellable *cancellable, GAsyncReadyCallback callback,
                           gpointer user_data)
{
    McpProvider *p = (McpProvider *)provider;
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);
    cJSON *args = sbx_json_parse(input_json, strlen(input_json), SBX_JSON_DEPTH_MAX, NULL);
    gboolean object = cJSON_IsObject(args);

    cJSON_Delete(args);
    g_task_set_task_data(task, g_strdup(tool), g_free);
    if (!object) { /* MCP arguments are an object */
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_VALIDATION,
                                "input: an MCP tool takes an object");
        g_object_unref(task);
        return;
    }
    /* The input as the guest sent it: forwarded, not re-printed. */
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "name", tool);
    cJSON_AddRawToObject(params, "arguments", input_json);
    sbx_mcp_client_request(p->client, "tools/call", params, p->config->timeout_ms, cancellable,
                           on_call, task);
}

static char *mcp_call_finish(SbxProvider *provider, GAsyncResult *result, GError **error)
{
    (void)provider;
    return g_task_propagate_pointer(G_TASK(result), error);
}

static void mcp_free(SbxProvider *provider)
{
    McpProvider *p = (McpProvider *)provider;
    sbx_mcp_client_free(p->client);
    g_free(p->base.name);
    g_free(p);
}

static const SbxProviderOps mcp_ops = {
    .call_async = mcp_call_async,
    .call_finish = mcp_call_finish,
    .free = mcp_free,
    .discover_async = mcp_discover_async,
    .discover_finish = mcp_discover_finish,
};

SbxProvider *sbx_mcp_provider_new(const SbxCatalogProvider *config, GError **error)
{
    g_autoptr(GError) local = NULL;
    SbxMcpTransport *t =
        config->url != NULL ? sbx_mcp_http_new(config, &local) : sbx_mcp_stdio_new(config, &local);
    if (t == NULL) {
        g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_TOOL, "cannot start MCP server \"%s\": %s",
                    config->name, local->message);
        return NULL;
    }
    McpProvider *p = g_new0(McpProvider, 1);
    p->base.ops = &mcp_ops;
    p->base.name = g_strdup(config->name);
    p->config = config;
    p->client = sbx_mcp_client_new(config->name);
    sbx_mcp_client_set_transport(p->client, t);
    return &p->base;
}
