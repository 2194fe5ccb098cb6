/*
 * Where the host agent finds its inputs and keeps its files. Each path has an environment
 * override, which wins; without it the default depends on where the binary runs from
 * (docs/install.md, "Paths"):
 *   - from its build tree (this checkout's build directory, sbx_paths_in_build_tree()): the
 *     source and build directories, as baked in at build time;
 *   - installed: the prefix's data and libexec directories for what is read, and for what is
 *     written the directories systemd gives a service ($CACHE_DIRECTORY, $STATE_DIRECTORY,
 *     $RUNTIME_DIRECTORY), else the user's XDG base directories.
 * The base layer: any layer may use it.
 */
#pragma once

#include <glib.h>

/** TRUE when the running executable lies inside the build directory it was built in. */
gboolean sbx_paths_in_build_tree(void);

/**
 * Profile directory: $SANDBOX_PROFILES_DIR, else <source>/qemu-profiles (build tree) or
 * <datadir>/sandbox/profiles (installed). Caller frees.
 */
char *sbx_paths_profiles_dir(void);

/**
 * Guest image directory: $SANDBOX_IMAGE_DIR, else <build>/image (build tree) or
 * <datadir>/sandbox/image (installed). Caller frees.
 */
char *sbx_paths_image_dir(void);

/**
 * Where images built from other recipes live, one directory per recipe name:
 * $SANDBOX_IMAGES_DIR, else <build>/images (guest-image/build-image's default) or
 * <datadir>/sandbox/images (installed). Caller frees.
 */
char *sbx_paths_images_dir(void);

/**
 * The vsock bridge binary: $SANDBOX_BRIDGE, else <build>/bridge/sandbox-bridge (build tree) or
 * <libexecdir>/sandbox/sandbox-bridge (installed). Caller frees.
 */
char *sbx_paths_bridge(void);

/** The QEMU binary: $SANDBOX_QEMU, else "qemu-system-x86_64" (looked up in PATH). Caller frees. */
char *sbx_paths_qemu(void);

/** Parent of per-VM runtime dirs when the caller gives none: $XDG_RUNTIME_DIR, else /tmp. */
char *sbx_paths_runtime_parent(void);

/**
 * The snapshot cache: $SANDBOX_SNAPSHOT_DIR, else <build>/snapshots (build tree), else
 * $CACHE_DIRECTORY/snapshots (a systemd service), else <XDG cache>/sandbox/snapshots. Caller
 * frees.
 */
char *sbx_paths_snapshot_dir(void);

/**
 * Where lasting state (the records database) lives: $SANDBOX_STATE_DIR, else <build>/state
 * (build tree), else $STATE_DIRECTORY (a systemd service), else <XDG state>/sandbox
 * ($XDG_STATE_HOME or ~/.local/state). Caller frees.
 */
char *sbx_paths_state_dir(void);

/**
 * The directory of `sandbox serve`'s socket: $RUNTIME_DIRECTORY when installed and set (a
 * systemd service), else $XDG_RUNTIME_DIR/sandbox when that is absolute, else
 * /tmp/sandbox-<uid>. Caller frees.
 */
char *sbx_paths_runtime_dir(void);
