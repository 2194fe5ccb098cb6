/* One VM's cgroup: find a usable hierarchy, create, limit, join, kill, remove (see cgroup.h). */
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

GQuark sbx_cgroup_error_quark(void)
{
    return g_quark_from_static_string("sbx-cgroup-error-quark");
}

/* How often the teardown looks whether the cgroup is empty yet (and kills again). */
#define POLL_MS 10

/*
 * The largest control file read: cgroup.procs of a cgroup at SBX_CGROUP_PIDS_MAX holds at
 * most 4096 pids of <= 8 bytes; the other files read are a line.
 */
#define READ_MAX (64 * 1024)

/*
 * `sandbox/` is shared by the VMs of all agents and removed by whoever frees the last one; a
 * creation that loses that race (mkdir of its leaf: ENOENT) makes the parent again. Losing
 * it three times in a row needs three teardowns timed to the microsecond.
 */
#define PARENT_TRIES 3

/* v1: memory, pids, cpu. v2: one. */
#define MAX_DIRS 3

#define SANDBOX_DIR "sandbox"
/* v2: where the agent moves itself so that its own cgroup may enable controllers. */
#define AGENT_LEAF "agent"
#define V1_DEFAULT_ROOT "/sys/fs/cgroup"
#define V2_MOUNT "/sys/fs/cgroup"
#define V2_HYBRID_MOUNT "/sys/fs/cgroup/unified"

/* v1 cpu.shares: its default (weight 100) and the kernel's range. */
#define V1_SHARES_DEFAULT 1024
#define V1_SHARES_MIN 2
#define V1_SHARES_MAX 262144

struct SbxCgroup {
    int version;
    gboolean cpu;
    guint n;
    char *dirs[MAX_DIRS + 1]; /* leaf directories, NULL-terminated */
    char *parents[MAX_DIRS];  /* their sandbox/ parents */
    int procs[MAX_DIRS];      /* cgroup.procs of each, open for writing; -1 once closed */
    gboolean gone[MAX_DIRS];  /* directory removed */
};

typedef enum { TRY_OK, TRY_UNAVAILABLE, TRY_FAILED } TryResult;

static gboolean nonempty(const char *s)
{
    return s && *s;
}

/*
 * Write @text to @dir/@file, opened with @mode (O_TRUNC for a value, O_APPEND for a command).
 * The kernel ignores both; they make a fake tree of plain files (tests) show the value, or
 * each command. 0 or -errno.
 */
static int write_file(const char *dir, const char *file, const char *text, int mode)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);
    size_t len = strlen(text);
    ssize_t n;
    int fd = open(path, O_WRONLY | O_CLOEXEC | mode);
    int r;

    if (fd < 0)
        return -errno;
    n = write(fd, text, len);
    r = n < 0 ? -errno : (size_t)n == len ? 0 : -EIO;
    close(fd);
    return r;
}

/* Read @dir/@file (at most READ_MAX bytes) into *@ret, NUL-terminated. 0 or -errno. */
static int read_file(const char *dir, const char *file, char **ret)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);
    g_autoptr(GString) text = g_string_new(NULL);
    char buf[4096];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -errno;
    while ((n = read(fd, buf, sizeof buf)) > 0 && text->len <= READ_MAX)
        g_string_append_len(text, buf, n);
    close(fd);
    if (n < 0)
        return -errno;
    if (text->len > READ_MAX)
        return -EFBIG;
    *ret = g_string_free(g_steal_pointer(&text), FALSE);
    return 0;
}

/* TRUE if @word is one of the blank-separated words of @text. */
static gboolean has_word(const char *text, const char *word)
{
    g_auto(GStrv) words = g_strsplit_set(text, " \t\n", -1);

    return g_strv_contains((const char *const *)words, word);
}

/* Append the pids (> 0) listed in @dir/cgroup.procs to @pids. A missing file lists none. */
static void append_pids(const char *dir, GArray *pids)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) words = NULL;

    if (read_file(dir, "cgroup.procs", &text) < 0)
        return;
    words = g_strsplit_set(text, " \t\n", -1);
    for (char **w = words; *w; w++) {
        gint64 v;
        pid_t pid;

        if (!g_ascii_string_to_signed(*w, 10, 1, G_MAXINT, &v, NULL))
            continue; /* the kernel lists no 0 or junk; a fake tree might */
        pid = (pid_t)v;
        g_array_append_val(pids, pid);
    }
}

