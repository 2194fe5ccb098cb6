/*
 * Snapshots for real (TCG): make (or find) the snapshot of a profile, restore 3 VMs from it,
 * run JavaScript and Python in each and check that Math.random(), crypto.randomUUID(),
 * random.random() and 32 bytes of /dev/urandom all differ between them and that the guest
 * clock is within 1 s of the host's. Prints the restore times (phase by phase). After each VM:
 * its QEMU and bridge are gone, its runtime dir is gone, and /dev/shm has no new entry.
 * Exit 77 (skipped) when the guest image or the bridge is not built.
 *
 * Usage: test-snapshot-vm [PROFILE [N_VMS]]   (default q35 3)
 */
#include <cJSON.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonfile.h"
#include "base/paths.h"
#include "jail-check.h"
#include "protocol/frame.h"
#include "protocol/message.h"
#include "session.h"
#include "snapshot-verify.h"
#include "snapshot.h"
#include "vm.h"

/* Restore to a first answer takes ~0.5 s here; allow for a host busy with other tests. */
#define RESTORE_TIMEOUT_MS 60000

/* The guest clock is set from the host's at hello: 1 s is the bound. */
#define CLOCK_SLACK_MS 1000

#define N_MAX 16

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    char *js_random, *js_uuid, *py_random, *urandom, *js_urandom;
    gint64 guest_ms, host_ms;
} Identity;

typedef struct {
    gboolean done;
    gboolean ok;
    GError *error;
    char *out;
} Wait;

static void on_started(GObject *src, GAsyncResult *res, gpointer data)
{
    Wait *w = data;

    (void)src;
    w->ok = sbx_vm_start_finish(NULL, res, &w->error);
    w->done = TRUE;
}

static void on_done(SbxSession *s, const SbxRunResult *r, gpointer data)
{
    Wait *w = data;
    GByteArray *out = r->collected[SBX_STREAM_STDOUT];

    (void)s;
    w->ok = r->status == SBX_STATUS_OK;
    w->out = out ? g_strndup((const char *)out->data, out->len) : g_strdup("");
    if (!w->ok && r->has_error)
        fprintf(stderr, "execution failed: %s\n", r->error.message);
    w->done = TRUE;
}

static void wait_for(Wait *w)
{
    while (!w->done)
        g_main_context_iteration(NULL, TRUE);
}

/* Entries of /dev/shm: none may appear because of us. */
static guint shm_entries(void)
{
    g_autoptr(GDir) d = g_dir_open("/dev/shm", 0, NULL);
    guint n = 0;

    while (d && g_dir_read_name(d))
        n++;
    return n;
}

