/*
 * Making, caching and opening snapshots (snapshot.h, docs/snapshot.md).
 *
 * Making one: boot the template (snapshot layout: RAM in a nameless /dev/shm file, vsock on a
 * hot-pluggable root port), say hello and run one JavaScript and one Python execution (the
 * runtimes' files land in the guest page cache, which is saved), close the channel, unplug
 * vsock (QEMU 7.2 refuses to migrate vhost-user-vsock), stop, save the device state with
 * x-ignore-shared, copy the RAM file sparsely, record the inputs. Built in a temporary
 * directory and renamed into place, under a lock, so a reader never sees half a snapshot.
 *
 * Locks: <cache>/.lock, exclusive while making (and collecting), shared while opening; each
 * open snapshot holds a shared flock on its inputs.json until freed, so that the collection
 * after a make removes only snapshots nobody uses (a `sandbox serve` started before a rebuild
 * keeps restoring from its own).
 */
#include "snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/paths.h"
#include "channel.h"
#include "profile-private.h"
#include "protocol/frame.h"
#include "protocol/limits.h"
#include "protocol/message.h"
#include "qemu.h"
#include "ramfile.h"
#include "snapshot-pin.h"
#include "snapshot-private.h"
#include "snapshot-verify.h"
#include "tsc.h"
#include "vm-private.h"

/* inputs.json is a few hundred bytes; anything bigger is not ours. */
#define INPUTS_MAX (16 * 1024)

/* A template boot (~2 s) and its warm-up (node and its runner warm in a few seconds under TCG,
 * its TypeScript stripper included) on a loaded host: generous, once per image. */
#define TEMPLATE_BOOT_MS 120000
#define WARMUP_MS 120000

/* How long the template's hello asks the agent to wait for warm runners (hello.warm_wait_ms):
 * what is left of WARMUP_MS with a margin for the reply to reach us. */
#define WARM_WAIT_MS (WARMUP_MS - 10000)

/* Unplugging vsock: ~200 ms on q35 (ACPI), ~6 s with native PCIe hot-plug (the guest waits 5 s
 * after the attention button; shared/FINDINGS.md). */
#define UNPLUG_MS 20000
#define UNPLUG_POLL_MS 20

/* Saving ~0.3 MB of device state takes ~25 ms; a loaded host, far more. */
#define SAVE_MS 60000
#define SAVE_POLL_MS 5

/* Another process making the same snapshot: wait for it (a make takes ~10-30 s). */
#define LOCK_WAIT_MS 300000
#define LOCK_POLL_MS 100

struct SbxSnapshot {
    char *dir;
    char *state;
    char *ram;
    SbxSnapshotInputs inputs;
    gboolean made;
    int use_fd;      /* inputs.json, flock LOCK_SH while open: not collected; -1 if none */
    int *shared_ram; /* the sealed memfd restores map copy-on-write (vm-start.c); -1: none yet.
                      * Behind a pointer: kept by restores of a const snapshot. */
};

/* ---- inputs -------------------------------------------------------------------------------- */

/* The inputs of @profile + @image on this host; @cache (may be NULL) keeps QEMU's version. */
static gboolean current_inputs(const SbxProfile *profile, const SbxImage *image, const char *cache,
                               SbxSnapshotInputs *out, GError **error)
{
    g_autofree char *version = NULL, *text = NULL, *recipe = NULL;
    gsize len = 0;
    SbxAccel accel;
    guint tsc = 0;

    if (!sbx_qemu_resolve_accel(profile, &accel, error) || !sbx_tsc_host_khz(&tsc, NULL, error))
        return FALSE;
    if (!(version = sbx_qemu_version(cache, error)))
        return FALSE;
    if (!g_file_get_contents(sbx_profile_path(profile), &text, &len, error))
        return FALSE;
    recipe = sbx_snapshot_recipe(profile, accel, tsc);
    sbx_snapshot_inputs_compute(out, image->hash, sbx_profile_name(profile), text, len, version,
                                recipe);
    out->image_dir = g_strdup(image->dir);
    return TRUE;
}

