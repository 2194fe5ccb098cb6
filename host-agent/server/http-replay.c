/*
 * POST /v1/executions/{id}/replay (docs/api.md, "Replay"): a tenant's recorded execution run
 * again on its snapshot (replay/replay.h), answered with the verdict once the replay ended; with
 * ?live=true its tool calls reach the record's catalog again and the answer lists every change.
 * The tenant's own records only: another's is 404, like a missing one.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "replay/replay.h"
#include "server/http-private.h"

/*
 * Replays at once on the server, and per tenant. A replay's VM is restored from its record's
 * snapshot beside the warm pool (it is not the pool's), so these bound what replays add to the
 * server's VMs: two in all, one a tenant, keep the executions' machine theirs. Within them, a
 * replay is one of its tenant's executions for the quotas (at once, a minute).
 */
#define SBX_HTTP_REPLAYS_MAX 2
#define SBX_HTTP_REPLAYS_TENANT_MAX 1

typedef struct {
    HttpFront *front;
    SoupServerMessage *msg;
    gulong finished_handler;
    GSource *hangup; /* watches the client's socket while the answer waits */
    char *tenant_id;
    char *catalog;   /* the record's, for ?live */
    char **catalogs; /* the tenant's, when the replay was asked for */
    gboolean live;
    SbxReplayMachine machine;
    SbxReplayRun *run;
} HttpReplay;

static void stop_watching(HttpReplay *r)
{
    if (r->hangup != NULL) {
        g_source_destroy(r->hangup);
        g_clear_pointer(&r->hangup, g_source_unref);
    }
}

static void replay_free(HttpReplay *r)
{
    stop_watching(r);
    if (r->msg != NULL) {
        g_signal_handler_disconnect(r->msg, r->finished_handler);
        g_object_unref(r->msg);
    }
    sbx_replay_run_free(r->run); /* its VM killed and reaped */
    sbx_replay_machine_clear(&r->machine);
    g_free(r->tenant_id);
    g_free(r->catalog);
    g_strfreev(r->catalogs);
    g_free(r);
}

static void forget(HttpReplay *r)
{
    r->front->replays = g_list_remove(r->front->replays, r);
    replay_free(r);
}

static void on_done(SbxReplayRun *run, gpointer data)
{
    HttpReplay *r = data;
    const char *failure = sbx_replay_run_failure(run);

    if (r->msg == NULL) {
        forget(r); /* the client went away: nothing to answer */
        return;
    }
    stop_watching(r);
    if (failure != NULL) {
        sbx_http_reply_error(r->msg, SOUP_STATUS_CONFLICT, "cannot_replay", failure);
    } else {
        sbx_http_reply_json(r->msg, SOUP_STATUS_OK,
                            sbx_replay_verdict_json(sbx_replay_run_target(run),
                                                    sbx_replay_run_diffs(run), r->live,
                                                    sbx_replay_run_duration_ms(run)));
    }
    soup_server_message_unpause(r->msg);
    forget(r);
}

/* The client went away before the end: the replay stops, its VM with it. */
static void on_finished(SoupServerMessage *msg, gpointer data)
{
    HttpReplay *r = data;

    g_signal_handler_disconnect(msg, r->finished_handler);
    g_clear_object(&r->msg);
    sbx_replay_run_abort(r->run, "the client went away");
}

/*
 * The client's socket became readable while its answer waits: the request was read whole and the
 * connection takes one request (http.c), so that is its end (or bytes that are not ours: then
 * the watch stops). libsoup does not see a paused message's client go: without this a replay
 * whose client left would run to its end, its VM and the tenant's replay held.
 */
static gboolean on_client_readable(GSocket *sock, GIOCondition cond, gpointer data)
{
    HttpReplay *r = data;
    char byte;
    (void)cond;

    ssize_t n = recv(g_socket_get_fd(sock), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return G_SOURCE_CONTINUE;
    }
    g_clear_pointer(&r->hangup, g_source_unref);
    if (n == 0 || n < 0) {
        sbx_replay_run_abort(r->run, "the client went away"); /* its answer then fails */
    }
    return G_SOURCE_REMOVE;
}

