/*
 * RAM files (ramfile.h). A 256 MiB guest touches ~100-150 MiB by the time it is warm; the rest
 * stays a hole, and copying only the data keeps a restore's copy at ~40 ms (shared/FINDINGS.md).
 */
#include "ramfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vm-error.h"

/* Copy unit: big enough for few syscalls, small enough to stay in cache. */
#define CHUNK (1024 * 1024)

/* The page size the zero check works in: a guest page is 4 KiB. */
#define PAGE 4096

static gboolean fail_errno(GError **error, int err, const char *what, const char *path)
{
    g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT, "%s %s: %s", what, path,
                g_strerror(err));
    return FALSE;
}

int sbx_ramfile_new(guint64 size, GError **error)
{
    /* A memfd: nameless like an O_TMPFILE in /dev/shm, and sealable (sbx_ramfile_seal). A
     * jailed QEMU opens it again through /proc/self/fd: a memfd's mode lets it. */
    int fd = memfd_create("sbx-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0) {
        fail_errno(error, errno, "cannot create a RAM file:", "memfd_create");
        return -1;
    }
    if (ftruncate(fd, (off_t)size) < 0) {
        int e = errno;
        close(fd);
        fail_errno(error, e, "cannot size a RAM file:", "ftruncate");
        return -1;
    }
    return fd;
}

gboolean sbx_ramfile_seal(int fd, GError **error)
{
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        return fail_errno(error, errno, "cannot seal a RAM file:", "F_ADD_SEALS");
    return TRUE;
}

static gboolean all_zero(const guint8 *p, gsize len)
{
    return len == 0 || (p[0] == 0 && memcmp(p, p + 1, len - 1) == 0);
}

/* Copy [off, end) from @in to @out at the same offsets; with @skip_zero, leave zero pages out. */
static int copy_range(int in, int out, off_t off, off_t end, gboolean skip_zero, guint8 *buf)
{
    while (off < end) {
        gsize want = (gsize)MIN((off_t)CHUNK, end - off);
        ssize_t n = pread(in, buf, want, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        for (gsize p = 0; p < (gsize)n; p += PAGE) {
            gsize len = MIN((gsize)PAGE, (gsize)n - p);
            if (skip_zero && all_zero(buf + p, len))
                continue;
            if (pwrite(out, buf + p, len, off + (off_t)p) != (ssize_t)len)
                return -EIO;
        }
        off += n;
    }
    return 0;
}

/*
 * Copy [off, end) with sendfile (in the kernel: ~30% faster than read/write from a disk file's
 * page cache into tmpfs; copy_file_range refuses across file systems). -EINVAL/-ENOSYS: the
 * caller falls back to copy_range().
 */
static int send_range(int in, int out, off_t off, off_t end)
{
    if (lseek(out, off, SEEK_SET) < 0)
        return -errno;
    while (off < end) {
        ssize_t n = sendfile(out, in, &off, (size_t)MIN(end - off, (off_t)(1 << 30)));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO; /* the file shrank under us */
    }
    return 0;
}

/* Copy the data extents of @in (SEEK_DATA/SEEK_HOLE) to @out and give it @in's size. */
static int copy_sparse(int in, int out, gboolean skip_zero)
{
    struct stat st;
    g_autofree guint8 *buf = g_malloc(CHUNK);
    off_t off = 0;

    if (fstat(in, &st) < 0)
        return -errno;
    while (off < st.st_size) {
        off_t data = lseek(in, off, SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break; /* only a hole is left */
        if (data < 0)
            return -errno;
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            return -errno;
        int r = skip_zero ? -EINVAL : send_range(in, out, data, hole);
        if (r == -EINVAL || r == -ENOSYS)
            r = copy_range(in, out, data, hole, skip_zero, buf);
        if (r < 0)
            return r;
        off = hole;
    }
    return ftruncate(out, st.st_size) < 0 ? -errno : 0;
}

gboolean sbx_ramfile_fill(int fd, const char *src, GError **error)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int r;

    if (in < 0)
        return fail_errno(error, errno, "cannot open the snapshot RAM", src);
    /* copy_sparse() sizes @fd like @src; a bigger file here would be QEMU's to refuse. */
    r = fstat(fd, &st) < 0 ? -errno : copy_sparse(in, fd, FALSE);
    close(in);
    return r < 0 ? fail_errno(error, -r, "cannot copy the snapshot RAM", src) : TRUE;
}

gboolean sbx_ramfile_save(int fd, const char *dst, GError **error)
{
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int r;

    if (out < 0)
        return fail_errno(error, errno, "cannot create", dst);
    r = copy_sparse(fd, out, TRUE);
    if (close(out) < 0 && r == 0)
        r = -errno;
    if (r < 0) {
        unlink(dst);
        return fail_errno(error, -r, "cannot write", dst);
    }
    return TRUE;
}
