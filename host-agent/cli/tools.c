/*
 * `sandbox tools --types ts|py [--tools FILE]`: print the catalog's namespace as TypeScript
 * declarations or Python stubs (docs/cli.md), the names and types guest code uses.
 */
#include <stdio.h>

#include "catalog.h"
#include "cli/cli.h"
#include "render.h"

static gboolean tools_parse(int argc, char **argv, SbxRenderLang *ret_lang, char **ret_path,
                            GError **error)
{
    g_autofree char *types = NULL;
    g_autofree char *path = NULL;
    const GOptionEntry entries[] = {
        {"types", 0, 0, G_OPTION_ARG_STRING, &types, "Language of the listing", "ts|py"},
        {"tools", 't', 0, G_OPTION_ARG_FILENAME, &path, "Tool catalog", "FILE"},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(GOptionContext) oc = g_option_context_new("- print the tool namespace as types");
    g_set_prgname("sandbox tools");
    g_option_context_add_main_entries(oc, entries, NULL);
    g_option_context_set_description(oc, "Exit status: 0, or 2 for invalid usage or catalog.\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    if (argc != 1) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    "unexpected argument \"%s\"; see `sandbox tools --help`", argv[1]);
        return FALSE;
    }
    if (types == NULL || !sbx_render_lang_parse(types, ret_lang)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "--types: expected ts or py");
        return FALSE;
    }
    *ret_path = g_steal_pointer(&path);
    return TRUE;
}

static int tools_start(SbxCli *cli, int argc, char **argv)
{
    (void)cli;
    g_autoptr(GError) error = NULL;
    g_autofree char *path = NULL;
    SbxRenderLang lang = SBX_RENDER_TS;
    if (!tools_parse(argc, argv, &lang, &path, &error)) {
        fprintf(stderr, "sandbox tools: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    g_autoptr(SbxCatalog) catalog =
        path != NULL ? sbx_catalog_load(path, &error) : sbx_catalog_new_empty();
    g_autofree char *text = catalog != NULL ? sbx_render_types(catalog, lang, &error) : NULL;
    if (text == NULL) {
        fprintf(stderr, "sandbox tools: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    fputs(text, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

const SbxCliVerb sbx_cli_verb_tools = {
    .name = "tools",
    .summary = "Print the tool namespace as TypeScript declarations or Python stubs",
    .start = tools_start,
    .cleanup = NULL,
};