gboolean sbx_snapshot_current_inputs(const SbxProfile *profile, const SbxImage *image,
                                     SbxSnapshotInputs *out, GError **error)
{
    return current_inputs(profile, image, NULL, out, error);
}

/* ---- open ---------------------------------------------------------------------------------- */

static SbxSnapshot *open_checked(const char *dir, const SbxSnapshotInputs *current, GError **error)
{
    g_autoptr(SbxSnapshot) snap = g_new0(SbxSnapshot, 1);

    snap->shared_ram = g_new(int, 1);
    *snap->shared_ram = -1;
    g_autofree char *path = g_build_filename(dir, "inputs.json", NULL);
    g_autofree char *text = NULL;
    gsize len = 0;

    snap->use_fd = -1;
    snap->dir = g_strdup(dir);
    snap->state = g_build_filename(dir, "state.bin", NULL);
    snap->ram = g_build_filename(dir, "ram", NULL);
    if (!g_file_get_contents(path, &text, &len, error)) {
        g_prefix_error(error, "snapshot %s: ", dir);
        return NULL;
    }
    if (len > INPUTS_MAX) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                    "snapshot %s: inputs.json is larger than %d bytes", dir, INPUTS_MAX);
        return NULL;
    }
    if (!sbx_snapshot_inputs_from_json(text, len, &snap->inputs, error)) {
        g_prefix_error(error, "snapshot %s: ", dir);
        return NULL;
    }
    if (!sbx_snapshot_inputs_check(&snap->inputs, current, dir, error))
        return NULL;
    if (!g_file_test(snap->state, G_FILE_TEST_IS_REGULAR) ||
        !g_file_test(snap->ram, G_FILE_TEST_IS_REGULAR)) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "snapshot %s: state.bin or ram is missing", dir);
        return NULL;
    }
    if (!sbx_snapshot_digests_check(dir, error))
        return NULL;
    snap->use_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (snap->use_fd < 0 || flock(snap->use_fd, LOCK_SH) < 0) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "snapshot %s: cannot lock inputs.json: %s", dir,
                    g_strerror(errno));
        return NULL;
    }
    return g_steal_pointer(&snap);
}

SbxSnapshot *sbx_snapshot_open(const char *dir, const SbxProfile *profile, const SbxImage *image,
                               GError **error)
{
    SbxSnapshotInputs current;
    SbxSnapshot *snap;

    /* @dir may be anywhere: QEMU's version is not kept next to it. */
    if (!current_inputs(profile, image, NULL, &current, error))
        return NULL;
    snap = open_checked(dir, &current, error);
    sbx_snapshot_inputs_clear(&current);
    return snap;
}

/* ---- the template VM, driven synchronously ------------------------------------------------- */

typedef struct {
    gboolean done;
    gboolean ok;
    char *ret;
    GError *error;
} Wait;

static void wait_for(Wait *w)
{
    while (!w->done)
        g_main_context_iteration(NULL, TRUE);
}

static void on_started(GObject *src, GAsyncResult *res, gpointer data)
{
    Wait *w = data;

    (void)src;
    w->ok = sbx_vm_start_finish(NULL, res, &w->error);
    w->done = TRUE;
}

static void on_qmp(GObject *src, GAsyncResult *res, gpointer data)
{
    Wait *w = data;

    (void)src;
    w->ret = sbx_vm_qmp_execute_finish(NULL, res, &w->error);
    w->ok = w->ret != NULL;
    w->done = TRUE;
}

/* One QMP command, waited for (its own timeout bounds the wait). The answer, or NULL. */
static char *qmp(SbxVm *vm, const char *cmd, const char *args, GError **error)
{
    Wait w = {0};

    sbx_vm_qmp_execute_async(vm, cmd, args, 0, NULL, on_qmp, &w);
    wait_for(&w);
    if (!w.ok) {
        g_propagate_prefixed_error(error, w.error, "%s: ", cmd);
        return NULL;
    }
    return w.ret;
}

