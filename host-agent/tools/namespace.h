/*
 * The tool namespace: real provider and tool names (anything a catalog author wrote) mapped to
 * identifiers the guest code can use (`tools.<provider>.<tool>`), and back.
 *
 * Rules (docs/tools.md): a character outside [A-Za-z0-9_] becomes `_`; a leading digit gets a
 * `_` prefix; a JavaScript or Python reserved word (and a few names that are dangerous as object
 * keys in a runner, such as `__proto__` and `then`) gets a `_` suffix; a collision gets `__2`,
 * `__3`, ... Names that already are valid identifiers are placed first, so adding a tool never
 * renames an existing one that was spelled as an identifier. Same input order, same result: the
 * map is deterministic (replays depend on it).
 */
#pragma once

#include <glib.h>

typedef struct SbxNamespace SbxNamespace;

/* One mapped name. Owned by the namespace. */
typedef struct {
    const char *real;  /* as in the catalog */
    const char *ident; /* as the guest sees it */
} SbxNsName;

/** Create an empty namespace. */
SbxNamespace *sbx_namespace_new(void);

/** Free @ns and all names it owns. Accepts NULL. */
void sbx_namespace_free(SbxNamespace *ns);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxNamespace, sbx_namespace_free)

/**
 * Build the namespace for @n_providers providers. Provider i has the real name
 * @providers[i] and the NULL-terminated tool list @tools[i]. Real names must be non-empty
 * valid UTF-8 and unique within their level (the catalog checks this). Replaces any previous
 * content. Returns FALSE (and fills @error) if an identifier cannot be formed.
 */
gboolean sbx_namespace_build(SbxNamespace *ns, const char *const *providers,
                             const char *const *const *tools, gsize n_providers, GError **error);

/** Identifier of provider @real, or NULL. */
const char *sbx_namespace_provider_ident(const SbxNamespace *ns, const char *real);

/** Identifier of tool @real of provider @provider_real, or NULL. */
const char *sbx_namespace_tool_ident(const SbxNamespace *ns, const char *provider_real,
                                     const char *real);

/**
 * Map identifiers from the guest back to real names. Returns TRUE and sets *@ret_provider and
 * *@ret_tool (owned by @ns) if both are known; FALSE otherwise (outputs untouched).
 */
gboolean sbx_namespace_resolve(const SbxNamespace *ns, const char *provider_ident,
                               const char *tool_ident, const char **ret_provider,
                               const char **ret_tool);

/**
 * The sanitised form of @name before collision handling (exported for tests): newly allocated,
 * or NULL if @name is empty or not UTF-8.
 */
char *sbx_namespace_sanitize(const char *name);

/** True if @ident needs the reserved-word suffix (exported for tests). */
gboolean sbx_namespace_is_reserved(const char *ident);
