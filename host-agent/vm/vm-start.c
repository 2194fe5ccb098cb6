/*
 * Starting a VM, as a chain of main-loop steps:
 *   prepare (accelerator, runtime dir) -> spawn the bridge -> wait for its "READY\n" ->
 *   spawn QEMU -> QMP handshake -> probe the guest agent (CONNECT 1024 through the bridge,
 *   every 20 ms) -> running.
 * The bridge comes first because QEMU freezes on a vhost-user peer that does not answer
 * (shared/FINDINGS.md). Any failure goes through sbx_vm_fail_start(), which tears everything
 * down before the caller hears about it.
 */
#include "vm-private.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/paths.h"
#include "channel.h"
#include "profile-private.h"
#include "protocol/limits.h"
#include "qemu.h"
#include "ramfile.h"
#include "tsc.h"

/* The bridge listens within milliseconds; 10 s covers a host loaded by parallel boots. */
#define BRIDGE_READY_MS 10000

/* QEMU start to the agent accepting: a TCG boot takes ~2 s here, far more on a loaded host. */
#define BOOT_TIMEOUT_DEFAULT_MS 60000

/* Between probes while the guest boots: ~1% of a boot, and a negligible load on the bridge. */
#define PROBE_RETRY_MS 20

/* After a restore the agent is up and only the vsock driver is binding (~70 ms): probe more
 * often, since each probe's wait is all latency there. */
#define PROBE_RETRY_RESTORE_MS 5

/* One probe's answer: the bridge answers at once, or after one round trip to the guest. */
#define PROBE_ATTEMPT_MS 2000

/*
 * The guest console kept for error reports. The guest writes it, so it must be bounded;
 * 64 KiB holds a whole (quiet) boot log or a kernel oops with its stack trace.
 */
#define CONSOLE_RING (64 * 1024)

/* --debug copies the console to stderr; a guest printing forever stops being copied here. */
#define CONSOLE_COPY_MAX (16 * 1024 * 1024)

/* QEMU's and the bridge's stderr: a few lines of errors; 16 KiB bounds a flood. */
#define STDERR_RING (16 * 1024)

/* File descriptor numbers in the children. */
#define BRIDGE_READY_FD 3
#define QEMU_QMP_FD 3
#define QEMU_CONSOLE_FD 4
#define QEMU_RAM_FD 5
#define JAIL_INFO_FD 9                  /* bubblewrap's --info-fd: the jailed program's pid */
#define QEMU_RAM_PATH "/proc/self/fd/5" /* QEMU opens its own fd 5: the nameless RAM file */

/*
 * Unix socket paths must fit sun_path (108 bytes with the NUL). The bridge also creates
 * "<uds>_<port>" sockets for connections from the guest: reserve room for "_4294967295".
 */
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1 - 11)

/*
 * The parent of the VM's runtime dir. As root, the jail's uid must reach it: an explicit
 * parent it cannot reach is an error; $XDG_RUNTIME_DIR (often /run/user/0, 0700) gives way
 * to /tmp. A path too long for the sockets in it is an error first.
 */
static char *runtime_parent(SbxVm *vm, GError **error)
{
    g_autofree char *parent =
        vm->runtime_parent ? g_strdup(vm->runtime_parent) : sbx_paths_runtime_parent();

    if (strlen(parent) + strlen("/sbx-vm-XXXXXX/vhost-user.sock") > SOCKET_PATH_MAX) {
        sbx_vm_fail(error, SBX_VM_ERROR_CONFIG,
                    "runtime directory %s: path too long for Unix sockets (max %zu bytes)", parent,
                    SOCKET_PATH_MAX - strlen("/sbx-vm-XXXXXX/vhost-user.sock"));
        return NULL;
    }
    if (sbx_jail_can_reach(vm->jail, parent))
        return g_steal_pointer(&parent);
    if (vm->runtime_parent) {
        sbx_vm_fail(error, SBX_VM_ERROR_CONFIG,
                    "runtime directory %s: the VM's jail (another uid) cannot reach it: every "
                    "directory on the way needs o+x",
                    parent);
        return NULL;
    }
    return g_strdup("/tmp");
}

