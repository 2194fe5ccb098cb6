/*
 * Boots every profile in qemu-profiles/ for real (TCG), with the real bridge and guest image:
 * waits for the guest agent's channel, says hello, pings, checks the pong, frees the VM and
 * checks that no process, socket or directory is left. Prints boot-to-channel times.
 * Exit 77 (skipped) when the guest image or the bridge is not built yet.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"
#include "jail-check.h"
#include "protocol/frame.h"
#include "protocol/message.h"
#include "vm.h"

/* A cold TCG boot takes ~2 s; on a host busy with other boots, much more. */
#define BOOT_TIMEOUT_MS 60000

/* One answer from the agent (hello_ok, pong). */
#define REPLY_TIMEOUT_MS 10000

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return FALSE;                                                                          \
        }                                                                                          \
    } while (0)

typedef struct {
    gboolean done;
    gboolean ok;
    GError *error;
} Start;

static void on_started(GObject *src, GAsyncResult *res, gpointer data)
{
    Start *s = data;

    (void)src;
    s->ok = sbx_vm_start_finish(NULL, res, &s->error);
    s->done = TRUE;
}

static gboolean send_msg(int fd, const SbxMsg *msg)
{
    uint8_t *frame = NULL;
    size_t len = 0;
    gboolean ok;

    if (sbx_msg_encode(msg, &frame, &len) < 0)
        return FALSE;
    ok = write(fd, frame, len) == (ssize_t)len;
    free(frame);
    return ok;
}

/* Read one frame (bounded wait) and decode it into @out. */
static gboolean recv_msg(int fd, SbxMsg *out)
{
    SbxFrameReader r;
    char *payload = NULL, *why = NULL;
    size_t plen = 0;
    int rc;

    sbx_frame_reader_init(&r, 0);
    while (!payload) {
        struct pollfd p = {fd, POLLIN, 0};
        uint8_t byte;
        if (poll(&p, 1, REPLY_TIMEOUT_MS) <= 0 || read(fd, &byte, 1) != 1)
            break;
        /* One byte at a time: simple, and never reads past the frame. */
        if (sbx_frame_reader_feed(&r, &byte, 1, &payload, &plen) < 0)
            break;
    }
    sbx_frame_reader_clear(&r);
    if (!payload)
        return FALSE;
    rc = sbx_msg_decode(payload, plen, out, &why);
    if (rc < 0)
        fprintf(stderr, "bad frame from the agent: %s\n", why ? why : "?");
    free(why);
    free(payload);
    return rc == 0;
}

/* hello -> hello_ok, ping -> pong on the agent channel. */
static gboolean talk(int fd)
{
    uint8_t entropy[SBX_ENTROPY_MIN];
    SbxMsg hello = {.type = SBX_MSG_HELLO}, ping = {.type = SBX_MSG_PING}, reply = {0};
    gboolean ok;

    for (size_t i = 0; i < sizeof entropy; i++)
        entropy[i] = (uint8_t)g_random_int();
    hello.hello = (SbxHello){.version = SBX_PROTOCOL_VERSION,
                             .token = "boot-test",
                             .entropy = entropy,
                             .entropy_len = sizeof entropy,
                             .time_us = g_get_real_time()};
    CHECK(send_msg(fd, &hello), "sending hello");
    CHECK(recv_msg(fd, &reply), "no hello_ok from the agent");
    ok = reply.type == SBX_MSG_HELLO_OK && g_strcmp0(reply.hello_ok.token, "boot-test") == 0;
    sbx_msg_clear(&reply);
    CHECK(ok, "expected hello_ok with our token");
    ping.ping.seq = 4242;
    CHECK(send_msg(fd, &ping), "sending ping");
    CHECK(recv_msg(fd, &reply), "no pong from the agent");
    ok = reply.type == SBX_MSG_PONG && reply.ping.seq == 4242;
    sbx_msg_clear(&reply);
    CHECK(ok, "expected pong 4242");
    return TRUE;
}

static gboolean pid_gone(GPid pid)
{
    g_autofree char *path = g_strdup_printf("/proc/%d", (int)pid);

    return !g_file_test(path, G_FILE_TEST_EXISTS);
}

