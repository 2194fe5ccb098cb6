/*
 * Per-VM cgroups (host-agent/vm/cgroup.c): names, limits, v2 and v1 against fake trees in a
 * temp dir (the files the kernel would show), the unavailable case and its warning, the
 * teardown's kills, and, as root on a host with a writable hierarchy, the real thing: a child
 * joins between fork and exec, its limits hold, the pids limit bites, and free kills it and
 * removes the directories. The real case is skipped (with a message) when not root or when no
 * hierarchy is usable.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"

#define MiB ((guint64)1024 * 1024)

/* How long a test waits for a SIGKILLed child to be reapable: the kernel needs milliseconds. */
#define CHILD_WAIT_MS 5000

/* How often the waits look. */
#define POLL_MS 10

/* How long the real test waits for the shell to run into the pids limit. */
#define PIDS_WAIT_MS 5000

typedef struct {
    char *tmp;
    SbxCgroup *real; /* test_real's cgroup: freed (its processes killed) even if it fails */
} Fixture;

static int setup(void **state)
{
    Fixture *fx = g_new0(Fixture, 1);

    fx->tmp = g_dir_make_tmp("test-cgroup-XXXXXX", NULL);
    g_unsetenv("SANDBOX_CGROUP_ROOT");
    g_unsetenv("SANDBOX_CGROUP_V1_ROOT");
    *state = fx;
    return fx->tmp ? 0 : -1;
}

static void rm_rf(const char *path)
{
    g_autoptr(GDir) dir = g_dir_open(path, 0, NULL);
    const char *entry;

    while (dir && (entry = g_dir_read_name(dir))) {
        g_autofree char *child = g_build_filename(path, entry, NULL);

        if (g_file_test(child, G_FILE_TEST_IS_DIR) && !g_file_test(child, G_FILE_TEST_IS_SYMLINK))
            rm_rf(child);
        else
            unlink(child);
    }
    rmdir(path);
}

static int teardown(void **state)
{
    Fixture *fx = *state;

    sbx_cgroup_free(fx->real);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    rm_rf(fx->tmp);
    g_free(fx->tmp);
    g_free(fx);
    g_unsetenv("SANDBOX_CGROUP_ROOT");
    g_unsetenv("SANDBOX_CGROUP_V1_ROOT");
    return 0;
}

/* Create @dir/@file (and @dir) holding @text. */
static void put(const char *dir, const char *file, const char *text)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);

    assert_int_equal(g_mkdir_with_parents(dir, 0755), 0);
    assert_true(g_file_set_contents(path, text, -1, NULL));
}

/* The contents of @dir/@file, or NULL if it does not exist. */
static char *get(const char *dir, const char *file)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);
    char *text = NULL;

    return g_file_get_contents(path, &text, NULL, NULL) ? text : NULL;
}

static void assert_file(const char *dir, const char *file, const char *expected)
{
    g_autofree char *text = get(dir, file);

    assert_non_null(text);
    assert_string_equal(g_strstrip(text), expected);
}

static gboolean exists(const char *path)
{
    return g_file_test(path, G_FILE_TEST_EXISTS);
}

static gboolean exists_in(const char *dir, const char *file)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);

    return exists(path);
}

static void unlink_in(const char *dir, const char *file)
{
    g_autofree char *path = g_build_filename(dir, file, NULL);

    assert_int_equal(unlink(path), 0);
}

/*
 * A fake v2 tree at @root as the kernel shows it once sandbox/@name exists: @controllers
 * available, optional files (memory.swap.max, memory.oom.group, cgroup.kill) if @extras.
 * Returns the leaf directory.
 */
static char *fake_v2(const char *root, const char *name, const char *controllers, gboolean extras)
{
    g_autofree char *sandbox = g_build_filename(root, "sandbox", NULL);
    char *leaf = g_build_filename(sandbox, name, NULL);

    put(root, "cgroup.controllers", controllers);
    put(root, "cgroup.subtree_control", "");
    put(sandbox, "cgroup.controllers", controllers);
    put(sandbox, "cgroup.subtree_control", "");
    put(leaf, "cgroup.procs", "");
    put(leaf, "memory.max", "max\n");
    put(leaf, "pids.max", "max\n");
    if (strstr(controllers, "cpu"))
        put(leaf, "cpu.weight", "100\n");
    if (extras) {
        put(leaf, "memory.swap.max", "max\n");
        put(leaf, "memory.oom.group", "0\n");
        put(leaf, "cgroup.kill", "");
    }
    return leaf;
}

