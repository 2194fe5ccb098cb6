/*
 * The bridge's seccomp allow-list (bridge/seccomp-filter.c), installed exactly as the binary
 * installs it, in a forked child per case: what the bridge does still works (unix sockets,
 * guest RAM mappings, eventfds, its exit), and a call outside the list kills the process with
 * SIGSYS (execve, other address families, executable memory, other fcntl commands, files).
 * The binary itself is checked running confined by cli-test.sh (Seccomp: 2 in its status).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "seccomp-filter.h"

/* How long a child may take before it counts as hung (it is killed then). */
#define CHILD_TIMEOUT_MS 10000

/* Exit codes of a child whose confined part went wrong (not a signal). */
#define CHILD_INSTALL_FAILED 90
#define CHILD_CALL_FAILED 91

typedef void (*child_fn)(void);

/* Wait for @pid with a deadline; returns its wait status, or -1 if it had to be killed. */
static int wait_child(pid_t pid)
{
    for (int i = 0; i < CHILD_TIMEOUT_MS / 10; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            return st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* Fork; the child installs the filter in @mode, runs @fn and exits 0. Returns its status. */
static int run_confined(enum bridge_seccomp_mode mode, child_fn fn)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (bridge_seccomp_install(mode) < 0)
            _exit(CHILD_INSTALL_FAILED);
        fn();
        _exit(0);
    }
    return wait_child(pid);
}

static void expect_exit_0(child_fn fn)
{
    int st = run_confined(BRIDGE_SECCOMP_KILL, fn);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("child: status 0x%x (exit %d, signal %d), expected exit 0", st,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
}

#define expect_signal(fn, sig) expect_signal_named(#fn, fn, sig)

static void expect_signal_named(const char *what, child_fn fn, int sig)
{
    int st = run_confined(BRIDGE_SECCOMP_KILL, fn);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != sig)
        fail_msg("%s: status 0x%x (exit %d, signal %d), expected signal %d", what, st,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : -1, sig);
}

static void check(bool ok)
{
    if (!ok)
        _exit(CHILD_CALL_FAILED);
}

/* ---- what the bridge does keeps working ---------------------------------------------------- */

/* Set up before the filter (like the bridge's listening socket and QEMU's fds). */
static int pre_listen_fd = -1, pre_memfd = -1, pre_eventfd = -1;
static char pre_dir[64], pre_path[96];

