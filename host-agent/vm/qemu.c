/*
 * Building QEMU's command line (see qemu.h). Facts behind the choices are in
 * shared/FINDINGS.md; the short version is in the comments next to each device.
 */
#include "qemu.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "profile-private.h"

static gboolean kvm_usable(int *ret_errno)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        *ret_errno = errno;
        return FALSE;
    }
    close(fd);
    return TRUE;
}

static gboolean accel_from_env(const char *v, SbxAccel *ret, GError **error)
{
    if (g_str_equal(v, "tcg")) {
        *ret = SBX_ACCEL_TCG;
    } else if (g_str_equal(v, "kvm")) {
        *ret = SBX_ACCEL_KVM;
    } else {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG,
                    "SANDBOX_ACCEL='%s': expected \"tcg\" or \"kvm\"", v);
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_qemu_resolve_accel(const SbxProfile *profile, SbxAccel *ret_accel, GError **error)
{
    const char *env = g_getenv("SANDBOX_ACCEL");
    SbxAccel accel = profile->accel;
    int err = 0;

    if (env && *env && !accel_from_env(env, &accel, error))
        return FALSE;
    if (accel == SBX_ACCEL_AUTO) {
        *ret_accel = kvm_usable(&err) ? SBX_ACCEL_KVM : SBX_ACCEL_TCG;
        return TRUE;
    }
    if (accel == SBX_ACCEL_KVM && !kvm_usable(&err)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG,
                    "%s asks for kvm but /dev/kvm cannot be opened read-write: %s",
                    env && *env ? "SANDBOX_ACCEL" : profile->name, g_strerror(err));
        return FALSE;
    }
    *ret_accel = accel;
    return TRUE;
}

char *sbx_qemu_kernel_cmdline(const SbxProfile *profile, guint tsc_khz)
{
    return sbx_qemu_kernel_cmdline_full(profile, tsc_khz, FALSE);
}

char *sbx_qemu_kernel_cmdline_full(const SbxProfile *profile, guint tsc_khz,
                                   gboolean snapshot_layout)
{
    /*
     * microvm publishes no MCFG table, so without pcie_ports=native the kernel never loads
     * pciehp and a device hot-plugged after a restore is never seen (shared/FINDINGS.md).
     */
    const char *native = snapshot_layout && profile->machine == SBX_MACHINE_MICROVM &&
                                 profile->channel == SBX_CHANNEL_VSOCK_BRIDGE
                             ? " pcie_ports=native"
                             : "";

    /*
     * q35 without PIT (Q35_DEVICES_OFF) still announces a PC-compatible interrupt setup, so the
     * kernel checks that the PIT's IRQ 0 arrives and panics ("IO-APIC + timer doesn't work!")
     * unless told not to; the local APIC timer is what it uses anyway. microvm without the
     * i8259 has no legacy IRQs and skips the check.
     */
    const char *timer = profile->machine == SBX_MACHINE_Q35 ? " no_timer_check" : "";

    /*
     * console=ttyS0: the serial port is the only console (-nodefaults). quiet: printing to an
     * emulated UART costs boot time. panic=-1: a panicking guest resets at once, and with
     * -no-reboot QEMU then exits instead of hanging. tsc_early_khz: see tsc.h.
     */
    return g_strdup_printf("console=ttyS0 quiet panic=-1 tsc_early_khz=%u%s%s%s%s", tsc_khz, timer,
                           native, *profile->cmdline_extra ? " " : "", profile->cmdline_extra);
}

char *sbx_qemu_escape_opt(const char *s)
{
    GString *out = g_string_sized_new(strlen(s) + 8);

    for (; *s; s++) {
        g_string_append_c(out, *s);
        if (*s == ',')
            g_string_append_c(out, ',');
    }
    return g_string_free(out, FALSE);
}

static void add(GPtrArray *argv, const char *a, const char *b)
{
    g_ptr_array_add(argv, g_strdup(a));
    if (b)
        g_ptr_array_add(argv, g_strdup(b));
}

