/*
 * The sessions of the HTTP API (docs/api.md, "Sessions"): create, list, read, delete, and the
 * executions in one (the executions' own code, http-exec.c, with the session named). The state
 * machine is the server's (sessions.h); this file maps requests and answers.
 */
#include "server/http-private.h"

#include <string.h>

#include "base/json-builder.h"
#include "server/http-object.h"
#include "server/http-request.h"
#include "server/sessions.h"
#include "store/sessions.h"

/* ---- the object ------------------------------------------------------------------------------ */

char *sbx_http_session_json(const SbxServerSessionInfo *i)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "id", i->id);
    sbx_jsonb_member_string(&b, "status", i->state);
    sbx_jsonb_member_string(&b, "profile", i->profile);
    sbx_http_member_time(&b, "created_at", i->created_ms * 1000);
    sbx_http_member_time(&b, "last_active_at", i->last_active_ms * 1000);
    sbx_http_member_time(&b, "expires_at", i->expires_ms * 1000);
    sbx_http_member_time(&b, "ended_at", i->ended_ms * 1000);
    sbx_jsonb_member_uint(&b, "idle_timeout_s", i->idle_timeout_s);
    sbx_jsonb_member_uint(&b, "max_lifetime_s", i->max_lifetime_s);
    sbx_jsonb_member_uint(&b, "executions", i->executions);
    sbx_jsonb_member_uint(&b, "memory_mib", i->memory_mib);
    sbx_jsonb_member_string(&b, "current_execution", i->current_execution);
    sbx_jsonb_member_string(&b, "end_status", i->end_status);
    sbx_jsonb_member_string(&b, "end_reason", i->end_reason);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

/* A session the server no longer holds (ended before a restart, or long ago), as its record
 * has it: the same object, its live members empty. */
static char *record_json(const SbxSessionRecord *r)
{
    gboolean open = g_strcmp0(r->status, "open") == 0;
    SbxServerSessionInfo info = {
        .id = r->id,
        .state = open ? "ready" : "ended",
        .profile = r->profile,
        .created_ms = r->created_at_ms,
        .ended_ms = r->ended_at_ms,
        .idle_timeout_s = (guint)(r->idle_timeout_ms / 1000),
        .max_lifetime_s = (guint)(r->max_lifetime_ms / 1000),
        .executions = (guint)r->executions,
        .memory_mib = r->memory_mib,
        .end_status = open ? NULL : r->status,
        .end_reason = r->reason,
    };
    return sbx_http_session_json(&info);
}

static char *session_json(const SbxServerSession *s)
{
    SbxServerSessionInfo info;

    sbx_server_session_info(s, &info);
    return sbx_http_session_json(&info);
}

/* An error of sessions.h as an answer. */
static void reply_session_error(SoupServerMessage *msg, const GError *error)
{
    guint status = SOUP_STATUS_SERVICE_UNAVAILABLE;
    const char *code = "unavailable";

    if (error->domain == SBX_SERVER_SESSION_ERROR) {
        switch (error->code) {
        case SBX_SERVER_SESSION_ERROR_NOT_FOUND:
            status = SOUP_STATUS_NOT_FOUND;
            code = "not_found";
            break;
        case SBX_SERVER_SESSION_ERROR_BUSY:
        case SBX_SERVER_SESSION_ERROR_ENDED:
            status = SOUP_STATUS_CONFLICT;
            code = "conflict";
            break;
        case SBX_SERVER_SESSION_ERROR_QUOTA:
            status = 429;
            code = "rate_limited";
            break;
        default:
            break;
        }
    }
    sbx_http_reply_error(msg, status, code, error->message);
}

/* ---- create ---------------------------------------------------------------------------------- */

/* A creation waiting for its session's VM. */
typedef struct {
    SoupServerMessage *msg; /* a reference */
    gulong finished_handler;
    gboolean gone; /* the client went away first */
} Creation;

static void on_creation_finished(SoupServerMessage *msg, gpointer data)
{
    Creation *c = data;
    (void)msg;

    c->gone = TRUE;
}

static void on_session_ready(SbxServerSession *s, const GError *error, gpointer data)
{
    Creation *c = data;

    g_signal_handler_disconnect(c->msg, c->finished_handler);
    if (c->gone) {
        /* nobody learnt its id: nobody could use it */
        sbx_server_session_end(s, "deleted", "the client went away before its session was ready");
    } else if (error != NULL) {
        reply_session_error(c->msg, error);
        soup_server_message_unpause(c->msg);
    } else {
        g_autofree char *location = g_strdup_printf("/v1/sessions/%s", sbx_server_session_id(s));
        soup_message_headers_replace(soup_server_message_get_response_headers(c->msg), "Location",
                                     location);
        sbx_http_reply_json(c->msg, SOUP_STATUS_CREATED, session_json(s));
        soup_server_message_unpause(c->msg);
    }
    g_object_unref(c->msg);
    g_free(c);
}

