/*
 * Fuzz target: machine profiles (the JSON files in qemu-profiles/) from hostile bytes, through
 * sbx_profile_parse(), the parser and validator sbx_profile_load() applies to a file. Operators
 * write profiles today; a multi-tenant service may accept them from tenants.
 *
 * The whole input is the profile text. Parsing must give exactly one of a profile and an error
 * (SBX_VM_ERROR_PROFILE, a UTF-8 message). A profile must hold only values in the documented
 * ranges, parse again under its own name and fail under another; and every QEMU command line
 * built from it (each combination of the runtime's options) must be well formed: printable
 * ASCII arguments, no ',' smuggled into a QEMU option value, a kernel command line that fits
 * x86 Linux's 2048 bytes. Nothing may crash or leak.
 */
#include <string.h>

#include "fuzz.h"
#include "profile-private.h"
#include "qemu.h"

/* x86 Linux's COMMAND_LINE_SIZE: profile.c promises its extras always fit in it. */
#define KERNEL_CMDLINE_MAX 2048

/* A name no profile that parsed under its own name can also parse under (see check_names). */
#define OTHER_NAME "fuzz-other-name"

static SbxImage image = {
    .dir = "/img",
    .kernel = "/img/vmlinux",
    .initramfs = "/img/initramfs.cpio",
    .rootfs = "/img,x/rootfs.erofs", /* a comma: QEMU option escaping */
    .hash = "h",
};

static gboolean printable_ascii(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return FALSE;
    return TRUE;
}

/* Every field within the ranges profile.c and qemu-profiles/README.md promise. */
static void check_fields(const SbxProfile *p)
{
    FUZZ_CHECK(p->name && *p->name && strlen(p->name) <= 64 && printable_ascii(p->name));
    FUZZ_CHECK(!strchr(p->name, '/') && !strchr(p->name, ','));
    FUZZ_CHECK(p->path == NULL && sbx_profile_path(p) == NULL);
    FUZZ_CHECK(!p->description ||
               (strlen(p->description) <= 1024 && g_utf8_validate(p->description, -1, NULL)));
    FUZZ_CHECK(p->machine == SBX_MACHINE_Q35 || p->machine == SBX_MACHINE_MICROVM);
    FUZZ_CHECK(p->accel == SBX_ACCEL_AUTO || p->accel == SBX_ACCEL_TCG ||
               p->accel == SBX_ACCEL_KVM);
    FUZZ_CHECK(p->channel == SBX_CHANNEL_VSOCK_BRIDGE || p->channel == SBX_CHANNEL_VIRTIO_SERIAL ||
               p->channel == SBX_CHANNEL_VSOCK_KERNEL);
    FUZZ_CHECK(!p->cpu || (*p->cpu && strlen(p->cpu) <= 64 && printable_ascii(p->cpu) &&
                           !strchr(p->cpu, ',')));
    FUZZ_CHECK(p->cpus >= 1 && p->cpus <= 64);
    FUZZ_CHECK(p->memory_mib >= 64 && p->memory_mib <= 16384);
    FUZZ_CHECK(p->cmdline_extra && strlen(p->cmdline_extra) <= 1024 &&
               printable_ascii(p->cmdline_extra));
}

/* The same text under the profile's own name gives the same profile; under another, none. */
static void check_names(const SbxProfile *p, const uint8_t *data, size_t size)
{
    g_autoptr(SbxProfile) again = NULL;
    g_autoptr(GError) error = NULL;

    again = sbx_profile_parse(p->name, (const char *)data, size, &error);
    FUZZ_CHECK(again && !error);
    FUZZ_CHECK(g_str_equal(again->name, p->name) && again->machine == p->machine &&
               again->memory_mib == p->memory_mib && again->cpus == p->cpus &&
               g_str_equal(again->cmdline_extra, p->cmdline_extra));
    if (g_str_equal(p->name, OTHER_NAME))
        return;
    g_clear_pointer(&again, sbx_profile_free);
    again = sbx_profile_parse(OTHER_NAME, (const char *)data, size, &error);
    FUZZ_CHECK(!again && g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE));
    FUZZ_CHECK(g_str_has_prefix(error->message, OTHER_NAME ".json: name: "));
}

/* The value following option @opt in @argv, or NULL. */
static const char *option(char **argv, const char *opt)
{
    for (char **a = argv; *a; a++)
        if (g_str_equal(*a, opt) && a[1])
            return a[1];
    return NULL;
}

static void check_argv(const SbxProfile *p, const SbxQemuRuntime *rt)
{
    g_auto(GStrv) argv = sbx_qemu_argv(p, &image, rt);
    g_autofree char *cmdline = sbx_qemu_kernel_cmdline_full(p, rt->tsc_khz, rt->snapshot_layout);
    const char *append = option(argv, "-append"), *cpu = option(argv, "-cpu");
    guint n = g_strv_length(argv);

    FUZZ_CHECK(n > 10 && n < 100 && g_str_equal(argv[0], rt->qemu));
    for (guint i = 0; i < n; i++)
        FUZZ_CHECK(printable_ascii(argv[i]));
    FUZZ_CHECK(append && g_str_equal(append, cmdline) && strlen(append) < KERNEL_CMDLINE_MAX);
    FUZZ_CHECK(g_str_has_suffix(append, p->cmdline_extra));
    FUZZ_CHECK(p->cpu ? cpu && g_str_equal(cpu, p->cpu) : !cpu);
    FUZZ_CHECK(g_str_has_prefix(option(argv, "-machine"), sbx_machine_name(p->machine)));
}

/* The command line under every combination of the runtime's switches. */
static void check_command_lines(const SbxProfile *p)
{
    for (guint bits = 0; bits < 32; bits++) {
        SbxQemuRuntime rt = {
            .qemu = "qemu-system-x86_64",
            .accel = (bits & 1) ? SBX_ACCEL_KVM : SBX_ACCEL_TCG,
            .tsc_khz = (bits & 1) ? G_MAXUINT : 2599998, /* the longest tsc_early_khz= */
            .qmp_fd = 3,
            .console_fd = 4,
            .vhost_user_path = "/run/x,y/vhost-user.sock",
            .serial_path = "/run/x,y/agent.sock",
            .guest_cid = G_MAXUINT32,
            .ram_path = (bits & 2) ? "/proc/self/fd/5" : NULL,
            .ram_private = (bits & 4) != 0,
            .snapshot_layout = (bits & 8) != 0,
            .no_vsock = (bits & 16) != 0,
            .incoming = (bits & 16) != 0,
        };
        check_argv(p, &rt);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_parse(NULL, (const char *)data, size, &error);

    if (!p) {
        FUZZ_CHECK(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_PROFILE));
        FUZZ_CHECK(g_str_has_prefix(error->message, "profile: "));
        FUZZ_CHECK(g_utf8_validate(error->message, -1, NULL));
        return 0;
    }
    FUZZ_CHECK(!error);
    check_fields(p);
    check_names(p, data, size);
    check_command_lines(p);
    return 0;
}
