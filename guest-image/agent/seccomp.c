/*
 * The syscall filter every runner process (and so all guest code) runs under: io_uring refused.
 *
 * Why: io_uring has been the kernel's most fruitful attack surface for local privilege
 * escalation, and nothing the runners do needs it (Debian 12's node and python use epoll). The
 * guest kernel (Debian's 6.1) has no kernel.io_uring_disabled sysctl (that came in 6.6), so the
 * agent installs a seccomp filter in the runner just before exec; it is inherited by every
 * process guest code starts and cannot be removed. The calls fail with ENOSYS, what a kernel
 * built without io_uring answers, so a library that probes for io_uring falls back to plain
 * system calls. User namespaces and ptrace are refused by sysctls (guest-image/init).
 *
 * A classic BPF program on the system call number, no libseccomp (the agent is static and
 * has no dependencies beyond the C library).
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent.h"

/*
 * io_uring_setup, io_uring_enter, io_uring_register: 425..427 on x86_64 and i386 alike (and on
 * every architecture: the system call numbers from 403 on are shared since Linux 5.1), so the
 * test needs no architecture check to catch a 64-bit process calling through int 0x80.
 */
#define IO_URING_FIRST 425
#define IO_URING_LAST 427
_Static_assert(__NR_io_uring_setup == IO_URING_FIRST && __NR_io_uring_register == IO_URING_LAST,
               "io_uring system call numbers");

/*
 * x32 system calls (x86_64 with this bit set in the number): the same io_uring calls under
 * other numbers. Debian's kernels leave x32 off unless booted with syscall.x32=y, in which case
 * every such call already fails with ENOSYS; refusing them all keeps it so.
 */
#define X32_SYSCALL_BIT 0x40000000u

#define DENY (SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA))

static struct sock_filter program[] = {
    /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    /* 1 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, X32_SYSCALL_BIT, 3, 0), /* x32 -> 5 */
    /* 2 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, IO_URING_FIRST, 0, 1),   /* below -> 4 */
    /* 3 */ BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, IO_URING_LAST, 0, 1),    /* in range -> 5 */
    /* 4 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    /* 5 */ BPF_STMT(BPF_RET | BPF_K, DENY),
};

int seccomp_runner_install(void)
{
    struct sock_fprog prog = {
        .len = (unsigned short)(sizeof(program) / sizeof(program[0])),
        .filter = program,
    };

    /*
     * no_new_privs: required to install a filter without CAP_SYS_ADMIN (the runner has dropped
     * to its user by now), and wanted anyway: no set-user-ID program can lift guest code out of
     * its user.
     */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return -errno;
    return 0;
}
