/*
 * The workspace and its file operations (docs/protocol.md, "Files"): `file` requests from the
 * host (write, read, list, delete), each answered by one `file_result`, in the order they came
 * (the host keeps a few in flight: they wait in the connection, unread, while one is served).
 * A write's chunk comes attached to its request (the link read its data frame), a read's goes
 * after its answer in a data frame of its own, from the buffer pread() filled.
 *
 * Code in the VM owns the workspace and may plant symbolic links, FIFOs or mount points in it,
 * and a kept runner's background code may change it while we work. So every path is resolved
 * from the workspace's descriptor with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), and everything below goes through descriptors of
 * the directories found that way (never a path from the root): a symbolic link anywhere on a
 * path is ELOOP, another file system EXDEV, and nothing outside the workspace is touched.
 * What the agent creates belongs to the --run-as user (files 0644, directories 0755).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* The largest integer the protocol carries (docs/protocol.md: 2^53 - 1). */
#define FILES_INT_MAX 9007199254740991ull

/* A request's outcome: 0 or -errno, and for people what went wrong. */
typedef struct Outcome {
    char why[SBX_PATH_MAX + 256];
} Outcome;

static int failed(Outcome *o, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int failed(Outcome *o, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(o->why, sizeof(o->why), fmt, ap);
    va_end(ap);
    return err;
}

static int open_beneath(int dir_fd, const char *path, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .mode = (flags & O_CREAT) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
    };
    long fd = syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));

    return fd < 0 ? -errno : (int)fd;
}

/* Make @fd (created by us) the --run-as user's, with @mode. */
static int give(const Agent *a, int fd, mode_t mode)
{
    if (a->opt.run_as >= 0 && fchown(fd, (uid_t)a->opt.run_as, (gid_t)a->opt.run_as) < 0)
        return -errno;
    return fchmod(fd, mode) < 0 ? -errno : 0;
}

void files_init(Agent *a)
{
    const char *ws = a->opt.workspace;
    int fd;

    if (mkdir(ws, 0700) == 0) {
        fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || give(a, fd, 0700) < 0)
            agent_log("workspace %s: cannot give it to the user: %m", ws);
        safe_close(fd);
    } else if (errno != EEXIST) {
        agent_log("workspace %s: cannot create it: %m", ws);
    }
    a->workspace_fd = open(ws, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (a->workspace_fd < 0)
        agent_log("workspace %s: cannot open it: %m", ws);
}

/*
 * Open the directory @dir (a workspace path, or "" for the root) through the workspace,
 * creating what is missing when @create. Returns its descriptor or -errno.
 */
static int open_dirs(const Agent *a, const char *dir, bool create, Outcome *o)
{
    char comp[SBX_PATH_NAME_MAX + 1];
    int fd = open_beneath(a->workspace_fd, ".", O_RDONLY | O_DIRECTORY, 0);

    for (const char *p = dir; fd >= 0 && *p;) {
        size_t n = strcspn(p, "/"), upto = (size_t)(p - dir) + n;
        bool made = false;
        int next, r;

        memcpy(comp, p, n);
        comp[n] = '\0';
        p += n + (p[n] == '/');
        next = open_beneath(fd, comp, O_RDONLY | O_DIRECTORY, 0);
        if (next == -ENOENT && create) {
            made = mkdirat(fd, comp, 0755) == 0;
            next = made || errno == EEXIST ? open_beneath(fd, comp, O_RDONLY | O_DIRECTORY, 0)
                                           : -errno;
        }
        if (next >= 0 && made && (r = give(a, next, 0755)) < 0) {
            close(next);
            next = r;
        }
        close(fd);
        fd = next;
        if (fd < 0)
            return failed(o, fd, "%.*s: %s", (int)upto, dir, strerror(-fd));
    }
    return fd < 0 ? failed(o, fd, "the workspace: %s", strerror(-fd)) : fd;
}

/* Split @path into its directory (in @dir, "" for the root) and its last component. */
static const char *split(const char *path, char dir[SBX_PATH_MAX + 1])
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;

    memcpy(dir, path, n);
    dir[n] = '\0';
    return slash ? slash + 1 : path;
}