/* The private runtime dir (0700, the jail's uid's; rundir.h) and the socket paths in it. */
static gboolean make_runtime_dir(SbxVm *vm, GError **error)
{
    static gboolean swept; /* once per process, in the first parent it uses */
    g_autofree char *parent = runtime_parent(vm, error);

    if (!parent)
        return FALSE;
    if (!swept) {
        swept = TRUE;
        sbx_rundir_sweep(parent); /* what agents killed before their teardown left */
    }
    vm->rundir = sbx_rundir_new(parent, error);
    if (!vm->rundir)
        return FALSE;
    vm->runtime_dir = sbx_rundir_path(vm->rundir);
    vm->vhost_user_path = g_build_filename(vm->runtime_dir, "vhost-user.sock", NULL);
    vm->uds_path = g_build_filename(vm->runtime_dir, "vsock.sock", NULL);
    return TRUE;
}

/* A pipe whose write end goes to a child (both ends close-on-exec here). */
static gboolean make_pipe(int fds[2], GError **error)
{
    if (pipe2(fds, O_CLOEXEC) == 0)
        return TRUE;
    return sbx_vm_fail(error, SBX_VM_ERROR_SPAWN, "pipe: %s", g_strerror(errno));
}

static gboolean on_ready_readable(int fd, GIOCondition cond, gpointer data);

/*
 * In the child between fork and exec (async-signal-safe; @data is the parent's VM as fork
 * copied it): into the VM's cgroup while still privileged, then the jail's last steps. A child
 * that cannot join must not run without its limits.
 */
static void child_setup(gpointer data)
{
    const SbxVm *vm = data;

    if (vm->cgroup && sbx_cgroup_join_self(vm->cgroup) < 0)
        _exit(125);
    sbx_jail_child_setup(vm->jail);
}

/* sbx_child_spawn() with its error in this layer's domain (SBX_VM_ERROR_SPAWN). */
static SbxChild *spawn_child(const char *const *argv, const SbxChildFds *fds, const char *what,
                             GError **error)
{
    g_autoptr(GError) local = NULL;
    SbxChild *child = sbx_child_spawn(argv, fds, what, &local);

    if (!child)
        sbx_vm_fail(error, SBX_VM_ERROR_SPAWN, "%s", local->message);
    return child;
}

/*
 * Start @argv in the VM's jail (jail.h): bwrap around it, the jail's environment, its uid and
 * rlimits in the child, and bwrap's report of the program's pid on one more fd. @fds gets the
 * info pipe added; @ro_paths are bound read-only besides /usr and the program.
 */
static SbxChild *spawn_jailed(SbxVm *vm, const char *const *argv, const SbxChildFds *fds,
                              const char *const *ro_paths, const char *what, GError **error)
{
    const char *devices[3] = {NULL, NULL, NULL};
    SbxJailSpec spec = {.binary = argv[0],
                        .runtime_dir = vm->runtime_dir,
                        .ro_paths = ro_paths,
                        .devices = devices,
                        .info_fd = JAIL_INFO_FD};
    int sources[8], targets[8], info[2];
    SbxChildFds all = *fds;
    guint n = 0;

    g_assert(fds->n_fds < G_N_ELEMENTS(sources));
    all.setup = child_setup;
    all.setup_data = vm;
    if (!sbx_jail_enabled(vm->jail))
        return spawn_child(argv, &all, what, error);
    /* bwrap would say "Can't find source path": say what an unjailed start says. */
    g_autofree char *found = g_find_program_in_path(argv[0]);
    if (!found) {
        sbx_vm_fail(error, SBX_VM_ERROR_SPAWN, "cannot start %s (%s): no such executable", what,
                    argv[0]);
        return NULL;
    }
    spec.binary = found; /* resolved once: jail.c binds and runs this path */
    if (vm->accel == SBX_ACCEL_KVM)
        devices[n++] = "/dev/kvm";
    if (sbx_profile_channel(vm->profile) == SBX_CHANNEL_VSOCK_KERNEL)
        devices[n++] = "/dev/vhost-vsock";
    g_auto(GStrv) jailed = sbx_jail_argv(vm->jail, &spec, argv);
    g_auto(GStrv) envp = sbx_jail_envp(vm->jail);
    if (!make_pipe(info, error))
        return NULL;
    for (gsize i = 0; i < fds->n_fds; i++) {
        sources[i] = fds->source_fds[i];
        targets[i] = fds->target_fds[i];
    }
    sources[fds->n_fds] = info[1];
    targets[fds->n_fds] = JAIL_INFO_FD;
    all.source_fds = sources;
    all.target_fds = targets;
    all.n_fds = fds->n_fds + 1;
    all.envp = (const char *const *)envp;
    all.launcher_info_fd = info[0];
    SbxChild *child = spawn_child((const char *const *)jailed, &all, what, error);
    close(info[1]);
    return child;
}

