/*
 * Render a catalog's namespace as TypeScript declarations or Python stubs
 * (`sandbox tools --types ts|py`), so an agent can read which tools exist, under the names guest
 * code uses, with their descriptions and input types. Pure: catalog in, text out; cJSON stays in
 * render.c.
 */
#pragma once

#include <glib.h>

#include "catalog.h"

/*
 * Largest rendered text. A catalog is at most SBX_CATALOG_FILE_MAX (1 MiB), but $ref inlining can
 * multiply a schema; 4 MiB is far more than a reader wants and still cheap to build.
 */
#define SBX_RENDER_OUTPUT_MAX (4 * 1024 * 1024)

/*
 * Deepest schema nesting rendered; below it a type becomes `unknown` / `Any`. Also stops
 * recursive $refs. Eight levels are more than tool inputs use in practice.
 */
#define SBX_RENDER_DEPTH_MAX 8

typedef enum {
    SBX_RENDER_TS, /* TypeScript declarations: `declare const tools: {...};` */
    SBX_RENDER_PY, /* Python stubs: one class per provider, `tools: _Tools` */
} SbxRenderLang;

/**
 * Render @catalog in @lang. Returns the text (newly allocated), or NULL with @error set if the
 * namespace cannot be built or the text would exceed SBX_RENDER_OUTPUT_MAX.
 */
char *sbx_render_types(const SbxCatalog *catalog, SbxRenderLang lang, GError **error);

/**
 * The same for the tools named in @only alone ("provider.tool", real names; NULL-terminated;
 * NULL: all), and the providers that have one of them: what an agent asked for (the MCP server's
 * get_tool_types). Names that match no tool are skipped.
 */
char *sbx_render_types_of(const SbxCatalog *catalog, SbxRenderLang lang, const char *const *only,
                          GError **error);

/** Parse "ts" or "py" (also "typescript", "python"); FALSE if neither. */
gboolean sbx_render_lang_parse(const char *name, SbxRenderLang *ret_lang);