static gboolean pid_alive(GPid pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

typedef struct {
    Wait *current;
} Ctx;

static void on_done_ctx(SbxSession *s, const SbxRunResult *r, gpointer data)
{
    Ctx *c = data;
    on_done(s, r, c->current);
}

static char *exec_code(SbxSession *s, Ctx *c, SbxLanguage lang, const char *code)
{
    Wait w = {0};
    SbxRunRequest req = {
        .language = lang, .code = code, .collect_output = TRUE, .timeout_ms = 60000};
    g_autoptr(GError) error = NULL;

    c->current = &w;
    CHECK(sbx_session_run(s, &req, &error), "run: %s", error->message);
    wait_for(&w);
    CHECK(w.ok, "the %s execution failed; output: %s", lang == SBX_LANG_PYTHON ? "python" : "js",
          w.out);
    return g_strstrip(w.out);
}

/* The first execution after the restore reads the kernel's generator too: the case that showed
 * identical bytes in every restored VM before the agent forced a reseed (RNDRESEEDCRNG). */
static const char *JS = "const c = require('crypto'), fs = require('fs');\n"
                        "const b = Buffer.alloc(32), fd = fs.openSync('/dev/urandom', 'r');\n"
                        "fs.readSync(fd, b, 0, 32, null);\n"
                        "console.log(JSON.stringify([String(Math.random()), c.randomUUID(), "
                        "Date.now(), b.toString('hex')]));";
static const char *PY = "import random, json\n"
                        "with open('/dev/urandom', 'rb') as f: u = f.read(32).hex()\n"
                        "print(json.dumps([repr(random.random()), u]))";

static void identity_of(SbxVm *vm, Identity *id)
{
    static const SbxSessionCallbacks cbs = {.on_done = on_done_ctx};
    Ctx c = {0};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSession) s = sbx_session_new(sbx_vm_take_channel(vm), &cbs, &c, &error);

    CHECK(s, "session: %s", error ? error->message : "?");
    g_autofree char *js = exec_code(s, &c, SBX_LANG_JAVASCRIPT, JS);
    id->host_ms = g_get_real_time() / 1000;
    g_autofree char *py = exec_code(s, &c, SBX_LANG_PYTHON, PY);
    g_autoptr(cJSON) a = cJSON_Parse(js);
    g_autoptr(cJSON) b = cJSON_Parse(py);
    CHECK(cJSON_GetArraySize(a) == 4 && cJSON_GetArraySize(b) == 2, "bad output: %s / %s", js, py);
    id->js_random = g_strdup(cJSON_GetArrayItem(a, 0)->valuestring);
    id->js_uuid = g_strdup(cJSON_GetArrayItem(a, 1)->valuestring);
    id->guest_ms = (gint64)cJSON_GetArrayItem(a, 2)->valuedouble;
    id->js_urandom = g_strdup(cJSON_GetArrayItem(a, 3)->valuestring);
    id->py_random = g_strdup(cJSON_GetArrayItem(b, 0)->valuestring);
    id->urandom = g_strdup(cJSON_GetArrayItem(b, 1)->valuestring);
    printf("  js %s %s  py %s  urandom %.16s...  clock %+lld ms\n", id->js_random, id->js_uuid,
           id->py_random, id->urandom, (long long)(id->guest_ms - id->host_ms));
}

static void restore_one(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap,
                        Identity *id)
{
    guint shm_before = shm_entries();
    SbxVmOptions o = {.snapshot = snap, .boot_timeout_ms = RESTORE_TIMEOUT_MS};
    SbxVm *vm = sbx_vm_new(p, img, &o);
    Wait w = {0};
    SbxVmRestoreTimes t;

    sbx_vm_start_async(vm, NULL, on_started, &w);
    wait_for(&w);
    CHECK(w.ok, "restore: %s", w.error->message);
    CHECK(sbx_vm_restored(vm), "not restored");
    sbx_vm_restore_times(vm, &t);
    printf("restore to ready %.1f ms: RAM copy + bridge %.1f, then from QEMU's spawn: qmp %.1f  "
           "state %.1f  plugged %.1f  cont %.1f  ready %.1f ms\n",
           t.total / 1000.0, t.spawn / 1000.0, t.qmp_ready / 1000.0, t.state_done / 1000.0,
           t.plugged / 1000.0, t.resumed / 1000.0, t.ready / 1000.0);
    identity_of(vm, id);
    GPid q = sbx_vm_qemu_pid(vm), b = sbx_vm_bridge_pid(vm);
    g_autofree char *dir = g_strdup(sbx_vm_runtime_dir(vm));
    /* A restored VM is jailed like a booted one (docs/vm.md, "The jail"). */
    g_autoptr(GString) why = g_string_new(NULL);
    SbxJailExpect e = {.seccomp = TRUE,
                       .image_dir = img->dir,
                       .runtime_dir = dir,
                       .cgroup = sbx_test_cgroups_writable()};
    if (g_strcmp0(g_getenv("SANDBOX_JAIL"), "off") != 0) {
        sbx_test_jailed(q, &e, why);
        if (b)
            sbx_test_jailed(b, &e, why);
        CHECK(why->len == 0, "restored VM not jailed:\n%s", why->str);
    }
    sbx_vm_free(vm);
    CHECK(!pid_alive(q) && !pid_alive(b), "QEMU %d or bridge %d still there", q, b);
    CHECK(!g_file_test(dir, G_FILE_TEST_EXISTS), "runtime dir %s left", dir);
    CHECK(shm_entries() <= shm_before, "/dev/shm has a new entry");
}

