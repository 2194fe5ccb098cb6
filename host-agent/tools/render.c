/*
 * TypeScript declarations and Python stubs of a catalog's namespace (render.h). Types come from
 * each tool's input schema: a best-effort reading of the common keywords, `unknown` / `Any` for
 * the rest. Every walk is bounded by SBX_RENDER_DEPTH_MAX and the text by SBX_RENDER_OUTPUT_MAX.
 */
#include "render.h"

#include <cJSON.h>
#include <string.h>

#include "namespace.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "tools-error.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

typedef struct {
    GString *out;
    SbxRenderLang lang;
    const cJSON *root;       /* the schema being rendered: target of local $refs */
    const char *const *only; /* "provider.tool" real names to render, or NULL: all */
} Render;

/* Whether tool @t of @p is rendered. */
static gboolean chosen(const Render *r, const SbxCatalogProvider *p, const SbxCatalogTool *t)
{
    if (r->only == NULL) {
        return TRUE;
    }
    for (const char *const *o = r->only; *o != NULL; o++) {
        gsize n = strlen(p->name);
        if (strncmp(*o, p->name, n) == 0 && (*o)[n] == '.' && strcmp(*o + n + 1, t->name) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

/* Whether any tool of @p is rendered (a provider without one is left out when choosing). */
static gboolean provider_chosen(const Render *r, const SbxCatalogProvider *p)
{
    for (gsize j = 0; j < p->n_tools; j++) {
        if (chosen(r, p, &p->tools[j])) {
            return TRUE;
        }
    }
    return r->only == NULL;
}

static gboolean too_big(const Render *r)
{
    return r->out->len > SBX_RENDER_OUTPUT_MAX;
}

/* @s as a JSON string literal; valid in TypeScript and in Python source too. */
static void put_string_literal(GString *out, const char *s)
{
    g_autoptr(cJSON) str = cJSON_CreateString(s);
    g_autofree char *text = str != NULL ? sbx_json_print(str) : NULL;
    g_string_append(out, text != NULL ? text : "\"\"");
}

/* A JSON scalar as a literal type; FALSE for arrays and objects. */
static gboolean put_literal(Render *r, const cJSON *v)
{
    if (cJSON_IsString(v)) {
        put_string_literal(r->out, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        g_autofree char *text = sbx_json_print(v);
        g_string_append(r->out, text != NULL ? text : "0");
    } else if (cJSON_IsBool(v)) {
        gboolean t = cJSON_IsTrue(v);
        g_string_append(r->out,
                        r->lang == SBX_RENDER_TS ? (t ? "true" : "false") : (t ? "True" : "False"));
    } else if (cJSON_IsNull(v)) {
        g_string_append(r->out, r->lang == SBX_RENDER_TS ? "null" : "None");
    } else {
        return FALSE;
    }
    return TRUE;
}

static const char *any_type(const Render *r)
{
    return r->lang == SBX_RENDER_TS ? "unknown" : "Any";
}

/* Resolve a local $ref ("#", "#/$defs/x", "#/definitions/x", any JSON pointer), or NULL. */
static const cJSON *resolve_ref(const Render *r, const char *ref)
{
    if (ref[0] != '#' || (ref[1] != '\0' && ref[1] != '/')) {
        return NULL;
    }
    const cJSON *node = r->root;
    if (ref[1] == '\0') {
        return node; /* "#": g_strsplit("") is empty, it has no parts[0] to skip */
    }
    g_auto(GStrv) parts = g_strsplit(ref + 1, "/", 0);
    for (gsize i = 1; parts[i] != NULL && node != NULL; i++) {
        GString *seg = g_string_new(parts[i]);
        g_string_replace(seg, "~1", "/", 0);
        g_string_replace(seg, "~0", "~", 0);
        if (cJSON_IsArray(node)) {
            char *end = NULL;
            guint64 idx = g_ascii_strtoull(seg->str, &end, 10);
            node = (end != seg->str && *end == '\0') ? cJSON_GetArrayItem(node, (int)idx) : NULL;
        } else {
            node = cJSON_GetObjectItemCaseSensitive(node, seg->str);
        }
        g_string_free(seg, TRUE);
    }
    return node;
}

static void put_type(Render *r, const cJSON *s, guint depth);

/* An identifier usable as a TypeScript property name without quotes. */
static gboolean ts_plain_key(const char *k)
{
    if (!(g_ascii_isalpha(k[0]) || k[0] == '_' || k[0] == '$')) {
        return FALSE;
    }
    for (const char *p = k; *p != '\0'; p++) {
        if (!(g_ascii_isalnum(*p) || *p == '_' || *p == '$')) {
            return FALSE;
        }
    }
    return TRUE;
}

static gboolean is_required(const cJSON *s, const char *key)
{
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *it;
    cJSON_ArrayForEach(it, req)
    {
        if (cJSON_IsString(it) && strcmp(it->valuestring, key) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

/* TypeScript `{ a: T; b?: U }`, or an index signature if there are no properties. */
static void put_ts_object(Render *r, const cJSON *s, guint depth)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    if (!cJSON_IsObject(props) || props->child == NULL) {
        g_string_append(r->out, "{ [key: string]: unknown }");
        return;
    }
    g_string_append(r->out, "{ ");
    const cJSON *p;
    cJSON_ArrayForEach(p, props)
    {
        if (ts_plain_key(p->string)) {
            g_string_append(r->out, p->string);
        } else {
            put_string_literal(r->out, p->string);
        }
        g_string_append(r->out, is_required(s, p->string) ? ": " : "?: ");
        put_type(r, p, depth + 1);
        g_string_append(r->out, "; ");
    }
    g_string_append(r->out, "}");
}

/* `dict[str, Any]` or `{ ... }` for a nested object. */
static void put_object(Render *r, const cJSON *s, guint depth)
{
    if (r->lang == SBX_RENDER_TS) {
        put_ts_object(r, s, depth);
    } else {
        g_string_append(r->out, "dict[str, Any]");
    }
}

static void put_array(Render *r, const cJSON *s, guint depth)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    g_string_append(r->out, r->lang == SBX_RENDER_TS ? "Array<" : "list[");
    if (cJSON_IsObject(items) || cJSON_IsBool(items)) {
        put_type(r, items, depth + 1);
    } else {
        g_string_append(r->out, any_type(r));
    }
    g_string_append(r->out, r->lang == SBX_RENDER_TS ? ">" : "]");
}

/* One name of `type`. */
static void put_named_type(Render *r, const cJSON *s, const char *t, guint depth)
{
    gboolean ts = r->lang == SBX_RENDER_TS;
    if (strcmp(t, "string") == 0) {
        g_string_append(r->out, ts ? "string" : "str");
    } else if (strcmp(t, "integer") == 0) {
        g_string_append(r->out, ts ? "number" : "int");
    } else if (strcmp(t, "number") == 0) {
        g_string_append(r->out, ts ? "number" : "float");
    } else if (strcmp(t, "boolean") == 0) {
        g_string_append(r->out, ts ? "boolean" : "bool");
    } else if (strcmp(t, "null") == 0) {
        g_string_append(r->out, ts ? "null" : "None");
    } else if (strcmp(t, "array") == 0) {
        put_array(r, s, depth);
    } else if (strcmp(t, "object") == 0) {
        put_object(r, s, depth);
    } else {
        g_string_append(r->out, any_type(r));
    }
}

/* `A | B` (or `A & B`) of the schemas in @list, parenthesised. */
static void put_combination(Render *r, const cJSON *list, const char *sep, guint depth)
{
    g_string_append(r->out, "(");
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (it != list->child) {
            g_string_append(r->out, sep);
        }
        put_type(r, it, depth + 1);
    }
    g_string_append(r->out, ")");
}

/* enum of scalars -> literal union; FALSE (nothing written) if some value is not a scalar. */
static gboolean put_enum(Render *r, const cJSON *list)
{
    const cJSON *it;
    cJSON_ArrayForEach(it, list)
    {
        if (cJSON_IsArray(it) || cJSON_IsObject(it)) {
            return FALSE;
        }
    }
    gboolean ts = r->lang == SBX_RENDER_TS;
    g_string_append(r->out, ts ? "(" : "Literal[");
    cJSON_ArrayForEach(it, list)
    {
        if (it != list->child) {
            g_string_append(r->out, ts ? " | " : ", ");
        }
        put_literal(r, it);
    }
    g_string_append(r->out, ts ? ")" : "]");
    return TRUE;
}

/* const -> a one-value literal type. */
static void put_const(Render *r, const cJSON *v)
{
    gboolean ts = r->lang == SBX_RENDER_TS;
    gsize mark = r->out->len;
    g_string_append(r->out, ts ? "" : "Literal[");
    if (!put_literal(r, v)) {
        g_string_truncate(r->out, mark);
        g_string_append(r->out, any_type(r));
        return;
    }
    g_string_append(r->out, ts ? "" : "]");
}

static void put_type_keyword(Render *r, const cJSON *s, const cJSON *type, guint depth)
{
    if (cJSON_IsString(type)) {
        put_named_type(r, s, type->valuestring, depth);
        return;
    }
    /* ["string", "null"]: a union of the names. */
    g_string_append(r->out, "(");
    const cJSON *it;
    cJSON_ArrayForEach(it, type)
    {
        if (it != type->child) {
            g_string_append(r->out, " | ");
        }
        put_named_type(r, s, cJSON_IsString(it) ? it->valuestring : "", depth);
    }
    g_string_append(r->out, ")");
}

/* Render schema @s: the first keyword that says something wins. */
static void put_type(Render *r, const cJSON *s, guint depth)
{
    if (depth > SBX_RENDER_DEPTH_MAX || too_big(r) || s == NULL) {
        g_string_append(r->out, any_type(r));
        return;
    }
    if (cJSON_IsBool(s)) {
        g_string_append(r->out, cJSON_IsTrue(s) ? any_type(r)
                                                : (r->lang == SBX_RENDER_TS ? "never" : "Any"));
        return;
    }
    if (!cJSON_IsObject(s)) {
        g_string_append(r->out, any_type(r));
        return;
    }
    const cJSON *v;
    if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        put_type(r, resolve_ref(r, v->valuestring), depth + 1);
    } else if (cJSON_HasObjectItem(s, "const")) {
        put_const(r, cJSON_GetObjectItemCaseSensitive(s, "const"));
    } else if (cJSON_IsArray(v = cJSON_GetObjectItemCaseSensitive(s, "enum")) && v->child != NULL &&
               put_enum(r, v)) {
        /* written */
    } else if ((cJSON_IsArray(v = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) ||
                cJSON_IsArray(v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) &&
               v->child != NULL) {
        put_combination(r, v, " | ", depth);
    } else if (cJSON_IsArray(v = cJSON_GetObjectItemCaseSensitive(s, "allOf")) &&
               v->child != NULL) {
        if (r->lang == SBX_RENDER_TS) {
            put_combination(r, v, " & ", depth);
        } else {
            g_string_append(r->out, "Any"); /* Python types have no intersection */
        }
    } else if ((cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(s, "type")) ||
                cJSON_IsArray(v)) &&
               (cJSON_IsString(v) || v->child != NULL)) {
        put_type_keyword(r, s, v, depth);
    } else if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s, "properties"))) {
        put_object(r, s, depth);
    } else {
        g_string_append(r->out, any_type(r));
    }
}