static gboolean spawn_bridge(SbxVm *vm, GError **error)
{
    g_autofree char *bridge = sbx_paths_bridge();
    g_autofree char *cid = g_strdup_printf("%u", vm->cid);
    g_autofree char *ready_fd = g_strdup_printf("%d", BRIDGE_READY_FD);
    const char *argv[] = {bridge,  "--vhost-user", vm->vhost_user_path,
                          "--uds", vm->uds_path,   "--guest-cid",
                          cid,     "--ready-fd",   ready_fd,
                          NULL};
    const int target = BRIDGE_READY_FD;
    int ready[2], err[2];
    SbxChildFds fds = {
        .source_fds = &ready[1], .target_fds = &target, .n_fds = 1, .launcher_info_fd = -1};

    if (!make_pipe(ready, error))
        return FALSE;
    if (!make_pipe(err, error)) {
        close(ready[0]);
        close(ready[1]);
        return FALSE;
    }
    fds.stderr_fd = err[1];
    vm->bridge = spawn_jailed(vm, argv, &fds, NULL, "the vsock bridge", error);
    close(ready[1]);
    close(err[1]);
    /* Ours from here: freed by the teardown whatever happens next. */
    vm->bridge_err = sbx_log_ring_new(err[0], STDERR_RING, -1, 0);
    vm->ready_fd = ready[0];
    if (!vm->bridge) {
        GError *e = *error;
        *error = g_error_new(e->domain, e->code,
                             "%s (build it: ninja -C build; or set "
                             "SANDBOX_BRIDGE)",
                             e->message);
        g_error_free(e);
        return FALSE;
    }
    sbx_child_watch(vm->bridge, sbx_vm_on_bridge_exit, vm);
    g_unix_set_fd_nonblocking(vm->ready_fd, TRUE, NULL);
    vm->ready_watch =
        g_unix_fd_add(vm->ready_fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_ready_readable, vm);
    return TRUE;
}

/* The two connected socket pairs (QMP, console) and QEMU's stderr pipe. */
typedef struct {
    int qmp[2];
    int con[2];
    int err[2];
} QemuFds;

static gboolean make_qemu_fds(QemuFds *f, GError **error)
{
    f->qmp[0] = f->qmp[1] = f->con[0] = f->con[1] = f->err[0] = f->err[1] = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->qmp) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->con) < 0 ||
        !make_pipe(f->err, NULL)) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (f->qmp[i] >= 0)
                close(f->qmp[i]);
            if (f->con[i] >= 0)
                close(f->con[i]);
        }
        return sbx_vm_fail(error, SBX_VM_ERROR_SPAWN, "socketpair: %s", g_strerror(e));
    }
    return TRUE;
}

static void on_handshake(GObject *source, GAsyncResult *res, gpointer data);