gboolean sbx_cgroup_name_valid(const char *name)
{
    size_t len = name ? strnlen(name, SBX_CGROUP_NAME_MAX + 1) : 0;

    if (len == 0 || len > SBX_CGROUP_NAME_MAX || name[0] == '.')
        return FALSE;
    for (size_t i = 0; i < len; i++) {
        if (!g_ascii_isalnum(name[i]) && name[i] != '.' && name[i] != '_' && name[i] != '-')
            return FALSE;
    }
    return TRUE;
}

void sbx_cgroup_limits_for_vm(SbxCgroupLimits *limits, guint64 guest_memory_bytes, guint vcpus,
                              gboolean tcg)
{
    guint pids = SBX_CGROUP_PIDS_QEMU_BASE + SBX_CGROUP_PIDS_QEMU_POOL + SBX_CGROUP_PIDS_HELPERS;

    limits->memory_bytes =
        guest_memory_bytes + SBX_CGROUP_MEMORY_OVERHEAD + (tcg ? SBX_CGROUP_MEMORY_TCG_CACHE : 0);
    limits->pids_max = MIN(pids + MAX(vcpus, 1), SBX_CGROUP_PIDS_MAX);
    limits->cpu_weight = SBX_CGROUP_CPU_WEIGHT_DEFAULT;
}

/* @in with its defaults filled in, checked. */
static gboolean resolve_limits(const SbxCgroupLimits *in, SbxCgroupLimits *out, GError **error)
{
    *out = *in;
    if (out->pids_max == 0)
        out->pids_max =
            SBX_CGROUP_PIDS_QEMU_BASE + SBX_CGROUP_PIDS_QEMU_POOL + SBX_CGROUP_PIDS_HELPERS + 1;
    if (out->cpu_weight == 0)
        out->cpu_weight = SBX_CGROUP_CPU_WEIGHT_DEFAULT;
    if (out->memory_bytes < SBX_CGROUP_MEMORY_MIN || out->pids_max < SBX_CGROUP_PIDS_MIN ||
        out->pids_max > SBX_CGROUP_PIDS_MAX || out->cpu_weight > SBX_CGROUP_CPU_WEIGHT_MAX) {
        g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID,
                    "cgroup limits out of range: memory %" G_GUINT64_FORMAT
                    " bytes (>= %" G_GUINT64_FORMAT "), pids %u (%d..%d), cpu weight %u (%d..%d)",
                    out->memory_bytes, SBX_CGROUP_MEMORY_MIN, out->pids_max, SBX_CGROUP_PIDS_MIN,
                    SBX_CGROUP_PIDS_MAX, out->cpu_weight, SBX_CGROUP_CPU_WEIGHT_MIN,
                    SBX_CGROUP_CPU_WEIGHT_MAX);
        return FALSE;
    }
    return TRUE;
}

static SbxCgroup *cgroup_alloc(int version)
{
    SbxCgroup *cg = g_new0(SbxCgroup, 1);

    cg->version = version;
    for (guint i = 0; i < MAX_DIRS; i++)
        cg->procs[i] = -1;
    return cg;
}

static void close_procs(SbxCgroup *cg)
{
    for (guint i = 0; i < cg->n; i++) {
        if (cg->procs[i] >= 0)
            close(cg->procs[i]);
        cg->procs[i] = -1;
    }
}

/* kill_listed(): no pidfd for this pid (a kernel or a tool without pidfd_open). */
#define NO_PIDFD (-2)

/* SIGKILL through @fd, or to @pid if there is no pidfd (then a recycled pid is possible). */
static void send_kill(int fd, pid_t pid)
{
    if (fd == NO_PIDFD || (pidfd_send_signal(fd, SIGKILL, NULL, 0) < 0 && errno == ENOSYS))
        kill(pid, SIGKILL);
}

/*
 * SIGKILL every process listed in @cg's cgroup.procs files except this one. A pid is signalled
 * through a pidfd opened first and only if it is still listed afterwards: a pid that exited
 * and was recycled by a process outside the cgroup in between is left alone. Returns how many
 * pids the second look listed (this process included, if someone put it in).
 */
