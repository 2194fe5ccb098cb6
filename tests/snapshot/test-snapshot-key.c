/*
 * The pure parts of snapshots: the key over the inputs, inputs.json round trip and refusals,
 * the mismatch error, and the QEMU command lines of a template and of a restore.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "profile.h"
#include "qemu.h"
#include "snapshot.h"

static const char *PROFILE = "{\"name\":\"q35\"}";

static void compute(SbxSnapshotInputs *in, const char *image, const char *profile, const char *qemu,
                    const char *recipe)
{
    sbx_snapshot_inputs_compute(in, image, "q35", profile, strlen(profile), qemu, recipe);
}

static void test_key_changes_with_every_input(void **state)
{
    SbxSnapshotInputs base, other;
    const char *variants[][4] = {
        {"img2", "{\"name\":\"q35\"}", "QEMU 7.2.22", "argv"},
        {"img", "{\"name\":\"q35\" }", "QEMU 7.2.22", "argv"},
        {"img", "{\"name\":\"q35\"}", "QEMU 7.2.23", "argv"},
        {"img", "{\"name\":\"q35\"}", "QEMU 7.2.22", "argv2"},
    };

    (void)state;
    compute(&base, "img", PROFILE, "QEMU 7.2.22", "argv");
    assert_int_equal(strlen(base.key), 64);
    compute(&other, "img", PROFILE, "QEMU 7.2.22", "argv");
    assert_string_equal(base.key, other.key); /* deterministic */
    sbx_snapshot_inputs_clear(&other);
    for (guint i = 0; i < G_N_ELEMENTS(variants); i++) {
        compute(&other, variants[i][0], variants[i][1], variants[i][2], variants[i][3]);
        assert_string_not_equal(base.key, other.key);
        sbx_snapshot_inputs_clear(&other);
    }
    /* Field boundaries count: "ab"+"c" is not "a"+"bc". */
    compute(&other, "imgQ", PROFILE, "EMU 7.2.22", "argv");
    assert_string_not_equal(base.key, other.key);
    sbx_snapshot_inputs_clear(&other);
    sbx_snapshot_inputs_clear(&base);
}

static void test_json_round_trip(void **state)
{
    SbxSnapshotInputs a, b;
    g_autoptr(GError) error = NULL;

    (void)state;
    compute(&a, "img", PROFILE, "QEMU emulator version 7.2.22", "argv");
    a.image_dir = g_strdup("/x/build/images/data");
    g_autofree char *json = sbx_snapshot_inputs_to_json(&a);
    assert_true(sbx_snapshot_inputs_from_json(json, strlen(json), &b, &error));
    assert_true(sbx_snapshot_inputs_check(&b, &a, "D", &error));
    assert_string_equal(b.profile_name, "q35");
    assert_string_equal(b.image_dir, "/x/build/images/data");
    sbx_snapshot_inputs_clear(&b);
    /* Without the profile's name and image directory (a snapshot made before they were
     * recorded): still read. */
    g_clear_pointer(&a.profile_name, g_free);
    g_clear_pointer(&a.image_dir, g_free);
    g_autofree char *old = sbx_snapshot_inputs_to_json(&a);
    assert_null(strstr(old, "profile_name"));
    assert_true(sbx_snapshot_inputs_from_json(old, strlen(old), &b, &error));
    assert_null(b.profile_name);
    assert_null(b.image_dir);
    assert_true(sbx_snapshot_inputs_check(&b, &a, "D", &error));
    sbx_snapshot_inputs_clear(&a);
    sbx_snapshot_inputs_clear(&b);
}

static void test_json_refused(void **state)
{
    const char *bad[] = {"",
                         "[]",
                         "{\"format\":1}",
                         "{\"format\":\"x\"}",
                         "not json",
                         ("{\"format\":\"a\",\"qemu_version\":\"b\",\"image_id\":\"c\","
                          "\"profile_sha256\":\"d\",\"recipe_sha256\":\"e\"}")};
    (void)state;
    for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
        SbxSnapshotInputs in;
        g_autoptr(GError) error = NULL;
        assert_false(sbx_snapshot_inputs_from_json(bad[i], strlen(bad[i]), &in, &error));
        assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT));
        assert_null(in.key);
    }
}

