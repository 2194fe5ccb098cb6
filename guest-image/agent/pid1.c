/*
 * Signals and the duties of init. In the guest the agent is PID 1: it reaps every orphan the
 * kernel hands it, ignores SIGTERM/SIGINT sent from inside the guest, and never exits (the
 * kernel panics when init dies); a fatal error powers the VM off so that QEMU exits. Outside
 * the guest (tests) SIGTERM/SIGINT end the agent cleanly.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* Signals whose disposition we change; children get the defaults back before exec. */
static const int ignored_as_init[] = {SIGTERM, SIGINT, SIGHUP};

int pid1_signals_init(bool pid1)
{
    sigset_t mask;
    int fd;

    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    /* The virtio-serial port's changes (serial.c): read from the signalfd, never delivered. */
    sigaddset(&mask, SIGIO);
    if (pid1) {
        for (size_t i = 0; i < sizeof(ignored_as_init) / sizeof(ignored_as_init[0]); i++)
            signal(ignored_as_init[i], SIG_IGN);
    } else {
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
    }
    /* A host or runner that hangs up must not kill us: writes report EPIPE instead. */
    signal(SIGPIPE, SIG_IGN);
    if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
        return -errno;
    fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

void pid1_signals_reset(void)
{
    sigset_t none;

    /* Blocked signals and ignored dispositions survive exec: give the runner the defaults. */
    for (size_t i = 0; i < sizeof(ignored_as_init) / sizeof(ignored_as_init[0]); i++)
        signal(ignored_as_init[i], SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Reap every child that has exited: the runner, and as init any orphan of the guest. */
static void reap(Agent *a)
{
    for (;;) {
        siginfo_t si = {0};
        int status;
        pid_t pid;

        /* Look before reaping: while the runner is a zombie its group can still be killed. */
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            return;
        exec_runner_exiting(a, si.si_pid);
        pid = waitpid(si.si_pid, &status, WNOHANG);
        if (pid > 0) {
            exec_runner_exited(a, pid, status);
            prestart_reaped(a, pid);
        } else if (pid < 0 && errno != EINTR)
            return;
    }
}

void pid1_on_signals(Agent *a)
{
    struct signalfd_siginfo si;

    while (read(a->signal_fd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
            a->quit = true;
        if (si.ssi_signo == SIGIO)
            serial_check(a);
    }
    /* SIGCHLD coalesces: reap whatever has exited, whichever signal woke us. */
    reap(a);
}

void pid1_fatal(const Agent *a, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    agent_log("fatal: %s", why);
    if (!a->pid1)
        exit(1);
    sync();
    reboot(RB_POWER_OFF);
    /* Not allowed to power off (no CAP_SYS_BOOT): init must still never exit. */
    for (;;)
        pause();
}