/* A fake v1 tree at @prefix: memory (with memsw if @memsw), pids, and cpu if @cpu. */
static void fake_v1(const char *prefix, const char *name, gboolean memsw, gboolean cpu)
{
    g_autofree char *memory = g_build_filename(prefix, "memory", "sandbox", name, NULL);
    g_autofree char *pids = g_build_filename(prefix, "pids", "sandbox", name, NULL);
    g_autofree char *cpus = g_build_filename(prefix, "cpu", "sandbox", name, NULL);

    put(memory, "cgroup.procs", "");
    put(memory, "memory.limit_in_bytes", "9223372036854771712\n");
    if (memsw)
        put(memory, "memory.memsw.limit_in_bytes", "9223372036854771712\n");
    put(pids, "cgroup.procs", "");
    put(pids, "pids.max", "max\n");
    if (cpu) {
        put(cpus, "cgroup.procs", "");
        put(cpus, "cpu.shares", "1024\n");
    }
}

/* Fork a child that calls sbx_cgroup_join_self(@cg); its result (0 or -errno). */
static int join_in_child(const SbxCgroup *cg)
{
    int status = 0;
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0)
        _exit(-sbx_cgroup_join_self(cg) & 0xff);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return -WEXITSTATUS(status);
}

/* Wait for our child @pid to end (bounded) and return its waitpid status. */
static int wait_child(GPid pid)
{
    gint64 deadline = g_get_monotonic_time() + CHILD_WAIT_MS * G_TIME_SPAN_MILLISECOND;
    int status = 0;
    pid_t r;

    while ((r = waitpid(pid, &status, WNOHANG)) == 0) {
        if (g_get_monotonic_time() > deadline)
            fail_msg("child %d still alive after %d ms", (int)pid, CHILD_WAIT_MS);
        g_usleep(POLL_MS * 1000);
    }
    assert_int_equal(r, pid);
    return status;
}

static GPid spawn(const char *const *argv, GSpawnChildSetupFunc setup_func, gpointer data)
{
    g_autoptr(GError) error = NULL;
    GPid pid = 0;

    if (!g_spawn_async(NULL, (char **)argv, NULL,
                       G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH |
                           G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                       setup_func, data, &pid, &error))
        fail_msg("spawn %s: %s", argv[0], error->message);
    return pid;
}

static void test_names(void **state)
{
    static const char *const good[] = {"a", "vm-1234-7", "A.b_c-D", "-x", "0"};
    static const char *const bad[] = {"",     ".", "..",  ".hidden", "a/b",       "a b",
                                      "a\nb", "é", "a:b", "../x",    "sandbox/.."};
    g_autofree char *longest = g_strnfill(SBX_CGROUP_NAME_MAX, 'x');
    g_autofree char *too_long = g_strnfill(SBX_CGROUP_NAME_MAX + 1, 'x');
    SbxCgroupLimits limits;

    (void)state;
    for (guint i = 0; i < G_N_ELEMENTS(good); i++)
        assert_true(sbx_cgroup_name_valid(good[i]));
    assert_true(sbx_cgroup_name_valid(longest));
    assert_false(sbx_cgroup_name_valid(too_long));
    assert_false(sbx_cgroup_name_valid(NULL));
    sbx_cgroup_limits_for_vm(&limits, 256 * MiB, 1, TRUE);
    for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GError) error = NULL;

        assert_false(sbx_cgroup_name_valid(bad[i]));
        /* Refused before any file system access (no override is set: the real tree). */
        assert_null(sbx_cgroup_new(bad[i], &limits, &error));
        assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID));
    }
}

static void test_limits(void **state)
{
    static const SbxCgroupLimits bad[] = {
        {.memory_bytes = 0},
        {.memory_bytes = SBX_CGROUP_MEMORY_MIN - 1},
        {.memory_bytes = 64 * MiB, .pids_max = SBX_CGROUP_PIDS_MIN - 1},
        {.memory_bytes = 64 * MiB, .pids_max = SBX_CGROUP_PIDS_MAX + 1},
        {.memory_bytes = 64 * MiB, .cpu_weight = SBX_CGROUP_CPU_WEIGHT_MAX + 1},
    };
    SbxCgroupLimits l;

    (void)state;
    sbx_cgroup_limits_for_vm(&l, 256 * MiB, 1, TRUE);
    assert_true(l.memory_bytes ==
                256 * MiB + SBX_CGROUP_MEMORY_OVERHEAD + SBX_CGROUP_MEMORY_TCG_CACHE);
    assert_int_equal(l.pids_max, SBX_CGROUP_PIDS_QEMU_BASE + SBX_CGROUP_PIDS_QEMU_POOL +
                                     SBX_CGROUP_PIDS_HELPERS + 1);
    assert_int_equal(l.cpu_weight, SBX_CGROUP_CPU_WEIGHT_DEFAULT);
    sbx_cgroup_limits_for_vm(&l, 1024 * MiB, 4, FALSE);
    assert_true(l.memory_bytes == 1024 * MiB + SBX_CGROUP_MEMORY_OVERHEAD);
    assert_int_equal(l.pids_max, SBX_CGROUP_PIDS_QEMU_BASE + SBX_CGROUP_PIDS_QEMU_POOL +
                                     SBX_CGROUP_PIDS_HELPERS + 4);
    for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autoptr(GError) error = NULL;

        assert_null(sbx_cgroup_new("x", &bad[i], &error));
        assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID));
    }
}

