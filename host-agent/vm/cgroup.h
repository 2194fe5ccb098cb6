/*
 * Resource limits for one VM's processes (QEMU, the bridge, their helpers): a cgroup of their
 * own with a memory limit, a pids limit and a CPU weight, on cgroup v2 (the agent's own
 * delegated cgroup or $SANDBOX_CGROUP_ROOT) or else cgroup v1 (the memory, pids and cpu
 * hierarchies). docs/vm.md, "Resource limits (cgroups)".
 */
#pragma once

#include <glib.h>
#include <sys/types.h>

#define SBX_CGROUP_ERROR (sbx_cgroup_error_quark())
GQuark sbx_cgroup_error_quark(void);

typedef enum {
    SBX_CGROUP_ERROR_UNAVAILABLE, /* no writable v2 or v1 hierarchy with memory and pids */
    SBX_CGROUP_ERROR_INVALID,     /* a bad name or limit (a programmer error or bad config) */
    SBX_CGROUP_ERROR_EXISTS,      /* a cgroup of that name exists and has processes in it */
    SBX_CGROUP_ERROR_FAILED,      /* the hierarchy works but an operation on it failed */
} SbxCgroupError;

/*
 * Names become one path component below `sandbox/` and show in /proc/<pid>/cgroup: 64 bytes
 * hold "vm-<agent pid>-<counter>" many times over and keep the paths short.
 */
#define SBX_CGROUP_NAME_MAX 64

/*
 * Memory on top of the guest's RAM: QEMU's own heap, device models, I/O buffers, the bridge,
 * the `exec:` migration helpers. The page cache of the image files is charged too but is
 * reclaimable, so it does not need room of its own.
 */
#define SBX_CGROUP_MEMORY_OVERHEAD (256 * (guint64)1024 * 1024)

/*
 * TCG's translation buffer: QEMU 7.2 maps min(1 GiB, host RAM / 8) when `tb-size` is not
 * given and fills it before it flushes; a guest that runs much code (a JIT such as node's)
 * fills it. The pages are anonymous: without swap the cgroup cannot reclaim them, so a limit
 * without this room would OOM-kill a busy TCG guest's QEMU. Not needed under KVM.
 */
#define SBX_CGROUP_MEMORY_TCG_CACHE (1024 * (guint64)1024 * 1024)

/* Below this, QEMU does not get through its own start: a limit this small is a unit mix-up. */
#define SBX_CGROUP_MEMORY_MIN (32 * (guint64)1024 * 1024)

/*
 * Tasks (threads count) of one VM. QEMU: the main loop, call_rcu and a few helpers (6 threads
 * in an idle 1-vCPU q35 VM under QEMU 7.2 here), one thread per vCPU, and a block I/O thread
 * pool that grows to 64 workers under guest disk load (QEMU's thread-pool-max default). QEMU
 * aborts when it cannot create a thread, so the pool must fit. Helpers: the bridge (one
 * thread), the `exec:` migration shell and `cat` of a snapshot or restore, slack.
 */
#define SBX_CGROUP_PIDS_QEMU_BASE 8
#define SBX_CGROUP_PIDS_QEMU_POOL 64
#define SBX_CGROUP_PIDS_HELPERS 8

/* QEMU's main thread, call_rcu and one vCPU, plus the bridge: less cannot start a VM. */
#define SBX_CGROUP_PIDS_MIN 4

/*
 * More than any VM needs (64 vCPUs, the profile maximum, plus the above is < 160), and it keeps
 * cgroup.procs, which the teardown reads, below its 64 KiB read limit (cgroup.c).
 */
#define SBX_CGROUP_PIDS_MAX 4096

/*
 * cgroup v2's cpu.weight scale: 1..10000, 100 = the kernel's default (every VM gets an equal
 * share against the others and the rest of the host). On v1 it becomes cpu.shares =
 * weight * 1024 / 100 (1024 = v1's default), clamped to v1's 2..262144 (systemd's mapping).
 */
#define SBX_CGROUP_CPU_WEIGHT_DEFAULT 100
#define SBX_CGROUP_CPU_WEIGHT_MIN 1
#define SBX_CGROUP_CPU_WEIGHT_MAX 10000

/*
 * How long sbx_cgroup_destroy() waits for the SIGKILLed processes to leave the cgroup. They
 * exit within milliseconds; a QEMU with gigabytes of RAM takes the kernel a few hundred ms to
 * tear down (base/child.c). Only a process stuck in uninterruptible sleep runs into it.
 */
#define SBX_CGROUP_KILL_WAIT_MS 2000

/* The exit status of a spawned child that could not join its cgroup (sbx_cgroup_child_setup). */
#define SBX_CGROUP_JOIN_FAILED_STATUS 125

typedef struct SbxCgroup SbxCgroup;

typedef struct {
    guint64 memory_bytes; /* v2 memory.max (+ memory.swap.max 0); v1 memory.limit_in_bytes
                             (+ memory.memsw.limit_in_bytes): required, >= MEMORY_MIN */
    guint pids_max;       /* pids.max; 0 = SBX_CGROUP_PIDS_QEMU_BASE + POOL + HELPERS + 1 */
    guint cpu_weight;     /* v2 cpu.weight, v1 cpu.shares (see above); 0 = the default */
} SbxCgroupLimits;

/**
 * The limits for a VM with @guest_memory_bytes of RAM and @vcpus vCPUs: memory = guest RAM +
 * SBX_CGROUP_MEMORY_OVERHEAD (+ SBX_CGROUP_MEMORY_TCG_CACHE when @tcg), pids = QEMU base +
 * pool + helpers + one per vCPU, the default CPU weight.
 */