static void test_mismatch_names_the_input(void **state)
{
    SbxSnapshotInputs made, here;
    g_autoptr(GError) error = NULL;

    (void)state;
    compute(&made, "img", PROFILE, "QEMU emulator version 7.2.0", "argv");
    compute(&here, "img", PROFILE, "QEMU emulator version 7.2.22", "argv");
    assert_false(sbx_snapshot_inputs_check(&made, &here, "/snap/x", &error));
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT));
    assert_non_null(strstr(error->message, "qemu_version"));
    assert_non_null(strstr(error->message, "7.2.0"));
    assert_non_null(strstr(error->message, "7.2.22"));
    assert_non_null(strstr(error->message, "/snap/x"));
    g_clear_error(&error);
    sbx_snapshot_inputs_clear(&here);
    compute(&here, "img", "{\"name\":\"q35\",\"memory_mib\":512}", "QEMU emulator version 7.2.0",
            "argv");
    assert_false(sbx_snapshot_inputs_check(&made, &here, "/snap/x", &error));
    assert_non_null(strstr(error->message, "profile_sha256"));
    sbx_snapshot_inputs_clear(&made);
    sbx_snapshot_inputs_clear(&here);
}

static gboolean has(char **argv, const char *a, const char *b)
{
    for (guint i = 0; argv[i]; i++)
        if (g_str_equal(argv[i], a) && (!b || (argv[i + 1] && g_str_equal(argv[i + 1], b))))
            return TRUE;
    return FALSE;
}

static gboolean has_sub(char **argv, const char *sub)
{
    for (guint i = 0; argv[i]; i++)
        if (strstr(argv[i], sub))
            return TRUE;
    return FALSE;
}

static char **argv_for(const char *name, gboolean restore)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load_named(NULL, name, &error);
    SbxImage image = {.kernel = "K", .initramfs = "I", .rootfs = "R"};
    SbxQemuRuntime rt = {.qemu = "q",
                         .accel = SBX_ACCEL_TCG,
                         .tsc_khz = 1000000,
                         .qmp_fd = 3,
                         .console_fd = 4,
                         .vhost_user_path = "/r/v,u",
                         .ram_path = "/proc/self/fd/5",
                         .snapshot_layout = TRUE,
                         .no_vsock = restore,
                         .incoming = restore};

    assert_non_null(p);
    return sbx_qemu_argv(p, &image, &rt);
}

static void test_argv_template_and_restore(void **state)
{
    g_auto(GStrv) t = argv_for("q35", FALSE);
    g_auto(GStrv) r = argv_for("q35", TRUE);

    (void)state;
    assert_true(has(t, "-object",
                    "memory-backend-file,id=pc.ram,size=256M,mem-path=/proc/self/fd/5,share=on"));
    assert_true(has(t, "-device", "pcie-root-port,id=vsock-port,bus=pcie.0,chassis=1"));
    assert_true(has(t, "-device", "vhost-user-vsock-pci,bus=vsock-port,chardev=vsock,id=vsock"));
    assert_true(has(t, "-chardev", "socket,id=vsock,path=/r/v,,u"));
    assert_false(has(t, "-incoming", NULL));
    /* The restore: the same machine, no vsock (hot-plugged later), waiting for the state. */
    assert_true(has(r, "-device", "pcie-root-port,id=vsock-port,bus=pcie.0,chassis=1"));
    assert_false(has_sub(r, "vhost-user-vsock"));
    assert_false(has_sub(r, "id=vsock,"));
    assert_true(has(r, "-incoming", "defer"));
    assert_int_equal(g_strv_length(t), g_strv_length(r) - 2 + 4);
}

static void test_argv_microvm_pcie(void **state)
{
    g_auto(GStrv) t = argv_for("microvm", FALSE);

    (void)state;
    assert_true(has(t, "-machine", "microvm,pcie=on,memory-backend=pc.ram"));
    assert_true(has_sub(t, " pcie_ports=native"));
    assert_true(has(t, "-device", "vhost-user-vsock-pci,bus=vsock-port,chardev=vsock,id=vsock"));
}

static void test_recipe_is_stable(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load_named(NULL, "q35", &error);
    g_autofree char *a = sbx_snapshot_recipe(p, SBX_ACCEL_TCG, 2600000);
    g_autofree char *b = sbx_snapshot_recipe(p, SBX_ACCEL_TCG, 2600000);
    g_autofree char *c = sbx_snapshot_recipe(p, SBX_ACCEL_KVM, 2600000);

    (void)state;
    assert_string_equal(a, b);
    assert_string_not_equal(a, c);
    assert_null(strstr(a, "/proc/self")); /* no per-VM values */
}