/* Our ends of the fds: QMP client, console and stderr logs; then the boot deadline. */
static void attach_qemu(SbxVm *vm, QemuFds *f)
{
    vm->qemu_start_us = g_get_monotonic_time();
    vm->qemu_err = sbx_log_ring_new(f->err[0], STDERR_RING, -1, 0);
    vm->console =
        sbx_log_ring_new(f->con[0], CONSOLE_RING, vm->console_to_stderr ? 2 : -1, CONSOLE_COPY_MAX);
    vm->qmp = sbx_qmp_new(f->qmp[0]);
    sbx_qmp_set_handlers(vm->qmp, sbx_vm_on_qmp_event, sbx_vm_on_qmp_broken, vm);
    sbx_child_watch(vm->qemu, sbx_vm_on_qemu_exit, vm);
}

static gboolean spawn_qemu(SbxVm *vm, GError **error)
{
    g_autofree char *qemu = sbx_paths_qemu();
    g_auto(GStrv) argv = NULL;
    gboolean bridge = sbx_vm_channel_is_bridge(vm);
    SbxQemuRuntime rt = {.qemu = qemu,
                         .accel = vm->accel,
                         .qmp_fd = QEMU_QMP_FD,
                         .console_fd = QEMU_CONSOLE_FD,
                         .vhost_user_path = vm->vhost_user_path,
                         .serial_path = vm->serial_path,
                         .guest_cid = vm->cid,
                         .ram_path = vm->ram_fd >= 0 ? QEMU_RAM_PATH : NULL,
                         .snapshot_layout = vm->template_vm || vm->snapshot,
                         .no_vsock = vm->snapshot != NULL && bridge,
                         .incoming = vm->snapshot != NULL};
    int targets[4] = {QEMU_QMP_FD, QEMU_CONSOLE_FD};
    int sources[4];
    SbxChildFds fds = {
        .source_fds = sources, .target_fds = targets, .n_fds = 2, .launcher_info_fd = -1};
    const char *ro_paths[] = {vm->image->dir, NULL};
    QemuFds f;

    /* A restore without the bridge maps the snapshot's sealed RAM copy-on-write (clone_ram). */
    rt.ram_private = vm->snapshot && !bridge;
    rt.sandbox = sbx_jail_enabled(vm->jail);
    if (!sbx_tsc_host_khz(&rt.tsc_khz, NULL, error) || !make_qemu_fds(&f, error))
        return FALSE;
    argv = sbx_qemu_argv(vm->profile, vm->image, &rt);
    sources[0] = f.qmp[1];
    sources[1] = f.con[1];
    if (vm->ram_fd >= 0) {
        sources[fds.n_fds] = vm->ram_fd;
        targets[fds.n_fds++] = QEMU_RAM_FD;
    }
    if (vm->state_fd >= 0) {
        sources[fds.n_fds] = vm->state_fd;
        targets[fds.n_fds++] = SBX_QEMU_STATE_FD;
    }
    fds.stderr_fd = f.err[1];
    vm->qemu = spawn_jailed(vm, (const char *const *)argv, &fds, ro_paths, "QEMU", error);
    close(f.qmp[1]);
    close(f.con[1]);
    close(f.err[1]);
    if (!vm->qemu) {
        close(f.qmp[0]);
        close(f.con[0]);
        close(f.err[0]);
        return FALSE;
    }
    attach_qemu(vm, &f);
    return TRUE;
}

static gboolean on_boot_timeout(gpointer data)
{
    SbxVm *vm = data;

    vm->step_timer = 0;
    sbx_vm_fail_start(vm, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_BOOT_TIMEOUT,
                                      "the guest agent did not accept a connection (%s, port "
                                      "%u) within %u ms of QEMU's start",
                                      sbx_channel_name(sbx_profile_channel(vm->profile)),
                                      SBX_AGENT_PORT, vm->boot_timeout_ms));
    return G_SOURCE_REMOVE;
}

void sbx_vm_arm_boot_deadline(SbxVm *vm)
{
    g_clear_handle_id(&vm->step_timer, g_source_remove);
    vm->step_timer = g_timeout_add(vm->boot_timeout_ms, on_boot_timeout, vm);
}

