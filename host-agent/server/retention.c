/*
 * Records pruned by a running server (retention.h): once at start, then on a timer, and, with a
 * bound on bytes, soon after a share of that bound was written. Execution and session records
 * both (sbx_records_prune()).
 */
#include "server/retention.h"

#include "exec/exec-record.h"

struct SbxRetention {
    SbxStore *store;
    guint64 max_age_s;
    guint64 max_count;
    guint64 max_bytes;
    guint64 written; /* bytes of the records finished since the last prune */
    guint timer;
    guint soon; /* the prune the bytes written asked for, or 0 */
};

static gboolean on_soon(gpointer data);

/*
 * Prune; then unpin the snapshots no record names any more: every time on the timer (a
 * previous sync may have failed), after the bytes' prune only if it deleted something (the
 * sync reads every record's snapshot key, a cost the bytes' prunes, more frequent, need not
 * pay for nothing).
 */
static void prune(SbxRetention *r, gboolean always_sync)
{
    g_autoptr(GError) error = NULL;
    guint deleted = 0, sessions = 0, snapshots = 0;
    gboolean more = FALSE;
    SbxRecordsPrune bounds = {
        .max_age_s = r->max_age_s,
        .max_count = r->max_count,
        .max_bytes = r->max_bytes,
        .max_deleted = SBX_RETENTION_BYTES_BATCH,
    };

    r->written = 0;
    if (!sbx_records_prune(r->store, &bounds, &deleted, &sessions, &more, &error)) {
        g_warning("records: prune failed (tried again in %d s): %s", SBX_RETENTION_PERIOD_S,
                  error->message);
    } else if (deleted > 0 || sessions > 0) {
        g_message("records: %u executions and %u sessions past retention deleted", deleted,
                  sessions);
    }
    g_clear_error(&error);
    if (more && r->soon == 0) {
        /* the rest a batch at a time, each after what else the loop has to do */
        r->soon = g_idle_add_full(G_PRIORITY_LOW, on_soon, r, NULL);
    }
    if (!always_sync && deleted == 0) {
        return;
    }
    if (!sbx_exec_records_pins_sync(r->store, &snapshots, &error)) {
        g_warning("records: pinning their snapshots failed (tried again in %d s): %s",
                  SBX_RETENTION_PERIOD_S, error->message);
    } else if (snapshots > 0) {
        g_message("records: %u kept snapshots no record refers to removed", snapshots);
    }
}

static gboolean on_timer(gpointer data)
{
    prune(data, TRUE);
    return G_SOURCE_CONTINUE;
}

static gboolean on_soon(gpointer data)
{
    SbxRetention *r = data;

    r->soon = 0;
    prune(r, FALSE);
    return G_SOURCE_REMOVE;
}

/*
 * A record was finished: once the bytes finished since the last prune reach a tenth of the
 * bound (SBX_RETENTION_BYTES_SHARE), prune from the main loop when it is next idle (not inside
 * the finish's caller), once however many records finish before it runs.
 */
static void on_finished(guint64 size_bytes, gpointer data)
{
    SbxRetention *r = data;

    r->written += size_bytes;
    if (r->soon == 0 && r->written >= r->max_bytes / SBX_RETENTION_BYTES_SHARE) {
        r->soon = g_idle_add(on_soon, r);
    }
}

SbxRetention *sbx_retention_start(SbxStore *store, guint64 max_age_s, guint64 max_count,
                                  guint64 max_bytes)
{
    if (max_age_s == 0 && max_count == 0 && max_bytes == 0) {
        return NULL;
    }
    SbxRetention *r = g_new0(SbxRetention, 1);
    r->store = store;
    r->max_age_s = max_age_s;
    r->max_count = max_count;
    r->max_bytes = max_bytes;
    prune(r, TRUE);
    r->timer = g_timeout_add_seconds(SBX_RETENTION_PERIOD_S, on_timer, r);
    if (max_bytes > 0) {
        sbx_records_set_on_finished(store, on_finished, r);
    }
    return r;
}

void sbx_retention_free(SbxRetention *r)
{
    if (r == NULL) {
        return;
    }
    if (r->max_bytes > 0) {
        sbx_records_set_on_finished(r->store, NULL, NULL);
    }
    g_clear_handle_id(&r->timer, g_source_remove);
    g_clear_handle_id(&r->soon, g_source_remove);
    g_free(r);
}