static void test_v2_fake(void **state)
{
    Fixture *fx = *state;
    g_autofree char *leaf = fake_v2(fx->tmp, "vm-1", "cpuset cpu io memory pids", TRUE);
    g_autofree char *sandbox = g_build_filename(fx->tmp, "sandbox", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 300 * MiB, .pids_max = 77, .cpu_weight = 250};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;
    g_autofree char *procs = NULL;
    GPid pid;

    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-1", &limits, &error);
    assert_non_null(cg);
    assert_int_equal(sbx_cgroup_version(cg), 2);
    assert_string_equal(sbx_cgroup_dirs(cg)[0], leaf);
    assert_null(sbx_cgroup_dirs(cg)[1]);
    assert_true(sbx_cgroup_has_cpu_weight(cg));
    /* Controllers handed down at both levels; required ones first, cpu on its own. */
    assert_file(fx->tmp, "cgroup.subtree_control", "+memory +pids\n+cpu");
    assert_file(sandbox, "cgroup.subtree_control", "+memory +pids\n+cpu");
    assert_file(leaf, "memory.max", "314572800");
    assert_file(leaf, "memory.swap.max", "0");
    assert_file(leaf, "memory.oom.group", "1");
    assert_file(leaf, "pids.max", "77");
    assert_file(leaf, "cpu.weight", "250");
    assert_true(sbx_cgroup_set_cpu_weight(cg, 10, &error));
    assert_file(leaf, "cpu.weight", "10");
    assert_false(sbx_cgroup_set_cpu_weight(cg, 0, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID));
    g_clear_error(&error);
    assert_file(leaf, "cpu.weight", "10");

    /* join_self writes "0" (the caller) to the pre-opened cgroup.procs; attach the pid. */
    assert_int_equal(join_in_child(cg), 0);
    assert_true(sbx_cgroup_attach(cg, 4242, &error));
    procs = get(leaf, "cgroup.procs");
    assert_string_equal(procs, "0\n4242\n");
    assert_false(sbx_cgroup_attach(cg, 0, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID));
    g_clear_error(&error);

    /* Teardown: cgroup.kill written; a fake directory holds files, so rmdir fails and says so. */
    put(leaf, "cgroup.procs", ""); /* the kernel would have emptied it */
    assert_false(sbx_cgroup_destroy(cg, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED));
    assert_non_null(strstr(error->message, leaf));
    assert_file(leaf, "cgroup.kill", "1");
    g_clear_error(&error);

    /* After destroy the fds are closed: joining fails, and the child setup exits 125. */
    assert_int_equal(join_in_child(cg), -EBADF);
    pid = spawn((const char *const[]){"true", NULL}, sbx_cgroup_child_setup, cg);
    {
        int status = wait_child(pid);

        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), SBX_CGROUP_JOIN_FAILED_STATUS);
    }
    assert_false(sbx_cgroup_attach(cg, 4242, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED));
}

/* Only memory and pids, no optional files: it works, without a CPU weight. */
static void test_v2_fake_minimal(void **state)
{
    Fixture *fx = *state;
    g_autofree char *leaf = fake_v2(fx->tmp, "vm-2", "memory pids", FALSE);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;

    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-2", &limits, &error);
    assert_non_null(cg);
    assert_false(sbx_cgroup_has_cpu_weight(cg));
    assert_file(fx->tmp, "cgroup.subtree_control", "+memory +pids");
    assert_file(leaf, "memory.max", "67108864");
    /* Defaults for the zeros. */
    assert_file(leaf, "pids.max", "81");
    assert_false(exists_in(leaf, "cpu.weight"));
    assert_false(exists_in(leaf, "memory.swap.max"));
}