static void on_qmp_fd(GObject *src, GAsyncResult *res, gpointer data)
{
    Wait *w = data;

    (void)src;
    w->ret = sbx_qmp_execute_finish(NULL, res, &w->error);
    w->ok = w->ret != NULL;
    w->done = TRUE;
}

/* qmp() passing a copy of @fd with the command (getfd). */
static char *qmp_fd(SbxVm *vm, const char *cmd, const char *args, int fd, GError **error)
{
    Wait w = {0};

    if (!vm->qmp) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_CLOSED, "%s: the VM is not running", cmd);
        return NULL;
    }
    sbx_qmp_execute_with_fd_async(vm->qmp, cmd, args, fd, 0, NULL, on_qmp_fd, &w);
    wait_for(&w);
    if (!w.ok) {
        g_propagate_prefixed_error(error, w.error, "%s: ", cmd);
        return NULL;
    }
    return w.ret;
}

/* Sleep @ms while the main loop runs (the VM's watchers keep working). */
static void loop_sleep(guint ms)
{
    gint64 until = g_get_monotonic_time() + (gint64)ms * 1000;

    while (g_get_monotonic_time() < until) {
        if (!g_main_context_iteration(NULL, FALSE))
            g_usleep(1000);
    }
}

/* ---- warm-up over the channel (blocking I/O with deadlines) --------------------------------- */

/* Wait until @fd is readable or @deadline (monotonic µs) passes, running the main loop. */
static gboolean wait_readable(int fd, gint64 deadline)
{
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10) > 0)
            return TRUE;
        g_main_context_iteration(NULL, FALSE);
        if (g_get_monotonic_time() > deadline)
            return FALSE;
    }
}

static gboolean send_msg(int fd, const SbxMsg *msg, GError **error)
{
    g_autofree uint8_t *frame = NULL;
    size_t len = 0, off = 0;

    if (sbx_msg_encode(msg, &frame, &len) < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "warm-up: cannot encode a %s",
                           sbx_msg_type_name(msg->type));
    while (off < len) {
        ssize_t n = write(fd, frame + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "warm-up: writing to the agent: %s",
                               g_strerror(errno));
        off += (size_t)n;
    }
    return TRUE;
}

/* One message from the agent within @deadline. */
static gboolean recv_msg(int fd, SbxFrameReader *r, gint64 deadline, SbxMsg *out, GError **error)
{
    char *payload = NULL;
    size_t plen = 0;

    while (!payload) {
        uint8_t byte;
        if (!wait_readable(fd, deadline))
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                               "warm-up: the agent did not answer in time");
        if (read(fd, &byte, 1) != 1)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                               "warm-up: the agent closed the connection");
        /* One byte at a time: a few hundred bytes in all; simple and never past a frame. */
        if (sbx_frame_reader_feed(r, &byte, 1, &payload, &plen) < 0)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "warm-up: bad frame from the agent");
    }
    g_autofree char *why = NULL;
    int rc = sbx_msg_decode(payload, plen, out, &why);
    free(payload);
    if (rc < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "warm-up: bad message from the agent: %s",
                           why ? why : "no memory");
    return TRUE;
}

static gboolean hello(int fd, SbxFrameReader *r, GError **error)
{
    guint8 entropy[SBX_ENTROPY_MIN];
    SbxMsg msg = {.type = SBX_MSG_HELLO};
    SbxMsg reply = {0};
    gboolean ok;

    for (gsize i = 0; i < sizeof entropy; i++)
        entropy[i] = (guint8)g_random_int();
    msg.hello = (SbxHello){.version = SBX_PROTOCOL_VERSION,
                           .token = "snapshot-warmup",
                           .entropy = entropy,
                           .entropy_len = sizeof entropy,
                           .time_us = g_get_real_time(),
                           .warm_wait_ms = WARM_WAIT_MS};
    if (!send_msg(fd, &msg, error) ||
        !recv_msg(fd, r, g_get_monotonic_time() + WARMUP_MS * 1000, &reply, error))
        return FALSE;
    ok = reply.type == SBX_MSG_HELLO_OK;
    sbx_msg_clear(&reply);
    return ok ? TRUE
              : sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                            "warm-up: the agent did not answer hello with hello_ok");
}