/* Parse @json (a catalog schema, already validated) or NULL if absent. */
static cJSON *parse_schema(const char *json)
{
    return json != NULL ? sbx_json_parse(json, strlen(json), SBX_JSON_DEPTH_MAX, NULL) : NULL;
}

/* @text inside a TypeScript doc comment: a star-slash must not end it early. */
static void put_ts_comment_text(GString *out, const char *text)
{
    for (const char *p = text; *p != '\0'; p++) {
        if (p[0] == '*' && p[1] == '/') {
            g_string_append(out, "*\\/");
            p++;
        } else if (*p == '\n') {
            g_string_append(out, "\n     * ");
        } else if (*p != '\r') {
            g_string_append_c(out, *p);
        }
    }
}

static void render_ts_tool(Render *r, const SbxNamespace *ns, const SbxCatalogProvider *p,
                           const SbxCatalogTool *t)
{
    g_autofree char *real = g_strdup_printf("`%s.%s`", p->name, t->name);
    g_string_append(r->out, "    /** ");
    put_ts_comment_text(r->out, real);
    if (t->description != NULL && t->description[0] != '\0') {
        g_string_append(r->out, ": ");
        put_ts_comment_text(r->out, t->description);
    }
    g_string_append_printf(r->out,
                           " */\n    %s(input: ", sbx_namespace_tool_ident(ns, p->name, t->name));
    g_autoptr(cJSON) in = parse_schema(t->input_schema_json);
    r->root = in;
    if (in != NULL) {
        put_type(r, in, 0);
    } else {
        g_string_append(r->out, "{ [key: string]: unknown }");
    }
    g_string_append(r->out, "): Promise<");
    g_autoptr(cJSON) out = parse_schema(t->output_schema_json);
    r->root = out;
    put_type(r, out, 0);
    r->root = NULL;
    g_string_append(r->out, ">;\n");
}