/* The attachment is in the recipe (so in the key): each channel has its own snapshot. */
static void test_recipe_covers_the_channel(void **state)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) bridge = sbx_profile_load_named(NULL, "q35", &error);
    g_autoptr(SbxProfile) serial = sbx_profile_load_named(NULL, "q35-serial", &error);
    g_autofree char *a = NULL, *b = NULL;

    (void)state;
    assert_non_null(bridge);
    assert_non_null(serial);
    a = sbx_snapshot_recipe(bridge, SBX_ACCEL_TCG, 2600000);
    b = sbx_snapshot_recipe(serial, SBX_ACCEL_TCG, 2600000);
    assert_string_not_equal(a, b);
    assert_non_null(strstr(b, "virtserialport"));
    assert_null(strstr(b, "vsock"));
    assert_non_null(strstr(a, "vhost-user-vsock-pci"));
}

/* A snapshot directory @name for @image_id and a profile @profile_name with bytes @profile
 * (@profile_name NULL: an inputs.json from before the name was recorded), of the image in
 * @image_dir (NULL: from before image_dir was recorded). */
static void fake_snapshot_of(const char *cache, const char *name, const char *image_id,
                             const char *profile_name, const char *profile, const char *image_dir)
{
    SbxSnapshotInputs in = {0};
    g_autofree char *dir = g_build_filename(cache, name, NULL);
    g_autofree char *path = g_build_filename(dir, "inputs.json", NULL);
    g_autofree char *ram = g_build_filename(dir, "ram", NULL);

    sbx_snapshot_inputs_compute(&in, image_id, profile_name, profile, strlen(profile), "QEMU 7.2",
                                "recipe");
    in.image_dir = g_strdup(image_dir);
    g_autofree char *json = sbx_snapshot_inputs_to_json(&in);
    assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    assert_true(g_file_set_contents(path, json, -1, NULL));
    assert_true(g_file_set_contents(ram, "ram", -1, NULL));
    sbx_snapshot_inputs_clear(&in);
}

static void fake_snapshot(const char *cache, const char *name, const char *image_id,
                          const char *profile_name, const char *profile)
{
    fake_snapshot_of(cache, name, image_id, profile_name, profile, NULL);
}

static gboolean exists(const char *cache, const char *name)
{
    g_autofree char *dir = g_build_filename(cache, name, NULL);
    return g_file_test(dir, G_FILE_TEST_EXISTS);
}

/*
 * The collection after a make removes what a rebuild superseded and nobody uses (another image
 * from the same directory, or from an unrecorded one), and the snapshot of an edited profile
 * (same name, other bytes); it keeps the current snapshot, other profiles of the same image,
 * images of other directories (side by side), one without a recorded name, one held open, and
 * what is not ours.
 */
static void test_collect(void **state)
{
    (void)state;
    g_autofree char *cache = g_dir_make_tmp("sbx-snap-gc-XXXXXX", NULL);
    SbxSnapshotInputs cur = {0};

    sbx_snapshot_inputs_compute(&cur, "image-new", "one", "p1", 2, "QEMU 7.2", "recipe");
    cur.image_dir = g_strdup("/images/default");
    fake_snapshot_of(cache, cur.key, "image-new", "one", "p1", "/images/default");
    fake_snapshot_of(cache, "old-same-dir", "image-old", "two", "p2", "/images/default");
    fake_snapshot_of(cache, "beside", "image-data", "three", "p3", "/images/data");
    fake_snapshot(cache, "other-profile", "image-new", "two", "p2");
    fake_snapshot(cache, "edited", "image-new", "one", "p1 before an edit");
    fake_snapshot(cache, "no-name", "image-new", NULL, "p1 before an edit");
    fake_snapshot(cache, "old", "image-old", "one", "p1");
    fake_snapshot(cache, "old-in-use", "image-old", "two", "p2");
    g_autofree char *junk = g_build_filename(cache, "not-a-snapshot", NULL);
    assert_int_equal(mkdir(junk, 0700), 0);

    /* As an open SbxSnapshot does: a shared lock on its inputs.json. */
    g_autofree char *held = g_build_filename(cache, "old-in-use", "inputs.json", NULL);
    int fd = open(held, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0 && flock(fd, LOCK_SH) == 0);

    assert_int_equal(sbx_snapshot_collect(cache, &cur), 3);
    assert_true(exists(cache, cur.key));
    assert_false(exists(cache, "old-same-dir"));
    assert_true(exists(cache, "beside"));
    assert_true(exists(cache, "other-profile"));
    assert_false(exists(cache, "edited"));
    assert_true(exists(cache, "no-name"));
    assert_false(exists(cache, "old"));
    assert_true(exists(cache, "old-in-use"));
    assert_true(exists(cache, "not-a-snapshot"));

    close(fd); /* no longer used: the next collection takes it */
    assert_int_equal(sbx_snapshot_collect(cache, &cur), 1);
    assert_false(exists(cache, "old-in-use"));

    const char *left[] = {cur.key, "other-profile", "no-name", "beside", "not-a-snapshot"};
    for (gsize i = 0; i < G_N_ELEMENTS(left); i++) {
        g_autofree char *dir = g_build_filename(cache, left[i], NULL);
        g_autofree char *in = g_build_filename(dir, "inputs.json", NULL);
        g_autofree char *ram = g_build_filename(dir, "ram", NULL);
        unlink(in);
        unlink(ram);
        assert_int_equal(rmdir(dir), 0);
    }
    assert_int_equal(rmdir(cache), 0);
    sbx_snapshot_inputs_clear(&cur);
}

