/*
 * The devices each profile's QEMU exposes, against the list in devices.txt (next to this file):
 * a device that is not on its profile's list fails the test, and so does a listed device that
 * no longer appears (the list must say what is there, and why).
 *
 * No guest boots: for each profile this starts QEMU with the exact command line the VM layer
 * builds (sbx_qemu_argv) plus -S (stopped before the first instruction), in both layouts a VM
 * can have: a cold boot, and a snapshot's (a template, and a restore once vsock is hot-plugged
 * again), and asks over QMP for the composition tree (`info qom-tree`: every object, the CPU
 * and its local APIC included, not only devices on a bus) and for the names of all device
 * types (`qom-list-types implements=device`). The devices are the objects of those types.
 * The real bridge serves vsock-bridge profiles (vhost-user devices need their backend to be
 * created). A vsock-kernel profile is skipped where /dev/vhost-vsock is missing.
 * Exit 77 (skipped) when QEMU, the guest image (-kernel must load) or the bridge are missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonfile.h"
#include "base/paths.h"
#include "profile-private.h"
#include "protocol/json.h"
#include "qemu.h"

#ifndef SBX_SOURCE_DIR
#error "SBX_SOURCE_DIR must be defined (meson)"
#endif
#define DEVICES_FILE SBX_SOURCE_DIR "/tests/vm/devices.txt"

/* QEMU's start to its greeting and each reply: a stopped VM answers at once; a loaded host. */
#define REPLY_TIMEOUT_MS 20000

/* The bridge's READY, as the VM layer allows it (vm-start.c). */
#define BRIDGE_READY_TIMEOUT_MS 10000

/* The largest reply: the qom-tree of a microvm (24 virtio-mmio transports) is ~100 KB. */
#define REPLY_MAX (8 * 1024 * 1024)

/* QEMU's fds (as in vm-start.c, any free numbers would do). */
#define QMP_FD 3
#define CONSOLE_FD 4
#define BRIDGE_READY_FD 3

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "FAIL: ");                                                                 \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        return FALSE;                                                                              \
    } while (0)

/* ---- expected lists ------------------------------------------------------------------------ */

/* Profile name -> GHashTable of device type names (the set). */
static GHashTable *load_expected(GError **error)
{
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    g_autoptr(GHashTable) all =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_hash_table_unref);
    GHashTable *cur = NULL;

    if (!g_file_get_contents(DEVICES_FILE, &text, NULL, error))
        return NULL;
    lines = g_strsplit(text, "\n", -1);
    for (guint i = 0; lines[i]; i++) {
        char *l = lines[i], *hash = strchr(l, '#');

        if (hash)
            *hash = '\0';
        g_strstrip(l);
        if (!*l)
            continue;
        if (l[0] == '[' && l[strlen(l) - 1] == ']') {
            g_autofree char *name = g_strndup(l + 1, strlen(l) - 2);
            cur = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
            g_hash_table_replace(all, g_steal_pointer(&name), cur);
        } else if (!cur || strchr(l, ' ') || strchr(l, '\t')) {
            g_set_error(error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                        "%s:%u: expected [profile] or one device type with a # comment",
                        DEVICES_FILE, i + 1);
            return NULL;
        } else {
            g_hash_table_add(cur, g_strdup(l));
        }
    }
    return g_steal_pointer(&all);
}

/* ---- processes ----------------------------------------------------------------------------- */

typedef struct {
    GPid qemu, bridge;
    int qmp, console; /* our ends */
    char *dir;        /* runtime dir: the bridge's sockets, virtio-serial's socket */
} Run;

static void kill_reap(GPid *pid)
{
    if (*pid <= 0)
        return;
    kill(-*pid, SIGKILL); /* its own process group (spawn_setup) */
    kill(*pid, SIGKILL);
    while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
        ;
    *pid = 0;
}

static void run_clear(Run *r)
{
    kill_reap(&r->qemu);
    kill_reap(&r->bridge);
    if (r->qmp >= 0)
        close(r->qmp);
    if (r->console >= 0)
        close(r->console);
    r->qmp = r->console = -1;
    if (r->dir) {
        g_autoptr(GDir) d = g_dir_open(r->dir, 0, NULL);
        const char *n;
        while (d && (n = g_dir_read_name(d))) {
            g_autofree char *p = g_build_filename(r->dir, n, NULL);
            unlink(p);
        }
        rmdir(r->dir);
        g_clear_pointer(&r->dir, g_free);
    }
}