static gboolean warm_up(int fd, GError **error)
{
    SbxFrameReader r;
    gboolean ok;

    sbx_frame_reader_init(&r, 0);
    /* The agent started one runner per language at boot, and they warmed themselves up
     * (loaded the runtime, the runner's modules, ran a warm-up cell); hello_ok comes once they
     * are warm: the hello asks the agent to wait for them up to WARM_WAIT_MS (a session's hello
     * waits at most 7 s, PRESTART_HELLO_WAIT_MS in guest-image/agent/agent.h; on a busy host
     * node and its TypeScript stripper take longer than that, and a snapshot of runners still
     * warming up would make every clone finish their warm-up in its first execution).
     * No execution here: it would use up a pre-started runner, and the runners must draw no
     * random numbers after hello has set the clock (docs/snapshot.md, "Pre-started runners"). */
    ok = hello(fd, &r, error);
    sbx_frame_reader_clear(&r);
    return ok;
}

/* ---- save ---------------------------------------------------------------------------------- */

/* device_del, then chardev-remove until the device is gone (it fails while the device lives). */
static gboolean unplug_vsock(SbxVm *vm, GError **error)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)UNPLUG_MS * 1000;
    g_autofree char *r = NULL;

    sbx_vm_detach_bridge(vm);
    if (!(r = qmp(vm, "device_del", "{\"id\":\"" SBX_QEMU_VSOCK_ID "\"}", error)))
        return FALSE;
    for (;;) {
        g_autoptr(GError) busy = NULL;
        g_autofree char *ok = qmp(vm, "chardev-remove", "{\"id\":\"vsock\"}", &busy);
        if (ok)
            return TRUE;
        if (!g_error_matches(busy, SBX_VM_ERROR, SBX_VM_ERROR_QMP))
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "unplugging vsock: %s", busy->message);
        if (g_get_monotonic_time() > deadline)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                               "unplugging vsock: the guest did not release the device within "
                               "%d ms (%s)",
                               UNPLUG_MS, busy->message);
        loop_sleep(UNPLUG_POLL_MS);
    }
}

/*
 * virtio-serial: the host closed its connection; wait until the agent saw it and opened its
 * port again (QMP VSERPORT_CHANGE, throttled by QEMU to one a second). Then nothing of the old
 * connection is in flight (bytes sent while the VM is stopped would stay in QEMU's device
 * state and reach every clone's host), and every clone's agent waits for a new connection.
 */
#define QUIESCE_MS 10000

/*
 * The kernel's vhost-vsock: a clone's transport reset drops the template's connection anyway,
 * but an agent that still counts it as active when the clone's host connects refuses that
 * connection. Closed connections reach the agent within milliseconds (the pool waits 50 ms
 * before reconnecting for the same reason); 200 ms covers a loaded host, once per snapshot.
 */
#define VSOCK_KERNEL_SETTLE_MS 200

static gboolean quiesce_channel(SbxVm *vm, GError **error)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)QUIESCE_MS * 1000;

    if (sbx_profile_channel(vm->profile) == SBX_CHANNEL_VSOCK_KERNEL) {
        loop_sleep(VSOCK_KERNEL_SETTLE_MS);
        return TRUE;
    }
    while (!sbx_vm_channel_quiesced(vm)) {
        if (g_get_monotonic_time() > deadline)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                               "the guest agent did not reopen its channel within %d ms of the "
                               "host closing it",
                               QUIESCE_MS);
        loop_sleep(UNPLUG_POLL_MS);
    }
    return TRUE;
}