static void addf(GPtrArray *argv, const char *opt, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void addf(GPtrArray *argv, const char *opt, const char *fmt, ...)
{
    va_list ap;

    g_ptr_array_add(argv, g_strdup(opt));
    va_start(ap, fmt);
    g_ptr_array_add(argv, g_strdup_vprintf(fmt, ap));
    va_end(ap);
}

/* The bridge's snapshot layout: vsock is hot-plugged after a restore. The other channels are
 * in the snapshot and need nothing beyond their devices. */
static gboolean hotplug_layout(const SbxProfile *p, const SbxQemuRuntime *rt)
{
    return rt->snapshot_layout && p->channel == SBX_CHANNEL_VSOCK_BRIDGE;
}

/*
 * Built-in devices of each machine that no profile needs, switched off: less device code a
 * hostile guest can reach, less to emulate and to save in a snapshot. What is left, and why
 * each piece is needed: tests/vm/devices.txt (test-devices fails on anything else).
 *   vmport, i8042: the VMware backdoor port and vmmouse; the PS/2 controller (keyboard, mouse,
 *     and port92 with it). No input devices.
 *   smbus, sata: ICH9's SMBus with 8 EEPROMs, its AHCI controller. The disk is virtio-blk.
 *   pit (with the PC speaker), hpet: the guest keeps time with the TSC (tsc_early_khz) and
 *     the local APIC timer, calibrated against the TSC; on q35 no_timer_check (see
 *     sbx_qemu_kernel_cmdline_full).
 *   pic: the two i8259s. Interrupts go through the IO-APIC and MSI-X.
 * Kept although unused: the RTC, because without it the guest kernel polls a CMOS that is not
 * there for ~2 s under TCG (microvm could drop it); q35's two i8257 DMA controllers, which
 * QEMU 7.2 always creates.
 */
#define Q35_DEVICES_OFF "vmport=off,smbus=off,sata=off,pit=off,hpet=off,i8042=off,pic=off"
#define MICROVM_DEVICES_OFF "pit=off,pic=off"

/* Machine, accelerator, CPUs and RAM. */
static void add_machine(GPtrArray *argv, const SbxProfile *p, const SbxQemuRuntime *rt)
{
    /*
     * Guest RAM must be shareable (memfd, share=on): the bridge maps it to reach the virtqueues
     * (vhost-user). The id must be pc.ram, the name QEMU gives the RAM block of a machine
     * without a backend, or a saved state does not load into this VM ("Unknown ramblock").
     */
    if (rt->ram_path) {
        /* A memfd we made (our fd 5): a template's RAM, saved apart from the device state, or
         * a restore's. share=off maps it MAP_PRIVATE: clones read the snapshot's pages from
         * one sealed memfd (shared by all of them) and copy only the pages they write. */
        g_autofree char *ram = sbx_qemu_escape_opt(rt->ram_path);
        addf(argv, "-object", "memory-backend-file,id=pc.ram,size=%uM,mem-path=%s,share=%s",
             p->memory_mib, ram, rt->ram_private ? "off" : "on");
    } else {
        addf(argv, "-object", "memory-backend-memfd,id=pc.ram,size=%uM,share=on", p->memory_mib);
    }
    /* microvm has PCIe only on request; the bridge's snapshot layout needs it for hot-plug. */
    addf(argv, "-machine", "%s%s,memory-backend=pc.ram", sbx_machine_name(p->machine),
         hotplug_layout(p, rt) && p->machine == SBX_MACHINE_MICROVM ? ",pcie=on" : "");
    /* QEMU merges a second -machine into the first: the built-in devices we switch off. */
    add(argv, "-machine",
        p->machine == SBX_MACHINE_MICROVM ? MICROVM_DEVICES_OFF : Q35_DEVICES_OFF);
    /* kvmvapic: patches a 32-bit Windows guest's TPR accesses; Linux never needs it. */
    add(argv, "-global", "apic-common.vapic=off");
    addf(argv, "-m", "%uM", p->memory_mib); /* QEMU refuses a backend of another size */
    add(argv, "-accel", rt->accel == SBX_ACCEL_KVM ? "kvm" : "tcg");
    if (p->cpu)
        add(argv, "-cpu", p->cpu);
    addf(argv, "-smp", "%u", p->cpus);
}

static void add_vsock_bridge(GPtrArray *argv, const SbxProfile *p, const SbxQemuRuntime *rt);

/* Kernel, initramfs, command line and the read-only root disk. */
static void add_boot(GPtrArray *argv, const SbxProfile *p, const SbxImage *img,
                     const SbxQemuRuntime *rt)
{
    g_autofree char *rootfs = sbx_qemu_escape_opt(img->rootfs);

    add(argv, "-kernel", img->kernel);
    add(argv, "-initrd", img->initramfs);
    g_ptr_array_add(argv, g_strdup("-append"));
    g_ptr_array_add(argv, sbx_qemu_kernel_cmdline_full(p, rt->tsc_khz, rt->snapshot_layout));
    addf(argv, "-drive", "file=%s,if=none,id=root,format=raw,readonly=on", rootfs);
    /* On microvm, virtio-mmio-bus.0 never gets an interrupt (its pin is redirected): use 1+. */
    if (p->machine == SBX_MACHINE_MICROVM)
        add(argv, "-device", "virtio-blk-device,drive=root,bus=virtio-mmio-bus.1");
    else
        add(argv, "-device", "virtio-blk-pci,drive=root");
}

/*
 * virtio-serial: one port on a socket QEMU listens on (in the VM's private runtime dir). The
 * host connects after the guest opened the port (QMP VSERPORT_CHANGE) or after a restore; the
 * guest sees the connection come and go (VIRTIO_CONSOLE_PORT_OPEN). wait=off: QEMU starts
 * without a client. In a snapshot as it is: the device state is migratable.
 */
static void add_serial(GPtrArray *argv, const SbxProfile *p, const SbxQemuRuntime *rt)
{
    g_autofree char *path = sbx_qemu_escape_opt(rt->serial_path);

    addf(argv, "-chardev", "socket,id=agent,path=%s,server=on,wait=off", path);
    if (p->machine == SBX_MACHINE_MICROVM)
        add(argv, "-device", "virtio-serial-device,id=vser,bus=virtio-mmio-bus.2");
    else
        add(argv, "-device", "virtio-serial-pci,id=vser");
    add(argv, "-device",
        "virtserialport,bus=vser.0,chardev=agent,name=" SBX_SERIAL_PORT_NAME
        ",id=" SBX_QEMU_SERIAL_PORT_ID);
}

/*
 * The kernel's vhost-vsock (needs /dev/vhost-vsock). Its state migrates, its worker reaches
 * guest RAM through QEMU's own mapping (copy-on-write RAM is fine), and after a restore QEMU
 * sends the guest a transport reset so that it reads its (new) CID again.
 */
static void add_vsock_kernel(GPtrArray *argv, const SbxProfile *p, const SbxQemuRuntime *rt)
{
    if (p->machine == SBX_MACHINE_MICROVM)
        addf(argv, "-device", "vhost-vsock-device,guest-cid=%u,bus=virtio-mmio-bus.2",
             rt->guest_cid);
    else
        addf(argv, "-device", "vhost-vsock-pci,guest-cid=%u", rt->guest_cid);
}

/* QMP, the serial console, and the channel to the agent. */
static void add_channels(GPtrArray *argv, const SbxProfile *p, const SbxQemuRuntime *rt)
{
    /* Both are already-connected sockets we hold the other end of: no path, no race. */
    addf(argv, "-chardev", "socket,id=qmp,fd=%d,server=off", rt->qmp_fd);
    add(argv, "-mon", "chardev=qmp,mode=control");
    addf(argv, "-chardev", "socket,id=con,fd=%d,server=off", rt->console_fd);
    add(argv, "-serial", "chardev:con");
    if (p->channel == SBX_CHANNEL_VIRTIO_SERIAL) {
        add_serial(argv, p, rt);
        return;
    }
    if (p->channel == SBX_CHANNEL_VSOCK_KERNEL) {
        add_vsock_kernel(argv, p, rt);
        return;
    }
    add_vsock_bridge(argv, p, rt);
}

/* vsock through the bridge (vhost-user). */
static void add_vsock_bridge(GPtrArray *argv, const SbxProfile *p, const SbxQemuRuntime *rt)
{
    g_autofree char *vhost = sbx_qemu_escape_opt(rt->vhost_user_path);

    if (rt->snapshot_layout) {
        /* A free root port: the only place a q35 (or microvm,pcie=on) guest sees a device
         * plugged after a restore. Chassis and slot only have to be unique. */
        add(argv, "-device", "pcie-root-port,id=" SBX_QEMU_VSOCK_PORT ",bus=pcie.0,chassis=1");
    }
    if (rt->no_vsock)
        return;
    /* The bridge is listening before QEMU starts: a silent vhost-user peer freezes QEMU. */
    addf(argv, "-chardev", "socket,id=vsock,path=%s", vhost);
    if (rt->snapshot_layout)
        addf(argv, "-device", "%s,chardev=vsock,id=" SBX_QEMU_VSOCK_ID, sbx_qemu_vsock_driver());
    else if (p->machine == SBX_MACHINE_MICROVM)
        add(argv, "-device", "vhost-user-vsock-device,chardev=vsock,bus=virtio-mmio-bus.2");
    else
        add(argv, "-device", "vhost-user-vsock-pci,chardev=vsock");
}

const char *sbx_qemu_vsock_driver(void)
{
    return "vhost-user-vsock-pci,bus=" SBX_QEMU_VSOCK_PORT;
}

char **sbx_qemu_argv(const SbxProfile *profile, const SbxImage *image, const SbxQemuRuntime *rt)
{
    GPtrArray *argv = g_ptr_array_new();

    g_ptr_array_add(argv, g_strdup(rt->qemu));
    /* Nothing we did not ask for: no default devices, no config files, no window, no reboot. */
    add(argv, "-nodefaults", NULL);
    add(argv, "-no-user-config", NULL);
    add(argv, "-display", "none");
    add(argv, "-no-reboot", NULL);
    /*
     * QEMU's own seccomp filter, part of the jail (jail.h): no obsolete syscalls, no set*uid,
     * no fork/exec (a restore loads its state from an fd, not through exec:), no scheduler or
     * affinity changes. Not in a snapshot's recipe: it changes no device state.
     */
    if (rt->sandbox)
        add(argv, "-sandbox",
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
    add_machine(argv, profile, rt);
    add_boot(argv, profile, image, rt);
    add_channels(argv, profile, rt);
    if (rt->incoming)
        add(argv, "-incoming", "defer");
    g_ptr_array_add(argv, NULL);
    return (char **)g_ptr_array_free(argv, FALSE);
}
