/*
 * The jail's settings (host-agent/vm/jail.c) without a VM: the bwrap command line, the
 * environment allow-list, the uid range and its locks, bad settings. That a real QEMU and bridge
 * end up confined is test-vm-boot's check (jail-check.c), and test-vm-fake runs every lifecycle
 * case through the jail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#include "jail.h"
#include "vm-error.h"

static int setup(void **state)
{
    (void)state;
    g_unsetenv("SANDBOX_JAIL");
    g_unsetenv("SANDBOX_JAIL_ENV");
    g_unsetenv("SANDBOX_JAIL_UIDS");
    g_unsetenv("SANDBOX_BWRAP");
    return 0;
}

/* Whether @argv has @opt followed by @arg (or just @opt when @arg is NULL) before "--". */
static gboolean has(char **argv, const char *opt, const char *arg)
{
    for (guint i = 0; argv[i] && !g_str_equal(argv[i], "--"); i++) {
        if (g_str_equal(argv[i], opt) && (!arg || (argv[i + 1] && g_str_equal(argv[i + 1], arg))))
            return TRUE;
    }
    return FALSE;
}

static SbxJail *new_jail(void)
{
    g_autoptr(GError) error = NULL;
    SbxJail *jail = sbx_jail_new(&error);

    if (!jail)
        fail_msg("sbx_jail_new: %s", error->message);
    return jail;
}

static void test_argv(void **state)
{
    g_autoptr(SbxJail) jail = new_jail();
    const char *ro[] = {"/img", NULL};
    const char *dev[] = {"/dev/kvm", NULL};
    SbxJailSpec spec = {.binary = "/usr/bin/true",
                        .runtime_dir = "/tmp/rt",
                        .ro_paths = ro,
                        .devices = dev,
                        .info_fd = 9};
    const char *argv[] = {"/usr/bin/true", "-a", "b", NULL};
    g_auto(GStrv) out = sbx_jail_argv(jail, &spec, argv);
    guint n = g_strv_length(out);

    (void)state;
    assert_true(sbx_jail_enabled(jail));
    /* Every namespace, no nested user namespaces, dies with us, no terminal. */
    for (const char *const *o =
             (const char *const[]){"--unshare-user", "--unshare-ipc", "--unshare-pid",
                                   "--unshare-net", "--unshare-uts", "--unshare-cgroup",
                                   "--disable-userns", "--die-with-parent", "--new-session",
                                   "--as-pid-1", NULL};
         *o; o++)
        assert_true(has(out, *o, NULL));
    assert_true(has(out, "--info-fd", "9"));
    assert_true(has(out, "--ro-bind", "/usr"));
    assert_true(has(out, "--ro-bind-try", "/img"));
    assert_true(has(out, "--dev-bind", "/dev/kvm"));
    assert_true(has(out, "--bind", "/tmp/rt"));
    assert_true(has(out, "--remount-ro", "/"));
    /* Nothing of the host's /etc but the loader's cache; no /home, /root, /var. */
    for (guint i = 0; out[i] && !g_str_equal(out[i], "--"); i++) {
        assert_false(g_str_has_prefix(out[i], "/home") || g_str_has_prefix(out[i], "/root") ||
                     g_str_has_prefix(out[i], "/var"));
        if (g_str_has_prefix(out[i], "/etc"))
            assert_string_equal(out[i], "/etc/ld.so.cache");
    }
    assert_string_equal(out[n - 4], "--");
    assert_string_equal(out[n - 3], "/usr/bin/true");
    assert_string_equal(out[n - 1], "b");
}

static void test_off(void **state)
{
    g_autoptr(SbxJail) jail = NULL;
    const char *argv[] = {"qemu", "-x", NULL};
    SbxJailSpec spec = {.binary = "qemu", .info_fd = 9};

    (void)state;
    g_setenv("SANDBOX_JAIL", "off", TRUE);
    jail = new_jail();
    assert_false(sbx_jail_enabled(jail));
    g_auto(GStrv) out = sbx_jail_argv(jail, &spec, argv);
    assert_int_equal(g_strv_length(out), 2);
    assert_string_equal(out[0], "qemu");
}