/* Lines in @path: how many times the fake QEMU below ran. */
static guint runs(const char *path)
{
    g_autofree char *text = NULL;
    guint n = 0;

    if (!g_file_get_contents(path, &text, NULL, NULL))
        return 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

/*
 * QEMU's version is asked once and then read from the cache dir while the binary is the same
 * file; a changed binary (here: its modification time) is asked again; without a cache dir,
 * every time.
 */
static void test_qemu_version_cached(void **state)
{
    (void)state;
    g_autofree char *tmp = g_dir_make_tmp("sbx-qemu-version-XXXXXX", NULL);
    g_autofree char *qemu = g_build_filename(tmp, "qemu", NULL);
    g_autofree char *count = g_build_filename(tmp, "runs", NULL);
    g_autofree char *cache = g_build_filename(tmp, "cache", NULL);
    g_autofree char *kept = g_build_filename(cache, ".qemu-version", NULL);
    g_autofree char *script = g_strdup_printf(
        "#!/bin/sh\necho x >> '%s'\necho 'QEMU emulator version 9.9.9'\necho second line\n", count);
    g_autoptr(GError) error = NULL;

    assert_true(g_file_set_contents(qemu, script, -1, NULL));
    assert_int_equal(chmod(qemu, 0700), 0);
    assert_int_equal(mkdir(cache, 0700), 0);
    g_setenv("SANDBOX_QEMU", qemu, TRUE);

    for (int i = 0; i < 3; i++) {
        g_autofree char *v = sbx_qemu_version(cache, &error);
        assert_non_null(v);
        assert_string_equal(v, "QEMU emulator version 9.9.9");
    }
    assert_int_equal(runs(count), 1);

    struct timespec later[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, qemu, later, 0), 0);
    g_autofree char *v2 = sbx_qemu_version(cache, &error);
    assert_string_equal(v2, "QEMU emulator version 9.9.9");
    assert_int_equal(runs(count), 2);

    g_autofree char *v3 = sbx_qemu_version(NULL, &error);
    assert_non_null(v3);
    assert_int_equal(runs(count), 3);

    g_setenv("SANDBOX_QEMU", "/nonexistent/qemu", TRUE);
    assert_null(sbx_qemu_version(cache, &error));
    assert_non_null(strstr(error->message, "not found"));
    g_unsetenv("SANDBOX_QEMU");

    unlink(kept);
    rmdir(cache);
    unlink(qemu);
    unlink(count);
    assert_int_equal(rmdir(tmp), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_changes_with_every_input),
        cmocka_unit_test(test_json_round_trip),
        cmocka_unit_test(test_json_refused),
        cmocka_unit_test(test_mismatch_names_the_input),
        cmocka_unit_test(test_argv_template_and_restore),
        cmocka_unit_test(test_argv_microvm_pcie),
        cmocka_unit_test(test_recipe_is_stable),
        cmocka_unit_test(test_recipe_covers_the_channel),
        cmocka_unit_test(test_collect),
        cmocka_unit_test(test_qemu_version_cached),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