/* The bridge is listening (or there is none): start QEMU. */
static void bridge_ready(SbxVm *vm)
{
    GError *error = NULL;

    g_clear_handle_id(&vm->step_timer, g_source_remove);
    if (vm->ready_fd >= 0)
        close(vm->ready_fd);
    vm->ready_fd = -1;
    if (!spawn_qemu(vm, &error)) {
        sbx_vm_fail_start(vm, error);
        return;
    }
    vm->step_timer = g_timeout_add(vm->boot_timeout_ms, on_boot_timeout, vm);
    sbx_qmp_handshake_async(vm->qmp, 0, vm->start_cancel, on_handshake, vm);
}

/* What the ready pipe says so far: 1 = READY, 0 = keep reading, -1 = anything else. */
static int ready_state(SbxVm *vm)
{
    if (g_str_equal(vm->ready_buf, "READY\n"))
        return 1;
    if (vm->ready_got < strlen("READY\n") && g_str_has_prefix("READY\n", vm->ready_buf))
        return 0;
    return -1;
}

static gboolean on_ready_readable(int fd, GIOCondition cond, gpointer data)
{
    SbxVm *vm = data;
    ssize_t n = read(fd, vm->ready_buf + vm->ready_got, sizeof vm->ready_buf - 1 - vm->ready_got);
    int state;

    (void)cond;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return G_SOURCE_CONTINUE;
    if (n > 0) {
        vm->ready_got += (gsize)n;
        vm->ready_buf[vm->ready_got] = '\0';
    }
    state = n > 0 ? ready_state(vm) : -1;
    if (state == 0)
        return G_SOURCE_CONTINUE;
    vm->ready_watch = 0;
    if (state == 1)
        bridge_ready(vm);
    else if (n > 0)
        sbx_vm_fail_start(vm, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_BRIDGE,
                                          "the vsock bridge wrote something other than READY "
                                          "on its ready pipe"));
    /* EOF: the bridge is exiting; its exit watch reports how (or the READY timeout fires). */
    return G_SOURCE_REMOVE;
}

static gboolean on_bridge_ready_timeout(gpointer data)
{
    SbxVm *vm = data;

    vm->step_timer = 0;
    sbx_vm_fail_start(vm, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_BRIDGE,
                                      "the vsock bridge did not report READY within %u ms",
                                      BRIDGE_READY_MS));
    return G_SOURCE_REMOVE;
}

static void probe(SbxVm *vm);

static gboolean on_retry(gpointer data)
{
    SbxVm *vm = data;

    vm->retry_timer = 0;
    probe(vm);
    return G_SOURCE_REMOVE;
}

/* The agent accepted: the VM is running. */
static void started(SbxVm *vm, int fd)
{
    GTask *task = g_steal_pointer(&vm->start);

    g_clear_handle_id(&vm->step_timer, g_source_remove);
    if (vm->user_cancel) {
        g_source_destroy(vm->user_cancel);
        g_clear_pointer(&vm->user_cancel, g_source_unref);
    }
    g_clear_object(&vm->start_cancel);
    vm->channel_fd = fd;
    vm->boot_us = g_get_monotonic_time() - vm->qemu_start_us;
    if (vm->snapshot) {
        vm->restore_times.ready = vm->boot_us;
        /* Pre-started (vm-prestart.c): QEMU was spawned before this restore was asked for. */
        vm->restore_times.spawn = MAX(vm->qemu_start_us - vm->start_call_us, 0);
        vm->restore_times.total = g_get_monotonic_time() - vm->start_call_us;
    }
    vm->state = VM_RUNNING;
    /* Last: the callback may free @vm. */
    g_task_return_boolean(task, TRUE);
    g_object_unref(task);
}

