/*
 * A child process with an owner (crun's cleanup_pid): started in its own process group with
 * PR_SET_PDEATHSIG(SIGKILL), killed and reaped by sbx_child_kill(), so no path leaves it
 * running. Internal to host-agent/vm.
 */
#pragma once

#include <gio/gio.h>

typedef struct SbxChild SbxChild;

/** Called once when the child exits by itself; @status as from waitpid. */
typedef void (*SbxChildExitFunc)(SbxChild *child, int wait_status, gpointer user_data);

/**
 * A launcher whose children die with us (PR_SET_PDEATHSIG, checked against the race with our
 * own death) and sit in their own process group (no terminal signals; killable as a group).
 * stdin is /dev/null, stdout is discarded; the caller sets stderr and extra fds.
 */
GSubprocessLauncher *sbx_child_launcher_new(void);

/** Spawn @argv; @what ("QEMU", "bridge") names it in errors. */
SbxChild *sbx_child_spawn(GSubprocessLauncher *launcher, const char *const *argv,
                          const char *what, GError **error);

/** Watch for the child exiting by itself (once; cancelled by sbx_child_kill). */
void sbx_child_watch(SbxChild *child, SbxChildExitFunc func, gpointer user_data);

/** The pid while it runs (0 after it was reaped). */
GPid sbx_child_pid(const SbxChild *child);

/** Human text for a wait status: "exited with status 1", "killed by signal 9". */
char *sbx_child_describe_status(int wait_status);

/**
 * SIGKILL the child's process group and wait for the child to be reaped, at most @timeout_ms
 * (a process in uninterruptible sleep cannot be helped). Idempotent. Returns FALSE on timeout.
 */
gboolean sbx_child_kill(SbxChild *child, guint timeout_ms);

/** sbx_child_kill() with the default bound, then free. Accepts NULL. */
void sbx_child_free(SbxChild *child);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxChild, sbx_child_free)