static guint kill_listed(SbxCgroup *cg)
{
    g_autoptr(GArray) before = g_array_new(FALSE, FALSE, sizeof(pid_t));
    g_autoptr(GArray) after = g_array_new(FALSE, FALSE, sizeof(pid_t));
    g_autoptr(GArray) fds = g_array_new(FALSE, FALSE, sizeof(int));
    pid_t self = getpid();

    for (guint i = 0; i < cg->n; i++) {
        if (!cg->gone[i])
            append_pids(cg->dirs[i], before);
    }
    for (guint i = 0; i < before->len; i++) {
        pid_t pid = g_array_index(before, pid_t, i);
        int fd = pid == self ? -1 : pidfd_open(pid, 0);

        if (fd < 0 && pid != self && errno == ENOSYS)
            fd = NO_PIDFD;
        g_array_append_val(fds, fd);
    }
    for (guint i = 0; i < cg->n; i++) {
        if (!cg->gone[i])
            append_pids(cg->dirs[i], after);
    }
    for (guint i = 0; i < before->len; i++) {
        int fd = g_array_index(fds, int, i);
        pid_t pid = g_array_index(before, pid_t, i);

        if (fd == -1)
            continue;
        for (guint j = 0; j < after->len; j++) {
            if (g_array_index(after, pid_t, j) == pid) {
                send_kill(fd, pid);
                break;
            }
        }
        if (fd >= 0)
            close(fd);
    }
    return after->len;
}

/* rmdir each leaf not yet removed (retrying EBUSY until @deadline), then its parent if empty. */
static void remove_dirs(SbxCgroup *cg, gint64 deadline, GString *failures)
{
    for (guint i = 0; i < cg->n; i++) {
        while (!cg->gone[i]) {
            if (rmdir(cg->dirs[i]) == 0 || errno == ENOENT) {
                cg->gone[i] = TRUE;
            } else if (errno == EBUSY && g_get_monotonic_time() < deadline) {
                g_usleep(POLL_MS * 1000);
            } else {
                g_string_append_printf(failures, "%scannot remove %s: %s",
                                       failures->len ? "; " : "", cg->dirs[i], g_strerror(errno));
                break;
            }
        }
        /* Other VMs' cgroups may be in it (ENOTEMPTY, EBUSY): theirs to remove. */
        if (cg->gone[i])
            (void)rmdir(cg->parents[i]);
    }
}

gboolean sbx_cgroup_destroy(SbxCgroup *cg, GError **error)
{
    g_autoptr(GString) failures = g_string_new(NULL);
    gint64 deadline = g_get_monotonic_time() + SBX_CGROUP_KILL_WAIT_MS * G_TIME_SPAN_MILLISECOND;
    gboolean all_gone = TRUE;
    guint left;

    g_return_val_if_fail(cg != NULL, FALSE);
    close_procs(cg);
    for (guint i = 0; i < cg->n; i++)
        all_gone = all_gone && cg->gone[i];
    if (all_gone)
        return TRUE;
    /* Kills the whole subtree at once, new forks included (Linux >= 5.14). */
    if (cg->version == 2)
        (void)write_file(cg->dirs[0], "cgroup.kill", "1", O_TRUNC);
    while ((left = kill_listed(cg)) > 0 && g_get_monotonic_time() < deadline)
        g_usleep(POLL_MS * 1000);
    if (left > 0)
        g_string_append_printf(failures, "%u processes still in %s after %d ms", left, cg->dirs[0],
                               SBX_CGROUP_KILL_WAIT_MS);
    remove_dirs(cg, deadline, failures);
    if (failures->len == 0)
        return TRUE;
    g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED, "cgroup teardown: %s",
                failures->str);
    return FALSE;
}

/* How long a sweep waits for what it killed in a stale cgroup to leave it. */
#define SWEEP_WAIT_MS 1000

/* Kill what @dir (a stale cgroup) still lists, wait for it to empty (bounded), remove it. */
static void sweep_one(const char *dir)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)SWEEP_WAIT_MS * 1000;

    for (;;) {
        g_autoptr(GArray) pids = g_array_new(FALSE, FALSE, sizeof(pid_t));
        append_pids(dir, pids);
        for (guint i = 0; i < pids->len; i++)
            kill(g_array_index(pids, pid_t, i), SIGKILL);
        if (rmdir(dir) == 0 || errno == ENOENT || g_get_monotonic_time() > deadline)
            return;
        g_usleep(10000);
    }
}

