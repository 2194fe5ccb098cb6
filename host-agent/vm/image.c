/*
 * Opening a built guest image: manifest.json written by guest-image/build-image, e.g.
 *   {"image_id": "<sha256>", "kernel": {"boot_file": "vmlinux", ...},
 *    "files": {"vmlinux": {"size": N, "sha256": "..."}, "initramfs.cpio": {...}, ...}, ...}
 * Fields we do not use are ignored: the manifest is our build's output, not user input, and
 * may grow. The files are checked by size only (hashing 100+ MB on every start is too slow).
 */
#include "image.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "base/jsonfile.h"
#include "base/paths.h"
#include "protocol/json.h"

/* The manifest is a few hundred bytes; 64 KiB refuses anything that is clearly not one. */
#define MANIFEST_MAX (64 * 1024)

#define IMAGE_ID_MAX 128

static gboolean image_error(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static gboolean image_error(GError **error, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE, "guest image: %s", msg);
    return FALSE;
}

/* A file name of the image: a plain name in the directory, never a path. */
static gboolean plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && strlen(s) < 256;
}

/* The kernel to boot: kernel.boot_file, else vmlinux if listed, else vmlinuz. */
static const char *boot_file(const cJSON *root, const cJSON *files)
{
    const cJSON *kernel = cJSON_GetObjectItemCaseSensitive(root, "kernel");
    const cJSON *bf = cJSON_GetObjectItemCaseSensitive(kernel, "boot_file");

    if (cJSON_IsString(bf))
        return bf->valuestring;
    return cJSON_GetObjectItemCaseSensitive(files, "vmlinux") ? "vmlinux" : "vmlinuz";
}

/* Check that @name is listed in the manifest and on disk with the recorded size. */
static char *check_file(const char *dir, const cJSON *files, const char *name, GError **error)
{
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(files, name);
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(entry, "size");
    g_autofree char *path = NULL;
    struct stat st;

    if (!plain_name(name)) {
        image_error(error, "manifest.json names an invalid file \"%s\"", name);
        return NULL;
    }
    path = g_build_filename(dir, name, NULL);
    if (!cJSON_IsObject(entry)) {
        image_error(error, "%s is not listed in manifest.json (run scripts/build)", name);
        return NULL;
    }
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
        image_error(error, "%s: missing (run scripts/build)", path);
        return NULL;
    }
    int64_t want;
    if (cJSON_IsNumber(size) && (!sbx_json_int64(size, &want) || want != (int64_t)st.st_size)) {
        image_error(error,
                    "%s: size %lld differs from manifest.json (%s): rebuild with "
                    "scripts/build",
                    path, (long long)st.st_size, sbx_json_number_text(size));
        return NULL;
    }
    return g_steal_pointer(&path);
}

static gboolean read_manifest(SbxImage *img, const cJSON *root, GError **error)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "image_id");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");

    if (!cJSON_IsString(id) || !*id->valuestring || strlen(id->valuestring) > IMAGE_ID_MAX)
        return image_error(error, "manifest.json: image_id: expected a non-empty string");
    if (!cJSON_IsObject(files))
        return image_error(error, "manifest.json: files: expected an object");
    img->hash = g_strdup(id->valuestring);
    img->kernel = check_file(img->dir, files, boot_file(root, files), error);
    if (!img->kernel)
        return FALSE;
    img->initramfs = check_file(img->dir, files, "initramfs.cpio", error);
    if (!img->initramfs)
        return FALSE;
    img->rootfs = check_file(img->dir, files, "rootfs.erofs", error);
    return img->rootfs != NULL;
}

SbxImage *sbx_image_open(const char *dir, GError **error)
{
    g_autofree char *default_dir = dir ? NULL : sbx_paths_image_dir();
    g_autoptr(SbxImage) img = g_new0(SbxImage, 1);
    g_autofree char *manifest = NULL;
    g_autoptr(cJSON) root = NULL;

    img->dir = g_canonicalize_filename(dir ? dir : default_dir, NULL);
    manifest = g_build_filename(img->dir, "manifest.json", NULL);
    if (!g_file_test(manifest, G_FILE_TEST_IS_REGULAR)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE_MISSING,
                    "guest image not built: run scripts/build (no %s)", manifest);
        return NULL;
    }
    root = sbx_json_file_load(manifest, MANIFEST_MAX, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE, error);
    if (!root || !read_manifest(img, root, error))
        return NULL;
    return g_steal_pointer(&img);
}

SbxImage *sbx_image_open_for(const SbxProfile *profile, GError **error)
{
    const char *name = sbx_profile_image(profile);
    g_autofree char *images = NULL;
    g_autofree char *dir = NULL;
    g_autoptr(GError) local = NULL;
    SbxImage *img;

    if (name == NULL)
        return sbx_image_open(NULL, error);
    images = sbx_paths_images_dir();
    dir = g_build_filename(images, name, NULL);
    img = sbx_image_open(dir, &local);
    /* Not built: say which recipe to build, rather than sbx_image_open's "run scripts/build"
     * (which builds the default image only). */
    if (g_error_matches(local, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE_MISSING)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE_MISSING,
                    "guest image \"%s\" of profile %s not built: build it with "
                    "guest-image/build-image --recipe %s.recipe --out %s (%s)",
                    name, sbx_profile_name(profile), name, dir, local->message);
        return NULL;
    }
    if (local != NULL)
        g_propagate_error(error, g_steal_pointer(&local));
    return img;
}

void sbx_image_free(SbxImage *image)
{
    if (!image)
        return;
    g_free(image->dir);
    g_free(image->kernel);
    g_free(image->initramfs);
    g_free(image->rootfs);
    g_free(image->hash);
    g_free(image);
}