static void check_all_differ(Identity *ids, int n)
{
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            CHECK(strcmp(ids[i].js_random, ids[j].js_random), "Math.random() repeats");
            CHECK(strcmp(ids[i].js_uuid, ids[j].js_uuid), "crypto.randomUUID() repeats");
            CHECK(strcmp(ids[i].py_random, ids[j].py_random), "random.random() repeats");
            CHECK(strcmp(ids[i].urandom, ids[j].urandom), "/dev/urandom repeats");
            CHECK(strcmp(ids[i].js_urandom, ids[j].js_urandom),
                  "/dev/urandom repeats (first execution)");
        }
        CHECK(llabs(ids[i].guest_ms - ids[i].host_ms) <= CLOCK_SLACK_MS,
              "guest clock off by %lld ms", (long long)(ids[i].guest_ms - ids[i].host_ms));
    }
}

/* A copy of @snap in a new temp dir, with inputs.json's @field set to @value (or left when
 * NULL) and state.bin replaced by @state (or left when NULL). RAM is hard-linked. */
static char *copy_snapshot(const SbxSnapshot *snap, const char *field, const char *value,
                           const char *state)
{
    g_autoptr(GError) error = NULL;
    char *dir = g_dir_make_tmp("sbx-snap-test-XXXXXX", &error);
    g_autofree char *json = sbx_snapshot_inputs_to_json(sbx_snapshot_inputs(snap));
    g_autofree char *ram = g_build_filename(dir, "ram", NULL);
    g_autofree char *st = g_build_filename(dir, "state.bin", NULL);
    g_autofree char *in = g_build_filename(dir, "inputs.json", NULL);
    g_autofree char *orig_state = NULL;
    gsize len = 0;

    CHECK(dir, "tmp dir: %s", error->message);
    if (field) {
        g_autoptr(cJSON) obj = cJSON_Parse(json);
        cJSON_ReplaceItemInObject(obj, field, cJSON_CreateString(value));
        g_free(json);
        char *t = cJSON_Print(obj);
        json = g_strdup(t);
        cJSON_free(t);
    }
    CHECK(g_file_set_contents(in, json, -1, NULL), "write inputs.json");
    if (!state) {
        CHECK(g_file_get_contents(sbx_snapshot_state_path(snap), &orig_state, &len, NULL), "read");
        CHECK(g_file_set_contents(st, orig_state, (gssize)len, NULL), "write state");
    } else {
        CHECK(g_file_set_contents(st, state, -1, NULL), "write state");
    }
    if (link(sbx_snapshot_ram_path(snap), ram) < 0)
        CHECK(symlink(sbx_snapshot_ram_path(snap), ram) == 0, "link ram");
    /* The digests as made (docs/snapshot.md, "Integrity"): a replaced state no longer fits. */
    g_autofree char *digests = g_build_filename(sbx_snapshot_dir(snap), "digests", NULL);
    g_autofree char *digests_copy = g_build_filename(dir, "digests", NULL);
    g_autofree char *text = NULL;
    CHECK(g_file_get_contents(digests, &text, &len, NULL), "read digests");
    CHECK(g_file_set_contents(digests_copy, text, (gssize)len, NULL), "write digests");
    return dir;
}

static void remove_copy(const char *dir)
{
    const char *names[] = {"ram", "state.bin", "inputs.json", "digests", "verified"};

    for (guint i = 0; i < G_N_ELEMENTS(names); i++) {
        g_autofree char *p = g_build_filename(dir, names[i], NULL);
        unlink(p);
    }
    CHECK(rmdir(dir) == 0, "rmdir %s: %s", dir, g_strerror(errno));
}

/* A snapshot from another QEMU: refused before any QEMU starts, naming what differs. */
static void check_mismatch(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap)
{
    g_autofree char *dir = copy_snapshot(snap, "qemu_version", "QEMU emulator version 6.2.0", NULL);
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSnapshot) other = sbx_snapshot_open(dir, p, img, &error);

    CHECK(!other, "a snapshot of another QEMU opened");
    CHECK(g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT) &&
              strstr(error->message, "qemu_version") && strstr(error->message, "6.2.0"),
          "unclear error: %s", error->message);
    printf("mismatch refused: %s\n", error->message);
    remove_copy(dir);
}

