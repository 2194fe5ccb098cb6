/*
 * The bridge's seccomp allow-list: the system calls its loop makes, nothing else. main.c
 * installs it once the sockets listen and before the first byte from QEMU or the guest.
 * (Not "seccomp.h": the bridge's include path would shadow libseccomp's <seccomp.h>.)
 */
#pragma once

/* What happens to a system call outside the list. */
enum bridge_seccomp_mode {
    BRIDGE_SECCOMP_KILL = 0, /* the whole process dies by SIGSYS (production) */
    BRIDGE_SECCOMP_LOG,      /* allowed but logged by the kernel (development: --seccomp=log) */
};

/**
 * bridge_seccomp_install: set PR_SET_NO_NEW_PRIVS (and, in kill mode, make the process
 * non-dumpable), then load the allow-list for the calling process with @mode as the action
 * for everything else. Irreversible. Returns 0 or -errno; on failure no filter is loaded
 * (no_new_privs may already be set).
 */
int bridge_seccomp_install(enum bridge_seccomp_mode mode);
