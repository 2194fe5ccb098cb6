/* Is a process jailed? Read from /proc (jail-check.h). */
#include "jail-check.h"

#include <string.h>
#include <unistd.h>

/* What a jailed program may find in its environment (jail.c's allow-list; bwrap adds PWD). */
static const char *const env_allowed[] = {
    "PATH",          "PWD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "MALLOC_PERTURB_",
    "MALLOC_CHECK_", NULL};

/* The namespaces the jail gives each program its own of. */
static const char *const namespaces[] = {"mnt", "pid", "net", "ipc", "uts", "cgroup", "user", NULL};

static void why_add(GString *why, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void why_add(GString *why, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_string_append_vprintf(why, fmt, ap);
    va_end(ap);
    g_string_append_c(why, '\n');
}

/* The value of "Key:" in /proc/PID/status, trimmed; NULL if absent. */
static char *status_field(const char *status, const char *key)
{
    g_autofree char *want = g_strdup_printf("\n%s:", key);
    const char *p = strstr(status, want);
    const char *end;

    if (!p)
        return NULL;
    p += strlen(want);
    end = strchr(p, '\n');
    return g_strstrip(g_strndup(p, end ? (gsize)(end - p) : strlen(p)));
}

static void check_status(int pid, const SbxJailExpect *e, GString *why)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/status", pid);
    g_autofree char *status = NULL;
    g_autofree char *text = NULL;
    static const char *const zero[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", NULL};

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        why_add(why, "%s: unreadable", path);
        return;
    }
    status = g_strconcat("\n", text, NULL);
    g_autofree char *uid = status_field(status, "Uid");
    g_auto(GStrv) uids = g_strsplit_set(uid ? uid : "", " \t", -1);
    for (guint i = 0; uids[i]; i++) {
        if (!*uids[i])
            continue;
        /* As root: a uid of its own; otherwise ours, through its user namespace. */
        if (getuid() == 0 ? g_str_equal(uids[i], "0")
                          : g_ascii_strtoull(uids[i], NULL, 10) != getuid())
            why_add(why, "pid %d: Uid %s", pid, uid);
    }
    for (guint i = 0; zero[i]; i++) {
        g_autofree char *v = status_field(status, zero[i]);
        if (!v || strspn(v, "0") != strlen(v))
            why_add(why, "pid %d: %s %s, expected 0", pid, zero[i], v ? v : "(none)");
    }
    g_autofree char *nnp = status_field(status, "NoNewPrivs");
    if (g_strcmp0(nnp, "1") != 0)
        why_add(why, "pid %d: NoNewPrivs %s", pid, nnp ? nnp : "(none)");
    g_autofree char *seccomp = status_field(status, "Seccomp");
    if (e->seccomp && g_strcmp0(seccomp, "2") != 0)
        why_add(why, "pid %d: Seccomp %s, expected 2", pid, seccomp ? seccomp : "(none)");
}

static void check_namespaces(int pid, GString *why)
{
    for (guint i = 0; namespaces[i]; i++) {
        g_autofree char *theirs_path = g_strdup_printf("/proc/%d/ns/%s", pid, namespaces[i]);
        g_autofree char *ours_path = g_strdup_printf("/proc/self/ns/%s", namespaces[i]);
        g_autofree char *theirs = g_file_read_link(theirs_path, NULL);
        g_autofree char *ours = g_file_read_link(ours_path, NULL);
        if (!theirs || !ours || g_str_equal(theirs, ours))
            why_add(why, "pid %d: %s namespace is the host's (%s)", pid, namespaces[i],
                    theirs ? theirs : "unreadable");
    }
}

/* Its root holds /usr and little else: none of the host's /etc, /home, /root, /var. */
static void check_root(int pid, GString *why)
{
    static const char *const absent[] = {"etc/passwd", "etc/shadow", "home", "root",
                                         "var",        "boot",       NULL};
    g_autofree char *usr = g_strdup_printf("/proc/%d/root/usr/bin", pid);

    if (!g_file_test(usr, G_FILE_TEST_IS_DIR))
        why_add(why, "pid %d: no /usr/bin in its root", pid);
    for (guint i = 0; absent[i]; i++) {
        g_autofree char *p = g_strdup_printf("/proc/%d/root/%s", pid, absent[i]);
        if (g_file_test(p, G_FILE_TEST_EXISTS))
            why_add(why, "pid %d: its root has /%s", pid, absent[i]);
    }
}

