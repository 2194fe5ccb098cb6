/*
 * Records pruned by a running server (retention.h): once at start, then on a timer. Execution
 * and session records both (sbx_records_prune()).
 */
#include "server/retention.h"

#include "exec/exec-record.h"

struct SbxRetention {
    SbxStore *store;
    guint64 max_age_s;
    guint64 max_count;
    guint timer;
};

static void prune(SbxRetention *r)
{
    g_autoptr(GError) error = NULL;
    guint deleted = 0, sessions = 0, snapshots = 0;

    if (!sbx_records_prune(r->store, r->max_age_s, r->max_count, &deleted, &sessions, &error)) {
        g_warning("records: prune failed (tried again in %d s): %s", SBX_RETENTION_PERIOD_S,
                  error->message);
    } else if (deleted > 0 || sessions > 0) {
        g_message("records: %u executions and %u sessions past retention deleted", deleted,
                  sessions);
    }
    g_clear_error(&error);
    if (!sbx_exec_records_pins_sync(r->store, &snapshots, &error)) {
        g_warning("records: pinning their snapshots failed (tried again in %d s): %s",
                  SBX_RETENTION_PERIOD_S, error->message);
    } else if (snapshots > 0) {
        g_message("records: %u kept snapshots no record refers to removed", snapshots);
    }
}

static gboolean on_timer(gpointer data)
{
    prune(data);
    return G_SOURCE_CONTINUE;
}

SbxRetention *sbx_retention_start(SbxStore *store, guint64 max_age_s, guint64 max_count)
{
    if (max_age_s == 0 && max_count == 0) {
        return NULL;
    }
    SbxRetention *r = g_new0(SbxRetention, 1);
    r->store = store;
    r->max_age_s = max_age_s;
    r->max_count = max_count;
    prune(r);
    r->timer = g_timeout_add_seconds(SBX_RETENTION_PERIOD_S, on_timer, r);
    return r;
}

void sbx_retention_free(SbxRetention *r)
{
    if (r == NULL) {
        return;
    }
    g_clear_handle_id(&r->timer, g_source_remove);
    g_free(r);
}
