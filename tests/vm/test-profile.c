/* Profiles: the shipped ones load; every kind of bad field gives an error naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include <glib/gstdio.h>

#include "profile-private.h"

static char *tmpdir;

static int group_setup(void **state)
{
    (void)state;
    tmpdir = g_dir_make_tmp("sbx-test-profile-XXXXXX", NULL);
    return tmpdir ? 0 : -1;
}

static int group_teardown(void **state)
{
    g_autoptr(GDir) d = g_dir_open(tmpdir, 0, NULL);
    const char *name;

    (void)state;
    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *p = g_build_filename(tmpdir, name, NULL);
        g_unlink(p);
    }
    g_rmdir(tmpdir);
    g_free(tmpdir);
    return 0;
}

/* Write @text as @file in the temp dir; return its path. */
static char *write_profile(const char *file, const char *text)
{
    char *path = g_build_filename(tmpdir, file, NULL);

    assert_true(g_file_set_contents(path, text, -1, NULL));
    return path;
}

/* Load @text as @file: expect failure with @expected in the message. */
static void expect_error(const char *file, const char *text, const char *expected)
{
    g_autofree char *path = write_profile(file, text);
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load(path, &error);

    assert_null(p);
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE));
    if (!strstr(error->message, expected))
        fail_msg("error \"%s\" lacks \"%s\"", error->message, expected);
}

static void test_shipped_profiles_load(void **state)
{
    g_autofree char *dir = g_build_filename(SBX_SOURCE_DIR, "qemu-profiles", NULL);
    g_autoptr(GError) error = NULL;
    g_auto(GStrv) names = sbx_profile_list(dir, &error);
    gboolean q35 = FALSE, microvm = FALSE;

    (void)state;
    assert_non_null(names);
    for (char **n = names; *n; n++) {
        g_autoptr(SbxProfile) p = sbx_profile_load_named(dir, *n, &error);
        if (!p)
            fail_msg("%s: %s", *n, error->message);
        assert_string_equal(sbx_profile_name(p), *n);
        q35 |= g_str_equal(*n, "q35") && p->machine == SBX_MACHINE_Q35;
        microvm |= g_str_equal(*n, "microvm") && p->machine == SBX_MACHINE_MICROVM;
    }
    assert_true(q35);
    assert_true(microvm);
}

static void test_defaults(void **state)
{
    g_autofree char *path =
        write_profile("small.json", "{\"name\": \"small\", \"machine\": \"microvm\", "
                                    "\"memory_mib\": 128}");
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load(path, &error);

    (void)state;
    assert_non_null(p);
    assert_int_equal(p->accel, SBX_ACCEL_AUTO);
    assert_int_equal(p->cpus, 1);
    assert_int_equal(sbx_profile_channel(p), SBX_CHANNEL_VSOCK_BRIDGE);
    assert_int_equal(p->memory_mib, 128);
    assert_null(p->cpu);
    assert_string_equal(p->cmdline_extra, "");
    assert_string_equal(sbx_profile_path(p), path);
    assert_null(sbx_profile_image(p)); /* the default image */
}

static void test_all_fields(void **state)
{
    g_autofree char *path = write_profile(
        "full.json",
        "{\"name\": \"full\", \"description\": \"d\", \"machine\": \"q35\", "
        "\"accel\": \"tcg\", \"cpu\": \"max\", \"cpus\": 2, \"memory_mib\": 512, "
        "\"kernel_cmdline_extra\": \"sandbox.debug=1\", \"channel\": \"virtio-serial\", "
        "\"image\": \"data-2_x\"}");
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load(path, &error);

    (void)state;
    assert_non_null(p);
    assert_int_equal(p->accel, SBX_ACCEL_TCG);
    assert_int_equal(sbx_profile_channel(p), SBX_CHANNEL_VIRTIO_SERIAL);
    assert_string_equal(p->cpu, "max");
    assert_int_equal(p->cpus, 2);
    assert_int_equal(sbx_profile_memory_mib(p), 512);
    assert_string_equal(p->cmdline_extra, "sandbox.debug=1");
    assert_string_equal(sbx_profile_image(p), "data-2_x");
}

/* "image": "default" is the default image, as if the field were absent. */
static void test_image_default(void **state)
{
    g_autofree char *path =
        write_profile("d.json", "{\"name\": \"d\", \"machine\": \"q35\", \"memory_mib\": 128, "
                                "\"image\": \"default\"}");
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load(path, &error);

    (void)state;
    assert_non_null(p);
    assert_null(sbx_profile_image(p));
}

#define BASE "\"name\": \"bad\", \"machine\": \"q35\", \"memory_mib\": 256"