/* The catalog's file name for a `//` or `#` header comment: control characters become `?`. */
static char *comment_origin(const char *origin)
{
    char *o = g_strdup(origin);
    for (char *p = o; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            *p = '?';
        }
    }
    return o;
}

static void render_ts(Render *r, const SbxCatalog *catalog, const SbxNamespace *ns)
{
    g_autofree char *origin = comment_origin(catalog->origin);
    g_string_append_printf(r->out,
                           "// The tools of %s, as guest code names them (`sandbox tools --types "
                           "ts`).\n// Each call returns a Promise: Promise.all runs calls in "
                           "parallel.\ndeclare const tools: {\n",
                           origin);
    for (gsize i = 0; i < catalog->n_providers && !too_big(r); i++) {
        const SbxCatalogProvider *p = &catalog->providers[i];
        if (!provider_chosen(r, p)) {
            continue;
        }
        g_autofree char *real = g_strdup_printf("provider `%s`", p->name);
        g_string_append(r->out, "  /** ");
        put_ts_comment_text(r->out, real);
        g_string_append_printf(r->out, " */\n  %s: {\n", sbx_namespace_provider_ident(ns, p->name));
        for (gsize j = 0; j < p->n_tools && !too_big(r); j++) {
            if (chosen(r, p, &p->tools[j])) {
                render_ts_tool(r, ns, p, &p->tools[j]);
            }
        }
        g_string_append(r->out, "  };\n");
    }
    g_string_append(r->out, "};\n");
}

