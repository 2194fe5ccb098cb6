/* The jail of a VM's processes: bubblewrap's argv, the uid, the child's last steps (jail.h). */
#include "jail.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vm-error.h"

/*
 * The uids a root agent gives its VMs, one each, when $SANDBOX_JAIL_UIDS does not say: 65536
 * uids from 0x70000000, above the ranges that Debian's /etc/subuid (100000 + 65536 a user) and
 * systemd (dynamic users below 65520, containers up to 0x6FFFFFFF) hand out, and below 2^31,
 * which some tools treat as negative. Nothing on the host may own files as one of them.
 */
#define JAIL_UIDS_DEFAULT_FIRST 0x70000000u
#define JAIL_UIDS_DEFAULT_COUNT 65536u

/* One lock file per uid in use (flock: released when the holder dies, however it dies). */
#define JAIL_LOCK_DIR "/run/sandbox-jail"

/*
 * QEMU needs a few hundred fds at most (vhost-user memory regions, ioeventfds per queue, its
 * thread pool's), the bridge a few per connection and at most 256 connections (bridge/):
 * 4096 leaves room for both and stops a compromised process from exhausting the host's.
 */
#define JAIL_NOFILE 4096

/*
 * Processes and threads of the jail's uid (as root only: without a uid of its own the count
 * would be the agent's user's). QEMU under TCG runs ~10 threads (vCPUs, RCU, I/O workers up to
 * 64 in its thread pool), the bridge 1, bwrap 1: 256 is room for that; a fork bomb from a
 * compromised QEMU stops there (the VM's pids cgroup is the other bound).
 */
#define JAIL_NPROC 256

/* Variables a jailed program may see when set: sanitizer and allocator knobs, never secrets. */
static const char *const env_allowed[] = {"ASAN_OPTIONS",    "UBSAN_OPTIONS", "LSAN_OPTIONS",
                                          "MALLOC_PERTURB_", "MALLOC_CHECK_", NULL};

struct SbxJail {
    gboolean enabled;
    gboolean root; /* the agent runs as root: switch to uid/gid before bwrap */
    uid_t uid;
    gid_t gid;
    int lock_fd;
    pid_t parent; /* the agent: the child's parent, to check after PR_SET_PDEATHSIG */
    char *bwrap;
    char **extra_env; /* names from $SANDBOX_JAIL_ENV */
    gid_t groups[1];  /* supplementary: the group of /dev/kvm when KVM is used */
    int n_groups;
};

/* $SANDBOX_JAIL_UIDS "FIRST-LAST" (inclusive), or the default range. */
static gboolean uid_range(guint32 *first, guint32 *count, GError **error)
{
    const char *v = g_getenv("SANDBOX_JAIL_UIDS");
    guint64 a, b;
    char *end;

    *first = JAIL_UIDS_DEFAULT_FIRST;
    *count = JAIL_UIDS_DEFAULT_COUNT;
    if (!v || !*v)
        return TRUE;
    a = g_ascii_strtoull(v, &end, 10);
    if (end == v || *end != '-')
        goto bad;
    v = end + 1;
    b = g_ascii_strtoull(v, &end, 10);
    if (end == v || *end || a < 1000 || b < a || b >= G_MAXINT32)
        goto bad;
    *first = (guint32)a;
    *count = (guint32)(b - a + 1);
    return TRUE;
bad:
    return sbx_vm_fail(
        error, SBX_VM_ERROR_JAIL,
        "SANDBOX_JAIL_UIDS='%s': expected FIRST-LAST, uids from 1000 to 2147483646 that "
        "nothing on this host uses",
        g_getenv("SANDBOX_JAIL_UIDS"));
}