/* ---- write -------------------------------------------------------------------------------- */

void files_abort(Agent *a)
{
    Upload *u = &a->upload;

    if (!u->path)
        return;
    if (unlinkat(u->dir_fd, u->tmp, 0) < 0 && errno != ENOENT)
        agent_log("removing the unfinished write of %s: %m", u->path);
    u->fd = safe_close(u->fd);
    u->dir_fd = safe_close(u->dir_fd);
    free(u->path);
    u->path = NULL;
    u->name = NULL;
    u->written = 0;
}

/* A temporary file beside @u's target, opened for writing. */
static int create_temp(Agent *a, Upload *u)
{
    static unsigned counter;
    int fd = -EEXIST, r;

    for (int i = 0; i < 16 && fd == -EEXIST; i++) {
        snprintf(u->tmp, sizeof(u->tmp), ".sbx-write-%d-%u", (int)getpid(), counter++);
        fd = open_beneath(u->dir_fd, u->tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    }
    if (fd < 0)
        return fd;
    r = give(a, fd, 0644);
    if (r < 0) {
        unlinkat(u->dir_fd, u->tmp, 0);
        close(fd);
        return r;
    }
    u->fd = fd;
    return 0;
}

static int upload_start(Agent *a, const char *path, Outcome *o)
{
    Upload *u = &a->upload;
    char dir[SBX_PATH_MAX + 1];
    const char *name = split(path, dir);
    struct stat st;
    int r;

    u->dir_fd = open_dirs(a, dir, true, o);
    if (u->dir_fd < 0)
        return u->dir_fd;
    /* A directory there would refuse the rename only after the whole transfer. */
    if (fstatat(u->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        u->dir_fd = safe_close(u->dir_fd);
        return failed(o, -EISDIR, "%s is a directory", path);
    }
    u->path = strdup(path);
    if (!u->path) {
        u->dir_fd = safe_close(u->dir_fd);
        return failed(o, -ENOMEM, "out of memory");
    }
    u->name = u->path + (name - path);
    r = create_temp(a, u);
    if (r < 0) {
        failed(o, r, "%s: cannot create a temporary file beside it: %s", path, strerror(-r));
        u->dir_fd = safe_close(u->dir_fd);
        free(u->path);
        u->path = NULL;
        return r;
    }
    return 0;
}

static int write_all(int fd, const uint8_t *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

static int do_write(Agent *a, const SbxFile *f, SbxFileResult *res, Outcome *o)
{
    Upload *u = &a->upload;
    int r;

    /* Offset 0 starts a file (an unfinished one goes); any other continues the one going. */
    if (f->offset == 0) {
        files_abort(a);
        if ((r = upload_start(a, f->path, o)) < 0)
            return r;
    } else if (!u->path || strcmp(u->path, f->path) != 0) {
        files_abort(a);
        return failed(o, -EINVAL, "%s: offset %llu, but no write of it is going on", f->path,
                      (unsigned long long)f->offset);
    } else if (f->offset != u->written) {
        r = failed(o, -EINVAL, "%s: offset %llu, but %llu bytes were written so far", f->path,
                   (unsigned long long)f->offset, (unsigned long long)u->written);
        files_abort(a);
        return r;
    }
    if (f->len > FILES_INT_MAX - u->written) {
        files_abort(a);
        return failed(o, -EFBIG, "%s: too large", f->path);
    }
    if ((r = write_all(u->fd, f->data, f->len)) < 0) {
        failed(o, r, "%s: %s", f->path, strerror(-r));
        files_abort(a);
        return r;
    }
    u->written += f->len;
    res->size = u->written;
    if (!f->last)
        return 0;
    if (renameat(u->dir_fd, u->tmp, u->dir_fd, u->name) < 0) {
        r = failed(o, -errno, "%s: %s", f->path, strerror(errno));
        files_abort(a);
        return r;
    }
    u->tmp[0] = '\0'; /* in place: nothing to remove */
    files_abort(a);
    return 0;
}

/* ---- read --------------------------------------------------------------------------------- */

static int read_file(int fd, const SbxFile *f, SbxFileResult *res, Outcome *o)
{
    struct stat st;
    uint8_t *buf;
    size_t have = 0;

    if (fstat(fd, &st) < 0)
        return failed(o, -errno, "%s: %s", f->path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return failed(o, -EISDIR, "%s is a directory", f->path);
    if (!S_ISREG(st.st_mode))
        return failed(o, -EINVAL, "%s is not a regular file", f->path);
    if ((uint64_t)st.st_size > FILES_INT_MAX)
        return failed(o, -EFBIG, "%s is too large to read", f->path);
    buf = malloc(f->length);
    if (!buf)
        return failed(o, -ENOMEM, "out of memory");
    while (have < f->length) {
        ssize_t n = pread(fd, buf + have, f->length - have, (off_t)(f->offset + have));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            free(buf);
            return failed(o, -errno, "%s: %s", f->path, strerror(errno));
        }
        if (n == 0)
            break;
        have += (size_t)n;
    }
    res->size = (uint64_t)st.st_size;
    res->len = have;
    if (have)
        res->data = buf; /* sent as it is: files_on_request() */
    else
        free(buf);
    return 0;
}

static int do_read(Agent *a, const SbxFile *f, SbxFileResult *res, Outcome *o)
{
    /* Non-blocking: a FIFO planted there must not hold PID 1. */
    int fd = open_beneath(a->workspace_fd, f->path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
    int r;

    if (fd < 0)
        return failed(o, fd, "%s: %s", f->path, strerror(-fd));
    r = read_file(fd, f, res, o);
    close(fd);
    return r;
}

/* ---- list --------------------------------------------------------------------------------- */

typedef struct Listing {
    SbxFileEntry *entries; /* SBX_FILE_LIST_MAX */
    size_t n;
    bool truncated;
    bool full; /* one entry more than fits was found: stop */
    char path[SBX_PATH_MAX + 1 + SBX_PATH_NAME_MAX + 1];
} Listing;

/* Valid UTF-8 (shortest forms, no surrogates, at most U+10FFFF): JSON can carry it. */
static bool utf8_valid(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s;
        int n = c < 0x80             ? 0
                : (c & 0xe0) == 0xc0 ? 1
                : (c & 0xf0) == 0xe0 ? 2
                : (c & 0xf8) == 0xf0 ? 3
                                     : -1;
        uint32_t cp;

        if (n < 0)
            return false;
        cp = n == 0 ? c : c & (0x3f >> n);
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

static SbxFileType type_of(mode_t mode)
{
    return S_ISREG(mode)   ? SBX_FILE_TYPE_FILE
           : S_ISDIR(mode) ? SBX_FILE_TYPE_DIR
           : S_ISLNK(mode) ? SBX_FILE_TYPE_SYMLINK
                           : SBX_FILE_TYPE_OTHER;
}

static uint64_t mtime_us(const struct stat *st)
{
    int64_t us = (int64_t)st->st_mtim.tv_sec * 1000000 + st->st_mtim.tv_nsec / 1000;

    /* Clamped to what the protocol carries: before 1970 or after 2255 is code's own doing. */
    return us < 0 ? 0 : (uint64_t)us > FILES_INT_MAX ? FILES_INT_MAX : (uint64_t)us;
}

/* Add the entry l->path (@st); false when it cannot be said (the listing is truncated). */
static bool add_entry(Listing *l, const struct stat *st)
{
    SbxFileEntry *e = &l->entries[l->n];

    if (!sbx_workspace_path_valid(l->path) || !utf8_valid((const unsigned char *)l->path) ||
        (uint64_t)st->st_size > FILES_INT_MAX || !(e->path = strdup(l->path)))
        return false;
    e->type = type_of(st->st_mode);
    e->size = (uint64_t)st->st_size;
    e->mtime_us = mtime_us(st);
    l->n++;
    return true;
}

/* List the directory @fd (taken) whose path is l->path[0..@len), depth first. */
static void list_dir(Listing *l, int fd, size_t len, int depth)
{
    DIR *d = fdopendir(fd);
    struct dirent *de;

    if (!d) {
        close(fd);
        l->truncated = true;
        return;
    }
    while (!l->full && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        struct stat st;
        int sub;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (l->n == SBX_FILE_LIST_MAX) {
            l->truncated = l->full = true;
            break;
        }
        if (len + 1 + n > SBX_PATH_MAX) {
            l->truncated = true;
            continue;
        }
        snprintf(l->path + len, sizeof(l->path) - len, "%s%s", len ? "/" : "", de->d_name);
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* gone meanwhile */
        if (!add_entry(l, &st)) {
            l->truncated = true; /* nor what it holds */
        } else if (S_ISDIR(st.st_mode)) {
            sub = depth < FILES_DEPTH_MAX
                      ? open_beneath(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY, 0)
                      : -ELOOP;
            if (sub < 0)
                l->truncated = true; /* too deep, another file system, replaced meanwhile */
            else
                list_dir(l, sub, strlen(l->path), depth + 1);
        }
        l->path[len] = '\0';
    }
    closedir(d);
}

static int do_list(Agent *a, const SbxFile *f, SbxFileResult *res, Outcome *o)
{
    const char *path = f->path ? f->path : ".";
    int fd = open_beneath(a->workspace_fd, path, O_RDONLY | O_DIRECTORY, 0);
    Listing *l;

    if (fd < 0)
        return failed(o, fd, "%s: %s", f->path ? f->path : "the workspace", strerror(-fd));
    l = calloc(1, sizeof(*l));
    if (!l || !(l->entries = calloc(SBX_FILE_LIST_MAX, sizeof(*l->entries)))) {
        free(l);
        close(fd);
        return failed(o, -ENOMEM, "out of memory");
    }
    snprintf(l->path, sizeof(l->path), "%s", f->path ? f->path : "");
    list_dir(l, fd, strlen(l->path), 1);
    res->entries = l->entries;
    res->n_entries = l->n;
    res->truncated = l->truncated;
    free(l);
    return 0;
}

/* ---- delete ------------------------------------------------------------------------------- */

/* Move the directory @name of @dir into @top, under a name nothing there has. 0 or -errno. */
static int move_up(int dir, const char *name, int top)
{
    static unsigned counter;
    char up[32];

    for (int i = 0; i < 64; i++) {
        snprintf(up, sizeof(up), ".sbx-delete-%u", counter++);
        if (renameat2(dir, name, top, up, RENAME_NOREPLACE) == 0)
            return 0;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

/*
 * Empty the directory @fd (taken), @depth levels below @top (the directory being deleted).
 * Deeper than FILES_DEPTH_MAX, a directory is moved up into @top instead, and *@moved says
 * that another pass over @top is needed. Returns 0 or -errno.
 */
static int empty_dir(int fd, int top, int depth, bool *moved)
{
    DIR *d = fdopendir(fd);
    struct dirent *de;
    int r = 0;

    if (!d) {
        r = -errno;
        close(fd);
        return r;
    }
    while (r == 0 && (de = readdir(d))) {
        struct stat st;
        int sub;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            r = errno == ENOENT ? 0 : -errno;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
                r = -errno;
            continue;
        }
        if (depth >= FILES_DEPTH_MAX) {
            r = move_up(dirfd(d), de->d_name, top);
            *moved = true;
            continue;
        }
        sub = open_beneath(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY, 0);
        if (sub < 0)
            r = sub;
        else if ((r = empty_dir(sub, top, depth + 1, moved)) == 0 &&
                 unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0)
            r = -errno;
    }
    closedir(d);
    return r;
}

/*
 * Passes over a directory being deleted: each one removes all but what lay deeper than
 * FILES_DEPTH_MAX (moved up for the next pass). A tree is done in depth / FILES_DEPTH_MAX
 * passes; code that keeps filling it meanwhile gets an error.
 */
#define DELETE_PASSES_MAX 4096

static int delete_tree(int parent, const char *name, Outcome *o, const char *path)
{
    int r = 0;

    for (int pass = 0; pass < DELETE_PASSES_MAX; pass++) {
        int fd = open_beneath(parent, name, O_RDONLY | O_DIRECTORY, 0), top;
        bool moved = false;

        if (fd < 0)
            return failed(o, fd, "%s: %s", path, strerror(-fd));
        top = dup(fd);
        if (top < 0) {
            r = -errno;
            close(fd);
            break;
        }
        r = empty_dir(fd, top, 1, &moved);
        close(top);
        if (r < 0 || !moved)
            break;
    }
    if (r == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0)
        r = -errno;
    return r < 0 ? failed(o, r, "%s: %s", path, strerror(-r)) : 0;
}

static int do_delete(Agent *a, const SbxFile *f, Outcome *o)
{
    char dir[SBX_PATH_MAX + 1];
    const char *name = split(f->path, dir);
    struct stat st;
    int fd = open_dirs(a, dir, false, o), r = 0;

    if (fd < 0)
        return fd;
    if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        r = failed(o, -errno, "%s: %s", f->path, strerror(errno));
    else if (S_ISDIR(st.st_mode))
        r = delete_tree(fd, name, o, f->path);
    else if (unlinkat(fd, name, 0) < 0)
        r = failed(o, -errno, "%s: %s", f->path, strerror(errno));
    close(fd);
    return r;
}

/* ---- requests ----------------------------------------------------------------------------- */

/* The request got something wrong (validation_error), or the guest failed (internal_error). */
static SbxErrorCode code_of(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case EXDEV:
    case EEXIST:
    case ENOTEMPTY:
    case EINVAL:
    case ENAMETOOLONG:
    case EACCES:
    case EPERM:
    case EBUSY:
    case ENXIO:
    case EFBIG:
        return SBX_ERR_VALIDATION;
    default:
        return SBX_ERR_INTERNAL;
    }
}

static int perform(Agent *a, const SbxFile *f, SbxFileResult *res, Outcome *o)
{
    if (a->workspace_fd < 0)
        return failed(o, -EIO, "the workspace %s is not available", a->opt.workspace);
    /* The decoder checked the path; list is the one op without (the root). */
    if (f->op != SBX_FILE_LIST && !f->path)
        return failed(o, -EINVAL, "%s needs a path", sbx_file_op_name(f->op));
    switch (f->op) {
    case SBX_FILE_WRITE:
        return do_write(a, f, res, o);
    case SBX_FILE_READ:
        return do_read(a, f, res, o);
    case SBX_FILE_LIST:
        return do_list(a, f, res, o);
    case SBX_FILE_DELETE:
        return do_delete(a, f, o);
    default:
        return failed(o, -EINVAL, "unknown operation");
    }
}

static void answer_error(Agent *a, uint32_t seq, int err, const char *why)
{
    SbxMsg m = {.type = SBX_MSG_FILE_RESULT};
    const char *name = strerrorname_np(err);

    m.file_result.seq = seq;
    m.file_result.error.code = code_of(err);
    m.file_result.error.type = (char *)(name ? name : "EIO");
    m.file_result.error.message = (char *)why;
    conn_send(a, &m);
}

static void clear_result(SbxFileResult *res)
{
    for (size_t i = 0; i < res->n_entries; i++)
        free(res->entries[i].path);
    free(res->entries);
    free(res->data);
}

void files_on_request(Agent *a, const SbxFile *f)
{
    SbxMsg m = {.type = SBX_MSG_FILE_RESULT};
    Outcome o = {""};
    int r;

    if (a->exec) {
        conn_fail(a, SBX_ERR_PROTOCOL, "file %s while %s is running", sbx_file_op_name(f->op),
                  a->exec->id);
        return;
    }
    m.file_result.seq = f->seq;
    r = perform(a, f, &m.file_result, &o);
    if (r < 0) {
        answer_error(a, f->seq, -r, o.why[0] ? o.why : strerror(-r));
    } else {
        m.file_result.ok = true;
        /* a read's chunk goes to the link as it is (taken), after the answer */
        r = conn_send_data(a, &m, m.file_result.data);
        m.file_result.data = NULL;
        if (r == -EINVAL || r == -EMSGSIZE)
            answer_error(a, f->seq, EIO, "the answer cannot be encoded");
    }
    clear_result(&m.file_result);
}