/* The TypedDict for an object input schema, named @name; FALSE (nothing written) otherwise. */
static gboolean render_py_typeddict(Render *r, const cJSON *s, const char *name)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    if (!cJSON_IsObject(s) || !cJSON_IsObject(props) || props->child == NULL) {
        return FALSE;
    }
    g_string_append_printf(r->out, "%s = TypedDict(\"%s\", {", name, name);
    const cJSON *p;
    cJSON_ArrayForEach(p, props)
    {
        if (p != props->child) {
            g_string_append(r->out, ", ");
        }
        put_string_literal(r->out, p->string);
        gboolean req = is_required(s, p->string);
        g_string_append(r->out, req ? ": Required[" : ": ");
        put_type(r, p, 1);
        g_string_append(r->out, req ? "]" : "");
    }
    g_string_append(r->out, "}, total=False)\n\n");
    return TRUE;
}

static void render_py_tool(Render *r, GString *cls, const SbxNamespace *ns,
                           const SbxCatalogProvider *p, const SbxCatalogTool *t, gsize n)
{
    const char *ident = sbx_namespace_tool_ident(ns, p->name, t->name);
    g_autofree char *td = g_strdup_printf("_Input%zu_%s", n, ident);
    g_autoptr(cJSON) in = parse_schema(t->input_schema_json);
    r->root = in;
    gboolean typed = render_py_typeddict(r, in, td);
    r->root = NULL;
    g_string_append_printf(cls, "    def %s(self, input: %s) -> Any:\n        ", ident,
                           typed ? td : "dict[str, Any]");
    g_autofree char *doc =
        g_strdup_printf("`%s.%s`%s%s", p->name, t->name, t->description != NULL ? ": " : "",
                        t->description != NULL ? t->description : "");
    put_string_literal(cls, doc);
    g_string_append(cls, "\n        ...\n\n");
}