/* Controllers already enabled are not written again. */
static void test_v2_fake_enabled(void **state)
{
    Fixture *fx = *state;
    g_autofree char *leaf = fake_v2(fx->tmp, "vm-3", "cpu memory pids", FALSE);
    g_autofree char *sandbox = g_build_filename(fx->tmp, "sandbox", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;

    put(fx->tmp, "cgroup.subtree_control", "cpu memory pids\n");
    put(sandbox, "cgroup.subtree_control", "memory pids cpu\n");
    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-3", &limits, &error);
    assert_non_null(cg);
    assert_file(fx->tmp, "cgroup.subtree_control", "cpu memory pids");
    assert_file(sandbox, "cgroup.subtree_control", "memory pids cpu");
    assert_file(leaf, "cpu.weight", "100");
}

/*
 * Failures half-way leave nothing of ours: sandbox/ that cannot get its controllers is removed
 * again; a leaf whose limits cannot be written (a fresh leaf in a fake tree has no files) is
 * removed.
 */
static void test_v2_fake_fresh_cleanup(void **state)
{
    Fixture *fx = *state;
    g_autofree char *sandbox = g_build_filename(fx->tmp, "sandbox", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;

    put(fx->tmp, "cgroup.controllers", "memory pids");
    put(fx->tmp, "cgroup.subtree_control", "");
    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    assert_null(sbx_cgroup_new("vm-4", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE));
    assert_non_null(strstr(error->message, "cgroup.subtree_control in"));
    assert_false(exists(sandbox));
    g_clear_error(&error);

    put(sandbox, "cgroup.subtree_control", "memory pids");
    assert_null(sbx_cgroup_new("vm-4", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED));
    assert_non_null(strstr(error->message, "memory.max"));
    assert_false(exists_in(sandbox, "vm-4"));
    assert_true(exists(sandbox)); /* the fake file in it keeps it */
}

/* Teardown removes the leaf, then sandbox/ once it is empty (here: a fake made empty). */
static void test_v2_fake_remove(void **state)
{
    Fixture *fx = *state;
    g_autofree char *leaf = fake_v2(fx->tmp, "vm-5", "memory pids", FALSE);
    g_autofree char *sandbox = g_build_filename(fx->tmp, "sandbox", NULL);
    g_autofree char *other = g_build_filename(sandbox, "other-vm", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;
    g_autoptr(SbxCgroup) cg2 = NULL;
    g_autofree char *leaf2 = NULL;
    const char *files[] = {"cgroup.procs", "memory.max", "pids.max"};

    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-5", &limits, &error);
    assert_non_null(cg);
    for (guint i = 0; i < G_N_ELEMENTS(files); i++)
        unlink_in(leaf, files[i]);
    /* Another VM's cgroup keeps sandbox/ */
    assert_int_equal(mkdir(other, 0755), 0);
    unlink_in(sandbox, "cgroup.controllers");
    unlink_in(sandbox, "cgroup.subtree_control");
    assert_true(sbx_cgroup_destroy(cg, &error));
    assert_false(exists(leaf));
    assert_true(exists(sandbox));
    assert_true(sbx_cgroup_destroy(cg, &error)); /* again: nothing to do */

    /* The last one out removes sandbox/. */
    assert_int_equal(rmdir(other), 0);
    leaf2 = fake_v2(fx->tmp, "vm-6", "memory pids", FALSE);
    cg2 = sbx_cgroup_new("vm-6", &limits, &error);
    assert_non_null(cg2);
    for (guint i = 0; i < G_N_ELEMENTS(files); i++)
        unlink_in(leaf2, files[i]);
    unlink_in(sandbox, "cgroup.controllers");
    unlink_in(sandbox, "cgroup.subtree_control");
    assert_true(sbx_cgroup_destroy(cg2, &error));
    assert_false(exists(sandbox));
}

static void test_v2_fake_unusable(void **state)
{
    Fixture *fx = *state;
    g_autofree char *missing = g_build_filename(fx->tmp, "nothing-here", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;

    g_free(fake_v2(fx->tmp, "vm-7", "cpu memory", TRUE));
    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    assert_null(sbx_cgroup_new("vm-7", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE));
    assert_non_null(strstr(error->message, "no memory and pids controllers"));
    assert_non_null(strstr(error->message, fx->tmp));
    g_clear_error(&error);

    g_setenv("SANDBOX_CGROUP_ROOT", missing, TRUE);
    assert_null(sbx_cgroup_new("vm-7", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE));
    assert_non_null(strstr(error->message, "No such file"));
}

/* A leaf with processes in it belongs to someone: refused, and left untouched. */
static void test_v2_fake_in_use(void **state)
{
    Fixture *fx = *state;
    g_autofree char *leaf = fake_v2(fx->tmp, "vm-8", "memory pids", FALSE);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;

    put(leaf, "cgroup.procs", "12345\n12346\n");
    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    assert_null(sbx_cgroup_new("vm-8", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_EXISTS));
    assert_non_null(strstr(error->message, "12345"));
    assert_file(leaf, "memory.max", "max");
    assert_file(leaf, "cgroup.procs", "12345\n12346");
}

static void test_v1_fake(void **state)
{
    Fixture *fx = *state;
    g_autofree char *memory = g_build_filename(fx->tmp, "memory", "sandbox", "vm-9", NULL);
    g_autofree char *pids = g_build_filename(fx->tmp, "pids", "sandbox", "vm-9", NULL);
    g_autofree char *cpu = g_build_filename(fx->tmp, "cpu", "sandbox", "vm-9", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 300 * MiB, .pids_max = 90, .cpu_weight = 250};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;
    const char *const *dirs;

    fake_v1(fx->tmp, "vm-9", TRUE, TRUE);
    g_setenv("SANDBOX_CGROUP_V1_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-9", &limits, &error);
    assert_non_null(cg);
    assert_int_equal(sbx_cgroup_version(cg), 1);
    dirs = sbx_cgroup_dirs(cg);
    assert_string_equal(dirs[0], memory);
    assert_string_equal(dirs[1], pids);
    assert_string_equal(dirs[2], cpu);
    assert_null(dirs[3]);
    assert_file(memory, "memory.limit_in_bytes", "314572800");
    assert_file(memory, "memory.memsw.limit_in_bytes", "314572800");
    assert_file(pids, "pids.max", "90");
    assert_file(cpu, "cpu.shares", "2560"); /* 250 * 1024 / 100 */
    /* The CPU policy lowers and restores the weight of a running VM (vm-cpu.c). */
    assert_true(sbx_cgroup_set_cpu_weight(cg, 10, &error));
    assert_file(cpu, "cpu.shares", "102");
    assert_true(sbx_cgroup_set_cpu_weight(cg, 1, &error));
    assert_file(cpu, "cpu.shares", "10");
    assert_true(sbx_cgroup_set_cpu_weight(cg, 100, &error));
    assert_file(cpu, "cpu.shares", "1024");
    assert_false(sbx_cgroup_set_cpu_weight(cg, 0, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID));
    g_clear_error(&error);
    assert_false(sbx_cgroup_set_cpu_weight(cg, 10001, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_INVALID));
    g_clear_error(&error);
    assert_file(cpu, "cpu.shares", "1024");
    assert_int_equal(join_in_child(cg), 0);
    for (guint i = 0; i < 3; i++)
        assert_file(dirs[i], "cgroup.procs", "0");
}

static void test_v1_fake_partial(void **state)
{
    Fixture *fx = *state;
    g_autofree char *memory = g_build_filename(fx->tmp, "memory", "sandbox", "vm-10", NULL);
    g_autofree char *nopids = g_build_filename(fx->tmp, "x", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 300 * MiB, .cpu_weight = 1};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;

    /* No cpu hierarchy, no memsw: works, without a weight. */
    fake_v1(fx->tmp, "vm-10", FALSE, FALSE);
    g_setenv("SANDBOX_CGROUP_V1_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-10", &limits, &error);
    assert_non_null(cg);
    assert_false(sbx_cgroup_has_cpu_weight(cg));
    assert_null(sbx_cgroup_dirs(cg)[2]);
    assert_true(sbx_cgroup_set_cpu_weight(cg, 10, &error)); /* nothing to set: fine */
    assert_file(memory, "memory.limit_in_bytes", "314572800");
    assert_false(exists_in(memory, "memory.memsw.limit_in_bytes"));

    /* Only a memory hierarchy (an empty directory): unavailable, and what was made for memory
     * (sandbox/ and the leaf) is removed again. */
    {
        g_autofree char *only_memory = g_build_filename(nopids, "memory", NULL);

        put(only_memory, ".keep", "");
    }
    g_setenv("SANDBOX_CGROUP_V1_ROOT", nopids, TRUE);
    assert_null(sbx_cgroup_new("vm-10", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE));
    assert_non_null(strstr(error->message, "pids"));
    assert_true(exists_in(nopids, "memory"));
    assert_false(exists_in(nopids, "memory/sandbox"));
}

static GString *captured;

static void capture(const char *text)
{
    g_string_append(captured, text);
}

/* Neither hierarchy: UNAVAILABLE naming both, and one warning per process. */
static void test_unavailable_warns_once(void **state)
{
    Fixture *fx = *state;
    g_autofree char *v2 = g_build_filename(fx->tmp, "no-v2", NULL);
    g_autofree char *v1 = g_build_filename(fx->tmp, "no-v1", NULL);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;
    g_autoptr(GError) other = g_error_new(SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_FAILED, "x");
    GPrintFunc old;

    g_setenv("SANDBOX_CGROUP_ROOT", v2, TRUE);
    g_setenv("SANDBOX_CGROUP_V1_ROOT", v1, TRUE);
    assert_null(sbx_cgroup_new("vm-11", &limits, &error));
    assert_true(g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE));
    assert_non_null(strstr(error->message, v2));
    assert_non_null(strstr(error->message, v1));

    captured = g_string_new(NULL);
    old = g_set_printerr_handler(capture);
    assert_false(sbx_cgroup_warn_once(other)); /* not ours to excuse: nothing printed */
    assert_int_equal(captured->len, 0);
    assert_true(sbx_cgroup_warn_once(error));
    assert_true(sbx_cgroup_warn_once(error));
    g_set_printerr_handler(old);
    print_message("%s", captured->str);
    assert_true(
        g_str_has_prefix(captured->str, "sandbox: warning: no writable cgroup hierarchy (v2 "));
    assert_true(g_str_has_suffix(captured->str, "): VMs run without memory/pids/CPU limits\n"));
    assert_int_equal(strchr(captured->str, '\n') - captured->str + 1, captured->len); /* once */
    g_string_free(captured, TRUE);
}

typedef struct {
    GPid pid;
    char *procs;
    int status;
} Reaper;

/* Plays the kernel: once the child is dead, it is no longer listed in cgroup.procs. */
static void *reap_and_unlist(void *data)
{
    Reaper *r = data;

    waitpid(r->pid, &r->status, 0);
    g_file_set_contents(r->procs, "", 0, NULL);
    return NULL;
}

/* Without cgroup.kill, every listed pid gets a SIGKILL (through a pidfd); never this process. */
static void test_kill_each(void **state)
{
    Fixture *fx = *state;
    g_autofree char *leaf = fake_v2(fx->tmp, "vm-12", "memory pids", FALSE);
    SbxCgroupLimits limits = {.memory_bytes = 64 * MiB};
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCgroup) cg = NULL;
    g_autofree char *text = NULL;
    Reaper r = {0};
    pthread_t thread;

    g_setenv("SANDBOX_CGROUP_ROOT", fx->tmp, TRUE);
    cg = sbx_cgroup_new("vm-12", &limits, &error);
    assert_non_null(cg);
    r.pid = spawn((const char *const[]){"sleep", "60", NULL}, NULL, NULL);
    r.procs = g_build_filename(leaf, "cgroup.procs", NULL);
    text = g_strdup_printf("%d\n", (int)r.pid);
    assert_true(g_file_set_contents(r.procs, text, -1, NULL));
    assert_int_equal(pthread_create(&thread, NULL, reap_and_unlist, &r), 0);
    assert_false(sbx_cgroup_destroy(cg, &error)); /* rmdir of a fake fails */
    pthread_join(thread, NULL);
    assert_true(WIFSIGNALED(r.status));
    assert_int_equal(WTERMSIG(r.status), SIGKILL);
    assert_null(strstr(error->message, "still in"));
    g_clear_error(&error);
    g_free(r.procs);

    /* This process listed (someone attached the agent itself): left alone, reported. */
    g_clear_pointer(&cg, sbx_cgroup_free);
    cg = sbx_cgroup_new("vm-12", &limits, &error);
    assert_non_null(cg);
    g_free(text);
    text = g_strdup_printf("%d\n", (int)getpid());
    put(leaf, "cgroup.procs", text);
    assert_false(sbx_cgroup_destroy(cg, &error));
    assert_non_null(strstr(error->message, "1 processes still in"));
    put(leaf, "cgroup.procs", ""); /* or the free at the end waits for us again */
}

static void test_null(void **state)
{
    (void)state;
    sbx_cgroup_free(NULL);
    assert_int_equal(sbx_cgroup_join_self(NULL), 0);
    sbx_cgroup_child_setup(NULL); /* returns: nothing to join */
}

/* /proc/@pid/cgroup has a line ending in /sandbox/@name for each of @cg's hierarchies. */
static void assert_member(GPid pid, const SbxCgroup *cg, const char *name)
{
    g_autofree char *path = g_strdup_printf("/proc/%d/cgroup", (int)pid);
    g_autofree char *suffix = g_strdup_printf("/sandbox/%s", name);
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;
    guint found = 0;

    assert_true(g_file_get_contents(path, &text, NULL, NULL));
    lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++)
        found += g_str_has_suffix(*l, suffix);
    if (found != g_strv_length((char **)sbx_cgroup_dirs(cg)))
        fail_msg("pid %d: %u lines of %s end in %s:\n%s", (int)pid, found, path, suffix, text);
    for (const char *const *d = sbx_cgroup_dirs(cg); *d; d++) {
        g_autofree char *procs = get(*d, "cgroup.procs");
        g_autofree char *line = g_strdup_printf("%d", (int)pid);
        g_auto(GStrv) pids = g_strsplit(procs, "\n", -1);

        assert_true(g_strv_contains((const char *const *)pids, line));
    }
}

/* The number after "max" in pids.events: how often a fork was refused. */
static guint64 pids_refused(const char *dir)
{
    g_autofree char *text = get(dir, "pids.events");
    const char *max = text ? strstr(text, "max ") : NULL;

    return max ? g_ascii_strtoull(max + 4, NULL, 10) : 0;
}

/* Reap every orphan that came to us (PR_SET_CHILD_SUBREAPER), bounded. */
static void reap_orphans(void)
{
    gint64 deadline = g_get_monotonic_time() + CHILD_WAIT_MS * G_TIME_SPAN_MILLISECOND;

    for (;;) {
        pid_t pid = waitpid(-1, NULL, WNOHANG);

        if (pid < 0 && errno == ECHILD)
            return;
        if (pid == 0) {
            if (g_get_monotonic_time() > deadline)
                fail_msg("orphans still alive after %d ms", CHILD_WAIT_MS);
            g_usleep(POLL_MS * 1000);
        }
    }
}

static gboolean has_subdir(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *entry;

    while (d && (entry = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, entry, NULL);

        if (g_file_test(path, G_FILE_TEST_IS_DIR))
            return TRUE;
    }
    return FALSE;
}

static void assert_killed(GPid pid)
{
    int status = wait_child(pid);

    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
}

/* The limit files of a real cgroup hold @limits. */
static void assert_real_limits(const SbxCgroup *cg, const SbxCgroupLimits *limits)
{
    const char *const *dirs = sbx_cgroup_dirs(cg);
    g_autofree char *memory = g_strdup_printf("%" G_GUINT64_FORMAT, limits->memory_bytes);
    g_autofree char *pids = g_strdup_printf("%u", limits->pids_max);
    g_autofree char *swap = NULL;

    if (sbx_cgroup_version(cg) == 2) {
        assert_file(dirs[0], "memory.max", memory);
        assert_file(dirs[0], "pids.max", pids);
        swap = get(dirs[0], "memory.swap.max");
        if (swap)
            assert_string_equal(g_strstrip(swap), "0");
        if (sbx_cgroup_has_cpu_weight(cg))
            assert_file(dirs[0], "cpu.weight", "50");
        return;
    }
    assert_file(dirs[0], "memory.limit_in_bytes", memory);
    swap = get(dirs[0], "memory.memsw.limit_in_bytes");
    if (swap)
        assert_string_equal(g_strstrip(swap), memory);
    assert_file(dirs[1], "pids.max", pids);
    if (sbx_cgroup_has_cpu_weight(cg))
        assert_file(dirs[2], "cpu.shares", "512"); /* weight 50 */
}

static void test_real(void **state)
{
    static const char *const fork_bomb[] = {
        "sh", "-c", "i=0; while [ $i -lt 40 ]; do sleep 60 & i=$((i+1)); done; wait", NULL};
    SbxCgroupLimits limits = {.memory_bytes = 300 * MiB, .pids_max = 16, .cpu_weight = 50};
    g_autofree char *name = g_strdup_printf("test-cgroup-%d", (int)getpid());
    g_autoptr(GError) error = NULL;
    g_auto(GStrv) dirs = NULL;
    Fixture *fx = *state;
    SbxCgroup *cg;
    GPid joined, attached, shell;
    const char *pids_dir;
    gint64 deadline;

    if (geteuid() != 0) {
        print_message("skipped: needs root to create cgroups on the real hierarchy\n");
        skip();
    }
    cg = fx->real = sbx_cgroup_new(name, &limits, &error);
    if (!cg && g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE)) {
        print_message("skipped: no usable cgroup hierarchy: %s\n", error->message);
        skip();
    }
    if (!cg)
        fail_msg("%s", error->message);
    dirs = g_strdupv((char **)sbx_cgroup_dirs(cg));
    print_message("cgroup v%d: %s\n", sbx_cgroup_version(cg), dirs[0]);
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);

    /* Joined between fork and exec, in GLib's child setup. */
    joined = spawn((const char *const[]){"sleep", "60", NULL}, sbx_cgroup_child_setup, cg);
    assert_member(joined, cg, name);
    assert_real_limits(cg, &limits);
    /* Moved while running. */
    attached = spawn((const char *const[]){"sleep", "60", NULL}, NULL, NULL);
    assert_true(sbx_cgroup_attach(cg, attached, &error));
    assert_member(attached, cg, name);

    /* The pids limit holds: a shell starting 40 sleeps gets some forks refused. */
    pids_dir = sbx_cgroup_version(cg) == 2 ? dirs[0] : dirs[1];
    shell = spawn(fork_bomb, sbx_cgroup_child_setup, cg);
    deadline = g_get_monotonic_time() + PIDS_WAIT_MS * G_TIME_SPAN_MILLISECOND;
    while (pids_refused(pids_dir) == 0 && g_get_monotonic_time() < deadline)
        g_usleep(POLL_MS * 1000);
    assert_true(pids_refused(pids_dir) > 0);
    {
        g_autofree char *current = get(pids_dir, "pids.current");

        assert_non_null(current);
        assert_true(g_ascii_strtoull(current, NULL, 10) <= limits.pids_max);
    }

    /* Free kills all of it and removes every directory. */
    assert_true(sbx_cgroup_destroy(cg, &error));
    g_clear_pointer(&fx->real, sbx_cgroup_free);
    for (char **d = dirs; *d; d++) {
        g_autofree char *parent = g_path_get_dirname(*d);

        assert_false(exists(*d));
        /* sandbox/ too, unless another agent's VM is in it right now. */
        if (exists(parent) && !has_subdir(parent))
            fail_msg("%s is empty but still there", parent);
    }
    assert_killed(joined);
    assert_killed(attached);
    /* The shell may have given up by itself when a fork was refused; dead either way. */
    wait_child(shell);
    reap_orphans(); /* the shell's sleeps, killed too */
}