static void test_bad_fields(void **state)
{
    static const struct {
        const char *text;
        const char *expected;
    } cases[] = {
        {"{" BASE ", \"memmory_mib\": 256}", "bad.json: memmory_mib: unknown field"},
        {"{" BASE ", \"memory_mib\": 256}", "bad.json: line 1 column 54: duplicate member name"},
        {"{\"name\": \"bad\", \"machine\": \"q35\"}", "bad.json: memory_mib: missing"},
        {"{\"name\": \"bad\", \"memory_mib\": 256}", "bad.json: machine: missing"},
        {"{\"machine\": \"q35\", \"memory_mib\": 256}", "bad.json: name: missing"},
        {"{\"name\": \"other\", \"machine\": \"q35\", \"memory_mib\": 256}",
         "bad.json: name: \"other\" differs from the file name"},
        {"{\"name\": \"b/d\", \"machine\": \"q35\", \"memory_mib\": 256}", "bad.json: name:"},
        {"{\"name\": 5, \"machine\": \"q35\", \"memory_mib\": 256}", "bad.json: name:"},
        {"{\"name\": \"bad\", \"machine\": \"pc\", \"memory_mib\": 256}",
         "bad.json: machine: expected \"q35\" or \"microvm\""},
        {"{\"name\": \"bad\", \"machine\": \"q35\", \"memory_mib\": 63}",
         "bad.json: memory_mib: expected an integer 64..16384"},
        {"{\"name\": \"bad\", \"machine\": \"q35\", \"memory_mib\": 16385}",
         "bad.json: memory_mib: expected an integer 64..16384"},
        {"{\"name\": \"bad\", \"machine\": \"q35\", \"memory_mib\": 256.5}",
         "bad.json: memory_mib: expected an integer"},
        {"{\"name\": \"bad\", \"machine\": \"q35\", \"memory_mib\": \"256\"}",
         "bad.json: memory_mib: expected an integer"},
        {"{\"name\": \"bad\", \"machine\": \"q35\", \"memory_mib\": 1e300}",
         "bad.json: memory_mib: expected an integer"},
        {"{" BASE ", \"accel\": \"hvf\"}",
         "bad.json: accel: expected \"auto\", \"tcg\" or \"kvm\""},
        {"{" BASE ", \"cpus\": 0}", "bad.json: cpus: expected an integer 1..64"},
        {"{" BASE ", \"cpus\": 65}", "bad.json: cpus: expected an integer 1..64"},
        {"{" BASE ", \"cpus\": true}", "bad.json: cpus: expected an integer 1..64"},
        {"{" BASE ", \"cpu\": \"max,+la57\"}", "bad.json: cpu: expected a QEMU CPU model"},
        {"{" BASE ", \"cpu\": \"-max\"}", "bad.json: cpu: expected a QEMU CPU model"},
        {"{" BASE ", \"kernel_cmdline_extra\": \"a\\nb\"}",
         "bad.json: kernel_cmdline_extra: expected a string of at most 1024 printable"},
        {"{" BASE ", \"kernel_cmdline_extra\": \"caf\\u00e9\"}", "bad.json: kernel_cmdline_extra:"},
        {"{" BASE ", \"kernel_cmdline_extra\": 1}", "bad.json: kernel_cmdline_extra:"},
        {"{" BASE ", \"channel\": \"vhost\"}",
         "bad.json: channel: expected \"vsock-bridge\", \"virtio-serial\" or \"vsock-kernel\""},
        {"{" BASE ", \"channel\": 1}", "bad.json: channel: expected \"vsock-bridge\""},
        {"{" BASE ", \"channel\": \"Virtio-Serial\"}", "bad.json: channel: expected"},
        {"{" BASE ", \"vsock\": \"bridge\"}", "bad.json: vsock: renamed; write \"channel\""},
        {"{" BASE ", \"description\": 7}", "bad.json: description:"},
        /* image: a recipe's name, one path component of [a-z0-9_-] */
        {"{" BASE ", \"image\": \"../x\"}", "bad.json: image: expected a recipe name"},
        {"{" BASE ", \"image\": \"Data\"}", "bad.json: image: expected a recipe name"},
        {"{" BASE ", \"image\": \"-x\"}", "bad.json: image: expected a recipe name"},
        {"{" BASE ", \"image\": \"\"}", "bad.json: image: expected a recipe name"},
        {"{" BASE ", \"image\": 1}", "bad.json: image: expected a recipe name"},
        {"{" BASE ", \"image\": \"a.b\"}", "bad.json: image: expected a recipe name"},
        {"{" BASE
         ", \"image\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}",
         "bad.json: image: expected a recipe name of 1..64"},
        {"{" BASE ",}", "bad.json: line 1 column 53: invalid JSON"},
        {"[1, 2]", "bad.json: expected a JSON object"},
        {"{" BASE "} {}", "text after the JSON value"},
        {"", "bad.json: line 1 column 1: invalid JSON"},
    };

    (void)state;
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++)
        expect_error("bad.json", cases[i].text, cases[i].expected);
}

static void test_parse_error_position(void **state)
{
    (void)state;
    expect_error("bad.json", "{\n  \"name\": \"bad\",\n  \"machine\": q35\n}", "line 3");
}

static void test_long_cmdline(void **state)
{
    g_autofree char *extra = g_strnfill(1025, 'x');
    g_autofree char *text = g_strdup_printf("{" BASE ", \"kernel_cmdline_extra\": \"%s\"}", extra);

    (void)state;
    expect_error("bad.json", text, "bad.json: kernel_cmdline_extra:");
}

