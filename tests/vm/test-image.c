/* Opening a guest image directory: manifest checks and the "not built" message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#include "image.h"

static char *dir;

static int setup(void **state)
{
    (void)state;
    dir = g_dir_make_tmp("sbx-test-image-XXXXXX", NULL);
    return dir ? 0 : -1;
}

static int teardown(void **state)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;

    (void)state;
    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *p = g_build_filename(dir, name, NULL);
        g_unlink(p);
    }
    g_rmdir(dir);
    g_clear_pointer(&dir, g_free);
    return 0;
}

static void put(const char *name, const char *text)
{
    g_autofree char *p = g_build_filename(dir, name, NULL);

    assert_true(g_file_set_contents(p, text, -1, NULL));
}

/* Three files with the sizes the manifest below records. */
static void put_files(void)
{
    put("vmlinux", "kernel!");     /* 7 */
    put("vmlinuz", "kz");          /* 2 */
    put("initramfs.cpio", "cpio"); /* 4 */
    put("rootfs.erofs", "erofs");  /* 5 */
}

#define FILES                                                                                      \
    "\"files\": {\"vmlinux\": {\"size\": 7}, \"vmlinuz\": {\"size\": 2}, "                         \
    "\"initramfs.cpio\": {\"size\": 4}, \"rootfs.erofs\": {\"size\": 5, \"sha256\": \"x\"}}"

static void expect_error(int code, const char *expected)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) img = sbx_image_open(dir, &error);

    assert_null(img);
    assert_true(g_error_matches(error, SBX_VM_ERROR, code));
    if (!strstr(error->message, expected))
        fail_msg("error \"%s\" lacks \"%s\"", error->message, expected);
}

static void test_not_built(void **state)
{
    g_autoptr(GError) error = NULL;

    (void)state;
    expect_error(SBX_VM_ERROR_IMAGE_MISSING, "guest image not built: run scripts/build");
    assert_null(sbx_image_open("/nonexistent/image", &error));
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE_MISSING));
}

static void test_good_image(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) img = NULL;
    g_autofree char *kernel = g_build_filename(dir, "vmlinux", NULL);

    (void)state;
    put_files();
    put("manifest.json", "{\"image_id\": \"abc\", \"kernel\": {\"boot_file\": \"vmlinux\", "
                         "\"version\": \"6.1\"}, \"extra\": [1], " FILES "}");
    img = sbx_image_open(dir, &error);
    assert_non_null(img);
    assert_string_equal(img->hash, "abc");
    assert_string_equal(img->kernel, kernel);
    assert_true(g_str_has_suffix(img->initramfs, "/initramfs.cpio"));
    assert_true(g_str_has_suffix(img->rootfs, "/rootfs.erofs"));
    assert_true(g_path_is_absolute(img->rootfs));
}

static void test_boot_file_choice(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) img = NULL;

    (void)state;
    put_files();
    put("manifest.json",
        "{\"image_id\": \"abc\", \"kernel\": {\"boot_file\": \"vmlinuz\"}, " FILES "}");
    img = sbx_image_open(dir, &error);
    assert_non_null(img);
    assert_true(g_str_has_suffix(img->kernel, "/vmlinuz"));
}

/* A profile's image is a recipe's, under $SANDBOX_IMAGES_DIR; not built: the recipe named. */
static void test_open_for_profile(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) img = NULL;
    g_autoptr(SbxProfile) p = NULL;
    g_autofree char *images = g_path_get_dirname(dir);
    g_autofree char *name = g_path_get_basename(dir);
    g_autofree char *json = NULL;

    (void)state;
    /* The temp dir's name has upper-case letters; recipe names do not: link a name to it. */
    g_autofree char *link = g_build_filename(images, "sbx-img-link", NULL);
    g_unlink(link);
    assert_int_equal(symlink(name, link), 0);
    json = g_strdup_printf("{\"name\": \"p\", \"machine\": \"q35\", \"memory_mib\": 128, "
                           "\"image\": \"sbx-img-link\"}");
    p = sbx_profile_parse("p", json, strlen(json), &error);
    assert_non_null(p);
    g_setenv("SANDBOX_IMAGES_DIR", images, TRUE);
    img = sbx_image_open_for(p, &error);
    assert_null(img);
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_IMAGE_MISSING));
    if (!strstr(error->message, "guest image \"sbx-img-link\" of profile p not built") ||
        !strstr(error->message, "--recipe sbx-img-link.recipe"))
        fail_msg("error \"%s\" does not name the recipe", error->message);
    g_clear_error(&error);
    put_files();
    put("manifest.json", "{\"image_id\": \"abc\", " FILES "}");
    img = sbx_image_open_for(p, &error);
    g_unlink(link);
    g_unsetenv("SANDBOX_IMAGES_DIR");
    assert_non_null(img);
    assert_string_equal(img->hash, "abc");
}

static void test_bad_images(void **state)
{
    (void)state;
    put_files();
    put("manifest.json", "{\"image_id\": \"abc\", \"files\": {\"vmlinux\": {\"size\": 7}, "
                         "\"initramfs.cpio\": {\"size\": 4}, \"rootfs.erofs\": {\"size\": 6}}}");
    expect_error(SBX_VM_ERROR_IMAGE, "rootfs.erofs: size 5 differs from manifest.json (6)");
    put("manifest.json", "{\"image_id\": \"abc\", \"files\": {\"vmlinux\": {\"size\": 7}, "
                         "\"rootfs.erofs\": {\"size\": 5}}}");
    expect_error(SBX_VM_ERROR_IMAGE, "initramfs.cpio is not listed in manifest.json");
    put("manifest.json",
        "{\"image_id\": \"abc\", \"kernel\": {\"boot_file\": \"../../etc/x\"}, " FILES "}");
    expect_error(SBX_VM_ERROR_IMAGE, "invalid file \"../../etc/x\"");
    put("manifest.json", "{" FILES "}");
    expect_error(SBX_VM_ERROR_IMAGE, "image_id");
    put("manifest.json", "{\"image_id\": \"abc\"");
    expect_error(SBX_VM_ERROR_IMAGE, "manifest.json: line 1 column 18: invalid JSON");
    put("manifest.json", "{\"image_id\": \"abc\", " FILES "}");
    {
        g_autofree char *p = g_build_filename(dir, "rootfs.erofs", NULL);
        g_unlink(p);
    }
    expect_error(SBX_VM_ERROR_IMAGE, "rootfs.erofs: missing (run scripts/build)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_not_built, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good_image, setup, teardown),
        cmocka_unit_test_setup_teardown(test_boot_file_choice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_for_profile, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_images, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