/* In the child: a process group of its own, killed with us. */
static void spawn_setup(gpointer data)
{
    (void)data;
    setpgid(0, 0);
}

/* Spawn @argv with @src fds at @dst, stderr to ours, stdin/stdout /dev/null. */
static gboolean spawn(const char *const *argv, const int *src, const int *dst, guint n,
                      GPid *ret_pid, GError **error)
{
    return g_spawn_async_with_pipes_and_fds(
        NULL, argv, NULL,
        G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL, spawn_setup,
        NULL, -1, -1, -1, src, dst, n, ret_pid, NULL, NULL, NULL, error);
}

/* Read from @fd until @buf holds a line; TRUE with the line (without "\r\n") in @ret_line. */
static gboolean read_line(int fd, GString *buf, char **ret_line)
{
    for (;;) {
        char *nl = memchr(buf->str, '\n', buf->len);
        char chunk[65536];
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;

        if (nl) {
            gsize len = (gsize)(nl - buf->str);
            *ret_line = g_strndup(buf->str, len > 0 && nl[-1] == '\r' ? len - 1 : len);
            g_string_erase(buf, 0, (gssize)len + 1);
            return TRUE;
        }
        if (buf->len > REPLY_MAX || poll(&p, 1, REPLY_TIMEOUT_MS) <= 0)
            return FALSE;
        n = read(fd, chunk, sizeof chunk);
        if (n <= 0)
            return FALSE;
        g_string_append_len(buf, chunk, n);
    }
}

/* Send @cmd and return its reply's "return" member as JSON (events skipped); NULL on error. */
static cJSON *qmp_call(int fd, GString *buf, const char *cmd)
{
    g_autofree char *line = g_strconcat(cmd, "\n", NULL);

    if (write(fd, line, strlen(line)) != (ssize_t)strlen(line))
        return NULL;
    for (;;) {
        g_autofree char *reply = NULL;
        cJSON *root, *ret;

        if (!read_line(fd, buf, &reply))
            return NULL;
        root = sbx_json_parse(reply, strlen(reply), 64, NULL);
        if (!root)
            return NULL;
        if (cJSON_GetObjectItemCaseSensitive(root, "event")) {
            cJSON_Delete(root);
            continue;
        }
        ret = cJSON_DetachItemFromObjectCaseSensitive(root, "return");
        if (!ret)
            fprintf(stderr, "QMP %s: %s\n", cmd, reply);
        cJSON_Delete(root);
        return ret;
    }
}

/* The bridge, as vm-start.c starts it; wait for its READY. */
static gboolean start_bridge(Run *r, const char *vhost, GError **error)
{
    g_autofree char *bridge = sbx_paths_bridge();
    g_autofree char *uds = g_build_filename(r->dir, "vsock.sock", NULL);
    g_autofree char *ready_fd = g_strdup_printf("%d", BRIDGE_READY_FD);
    const char *argv[] = {bridge, "--vhost-user", vhost,    "--uds", uds, "--guest-cid",
                          "3",    "--ready-fd",   ready_fd, NULL};
    int ready[2], dst = BRIDGE_READY_FD;
    char got[8] = "";
    struct pollfd p;
    gboolean ok;

    if (pipe2(ready, O_CLOEXEC) < 0)
        return FALSE;
    ok = spawn(argv, &ready[1], &dst, 1, &r->bridge, error);
    close(ready[1]);
    p = (struct pollfd){ready[0], POLLIN, 0};
    if (ok && (poll(&p, 1, BRIDGE_READY_TIMEOUT_MS) <= 0 || read(ready[0], got, 6) != 6 ||
               memcmp(got, "READY\n", 6) != 0)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_BRIDGE, "the bridge did not say READY");
        ok = FALSE;
    }
    close(ready[0]);
    return ok;
}

