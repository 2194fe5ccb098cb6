/*
 * Reversible map between catalog names and guest identifiers (see namespace.h).
 */
#include "namespace.h"

#include <string.h>

#include "protocol/limits.h"
#include "tools-error.h"

/*
 * Room kept at the end of an identifier for a collision suffix ("__" and up to 5 digits: more
 * than SBX_TOOLS_MAX collisions cannot happen), so every identifier fits SBX_NAME_MAX.
 */
#define NS_SUFFIX_ROOM 8
#define NS_BASE_MAX (SBX_NAME_MAX - NS_SUFFIX_ROOM)

typedef struct {
    SbxNsName name;
    GHashTable *tool_by_real;  /* real -> SbxNsName* (owned) */
    GHashTable *tool_by_ident; /* ident -> SbxNsName* (borrowed) */
} NsProvider;

struct SbxNamespace {
    GHashTable *by_real;  /* real -> NsProvider* (owned) */
    GHashTable *by_ident; /* ident -> NsProvider* (borrowed) */
};

/*
 * Words that cannot be used as a name in guest code, or that break a runner when used as a
 * property: JavaScript reserved words and literals (strict mode included), Python keywords,
 * and Object.prototype members plus `then` (a namespace object with a `then` member would be
 * taken for a promise by `await`). Dunder names are handled separately.
 */
/* clang-format off */
static const char *const reserved_words[] = {
    /* JavaScript */
    "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete", "do",
    "else", "enum", "export", "extends", "false", "finally", "for", "function", "if", "import",
    "in", "instanceof", "new", "null", "return", "super", "switch", "this", "throw", "true", "try",
    "typeof", "var", "void", "while", "with", "yield", "let", "static", "implements", "interface",
    "package", "private", "protected", "public", "await", "arguments", "eval", "undefined", "NaN",
    "Infinity",
    /* Python (hard keywords not already listed) */
    "False", "None", "True", "and", "as", "assert", "async", "def", "del", "elif", "except",
    "from", "global", "is", "lambda", "nonlocal", "not", "or", "pass", "raise",
    /* Runner hazards */
    "then", "constructor", "prototype", "toString", "valueOf", "hasOwnProperty", "isPrototypeOf",
    "propertyIsEnumerable", "toLocaleString",
};
/* clang-format on */