static void on_probe(GObject *source, GAsyncResult *res, gpointer data)
{
    g_autoptr(GError) error = NULL;
    int fd = sbx_vm_channel_connect_finish(res, &error);
    SbxVm *vm = data;

    (void)source;
    if (fd < 0 && g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        return; /* the start ended (and @vm may be gone) */
    if (fd >= 0) {
        started(vm, fd);
    } else if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED) ||
               g_error_matches(error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT) ||
               g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND)) {
        /* Not listening yet (still booting). A dead bridge is noticed by its exit watch. */
        vm->retry_timer =
            g_timeout_add(vm->snapshot ? PROBE_RETRY_RESTORE_MS : PROBE_RETRY_MS, on_retry, vm);
    } else {
        sbx_vm_fail_start(vm, g_steal_pointer(&error));
    }
}

void sbx_vm_probe(SbxVm *vm)
{
    probe(vm);
}

static void probe(SbxVm *vm)
{
    sbx_vm_channel_connect_async(vm, SBX_AGENT_PORT, PROBE_ATTEMPT_MS, vm->start_cancel, on_probe,
                                 vm);
}

static void on_handshake(GObject *source, GAsyncResult *res, gpointer data)
{
    GError *error = NULL;
    SbxVm *vm = data;

    (void)source;
    if (!sbx_qmp_handshake_finish(NULL, res, &error)) {
        /* Cancelled: the start ended (and @vm may be gone). Closed: QEMU is exiting, and its
         * exit watch reports it with the exit status (or the boot deadline fires). */
        if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED) ||
            g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CLOSED)) {
            g_error_free(error);
            return;
        }
        g_prefix_error(&error, "QEMU's monitor: ");
        sbx_vm_fail_start(vm, error);
        return;
    }
    if (vm->snapshot) {
        vm->restore_times.qmp_ready = g_get_monotonic_time() - vm->qemu_start_us;
        sbx_vm_restore_begin(vm);
        return;
    }
    probe(vm);
}

static gboolean on_user_cancel(GCancellable *cancellable, gpointer data)
{
    SbxVm *vm = data;

    (void)cancellable;
    g_clear_pointer(&vm->user_cancel, g_source_unref);
    sbx_vm_fail_start(vm,
                      g_error_new(G_IO_ERROR, G_IO_ERROR_CANCELLED, "the VM start was cancelled"));
    return G_SOURCE_REMOVE;
}

/* A VM's cgroup: vm-<agent pid>-<n>, so that a later agent can tell a dead agent's. */
#define VM_CGROUP_PREFIX "vm-"

/*
 * The VM's cgroup (cgroup.h): its memory, pids and CPU weight. A host without a writable
 * hierarchy runs VMs without one, after one warning per process.
 */
static gboolean make_cgroup(SbxVm *vm, GError **error)
{
    static guint counter;
    static gboolean swept;
    g_autofree char *name = g_strdup_printf(VM_CGROUP_PREFIX "%d-%u", (int)getpid(), counter++);
    g_autoptr(GError) local = NULL;
    SbxCgroupLimits limits;

    sbx_cgroup_limits_for_vm(&limits, (guint64)sbx_profile_memory_mib(vm->profile) << 20,
                             vm->profile->cpus, vm->accel == SBX_ACCEL_TCG);
    vm->cgroup = sbx_cgroup_new(name, &limits, &local);
    if (vm->cgroup && !swept) {
        swept = TRUE; /* those of agents that were killed: once per process */
        sbx_cgroup_sweep_stale(vm->cgroup, VM_CGROUP_PREFIX);
    }
    if (vm->cgroup || sbx_cgroup_warn_once(local))
        return TRUE;
    g_propagate_error(error, g_steal_pointer(&local));
    return FALSE;
}

/* The snapshot's state.bin, opened read-only here and handed to QEMU as an fd. */
static gboolean open_state(SbxVm *vm, GError **error)
{
    const char *path = sbx_snapshot_state_path(vm->snapshot);

    vm->state_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (vm->state_fd < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot open %s: %s", path,
                           g_strerror(errno));
    return TRUE;
}