void sbx_cgroup_sweep_stale(const SbxCgroup *cg, const char *prefix)
{
    for (guint i = 0; cg && i < cg->n; i++) {
        g_autofree char *parent = g_path_get_dirname(cg->dirs[i]);
        g_autoptr(GDir) d = g_dir_open(parent, 0, NULL);
        const char *name;

        while (d && (name = g_dir_read_name(d))) {
            char *end;
            gint64 pid;

            if (!g_str_has_prefix(name, prefix))
                continue;
            pid = g_ascii_strtoll(name + strlen(prefix), &end, 10);
            if (pid <= 0 || pid > G_MAXINT || *end != '-' || pid == getpid())
                continue;
            if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
                continue; /* its agent lives (or the pid was reused: left, not harmed) */
            g_autofree char *dir = g_build_filename(parent, name, NULL);
            sweep_one(dir);
        }
    }
}

void sbx_cgroup_free(SbxCgroup *cg)
{
    if (!cg)
        return;
    (void)sbx_cgroup_destroy(cg, NULL);
    for (guint i = 0; i < cg->n; i++) {
        g_free(cg->dirs[i]);
        g_free(cg->parents[i]);
    }
    g_free(cg);
}

/*
 * Make memory and pids (required) and cpu (if *@cpu; cleared when the kernel refuses it)
 * available to @dir's children. 0 or -errno.
 */
static int enable_controllers(const char *dir, gboolean *cpu)
{
    g_autofree char *now = NULL;
    int r = read_file(dir, "cgroup.subtree_control", &now);

    if (r < 0)
        return r;
    if (!has_word(now, "memory") || !has_word(now, "pids")) {
        r = write_file(dir, "cgroup.subtree_control", "+memory +pids\n", O_APPEND);
        if (r < 0)
            return r;
    }
    /* Separately: cpu can be refused (realtime threads) where memory and pids are not. */
    if (*cpu && !has_word(now, "cpu") &&
        write_file(dir, "cgroup.subtree_control", "+cpu\n", O_APPEND) < 0)
        *cpu = FALSE;
    return 0;
}

/*
 * Create @parent (it may exist; v2: with the controllers enabled for its children) and
 * @leaf in it. *@adopted: @leaf existed already. 0 or -errno, *@step and *@where saying what
 * failed.
 */
static int make_leaf(const char *parent, const char *leaf, int version, gboolean *cpu,
                     gboolean *adopted, const char **step, const char **where)
{
    for (int i = 0; i < PARENT_TRIES; i++) {
        struct stat st;
        int r;

        *step = "mkdir";
        *where = parent;
        if (mkdir(parent, 0755) < 0 && errno != EEXIST)
            return -errno;
        *step = "cgroup.subtree_control in";
        if (version == 2 && (r = enable_controllers(parent, cpu)) < 0) {
            if (r == -ENOENT && stat(parent, &st) < 0)
                continue;        /* removed by a concurrent teardown */
            (void)rmdir(parent); /* if it is empty: nothing of ours is left behind */
            return r;
        }
        *step = "mkdir";
        *where = leaf;
        *adopted = FALSE;
        if (mkdir(leaf, 0755) == 0)
            return 0;
        if (errno == EEXIST) {
            *adopted = TRUE;
            return lstat(leaf, &st) == 0 && S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
        }
        if (errno != ENOENT)
            return -errno;
    }
    return -ENOENT;
}

/*
 * Create `<base>/sandbox/<name>` and add it to @cg. TRY_UNAVAILABLE (the reason appended to
 * @why under @label) when the hierarchy cannot be used; TRY_FAILED when the name is in use.
 */
