/*
 * Pre-started QEMUs (prestart.h). Each entry is one VM whose start runs with the hold set; its
 * start callback is ours until the entry is taken, then forwarded to the taker.
 */
#include "prestart.h"

typedef struct Entry Entry;

struct SbxPrestartSet {
    const SbxProfile *profile;
    const SbxImage *image;
    const SbxSnapshot *snapshot;
    guint size;
    GPtrArray *entries; /* Entry*, not taken */
    guint refill_source;
};

struct Entry {
    SbxPrestartSet *set; /* NULL once taken, or once the set is freed */
    SbxVm *vm;
    GAsyncReadyCallback callback; /* the taker's */
    gpointer user_data;
};

static void refill(SbxPrestartSet *set);

static gboolean refill_now(gpointer data)
{
    SbxPrestartSet *set = data;

    set->refill_source = 0;
    refill(set);
    return G_SOURCE_REMOVE;
}

static void refill_after(SbxPrestartSet *set, guint ms)
{
    if (set->refill_source == 0) {
        set->refill_source = g_timeout_add(ms, refill_now, set);
    }
}

static void on_start_done(GObject *src, GAsyncResult *res, gpointer data)
{
    Entry *e = data;
    SbxPrestartSet *set = e->set;

    if (e->callback != NULL) {
        e->callback(src, res, e->user_data); /* taken: the taker's start */
        g_free(e);
        return;
    }
    if (set == NULL) {
        g_free(e); /* the set was freed, and the VM with it */
        return;
    }
    /* Not taken, so the start ended while held or on its way: QEMU exited, QMP failed... */
    g_autoptr(GError) error = NULL;
    if (!sbx_vm_start_finish(e->vm, res, &error)) {
        g_message("sandbox serve: a pre-started QEMU failed: %s", error->message);
    }
    g_ptr_array_remove(set->entries, e);
    sbx_vm_free(e->vm); /* allowed from the start's callback (vm.h) */
    g_free(e);
    refill_after(set, SBX_PRESTART_RETRY_MS);
}

static void refill(SbxPrestartSet *set)
{
    SbxVmOptions opts = {.snapshot = set->snapshot};

    while (set->entries->len < set->size) {
        Entry *e = g_new0(Entry, 1);
        e->set = set;
        e->vm = sbx_vm_new(set->profile, set->image, &opts);
        sbx_vm_set_prestart(e->vm);
        g_ptr_array_add(set->entries, e);
        sbx_vm_start_async(e->vm, NULL, on_start_done, e);
    }
}

SbxPrestartSet *sbx_prestart_set_new(const SbxProfile *profile, const SbxImage *image,
                                     const SbxSnapshot *snapshot, guint size)
{
    SbxPrestartSet *set = g_new0(SbxPrestartSet, 1);

    set->profile = profile;
    set->image = image;
    set->snapshot = snapshot;
    set->size = MIN(size, SBX_PRESTART_MAX);
    set->entries = g_ptr_array_new();
    refill(set);
    return set;
}

void sbx_prestart_set_free(SbxPrestartSet *set)
{
    if (set == NULL) {
        return;
    }
    g_clear_handle_id(&set->refill_source, g_source_remove);
    for (guint i = 0; i < set->entries->len; i++) {
        Entry *e = set->entries->pdata[i];
        e->set = NULL; /* its start callback (cancelled) frees it */
        sbx_vm_free(e->vm);
    }
    g_ptr_array_free(set->entries, TRUE);
    g_free(set);
}

SbxVm *sbx_prestart_set_take(SbxPrestartSet *set, GAsyncReadyCallback callback, gpointer user_data)
{
    Entry *e = NULL;

    if (set == NULL || set->entries->len == 0) {
        return NULL;
    }
    /*
     * A held one only (QEMU up, waiting for the state). One still on its way may already have
     * failed, its error still queued: the taker would get that error where a restore of its
     * own would have worked.
     */
    for (guint i = 0; i < set->entries->len && e == NULL; i++) {
        Entry *c = set->entries->pdata[i];
        if (sbx_vm_prestart_is_held(c->vm)) {
            e = c;
        }
    }
    if (e == NULL) {
        return NULL;
    }
    g_ptr_array_remove(set->entries, e);
    e->set = NULL;
    e->callback = callback;
    e->user_data = user_data;
    refill_after(set, SBX_PRESTART_REFILL_DELAY_MS);
    return e->vm;
}

GArray *sbx_prestart_set_pids(SbxPrestartSet *set)
{
    GArray *pids = g_array_new(FALSE, FALSE, sizeof(GPid));

    for (guint i = 0; set != NULL && i < set->entries->len; i++) {
        Entry *e = set->entries->pdata[i];
        GPid pid = sbx_vm_prestart_is_held(e->vm) ? sbx_vm_qemu_pid(e->vm) : 0;
        if (pid > 0) {
            g_array_append_val(pids, pid);
        }
    }
    return pids;
}
