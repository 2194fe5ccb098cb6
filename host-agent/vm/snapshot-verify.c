/* Snapshot integrity: the cache's owner and mode, digests and their stamp (snapshot-verify.h). */
#include "snapshot-verify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vm-error.h"

/* Hashing unit: a few syscalls per MiB, in cache. */
#define CHUNK (1024 * 1024)
#define PAGE 4096

/* `digests` and `verified` hold two short lines each; anything bigger is not ours. */
#define RECORD_MAX 4096

static const char *const digested[] = SBX_SNAPSHOT_DIGESTED;

gboolean sbx_snapshot_cache_check(const char *cache, GError **error)
{
    struct stat st;

    if (g_mkdir_with_parents(cache, 0700) < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot create %s: %s", cache,
                           g_strerror(errno));
    if (lstat(cache, &st) < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "%s: %s", cache, g_strerror(errno));
    /* A snapshot is what every later VM starts from: nobody else may plant or change one. */
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
        return sbx_vm_fail(
            error, SBX_VM_ERROR_SNAPSHOT,
            "snapshot cache %s must be a directory owned by uid %u that nobody else can "
            "use (it is %s, owner %u, mode %03o): chmod 700 it, or remove it to start "
            "afresh",
            cache, (unsigned)geteuid(), S_ISDIR(st.st_mode) ? "a directory" : "no directory",
            (unsigned)st.st_uid, st.st_mode & 0777);
    return TRUE;
}

static gboolean all_zero(const guint8 *p, gsize len)
{
    return len == 0 || (p[0] == 0 && memcmp(p, p + 1, len - 1) == 0);
}

char *sbx_snapshot_file_digest(const char *path, GError **error)
{
    g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_SHA256);
    g_autofree guint8 *buf = g_malloc(CHUNK);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    off_t off = 0;

    if (fd < 0 || fstat(fd, &st) < 0) {
        sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot read %s: %s", path, g_strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    while (off < st.st_size) {
        /* Holes read as zeros and are left out like zero pages: skip them without reading. */
        off_t data = lseek(fd, off, SEEK_DATA);
        if (data < 0)
            break; /* ENXIO: only a hole is left */
        ssize_t n = pread(fd, buf, CHUNK, data - data % PAGE);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot read %s: %s", path,
                        n < 0 ? g_strerror(errno) : "it shrank");
            close(fd);
            return NULL;
        }
        off = data - data % PAGE;
        for (gsize p = 0; p < (gsize)n; p += PAGE) {
            gsize len = MIN((gsize)PAGE, (gsize)n - p);
            guint64 at = GUINT64_TO_LE((guint64)off + p);
            if (all_zero(buf + p, len))
                continue;
            g_checksum_update(sum, (const guint8 *)&at, sizeof at);
            g_checksum_update(sum, buf + p, len);
        }
        off += n;
    }
    close(fd);
    guint64 size = GUINT64_TO_LE((guint64)st.st_size);
    g_checksum_update(sum, (const guint8 *)&size, sizeof size);
    return g_strdup(g_checksum_get_string(sum));
}

/* "<name> <dev> <ino> <size> <mtime s.ns> <ctime s.ns>" of the file: what the stamp holds. */
static char *identity(const char *dir, const char *name)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    struct stat st;

    if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
        return NULL;
    return g_strdup_printf("%s %ju %ju %jd %jd.%09ld %jd.%09ld", name, (uintmax_t)st.st_dev,
                           (uintmax_t)st.st_ino, (intmax_t)st.st_size, (intmax_t)st.st_mtim.tv_sec,
                           st.st_mtim.tv_nsec, (intmax_t)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

/* The stamp for the files as they are now; NULL if one is missing. */
static char *stamp_now(const char *dir)
{
    g_autoptr(GString) s = g_string_new(NULL);

    for (guint i = 0; i < G_N_ELEMENTS(digested); i++) {
        g_autofree char *id = identity(dir, digested[i]);
        if (!id)
            return NULL;
        g_string_append_printf(s, "%s\n", id);
    }
    return g_string_free(g_steal_pointer(&s), FALSE);
}

static gboolean write_record(const char *dir, const char *name, const char *text, GError **error)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);

    /* Atomic (temp file + rename): a reader sees the old record or the new one. */
    return g_file_set_contents_full(path, text, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0400, error);
}

static char *read_record(const char *dir, const char *name)
{
    g_autofree char *path = g_build_filename(dir, name, NULL);
    char *text = NULL;
    gsize len = 0;

    if (!g_file_get_contents(path, &text, &len, NULL))
        return NULL;
    if (len > RECORD_MAX || strlen(text) != len) {
        g_free(text);
        return NULL;
    }
    return text;
}

/* "<hex digest>  <name>\n" for every digested file, as sha256sum prints. */
static char *digest_all(const char *dir, GError **error)
{
    g_autoptr(GString) s = g_string_new(NULL);

    for (guint i = 0; i < G_N_ELEMENTS(digested); i++) {
        g_autofree char *path = g_build_filename(dir, digested[i], NULL);
        g_autofree char *d = sbx_snapshot_file_digest(path, error);
        if (!d)
            return NULL;
        g_string_append_printf(s, "%s  %s\n", d, digested[i]);
    }
    return g_string_free(g_steal_pointer(&s), FALSE);
}

gboolean sbx_snapshot_digests_write(const char *dir, GError **error)
{
    g_autofree char *digests = digest_all(dir, error);
    g_autofree char *stamp = NULL;

    if (!digests || !write_record(dir, "digests", digests, error))
        return FALSE;
    stamp = stamp_now(dir);
    return stamp && write_record(dir, "verified", stamp, error);
}

/* The line of @text for @name ("<hex>  <name>"), as its digest; NULL if none. */
static char *recorded_digest(const char *text, const char *name)
{
    g_auto(GStrv) lines = g_strsplit(text, "\n", -1);

    for (guint i = 0; lines[i]; i++) {
        const char *sep = strstr(lines[i], "  ");
        if (sep && sep - lines[i] == 64 && g_str_equal(sep + 2, name))
            return g_strndup(lines[i], 64);
    }
    return NULL;
}

gboolean sbx_snapshot_digests_check(const char *dir, GError **error)
{
    g_autofree char *recorded = read_record(dir, "digests");
    g_autofree char *stamp = read_record(dir, "verified");
    g_autofree char *now = stamp_now(dir);

    if (!recorded)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                           "snapshot %s: its digests are missing or damaged: remove it, and it "
                           "is made again",
                           dir);
    if (!now)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "snapshot %s: state.bin or ram is missing",
                           dir);
    if (stamp && g_str_equal(stamp, now))
        return TRUE; /* nothing wrote to them since they were found right */
    for (guint i = 0; i < G_N_ELEMENTS(digested); i++) {
        g_autofree char *path = g_build_filename(dir, digested[i], NULL);
        g_autofree char *want = recorded_digest(recorded, digested[i]);
        g_autofree char *have = sbx_snapshot_file_digest(path, error);
        if (!have)
            return FALSE;
        if (!want || !g_str_equal(want, have))
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT,
                               "snapshot %s: %s is not what was made (sha256 %s recorded, %s now): "
                               "it was changed; remove the directory, and it is made again",
                               dir, digested[i], want ? want : "(none)", have);
    }
    /* Right: stamp them, so the next check is a stat() each. A failure to write only costs
     * the next check a hash. */
    write_record(dir, "verified", now, NULL);
    return TRUE;
}