/* The calls of the bridge's loop, in the shapes it makes them. */
static void allowed_ops(void)
{
    /* hybrid.c connect_host(): a unix socket connecting to <uds>_<port>. */
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    check(s >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", pre_path);
    check(connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    int c = accept4(pre_listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    check(c >= 0);
    check(send(s, "CONNECT 1\n", 10, MSG_NOSIGNAL) == 10);
    char buf[16];
    struct pollfd p = {.fd = c, .events = POLLIN};
    check(poll(&p, 1, 1000) == 1 && recv(c, buf, sizeof(buf), 0) == 10);
    struct iovec iov = {.iov_base = buf, .iov_len = 2};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    check(sendmsg(c, &mh, MSG_NOSIGNAL) == 2 && recvmsg(s, &mh, MSG_DONTWAIT) == 2);
    check(shutdown(c, SHUT_WR) == 0 && readv(s, &iov, 1) == 0);
    close(c);
    close(s);
    /* vhost-user.c: guest RAM from QEMU's fd, read-write and shared; kick/call fds. */
    struct stat st;
    check(fstat(pre_memfd, &st) == 0 && S_ISREG(st.st_mode));
    uint8_t *ram =
        mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, pre_memfd, 0);
    check(ram != MAP_FAILED);
    ram[100] = 42;
    check(munmap(ram, 65536) == 0);
    check(fcntl(pre_eventfd, F_SETFL, fcntl(pre_eventfd, F_GETFL) | O_NONBLOCK) == 0);
    uint64_t one = 1, v = 0;
    check(write(pre_eventfd, &one, 8) == 8 && read(pre_eventfd, &v, 8) == 8 && v == 1);
    /* malloc: small (brk) and large (mmap) blocks, like the connection buffers. */
    void *small = malloc(100), *big = malloc(4 << 20);
    check(small && big);
    memset(big, 1, 4 << 20);
    free(big);
    free(small);
    /* bridge_stop(): the socket files go away. */
    check(unlink(pre_path) == 0);
}

static int setup_allowed(void **state)
{
    (void)state;
    strcpy(pre_dir, "/tmp/bridge-seccomp-XXXXXX");
    assert_non_null(mkdtemp(pre_dir));
    snprintf(pre_path, sizeof(pre_path), "%s/hy.sock_1", pre_dir);
    pre_listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", pre_path);
    assert_int_equal(bind(pre_listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(pre_listen_fd, 4), 0);
    pre_memfd = memfd_create("guest-ram", MFD_CLOEXEC);
    assert_int_equal(ftruncate(pre_memfd, 65536), 0);
    pre_eventfd = eventfd(0, EFD_CLOEXEC);
    assert_true(pre_eventfd >= 0);
    return 0;
}

static int teardown_allowed(void **state)
{
    (void)state;
    close(pre_listen_fd);
    close(pre_memfd);
    close(pre_eventfd);
    unlink(pre_path); /* left over if the child failed */
    rmdir(pre_dir);
    return 0;
}

static void test_allowed(void **state)
{
    (void)state;
    expect_exit_0(allowed_ops);
    assert_int_equal(access(pre_path, F_OK), -1); /* the child's unlink happened */
}

/* Status of the confined process as the kernel shows it; the bridge's own is in cli-test.sh. */
static void test_status(void **state)
{
    (void)state;
    int go[2], ready[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(ready), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char b = 0;
        if (bridge_seccomp_install(BRIDGE_SECCOMP_KILL) < 0)
            _exit(CHILD_INSTALL_FAILED);
        check(write(ready[1], &b, 1) == 1 && read(go[0], &b, 1) == 1);
        _exit(0);
    }
    char b, path[64], line[256];
    struct pollfd p = {.fd = ready[0], .events = POLLIN};
    assert_int_equal(poll(&p, 1, CHILD_TIMEOUT_MS), 1);
    assert_int_equal(read(ready[0], &b, 1), 1);
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    int seccomp = -1, nnp = -1;
    while (fgets(line, sizeof(line), fp)) {
        sscanf(line, "Seccomp: %d", &seccomp);
        sscanf(line, "NoNewPrivs: %d", &nnp);
    }
    fclose(fp);
    assert_int_equal(write(go[1], &b, 1), 1);
    int st = wait_child(pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(seccomp, 2); /* SECCOMP_MODE_FILTER */
    assert_int_equal(nnp, 1);
    for (int i = 0; i < 2; i++) {
        close(go[i]);
        close(ready[i]);
    }
}

/* abort() (libc's reaction to a smashed stack or heap) still ends in SIGABRT, not SIGSYS. */
static void do_abort(void)
{
    abort();
}

static void test_abort(void **state)
{
    (void)state;
    expect_signal(do_abort, SIGABRT);
}

/* ---- everything else kills ------------------------------------------------------------------ */

static void do_execve(void)
{
    char *argv[] = {"/bin/true", NULL};
    char *envp[] = {NULL};
    execve("/bin/true", argv, envp);
}

static void do_socket_inet(void)
{
    socket(AF_INET, SOCK_STREAM, 0);
}

static void do_socket_netlink(void)
{
    socket(AF_NETLINK, SOCK_RAW, 0);
}

static void do_mmap_exec(void)
{
    mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static void do_mprotect_exec(void)
{
    static char page[4096] __attribute__((aligned(4096)));
    mprotect(page, sizeof(page), PROT_READ | PROT_EXEC);
}

static void do_fcntl_dupfd(void)
{
    fcntl(0, F_DUPFD_CLOEXEC, 100);
}

static void do_open(void)
{
    open("/tmp/bridge-seccomp-created", O_WRONLY | O_CREAT | O_TRUNC, 0600);
}

static void do_fork(void)
{
    /* No new processes: fork is clone without CLONE_THREAD; the raw syscall avoids libc
     * wrappers that might try vfork or clone3 first. */
    syscall(SYS_fork);
}

/* This test's own pid, taken before any fork (getppid is not on the list). */
static pid_t parent_pid;

static void do_kill_parent(void)
{
    kill(parent_pid, SIGKILL);
}

static void do_tgkill_parent(void)
{
    /* tgkill is allowed for SIGABRT to ourselves only. */
    syscall(SYS_tgkill, parent_pid, parent_pid, SIGABRT);
}

#if defined(__x86_64__)
static void do_x32_getpid(void)
{
    /* The x32 ABI's getpid: another ABI's numbers go to the bad-arch action. */
    syscall(0x40000000 | SYS_getpid);
}
#endif

static void test_forbidden(void **state)
{
    (void)state;
    expect_signal(do_execve, SIGSYS);
    expect_signal(do_socket_inet, SIGSYS);
    expect_signal(do_socket_netlink, SIGSYS);
    expect_signal(do_mmap_exec, SIGSYS);
    expect_signal(do_mprotect_exec, SIGSYS);
    expect_signal(do_fcntl_dupfd, SIGSYS);
    expect_signal(do_open, SIGSYS);
    expect_signal(do_fork, SIGSYS);
    expect_signal(do_kill_parent, SIGSYS);
    expect_signal(do_tgkill_parent, SIGSYS);
#if defined(__x86_64__)
    expect_signal(do_x32_getpid, SIGSYS);
#endif
    assert_int_equal(access("/tmp/bridge-seccomp-created", F_OK), -1);
}

/* --seccomp=log: the same call is let through (and logged by the kernel), nothing dies. */
static void log_mode_child(void)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check(s >= 0);
    close(s);
}

static void test_log_mode(void **state)
{
    (void)state;
    int st = run_confined(BRIDGE_SECCOMP_LOG, log_mode_child);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    parent_pid = getpid();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_allowed, setup_allowed, teardown_allowed),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_forbidden),
        cmocka_unit_test(test_log_mode),
    };
    return cmocka_run_group_tests_name("bridge-seccomp", tests, NULL, NULL);
}
