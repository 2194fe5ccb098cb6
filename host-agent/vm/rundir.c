/* VM runtime directories with a lock beside each; stale ones swept (rundir.h). */
#include "rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vm-error.h"

#define RUNDIR_PREFIX "sbx-vm-"
#define LOCK_SUFFIX ".lock"

/*
 * A lock file younger than this is left alone by a sweep even when its lock is free: its agent
 * may be between creating and locking it. Creation to flock is microseconds; 10 s is ample.
 */
#define SWEEP_MIN_AGE_S 10

struct SbxRundir {
    char *path;
    char *lock_path;
    int lock_fd;
};

/* Remove @dir and what is directly in it (sockets): never more than one level. */
static void remove_dir(const char *dir)
{
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);
        unlink(path);
    }
    rmdir(dir);
}

SbxRundir *sbx_rundir_new(const char *parent, GError **error)
{
    g_autofree char *tmpl = g_build_filename(parent, RUNDIR_PREFIX "XXXXXX", NULL);
    SbxRundir *rd;

    if (!g_mkdtemp_full(tmpl, 0700)) {
        int e = errno;
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG,
                    "cannot create a runtime directory in %s: %s", parent, g_strerror(e));
        return NULL;
    }
    rd = g_new0(SbxRundir, 1);
    rd->path = g_steal_pointer(&tmpl);
    rd->lock_path = g_strconcat(rd->path, LOCK_SUFFIX, NULL);
    rd->lock_fd = open(rd->lock_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (rd->lock_fd < 0 || flock(rd->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG, "cannot lock %s: %s", rd->lock_path,
                    g_strerror(e));
        sbx_rundir_free(rd);
        return NULL;
    }
    return rd;
}

const char *sbx_rundir_path(const SbxRundir *rd)
{
    return rd->path;
}

/* Remove the dir of the lock file @name in @parent if its agent is gone. */
static void sweep_one(const char *parent, const char *name)
{
    g_autofree char *lock = g_build_filename(parent, name, NULL);
    struct stat st;
    int fd;

    if (!g_str_has_prefix(name, RUNDIR_PREFIX) || !g_str_has_suffix(name, LOCK_SUFFIX))
        return;
    fd = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
        st.st_mtime <= time(NULL) - SWEEP_MIN_AGE_S && flock(fd, LOCK_EX | LOCK_NB) == 0) {
        /* Ours now: its agent is gone. Removed with the lock held: no other sweep races us. */
        g_autofree char *dir = g_strndup(lock, strlen(lock) - strlen(LOCK_SUFFIX));
        remove_dir(dir);
        unlink(lock);
    }
    close(fd);
}

void sbx_rundir_sweep(const char *parent)
{
    g_autoptr(GDir) d = g_dir_open(parent, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name(d)))
        sweep_one(parent, name);
}

void sbx_rundir_free(SbxRundir *rd)
{
    if (!rd)
        return;
    remove_dir(rd->path);
    if (rd->lock_fd >= 0) {
        unlink(rd->lock_path); /* before the unlock: a sweep never finds it free */
        close(rd->lock_fd);
    }
    g_free(rd->path);
    g_free(rd->lock_path);
    g_free(rd);
}
