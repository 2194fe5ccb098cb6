/*
 * A kept snapshot's RAM file compressed at rest (snapshot-private.h; docs/snapshot.md, "Kept
 * snapshots"): `ram` <-> `ram.zst` with libzstd's streaming API. A 256 MiB guest's RAM file
 * takes 183 MiB on disk and 55 MiB compressed at level 3 (0.85 s), and comes back in 0.27 s
 * (docs/measurements.md, "Kept snapshots"): a replay pays a quarter second for two thirds of
 * the disk. Each direction writes a temporary file and renames it, so a crash leaves either
 * form whole; decompression writes zero pages as holes, as the RAM file was made.
 */
#include "snapshot-private.h"

#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "vm-error.h"

/* zstd's default level: 3x smaller than the sparse file; higher levels cost seconds per GiB
 * for a few percent. */
#define RAM_ZSTD_LEVEL 3

/* A RAM file is a guest's memory: at most the profile loader's 16384 MiB. The compressed
 * file is ours (an owner-only cache), bounded anyway so a damaged one cannot fill the disk. */
#define RAM_MAX (16384ull * 1024 * 1024)

#define PAGE 4096

static gboolean io_fail(GError **error, const char *what, const char *path)
{
    return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "%s %s: %s", what, path, g_strerror(errno));
}

static gboolean write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return FALSE;
        p += n;
        len -= (size_t)n;
    }
    return TRUE;
}

/* @len bytes at the file's position, all-zero pages skipped (holes). */
static gboolean write_sparse(int fd, const char *buf, size_t len)
{
    static const char zero[PAGE];

    for (size_t off = 0; off < len; off += PAGE) {
        size_t n = MIN((size_t)PAGE, len - off);

        if (memcmp(buf + off, zero, n) == 0 ? lseek(fd, (off_t)n, SEEK_CUR) < 0
                                            : !write_all(fd, buf + off, n))
            return FALSE;
    }
    return TRUE;
}

static gboolean compress_fd(int in, int out, ZSTD_CCtx *c, GError **error)
{
    size_t in_cap = ZSTD_CStreamInSize(), out_cap = ZSTD_CStreamOutSize();
    g_autofree char *ibuf = g_malloc(in_cap), *obuf = g_malloc(out_cap);
    ssize_t n;

    do {
        if ((n = read(in, ibuf, in_cap)) < 0)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "read: %s", g_strerror(errno));
        ZSTD_EndDirective mode = n == 0 ? ZSTD_e_end : ZSTD_e_continue;
        ZSTD_inBuffer ib = {ibuf, (size_t)n, 0};
        size_t rc;

        do {
            ZSTD_outBuffer ob = {obuf, out_cap, 0};

            rc = ZSTD_compressStream2(c, &ob, &ib, mode);
            if (ZSTD_isError(rc))
                return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "zstd: %s", ZSTD_getErrorName(rc));
            if (!write_all(out, obuf, ob.pos))
                return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "write: %s", g_strerror(errno));
        } while (mode == ZSTD_e_end ? rc != 0 : ib.pos < ib.size);
    } while (n > 0);
    return TRUE;
}

static gboolean decompress_fd(int in, int out, ZSTD_DCtx *d, GError **error)
{
    size_t in_cap = ZSTD_DStreamInSize(), out_cap = ZSTD_DStreamOutSize();
    g_autofree char *ibuf = g_malloc(in_cap), *obuf = g_malloc(out_cap);
    guint64 total = 0;
    size_t rc = 1;
    ssize_t n;

    while ((n = read(in, ibuf, in_cap)) != 0) {
        if (n < 0)
            return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "read: %s", g_strerror(errno));
        ZSTD_inBuffer ib = {ibuf, (size_t)n, 0};

        while (ib.pos < ib.size) {
            ZSTD_outBuffer ob = {obuf, out_cap, 0};

            rc = ZSTD_decompressStream(d, &ob, &ib);
            if (ZSTD_isError(rc))
                return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "ram.zst: %s",
                                   ZSTD_getErrorName(rc));
            total += ob.pos;
            if (total > RAM_MAX)
                return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "ram.zst: larger than a RAM");
            if (!write_sparse(out, obuf, ob.pos))
                return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "write: %s", g_strerror(errno));
        }
    }
    if (rc != 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "ram.zst: cut short");
    return ftruncate(out, (off_t)total) == 0 ||
           sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "truncate: %s", g_strerror(errno));
}

/* @from in @dir through compress or decompress into @to, by a temporary file; @from removed. */
static gboolean convert(const char *dir, const char *from, const char *to, gboolean compress,
                        GError **error)
{
    g_autofree char *src = g_build_filename(dir, from, NULL);
    g_autofree char *dst = g_build_filename(dir, to, NULL);
    g_autofree char *tmp = g_strconcat(dst, ".tmp", NULL);
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    int out = in >= 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    ZSTD_CCtx *c = compress ? ZSTD_createCCtx() : NULL;
    ZSTD_DCtx *d = compress ? NULL : ZSTD_createDCtx();
    gboolean ok;

    if (in < 0 || out < 0) {
        ok = io_fail(error, "cannot open", in < 0 ? src : tmp);
    } else {
        if (c != NULL)
            ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, RAM_ZSTD_LEVEL);
        ok = compress ? compress_fd(in, out, c, error) : decompress_fd(in, out, d, error);
        ok = ok && (fsync(out) == 0 || io_fail(error, "cannot sync", tmp));
    }
    if (out >= 0)
        close(out);
    if (in >= 0)
        close(in);
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
    ok = ok && (rename(tmp, dst) == 0 || io_fail(error, "cannot rename", tmp));
    if (!ok) {
        g_unlink(tmp);
        g_prefix_error(error, "snapshot %s: ", dir);
        return FALSE;
    }
    g_unlink(src);
    return TRUE;
}

gboolean sbx_snapshot_ram_compress(const char *dir, GError **error)
{
    return convert(dir, "ram", SBX_SNAPSHOT_RAM_ZST, TRUE, error);
}

gboolean sbx_snapshot_ram_decompress(const char *dir, GError **error)
{
    return convert(dir, SBX_SNAPSHOT_RAM_ZST, "ram", FALSE, error);
}