static TryResult add_leaf(SbxCgroup *cg, const char *base, const char *name, const char *label,
                          GString *why, GError **error)
{
    g_autofree char *parent = g_build_filename(base, SANDBOX_DIR, NULL);
    g_autofree char *leaf = g_build_filename(parent, name, NULL);
    g_autoptr(GArray) pids = g_array_new(FALSE, FALSE, sizeof(pid_t));
    gboolean adopted = FALSE;
    const char *step = NULL;
    const char *where = NULL;
    int r = make_leaf(parent, leaf, cg->version, &cg->cpu, &adopted, &step, &where);

    if (r < 0) {
        g_string_append_printf(why, "%s: %s %s: %s", label, step, where, g_strerror(-r));
        return TRY_UNAVAILABLE;
    }
    if (adopted)
        append_pids(leaf, pids);
    if (pids->len > 0) {
        g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_EXISTS,
                    "cgroup %s exists and has %u processes in it (pid %d, ...)", leaf, pids->len,
                    (int)g_array_index(pids, pid_t, 0));
        return TRY_FAILED;
    }
    cg->dirs[cg->n] = g_steal_pointer(&leaf);
    cg->parents[cg->n] = g_steal_pointer(&parent);
    cg->n++;
    return TRY_OK;
}

/* Write @value to @dir/@file; an @optional file the kernel does not have is skipped. */
static gboolean set_limit(const char *dir, const char *file, const char *value, gboolean optional,
                          GError **error)
{
    int r = write_file(dir, file, value, O_TRUNC);

    if (r == 0 || (r == -ENOENT && optional))
        return TRUE;
    g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED, "cannot set %s/%s to %s: %s", dir,
                file, value, g_strerror(-r));
    return FALSE;
}

static gboolean set_limits_v2(SbxCgroup *cg, const SbxCgroupLimits *l, GError **error)
{
    const char *dir = cg->dirs[0];
    g_autofree char *memory = g_strdup_printf("%" G_GUINT64_FORMAT, l->memory_bytes);
    g_autofree char *pids = g_strdup_printf("%u", l->pids_max);
    g_autofree char *weight = g_strdup_printf("%u", l->cpu_weight);

    /* No swap: a VM's memory stays in RAM, and its limit is the whole story. oom.group: an OOM
     * kill takes the whole VM (QEMU and bridge), not a piece that leaves the rest useless. */
    return set_limit(dir, "memory.max", memory, FALSE, error) &&
           set_limit(dir, "memory.swap.max", "0", TRUE, error) &&
           set_limit(dir, "memory.oom.group", "1", TRUE, error) &&
           set_limit(dir, "pids.max", pids, FALSE, error) &&
           (!cg->cpu || set_limit(dir, "cpu.weight", weight, FALSE, error));
}

static guint64 v1_shares(guint weight)
{
    guint64 shares = (guint64)weight * V1_SHARES_DEFAULT / SBX_CGROUP_CPU_WEIGHT_DEFAULT;

    return CLAMP(shares, V1_SHARES_MIN, V1_SHARES_MAX);
}

/* v1: dirs are memory, pids, then cpu if present. */
static gboolean set_limits_v1(SbxCgroup *cg, const SbxCgroupLimits *l, GError **error)
{
    g_autofree char *memory = g_strdup_printf("%" G_GUINT64_FORMAT, l->memory_bytes);
    g_autofree char *pids = g_strdup_printf("%u", l->pids_max);
    g_autofree char *shares = g_strdup_printf("%" G_GUINT64_FORMAT, v1_shares(l->cpu_weight));
    g_autofree char *memsw = g_build_filename(cg->dirs[0], "memory.memsw.limit_in_bytes", NULL);
    gboolean swap = access(memsw, F_OK) == 0;

    /* memsw (memory + swap) must stay >= the memory limit at every step, also in a cgroup
     * taken over with other limits: lift it, set the limit, then bring it down to the same. */
    return (!swap || set_limit(cg->dirs[0], "memory.memsw.limit_in_bytes", "-1", FALSE, error)) &&
           set_limit(cg->dirs[0], "memory.limit_in_bytes", memory, FALSE, error) &&
           (!swap || set_limit(cg->dirs[0], "memory.memsw.limit_in_bytes", memory, FALSE, error)) &&
           set_limit(cg->dirs[1], "pids.max", pids, FALSE, error) &&
           (!cg->cpu || set_limit(cg->dirs[2], "cpu.shares", shares, FALSE, error));
}

/*
 * The lowest fd number a cgroup.procs fd may have. A spawn puts the child's fds in place (3, 4,
 * ... up to the low tens) before its setup writes to these, so one of ours at such a number
 * would be overwritten first and the join would write into the wrong file (seen: fd 9).
 */
#define PROCS_FD_MIN 100

