/* The QEMU command line built from each machine type, and the accelerator choice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "profile-private.h"
#include "qemu.h"

static SbxImage image = {
    .dir = "/img",
    .kernel = "/img/vmlinux",
    .initramfs = "/img/initramfs.cpio",
    .rootfs = "/img,x/rootfs.erofs", /* a comma, to check QEMU option escaping */
    .hash = "h",
};

static SbxProfile *profile(SbxMachine machine)
{
    SbxProfile *p = g_new0(SbxProfile, 1);

    p->name = g_strdup(machine == SBX_MACHINE_Q35 ? "q35" : "microvm");
    p->machine = machine;
    p->accel = SBX_ACCEL_AUTO;
    p->cpus = 1;
    p->memory_mib = 256;
    p->cmdline_extra = g_strdup("");
    return p;
}

static char **argv_for(const SbxProfile *p)
{
    SbxQemuRuntime rt = {.qemu = "qemu-system-x86_64",
                         .accel = SBX_ACCEL_TCG,
                         .tsc_khz = 2599998,
                         .qmp_fd = 3,
                         .console_fd = 4,
                         .vhost_user_path = "/run/x/vhost-user.sock"};

    return sbx_qemu_argv(p, &image, &rt);
}

/* True if @argv has @opt immediately followed by @value. */
static gboolean has(char **argv, const char *opt, const char *value)
{
    for (char **a = argv; *a; a++)
        if (g_str_equal(*a, opt) && (!value || (a[1] && g_str_equal(a[1], value))))
            return TRUE;
    return FALSE;
}

static void expect(char **argv, const char *opt, const char *value)
{
    if (!has(argv, opt, value)) {
        g_autofree char *all = g_strjoinv(" ", argv);
        fail_msg("missing %s %s in: %s", opt, value ? value : "", all);
    }
}

static void expect_common(char **argv)
{
    assert_string_equal(argv[0], "qemu-system-x86_64");
    expect(argv, "-nodefaults", NULL);
    expect(argv, "-no-user-config", NULL);
    expect(argv, "-display", "none");
    expect(argv, "-no-reboot", NULL);
    expect(argv, "-object", "memory-backend-memfd,id=pc.ram,size=256M,share=on");
    expect(argv, "-m", "256M");
    expect(argv, "-accel", "tcg");
    expect(argv, "-smp", "1");
    expect(argv, "-kernel", "/img/vmlinux");
    expect(argv, "-initrd", "/img/initramfs.cpio");
    expect(argv, "-append", "console=ttyS0 quiet panic=-1 tsc_early_khz=2599998");
    expect(argv, "-drive", "file=/img,,x/rootfs.erofs,if=none,id=root,format=raw,readonly=on");
    expect(argv, "-chardev", "socket,id=qmp,fd=3,server=off");
    expect(argv, "-mon", "chardev=qmp,mode=control");
    expect(argv, "-chardev", "socket,id=con,fd=4,server=off");
    expect(argv, "-serial", "chardev:con");
    expect(argv, "-chardev", "socket,id=vsock,path=/run/x/vhost-user.sock");
    assert_false(has(argv, "-cpu", NULL));
}

static void test_q35(void **state)
{
    g_autoptr(SbxProfile) p = profile(SBX_MACHINE_Q35);
    g_auto(GStrv) argv = argv_for(p);

    (void)state;
    expect_common(argv);
    expect(argv, "-machine", "q35,memory-backend=pc.ram");
    expect(argv, "-device", "virtio-blk-pci,drive=root");
    expect(argv, "-device", "vhost-user-vsock-pci,chardev=vsock");
    assert_false(has(argv, "-device", "virtio-blk-device,drive=root,bus=virtio-mmio-bus.1"));
}

static void test_microvm(void **state)
{
    g_autoptr(SbxProfile) p = profile(SBX_MACHINE_MICROVM);
    g_auto(GStrv) argv = argv_for(p);

    (void)state;
    expect_common(argv);
    expect(argv, "-machine", "microvm,memory-backend=pc.ram");
    /* Never virtio-mmio-bus.0: it gets no interrupts. */
    expect(argv, "-device", "virtio-blk-device,drive=root,bus=virtio-mmio-bus.1");
    expect(argv, "-device", "vhost-user-vsock-device,chardev=vsock,bus=virtio-mmio-bus.2");
    assert_false(has(argv, "-device", "virtio-blk-pci,drive=root"));
}