static gboolean start_qemu(Run *r, const SbxProfile *p, const SbxImage *image, gboolean snapshot,
                           GError **error)
{
    g_autofree char *qemu = sbx_paths_qemu();
    g_autofree char *vhost = g_build_filename(r->dir, "vhost-user.sock", NULL);
    g_autofree char *serial = g_build_filename(r->dir, "agent.sock", NULL);
    SbxQemuRuntime rt = {.qemu = qemu,
                         .accel = SBX_ACCEL_TCG,
                         .tsc_khz = 2000000, /* never read: the guest does not run */
                         .qmp_fd = QMP_FD,
                         .console_fd = CONSOLE_FD,
                         .vhost_user_path = vhost,
                         .serial_path = serial,
                         .guest_cid = 3,
                         .snapshot_layout = snapshot};
    g_auto(GStrv) built = NULL;
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    int qmp[2], con[2], src[2];
    const int dst[2] = {QMP_FD, CONSOLE_FD};
    gboolean ok;

    if (p->channel == SBX_CHANNEL_VSOCK_BRIDGE && !start_bridge(r, vhost, error))
        return FALSE;
    built = sbx_qemu_argv(p, image, &rt);
    for (char **a = built; *a; a++)
        g_ptr_array_add(argv, *a);
    g_ptr_array_add(argv, "-S");
    g_ptr_array_add(argv, NULL);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qmp) < 0)
        return FALSE;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, con) < 0) {
        close(qmp[0]);
        close(qmp[1]);
        return FALSE;
    }
    src[0] = qmp[1];
    src[1] = con[1];
    ok = spawn((const char *const *)argv->pdata, src, dst, 2, &r->qemu, error);
    close(qmp[1]);
    close(con[1]);
    r->qmp = qmp[0];
    r->console = con[0];
    return ok;
}

/* ---- the devices of one QEMU --------------------------------------------------------------- */

/* The type in a qom-tree line "  /name (type)". */
static char *line_type(const char *line)
{
    const char *open = strrchr(line, '(');
    gsize len = strlen(line);

    if (!open || len < 2 || line[len - 1] != ')')
        return NULL;
    return g_strndup(open + 1, (gsize)(line + len - 1 - (open + 1)));
}

/* Device type name -> count of such objects in the QEMU of @r. */
static GHashTable *query_devices(Run *r, GError **error)
{
    g_autoptr(GString) buf = g_string_new(NULL);
    g_autofree char *greeting = NULL;
    g_autoptr(cJSON) caps = NULL, types = NULL, tree = NULL;
    g_autoptr(GHashTable) device_types = g_hash_table_new(g_str_hash, g_str_equal);
    GHashTable *found = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    g_auto(GStrv) lines = NULL;
    const cJSON *t;

    if (!read_line(r->qmp, buf, &greeting) ||
        !(caps = qmp_call(r->qmp, buf, "{\"execute\": \"qmp_capabilities\"}")) ||
        !(types = qmp_call(r->qmp, buf,
                           "{\"execute\": \"qom-list-types\", \"arguments\": "
                           "{\"implements\": \"device\", \"abstract\": false}}")) ||
        !(tree = qmp_call(r->qmp, buf,
                          "{\"execute\": \"human-monitor-command\", \"arguments\": "
                          "{\"command-line\": \"info qom-tree\"}}")) ||
        !cJSON_IsString(tree)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_QMP, "QMP: no greeting or reply");
        g_hash_table_unref(found);
        return NULL;
    }
    cJSON_ArrayForEach(t, types)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (cJSON_IsString(name))
            g_hash_table_add(device_types, name->valuestring);
    }
    lines = g_strsplit(tree->valuestring, "\n", -1);
    for (guint i = 0; lines[i]; i++) {
        g_autofree char *type = line_type(g_strstrip(lines[i]));
        if (type && g_hash_table_contains(device_types, type)) {
            guint n = GPOINTER_TO_UINT(g_hash_table_lookup(found, type));
            g_hash_table_replace(found, g_steal_pointer(&type), GUINT_TO_POINTER(n + 1));
        }
    }
    return found;
}