/* The lock directory: created owner-only; refused if someone else could plant files in it. */
static int open_lock_dir(GError **error)
{
    struct stat st;
    int fd;

    if (mkdir(JAIL_LOCK_DIR, 0700) < 0 && errno != EEXIST) {
        sbx_vm_fail(error, SBX_VM_ERROR_JAIL, "cannot create %s: %s", JAIL_LOCK_DIR,
                    g_strerror(errno));
        return -1;
    }
    fd = open(JAIL_LOCK_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) < 0) {
        sbx_vm_fail(error, SBX_VM_ERROR_JAIL, "cannot open %s: %s", JAIL_LOCK_DIR,
                    g_strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (st.st_uid != 0 || (st.st_mode & 022)) {
        sbx_vm_fail(error, SBX_VM_ERROR_JAIL,
                    "%s must be owned by root and writable by nobody else (mode %o, owner %u)",
                    JAIL_LOCK_DIR, st.st_mode & 07777, (unsigned)st.st_uid);
        close(fd);
        return -1;
    }
    return fd;
}

/* A uid of the range that no other VM (of any agent on this host) holds; locked. */
static gboolean take_uid(SbxJail *jail, GError **error)
{
    guint32 first, count, start;
    int dir;

    if (!uid_range(&first, &count, error))
        return FALSE;
    dir = open_lock_dir(error);
    if (dir < 0)
        return FALSE;
    /* A random start: parallel agents rarely contend for the same files. */
    start = g_random_int_range(0, (gint32)MIN(count, (guint32)G_MAXINT32));
    for (guint32 i = 0; i < count; i++) {
        guint32 uid = first + (start + i) % count;
        char name[32];
        int fd;

        g_snprintf(name, sizeof name, "uid-%u.lock", uid);
        fd = openat(dir, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            jail->uid = uid;
            jail->gid = uid;
            jail->lock_fd = fd;
            close(dir);
            return TRUE;
        }
        close(fd);
    }
    close(dir);
    return sbx_vm_fail(error, SBX_VM_ERROR_JAIL,
                       "no free uid in %u-%u for the VM's jail: %u VMs run already", first,
                       first + count - 1, count);
}

/* $SANDBOX_JAIL_ENV: names of more variables to pass (tests, debugging). Never a secret. */
static gboolean extra_env(SbxJail *jail, GError **error)
{
    const char *v = g_getenv("SANDBOX_JAIL_ENV");

    if (!v || !*v)
        return TRUE;
    jail->extra_env = g_strsplit(v, ",", -1);
    for (char **n = jail->extra_env; *n; n++) {
        if (g_str_has_prefix(*n, "SANDBOX_SECRET_"))
            return sbx_vm_fail(error, SBX_VM_ERROR_JAIL,
                               "SANDBOX_JAIL_ENV: %s is a secret of the http tools; a VM's "
                               "processes never get one",
                               *n);
    }
    return TRUE;
}

SbxJail *sbx_jail_new(GError **error)
{
    const char *mode = g_getenv("SANDBOX_JAIL");
    g_autoptr(SbxJail) jail = g_new0(SbxJail, 1);

    jail->lock_fd = -1;
    jail->parent = getpid();
    jail->uid = getuid();
    jail->gid = getgid();
    if (mode && g_str_equal(mode, "off"))
        return g_steal_pointer(&jail);
    if (mode && *mode && !g_str_equal(mode, "on")) {
        sbx_vm_fail(error, SBX_VM_ERROR_JAIL,
                    "SANDBOX_JAIL='%s': expected \"on\" (the default) or \"off\"", mode);
        return NULL;
    }
    jail->enabled = TRUE;
    jail->bwrap = g_strdup(g_getenv("SANDBOX_BWRAP"));
    if (!jail->bwrap || !*jail->bwrap) {
        g_free(jail->bwrap);
        jail->bwrap = g_find_program_in_path("bwrap");
    }
    if (!jail->bwrap || !g_file_test(jail->bwrap, G_FILE_TEST_IS_EXECUTABLE)) {
        sbx_vm_fail(error, SBX_VM_ERROR_JAIL,
                    "the VM's jail needs bubblewrap (%s): apt-get install bubblewrap, or set "
                    "SANDBOX_BWRAP; SANDBOX_JAIL=off runs VMs unconfined",
                    jail->bwrap ? jail->bwrap : "bwrap is not in PATH");
        return NULL;
    }
    jail->root = geteuid() == 0;
    if (!extra_env(jail, error) || (jail->root && !take_uid(jail, error)))
        return NULL;
    return g_steal_pointer(&jail);
}

gboolean sbx_jail_enabled(const SbxJail *jail)
{
    return jail->enabled;
}

uid_t sbx_jail_uid(const SbxJail *jail)
{
    return jail->uid;
}

gboolean sbx_jail_own_dir(const SbxJail *jail, const char *dir, GError **error)
{
    if (!jail->enabled || !jail->root)
        return TRUE;
    if (chown(dir, jail->uid, jail->gid) < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_JAIL, "chown %s to the jail's uid %u: %s", dir,
                           (unsigned)jail->uid, g_strerror(errno));
    return TRUE;
}

/* Others may pass through @path (x), or it is missing/unreadable: FALSE. */
static gboolean others_pass(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && (st.st_mode & S_IXOTH);
}

gboolean sbx_jail_can_reach(const SbxJail *jail, const char *dir)
{
    g_autofree char *path = g_canonicalize_filename(dir, "/");
    gsize len = strlen(path);

    if (!jail->enabled || !jail->root)
        return TRUE;
    /* Every directory from / to @dir must let others through: bwrap runs as the jail's uid
     * when it binds @dir, and that uid owns nothing on the way. */
    if (!others_pass("/"))
        return FALSE;
    for (gsize i = 1; i <= len; i++) {
        if (i < len && path[i] != '/')
            continue;
        g_autofree char *prefix = g_strndup(path, i);
        if (!others_pass(prefix))
            return FALSE;
    }
    return TRUE;
}

static void add(GPtrArray *a, const char *s)
{
    g_ptr_array_add(a, g_strdup(s));
}

static void add3(GPtrArray *a, const char *opt, const char *x, const char *y)
{
    add(a, opt);
    add(a, x);
    if (y)
        add(a, y);
}

/* /lib, /lib64, /bin, /sbin as on the host: symlinks into /usr (merged /usr), else bound. */
static void add_top_dir(GPtrArray *a, const char *path)
{
    g_autofree char *target = g_file_read_link(path, NULL);

    if (target)
        add3(a, "--symlink", target, path);
    else if (g_file_test(path, G_FILE_TEST_IS_DIR))
        add3(a, "--ro-bind", path, path);
}

char **sbx_jail_argv(const SbxJail *jail, const SbxJailSpec *spec, const char *const *argv)
{
    GPtrArray *a = g_ptr_array_new();
    g_autofree char *binary = g_path_is_absolute(spec->binary)
                                  ? g_strdup(spec->binary)
                                  : g_find_program_in_path(spec->binary);
    g_autofree char *info = g_strdup_printf("%d", spec->info_fd);

    if (!jail->enabled) {
        for (guint i = 0; argv[i]; i++)
            add(a, argv[i]);
        g_ptr_array_add(a, NULL);
        return (char **)g_ptr_array_free(a, FALSE);
    }
    add(a, jail->bwrap);
    /* Namespaces: every one bwrap knows; no nested user namespaces inside. */
    add(a, "--unshare-user");
    add(a, "--unshare-ipc");
    add(a, "--unshare-pid");
    add(a, "--unshare-net");
    add(a, "--unshare-uts");
    add(a, "--unshare-cgroup");
    add(a, "--disable-userns");
    add3(a, "--hostname", "sandbox", NULL);
    /* Dies with us; no controlling terminal (TIOCSTI); the program is pid 1 of its namespace. */
    add(a, "--die-with-parent");
    add(a, "--new-session");
    add(a, "--as-pid-1");
    add3(a, "--info-fd", info, NULL);
    /* The root: a tmpfs with only this, made read-only at the end. */
    add3(a, "--ro-bind", "/usr", "/usr");
    add_top_dir(a, "/lib");
    add_top_dir(a, "/lib64");
    add_top_dir(a, "/bin");
    add_top_dir(a, "/sbin");
    add3(a, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache");
    add3(a, "--dev", "/dev", NULL);
    for (guint i = 0; spec->devices && spec->devices[i]; i++)
        add3(a, "--dev-bind", spec->devices[i], spec->devices[i]);
    add3(a, "--proc", "/proc", NULL);
    if (binary && !g_str_has_prefix(binary, "/usr/"))
        add3(a, "--ro-bind", binary, binary);
    /* -try: a missing image file is QEMU's to report, with its own words. */
    for (guint i = 0; spec->ro_paths && spec->ro_paths[i]; i++)
        add3(a, "--ro-bind-try", spec->ro_paths[i], spec->ro_paths[i]);
    if (spec->runtime_dir)
        add3(a, "--bind", spec->runtime_dir, spec->runtime_dir);
    add3(a, "--remount-ro", "/", NULL);
    add3(a, "--chdir", "/", NULL);
    add(a, "--");
    add(a, binary ? binary : spec->binary);
    for (guint i = 1; argv[i]; i++)
        add(a, argv[i]);
    g_ptr_array_add(a, NULL);
    return (char **)g_ptr_array_free(a, FALSE);
}

char **sbx_jail_envp(const SbxJail *jail)
{
    GPtrArray *a = g_ptr_array_new();

    /* The programs are given as absolute paths; PATH only for what they might run (nothing). */
    add(a, "PATH=/usr/bin:/bin");
    for (guint i = 0; env_allowed[i]; i++) {
        const char *v = g_getenv(env_allowed[i]);
        if (v)
            g_ptr_array_add(a, g_strdup_printf("%s=%s", env_allowed[i], v));
    }
    for (guint i = 0; jail->extra_env && jail->extra_env[i]; i++) {
        const char *v = g_getenv(jail->extra_env[i]);
        if (v && *jail->extra_env[i])
            g_ptr_array_add(a, g_strdup_printf("%s=%s", jail->extra_env[i], v));
    }
    g_ptr_array_add(a, NULL);
    return (char **)g_ptr_array_free(a, FALSE);
}

gboolean sbx_jail_add_device(SbxJail *jail, const char *path, GError **error)
{
    struct stat st;

    if (!jail->enabled || !jail->root)
        return TRUE;
    if (stat(path, &st) < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_JAIL, "%s: %s", path, g_strerror(errno));
    /* Its group (kvm) for the jail's uid: one device at most is ever needed. */
    if (jail->n_groups > 0 && jail->groups[0] != st.st_gid)
        return sbx_vm_fail(error, SBX_VM_ERROR_JAIL, "%s: a second device group for the jail",
                           path);
    jail->groups[0] = st.st_gid;
    jail->n_groups = 1;
    return TRUE;
}

void sbx_jail_child_setup(const SbxJail *jail)
{
    struct rlimit core = {0, 0};
    struct rlimit nofile = {JAIL_NOFILE, JAIL_NOFILE};
    struct rlimit nproc = {JAIL_NPROC, JAIL_NPROC};

    if (!jail->enabled)
        return;
    if (setrlimit(RLIMIT_CORE, &core) < 0 || setrlimit(RLIMIT_NOFILE, &nofile) < 0 ||
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        raise(SIGKILL);
    if (!jail->root)
        return;
    if (setrlimit(RLIMIT_NPROC, &nproc) < 0 || setgroups(jail->n_groups, jail->groups) < 0 ||
        setresgid(jail->gid, jail->gid, jail->gid) < 0 ||
        setresuid(jail->uid, jail->uid, jail->uid) < 0)
        raise(SIGKILL);
    /* A change of credentials clears the parent-death signal (child.c set it): set it again,
     * or bwrap would outlive a killed agent. If the parent died meanwhile, die now. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != jail->parent)
        raise(SIGKILL);
}

void sbx_jail_free(SbxJail *jail)
{
    if (!jail)
        return;
    if (jail->lock_fd >= 0)
        close(jail->lock_fd);
    g_free(jail->bwrap);
    g_strfreev(jail->extra_env);
    g_free(jail);
}
