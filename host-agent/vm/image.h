/*
 * A built guest image: the output directory of guest-image/build-image (vmlinuz or vmlinux,
 * initramfs.cpio, rootfs.erofs, manifest.json; docs/guest-image.md).
 */
#pragma once

#include <glib.h>

#include "profile.h"
#include "vm-error.h"

typedef struct {
    char *dir;
    char *kernel;    /* absolute path */
    char *initramfs; /* absolute path */
    char *rootfs;    /* absolute path */
    char *hash;      /* manifest's identity of this image */
} SbxImage;

/**
 * Open the image in @dir (NULL = the default build/image of this checkout, or
 * $SANDBOX_IMAGE_DIR) and check that its files exist with the sizes the manifest records.
 * A missing directory or manifest gives SBX_VM_ERROR_IMAGE_MISSING ("guest image not built:
 * run scripts/build").
 */
SbxImage *sbx_image_open(const char *dir, GError **error);

/**
 * Open the image @profile runs: the one its "image" names (a recipe's, in
 * $SANDBOX_IMAGES_DIR/NAME or <build>/images/NAME), else the default as sbx_image_open(NULL).
 * An image not built gives SBX_VM_ERROR_IMAGE_MISSING naming the recipe to build.
 */
SbxImage *sbx_image_open_for(const SbxProfile *profile, GError **error);

void sbx_image_free(SbxImage *image);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxImage, sbx_image_free)