static gint cmp_str(gconstpointer a, gconstpointer b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The devices of @p in one layout, added (with counts) to @seen; FALSE on failure. */
static gboolean check_layout(const SbxProfile *p, const SbxImage *image, gboolean snapshot,
                             GHashTable *expected, GHashTable *seen)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GHashTable) found = NULL;
    g_autofree const char **names = NULL;
    const char *layout = snapshot ? "snapshot layout" : "cold boot";
    Run r = {.qmp = -1, .console = -1};
    gboolean ok = TRUE;
    guint n;

    r.dir = g_dir_make_tmp("sbx-devices-XXXXXX", &error);
    if (!r.dir || !start_qemu(&r, p, image, snapshot, &error) ||
        !(found = query_devices(&r, &error))) {
        fprintf(stderr, "FAIL: %s, %s: %s\n", p->name, layout,
                error ? error->message : "cannot start QEMU");
        run_clear(&r);
        return FALSE;
    }
    run_clear(&r);
    names = (const char **)g_hash_table_get_keys_as_array(found, &n);
    qsort(names, n, sizeof *names, cmp_str);
    printf("%s, %s:", p->name, layout);
    for (guint i = 0; i < n; i++) {
        guint count = GPOINTER_TO_UINT(g_hash_table_lookup(found, names[i]));
        printf(count > 1 ? " %s x%u" : " %s", names[i], count);
        g_hash_table_add(seen, g_strdup(names[i]));
    }
    printf("\n");
    for (guint i = 0; i < n; i++) {
        if (!g_hash_table_contains(expected, names[i])) {
            fprintf(stderr,
                    "FAIL: %s, %s: device %s is not on the profile's list in %s (turn it off, "
                    "or add it with the reason it is needed)\n",
                    p->name, layout, names[i], DEVICES_FILE);
            ok = FALSE;
        }
    }
    return ok;
}

/* Listed devices that appear in neither layout: the list is out of date. */
static gboolean check_stale(const char *name, GHashTable *expected, GHashTable *seen)
{
    GHashTableIter it;
    gpointer key;
    gboolean ok = TRUE;

    g_hash_table_iter_init(&it, expected);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        if (!g_hash_table_contains(seen, key)) {
            fprintf(stderr, "FAIL: %s: %s is listed in %s but QEMU has no such device\n", name,
                    (const char *)key, DEVICES_FILE);
            ok = FALSE;
        }
    }
    return ok;
}

static gboolean check_profile(const char *name, const SbxImage *image, GHashTable *all)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxProfile) p = sbx_profile_load_named(NULL, name, &error);
    g_autoptr(GHashTable) seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    GHashTable *expected;
    gboolean ok;

    if (!p)
        FAIL("%s", error->message);
    expected = g_hash_table_lookup(all, name);
    if (!expected)
        FAIL("profile %s has no [%s] list in %s", name, name, DEVICES_FILE);
    /* Ours now; what is left in @all at the end names no profile. */
    expected = g_hash_table_ref(expected);
    g_hash_table_remove(all, name);
    if (p->channel == SBX_CHANNEL_VSOCK_KERNEL && access("/dev/vhost-vsock", R_OK | W_OK) < 0) {
        printf("%s: skipped: channel vsock-kernel needs /dev/vhost-vsock, which this host "
               "lacks; its list is not checked\n",
               name);
        g_hash_table_unref(expected);
        return TRUE;
    }
    ok = check_layout(p, image, FALSE, expected, seen);
    ok = check_layout(p, image, TRUE, expected, seen) && ok;
    if (ok) /* a layout that failed to start saw nothing: no stale entries to report */
        ok = check_stale(name, expected, seen);
    g_hash_table_unref(expected);
    return ok;
}

int main(void)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxImage) image = sbx_image_open(NULL, &error);
    g_autofree char *bridge = sbx_paths_bridge();
    g_autofree char *qemu = sbx_paths_qemu();
    g_autofree char *qemu_path = g_find_program_in_path(qemu);
    g_autoptr(GHashTable) all = NULL;
    g_auto(GStrv) names = NULL;
    gboolean ok = TRUE;
    GHashTableIter it;
    gpointer key;

    if (!image || !qemu_path || !g_file_test(bridge, G_FILE_TEST_IS_EXECUTABLE)) {
        printf("SKIP: needs QEMU (%s), the guest image and the bridge: %s\n", qemu,
               image ? bridge : error->message);
        return 77;
    }
    all = load_expected(&error);
    names = sbx_profile_list(NULL, &error);
    if (!all || !names) {
        fprintf(stderr, "FAIL: %s\n", error->message);
        return 1;
    }
    for (char **n = names; *n; n++)
        ok = check_profile(*n, image, all) && ok;
    g_hash_table_iter_init(&it, all);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        fprintf(stderr, "FAIL: %s lists [%s], which is no profile\n", DEVICES_FILE,
                (const char *)key);
        ok = FALSE;
    }
    return ok ? 0 : 1;
}