static void expect_error(const char *var, const char *value, const char *needle)
{
    g_autoptr(GError) error = NULL;
    SbxJail *jail;

    g_setenv(var, value, TRUE);
    jail = sbx_jail_new(&error);
    g_unsetenv(var);
    assert_null(jail);
    assert_true(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_JAIL));
    if (!strstr(error->message, needle))
        fail_msg("'%s' not in '%s'", needle, error->message);
}

static void test_bad_settings(void **state)
{
    (void)state;
    expect_error("SANDBOX_JAIL", "maybe", "expected \"on\"");
    expect_error("SANDBOX_JAIL_ENV", "FOO,SANDBOX_SECRET_TOKEN", "SANDBOX_SECRET_TOKEN");
    expect_error("SANDBOX_BWRAP", "/nonexistent/bwrap", "/nonexistent/bwrap");
    if (geteuid() == 0) {
        expect_error("SANDBOX_JAIL_UIDS", "5-4", "FIRST-LAST");
        expect_error("SANDBOX_JAIL_UIDS", "0-100000", "FIRST-LAST");
        expect_error("SANDBOX_JAIL_UIDS", "100000", "FIRST-LAST");
    }
}

/* The environment: PATH and the allow-list; a secret never, whatever SANDBOX_JAIL_ENV says. */
static void test_env(void **state)
{
    g_autoptr(SbxJail) jail = NULL;

    (void)state;
    g_setenv("SANDBOX_SECRET_TOKEN", "s3cret", TRUE);
    g_setenv("HOME_LIKE_THING", "x", TRUE);
    g_setenv("ASAN_OPTIONS", "detect_leaks=0", TRUE);
    g_setenv("PASS_ME", "yes", TRUE);
    g_setenv("SANDBOX_JAIL_ENV", "PASS_ME", TRUE);
    jail = new_jail();
    g_auto(GStrv) env = sbx_jail_envp(jail);
    g_autofree char *all = g_strjoinv("\n", env);
    assert_non_null(strstr(all, "PATH=/usr/bin:/bin"));
    assert_non_null(strstr(all, "ASAN_OPTIONS=detect_leaks=0"));
    assert_non_null(strstr(all, "PASS_ME=yes"));
    assert_null(strstr(all, "s3cret"));
    assert_null(strstr(all, "HOME_LIKE_THING"));
    g_unsetenv("SANDBOX_SECRET_TOKEN");
    g_unsetenv("PASS_ME");
}

/* As root: each jail its own uid from the range while it lives; a full range is an error. */
static void test_uids(void **state)
{
    g_autoptr(GError) error = NULL;
    SbxJail *a, *b, *c;

    (void)state;
    if (geteuid() != 0)
        skip();
    g_setenv("SANDBOX_JAIL_UIDS", "1879048000-1879048001", TRUE);
    a = new_jail();
    b = new_jail();
    assert_true(sbx_jail_uid(a) >= 1879048000 && sbx_jail_uid(a) <= 1879048001);
    assert_true(sbx_jail_uid(b) >= 1879048000 && sbx_jail_uid(b) <= 1879048001);
    assert_int_not_equal(sbx_jail_uid(a), sbx_jail_uid(b));
    c = sbx_jail_new(&error);
    assert_null(c);
    assert_non_null(strstr(error->message, "no free uid"));
    sbx_jail_free(a); /* its uid is free again */
    c = new_jail();
    assert_int_not_equal(sbx_jail_uid(c), sbx_jail_uid(b));
    sbx_jail_free(b);
    sbx_jail_free(c);
    /* The runtime dir becomes the jail's; other dirs must let it through. */
    assert_true(sbx_jail_can_reach(c = new_jail(), "/tmp"));
    g_autofree char *closed = g_dir_make_tmp("sbx-test-jail-XXXXXX", NULL);
    g_autofree char *inner = g_build_filename(closed, "x", NULL);
    assert_int_equal(g_mkdir(inner, 0755), 0);
    assert_false(sbx_jail_can_reach(c, inner)); /* the parent is 0700 */
    rmdir(inner);
    rmdir(closed);
    sbx_jail_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_argv, setup),         cmocka_unit_test_setup(test_off, setup),
        cmocka_unit_test_setup(test_bad_settings, setup), cmocka_unit_test_setup(test_env, setup),
        cmocka_unit_test_setup(test_uids, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