/* Open each cgroup.procs for sbx_cgroup_join_self() in a child. */
static gboolean open_procs(SbxCgroup *cg, GError **error)
{
    for (guint i = 0; i < cg->n; i++) {
        g_autofree char *path = g_build_filename(cg->dirs[i], "cgroup.procs", NULL);
        int fd = open(path, O_WRONLY | O_CLOEXEC);

        cg->procs[i] = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, PROCS_FD_MIN);
        if (fd >= 0)
            close(fd);
        if (cg->procs[i] < 0) {
            g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED, "cannot open %s: %s",
                        path, g_strerror(errno));
            return FALSE;
        }
    }
    return TRUE;
}

/* Limits and procs fds on a freshly added @cg; on failure it is destroyed (TRY_FAILED). */
static TryResult finish(SbxCgroup *cg, const SbxCgroupLimits *l, SbxCgroup **ret, GError **error)
{
    gboolean ok = cg->version == 2 ? set_limits_v2(cg, l, error) : set_limits_v1(cg, l, error);

    if (ok && open_procs(cg, error)) {
        *ret = cg;
        return TRY_OK;
    }
    sbx_cgroup_free(cg);
    return TRY_FAILED;
}

/* TRUE if @path is on a file system of type @magic. */
static gboolean fs_is(const char *path, long magic)
{
    struct statfs st;

    return statfs(path, &st) == 0 && (long)st.f_type == magic;
}

/* This process's cgroup v2 path ("0::/a/b" in /proc/self/cgroup), or NULL. */
static char *own_v2_path(void)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;

    if (read_file("/proc/self", "cgroup", &text) < 0)
        return NULL;
    lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        if (g_str_has_prefix(*l, "0::/") && !g_str_has_suffix(*l, " (deleted)"))
            return g_strdup(*l + 3);
    }
    return NULL;
}

/*
 * The v2 directory to put sandbox/ in: $SANDBOX_CGROUP_ROOT, else this process's own cgroup
 * (*@own) on the v2 mount (pure v2, else the hybrid layout's unified/). NULL: reason in @why.
 */
static char *v2_base(gboolean *own, GString *why)
{
    const char *root = g_getenv("SANDBOX_CGROUP_ROOT");
    const char *mount = fs_is(V2_MOUNT, CGROUP2_SUPER_MAGIC)          ? V2_MOUNT
                        : fs_is(V2_HYBRID_MOUNT, CGROUP2_SUPER_MAGIC) ? V2_HYBRID_MOUNT
                                                                      : NULL;
    g_autofree char *path = NULL;
    g_autofree char *joined = NULL;

    *own = !nonempty(root);
    if (!*own)
        return g_strdup(root);
    if (!mount) {
        g_string_append(why, "v2: not mounted at " V2_MOUNT " or " V2_HYBRID_MOUNT);
        return NULL;
    }
    path = own_v2_path();
    if (!path) {
        g_string_append(why, "v2: no live 0:: line in /proc/self/cgroup");
        return NULL;
    }
    /* Moved there by move_self() (this process, or the agent that started it): the base is
     * the cgroup above, whose controllers are enabled already. */
    if (g_str_has_suffix(path, "/" AGENT_LEAF))
        path[strlen(path) - strlen("/" AGENT_LEAF)] = '\0';
    joined = g_build_filename(mount, path, NULL);
    return g_canonicalize_filename(joined, NULL);
}

/* Move this process into @base/agent, so that @base has no processes of its own. */
static int move_self(const char *base)
{
    g_autofree char *leaf = g_build_filename(base, AGENT_LEAF, NULL);
    g_autofree char *pid = g_strdup_printf("%d\n", (int)getpid());

    if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
        return -errno;
    return write_file(leaf, "cgroup.procs", pid, O_APPEND);
}

/*
 * Memory and pids (and cpu) for the children of @base. A cgroup with processes in it may not
 * hand controllers to children (EBUSY, the "no internal processes" rule): if it is our own,
 * this process moves into @base/agent first, as systemd's delegation rules ask.
 */
static int v2_prepare(const char *base, gboolean own, gboolean *cpu)
{
    int r = enable_controllers(base, cpu);

    if (r == -EBUSY && own && move_self(base) == 0)
        r = enable_controllers(base, cpu);
    return r;
}