/* query-migrate until "completed" (or failed, or the deadline). */
static gboolean wait_migration(SbxVm *vm, GError **error)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)SAVE_MS * 1000;

    for (;;) {
        g_autofree char *ret = qmp(vm, "query-migrate", NULL, error);
        if (!ret)
            return FALSE;
        if (strstr(ret, "\"status\":\"completed\""))
            return TRUE;
        if (strstr(ret, "\"status\":\"failed\""))
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "saving the VM failed: %s", ret);
        if (g_get_monotonic_time() > deadline)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                               "saving the VM did not complete within %d ms", SAVE_MS);
        loop_sleep(SAVE_POLL_MS);
    }
}

static gboolean save(SbxVm *vm, const char *tmp, GError **error)
{
    g_autofree char *state = g_build_filename(tmp, "state.bin", NULL);
    g_autofree char *ram = g_build_filename(tmp, "ram", NULL);
    g_autofree char *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
    int out;

    /* The bridge's vhost-user-vsock cannot be saved: unplugged, and plugged after a restore.
     * The other channels are saved with the VM. */
    if (sbx_vm_channel_is_bridge(vm) ? !unplug_vsock(vm, error) : !quiesce_channel(vm, error))
        return FALSE;
    /* The state goes to a file we open and pass: QEMU runs with -sandbox spawn=deny (no
     * exec: migration) in a jail that cannot see the snapshot directory. */
    out = open(state, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot create %s: %s", state,
                           g_strerror(errno));
    r4 = qmp_fd(vm, "getfd", "{\"fdname\":\"state\"}", out, error);
    close(out);
    if (!r4 || !(r1 = qmp(vm, "stop", NULL, error)) ||
        !(r2 = qmp(vm, "migrate-set-capabilities",
                   "{\"capabilities\":[{\"capability\":\"x-ignore-shared\",\"state\":true}]}",
                   error)) ||
        !(r3 = qmp(vm, "migrate", "{\"uri\":\"fd:state\"}", error)) || !wait_migration(vm, error))
        return FALSE;
    return sbx_ramfile_save(sbx_vm_ram_fd(vm), ram, error);
}

/* ---- make ---------------------------------------------------------------------------------- */

static gboolean make_in(const SbxProfile *profile, const SbxImage *image,
                        const SbxSnapshotInputs *inputs, const char *tmp,
                        const SbxSnapshotOptions *opts, GError **error)
{
    SbxVmOptions vo = {.boot_timeout_ms = TEMPLATE_BOOT_MS,
                       .console_to_stderr = opts && opts->console_to_stderr};
    g_autoptr(SbxVm) vm = sbx_vm_new(profile, image, &vo);
    g_autofree char *json = sbx_snapshot_inputs_to_json(inputs);
    g_autofree char *inputs_path = g_build_filename(tmp, "inputs.json", NULL);
    Wait w = {0};
    int fd;
    gboolean ok;

    sbx_vm_set_template(vm);
    sbx_vm_start_async(vm, NULL, on_started, &w);
    wait_for(&w);
    if (!w.ok) {
        g_propagate_prefixed_error(error, w.error, "making a snapshot: ");
        return FALSE;
    }
    fd = sbx_vm_take_channel(vm);
    ok = warm_up(fd, error);
    close(fd);
    if (!ok || !save(vm, tmp, error)) {
        g_autofree char *diag = sbx_vm_diagnostics(vm);
        g_prefix_error(error, "making a snapshot: ");
        if (*diag && error && *error) {
            GError *e = *error;
            *error = g_error_new(e->domain, e->code, "%s%s", e->message, diag);
            g_error_free(e);
        }
        return FALSE;
    }
    /* inputs.json last: it marks the snapshot complete, digests included. */
    return sbx_snapshot_digests_write(tmp, error) &&
           g_file_set_contents_full(inputs_path, json, -1, G_FILE_SET_CONTENTS_NONE, 0600, error);
}