/* A damaged state file: the restore fails (bounded), nothing is left behind. */
static void check_damaged(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap)
{
    g_autofree char *dir = copy_snapshot(snap, NULL, NULL, "this is not a QEMU state");
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxSnapshot) bad = sbx_snapshot_open(dir, p, img, &error);
    guint shm_before = shm_entries();
    Wait w = {0};

    /* Changed after it was made: refused before anything starts. */
    CHECK(!bad && g_error_matches(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT) &&
              strstr(error->message, "state.bin is not what was made"),
          "a changed state.bin was not refused: %s", error ? error->message : "opened");
    printf("changed state refused: %.100s\n", error->message);
    g_clear_error(&error);
    /* Made that way (digests of the damaged file): QEMU refuses it at the restore. */
    CHECK(sbx_snapshot_digests_write(dir, &error), "digests: %s", error->message);
    bad = sbx_snapshot_open(dir, p, img, &error);
    CHECK(bad, "open: %s", error->message);
    SbxVmOptions o = {.snapshot = bad, .boot_timeout_ms = RESTORE_TIMEOUT_MS};
    SbxVm *vm = sbx_vm_new(p, img, &o);
    gint64 t0 = g_get_monotonic_time();
    sbx_vm_start_async(vm, NULL, on_started, &w);
    wait_for(&w);
    CHECK(!w.ok, "a damaged snapshot restored");
    printf("damaged state refused in %.0f ms: %.120s\n", (g_get_monotonic_time() - t0) / 1e3,
           w.error->message);
    CHECK(sbx_vm_qemu_pid(vm) == 0 && sbx_vm_bridge_pid(vm) == 0, "processes left");
    CHECK(sbx_vm_runtime_dir(vm) == NULL, "runtime dir left");
    sbx_vm_free(vm);
    g_error_free(w.error);
    CHECK(shm_entries() <= shm_before, "/dev/shm has a new entry");
    remove_copy(dir);
}

static void on_started_ignored(GObject *src, GAsyncResult *res, gpointer data)
{
    gboolean *called = data;

    (void)src;
    (void)res;
    *called = TRUE; /* cancelled: the VM is gone; nothing to finish */
}

/* Run the main loop for @ms. */
static void spin(guint ms)
{
    gint64 until = g_get_monotonic_time() + (gint64)ms * 1000;

    while (g_get_monotonic_time() < until)
        if (!g_main_context_iteration(NULL, FALSE))
            g_usleep(500);
}

/* Free VMs at points all along the restore (RAM copy, QEMU start, state load, hot-plug,
 * probing): every time, no process, no runtime dir, no /dev/shm entry is left, and the RAM
 * copy's worker finishing afterwards touches nothing. */
static void check_free_during_restore(const SbxProfile *p, const SbxImage *img,
                                      const SbxSnapshot *snap)
{
    static const guint delays_ms[] = {0, 2, 10, 30, 50, 70, 100};
    guint shm_before = shm_entries();

    for (guint i = 0; i < G_N_ELEMENTS(delays_ms); i++) {
        SbxVmOptions o = {.snapshot = snap, .boot_timeout_ms = RESTORE_TIMEOUT_MS};
        SbxVm *vm = sbx_vm_new(p, img, &o);
        gboolean called = FALSE;
        GPid q = 0, b = 0;

        sbx_vm_start_async(vm, NULL, on_started_ignored, &called);
        gint64 until = g_get_monotonic_time() + (gint64)delays_ms[i] * 1000;
        while (g_get_monotonic_time() < until && !called) {
            if (!g_main_context_iteration(NULL, FALSE))
                g_usleep(500);
            q = q ? q : sbx_vm_qemu_pid(vm);
            b = b ? b : sbx_vm_bridge_pid(vm);
        }
        g_autofree char *dir = g_strdup(sbx_vm_runtime_dir(vm));
        sbx_vm_free(vm);
        spin(150); /* the copy thread ends; its callback must see the cancellation */
        CHECK(!pid_alive(q) && !pid_alive(b), "free after %u ms: QEMU %d or bridge %d left",
              delays_ms[i], q, b);
        CHECK(!dir || !g_file_test(dir, G_FILE_TEST_EXISTS), "free after %u ms: %s left",
              delays_ms[i], dir);
    }
    CHECK(shm_entries() <= shm_before, "/dev/shm has a new entry");
    printf("freed during restore at %zu points: nothing left\n", G_N_ELEMENTS(delays_ms));
}

