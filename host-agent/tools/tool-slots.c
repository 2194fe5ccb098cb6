/*
 * The host-wide cap on tool processes (tool-slots.h): slot lock files and this process's queue.
 *
 * A slot is held by whoever holds the flock() of the file that is *currently* at its name: the
 * holder removes the file before it unlocks, so a process that locked a file just removed (it
 * opened it before the removal) sees that the name no longer leads to it and moves on. The queue
 * holds at most the calls in flight of this process's executions (64 each, the session's cap).
 */
#include "tool-slots.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools-error.h"

/* Attempts to find the directory again when another process removed it under us. */
#define DIR_ATTEMPTS 4

struct SbxToolSlot {
    int fd; /* locked */
    guint index;
};

struct SbxToolSlotWait {
    GList link; /* in the queue; data is the wait */
    SbxToolSlotReady ready;
    gpointer data;
};

static struct {
    gboolean configured;
    guint cap;
    GError *cap_error;
    char *dir;
    GQueue queue;   /* SbxToolSlotWait, oldest first */
    GSource *timer; /* retries the head while the queue is not empty */
    GSource *idle;  /* retries the head after a release */
} slots;

static void configure(void)
{
    const char *v = g_getenv(SBX_TOOL_PROCS_ENV);
    const char *xdg = g_getenv("XDG_RUNTIME_DIR");
    guint64 n = 0;

    if (slots.configured) {
        return;
    }
    slots.configured = TRUE;
    if (v != NULL && v[0] != '\0') {
        if (!g_ascii_string_to_unsigned(v, 10, 1, SBX_TOOL_PROCS_MAX, &n, NULL)) {
            g_set_error(&slots.cap_error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_INVALID,
                        "%s: expected an integer from 1 to %d, not \"%.32s\"", SBX_TOOL_PROCS_ENV,
                        SBX_TOOL_PROCS_MAX, v);
        }
        slots.cap = (guint)n;
    } else {
        slots.cap = CLAMP(2 * g_get_num_processors(), SBX_TOOL_PROCS_DEFAULT_MIN,
                          SBX_TOOL_PROCS_DEFAULT_MAX);
    }
    /* A runtime dir that does not exist (a stale variable) would fail every call: /tmp then. */
    slots.dir = xdg != NULL && g_path_is_absolute(xdg) && g_file_test(xdg, G_FILE_TEST_IS_DIR)
                    ? g_build_filename(xdg, "sandbox-tool-slots", NULL)
                    : g_strdup_printf("/tmp/sandbox-tool-slots-%u", (unsigned)geteuid());
}

guint sbx_tool_slots_cap(GError **error)
{
    configure();
    if (slots.cap_error != NULL) {
        g_propagate_error(error, g_error_copy(slots.cap_error));
        return 0;
    }
    return slots.cap;
}

guint sbx_tool_slots_waiting(void)
{
    return slots.queue.length;
}

/* ---- the files -------------------------------------------------------------------------- */

static void slot_error(GError **error, const char *what, int err)
{
    g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO, "tool process slots: %s `%s`: %s",
                what, slots.dir, g_strerror(err));
}

/*
 * The directory, made if missing: a descriptor, or -1 with @error, or -1 and *@gone if another
 * process removed it meanwhile (its last slot was released). Only this user may use it: in /tmp
 * another user could have made it first.
 */
static int open_dir(gboolean *gone, GError **error)
{
    struct stat st;

    if (mkdir(slots.dir, 0700) < 0 && errno != EEXIST) {
        slot_error(error, "cannot make", errno);
        return -1;
    }
    int fd = open(slots.dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *gone = errno == ENOENT;
        if (!*gone) {
            slot_error(error, "cannot open", errno);
        }
        return -1;
    }
    if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        close(fd);
        g_set_error(error, SBX_CATALOG_ERROR, SBX_CATALOG_ERROR_IO,
                    "refusing the tool process slots directory `%s`: it must be a directory of "
                    "this user's that nobody else may use (chmod 700)",
                    slots.dir);
        return -1;
    }
    return fd;
}

/* Whether the locked @fd is still the file at @name (its holder removes it before unlocking). */
static gboolean still_linked(int dfd, const char *name, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* One pass over the slot files of @dfd: a locked slot, or NULL (none free, *@gone, @error). */
static SbxToolSlot *scan(int dfd, gboolean *gone, GError **error)
{
    for (guint i = 0; i < slots.cap; i++) {
        char name[32];
        g_snprintf(name, sizeof(name), "slot-%u", i);
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            *gone = errno == ENOENT; /* the directory was removed */
            if (!*gone) {
                slot_error(error, "cannot open a slot file in", errno);
            }
            return NULL;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) == 0 && still_linked(dfd, name, fd)) {
            SbxToolSlot *s = g_new0(SbxToolSlot, 1);
            s->fd = fd;
            s->index = i;
            return s;
        }
        close(fd); /* taken (or just released and removed: the next pass makes it again) */
    }
    return NULL;
}

