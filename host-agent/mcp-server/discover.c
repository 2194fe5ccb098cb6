/*
 * The discovery tools of the MCP server (see discover.h): list_providers, search_tools,
 * get_tool_types.
 */
#include "mcp-server/discover.h"

#include <string.h>

#include "mcp-server/execute.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "render.h"

G_STATIC_ASSERT(SBX_MCP_DISCOVER_QUERY_MAX == 256 && SBX_MCP_DISCOVER_RESULTS_MAX == 50 &&
                SBX_MCP_DISCOVER_TYPES_MAX == 32); /* written out in the schemas below */

typedef struct {
    const char *name;
    const char *title;
    const char *description;
    const char *input_schema;
} Tool;

static const Tool TOOLS[] = {
    {"list_providers", "List the host tool providers",
     "List the providers of host tools that programs run by execute can call, with how many "
     "tools each has. Start here, then search_tools, then get_tool_types for the few tools you "
     "will use.",
     "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}"},
    {"search_tools", "Search the host tools",
     "Search the host tools by words of their names and descriptions (every word must match; "
     "an empty query lists them all). Answers each match's name, how code calls it and the "
     "first line of its description; get_tool_types gives the full declarations.",
     "{\"type\":\"object\",\"properties\":{"
     "\"query\":{\"type\":\"string\",\"maxLength\":256,\"description\":\"Words to look for, "
     "e.g. \\\"issue search\\\".\"},"
     "\"provider\":{\"type\":\"string\",\"description\":\"Only this provider's tools.\"},"
     "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":50,\"description\":\"At most "
     "this many results (default 10).\"}},"
     "\"required\":[\"query\"],\"additionalProperties\":false}"},
    {"get_tool_types", "Get the declarations of host tools",
     "Get the TypeScript declarations or Python stubs of the chosen host tools: the names code "
     "uses, the input types and the descriptions, as code calls them "
     "(`await tools.<provider>.<tool>(input)` in JavaScript and TypeScript, "
     "`tools.<provider>.<tool>(input)` in Python).",
     "{\"type\":\"object\",\"properties\":{"
     "\"tools\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,"
     "\"maxItems\":32,\"description\":\"Tool names as search_tools gives them: "
     "\\\"provider.tool\\\".\"},"
     "\"language\":{\"type\":\"string\",\"enum\":[\"typescript\",\"python\"],\"description\":"
     "\"The declarations' language (default typescript).\"}},"
     "\"required\":[\"tools\"],\"additionalProperties\":false}"},
};

