/*
 * The jail of a VM's processes (QEMU and the vsock bridge), in the spirit of Firecracker's
 * jailer, built from bubblewrap (docs/vm.md, "The jail"):
 *
 *   - a uid/gid of the VM's own: from a configured range, locked for the VM's life, when the
 *     agent runs as root (dropped to before bwrap runs, so bwrap is unprivileged); the caller's
 *     own uid, in a user namespace, when it does not (rootless);
 *   - new user, mount, pid, net, ipc, uts and cgroup namespaces; pivot_root into a tmpfs that
 *     holds only /usr (libraries, firmware) read-only, the image files read-only, the program's
 *     binary read-only, the VM's runtime dir read-write, a minimal /dev and /proc;
 *   - no capabilities, NoNewPrivs, no further user namespaces, a new session (no terminal);
 *   - an environment from an allow-list; only the fds the caller passes; rlimits (core 0,
 *     nofile, nproc with an own uid).
 * Seccomp is each program's own: QEMU's -sandbox (qemu.c), the bridge's allow-list (bridge/).
 * Internal to host-agent/vm.
 */
#pragma once

#include <glib.h>
#include <sys/types.h>

typedef struct SbxJail SbxJail;

/* What one program of the VM needs in its jail. */
typedef struct {
    const char *binary;      /* the program (absolute path, or searched in PATH) */
    const char *runtime_dir; /* bound read-write at the same path */
    const char *const
        *ro_paths; /* bound read-only at the same paths (NULL-terminated; may be NULL) */
    const char *const *devices; /* device nodes bound at the same paths, e.g. "/dev/kvm" */
    int info_fd;                /* fd number (in the child) where bwrap reports the pid */
} SbxJailSpec;

/**
 * The jail of one VM, from $SANDBOX_JAIL ("on", the default; "off" runs unconfined, for
 * comparison and debugging) and, as root, a free uid from $SANDBOX_JAIL_UIDS ("FIRST-LAST").
 * Fails if the jail is on but cannot be had (no bwrap, no free uid), saying how to fix it.
 */
SbxJail *sbx_jail_new(GError **error);

/** FALSE when $SANDBOX_JAIL=off: sbx_jail_argv() then returns @argv unchanged. */
gboolean sbx_jail_enabled(const SbxJail *jail);

/** The uid the VM's processes run as outside their user namespace. */
uid_t sbx_jail_uid(const SbxJail *jail);

/**
 * Whether the jail's uid can reach @dir (every directory on the way lets others through), as
 * it must for the VM's runtime dir and the image: as root, bwrap binds them as that uid.
 */
gboolean sbx_jail_can_reach(const SbxJail *jail, const char *dir);

/** Give @dir (the VM's runtime dir) to the jail's uid, so its processes can create sockets. */
gboolean sbx_jail_own_dir(const SbxJail *jail, const char *dir, GError **error);

/**
 * The jail's processes will open the device node @path (/dev/kvm, /dev/vhost-vsock): as root,
 * its group becomes theirs too. Bind it with SbxJailSpec.devices.
 */
gboolean sbx_jail_add_device(SbxJail *jail, const char *path, GError **error);

/** bwrap's argv around @argv (NULL-terminated), or a copy of @argv when the jail is off. */
char **sbx_jail_argv(const SbxJail *jail, const SbxJailSpec *spec, const char *const *argv);

/** The environment of a jailed program: an allow-list of the agent's (see jail.c). */
char **sbx_jail_envp(const SbxJail *jail);

/**
 * In the child between fork and exec (async-signal-safe only): rlimits, then, as root, the
 * jail's groups and uid. Kills the child if a step fails: it must never run unconfined.
 */
void sbx_jail_child_setup(const SbxJail *jail);

/** Unlock the uid. Call after the VM's processes are gone. Accepts NULL. */
void sbx_jail_free(SbxJail *jail);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxJail, sbx_jail_free)