static TryResult try_v2(const char *name, const SbxCgroupLimits *l, SbxCgroup **ret, GString *why,
                        GError **error)
{
    gboolean own = FALSE;
    g_autofree char *base = v2_base(&own, why);
    g_autofree char *controllers = NULL;
    g_autofree char *label = NULL;
    SbxCgroup *cg;
    int r;

    if (!base)
        return TRY_UNAVAILABLE;
    label = g_strdup_printf("v2 %s", base);
    r = read_file(base, "cgroup.controllers", &controllers);
    if (r < 0) {
        g_string_append_printf(why, "%s: cgroup.controllers: %s", label, g_strerror(-r));
        return TRY_UNAVAILABLE;
    }
    g_strstrip(controllers);
    if (!has_word(controllers, "memory") || !has_word(controllers, "pids")) {
        g_string_append_printf(why,
                               "%s: no memory and pids controllers (cgroup.controllers: \"%s\")",
                               label, controllers);
        return TRY_UNAVAILABLE;
    }
    cg = cgroup_alloc(2);
    cg->cpu = has_word(controllers, "cpu");
    r = v2_prepare(base, own, &cg->cpu);
    if (r < 0) {
        g_string_append_printf(why, "%s: cannot enable controllers in cgroup.subtree_control: %s%s",
                               label, g_strerror(-r),
                               r == -EBUSY ? " (it has other processes: delegate an empty subtree "
                                             "or set SANDBOX_CGROUP_ROOT)"
                                           : "");
        sbx_cgroup_free(cg);
        return TRY_UNAVAILABLE;
    }
    switch (add_leaf(cg, base, name, label, why, error)) {
    case TRY_OK:
        return finish(cg, l, ret, error);
    case TRY_UNAVAILABLE:
        sbx_cgroup_free(cg);
        return TRY_UNAVAILABLE;
    default:
        sbx_cgroup_free(cg);
        return TRY_FAILED;
    }
}

/* The v1 hierarchy at @dir is there and writable; else the reason in @why. */
static gboolean v1_usable(const char *dir, gboolean check_fs, GString *why)
{
    if (check_fs && !fs_is(dir, CGROUP_SUPER_MAGIC)) {
        g_string_append_printf(why, "v1: %s is not a cgroup v1 mount", dir);
        return FALSE;
    }
    if (access(dir, W_OK) < 0) {
        g_string_append_printf(why, "v1: %s: %s", dir, g_strerror(errno));
        return FALSE;
    }
    return TRUE;
}

static TryResult try_v1(const char *name, const SbxCgroupLimits *l, SbxCgroup **ret, GString *why,
                        GError **error)
{
    static const char *const controllers[] = {"memory", "pids", "cpu"};
    const char *env = g_getenv("SANDBOX_CGROUP_V1_ROOT");
    const char *prefix = nonempty(env) ? env : V1_DEFAULT_ROOT;
    g_autoptr(GString) ignored = g_string_new(NULL);
    SbxCgroup *cg = cgroup_alloc(1);
    TryResult r = TRY_OK;

    for (guint i = 0; i < G_N_ELEMENTS(controllers); i++) {
        g_autofree char *dir = g_build_filename(prefix, controllers[i], NULL);
        g_autofree char *label = g_strdup_printf("v1 %s", dir);
        gboolean cpu = i == 2; /* optional: without it, no weight */

        if (!v1_usable(dir, !nonempty(env), cpu ? ignored : why)) {
            r = cpu ? TRY_OK : TRY_UNAVAILABLE;
            break;
        }
        r = add_leaf(cg, dir, name, label, cpu ? ignored : why, error);
        if (cpu && r != TRY_FAILED) {
            cg->cpu = r == TRY_OK;
            r = TRY_OK;
        }
        if (r != TRY_OK)
            break;
    }
    if (r == TRY_OK)
        return finish(cg, l, ret, error);
    sbx_cgroup_free(cg);
    return r;
}

