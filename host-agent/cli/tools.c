/*
 * `sandbox tools --types ts|py [--tools FILE]`: print the catalog's namespace as TypeScript
 * declarations or Python stubs (docs/cli.md), the names and types guest code uses. MCP servers
 * are started to list their tools (on the loop), then stopped.
 */
#include <stdio.h>

#include "catalog.h"
#include "cli/cli.h"
#include "render.h"
#include "tools.h"

static SbxTools *tools_tools;
static SbxRenderLang tools_lang;

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
    g_option_context_set_description(
        oc,
        "Exit status: 0, 2 for invalid usage or catalog, 125 if an MCP server fails to start.\n");
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

static void on_ready(SbxTools *tools, const GError *error, gpointer user_data)
{
    SbxCli *cli = user_data;
    g_autoptr(GError) local = NULL;

    for (const char *const *w = sbx_tools_warnings(tools); *w != NULL; w++) {
        fprintf(stderr, "sandbox tools: warning: %s\n", *w);
    }
    if (error != NULL) {
        fprintf(stderr, "sandbox tools: %s\n", error->message);
        sbx_cli_quit(cli, SBX_EXIT_SANDBOX);
        return;
    }
    g_autofree char *text = sbx_render_types(sbx_tools_catalog(tools), tools_lang, &local);
    if (text == NULL) {
        fprintf(stderr, "sandbox tools: %s\n", local->message);
        sbx_cli_quit(cli, SBX_EXIT_USAGE);
        return;
    }
    fputs(text, stdout);
    sbx_cli_quit(cli, fflush(stdout) == 0 ? 0 : 1);
}

static int tools_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *path = NULL;
    if (!tools_parse(argc, argv, &tools_lang, &path, &error)) {
        fprintf(stderr, "sandbox tools: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    SbxCatalog *catalog = path != NULL ? sbx_catalog_load(path, &error) : sbx_catalog_new_empty();
    tools_tools = catalog != NULL ? sbx_tools_new_listing(catalog, &error) : NULL;
    if (tools_tools == NULL) {
        fprintf(stderr, "sandbox tools: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    sbx_tools_start(tools_tools, on_ready, cli);
    return -1;
}

static void tools_cleanup(SbxCli *cli)
{
    (void)cli;
    g_clear_pointer(&tools_tools, sbx_tools_free);
}

const SbxCliVerb sbx_cli_verb_tools = {
    .name = "tools",
    .summary = "Print the tool namespace as TypeScript declarations or Python stubs",
    .start = tools_start,
    .cleanup = tools_cleanup,
};