void sbx_snapshot_rm_rf(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);
        unlink(path);
    }
    rmdir(dir);
}

/* Remove temporary dirs of makers that died (we hold the lock: no maker is running). */
static void remove_stale(const char *cache)
{
    g_autoptr(GDir) d = g_dir_open(cache, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        if (g_str_has_prefix(name, ".tmp-")) {
            g_autofree char *path = g_build_filename(cache, name, NULL);
            sbx_snapshot_rm_rf(path);
        }
    }
}

/*
 * The cache lock (flock @how, LOCK_EX or LOCK_SH, on <cache>/.lock), waited for at most
 * LOCK_WAIT_MS; fd or -1.
 */
int sbx_snapshot_lock_cache(const char *cache, int how, GError **error)
{
    g_autofree char *path = g_build_filename(cache, ".lock", NULL);
    gint64 deadline = g_get_monotonic_time() + (gint64)LOCK_WAIT_MS * 1000;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

    if (fd < 0) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot open %s: %s", path, g_strerror(errno));
        return -1;
    }
    while (flock(fd, how | LOCK_NB) < 0) {
        if (errno != EWOULDBLOCK || g_get_monotonic_time() > deadline) {
            sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot lock %s: %s", path,
                        errno == EWOULDBLOCK ? "another process holds it" : g_strerror(errno));
            close(fd);
            return -1;
        }
        g_usleep(LOCK_POLL_MS * 1000);
    }
    return fd;
}

static gboolean make(const SbxProfile *profile, const SbxImage *image,
                     const SbxSnapshotInputs *inputs, const char *cache, const char *dir,
                     const SbxSnapshotOptions *opts, GError **error)
{
    g_autofree char *tmp = g_build_filename(cache, ".tmp-XXXXXX", NULL);
    g_autofree char *done = g_build_filename(dir, "inputs.json", NULL);
    int lock = sbx_snapshot_lock_cache(cache, LOCK_EX, error);
    gboolean ok = TRUE;

    if (lock < 0)
        return FALSE;
    if (g_file_test(done, G_FILE_TEST_EXISTS))
        goto out; /* made by another process while we waited */
    remove_stale(cache);
    if (!g_mkdtemp_full(tmp, 0700)) {
        ok = sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot create a directory in %s: %s", cache,
                         g_strerror(errno));
        goto out;
    }
    if (opts && opts->on_make)
        opts->on_make(dir, opts->user_data);
    ok = make_in(profile, image, inputs, tmp, opts, error);
    if (ok && rename(tmp, dir) < 0)
        ok = sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot rename %s to %s: %s", tmp, dir,
                         g_strerror(errno));
    if (!ok)
        sbx_snapshot_rm_rf(tmp);
    if (ok)
        sbx_snapshot_collect(cache, inputs);
out:
    close(lock);
    return ok;
}

/* open_checked() under the shared cache lock: no collection removes it while it is opened. */
static SbxSnapshot *open_locked(const char *cache, const char *dir,
                                const SbxSnapshotInputs *current, GError **error)
{
    int lock = sbx_snapshot_lock_cache(cache, LOCK_SH, error);
    SbxSnapshot *snap;

    if (lock < 0)
        return NULL;
    snap = open_checked(dir, current, error);
    close(lock);
    return snap;
}

/*
 * Whether the snapshot in @dir was made for another QEMU or snapshot format than @current, for
 * another image from the same image directory (a rebuild superseded it; snapshots that predate
 * image_dir count as the same directory), or for a profile of the same name whose file was
 * edited since. FALSE for anything that is not a readable snapshot (it is not ours to remove),
 * for other profiles of the same image and QEMU (still current), and for images of other
 * directories (images side by side: guest-image/recipes/README.md). Two profile files with the
 * same name take turns: each make removes the other's snapshot if it is not open.
 */