gboolean sbx_namespace_is_reserved(const char *ident)
{
    size_t len = strlen(ident);

    if (len >= 4 && g_str_has_prefix(ident, "__") && g_str_has_suffix(ident, "__")) {
        return TRUE; /* __proto__, __init__, __class__, ... */
    }
    for (gsize i = 0; i < G_N_ELEMENTS(reserved_words); i++) {
        if (strcmp(ident, reserved_words[i]) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

static gboolean ident_char(gunichar c)
{
    return c < 0x80 && (g_ascii_isalnum(c) || c == '_');
}

char *sbx_namespace_sanitize(const char *name)
{
    if (name == NULL || name[0] == '\0' || !g_utf8_validate(name, -1, NULL)) {
        return NULL;
    }
    GString *out = g_string_new(NULL);
    if (g_ascii_isdigit(name[0])) {
        g_string_append_c(out, '_');
    }
    /* `$` is valid in JavaScript but not in Python, so it becomes `_` like any other char. */
    for (const char *p = name; *p != '\0' && out->len < NS_BASE_MAX; p = g_utf8_next_char(p)) {
        gunichar c = g_utf8_get_char(p);
        g_string_append_c(out, ident_char(c) ? (char)c : '_');
    }
    if (sbx_namespace_is_reserved(out->str)) {
        g_string_append_c(out, '_');
    }
    return g_string_free(out, FALSE);
}

/*
 * Give each of @n names an identifier unique among them. Names that are their own sanitised
 * form go first, so they keep their spelling whatever else the level holds.
 */
static gboolean assign_level(const char *const *reals, gsize n, char **idents, GError **error)
{
    g_autoptr(GHashTable) taken = g_hash_table_new(g_str_hash, g_str_equal);

    for (gsize i = 0; i < n; i++) {
        char *s = sbx_namespace_sanitize(reals[i]);
        if (s == NULL) {
            g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID,
                        "name \"%s\" cannot be made an identifier (empty or not UTF-8)", reals[i]);
            return FALSE;
        }
        if (strcmp(s, reals[i]) == 0 && !g_hash_table_contains(taken, s)) {
            idents[i] = s;
            g_hash_table_add(taken, s);
        } else {
            g_free(s);
        }
    }
    for (gsize i = 0; i < n; i++) {
        if (idents[i] != NULL) {
            continue;
        }
        g_autofree char *base = sbx_namespace_sanitize(reals[i]);
        char *cand = g_strdup(base);
        for (guint k = 2; g_hash_table_contains(taken, cand); k++) {
            g_free(cand);
            cand = g_strdup_printf("%s__%u", base, k);
        }
        idents[i] = cand;
        g_hash_table_add(taken, cand);
    }
    return TRUE;
}

static void ns_name_free(gpointer p)
{
    SbxNsName *n = p;
    g_free((char *)n->real);
    g_free((char *)n->ident);
    g_free(n);
}

static SbxNsName *ns_name_new(const char *real, char *ident)
{
    SbxNsName *n = g_new0(SbxNsName, 1);
    n->real = g_strdup(real);
    n->ident = ident;
    return n;
}

static void ns_provider_free(gpointer p)
{
    NsProvider *prov = p;
    g_hash_table_destroy(prov->tool_by_ident);
    g_hash_table_destroy(prov->tool_by_real);
    g_free((char *)prov->name.real);
    g_free((char *)prov->name.ident);
    g_free(prov);
}

SbxNamespace *sbx_namespace_new(void)
{
    SbxNamespace *ns = g_new0(SbxNamespace, 1);
    ns->by_real = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, ns_provider_free);
    ns->by_ident = g_hash_table_new(g_str_hash, g_str_equal);
    return ns;
}

void sbx_namespace_free(SbxNamespace *ns)
{
    if (ns == NULL) {
        return;
    }
    g_hash_table_destroy(ns->by_ident);
    g_hash_table_destroy(ns->by_real);
    g_free(ns);
}

static gboolean add_provider(SbxNamespace *ns, const char *real, char *ident,
                             const char *const *tools, GError **error)
{
    NsProvider *prov = g_new0(NsProvider, 1);
    prov->name.real = g_strdup(real);
    prov->name.ident = ident;
    prov->tool_by_real = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, ns_name_free);
    prov->tool_by_ident = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(ns->by_real, (char *)prov->name.real, prov);
    g_hash_table_insert(ns->by_ident, (char *)prov->name.ident, prov);

    gsize n = tools != NULL ? g_strv_length((char **)tools) : 0;
    g_autofree char **idents = g_new0(char *, n + 1);
    if (!assign_level(tools, n, idents, error)) {
        for (gsize i = 0; i < n; i++) {
            g_free(idents[i]);
        }
        g_prefix_error(error, "provider \"%s\": ", real);
        return FALSE;
    }
    for (gsize i = 0; i < n; i++) {
        SbxNsName *t = ns_name_new(tools[i], idents[i]);
        g_hash_table_insert(prov->tool_by_real, (char *)t->real, t);
        g_hash_table_insert(prov->tool_by_ident, (char *)t->ident, t);
    }
    return TRUE;
}

gboolean sbx_namespace_build(SbxNamespace *ns, const char *const *providers,
                             const char *const *const *tools, gsize n_providers, GError **error)
{
    g_hash_table_remove_all(ns->by_ident);
    g_hash_table_remove_all(ns->by_real);

    g_autofree char **idents = g_new0(char *, n_providers + 1);
    if (!assign_level(providers, n_providers, idents, error)) {
        for (gsize i = 0; i < n_providers; i++) {
            g_free(idents[i]);
        }
        return FALSE;
    }
    for (gsize i = 0; i < n_providers; i++) {
        if (!add_provider(ns, providers[i], idents[i], tools[i], error)) {
            for (gsize j = i + 1; j < n_providers; j++) {
                g_free(idents[j]);
            }
            g_hash_table_remove_all(ns->by_ident);
            g_hash_table_remove_all(ns->by_real);
            return FALSE;
        }
    }
    return TRUE;
}

const char *sbx_namespace_provider_ident(const SbxNamespace *ns, const char *real)
{
    NsProvider *prov = g_hash_table_lookup(ns->by_real, real);
    return prov != NULL ? prov->name.ident : NULL;
}

const char *sbx_namespace_tool_ident(const SbxNamespace *ns, const char *provider_real,
                                     const char *real)
{
    NsProvider *prov = g_hash_table_lookup(ns->by_real, provider_real);
    if (prov == NULL) {
        return NULL;
    }
    SbxNsName *t = g_hash_table_lookup(prov->tool_by_real, real);
    return t != NULL ? t->ident : NULL;
}

gboolean sbx_namespace_resolve(const SbxNamespace *ns, const char *provider_ident,
                               const char *tool_ident, const char **ret_provider,
                               const char **ret_tool)
{
    NsProvider *prov = g_hash_table_lookup(ns->by_ident, provider_ident);
    if (prov == NULL) {
        return FALSE;
    }
    SbxNsName *t = g_hash_table_lookup(prov->tool_by_ident, tool_ident);
    if (t == NULL) {
        return FALSE;
    }
    *ret_provider = prov->name.real;
    *ret_tool = t->real;
    return TRUE;
}