SbxCgroup *sbx_cgroup_new(const char *name, const SbxCgroupLimits *limits, GError **error)
{
    g_autoptr(GString) why = g_string_new(NULL);
    gboolean v2_set = nonempty(g_getenv("SANDBOX_CGROUP_ROOT"));
    gboolean v1_set = nonempty(g_getenv("SANDBOX_CGROUP_V1_ROOT"));
    SbxCgroupLimits l;
    SbxCgroup *cg = NULL;
    TryResult r = TRY_UNAVAILABLE;

    g_return_val_if_fail(limits != NULL, NULL);
    if (!sbx_cgroup_name_valid(name)) {
        g_autofree char *shown = g_strescape(name ? name : "(null)", NULL);

        g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID,
                    "invalid cgroup name \"%.80s\": 1..%d of [A-Za-z0-9._-], not starting with '.'",
                    shown, SBX_CGROUP_NAME_MAX);
        return NULL;
    }
    if (!resolve_limits(limits, &l, error))
        return NULL;
    if (v2_set || !v1_set)
        r = try_v2(name, &l, &cg, why, error);
    if (r == TRY_UNAVAILABLE && (v1_set || !v2_set)) {
        if (why->len)
            g_string_append(why, "; ");
        r = try_v1(name, &l, &cg, why, error);
    }
    if (r == TRY_UNAVAILABLE)
        g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE, "%s", why->str);
    return cg;
}

int sbx_cgroup_join_self(const SbxCgroup *cg)
{
    static const char self[] = "0\n";

    if (!cg)
        return 0;
    for (guint i = 0; i < cg->n; i++) {
        if (cg->procs[i] < 0)
            return -EBADF;
        if (write(cg->procs[i], self, sizeof self - 1) < 0)
            return -errno;
    }
    return 0;
}

void sbx_cgroup_child_setup(gpointer data)
{
    static const char msg[] = "sandbox: cannot join the VM's cgroup; not starting it\n";

    if (sbx_cgroup_join_self(data) < 0) {
        ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);

        (void)n;
        _exit(SBX_CGROUP_JOIN_FAILED_STATUS);
    }
}

gboolean sbx_cgroup_attach(SbxCgroup *cg, pid_t pid, GError **error)
{
    char text[32];

    g_return_val_if_fail(cg != NULL, FALSE);
    if (pid <= 0) {
        g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID, "invalid pid %d", (int)pid);
        return FALSE;
    }
    snprintf(text, sizeof text, "%d\n", (int)pid);
    for (guint i = 0; i < cg->n; i++) {
        if (cg->procs[i] < 0 || write(cg->procs[i], text, strlen(text)) < 0) {
            g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED,
                        "cannot move pid %d into %s: %s", (int)pid, cg->dirs[i],
                        cg->procs[i] < 0 ? "the cgroup was destroyed" : g_strerror(errno));
            return FALSE;
        }
    }
    return TRUE;
}

int sbx_cgroup_version(const SbxCgroup *cg)
{
    g_return_val_if_fail(cg != NULL, 0);
    return cg->version;
}

const char *const *sbx_cgroup_dirs(const SbxCgroup *cg)
{
    g_return_val_if_fail(cg != NULL, NULL);
    return (const char *const *)cg->dirs;
}

gboolean sbx_cgroup_set_cpu_weight(SbxCgroup *cg, guint weight, GError **error)
{
    g_autofree char *value = NULL;

    g_return_val_if_fail(cg != NULL, FALSE);
    if (weight < SBX_CGROUP_CPU_WEIGHT_MIN || weight > SBX_CGROUP_CPU_WEIGHT_MAX) {
        g_set_error(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID,
                    "cpu weight %u out of range (%d..%d)", weight, SBX_CGROUP_CPU_WEIGHT_MIN,
                    SBX_CGROUP_CPU_WEIGHT_MAX);
        return FALSE;
    }
    if (!cg->cpu)
        return TRUE;
    if (cg->version == 2) {
        value = g_strdup_printf("%u", weight);
        return set_limit(cg->dirs[0], "cpu.weight", value, FALSE, error);
    }
    value = g_strdup_printf("%" G_GUINT64_FORMAT, v1_shares(weight));
    return set_limit(cg->dirs[2], "cpu.shares", value, FALSE, error);
}

gboolean sbx_cgroup_has_cpu_weight(const SbxCgroup *cg)
{
    g_return_val_if_fail(cg != NULL, FALSE);
    return cg->cpu;
}

gboolean sbx_cgroup_warn_once(const GError *error)
{
    static gint warned;

    if (!g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE))
        return FALSE;
    if (g_atomic_int_compare_and_exchange(&warned, 0, 1))
        g_printerr("sandbox: warning: no writable cgroup hierarchy (%s): VMs run without "
                   "memory/pids/CPU limits\n",
                   error->message);
    return TRUE;
}