/* A free slot now, or NULL (none free, or @error). */
static SbxToolSlot *try_take(GError **error)
{
    for (int attempt = 0; attempt < DIR_ATTEMPTS; attempt++) {
        gboolean gone = FALSE;
        int dfd = open_dir(&gone, error);
        if (dfd < 0 && !gone) {
            return NULL;
        }
        SbxToolSlot *s = dfd >= 0 ? scan(dfd, &gone, error) : NULL;
        if (dfd >= 0) {
            close(dfd);
        }
        if (s != NULL || !gone) {
            return s;
        }
    }
    return NULL; /* the directory keeps vanishing: slots are being released, retry later */
}

/* ---- the queue ------------------------------------------------------------------------- */

static gboolean on_retry(gpointer data);

/* The timer runs while someone waits, and only then. */
static void update_timer(void)
{
    if (g_queue_is_empty(&slots.queue) && slots.timer != NULL) {
        g_source_destroy(slots.timer);
        g_clear_pointer(&slots.timer, g_source_unref);
    } else if (!g_queue_is_empty(&slots.queue) && slots.timer == NULL) {
        slots.timer = g_timeout_source_new(SBX_TOOL_SLOT_RETRY_MS);
        g_source_set_callback(slots.timer, on_retry, NULL, NULL);
        g_source_attach(slots.timer, g_main_context_get_thread_default());
    }
}

/* Give free slots to the oldest requests, as long as there are both. */
static void pump(void)
{
    while (!g_queue_is_empty(&slots.queue)) {
        g_autoptr(GError) error = NULL;
        SbxToolSlot *s = try_take(&error);
        if (s == NULL && error == NULL) {
            break;
        }
        /* Out of the queue before the callback, which may cancel other waits. */
        SbxToolSlotWait *w = g_queue_pop_head_link(&slots.queue)->data;
        w->ready(s, error, w->data);
        g_free(w);
    }
    update_timer();
}

static gboolean on_retry(gpointer data)
{
    (void)data;
    pump(); /* may destroy this source: then it does not run again */
    return G_SOURCE_CONTINUE;
}

static gboolean on_idle(gpointer data)
{
    (void)data;
    g_clear_pointer(&slots.idle, g_source_unref);
    pump();
    return G_SOURCE_REMOVE;
}

gboolean sbx_tool_slot_acquire(SbxToolSlotReady ready, gpointer data, SbxToolSlot **ret_slot,
                               SbxToolSlotWait **ret_wait, GError **error)
{
    if (sbx_tool_slots_cap(error) == 0) {
        return FALSE;
    }
    if (g_queue_is_empty(&slots.queue)) { /* else first come, first served */
        GError *local = NULL;
        SbxToolSlot *s = try_take(&local);
        if (local != NULL) {
            g_propagate_error(error, local);
            return FALSE;
        }
        if (s != NULL) {
            *ret_slot = s;
            *ret_wait = NULL;
            return TRUE;
        }
    }
    SbxToolSlotWait *w = g_new0(SbxToolSlotWait, 1);
    w->ready = ready;
    w->data = data;
    w->link.data = w;
    g_queue_push_tail_link(&slots.queue, &w->link);
    update_timer();
    *ret_slot = NULL;
    *ret_wait = w;
    return TRUE;
}

void sbx_tool_slot_wait_cancel(SbxToolSlotWait *wait)
{
    g_queue_unlink(&slots.queue, &wait->link);
    g_free(wait);
    update_timer();
}

void sbx_tool_slot_release(SbxToolSlot *slot)
{
    if (slot == NULL) {
        return;
    }
    g_autofree char *path = g_strdup_printf("%s/slot-%u", slots.dir, slot->index);
    unlink(path); /* before unlocking: see still_linked() */
    close(slot->fd);
    rmdir(slots.dir); /* the last slot takes the directory along (ENOTEMPTY otherwise) */
    g_free(slot);
    if (!g_queue_is_empty(&slots.queue) && slots.idle == NULL) {
        slots.idle = g_idle_source_new();
        g_source_set_callback(slots.idle, on_idle, NULL, NULL);
        g_source_attach(slots.idle, g_main_context_get_thread_default());
    }
}
