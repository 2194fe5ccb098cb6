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
    expect(argv, "-global", "apic-common.vapic=off");
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
    /* The built-in devices no profile needs, off (test-devices checks what is left). */
    expect(argv, "-machine", "vmport=off,smbus=off,sata=off,pit=off,hpet=off,i8042=off,pic=off");
    /* Without the PIT the kernel's IRQ 0 check would panic. */
    expect(argv, "-append", "console=ttyS0 quiet panic=-1 tsc_early_khz=2599998 no_timer_check");
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
    expect(argv, "-machine", "pit=off,pic=off");
    /* No i8259, no legacy IRQs: the kernel skips the timer check by itself. */
    expect(argv, "-append", "console=ttyS0 quiet panic=-1 tsc_early_khz=2599998");
    /* Never virtio-mmio-bus.0: it gets no interrupts. */
    expect(argv, "-device", "virtio-blk-device,drive=root,bus=virtio-mmio-bus.1");
    expect(argv, "-device", "vhost-user-vsock-device,chardev=vsock,bus=virtio-mmio-bus.2");
    assert_false(has(argv, "-device", "virtio-blk-pci,drive=root"));
}

/* Everything of @argv joined, to check that something is absent. */
static gboolean mentions(char **argv, const char *what)
{
    g_autofree char *all = g_strjoinv(" ", argv);

    return strstr(all, what) != NULL;
}

static char **argv_rt(const SbxProfile *p, SbxQemuRuntime *rt)
{
    rt->qemu = "qemu-system-x86_64";
    rt->accel = SBX_ACCEL_TCG;
    rt->tsc_khz = 2599998;
    rt->qmp_fd = 3;
    rt->console_fd = 4;
    rt->vhost_user_path = "/run/x/vhost-user.sock";
    rt->serial_path = "/run/x,y/agent.sock";
    rt->guest_cid = 1234;
    return sbx_qemu_argv(p, &image, rt);
}

/* virtio-serial: the port on QEMU's socket, no vsock, no bridge; same devices in a snapshot. */
static void test_serial(void **state)
{
    static const struct {
        SbxMachine machine;
        const char *controller;
    } cases[] = {
        {SBX_MACHINE_Q35, "virtio-serial-pci,id=vser"},
        {SBX_MACHINE_MICROVM, "virtio-serial-device,id=vser,bus=virtio-mmio-bus.2"},
    };

    (void)state;
    for (guint i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autoptr(SbxProfile) p = profile(cases[i].machine);
        SbxQemuRuntime cold = {0}, tmpl = {.ram_path = "/proc/self/fd/5", .snapshot_layout = TRUE};
        SbxQemuRuntime restore = {.ram_path = "/snap/ram",
                                  .ram_private = TRUE,
                                  .snapshot_layout = TRUE,
                                  .incoming = TRUE};
        g_auto(GStrv) a = NULL, t = NULL, r = NULL;

        p->channel = SBX_CHANNEL_VIRTIO_SERIAL;
        a = argv_rt(p, &cold);
        t = argv_rt(p, &tmpl);
        r = argv_rt(p, &restore);
        char **all[] = {a, t, r};
        for (guint k = 0; k < G_N_ELEMENTS(all); k++) {
            char **x = all[k];
            expect(x, "-chardev", "socket,id=agent,path=/run/x,,y/agent.sock,server=on,wait=off");
            expect(x, "-device", cases[i].controller);
            expect(x, "-device",
                   "virtserialport,bus=vser.0,chardev=agent,name=sbx.agent,id=agent-port");
            assert_false(mentions(x, "vsock"));
            assert_false(mentions(x, "pcie-root-port"));
            assert_false(mentions(x, "pcie=on"));
            assert_false(mentions(x, "pcie_ports=native"));
        }
        expect(a, "-object", "memory-backend-memfd,id=pc.ram,size=256M,share=on");
        expect(t, "-object",
               "memory-backend-file,id=pc.ram,size=256M,mem-path=/proc/self/fd/5,share=on");
        /* The restore maps the snapshot's RAM file copy-on-write. */
        expect(r, "-object",
               "memory-backend-file,id=pc.ram,size=256M,mem-path=/snap/ram,share=off");
        expect(r, "-incoming", "defer");
    }
}

/* Kernel vhost-vsock: the guest CID on the device, no bridge socket, in the snapshot as is. */
static void test_vsock_kernel(void **state)
{
    g_autoptr(SbxProfile) q = profile(SBX_MACHINE_Q35);
    g_autoptr(SbxProfile) m = profile(SBX_MACHINE_MICROVM);
    SbxQemuRuntime rt = {0}, tmpl = {.ram_path = "/proc/self/fd/5", .snapshot_layout = TRUE};
    g_auto(GStrv) a = NULL, b = NULL, t = NULL;

    (void)state;
    q->channel = m->channel = SBX_CHANNEL_VSOCK_KERNEL;
    a = argv_rt(q, &rt);
    b = argv_rt(m, &rt);
    t = argv_rt(q, &tmpl);
    expect(a, "-device", "vhost-vsock-pci,guest-cid=1234");
    expect(b, "-device", "vhost-vsock-device,guest-cid=1234,bus=virtio-mmio-bus.2");
    expect(t, "-device", "vhost-vsock-pci,guest-cid=1234");
    char **all[] = {a, b, t};
    for (guint k = 0; k < G_N_ELEMENTS(all); k++) {
        assert_false(mentions(all[k], "vhost-user"));
        assert_false(mentions(all[k], "virtserialport"));
        assert_false(mentions(all[k], "pcie-root-port"));
    }
}

/* The bridge's snapshot layout still has the hot-plug port (and PCIe on microvm). */
static void test_bridge_snapshot_layout(void **state)
{
    g_autoptr(SbxProfile) m = profile(SBX_MACHINE_MICROVM);
    SbxQemuRuntime restore = {
        .ram_path = "/proc/self/fd/5", .snapshot_layout = TRUE, .no_vsock = TRUE, .incoming = TRUE};
    g_auto(GStrv) r = argv_rt(m, &restore);

    (void)state;
    expect(r, "-machine", "microvm,pcie=on,memory-backend=pc.ram");
    expect(r, "-machine", "pit=off,pic=off"); /* the snapshot's devices are the cold boot's */
    expect(r, "-global", "apic-common.vapic=off");
    expect(r, "-device", "pcie-root-port,id=vsock-port,bus=pcie.0,chassis=1");
    expect(r, "-object",
           "memory-backend-file,id=pc.ram,size=256M,mem-path=/proc/self/fd/5,share=on");
    assert_true(mentions(r, "pcie_ports=native"));
    assert_false(mentions(r, "vhost-user-vsock"));
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
           "console=ttyS0 quiet panic=-1 tsc_early_khz=2599998 no_timer_check sandbox.debug=1 "
           "init_on_free=1");
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
        cmocka_unit_test(test_serial),
        cmocka_unit_test(test_vsock_kernel),
        cmocka_unit_test(test_bridge_snapshot_layout),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_accel),
        cmocka_unit_test(test_kvm_argv),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