static void watch_client(HttpReplay *r)
{
    GSocket *sock = sbx_http_socket_of(r->front, r->msg);

    if (sock == NULL) {
        return;
    }
    r->hangup = g_socket_create_source(sock, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
    g_source_set_callback(r->hangup, G_SOURCE_FUNC(on_client_readable), r, NULL);
    g_source_attach(r->hangup, NULL);
}

/* ?live: the record's catalog, called again. */
static SbxTools *live_tools(SbxReplay *replay, gpointer data, GError **error)
{
    HttpReplay *r = data;
    SbxTools *live = NULL;

    /* As a new execution: only a catalog the tenant may still use (docs/api.md). */
    if (r->catalog != NULL &&
        (r->catalogs == NULL || !g_strv_contains((const char *const *)r->catalogs, r->catalog))) {
        g_set_error(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_MACHINE,
                    "catalog %s is not one this tenant may use any more: a live replay calls its "
                    "tools",
                    r->catalog);
        return NULL;
    }
    live = sbx_http_load_tools(r->front, r->catalog, error);

    return live != NULL ? sbx_replay_tools(replay, live, error) : NULL;
}

/* One that ended holds no VM, even before its done came from the loop. */
guint sbx_http_replays_running(HttpFront *front, const char *tenant_id)
{
    guint n = 0;

    for (GList *l = front->replays; l != NULL; l = l->next) {
        const HttpReplay *r = l->data;
        n += (tenant_id == NULL || g_strcmp0(r->tenant_id, tenant_id) == 0) &&
             !sbx_replay_run_finished(r->run);
    }
    return n;
}

/* The replays' own bounds, then the tenant's quotas; FALSE when answered (429, Retry-After). */
static gboolean within_bounds(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant)
{
    const char *why = sbx_http_replays_running(front, NULL) >= SBX_HTTP_REPLAYS_MAX
                          ? "the server runs as many replays as it takes: try again later"
                      : sbx_http_replays_running(front, tenant->id) >= SBX_HTTP_REPLAYS_TENANT_MAX
                          ? "this tenant has a replay running: one at a time"
                          : NULL;

    if (why == NULL) {
        return sbx_http_within_quota(front, msg, tenant);
    }
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Retry-After", "5");
    sbx_http_reply_error(msg, 429, "rate_limited", why);
    return FALSE;
}

/* ?live=true|false (absent: false). FALSE when answered (400). */
static gboolean get_live(SoupServerMessage *msg, GHashTable *query, gboolean *ret)
{
    const char *v = query != NULL ? g_hash_table_lookup(query, "live") : NULL;

    *ret = g_strcmp0(v, "true") == 0;
    if (v == NULL || *ret || strcmp(v, "false") == 0) {
        return TRUE;
    }
    sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                         "live: expected true or false");
    return FALSE;
}

/* Why it cannot start, answered: 404 (no such record of the tenant), 409, 503. */
static void refuse(SoupServerMessage *msg, const GError *error)
{
    if (g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND)) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such execution");
    } else if (g_error_matches(error, SBX_REPLAY_ERROR, SBX_REPLAY_ERROR_NOT_REPLAYABLE)) {
        sbx_http_reply_error(msg, SOUP_STATUS_CONFLICT, "not_replayable", error->message);
    } else if (error->domain == SBX_REPLAY_ERROR) {
        sbx_http_reply_error(msg, SOUP_STATUS_CONFLICT, "cannot_replay", error->message);
    } else {
        g_warning("http: replay: %s", error->message);
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable",
                             "the records cannot be read now");
    }
}

void sbx_http_replay(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                     const char *id, GHashTable *query)
{
    static const char *const with_live[] = {"live", NULL};
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) chain = NULL;
    gboolean live = FALSE;

    if (!sbx_http_query_only(msg, query, with_live) || !get_live(msg, query, &live) ||
        !within_bounds(front, msg, tenant)) {
        return;
    }
    if (front->store == NULL) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such execution");
        return;
    }
    if (!sbx_replay_load_chain(front->store, tenant->id, id, &chain, &error)) {
        refuse(msg, error);
        return;
    }
    HttpReplay *r = g_new0(HttpReplay, 1);
    const SbxReplay *target = g_ptr_array_index(chain, chain->len - 1);
    r->front = front;
    r->tenant_id = g_strdup(tenant->id);
    r->catalog = g_strdup(sbx_replay_record(target)->catalog);
    r->catalogs = g_strdupv(tenant->catalogs);
    r->live = live;
    if (!sbx_replay_machine(target, NULL, &r->machine, &error)) {
        replay_free(r);
        refuse(msg, error);
        return;
    }
    r->msg = g_object_ref(msg);
    r->finished_handler = g_signal_connect(msg, "finished", G_CALLBACK(on_finished), r);
    r->run = sbx_replay_run_new(g_steal_pointer(&chain), &r->machine, live ? live_tools : NULL, r);
    front->replays = g_list_prepend(front->replays, r);
    sbx_http_exec_note_start(front, tenant->id);
    soup_server_message_pause(msg);
    watch_client(r);
    sbx_replay_run_start(r->run, on_done, r);
}

void sbx_http_replays_free(HttpFront *front)
{
    while (front->replays != NULL) {
        forget(front->replays->data);
    }
}