static gboolean superseded(const char *dir, const SbxSnapshotInputs *current)
{
    g_autofree char *path = g_build_filename(dir, "inputs.json", NULL);
    g_autofree char *text = NULL;
    gsize len = 0;
    SbxSnapshotInputs in = {0};
    gboolean old;

    if (!g_file_get_contents(path, &text, &len, NULL) || len > INPUTS_MAX ||
        !sbx_snapshot_inputs_from_json(text, len, &in, NULL))
        return FALSE;
    old = (g_strcmp0(in.image_id, current->image_id) != 0 &&
           (in.image_dir == NULL || g_strcmp0(in.image_dir, current->image_dir) == 0)) ||
          g_strcmp0(in.qemu_version, current->qemu_version) != 0 ||
          g_strcmp0(in.format, current->format) != 0 ||
          (in.profile_name && g_strcmp0(in.profile_name, current->profile_name) == 0 &&
           g_strcmp0(in.profile_sha256, current->profile_sha256) != 0);
    sbx_snapshot_inputs_clear(&in);
    return old;
}

/*
 * Mark the superseded snapshot in @dir kept for the records that name it (snapshot-pin.h): its
 * last unpin removes it. Its RAM file is compressed at rest once nobody has it open (@fd: its
 * inputs.json); if that fails it stays as it is, which costs disk, not a replay.
 */
static void keep_for_records(const char *dir, int fd)
{
    g_autofree char *mark = g_build_filename(dir, SBX_SNAPSHOT_KEPT_MARK, NULL);
    g_autofree char *ram = g_build_filename(dir, "ram", NULL);

    if (!g_file_test(mark, G_FILE_TEST_EXISTS))
        g_file_set_contents(mark, "", 0, NULL);
    if (g_file_test(ram, G_FILE_TEST_IS_REGULAR) && flock(fd, LOCK_EX | LOCK_NB) == 0)
        sbx_snapshot_ram_compress(dir, NULL);
}

/* The RAM file of the snapshot in @dir back from ram.zst if a collection compressed it (a kept
 * snapshot a replay or a make wants again), under the cache lock. */
static gboolean ensure_ram(const char *cache, const char *dir, GError **error)
{
    g_autofree char *zst = g_build_filename(dir, SBX_SNAPSHOT_RAM_ZST, NULL);
    g_autofree char *ram = g_build_filename(dir, "ram", NULL);
    gboolean ok = TRUE;
    int lock;

    if (!g_file_test(zst, G_FILE_TEST_IS_REGULAR))
        return TRUE;
    if ((lock = sbx_snapshot_lock_cache(cache, LOCK_EX, error)) < 0)
        return FALSE;
    if (!g_file_test(ram, G_FILE_TEST_IS_REGULAR)) /* else another process did it meanwhile */
        ok = sbx_snapshot_ram_decompress(dir, error);
    close(lock);
    return ok;
}

guint sbx_snapshot_collect(const char *cache, const SbxSnapshotInputs *current)
{
    g_autoptr(GDir) d = g_dir_open(cache, 0, NULL);
    const char *name;
    guint removed = 0;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *dir = g_build_filename(cache, name, NULL);
        g_autofree char *inputs = g_build_filename(dir, "inputs.json", NULL);
        int fd;

        if (name[0] == '.' || g_str_equal(name, current->key) || !superseded(dir, current))
            continue;
        fd = open(inputs, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (sbx_snapshot_pinned(cache, name)) {
            keep_for_records(dir, fd);
        } else if (flock(fd, LOCK_EX | LOCK_NB) == 0) { /* nobody has it open */
            sbx_snapshot_rm_rf(dir);
            sbx_snapshot_pins_remove(cache, name);
            removed++;
        }
        close(fd);
    }
    return removed;
}