/* QEMU and the bridge (when the profile has one) run in the VM's jail, each with its seccomp. */
static gboolean check_jail(const char *name, GPid qemu, GPid bridge, const SbxImage *image,
                           const char *rundir)
{
    g_autoptr(GString) why = g_string_new(NULL);
    SbxJailExpect e = {.seccomp = TRUE,
                       .image_dir = image->dir,
                       .runtime_dir = rundir,
                       .cgroup = sbx_test_cgroups_writable()};

    if (g_strcmp0(g_getenv("SANDBOX_JAIL"), "off") == 0)
        return TRUE;
    sbx_test_jailed(qemu, &e, why);
    if (bridge)
        sbx_test_jailed(bridge, &e, why);
    CHECK(why->len == 0, "%s: not jailed:\n%s", name, why->str);
    printf("%s: QEMU%s jailed (uid, caps, NoNewPrivs, seccomp, namespaces, root, env, fds%s)\n",
           name, bridge ? " and the bridge" : "", e.cgroup ? ", cgroup" : "");
    return TRUE;
}

static gboolean boot_one(const char *name, const SbxImage *image, double *ret_boot_s)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) profile = sbx_profile_load_named(NULL, name, &error);
    g_autoptr(SbxVm) vm = NULL;
    SbxVmOptions opts = {.boot_timeout_ms = BOOT_TIMEOUT_MS};
    g_autofree char *rundir = NULL;
    Start s = {0};
    GPid qemu, bridge;
    gint64 t0;
    int fd;

    CHECK(profile, "%s: %s", name, error->message);
    vm = sbx_vm_new(profile, image, &opts);
    t0 = g_get_monotonic_time();
    sbx_vm_start_async(vm, NULL, on_started, &s);
    while (!s.done)
        g_main_context_iteration(NULL, TRUE);
    CHECK(s.ok, "%s: start failed: %s", name, s.error->message);
    qemu = sbx_vm_qemu_pid(vm);
    bridge = sbx_vm_bridge_pid(vm);
    rundir = g_strdup(sbx_vm_runtime_dir(vm));
    if (!check_jail(name, qemu, bridge, image, rundir))
        return FALSE;
    fd = sbx_vm_take_channel(vm);
    CHECK(fd >= 0, "%s: no channel", name);
    *ret_boot_s = (double)sbx_vm_boot_us(vm) / 1e6;
    printf("%s: accel %s, QEMU start to agent channel %.2f s (start call to channel %.2f s)\n",
           name, sbx_accel_name(sbx_vm_accel(vm)), *ret_boot_s,
           (double)(g_get_monotonic_time() - t0) / 1e6);
    if (!talk(fd)) {
        fprintf(stderr, "%s: console:\n%s\n", name, sbx_vm_console_tail(vm));
        close(fd);
        return FALSE;
    }
    printf("%s: hello_ok and pong received\n", name);
    close(fd);
    g_clear_pointer(&vm, sbx_vm_free);
    CHECK(pid_gone(qemu) && pid_gone(bridge), "%s: a child survived sbx_vm_free", name);
    CHECK(!g_file_test(rundir, G_FILE_TEST_EXISTS), "%s: %s not removed", name, rundir);
    g_autoptr(GString) left = g_string_new(NULL);
    CHECK(sbx_test_no_vm_cgroups(left), "%s: %s", name, left->str);
    return TRUE;
}

/* A profile this host cannot run: the kernel's vhost-vsock without /dev/vhost-vsock. */
static gboolean skip_profile(const char *name)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load_named(NULL, name, &error);

    if (p && sbx_profile_channel(p) == SBX_CHANNEL_VSOCK_KERNEL &&
        access("/dev/vhost-vsock", R_OK | W_OK) < 0) {
        printf("%s: skipped: channel vsock-kernel needs /dev/vhost-vsock, which this host lacks\n",
               name);
        return TRUE;
    }
    return FALSE;
}

int main(void)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) image = sbx_image_open(NULL, &error);
    g_autofree char *bridge = sbx_paths_bridge();
    g_auto(GStrv) names = NULL;
    gboolean all_ok = TRUE;

    if (!image) {
        printf("SKIP: %s\n", error->message);
        return 77;
    }
    if (!g_file_test(bridge, G_FILE_TEST_IS_EXECUTABLE)) {
        printf("SKIP: the vsock bridge is not built: %s (ninja -C build)\n", bridge);
        return 77;
    }
    if (!g_getenv("SANDBOX_ACCEL"))
        g_setenv("SANDBOX_ACCEL", "tcg", TRUE); /* TCG is the tested default */
    names = sbx_profile_list(NULL, &error);
    if (!names || !names[0]) {
        fprintf(stderr, "FAIL: no profiles: %s\n", error ? error->message : "empty directory");
        return 1;
    }
    for (char **n = names; *n; n++) {
        double boot_s = 0;
        if (skip_profile(*n))
            continue;
        if (!boot_one(*n, image, &boot_s))
            all_ok = FALSE;
    }
    return all_ok ? 0 : 1;
}
