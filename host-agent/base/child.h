/*
 * A child process with an owner (crun's cleanup_pid): started in its own process group with
 * PR_SET_PDEATHSIG(SIGKILL), killed and reaped by sbx_child_kill(), so no path leaves it
 * running or as a zombie. One mechanism for every child of the host agent: QEMU and the vsock
 * bridge (vm/), tool processes and MCP stdio servers (tools/).
 *
 * Why not GSubprocess: GLib 2.74 (Debian 12) watches children with a pidfd and, when the pidfd
 * is readable but waitid() cannot reap yet (the kernel signals the pidfd a moment before the
 * child becomes a zombie), reports the child as exited with status 0 and never reaps it. We
 * saw that leave zombies and wrong exit statuses under load. So we spawn with
 * G_SPAWN_DO_NOT_REAP_CHILD and reap ourselves through a pidfd, retrying in that window.
 * The pidfd also makes signals immune to PID reuse. Needs Linux >= 5.4 (P_PIDFD).
 */
#pragma once

#include <glib.h>

#define SBX_CHILD_ERROR (sbx_child_error_quark())
GQuark sbx_child_error_quark(void);

typedef enum {
    SBX_CHILD_ERROR_SPAWN, /* the program could not be started */
} SbxChildError;

typedef struct SbxChild SbxChild;

/** Called once when the child exits by itself; @wait_status as from waitpid(). */
typedef void (*SbxChildExitFunc)(SbxChild *child, int wait_status, gpointer user_data);

/* File descriptors and more for the child. The caller keeps (and later closes) its copies. */
typedef struct {
    int stderr_fd;         /* becomes fd 2; -1 = /dev/null (ignored with stderr_pipe) */
    const int *source_fds; /* each becomes target_fds[i] in the child */
    const int *target_fds;
    gsize n_fds;
    /*
     * If set: a pipe to the child's stdin, from its stdout, from its stderr, our end stored
     * here (close-on-exec; the caller's to close). NULL: /dev/null (stderr: stderr_fd).
     */
    int *stdin_pipe;
    int *stdout_pipe;
    int *stderr_pipe;
    const char *const *envp;      /* the child's environment; NULL: the agent's */
    gboolean path_from_envp;      /* look argv[0] up in @envp's PATH (not the agent's) */
    const char *cwd;              /* the child's working directory; NULL: the agent's */
    void (*setup)(gpointer data); /* more async-signal-safe steps in the child, after ours */
    gpointer setup_data;
    /*
     * A launcher (bubblewrap) runs the real program as its child and reports that one's pid
     * as JSON ({"child-pid": N}) on this pipe (our read end; taken, closed on free); -1: none.
     * The child is then killed through that pid too, and an exit status of 128 + N from the
     * launcher means the program was killed by signal N.
     */
    int launcher_info_fd;
} SbxChildFds;

/**
 * Spawn @argv (searched in PATH) with stdin and stdout on /dev/null unless piped, @fds as
 * given, every other fd closed, in a new process group, with PR_SET_PDEATHSIG(SIGKILL). @what
 * ("QEMU", "the vsock bridge", "tool process") names it in errors (SBX_CHILD_ERROR). Call from
 * the thread that owns the main context: the death signal fires when the *thread* that forked
 * exits.
 */
SbxChild *sbx_child_spawn(const char *const *argv, const SbxChildFds *fds, const char *what,
                          GError **error);

/**
 * Watch for the child exiting by itself (on the default main context; at most once). Before it
 * is reaped, its process group is SIGKILLed: what it started in its group (a daemonised
 * helper holding its pipes) ends with it.
 */
void sbx_child_watch(SbxChild *child, SbxChildExitFunc func, gpointer user_data);

/** The pid while it is not reaped; 0 after. */
GPid sbx_child_pid(const SbxChild *child);

/**
 * The real program's pid as the host sees it: the one the launcher reported (read now if it
 * has not been yet), else sbx_child_pid(). 0 once reaped.
 */
GPid sbx_child_program_pid(SbxChild *child);

/** Human text for a wait status: "exited with status 1", "killed by signal 9 (Killed)". */
char *sbx_child_describe_status(int wait_status);

/**
 * SIGKILL the child's process group and reap the child, waiting at most @timeout_ms (a process
 * in uninterruptible sleep cannot be helped). Stops the watch. Idempotent. FALSE on timeout.
 */
gboolean sbx_child_kill(SbxChild *child, guint timeout_ms);

/**
 * SIGKILL the child's process group (and a launcher's program) now, without waiting: the watch
 * reports the exit from the main loop and reaps. For a loop that must not block. Nothing once
 * reaped.
 */
void sbx_child_kill_async(SbxChild *child);

/** sbx_child_kill() with the default bound, then free. Accepts NULL. */
void sbx_child_free(SbxChild *child);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxChild, sbx_child_free)
