/*
 * Pins: which snapshots retained records still refer to (snapshot-pin.h), and finding a
 * record's snapshot for its replay.
 */
#include "snapshot-pin.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/paths.h"
#include "snapshot-private.h"
#include "vm-error.h"

/* A pin holds a database path: PATH_MAX and a newline. */
#define PIN_MAX 4097

/* A snapshot key is a sha256 in hex: anything else is not a name in the cache (and never a
 * path: a key comes from a record, which may come from a bundle). */
static gboolean key_ok(const char *key)
{
    if (key == NULL || strlen(key) != 64)
        return FALSE;
    for (const char *p = key; *p; p++)
        if (!g_ascii_isxdigit(*p) || g_ascii_isupper(*p))
            return FALSE;
    return TRUE;
}

static char *cache_or_default(const char *cache)
{
    return cache != NULL ? g_strdup(cache) : sbx_paths_snapshot_dir();
}

static char *holder_tag(const char *abs)
{
    return g_compute_checksum_for_string(G_CHECKSUM_SHA256, abs, -1);
}

gboolean sbx_snapshot_pin(const char *cache, const char *key, const char *holder, GError **error)
{
    g_autofree char *c = cache_or_default(cache);
    g_autofree char *snap = NULL, *dir = NULL, *abs = NULL, *tag = NULL, *path = NULL;
    g_autofree char *text = NULL;

    if (!key_ok(key))
        return TRUE;
    snap = g_build_filename(c, key, NULL);
    if (!g_file_test(snap, G_FILE_TEST_IS_DIR))
        return TRUE;
    abs = g_canonicalize_filename(holder, NULL);
    tag = holder_tag(abs);
    dir = g_build_filename(c, ".pins", key, NULL);
    path = g_build_filename(dir, tag, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_REGULAR))
        return TRUE;
    if (g_mkdir_with_parents(dir, 0700) < 0)
        return sbx_vm_fail(error, SBX_VM_ERROR_SNAPSHOT, "cannot create %s: %s", dir,
                           g_strerror(errno));
    text = g_strconcat(abs, "\n", NULL);
    if (!g_file_set_contents_full(path, text, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0600, error)) {
        g_prefix_error(error, "cannot pin snapshot %s: ", key);
        return FALSE;
    }
    return TRUE;
}

/* The database path a pin names, or NULL (not a pin of ours). */
static char *pin_holder(const char *path)
{
    g_autofree char *text = NULL;
    gsize len = 0;

    if (!g_file_get_contents(path, &text, &len, NULL) || len == 0 || len > PIN_MAX ||
        text[len - 1] != '\n' || memchr(text, '\0', len) != NULL)
        return NULL;
    text[len - 1] = '\0';
    return g_steal_pointer(&text);
}

gboolean sbx_snapshot_pinned(const char *cache, const char *key)
{
    g_autofree char *dir = g_build_filename(cache, ".pins", key, NULL);
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *name;
    gboolean pinned = FALSE;

    while (d && (name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);
        g_autofree char *holder = pin_holder(path);

        if (holder != NULL && g_file_test(holder, G_FILE_TEST_EXISTS)) {
            pinned = TRUE;
        } else {
            unlink(path); /* its state directory is gone, or it is not a pin */
        }
    }
    if (!pinned)
        rmdir(dir);
    return pinned;
}

void sbx_snapshot_pins_remove(const char *cache, const char *key)
{
    g_autofree char *dir = g_build_filename(cache, ".pins", key, NULL);

    sbx_snapshot_rm_rf(dir);
}

/* Remove the kept snapshot @key if no pin holds it and nobody has it open; TRUE if removed. */
static gboolean drop_if_unpinned(const char *cache, const char *key)
{
    g_autofree char *dir = g_build_filename(cache, key, NULL);
    g_autofree char *mark = g_build_filename(dir, SBX_SNAPSHOT_KEPT_MARK, NULL);
    g_autofree char *inputs = g_build_filename(dir, "inputs.json", NULL);
    gboolean removed = FALSE;
    int fd;

    if (!g_file_test(mark, G_FILE_TEST_EXISTS) || sbx_snapshot_pinned(cache, key))
        return FALSE;
    fd = open(inputs, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
        sbx_snapshot_rm_rf(dir);
        removed = TRUE;
    }
    if (fd >= 0)
        close(fd);
    return removed;
}

gboolean sbx_snapshot_pins_sync(const char *cache, const char *holder, GHashTable *keys,
                                guint *ret_removed, GError **error)
{
    g_autofree char *c = cache_or_default(cache);
    g_autofree char *pins = g_build_filename(c, ".pins", NULL);
    g_autofree char *abs = g_canonicalize_filename(holder, NULL);
    g_autofree char *tag = holder_tag(abs);
    g_autoptr(GDir) d = NULL;
    const char *key;
    guint removed = 0;
    int lock;

    g_autoptr(GPtrArray) stale = g_ptr_array_new_with_free_func(g_free);

    if (ret_removed)
        *ret_removed = 0;
    /* Our pins of keys no record names, found without the lock: usually none, and then the
     * cache lock (which a make holds for a minute) is not waited for. */
    d = g_dir_open(pins, 0, NULL);
    while (d && (key = g_dir_read_name(d))) {
        g_autofree char *pin = g_build_filename(pins, key, tag, NULL);

        if (key_ok(key) && !g_hash_table_contains(keys, key) &&
            g_file_test(pin, G_FILE_TEST_IS_REGULAR))
            g_ptr_array_add(stale, g_steal_pointer(&pin));
    }
    if (stale->len == 0)
        return TRUE;
    if ((lock = sbx_snapshot_lock_cache(c, LOCK_EX, error)) < 0)
        return FALSE;
    for (guint i = 0; i < stale->len; i++) {
        const char *pin = g_ptr_array_index(stale, i);
        g_autofree char *key_dir = g_path_get_dirname(pin);
        g_autofree char *k = g_path_get_basename(key_dir);

        unlink(pin);
        removed += drop_if_unpinned(c, k);
    }
    close(lock);
    if (ret_removed)
        *ret_removed = removed;
    return TRUE;
}