/*
 * A killed agent's VM cgroup (named after its dead pid) is swept by the next agent: what still
 * runs in it is killed, the directories go; a live agent's is left alone.
 */
static void test_real_sweep(void **state)
{
    SbxCgroupLimits limits = {.memory_bytes = 300 * MiB, .pids_max = 16, .cpu_weight = 50};
    g_autoptr(GError) error = NULL;
    g_auto(GStrv) stale_dirs = NULL, live_dirs = NULL;
    Fixture *fx = *state;
    GPid dead, straggler;
    SbxCgroup *stale, *live;

    (void)fx;
    if (geteuid() != 0) {
        print_message("skipped: needs root to create cgroups on the real hierarchy\n");
        skip();
    }
    dead = spawn((const char *const[]){"true", NULL}, NULL, NULL);
    wait_child(dead); /* its pid names the stale cgroup: no process has it now */
    g_autofree char *stale_name = g_strdup_printf("vm-%d-0", (int)dead);
    g_autofree char *live_name = g_strdup_printf("vm-%d-0", (int)getpid());
    stale = sbx_cgroup_new(stale_name, &limits, &error);
    if (!stale && g_error_matches(error, SBX_CGROUP_ERROR, SBX_CGROUP_ERROR_UNAVAILABLE)) {
        print_message("skipped: no usable cgroup hierarchy: %s\n", error->message);
        skip();
    }
    assert_non_null(stale);
    stale_dirs = g_strdupv((char **)sbx_cgroup_dirs(stale));
    assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    straggler = spawn((const char *const[]){"sleep", "60", NULL}, sbx_cgroup_child_setup, stale);
    live = sbx_cgroup_new(live_name, &limits, &error);
    assert_non_null(live);
    live_dirs = g_strdupv((char **)sbx_cgroup_dirs(live));

    sbx_cgroup_sweep_stale(live, "vm-");
    for (char **d = stale_dirs; *d; d++)
        assert_false(exists(*d));
    for (char **d = live_dirs; *d; d++)
        assert_true(exists(*d));
    assert_killed(straggler);
    sbx_cgroup_free(stale); /* its directories are gone already: nothing to do, no error */
    sbx_cgroup_free(live);
    for (char **d = live_dirs; *d; d++)
        assert_false(exists(*d));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_limits),
        cmocka_unit_test_setup_teardown(test_v2_fake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_fake_minimal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_fake_enabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_fake_fresh_cleanup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_fake_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_fake_unusable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v2_fake_in_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_fake, setup, teardown),
        cmocka_unit_test_setup_teardown(test_v1_fake_partial, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unavailable_warns_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill_each, setup, teardown),
        cmocka_unit_test(test_null),
        cmocka_unit_test_setup_teardown(test_real, setup, teardown),
        cmocka_unit_test_setup_teardown(test_real_sweep, setup, teardown),
    };

    if (g_getenv("TEST_FILTER"))
        cmocka_set_test_filter(g_getenv("TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
