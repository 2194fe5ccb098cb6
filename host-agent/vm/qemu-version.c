/*
 * QEMU's version line, an input of every snapshot's key (snapshot.h). Asking QEMU costs a
 * process (~20 ms) on every `sandbox run`; the answer is kept in the snapshot cache, tied to the
 * binary's identity (path, device, inode, size, modification time): a new QEMU is a new file.
 */
#include "qemu.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "base/paths.h"
#include "vm-error.h"

/* The cache file in the snapshot cache dir: the identity line, then the version line. */
#define VERSION_FILE ".qemu-version"
/* A version line is short ("QEMU emulator version 7.2.22 (Debian ...)"); this bounds a damaged
 * or foreign file. */
#define VERSION_FILE_MAX 4096

static char *identity(const char *path, const struct stat *st)
{
    return g_strdup_printf("%s %ju %ju %jd %jd.%09ld", path, (uintmax_t)st->st_dev,
                           (uintmax_t)st->st_ino, (intmax_t)st->st_size,
                           (intmax_t)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
}

/* The version recorded in @file for @id, or NULL. */
static char *read_cached(const char *file, const char *id)
{
    g_autofree char *text = NULL;
    gsize len = 0;
    struct stat st;

    if (stat(file, &st) < 0 || st.st_size > VERSION_FILE_MAX ||
        !g_file_get_contents(file, &text, &len, NULL) || len > VERSION_FILE_MAX ||
        strlen(text) != len)
        return NULL;
    g_auto(GStrv) lines = g_strsplit(text, "\n", 3);
    if (g_strv_length(lines) < 2 || strcmp(lines[0], id) != 0 || !*lines[1])
        return NULL;
    return g_strdup(lines[1]);
}

static char *ask(const char *path, GError **error)
{
    const char *argv[] = {path, "--version", NULL};
    g_autofree char *out = NULL;
    int status = 0;

    if (!g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, &out, NULL,
                      &status, error))
        return NULL;
    if (!g_spawn_check_wait_status(status, NULL) || !out || !*out || *out == '\n') {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT, "%s --version failed", path);
        return NULL;
    }
    out[strcspn(out, "\n")] = '\0';
    return g_steal_pointer(&out);
}

char *sbx_qemu_version(const char *cache_dir, GError **error)
{
    g_autofree char *qemu = sbx_paths_qemu();
    g_autofree char *path = g_find_program_in_path(qemu);
    struct stat st;

    if (!path || stat(path, &st) < 0) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT, "QEMU (%s) not found: %s", qemu,
                    path ? g_strerror(errno) : "not in PATH");
        return NULL;
    }
    g_autofree char *id = identity(path, &st);
    g_autofree char *file = cache_dir ? g_build_filename(cache_dir, VERSION_FILE, NULL) : NULL;
    char *version = file ? read_cached(file, id) : NULL;

    if (version)
        return version;
    version = ask(path, error);
    /* Only into a cache dir that exists (made 0700 by the snapshot code); a failed write just
     * means asking again next time. */
    if (version && file && g_file_test(cache_dir, G_FILE_TEST_IS_DIR)) {
        g_autofree char *text = g_strdup_printf("%s\n%s\n", id, version);
        g_file_set_contents(file, text, -1, NULL);
    }
    return version;
}