static void check_environ(int pid, GString *why)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/environ", pid);
    g_autofree char *text = NULL;
    const char *extra = g_getenv("SANDBOX_JAIL_ENV");
    g_auto(GStrv) extras = g_strsplit(extra ? extra : "", ",", -1);
    gsize len = 0;

    if (!g_file_get_contents(path, &text, &len, NULL)) {
        why_add(why, "%s: unreadable", path);
        return;
    }
    for (const char *v = text; v < text + len; v += strlen(v) + 1) {
        g_autofree char *name = g_strndup(v, strcspn(v, "="));
        if (!g_strv_contains(env_allowed, name) &&
            !g_strv_contains((const char *const *)extras, name))
            why_add(why, "pid %d: environment has %s", pid, name);
    }
}

static void check_limits(int pid, GString *why)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/limits", pid);
    g_autofree char *text = NULL;

    if (!g_file_get_contents(path, &text, NULL, NULL) ||
        !g_regex_match_simple("^Max core file size +0 +0 ", text, G_REGEX_MULTILINE, 0))
        why_add(why, "pid %d: core dumps not off", pid);
}

/* Open files: devices, sockets, pipes, memfds, event fds; regular files only of the image. */
static void check_fds(int pid, const SbxJailExpect *e, GString *why)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/fd", pid);
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *p = g_build_filename(dir, name, NULL);
        g_autofree char *t = g_file_read_link(p, NULL);
        if (!t || g_str_has_prefix(t, "socket:") || g_str_has_prefix(t, "pipe:") ||
            g_str_has_prefix(t, "anon_inode:") || g_str_has_prefix(t, "/memfd:") ||
            g_str_has_prefix(t, "/dev/"))
            continue;
        if (e->image_dir && g_str_has_prefix(t, e->image_dir))
            continue;
        if (e->runtime_dir && g_str_has_prefix(t, e->runtime_dir))
            continue;
        why_add(why, "pid %d: fd %s is %s", pid, name, t);
    }
}

gboolean sbx_test_cgroups_writable(void)
{
    return geteuid() == 0 && (access("/sys/fs/cgroup/memory", W_OK) == 0 ||
                              access("/sys/fs/cgroup/cgroup.subtree_control", W_OK) == 0);
}

gboolean sbx_test_no_vm_cgroups(GString *why)
{
    g_autofree char *prefix = g_strdup_printf("vm-%d-", (int)getpid());
    g_autoptr(GDir) top = g_dir_open("/sys/fs/cgroup", 0, NULL);
    const char *hier;
    gsize before = why->len;

    while (top && (hier = g_dir_read_name(top))) {
        g_autofree char *dir = g_build_filename("/sys/fs/cgroup", hier, "sandbox", NULL);
        g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
        const char *name;
        while (d && (name = g_dir_read_name(d)))
            if (g_str_has_prefix(name, prefix))
                why_add(why, "cgroup %s/%s left", dir, name);
    }
    return why->len == before;
}

/*
 * In the VM's own cgroup for memory and pids: /proc/PID/cgroup names sandbox/vm-<pid>-<n> (our
 * view) on the v1 line of each controller, or on the v2 line ("0::") when there are no v1 ones.
 */
static void check_cgroup(int pid, GString *why)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/cgroup", pid);
    g_autofree char *text = NULL;
    static const char *const controllers[] = {"memory", "pids", NULL};

    if (!g_file_get_contents(path, &text, NULL, NULL)) {
        why_add(why, "%s: unreadable", path);
        return;
    }
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
    for (guint c = 0; controllers[c]; c++) {
        gboolean seen = FALSE, in_vm = FALSE;
        for (guint i = 0; lines[i]; i++) {
            g_auto(GStrv) f = g_strsplit(lines[i], ":", 3);
            if (g_strv_length(f) != 3)
                continue;
            g_auto(GStrv) names = g_strsplit(f[1], ",", -1);
            if (g_strv_contains((const char *const *)names, controllers[c])) {
                seen = TRUE;
                in_vm = strstr(f[2], "/sandbox/vm-") != NULL;
            }
        }
        if (!seen) /* v2 only: the unified line */
            in_vm = g_regex_match_simple("^0::.*/sandbox/vm-", text, G_REGEX_MULTILINE, 0);
        if (!in_vm)
            why_add(why, "pid %d: its %s cgroup is not the VM's: %s", pid, controllers[c], text);
    }
}

gboolean sbx_test_jailed(int pid, const SbxJailExpect *expect, GString *why)
{
    gsize before = why->len;

    if (pid <= 0) {
        why_add(why, "no pid");
        return FALSE;
    }
    check_status(pid, expect, why);
    check_namespaces(pid, why);
    check_root(pid, why);
    check_environ(pid, why);
    check_limits(pid, why);
    check_fds(pid, expect, why);
    if (expect->cgroup)
        check_cgroup(pid, why);
    return why->len == before;
}