gboolean sbx_mcp_discover_is_tool(const char *name)
{
    for (gsize i = 0; i < G_N_ELEMENTS(TOOLS); i++) {
        if (strcmp(name, TOOLS[i].name) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

void sbx_mcp_discover_definitions(SbxJsonb *b, const char *revision)
{
    for (gsize i = 0; i < G_N_ELEMENTS(TOOLS); i++) {
        sbx_jsonb_begin_object(b);
        sbx_jsonb_member_string(b, "name", TOOLS[i].name);
        if (revision != NULL && strcmp(revision, "2025-06-18") >= 0) {
            sbx_jsonb_member_string(b, "title", TOOLS[i].title);
        }
        sbx_jsonb_member_string(b, "description", TOOLS[i].description);
        sbx_jsonb_member_raw(b, "inputSchema", TOOLS[i].input_schema);
        if (revision != NULL && strcmp(revision, "2025-03-26") >= 0) {
            /* They read the catalog the server was started with, nothing else. */
            sbx_jsonb_member_raw(b, "annotations",
                                 "{\"readOnlyHint\":true,\"destructiveHint\":false,"
                                 "\"idempotentHint\":true,\"openWorldHint\":false}");
        }
        sbx_jsonb_end_object(b);
    }
}

/* ---- helpers -------------------------------------------------------------------------------- */

static const char *kind_name(SbxProviderKind kind)
{
    return kind == SBX_PROVIDER_COMMAND ? "command" : kind == SBX_PROVIDER_MCP ? "mcp" : "http";
}

/* @root's members are all in @known (NULL-terminated); else the first one that is not. */
static const char *unknown_member(const cJSON *root, const char *const *known)
{
    const cJSON *m;

    cJSON_ArrayForEach(m, root)
    {
        if (!g_strv_contains(known, m->string)) {
            return m->string;
        }
    }
    return NULL;
}

/* The first line of @description, at most SBX_MCP_DISCOVER_SUMMARY_MAX bytes (UTF-8 whole). */
static char *summary(const char *description)
{
    if (description == NULL) {
        return g_strdup("");
    }
    gsize n = strcspn(description, "\r\n");
    if (n > SBX_MCP_DISCOVER_SUMMARY_MAX) {
        const char *end = description + SBX_MCP_DISCOVER_SUMMARY_MAX;
        n = g_utf8_find_prev_char(description, end + 1) - description;
        return g_strdup_printf("%.*s...", (int)n, description);
    }
    return g_strndup(description, n);
}

static const char CALLS[] = "Code calls a tool as `await tools.<provider>.<tool>(input)` "
                            "(JavaScript, TypeScript) or `tools.<provider>.<tool>(input)` "
                            "(Python), with the names below.\n";

/* ---- list_providers ------------------------------------------------------------------------- */

static char *list_providers(const SbxCatalog *catalog, const SbxNamespace *ns)
{
    g_autoptr(GString) t = g_string_new(NULL);

    g_string_append_printf(t, "%zu provider%s of host tools. %s", catalog->n_providers,
                           catalog->n_providers == 1 ? "" : "s", CALLS);
    for (gsize i = 0; i < catalog->n_providers; i++) {
        const SbxCatalogProvider *p = &catalog->providers[i];
        g_string_append_printf(t, "- %s (%s, %zu tool%s): tools.%s\n", p->name, kind_name(p->kind),
                               p->n_tools, p->n_tools == 1 ? "" : "s",
                               sbx_namespace_provider_ident(ns, p->name));
    }
    return sbx_mcp_text_result(t->str, FALSE);
}

/* ---- search_tools --------------------------------------------------------------------------- */

/* Whether every word of @words is in the provider's and tool's names or the description. */
static gboolean matches(char **words, const SbxCatalogProvider *p, const SbxCatalogTool *t,
                        const SbxNamespace *ns)
{
    g_autofree char *hay = g_strdup_printf("%s.%s %s %s %s", p->name, t->name,
                                           sbx_namespace_provider_ident(ns, p->name),
                                           sbx_namespace_tool_ident(ns, p->name, t->name),
                                           t->description != NULL ? t->description : "");
    g_autofree char *folded = g_utf8_casefold(hay, -1);

    for (char **w = words; *w != NULL; w++) {
        if ((*w)[0] != '\0' && strstr(folded, *w) == NULL) {
            return FALSE;
        }
    }
    return TRUE;
}

static char *search_tools(const SbxCatalog *catalog, const SbxNamespace *ns, const cJSON *args)
{
    static const char *const known[] = {"query", "provider", "limit", NULL};
    const cJSON *query = cJSON_GetObjectItemCaseSensitive(args, "query");
    const cJSON *provider = cJSON_GetObjectItemCaseSensitive(args, "provider");
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(args, "limit");
    int64_t max = SBX_MCP_DISCOVER_RESULTS_DEFAULT;

    if (unknown_member(args, known) != NULL || !cJSON_IsString(query) ||
        strlen(query->valuestring) > SBX_MCP_DISCOVER_QUERY_MAX ||
        (provider != NULL && !cJSON_IsString(provider)) ||
        (limit != NULL &&
         (!sbx_json_int64(limit, &max) || max < 1 || max > SBX_MCP_DISCOVER_RESULTS_MAX))) {
        return sbx_mcp_tool_error_result("search_tools takes query (a string of at most 256 "
                                         "bytes), provider (a string) and limit (1 to 50)");
    }
    g_autofree char *folded = g_utf8_casefold(query->valuestring, -1);
    g_auto(GStrv) words = g_strsplit_set(folded, " \t\r\n", -1);
    g_autoptr(GString) hits = g_string_new(NULL);
    guint found = 0, shown = 0;
    for (gsize i = 0; i < catalog->n_providers; i++) {
        const SbxCatalogProvider *p = &catalog->providers[i];
        if (provider != NULL && strcmp(provider->valuestring, p->name) != 0) {
            continue;
        }
        for (gsize j = 0; j < p->n_tools; j++) {
            const SbxCatalogTool *t = &p->tools[j];
            if (!matches(words, p, t, ns) || found++ >= max) {
                continue;
            }
            g_autofree char *line = summary(t->description);
            g_string_append_printf(hits, "- %s.%s: tools.%s.%s(input)%s%s\n", p->name, t->name,
                                   sbx_namespace_provider_ident(ns, p->name),
                                   sbx_namespace_tool_ident(ns, p->name, t->name),
                                   line[0] != '\0' ? " - " : "", line);
            shown++;
        }
    }
    g_autofree char *text = g_strdup_printf(
        "%u tool%s match%s (%u shown; get_tool_types gives their declarations). %s%s", found,
        found == 1 ? "" : "s", found == 1 ? "es" : "", shown, CALLS, hits->str);
    return sbx_mcp_text_result(text, FALSE);
}

/* ---- get_tool_types ------------------------------------------------------------------------- */

/* Whether "provider.tool" @name is a tool of @catalog. */
static gboolean known_tool(const SbxCatalog *catalog, const char *name)
{
    for (gsize i = 0; i < catalog->n_providers; i++) {
        const SbxCatalogProvider *p = &catalog->providers[i];
        gsize n = strlen(p->name);
        for (gsize j = 0; j < p->n_tools; j++) {
            if (strncmp(name, p->name, n) == 0 && name[n] == '.' &&
                strcmp(name + n + 1, p->tools[j].name) == 0) {
                return TRUE;
            }
        }
    }
    return FALSE;
}

static char *get_tool_types(const SbxCatalog *catalog, const cJSON *args)
{
    static const char *const known[] = {"tools", "language", NULL};
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(args, "tools");
    const cJSON *language = cJSON_GetObjectItemCaseSensitive(args, "language");
    int n = cJSON_GetArraySize(tools);
    SbxRenderLang lang = SBX_RENDER_TS;
    const cJSON *t;

    if (unknown_member(args, known) != NULL || !cJSON_IsArray(tools) || n < 1 ||
        n > SBX_MCP_DISCOVER_TYPES_MAX ||
        (language != NULL &&
         (!cJSON_IsString(language) || !sbx_render_lang_parse(language->valuestring, &lang)))) {
        return sbx_mcp_tool_error_result("get_tool_types takes tools (1 to 32 names, "
                                         "\"provider.tool\") and language (\"typescript\" or "
                                         "\"python\")");
    }
    g_autoptr(GPtrArray) only = g_ptr_array_new();
    g_autoptr(GString) unknown = g_string_new(NULL);
    cJSON_ArrayForEach(t, tools)
    {
        if (!cJSON_IsString(t) || !known_tool(catalog, t->valuestring)) {
            g_string_append_printf(unknown, "%s%.*s", unknown->len > 0 ? ", " : "", SBX_NAME_MAX,
                                   cJSON_IsString(t) ? t->valuestring : "(not a string)");
        } else {
            g_ptr_array_add(only, t->valuestring);
        }
    }
    if (unknown->len > 0) {
        g_autofree char *msg = g_strdup_printf(
            "no such tools: %s (search_tools gives the names, \"provider.tool\")", unknown->str);
        return sbx_mcp_tool_error_result(msg);
    }
    g_ptr_array_add(only, NULL);
    g_autoptr(GError) error = NULL;
    g_autofree char *text =
        sbx_render_types_of(catalog, lang, (const char *const *)only->pdata, &error);
    return text != NULL ? sbx_mcp_text_result(text, FALSE)
                        : sbx_mcp_tool_error_result(error->message);
}

char *sbx_mcp_discover_call(const SbxCatalog *catalog, const char *name, const char *args_text,
                            gsize len)
{
    g_autoptr(SbxNamespace) ns = sbx_namespace_new();
    g_autoptr(GError) error = NULL;
    cJSON *args = sbx_json_parse(args_text, len, SBX_JSON_DEPTH_MAX, NULL);
    char *result;

    if (!cJSON_IsObject(args)) {
        result = sbx_mcp_tool_error_result("the arguments: a JSON object");
    } else if (!sbx_catalog_build_namespace(catalog, ns, &error)) {
        result = sbx_mcp_tool_error_result(error->message);
    } else if (strcmp(name, "list_providers") == 0) {
        result = args->child == NULL
                     ? list_providers(catalog, ns)
                     : sbx_mcp_tool_error_result("list_providers takes no arguments");
    } else if (strcmp(name, "search_tools") == 0) {
        result = search_tools(catalog, ns, args);
    } else {
        result = get_tool_types(catalog, args);
    }
    cJSON_Delete(args);
    return result;
}