static void render_py(Render *r, const SbxCatalog *catalog, const SbxNamespace *ns)
{
    g_autofree char *origin = comment_origin(catalog->origin);
    g_string_append_printf(r->out,
                           "# The tools of %s, as guest code names them (`sandbox tools --types "
                           "py`).\n# A call blocks; `await tools.p.t.aio(input)` is the "
                           "awaitable form.\nfrom typing import Any, Literal, Required, "
                           "TypedDict\n\n\n",
                           origin);
    g_autoptr(GString) root = g_string_new("class _Tools:\n");
    gsize n = 0, shown = 0;
    for (gsize i = 0; i < catalog->n_providers && !too_big(r); i++) {
        const SbxCatalogProvider *p = &catalog->providers[i];
        if (!provider_chosen(r, p)) {
            continue;
        }
        shown++;
        const char *pid = sbx_namespace_provider_ident(ns, p->name);
        g_autoptr(GString) cls = g_string_new(NULL);
        g_string_append_printf(cls, "class _provider_%s:\n    ", pid);
        g_autofree char *doc = g_strdup_printf("provider `%s`", p->name);
        put_string_literal(cls, doc);
        g_string_append(cls, "\n\n");
        for (gsize j = 0; j < p->n_tools && !too_big(r); j++) {
            if (chosen(r, p, &p->tools[j])) {
                render_py_tool(r, cls, ns, p, &p->tools[j], n++);
            }
        }
        g_string_append_len(r->out, cls->str, (gssize)cls->len);
        g_string_append(r->out, "\n");
        g_string_append_printf(root, "    %s: _provider_%s\n", pid, pid);
    }
    if (shown == 0) {
        g_string_append(root, "    pass\n");
    }
    g_string_append_len(r->out, root->str, (gssize)root->len);
    g_string_append(r->out, "\n\ntools: _Tools\n");
}

char *sbx_render_types(const SbxCatalog *catalog, SbxRenderLang lang, GError **error)
{
    return sbx_render_types_of(catalog, lang, NULL, error);
}

char *sbx_render_types_of(const SbxCatalog *catalog, SbxRenderLang lang, const char *const *only,
                          GError **error)
{
    g_autoptr(SbxNamespace) ns = sbx_namespace_new();
    if (!sbx_catalog_build_namespace(catalog, ns, error)) {
        return NULL;
    }
    Render r = {.out = g_string_new(NULL), .lang = lang, .only = only};
    if (lang == SBX_RENDER_TS) {
        render_ts(&r, catalog, ns);
    } else {
        render_py(&r, catalog, ns);
    }
    if (too_big(&r)) {
        g_string_free(r.out, TRUE);
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID,
                    "%s: the rendered types exceed %d bytes", catalog->origin,
                    SBX_RENDER_OUTPUT_MAX);
        return NULL;
    }
    return g_string_free(r.out, FALSE);
}

gboolean sbx_render_lang_parse(const char *name, SbxRenderLang *ret_lang)
{
    if (g_strcmp0(name, "ts") == 0 || g_strcmp0(name, "typescript") == 0) {
        *ret_lang = SBX_RENDER_TS;
    } else if (g_strcmp0(name, "py") == 0 || g_strcmp0(name, "python") == 0) {
        *ret_lang = SBX_RENDER_PY;
    } else {
        return FALSE;
    }
    return TRUE;
}
