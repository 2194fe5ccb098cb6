/*
 * Checks, from outside, that a running process is confined as host-agent/vm/jail.h says (for
 * tests with real VMs): its uid, capabilities, NoNewPrivs, seccomp, namespaces, root, environment,
 * rlimits and open files. Each failed point is appended to @why, one line each.
 */
#pragma once

#include <glib.h>

typedef struct {
    gboolean seccomp;        /* expect Seccomp: 2 */
    const char *image_dir;   /* regular files it may hold open besides memfds (may be NULL) */
    const char *runtime_dir; /* the VM's runtime dir, bound read-write */
    gboolean cgroup;         /* expect the VM's own cgroup (host-agent/vm/cgroup.h) */
} SbxJailExpect;

/** The cgroups of this process's VMs still there (v1 and v2 places), appended to @why. */
gboolean sbx_test_no_vm_cgroups(GString *why);

/** Whether this host lets the agent make cgroups (root with a writable v1 or v2 hierarchy). */
gboolean sbx_test_cgroups_writable(void);

/** TRUE if @pid (QEMU or the bridge, the host's pid) is jailed; else the reasons in @why. */
gboolean sbx_test_jailed(int pid, const SbxJailExpect *expect, GString *why);