static void create(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant)
{
    SoupMessageBody *body = soup_server_message_get_request_body(msg);
    g_auto(SbxHttpSessionCreate) req = {0};
    g_autoptr(GError) error = NULL;
    guint profile = 0;

    g_autofree char *why = sbx_http_session_decode(body->data != NULL ? body->data : "",
                                                   body->length, SBX_SERVER_SESSION_IDLE_MAX_S,
                                                   SBX_SERVER_SESSION_LIFETIME_MAX_S, &req);
    if (why != NULL) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request", why);
        return;
    }
    if (!sbx_server_find_profile(front->srv, req.profile, &profile)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "profile: not a profile this server pools");
        return;
    }
    SbxServerSessionRequest sreq = {
        .profile = profile,
        .tenant_id = tenant->id,
        .front_end = "http",
        .idle_timeout_s = req.idle_timeout_s,
        .max_lifetime_s = req.max_lifetime_s,
        .max_sessions = tenant->quotas.max_sessions,
        .max_memory_mib = tenant->quotas.max_session_memory_mib,
    };
    Creation *c = g_new0(Creation, 1);
    c->msg = g_object_ref(msg);
    g_autoptr(SbxServerSession) s =
        sbx_server_session_new(front->srv, &sreq, on_session_ready, c, &error);
    if (s == NULL) {
        g_object_unref(c->msg);
        g_free(c);
        reply_session_error(msg, error);
        return;
    }
    c->finished_handler = g_signal_connect(msg, "finished", G_CALLBACK(on_creation_finished), c);
    soup_server_message_pause(msg);
}

/* ---- list, read, delete ---------------------------------------------------------------------- */

/* Newest first: the sessions in memory, then those of the records the server does not hold
 * (ended before a restart, or forgotten), at most SBX_HTTP_LIST_MAX in all. */
static void list(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant)
{
    g_autoptr(GPtrArray) live = sbx_server_sessions_list(front->srv, tenant->id);
    g_autoptr(GPtrArray) stored = NULL;
    g_autoptr(GError) error = NULL;
    SbxSessionFilter f = {.tenant_id = tenant->id, .limit = SBX_HTTP_LIST_MAX};
    guint n = 0;
    SbxJsonb b;

    if (front->store != NULL && !sbx_session_records_list(front->store, &f, &stored, &error)) {
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable", error->message);
        return;
    }
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "sessions");
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; i < live->len && n < SBX_HTTP_LIST_MAX; i++, n++) {
        g_autofree char *one = session_json(live->pdata[i]);
        sbx_jsonb_raw(&b, one);
    }
    for (guint i = 0; stored != NULL && i < stored->len && n < SBX_HTTP_LIST_MAX; i++) {
        const SbxSessionRecord *r = stored->pdata[i];
        if (sbx_server_session_find(front->srv, tenant->id, r->id) == NULL) {
            g_autofree char *one = record_json(r);
            sbx_jsonb_raw(&b, one);
            n++;
        }
    }
    sbx_jsonb_end_array(&b);
    sbx_jsonb_end_object(&b);
    sbx_http_reply_json(msg, SOUP_STATUS_OK, sbx_jsonb_finish(&b));
}

/* A session of the records only: it has ended; it can be read, nothing more. */
static void stored_one(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                       const char *id, const char *rest)
{
    g_autoptr(SbxSessionRecord) r = NULL;
    g_autoptr(GError) error = NULL;

    if (front->store == NULL ||
        !sbx_session_records_get(front->store, tenant->id, id, &r, &error)) {
        gboolean missing = error == NULL || (error->domain == SBX_STORE_ERROR &&
                                             error->code == SBX_STORE_ERROR_NOT_FOUND);
        sbx_http_reply_error(msg, missing ? SOUP_STATUS_NOT_FOUND : SOUP_STATUS_SERVICE_UNAVAILABLE,
                             missing ? "not_found" : "unavailable",
                             missing ? "no such session" : error->message);
        return;
    }
    if (*rest == '\0' && sbx_http_is(msg, "GET")) {
        sbx_http_reply_json(msg, SOUP_STATUS_OK, record_json(r));
        return;
    }
    g_autofree char *why = g_strdup_printf("the session has ended (%s)", r->status);
    sbx_http_reply_error(msg, SOUP_STATUS_CONFLICT, "conflict", why);
}

static void one(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                SbxServerSession *s, const char *rest, GHashTable *query)
{
    if (*rest == '\0') {
        if (sbx_http_is(msg, "GET")) {
            sbx_http_reply_json(msg, SOUP_STATUS_OK, session_json(s));
        } else if (sbx_http_is(msg, "DELETE")) {
            sbx_server_session_end(s, "deleted", "deleted by the client");
            sbx_http_reply_json(msg, SOUP_STATUS_OK, session_json(s));
        } else {
            sbx_http_reply_method(msg, "GET, DELETE");
        }
        return;
    }
    if (strcmp(rest, "/executions") == 0) {
        if (!sbx_http_is(msg, "POST")) {
            sbx_http_reply_method(msg, "POST");
        } else if (sbx_http_within_quota(front, msg, tenant)) {
            sbx_http_exec_create(front, msg, tenant, query, s);
        }
        return;
    }
    if (strcmp(rest, "/files") == 0 || g_str_has_prefix(rest, "/files/")) {
        sbx_http_files_route(front, msg, s, rest + strlen("/files"), query);
        return;
    }
    sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such path");
}

void sbx_http_session_route(HttpFront *front, SoupServerMessage *msg, const char *rest,
                            GHashTable *query, const SbxTenant *tenant)
{
    if (*rest == '\0') {
        if (sbx_http_is(msg, "POST")) {
            create(front, msg, tenant);
        } else if (sbx_http_is(msg, "GET")) {
            list(front, msg, tenant);
        } else {
            sbx_http_reply_method(msg, "GET, POST");
        }
        return;
    }
    const char *slash = strchr(rest + 1, '/');
    g_autofree char *id =
        g_strndup(rest + 1, slash != NULL ? (gsize)(slash - rest - 1) : strlen(rest + 1));
    /* another tenant's session is not found, like one that never was */
    SbxServerSession *s = sbx_server_session_find(front->srv, tenant->id, id);
    if (s == NULL) {
        stored_one(front, msg, tenant, id, slash != NULL ? slash : "");
        return;
    }
    one(front, msg, tenant, s, slash != NULL ? slash : "", query);
}