/* Three restores at once from one snapshot (each with its own RAM copy, bridge and CID). */
static void check_concurrent(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap)
{
    enum { N = 3 };
    SbxVm *vms[N];
    Wait w[N] = {{0}};
    guint shm_before = shm_entries();
    gint64 t0 = g_get_monotonic_time();

    for (int i = 0; i < N; i++) {
        SbxVmOptions o = {.snapshot = snap, .boot_timeout_ms = RESTORE_TIMEOUT_MS};
        vms[i] = sbx_vm_new(p, img, &o);
        sbx_vm_start_async(vms[i], NULL, on_started, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        wait_for(&w[i]);
        CHECK(w[i].ok, "concurrent restore %d: %s", i, w[i].error->message);
    }
    printf("%d concurrent restores ready in %.0f ms\n", N, (g_get_monotonic_time() - t0) / 1e3);
    for (int i = 0; i < N; i++) {
        GPid q = sbx_vm_qemu_pid(vms[i]), b = sbx_vm_bridge_pid(vms[i]);
        sbx_vm_free(vms[i]);
        CHECK(!pid_alive(q) && !pid_alive(b), "QEMU %d or bridge %d left", q, b);
    }
    CHECK(shm_entries() <= shm_before, "/dev/shm has a new entry");
}

/* A pre-started restore held before its state load (vm-prestart.c). */
static SbxVm *start_held(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap, Wait *w)
{
    SbxVmOptions o = {.snapshot = snap, .boot_timeout_ms = RESTORE_TIMEOUT_MS};
    SbxVm *vm = sbx_vm_new(p, img, &o);
    gint64 until = g_get_monotonic_time() + RESTORE_TIMEOUT_MS * 1000ll;

    sbx_vm_set_prestart(vm);
    sbx_vm_start_async(vm, NULL, on_started, w);
    while (!sbx_vm_prestart_is_held(vm) && !w->done && g_get_monotonic_time() < until)
        g_main_context_iteration(NULL, TRUE);
    CHECK(sbx_vm_prestart_is_held(vm) && !w->done, "the pre-started VM did not reach the hold%s%s",
          w->error ? ": " : "", w->error ? w->error->message : "");
    return vm;
}

static void check_gone(GPid q, GPid b, const char *dir, const char *what)
{
    CHECK(!pid_alive(q) && !pid_alive(b), "%s: QEMU %d or bridge %d left", what, q, b);
    CHECK(!dir || !g_file_test(dir, G_FILE_TEST_EXISTS), "%s: runtime dir %s left", what, dir);
}

/*
 * Pre-started restores: one holds (QEMU up, the start not complete) until resumed, then is a
 * working VM with its own identity; one whose QEMU dies while held fails its start; one freed
 * while held leaves nothing.
 */
static void check_prestart(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap)
{
    guint shm_before = shm_entries();
    Wait w = {0};
    Identity id = {0};
    SbxVm *vm = start_held(p, img, snap, &w);
    GPid q = sbx_vm_qemu_pid(vm), b = sbx_vm_bridge_pid(vm);

    spin(300);
    CHECK(!w.done && sbx_vm_prestart_is_held(vm) && pid_alive(q), "the hold did not hold");
    gint64 t0 = g_get_monotonic_time();
    sbx_vm_prestart_resume(vm);
    wait_for(&w);
    CHECK(w.ok, "resumed restore: %s", w.error ? w.error->message : "?");
    printf("pre-started: resume to ready %.1f ms\n", (g_get_monotonic_time() - t0) / 1e3);
    identity_of(vm, &id);
    g_autofree char *dir = g_strdup(sbx_vm_runtime_dir(vm));
    sbx_vm_free(vm);
    check_gone(q, b, dir, "pre-started VM");

    Wait w2 = {0};
    vm = start_held(p, img, snap, &w2);
    q = sbx_vm_qemu_pid(vm);
    b = sbx_vm_bridge_pid(vm);
    kill(q, SIGKILL);
    wait_for(&w2);
    CHECK(!w2.ok, "a held VM whose QEMU died did not fail its start");
    g_clear_error(&w2.error);
    g_free(dir);
    dir = g_strdup(sbx_vm_runtime_dir(vm));
    sbx_vm_free(vm);
    check_gone(q, b, dir, "held VM killed");

    Wait w3 = {0};
    vm = start_held(p, img, snap, &w3);
    q = sbx_vm_qemu_pid(vm);
    b = sbx_vm_bridge_pid(vm);
    g_free(dir);
    dir = g_strdup(sbx_vm_runtime_dir(vm));
    sbx_vm_free(vm);
    spin(100);
    CHECK(w3.done && !w3.ok, "a held VM freed did not end its start (cancelled)");
    g_clear_error(&w3.error);
    check_gone(q, b, dir, "held VM freed");
    CHECK(shm_entries() <= shm_before, "/dev/shm has a new entry");
    g_free(id.js_random);
    g_free(id.js_uuid);
    g_free(id.py_random);
    g_free(id.urandom);
    g_free(id.js_urandom);
    printf("pre-started: held, resumed, killed while held, freed while held: nothing left\n");
}

static void on_make(const char *dir, gpointer data)
{
    (void)data;
    printf("making the snapshot %s\n", dir);
    fflush(stdout);
}

typedef struct {
    gboolean done;
    int fd;
    GError *error;
} Conn;

static void on_conn(GObject *src, GAsyncResult *res, gpointer data)
{
    Conn *c = data;

    (void)src;
    c->fd = sbx_vm_connect_port_finish(NULL, res, &c->error);
    c->done = TRUE;
}

/* A new connection to the agent (on virtio-serial: once it has reopened its port). */
static int reconnect(SbxVm *vm)
{
    Conn c = {0};

    sbx_vm_connect_port_async(vm, SBX_AGENT_PORT, 10000, NULL, on_conn, &c);
    while (!c.done)
        g_main_context_iteration(NULL, TRUE);
    CHECK(c.fd >= 0, "reconnect: %s", c.error->message);
    return c.fd;
}

/* The next message from @fd within 10 s; its type. */
static SbxMsgType read_msg_type(int fd)
{
    SbxFrameReader r;
    char *payload = NULL;
    size_t plen = 0;
    SbxMsg msg = {0};
    gint64 deadline = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

    sbx_frame_reader_init(&r, 0);
    while (!payload) {
        struct pollfd p = {fd, POLLIN, 0};
        guint8 byte;
        CHECK(g_get_monotonic_time() < deadline && poll(&p, 1, 100) >= 0, "no reply in 10 s");
        if (!(p.revents & (POLLIN | POLLHUP)))
            continue;
        CHECK(read(fd, &byte, 1) == 1, "the agent closed the stream");
        CHECK(sbx_frame_reader_feed(&r, &byte, 1, &payload, &plen) >= 0, "bad frame");
    }
    sbx_frame_reader_clear(&r);
    CHECK(sbx_msg_decode(payload, plen, &msg, NULL) == 0, "bad message");
    free(payload);
    SbxMsgType type = msg.type;
    sbx_msg_clear(&msg);
    return type;
}

/*
 * virtio-serial only: the stream's edge cases in a real guest. The agent ends a connection
 * itself (a bad frame) while the host stays attached: it answers with an error, drops what the
 * host still sends, and once the host left serves the next connection from a clean state.
 */
static void check_serial_stream(const SbxProfile *p, const SbxImage *img, const SbxSnapshot *snap)
{
    static const guint8 bad_frame[4] = {0, 0, 0, 0}; /* length 0: a protocol error */
    static const SbxSessionCallbacks cbs = {.on_done = on_done_ctx};
    SbxVmOptions o = {.snapshot = snap, .boot_timeout_ms = RESTORE_TIMEOUT_MS};
    g_autoptr(SbxVm) vm = sbx_vm_new(p, img, &o);
    g_autoptr(GError) error = NULL;
    guint8 junk[16384];
    Wait w = {0};
    Ctx c = {0};
    int fd;

    if (sbx_profile_channel(p) != SBX_CHANNEL_VIRTIO_SERIAL)
        return;
    sbx_vm_start_async(vm, NULL, on_started, &w);
    wait_for(&w);
    CHECK(w.ok, "restore: %s", w.error->message);
    fd = sbx_vm_take_channel(vm);
    CHECK(write(fd, bad_frame, sizeof bad_frame) == sizeof bad_frame, "write");
    CHECK(read_msg_type(fd) == SBX_MSG_ERROR, "no error frame after a bad frame");
    memset(junk, 0xff, sizeof junk); /* would be a huge frame length if it were read */
    /* Once the agent has surely closed the connection on its side (it sent the error first). */
    g_usleep(500 * 1000);
    CHECK(write(fd, junk, sizeof junk) == sizeof junk, "write junk");
    /* Dropped, not read as a new connection (which would answer with another error). */
    struct pollfd pfd = {fd, POLLIN, 0};
    CHECK(poll(&pfd, 1, 1000) == 0, "the agent answered bytes of a connection it had ended");
    close(fd);
    g_autoptr(SbxSession) s = sbx_session_new(reconnect(vm), &cbs, &c, &error);
    CHECK(s, "session: %s", error ? error->message : "?");
    g_autofree char *out = exec_code(s, &c, SBX_LANG_PYTHON, "print(6 * 7)");
    CHECK(g_str_equal(out, "42"), "after the drained connection: %s", out);
    printf("virtio-serial: an ended connection's bytes dropped, the next one served\n");
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "q35";
    int n = argc > 2 ? atoi(argv[2]) : 3;
    g_autoptr(GError) error = NULL;
    g_autofree char *bridge = sbx_paths_bridge();
    Identity ids[N_MAX] = {0};

    CHECK(n >= 1 && n <= N_MAX, "N_VMS: 1..%d", N_MAX);
    g_autoptr(SbxImage) img = sbx_image_open(NULL, &error);
    if (!img || !g_file_test(bridge, G_FILE_TEST_IS_EXECUTABLE)) {
        printf("SKIP: image or bridge not built (%s)\n", error ? error->message : bridge);
        return 77;
    }
    g_autoptr(SbxProfile) p = sbx_profile_load_named(NULL, name, &error);
    CHECK(p, "%s", error->message);
    if (sbx_profile_channel(p) == SBX_CHANNEL_VSOCK_KERNEL &&
        access("/dev/vhost-vsock", R_OK | W_OK) < 0) {
        printf("SKIP: profile %s uses the kernel's vhost-vsock, and this host has no usable "
               "/dev/vhost-vsock (%s)\n",
               name, g_strerror(errno));
        return 77;
    }
    SbxSnapshotOptions so = {.on_make = on_make};
    gint64 t0 = g_get_monotonic_time();
    g_autoptr(SbxSnapshot) snap = sbx_snapshot_ensure(p, img, &so, &error);
    CHECK(snap, "%s", error->message);
    printf("snapshot %s (%s in %.1f s)\n", sbx_snapshot_dir(snap),
           sbx_snapshot_was_made(snap) ? "made" : "cached", (g_get_monotonic_time() - t0) / 1e6);
    for (int i = 0; i < n; i++)
        restore_one(p, img, snap, &ids[i]);
    check_all_differ(ids, n);
    check_mismatch(p, img, snap);
    check_damaged(p, img, snap);
    check_free_during_restore(p, img, snap);
    check_concurrent(p, img, snap);
    check_prestart(p, img, snap);
    check_serial_stream(p, img, snap);
    for (int i = 0; i < n; i++) {
        g_free(ids[i].js_random);
        g_free(ids[i].js_uuid);
        g_free(ids[i].py_random);
        g_free(ids[i].urandom);
        g_free(ids[i].js_urandom);
    }
    printf("ok: %d restored VMs, all different, clocks within %d ms\n", n, CLOCK_SLACK_MS);
    return 0;
}