SbxSnapshot *sbx_snapshot_ensure(const SbxProfile *profile, const SbxImage *image,
                                 const SbxSnapshotOptions *opts, GError **error)
{
    g_autofree char *cache =
        opts && opts->cache_dir ? g_strdup(opts->cache_dir) : sbx_paths_snapshot_dir();
    g_autofree char *dir = NULL, *done = NULL;
    SbxSnapshotInputs current;
    SbxSnapshot *snap = NULL;
    gboolean made = FALSE;

    if (!current_inputs(profile, image, cache, &current, error))
        return NULL;
    dir = g_build_filename(cache, current.key, NULL);
    done = g_build_filename(dir, "inputs.json", NULL);
    if (!sbx_snapshot_cache_check(cache, error)) {
        /* nothing more: an unsafe cache is not used */
    } else if (!g_file_test(done, G_FILE_TEST_EXISTS)) {
        made = make(profile, image, &current, cache, dir, opts, error);
        if (made)
            snap = open_locked(cache, dir, &current, error);
    } else if (ensure_ram(cache, dir, error)) {
        snap = open_locked(cache, dir, &current, error);
    }
    if (snap)
        snap->made = made;
    sbx_snapshot_inputs_clear(&current);
    return snap;
}

SbxSnapshot *sbx_snapshot_find_kept(const char *cache, const char *record_id, const char *key,
                                    const SbxProfile *profile, const SbxImage *image,
                                    GError **error)
{
    g_autofree char *c = cache != NULL ? g_strdup(cache) : sbx_paths_snapshot_dir();
    g_autofree char *dir = NULL, *done = NULL;
    SbxSnapshotInputs current;
    SbxSnapshot *snap;

    if (key == NULL) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "record %s names no snapshot", record_id);
        return NULL;
    }
    /* A key is a sha256 in hex (never a path: it may come from another machine's record). */
    if (strlen(key) != 64 || strspn(key, "0123456789abcdef") != 64) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "record %s names no valid snapshot key",
                    record_id);
        return NULL;
    }
    dir = g_build_filename(c, key, NULL);
    done = g_build_filename(dir, "inputs.json", NULL);
    if (!g_file_test(done, G_FILE_TEST_IS_REGULAR)) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                    "snapshot %s of record %s is gone (collected or never made here)", key,
                    record_id);
        return NULL;
    }
    if (!ensure_ram(c, dir, error) || !current_inputs(profile, image, c, &current, error))
        return NULL;
    snap = open_locked(c, dir, &current, error);
    sbx_snapshot_inputs_clear(&current);
    if (snap == NULL)
        g_prefix_error(error, "the snapshot of record %s: ", record_id);
    return snap;
}

const char *sbx_snapshot_dir(const SbxSnapshot *snap)
{
    return snap->dir;
}

const char *sbx_snapshot_state_path(const SbxSnapshot *snap)
{
    return snap->state;
}

const char *sbx_snapshot_ram_path(const SbxSnapshot *snap)
{
    return snap->ram;
}

const SbxSnapshotInputs *sbx_snapshot_inputs(const SbxSnapshot *snap)
{
    return &snap->inputs;
}

gboolean sbx_snapshot_was_made(const SbxSnapshot *snap)
{
    return snap->made;
}

int sbx_snapshot_shared_ram(const SbxSnapshot *snap)
{
    return *snap->shared_ram >= 0 ? fcntl(*snap->shared_ram, F_DUPFD_CLOEXEC, 3) : -1;
}

void sbx_snapshot_keep_shared_ram(const SbxSnapshot *snap, int fd)
{
    if (*snap->shared_ram < 0)
        *snap->shared_ram = fcntl(fd, F_DUPFD_CLOEXEC, 3);
}

void sbx_snapshot_free(SbxSnapshot *snap)
{
    if (!snap)
        return;
    if (*snap->shared_ram >= 0)
        close(*snap->shared_ram);
    g_free(snap->shared_ram);
    if (snap->use_fd >= 0)
        close(snap->use_fd);
    g_free(snap->dir);
    g_free(snap->state);
    g_free(snap->ram);
    sbx_snapshot_inputs_clear(&snap->inputs);
    g_free(snap);
}
