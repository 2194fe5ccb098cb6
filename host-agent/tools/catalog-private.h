/*
 * Helpers of catalog.c for the parsers of the provider kinds and of the policy section, which
 * live in their own files (catalog-http.c, catalog-policy.c). Private to the tools library.
 */
#pragma once

#include <cJSON.h>
#include <glib.h>

#include "catalog.h"

/** Set @error to "@origin: @where: message" (SBX_CATALOG_ERROR_INVALID). */
void sbx_catalog_invalid(GError **error, const char *origin, const char *where, const char *fmt,
                         ...) G_GNUC_PRINTF(4, 5);

/** "@parent.@key", the key quoted when it is not a plain word. */
char *sbx_catalog_path_join(const char *parent, const char *key);

/** Every member of @obj is one of @known (NULL: any) and appears once. */
gboolean sbx_catalog_check_members(const cJSON *obj, const char *const *known, const char *origin,
                                   const char *where, GError **error);

/** The "policy" section of @root into @cat->policy (absent: the defaults). */
gboolean sbx_catalog_parse_policy(const cJSON *root, SbxCatalog *cat, GError **error);