void sbx_cgroup_limits_for_vm(SbxCgroupLimits *limits, guint64 guest_memory_bytes, guint vcpus,
                              gboolean tcg);

/** TRUE if @name is 1..SBX_CGROUP_NAME_MAX of [A-Za-z0-9._-] and does not start with a dot. */
gboolean sbx_cgroup_name_valid(const char *name);

/**
 * Create the cgroup `sandbox/<name>` and set @limits on it (see the file comment for where).
 * Its `cgroup.procs` files are opened here, so that a child can join between fork and exec
 * (sbx_cgroup_join_self()). An existing `<name>` with no processes in it (left by an agent
 * that was killed) is taken over; one with processes is SBX_CGROUP_ERROR_EXISTS, so names
 * must be unique among running agents (put the agent's pid in them).
 *
 * Environment: $SANDBOX_CGROUP_ROOT (a cgroup v2 directory to create `sandbox/` in instead of
 * the agent's own cgroup) and $SANDBOX_CGROUP_V1_ROOT (the directory holding the v1
 * `memory`, `pids`, `cpu` mounts, default /sys/fs/cgroup). If either is set, only the
 * hierarchies set are tried, and their file system type is not checked (tests use fake trees).
 *
 * Returns NULL with SBX_CGROUP_ERROR_UNAVAILABLE (the reasons per hierarchy in the message)
 * when no hierarchy can be used: the caller may run the VM without limits after
 * sbx_cgroup_warn_once(). Other codes are failures.
 */
SbxCgroup *sbx_cgroup_new(const char *name, const SbxCgroupLimits *limits, GError **error);

/**
 * Move the calling process into @cg (every hierarchy): writes "0" to each pre-opened
 * `cgroup.procs`. Only write(2): async-signal-safe, so it may run in a forked child before
 * exec (a GSpawnChildSetupFunc). NULL @cg: nothing to join, returns 0. Returns 0 or -errno of
 * the first write that failed (the process may then be in some hierarchies and not others).
 */
int sbx_cgroup_join_self(const SbxCgroup *cg);

/**
 * A GSpawnChildSetupFunc (@data: the SbxCgroup, or NULL): sbx_cgroup_join_self(), and if that
 * fails, a line on stderr and _exit(SBX_CGROUP_JOIN_FAILED_STATUS): a VM process never runs
 * outside its limits by accident. Call sbx_cgroup_join_self() from your own setup function
 * instead when it does more (setpgid, PR_SET_PDEATHSIG: base/child.c).
 */
void sbx_cgroup_child_setup(gpointer data);

/** Move the running process @pid (all its threads) into @cg, every hierarchy. */
gboolean sbx_cgroup_attach(SbxCgroup *cg, pid_t pid, GError **error);

/**
 * Tear @cg down: kill what is in it (v2 `cgroup.kill` where the kernel has it; else and also
 * SIGKILL through a pidfd to each pid in `cgroup.procs`, checked again after the pidfd is
 * open so a recycled pid is never hit), wait until it is empty (SBX_CGROUP_KILL_WAIT_MS),
 * remove its directories, and `sandbox/` if that is then empty. Zombies do not keep a cgroup
 * busy, so the caller may reap its children before or after. Never kills the calling
 * process. Returns FALSE with SBX_CGROUP_ERROR_FAILED if something is left (processes or a
 * directory); calling it again retries what is left; TRUE once everything is gone.
 */
gboolean sbx_cgroup_destroy(SbxCgroup *cg, GError **error);

/**
 * Remove the cgroups that agents killed before their teardown left beside @cg: siblings of its
 * directories named <@prefix><pid>-<n> whose <pid> no longer exists. What still runs in one (a
 * process that outlived its agent) is SIGKILLed first; a pid that was reused since leaves its
 * cgroup alone. Call once per process, after the first sbx_cgroup_new().
 */
void sbx_cgroup_sweep_stale(const SbxCgroup *cg, const char *prefix);

/** sbx_cgroup_destroy() (errors ignored) and free @cg. NULL is fine. */
void sbx_cgroup_free(SbxCgroup *cg);

/** 2 or 1: the cgroup version @cg lives on. */
int sbx_cgroup_version(const SbxCgroup *cg);

/**
 * The directories of @cg, NULL-terminated: one on v2; on v1 memory, pids, and cpu when the
 * cpu controller is there (sbx_cgroup_has_cpu_weight()).
 */
const char *const *sbx_cgroup_dirs(const SbxCgroup *cg);

/** FALSE when no cpu controller was available: the VM then runs with the default weight. */
gboolean sbx_cgroup_has_cpu_weight(const SbxCgroup *cg);

/**
 * Change the CPU weight of @cg (SBX_CGROUP_CPU_WEIGHT_MIN..MAX, the scale of
 * SbxCgroupLimits.cpu_weight) while it runs: the VM's CPU policy (vm-cpu.c). Nothing to do
 * (TRUE) without a cpu controller; SBX_CGROUP_ERROR_INVALID out of range.
 */
gboolean sbx_cgroup_set_cpu_weight(SbxCgroup *cg, guint weight, GError **error);

/**
 * For a caller that runs VMs without limits when there is no usable hierarchy: if @error is
 * SBX_CGROUP_ERROR_UNAVAILABLE, print once per process `sandbox: warning: no writable cgroup
 * hierarchy (<reasons>): VMs run without memory/pids/CPU limits` on stderr and return TRUE;
 * for any other error (a failure the caller must report) print nothing and return FALSE.
 */
gboolean sbx_cgroup_warn_once(const GError *error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxCgroup, sbx_cgroup_free)