static void test_deep_nesting(void **state)
{
    g_autofree char *open = g_strnfill(100, '[');
    g_autofree char *close = g_strnfill(100, ']');
    g_autofree char *text = g_strdup_printf("{" BASE ", \"description\": %s%s}", open, close);

    (void)state;
    expect_error("bad.json", text, "bad.json: line 1 column 100: nested deeper than 32 levels");
}

static void test_oversize_file(void **state)
{
    g_autofree char *pad = g_strnfill(70 * 1024, ' ');
    g_autofree char *text = g_strdup_printf("{" BASE "}%s", pad);

    (void)state;
    expect_error("bad.json", text, "bad.json: larger than 65536 bytes");
}

static void test_file_name_rules(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *path = write_profile("bad.txt", "{" BASE "}");

    (void)state;
    assert_null(sbx_profile_load(path, &error));
    assert_non_null(strstr(error->message, "must end in .json"));
    g_clear_error(&error);
    assert_null(sbx_profile_load("/nonexistent/x.json", &error));
    assert_non_null(strstr(error->message, "cannot open"));
    g_clear_error(&error);
    assert_null(sbx_profile_load(tmpdir, &error)); /* a directory */
    assert_non_null(error);
}

static void test_load_named(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = NULL;

    g_free(write_profile("good.json", "{\"name\": \"good\", \"machine\": \"q35\", "
                                      "\"memory_mib\": 256}"));
    p = sbx_profile_load_named(tmpdir, "good", &error);

    (void)state;
    assert_non_null(p);
    assert_null(sbx_profile_load_named(tmpdir, "../etc/passwd", &error));
    assert_non_null(strstr(error->message, "invalid profile name"));
    g_clear_error(&error);
    assert_null(sbx_profile_load_named(tmpdir, "nope", &error));
    assert_non_null(strstr(error->message, "no profile \"nope\""));
    assert_non_null(strstr(error->message, "good"));
}

static void test_default_dir_from_env(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = NULL;

    g_free(write_profile("envp.json", "{\"name\": \"envp\", \"machine\": \"q35\", "
                                      "\"memory_mib\": 256}"));

    (void)state;
    g_setenv("SANDBOX_PROFILES_DIR", tmpdir, TRUE);
    p = sbx_profile_load_named(NULL, "envp", &error);
    g_unsetenv("SANDBOX_PROFILES_DIR");
    assert_non_null(p);
}

/* sbx_profile_parse: the checks of a file, on bytes that need no NUL, under a name or none. */
static void test_parse_from_bytes(void **state)
{
    static const char text[] = "{" BASE ", \"cpus\": 2}trailing bytes, not part of the input";
    static const char bad_cpus[] = "{" BASE ", \"cpus\": 0}";
    gsize len = strlen("{" BASE ", \"cpus\": 2}");
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_parse("bad", text, len, &error);

    (void)state;
    assert_non_null(p);
    assert_null(sbx_profile_path(p));
    assert_string_equal(sbx_profile_name(p), "bad");
    assert_int_equal(p->cpus, 2);
    g_clear_pointer(&p, sbx_profile_free);
    p = sbx_profile_parse(NULL, text, len, &error); /* any name */
    assert_non_null(p);
    assert_null(sbx_profile_parse("other", text, len, &error));
    assert_non_null(strstr(error->message, "other.json: name: \"bad\" differs"));
    g_clear_error(&error);
    assert_null(sbx_profile_parse(NULL, text, len + 1, &error));
    assert_non_null(strstr(error->message, "profile: line 1 column"));
    g_clear_error(&error);
    assert_null(sbx_profile_parse(NULL, bad_cpus, strlen(bad_cpus), &error));
    assert_non_null(strstr(error->message, "profile: cpus: expected an integer 1..64"));
    g_clear_error(&error);
    assert_null(sbx_profile_parse("../x", text, len, &error));
    assert_non_null(strstr(error->message, "invalid profile name"));
}

/* A parsed text over the size limit of a file is refused alike, before parsing. */
static void test_parse_oversize(void **state)
{
    g_autofree char *pad = g_strnfill(70 * 1024, ' ');
    g_autofree char *text = g_strdup_printf("{" BASE "}%s", pad);
    g_autoptr(GError) error = NULL;

    (void)state;
    assert_null(sbx_profile_parse("bad", text, strlen(text), &error));
    assert_non_null(strstr(error->message, "bad.json: larger than 65536 bytes"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_profiles_load),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_all_fields),
        cmocka_unit_test(test_image_default),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_parse_error_position),
        cmocka_unit_test(test_long_cmdline),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_oversize_file),
        cmocka_unit_test(test_file_name_rules),
        cmocka_unit_test(test_load_named),
        cmocka_unit_test(test_default_dir_from_env),
        cmocka_unit_test(test_parse_from_bytes),
        cmocka_unit_test(test_parse_oversize),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
