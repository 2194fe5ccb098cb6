/* Build-time default paths with environment overrides (see paths.h). */
#include "base/paths.h"

#include "base/sbx-config.h"

/* The value of @env when set and not empty, else the default (both copied). */
static char *env_or(const char *env, const char *dflt)
{
    const char *v = g_getenv(env);

    return g_strdup(v && *v ? v : dflt);
}

char *sbx_paths_profiles_dir(void)
{
    return env_or("SANDBOX_PROFILES_DIR", SBX_SOURCE_DIR "/qemu-profiles");
}

char *sbx_paths_image_dir(void)
{
    return env_or("SANDBOX_IMAGE_DIR", SBX_BUILD_DIR "/image");
}

char *sbx_paths_images_dir(void)
{
    return env_or("SANDBOX_IMAGES_DIR", SBX_BUILD_DIR "/images");
}

char *sbx_paths_bridge(void)
{
    return env_or("SANDBOX_BRIDGE", SBX_BUILD_DIR "/bridge/sandbox-bridge");
}

char *sbx_paths_qemu(void)
{
    return env_or("SANDBOX_QEMU", "qemu-system-x86_64");
}

char *sbx_paths_runtime_parent(void)
{
    return env_or("XDG_RUNTIME_DIR", "/tmp");
}

char *sbx_paths_snapshot_dir(void)
{
    return env_or("SANDBOX_SNAPSHOT_DIR", SBX_BUILD_DIR "/snapshots");
}