static gboolean prepare(SbxVm *vm, GError **error)
{
    if (!sbx_qemu_resolve_accel(vm->profile, &vm->accel, error))
        return FALSE;
    if (!vm->boot_timeout_ms)
        vm->boot_timeout_ms = BOOT_TIMEOUT_DEFAULT_MS;
    if (vm->template_vm) {
        vm->ram_fd = sbx_ramfile_new((guint64)sbx_profile_memory_mib(vm->profile) << 20, error);
        if (vm->ram_fd < 0)
            return FALSE;
    }
    if (vm->snapshot && !open_state(vm, error))
        return FALSE;
    vm->jail = sbx_jail_new(error);
    if (!vm->jail || !make_cgroup(vm, error) || !sbx_vm_cpu_prepare(vm, error))
        return FALSE;
    if (vm->accel == SBX_ACCEL_KVM && !sbx_jail_add_device(vm->jail, "/dev/kvm", error))
        return FALSE;
    if (sbx_profile_channel(vm->profile) == SBX_CHANNEL_VSOCK_KERNEL &&
        !sbx_jail_add_device(vm->jail, "/dev/vhost-vsock", error))
        return FALSE;
    return make_runtime_dir(vm, error) && sbx_jail_own_dir(vm->jail, vm->runtime_dir, error) &&
           sbx_vm_channel_prepare(vm, error);
}

/*
 * The RAM a restore starts from, filled by a worker thread while the bridge and QEMU start:
 * - over the bridge, the VM's own copy (the bridge maps it shared: no sharing between VMs);
 * - otherwise the snapshot's shared copy, which QEMU maps copy-on-write: a memfd sealed
 *   against writes once filled, so no QEMU, compromised or not, can change what later VMs
 *   start from (QEMU 7.2 cannot map a read-only file copy-on-write: it opens mem-path
 *   read-write). The first restore of a snapshot object fills and seals it; later ones (a
 *   server's) take it as it is.
 */
static gboolean clone_ram(SbxVm *vm, GError **error)
{
    if (!vm->snapshot)
        return TRUE;
    if (!sbx_vm_channel_is_bridge(vm)) {
        vm->ram_fd = sbx_snapshot_shared_ram(vm->snapshot);
        if (vm->ram_fd >= 0) {
            vm->ram_copied = TRUE;
            return TRUE;
        }
        vm->ram_seal = TRUE;
    }
    vm->ram_fd = sbx_ramfile_new((guint64)sbx_profile_memory_mib(vm->profile) << 20, error);
    if (vm->ram_fd < 0)
        return FALSE;
    sbx_vm_restore_copy_ram(vm);
    return TRUE;
}

void sbx_vm_start_async(SbxVm *vm, GCancellable *cancellable, GAsyncReadyCallback callback,
                        gpointer user_data)
{
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);
    GError *error = NULL;

    g_task_set_source_tag(task, sbx_vm_start_async);
    if (vm->state != VM_NEW) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_FAILED,
                                "a VM can be started only once");
        g_object_unref(task);
        return;
    }
    vm->state = VM_STARTING;
    vm->start_call_us = g_get_monotonic_time();
    vm->start = task;
    vm->start_cancel = g_cancellable_new();
    if (cancellable) {
        vm->user_cancel = g_cancellable_source_new(cancellable);
        g_source_set_callback(vm->user_cancel, G_SOURCE_FUNC(on_user_cancel), vm, NULL);
        g_source_attach(vm->user_cancel, NULL); /* the default context, like our timers */
    }
    /* The RAM copy overlaps the bridge's and QEMU's start. */
    if (!prepare(vm, &error) || !clone_ram(vm, &error)) {
        sbx_vm_fail_start(vm, error);
        return;
    }
    if (!sbx_vm_channel_is_bridge(vm)) {
        bridge_ready(vm); /* no bridge to wait for */
        return;
    }
    if (!spawn_bridge(vm, &error)) {
        sbx_vm_fail_start(vm, error);
        return;
    }
    vm->step_timer = g_timeout_add(BRIDGE_READY_MS, on_bridge_ready_timeout, vm);
}

gboolean sbx_vm_start_finish(SbxVm *vm, GAsyncResult *result, GError **error)
{
    (void)vm; /* may be freed already (see vm.h) */
    return g_task_propagate_boolean(G_TASK(result), error);
}