static void test_profile_options(void **state)
{
    g_autoptr(SbxProfile) p = profile(SBX_MACHINE_Q35);
    g_auto(GStrv) argv = NULL;

    (void)state;
    p->cpu = g_strdup("max");
    p->cpus = 2;
    p->memory_mib = 1024;
    g_free(p->cmdline_extra);
    p->cmdline_extra = g_strdup("sandbox.debug=1 init_on_free=1");
    argv = argv_for(p);
    expect(argv, "-cpu", "max");
    expect(argv, "-smp", "2");
    expect(argv, "-m", "1024M");
    expect(argv, "-object", "memory-backend-memfd,id=pc.ram,size=1024M,share=on");
    expect(argv, "-append",
           "console=ttyS0 quiet panic=-1 tsc_early_khz=2599998 sandbox.debug=1 init_on_free=1");
}

static void test_escape(void **state)
{
    g_autofree char *a = sbx_qemu_escape_opt("a,b,,c");
    g_autofree char *b = sbx_qemu_escape_opt("");

    (void)state;
    assert_string_equal(a, "a,,b,,,,c");
    assert_string_equal(b, "");
}

static gboolean kvm_usable(void)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0)
        return FALSE;
    close(fd);
    return TRUE;
}

static void test_accel(void **state)
{
    g_autoptr(SbxProfile) p = profile(SBX_MACHINE_Q35);
    g_autoptr(GError) error = NULL;
    SbxAccel accel;

    (void)state;
    g_setenv("SANDBOX_ACCEL", "tcg", TRUE);
    assert_true(sbx_qemu_resolve_accel(p, &accel, &error));
    assert_int_equal(accel, SBX_ACCEL_TCG);
    p->accel = SBX_ACCEL_KVM; /* the environment wins over the profile */
    assert_true(sbx_qemu_resolve_accel(p, &accel, &error));
    assert_int_equal(accel, SBX_ACCEL_TCG);

    g_setenv("SANDBOX_ACCEL", "hvf", TRUE);
    assert_false(sbx_qemu_resolve_accel(p, &accel, &error));
    assert_non_null(strstr(error->message, "SANDBOX_ACCEL='hvf'"));
    g_clear_error(&error);

    g_unsetenv("SANDBOX_ACCEL");
    p->accel = SBX_ACCEL_AUTO;
    assert_true(sbx_qemu_resolve_accel(p, &accel, &error));
    assert_int_equal(accel, kvm_usable() ? SBX_ACCEL_KVM : SBX_ACCEL_TCG);
    p->accel = SBX_ACCEL_KVM;
    if (kvm_usable()) {
        assert_true(sbx_qemu_resolve_accel(p, &accel, &error));
        assert_int_equal(accel, SBX_ACCEL_KVM);
    } else {
        assert_false(sbx_qemu_resolve_accel(p, &accel, &error));
        assert_non_null(strstr(error->message, "/dev/kvm"));
    }
    g_setenv("SANDBOX_ACCEL", "tcg", TRUE);
}

static void test_kvm_argv(void **state)
{
    g_autoptr(SbxProfile) p = profile(SBX_MACHINE_MICROVM);
    SbxQemuRuntime rt = {.qemu = "q",
                         .accel = SBX_ACCEL_KVM,
                         .tsc_khz = 1000000,
                         .qmp_fd = 3,
                         .console_fd = 4,
                         .vhost_user_path = "/v"};
    g_auto(GStrv) argv = sbx_qemu_argv(p, &image, &rt);

    (void)state;
    expect(argv, "-accel", "kvm");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q35),
        cmocka_unit_test(test_microvm),
        cmocka_unit_test(test_profile_options),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_accel),
        cmocka_unit_test(test_kvm_argv),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
