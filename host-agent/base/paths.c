/* Default paths: environment overrides, then build tree or installed locations (see paths.h). */
#include "base/paths.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sbx-config.h"

/* The value of @env when set and not empty, else NULL. */
static const char *env_nonempty(const char *env)
{
    const char *v = g_getenv(env);

    return v && *v ? v : NULL;
}

/* The value of @env when set and not empty, else the default (both copied). */
static char *env_or(const char *env, const char *dflt)
{
    const char *v = env_nonempty(env);

    return g_strdup(v ? v : dflt);
}

/*
 * The first directory of a systemd *_DIRECTORY variable (a colon-separated list when the unit
 * names several), or NULL when it is not set or not absolute.
 */
static char *systemd_dir(const char *env)
{
    const char *v = env_nonempty(env);

    if (v == NULL || v[0] != '/')
        return NULL;
    return g_strndup(v, strcspn(v, ":"));
}

static gboolean detect_build_tree(void)
{
    g_autofree char *exe = g_file_read_link("/proc/self/exe", NULL);
    char build[PATH_MAX];
    size_t n;

    /* A build directory that is gone (removed after `meson install`) is no build tree. */
    if (exe == NULL || realpath(SBX_BUILD_DIR, build) == NULL)
        return FALSE;
    n = strlen(build);
    return strncmp(exe, build, n) == 0 && exe[n] == '/';
}

gboolean sbx_paths_in_build_tree(void)
{
    static gsize once;
    static gboolean in_tree;

    if (g_once_init_enter(&once)) {
        in_tree = detect_build_tree();
        g_once_init_leave(&once, 1);
    }
    return in_tree;
}

/* $@env, else @tree_default in the build tree, else the installed @installed. */
static char *read_path(const char *env, const char *tree_default, const char *installed)
{
    return env_or(env, sbx_paths_in_build_tree() ? tree_default : installed);
}

char *sbx_paths_profiles_dir(void)
{
    return read_path("SANDBOX_PROFILES_DIR", SBX_SOURCE_DIR "/qemu-profiles",
                     SBX_PKGDATADIR "/profiles");
}

char *sbx_paths_image_dir(void)
{
    return read_path("SANDBOX_IMAGE_DIR", SBX_BUILD_DIR "/image", SBX_PKGDATADIR "/image");
}

char *sbx_paths_images_dir(void)
{
    return read_path("SANDBOX_IMAGES_DIR", SBX_BUILD_DIR "/images", SBX_PKGDATADIR "/images");
}

char *sbx_paths_bridge(void)
{
    return read_path("SANDBOX_BRIDGE", SBX_BUILD_DIR "/bridge/sandbox-bridge",
                     SBX_PKGLIBEXECDIR "/sandbox-bridge");
}

char *sbx_paths_qemu(void)
{
    return env_or("SANDBOX_QEMU", "qemu-system-x86_64");
}

char *sbx_paths_runtime_parent(void)
{
    return env_or("XDG_RUNTIME_DIR", "/tmp");
}

/*
 * A writable directory: $@env, else @tree_default in the build tree, else @sub under the
 * service's $@service_env, else @sub under the user's @xdg_base/sandbox.
 */
static char *written_path(const char *env, const char *tree_default, const char *service_env,
                          const char *xdg_base, const char *sub)
{
    const char *v = env_nonempty(env);
    g_autofree char *service = NULL;

    if (v != NULL)
        return g_strdup(v);
    if (sbx_paths_in_build_tree())
        return g_strdup(tree_default);
    service = systemd_dir(service_env);
    if (service != NULL)
        return g_build_filename(service, sub, NULL);
    return g_build_filename(xdg_base, "sandbox", sub, NULL);
}

char *sbx_paths_snapshot_dir(void)
{
    return written_path("SANDBOX_SNAPSHOT_DIR", SBX_BUILD_DIR "/snapshots", "CACHE_DIRECTORY",
                        g_get_user_cache_dir(), "snapshots");
}

char *sbx_paths_state_dir(void)
{
    return written_path("SANDBOX_STATE_DIR", SBX_BUILD_DIR "/state", "STATE_DIRECTORY",
                        g_get_user_state_dir(), NULL);
}

char *sbx_paths_runtime_dir(void)
{
    const char *xdg = g_getenv("XDG_RUNTIME_DIR");
    char *service = sbx_paths_in_build_tree() ? NULL : systemd_dir("RUNTIME_DIRECTORY");

    if (service != NULL)
        return service;
    if (xdg != NULL && *xdg == '/')
        return g_build_filename(xdg, "sandbox", NULL);
    return g_strdup_printf("/tmp/sandbox-%u", (unsigned)getuid());
}
