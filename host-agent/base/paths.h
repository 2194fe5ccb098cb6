/*
 * Where the VM layer finds its inputs: build-time defaults (this checkout's source and build
 * directories), each overridable from the environment. The base layer: any layer may use it.
 */
#pragma once

#include <glib.h>

/** Profile directory: $SANDBOX_PROFILES_DIR, else <source>/qemu-profiles. Caller frees. */
char *sbx_paths_profiles_dir(void);

/** Guest image directory: $SANDBOX_IMAGE_DIR, else <build>/image. Caller frees. */
char *sbx_paths_image_dir(void);

/**
 * Where images built from other recipes live, one directory per recipe name:
 * $SANDBOX_IMAGES_DIR, else <build>/images (guest-image/build-image's default). Caller frees.
 */
char *sbx_paths_images_dir(void);

/** The vsock bridge binary: $SANDBOX_BRIDGE, else <build>/bridge/sandbox-bridge. Caller frees. */
char *sbx_paths_bridge(void);

/** The QEMU binary: $SANDBOX_QEMU, else "qemu-system-x86_64" (looked up in PATH). Caller frees. */
char *sbx_paths_qemu(void);

/** Parent of per-VM runtime dirs when the caller gives none: $XDG_RUNTIME_DIR, else /tmp. */
char *sbx_paths_runtime_parent(void);

/** The snapshot cache: $SANDBOX_SNAPSHOT_DIR, else <build>/snapshots. Caller frees. */
char *sbx_paths_snapshot_dir(void);
