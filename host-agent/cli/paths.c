/*
 * `sandbox version` (also `sandbox --version`): the version and the guest image it would use;
 * `sandbox paths`: every path the agent resolves, as one JSON object (docs/install.md, "Paths").
 */
#include <stdio.h>
#include <string.h>

#include "base/jsonfile.h" /* g_autoptr(cJSON) */
#include "base/paths.h"
#include "base/sbx-config.h"
#include "cli/cli.h"
#include "image.h"
#include "protocol/json.h"
#include "server/path.h"

static int version_start(SbxCli *cli, int argc, char **argv)
{
    g_autofree char *dir = sbx_paths_image_dir();
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) image = NULL;
    (void)cli;
    (void)argv;

    if (argc != 1) {
        fprintf(stderr, "usage: sandbox version\n");
        return SBX_EXIT_USAGE;
    }
    printf("sandbox %s\n", SBX_VERSION);
    /* Informative only: the manifest and a stat of each file, never a failure. */
    image = sbx_image_open(NULL, &error);
    if (image != NULL) {
        printf("image %s (%s)\n", image->hash, image->dir);
    } else {
        printf("image: none usable in %s\n", dir);
    }
    return 0;
}

/* Add @key with the string @value (owned, freed here) to @obj. */
static void add_path(cJSON *obj, const char *key, char *value)
{
    cJSON_AddStringToObject(obj, key, value);
    g_free(value);
}

static int paths_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(cJSON) obj = cJSON_CreateObject();
    g_autofree char *text = NULL;
    (void)cli;
    (void)argv;

    if (argc != 1) {
        fprintf(stderr, "usage: sandbox paths\n");
        return SBX_EXIT_USAGE;
    }
    cJSON_AddStringToObject(obj, "version", SBX_VERSION);
    cJSON_AddBoolToObject(obj, "build_tree", sbx_paths_in_build_tree());
    add_path(obj, "profiles_dir", sbx_paths_profiles_dir());
    add_path(obj, "image_dir", sbx_paths_image_dir());
    add_path(obj, "images_dir", sbx_paths_images_dir());
    add_path(obj, "bridge", sbx_paths_bridge());
    add_path(obj, "qemu", sbx_paths_qemu());
    add_path(obj, "snapshot_dir", sbx_paths_snapshot_dir());
    add_path(obj, "state_dir", sbx_paths_state_dir());
    add_path(obj, "runtime_dir", sbx_paths_runtime_dir());
    add_path(obj, "serve_socket", sbx_serve_socket_path(NULL));
    add_path(obj, "vm_runtime_parent", sbx_paths_runtime_parent());
    text = sbx_json_print(obj);
    puts(text);
    return 0;
}

const SbxCliVerb sbx_cli_verb_version = {
    .name = "version",
    .summary = "Print the version and the guest image in use (also: sandbox --version)",
    .start = version_start,
};

const SbxCliVerb sbx_cli_verb_paths = {
    .name = "paths",
    .summary = "Print the paths in use (image, profiles, caches, state, sockets) as JSON",
    .start = paths_start,
};
