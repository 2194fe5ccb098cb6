/*
 * MCP over streamable HTTP: `/mcp` on the HTTP server (docs/mcp-server.md, "Over HTTP"), for
 * agents that reach the sandbox as a remote MCP server with their tenant's API key as Bearer
 * token. The protocol is mcp-server/'s, as over stdio; this file is the transport: the requests,
 * their answers and the MCP sessions. What the calls do (each `execute` an execution of the
 * tenant, the session tools, approvals asked of the client) is http-mcp-calls.c's.
 *
 * An MCP session starts with a POST of `initialize` without `Mcp-Session-Id`; the answer gives
 * the id, and every later POST (and the DELETE that ends it) carries it. A POST of notifications
 * or answers gets 202; one of requests gets the answer as JSON when it is ready at once
 * (initialize, tools/list, ping, errors), else an SSE stream that carries the call's progress and
 * then its answer (or, to a client that accepts only JSON, the answer as JSON at the end). Messages
 * the core sends while it handles a POST, and those of a call started by it, go on that POST's
 * answer: there is no stream of the server's own (GET is 405, as the specification allows).

 */
#include "server/http-mcp-private.h"

#include <string.h>

#include "base/sbx-config.h"
#include "server/sessions.h"

/*
 * MCP sessions open at once, over all tenants: 256. Each is a protocol state (a few KB) and up
 * to SBX_MCP_SERVER_CALLS_MAX calls, whose executions count against their tenant's quotas like
 * the API's; the bound is for sessions clients open and forget. Per tenant 32, so that one
 * tenant cannot take them all. At a limit, a new session ends the least recently used idle one
 * (session_room()).
 */
#define SBX_HTTP_MCP_SESSIONS_MAX 256
#define SBX_HTTP_MCP_TENANT_SESSIONS_MAX 32

/*
 * A session without a request for 10 minutes, and no call in flight, is ended (its id then
 * answers 404 and the client initializes again, as MCP says). Clients that forget to DELETE
 * are the rule; an agent's turn rarely pauses longer.
 */
#define SBX_HTTP_MCP_IDLE_S (10 * 60)
#define SBX_HTTP_MCP_SWEEP_S 60

/*
 * An SSE answer that waits for a call gets a comment line every 15 s: proxies and clients cut
 * connections that say nothing for a minute or so, and an execution may run for 10.
 */
#define SBX_HTTP_MCP_KEEPALIVE_S 15

/* ---- answers ------------------------------------------------------------------------------ */

static void sse_write(McpPost *p, char *text)
{
    p->queued += strlen(text);
    soup_message_body_append(soup_server_message_get_response_body(p->msg), SOUP_MEMORY_TAKE, text,
                             strlen(text));
    soup_server_message_unpause(p->msg);
}

void sbx_http_mcp_send(gpointer data, const char *json, gsize len)
{
    McpSession *s = data;
    McpPost *p = s->current;

    if (p == NULL || p->ended) {
        return; /* its client went away: the answer is lost (its execution's record is not) */
    }
    if (p->sse && p->decided) {
        sse_write(p, g_strdup_printf("event: message\ndata: %.*s\n\n", (int)len, json));
    } else {
        g_ptr_array_add(p->held, g_strndup(json, len));
    }
}

static void post_free(McpPost *p)
{
    g_clear_handle_id(&p->keepalive, g_source_remove);
    if (p->finished_handler != 0) {
        g_signal_handler_disconnect(p->msg, p->finished_handler);
    }
    if (p->wrote_handler != 0) {
        g_signal_handler_disconnect(p->msg, p->wrote_handler);
    }
    g_object_unref(p->msg);
    g_ptr_array_unref(p->held);
    g_free(p);
}

/* Libsoup is done with the POST (answered, or its client gone): its calls answer nowhere now. */
static void on_post_finished(SoupServerMessage *msg, gpointer data)
{
    McpPost *p = data;
    (void)msg;

    for (GList *l = p->s->jobs; l != NULL; l = l->next) {
        McpJob *job = l->data;
        if (job->post == p) {
            job->post = NULL;
        }
    }
    if (p->s->current == p) {
        p->s->current = NULL;
    }
    p->s->posts = g_list_remove(p->s->posts, p);
    p->finished_handler = 0;
    post_free(p);
}

/* The messages held, as one body: none (202), one JSON, or an SSE stream of them all. */
static void reply_held(SoupServerMessage *msg, GPtrArray *held, guint status)
{
    if (held->len == 0) {
        soup_server_message_set_status(msg, SOUP_STATUS_ACCEPTED, NULL);
        return;
    }
    if (held->len == 1) {
        sbx_http_reply_json(msg, status, g_strdup(g_ptr_array_index(held, 0)));
        return;
    }
    GString *out = g_string_new(NULL);
    for (guint i = 0; i < held->len; i++) {
        g_string_append_printf(out, "event: message\ndata: %s\n\n",
                               (char *)g_ptr_array_index(held, i));
    }
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, "text/event-stream", SOUP_MEMORY_TAKE, out->str,
                                     out->len);
    g_string_free(out, FALSE);
}

void sbx_http_mcp_post_end(McpPost *p)
{
    g_clear_handle_id(&p->keepalive, g_source_remove);
    p->ended = TRUE;
    if (!p->sse) {
        reply_held(p->msg, p->held, SOUP_STATUS_OK);
    } else {
        soup_message_body_complete(soup_server_message_get_response_body(p->msg));
    }
    soup_server_message_unpause(p->msg);
}

static gboolean keepalive(gpointer data)
{
    McpPost *p = data;

    sse_write(p, g_strdup(": keepalive\n\n"));
    return G_SOURCE_CONTINUE;
}

static void on_wrote(SoupServerMessage *msg, gsize chunk, gpointer data)
{
    McpPost *p = data;
    (void)msg;

    p->queued -= MIN(chunk, p->queued);
}

/*
 * Whether progress may go on @p: an SSE answer its client reads (SBX_HTTP_MCP_QUEUED_MAX). A
 * client that accepts only JSON gets the answer alone.
 */
gboolean sbx_http_mcp_post_takes_progress(const McpPost *p)
{
    return p != NULL && p->sse && p->queued <= SBX_HTTP_MCP_QUEUED_MAX;
}

/* After the core read the POST: answered now, or held open for the calls it started. */
static void post_decide(McpPost *p)
{
    SoupServerMessage *msg = p->msg;

    if (p->calls == 0) {
        reply_held(msg, p->held, SOUP_STATUS_OK);
        post_free(p);
        return;
    }
    p->decided = TRUE;
    p->s->posts = g_list_prepend(p->s->posts, p);
    p->finished_handler = g_signal_connect(msg, "finished", G_CALLBACK(on_post_finished), p);
    soup_server_message_pause(msg);
    if (!p->sse) {
        return; /* the answer waits, whole, for the end of its calls */
    }
    SoupMessageHeaders *rh = soup_server_message_get_response_headers(msg);
    soup_server_message_set_status(msg, SOUP_STATUS_OK, NULL);
    soup_message_headers_set_content_type(rh, "text/event-stream", NULL);
    soup_message_headers_replace(rh, "Cache-Control", "no-store");
    soup_message_headers_set_encoding(rh, SOUP_ENCODING_CHUNKED);
    for (guint i = 0; i < p->held->len; i++) {
        sse_write(p, g_strdup_printf("event: message\ndata: %s\n\n",
                                     (char *)g_ptr_array_index(p->held, i)));
    }
    g_ptr_array_set_size(p->held, 0);
    p->keepalive = g_timeout_add_seconds(SBX_HTTP_MCP_KEEPALIVE_S, keepalive, p);
    p->wrote_handler = g_signal_connect(msg, "wrote-body-data", G_CALLBACK(on_wrote), p);
}

/* ---- sessions ----------------------------------------------------------------------------- */

static McpSession *session_new(HttpFront *front, const char *tenant_id, const char *catalog)
{
    McpSession *s = g_new0(McpSession, 1);
    SbxMcpServerInfo info = {.name = "sandbox", .version = SBX_VERSION};

    s->front = front;
    /* Tied to its tenant (another tenant's id is unknown to it), so not a secret: unique. */
    s->id = sbx_http_random_id("mcp_", 16);
    s->tenant_id = g_strdup(tenant_id);
    s->catalog = g_strdup(catalog);
    s->server = sbx_mcp_server_new(&sbx_http_mcp_ops, s, &info);
    s->used_us = g_get_monotonic_time();
    return s;
}

/*
 * End @s: its open answers end as they are, its calls are cancelled (their executions end as
 * the API's do, recorded) and answer nowhere.
 */
static void reply_rpc_error(SoupServerMessage *msg, guint status, const char *message);

static void session_free(McpSession *s)
{
    sbx_http_mcp_calls_withdraw(s);
    while (s->posts != NULL) {
        McpPost *p = s->posts->data;
        s->posts = g_list_delete_link(s->posts, s->posts);
        g_signal_handler_disconnect(p->msg, p->finished_handler);
        p->finished_handler = 0;
        if (!p->ended && p->sse) {
            sbx_http_mcp_post_end(p);
        } else if (!p->ended) {
            reply_rpc_error(p->msg, SOUP_STATUS_NOT_FOUND, "the MCP session ended");
            soup_server_message_unpause(p->msg);
        }
        post_free(p);
    }
    sbx_http_mcp_calls_end(s);
    sbx_mcp_server_free(s->server);
    sbx_http_listing_unref(s->listing); /* after the server, which read its catalog */
    g_free(s->id);
    g_free(s->tenant_id);
    g_free(s->catalog);
    g_free(s);
}

/*
 * The sessions of @tenant_id (NULL: all) open, and the least recently used of them with nothing
 * in flight (NULL if none).
 */
static guint count_sessions(HttpFront *front, const char *tenant_id, McpSession **ret_idle)
{
    GHashTableIter it;
    gpointer value;
    guint n = 0;

    *ret_idle = NULL;
    g_hash_table_iter_init(&it, front->mcp_sessions);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        McpSession *s = value;
        if (tenant_id != NULL && strcmp(s->tenant_id, tenant_id) != 0) {
            continue;
        }
        n++;
        if (s->jobs == NULL && s->posts == NULL &&
            (*ret_idle == NULL || s->used_us < (*ret_idle)->used_us)) {
            *ret_idle = s;
        }
    }
    return n;
}

static gboolean sweep(gpointer data)
{
    HttpFront *front = data;
    GHashTableIter it;
    gpointer value;
    gint64 now = g_get_monotonic_time();

    g_hash_table_iter_init(&it, front->mcp_sessions);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        McpSession *s = value;
        if (s->jobs == NULL && s->posts == NULL &&
            now - s->used_us > (gint64)SBX_HTTP_MCP_IDLE_S * G_USEC_PER_SEC) {
            g_hash_table_iter_remove(&it);
        }
    }
    return G_SOURCE_CONTINUE;
}

/* ---- requests ----------------------------------------------------------------------------- */

/* A JSON-RPC error as an HTTP answer (no id: it answers no request the core read). */
static void reply_rpc_error(SoupServerMessage *msg, guint status, const char *message)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "jsonrpc", "2.0");
    sbx_jsonb_member_raw(&b, "id", NULL);
    sbx_jsonb_key(&b, "error");
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_int(&b, "code", -32000);
    sbx_jsonb_member_string(&b, "message", message);
    sbx_jsonb_end_object(&b);
    sbx_jsonb_end_object(&b);
    sbx_http_reply_json(msg, status, sbx_jsonb_finish(&b));
}

/* The host of a Host header or an origin's authority ("host", "host:port", "[v6]:port"). */
static char *host_of(const char *authority)
{
    if (authority[0] == '[') {
        const char *end = strchr(authority, ']');
        return end != NULL ? g_strndup(authority, end - authority + 1) : g_strdup(authority);
    }
    const char *colon = strchr(authority, ':');
    return colon != NULL ? g_strndup(authority, colon - authority) : g_strdup(authority);
}

static gboolean host_is_loopback(const char *authority)
{
    g_autofree char *host = host_of(authority);

    return g_ascii_strcasecmp(host, "localhost") == 0 || g_str_has_prefix(host, "127.") ||
           strcmp(host, "[::1]") == 0;
}

/*
 * DNS rebinding (a web page whose host name resolves to this server sending requests from a
 * browser): a server listening on loopback answers only requests that name a loopback host, and
 * a browser's Origin, where one is sent, must be the host the request names. FALSE when answered
 * (403).
 */
static gboolean origin_allowed(HttpFront *front, SoupServerMessage *msg)
{
    SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
    const char *host = soup_message_headers_get_one(h, "Host");
    const char *origin = soup_message_headers_get_one(h, "Origin");
    const char *authority = NULL;

    if (origin != NULL) {
        authority = strstr(origin, "://");
        authority = authority != NULL ? authority + 3 : NULL;
    }
    gboolean ok =
        host != NULL && (!front->loopback || host_is_loopback(host)) &&
        (origin == NULL || (authority != NULL && (front->loopback ? host_is_loopback(authority)
                                                                  : strcmp(authority, host) == 0)));
    if (!ok) {
        sbx_http_reply_error(msg, SOUP_STATUS_FORBIDDEN, "forbidden",
                             "the Host or Origin of the request is not this server's");
    }
    return ok;
}

/* The session a request names: FALSE when answered (400 without one, 404 unknown). */
static gboolean find_session(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                             McpSession **ret)
{
    const char *id = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                                  "Mcp-Session-Id");
    McpSession *s = id != NULL ? g_hash_table_lookup(front->mcp_sessions, id) : NULL;

    if (id == NULL) {
        reply_rpc_error(msg, SOUP_STATUS_BAD_REQUEST,
                        "Bad Request: Mcp-Session-Id is required (initialize first)");
        return FALSE;
    }
    if (s == NULL || strcmp(s->tenant_id, tenant->id) != 0) {
        reply_rpc_error(msg, SOUP_STATUS_NOT_FOUND,
                        "Session not found: it ended or expired (initialize again)");
        return FALSE;
    }
    *ret = s;
    return TRUE;
}

static gboolean accepts(SoupServerMessage *msg, const char *type)
{
    const char *accept =
        soup_message_headers_get_one(soup_server_message_get_request_headers(msg), "Accept");

    return accept == NULL || strstr(accept, type) != NULL || strstr(accept, "*/*") != NULL;
}

/* The catalog `?catalog=` names, checked for @tenant: FALSE when answered (400, 403). */
static gboolean get_catalog(SoupServerMessage *msg, GHashTable *query, const SbxTenant *tenant,
                            const char **ret)
{
    static const char *const only_catalog[] = {"catalog", NULL};

    *ret = NULL;
    if (!sbx_http_query_only(msg, query, only_catalog)) {
        return FALSE;
    }
    *ret = query != NULL ? g_hash_table_lookup(query, "catalog") : NULL;
    if (*ret != NULL && (tenant->catalogs == NULL ||
                         !g_strv_contains((const char *const *)tenant->catalogs, *ret))) {
        sbx_http_reply_error(msg, SOUP_STATUS_FORBIDDEN, "forbidden",
                             "this tenant may not use that catalog");
        return FALSE;
    }
    return TRUE;
}

/* A new session's first POST (initialize): @s is kept if the core took it. */
static gboolean keep_new_session(HttpFront *front, SoupServerMessage *msg, McpSession *s)
{
    if (sbx_mcp_server_revision(s->server) == NULL) {
        return FALSE; /* not an initialize that worked: the core's error is the answer */
    }
    g_hash_table_insert(front->mcp_sessions, s->id, s);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Mcp-Session-Id",
                                 s->id);
    return TRUE;
}

static const char TENANT_SESSIONS_FULL[] =
    "at most " G_STRINGIFY(SBX_HTTP_MCP_TENANT_SESSIONS_MAX) " MCP sessions at once for this "
                                                             "tenant, each with a call in flight";

/*
 * Room for a new session of @tenant: at a limit, the least recently used session with nothing in
 * flight (of the tenant, or of all) is ended for it (clients rarely DELETE theirs: the SDK's
 * close() does not), and its client initializes again when it comes back (404). FALSE when
 * answered (503, 429): every session at the limit has a call in flight.
 */
static gboolean session_room(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant)
{
    McpSession *idle = NULL;

    if (count_sessions(front, tenant->id, &idle) >= SBX_HTTP_MCP_TENANT_SESSIONS_MAX) {
        if (idle == NULL) {
            reply_rpc_error(msg, 429, TENANT_SESSIONS_FULL);
            return FALSE;
        }
        g_hash_table_remove(front->mcp_sessions, idle->id);
    }
    if (count_sessions(front, NULL, &idle) >= SBX_HTTP_MCP_SESSIONS_MAX) {
        if (idle == NULL) {
            reply_rpc_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE,
                            "too many MCP sessions in flight on this server: try later");
            return FALSE;
        }
        g_hash_table_remove(front->mcp_sessions, idle->id);
    }
    return TRUE;
}

/* The core reads the POST's message and answers it, now or once its calls end. */
static void post_run(McpPost *p, gboolean fresh, const SbxTenant *tenant)
{
    McpSession *s = p->s;
    SoupServerMessage *msg = p->msg;
    SoupMessageBody *body = soup_server_message_get_request_body(msg);

    if (fresh && s->listing != NULL) {
        /* NULL when its tools could not be listed: no discovery (the executions have them) */
        sbx_mcp_server_set_catalog(s->server, sbx_http_listing_catalog(s->listing));
    }
    s->used_us = g_get_monotonic_time();
    s->current = p;
    s->tenant = tenant;
    sbx_mcp_server_receive(s->server, body->data != NULL ? body->data : "", body->length);
    s->current = NULL;
    s->tenant = NULL;
    if (fresh && !keep_new_session(s->front, msg, s)) {
        reply_held(msg, p->held, SOUP_STATUS_BAD_REQUEST);
        post_free(p);
        session_free(s);
        return;
    }
    post_decide(p);
}

/* A held initialize's client went away before its catalog was listed. */
static void on_held_gone(SoupServerMessage *msg, gpointer data)
{
    McpPost *p = data;
    McpSession *s = p->s;
    (void)msg;

    p->s->front->mcp_held = g_list_remove(p->s->front->mcp_held, p);
    sbx_http_listing_unwait(s->listing, p);
    p->finished_handler = 0;
    post_free(p);
    session_free(s);
}

/* The catalog of a held initialize is listed: it is read now (it needs no tenant). */
static void on_listing_ready(gpointer data)
{
    McpPost *p = data;
    g_autoptr(SoupServerMessage) msg = g_object_ref(p->msg);

    p->s->front->mcp_held = g_list_remove(p->s->front->mcp_held, p);
    g_signal_handler_disconnect(msg, p->finished_handler);
    p->finished_handler = 0;
    post_run(p, TRUE, NULL);
    soup_server_message_unpause(msg);
}

static void mcp_post(HttpFront *front, SoupServerMessage *msg, GHashTable *query,
                     const SbxTenant *tenant)
{
    SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
    const char *type = soup_message_headers_get_content_type(h, NULL);
    McpSession *s = NULL;
    const char *catalog = NULL;
    gboolean fresh = soup_message_headers_get_one(h, "Mcp-Session-Id") == NULL;
    g_autoptr(GError) error = NULL;

    if (type == NULL || g_ascii_strcasecmp(type, "application/json") != 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                             "the body must be application/json");
        return;
    }
    if (!accepts(msg, "application/json") && !accepts(msg, "text/event-stream")) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_ACCEPTABLE, "not_acceptable",
                             "MCP answers are application/json or text/event-stream");
        return;
    }
    if (fresh ? !get_catalog(msg, query, tenant, &catalog) || !session_room(front, msg, tenant)
              : !find_session(front, msg, tenant, &s)) {
        return;
    }
    if (fresh) {
        s = session_new(front, tenant->id, catalog);
    }
    if (fresh && catalog != NULL) {
        s->listing = sbx_http_listing_get(front, catalog, &error);
        if (s->listing == NULL) {
            session_free(s);
            reply_rpc_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, error->message);
            return;
        }
    }
    McpPost *p = g_new0(McpPost, 1);
    p->s = s;
    p->msg = g_object_ref(msg);
    p->sse = accepts(msg, "text/event-stream");
    p->held = g_ptr_array_new_with_free_func(g_free);
    if (s->listing != NULL && !sbx_http_listing_ready(s->listing)) {
        /* The discovery tools are in tools/list from the start: initialize waits for them (an
         * MCP provider answers within its startup timeout, 20 s by default). */
        soup_server_message_pause(msg);
        p->finished_handler = g_signal_connect(msg, "finished", G_CALLBACK(on_held_gone), p);
        front->mcp_held = g_list_prepend(front->mcp_held, p);
        sbx_http_listing_wait(s->listing, on_listing_ready, p);
        return;
    }
    post_run(p, fresh, tenant);
}

void sbx_http_mcp_route(HttpFront *front, SoupServerMessage *msg, GHashTable *query,
                        const SbxTenant *tenant)
{
    const char *version = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                                       "MCP-Protocol-Version");
    McpSession *s = NULL;

    if (!origin_allowed(front, msg)) {
        return;
    }
    if (version != NULL && !g_strv_contains(sbx_mcp_server_revisions, version)) {
        reply_rpc_error(msg, SOUP_STATUS_BAD_REQUEST,
                        "Bad Request: unsupported MCP-Protocol-Version");
        return;
    }
    if (sbx_http_is(msg, "POST")) {
        mcp_post(front, msg, query, tenant);
    } else if (sbx_http_is(msg, "DELETE")) {
        if (find_session(front, msg, tenant, &s)) {
            g_hash_table_remove(front->mcp_sessions, s->id);
            soup_server_message_set_status(msg, SOUP_STATUS_NO_CONTENT, NULL);
        }
    } else {
        /* No stream of the server's own: every message answers a POST (MCP allows the 405). */
        sbx_http_reply_method(msg, "POST, DELETE");
    }
}

void sbx_http_mcp_init(HttpFront *front)
{
    sbx_http_listings_init(front);
    front->mcp_sessions =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)session_free);
    front->mcp_sweep = g_timeout_add_seconds(SBX_HTTP_MCP_SWEEP_S, sweep, front);
}

void sbx_http_mcp_close(HttpFront *front)
{
    while (front->mcp_held != NULL) {
        McpPost *p = front->mcp_held->data;
        McpSession *s = p->s;
        front->mcp_held = g_list_delete_link(front->mcp_held, front->mcp_held);
        sbx_http_listing_unwait(s->listing, p);
        reply_rpc_error(p->msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "the server is shutting down");
        soup_server_message_unpause(p->msg);
        post_free(p);
        session_free(s);
    }
    if (front->mcp_sessions != NULL) {
        g_hash_table_remove_all(front->mcp_sessions);
    }
}

void sbx_http_mcp_free(HttpFront *front)
{
    g_clear_handle_id(&front->mcp_sweep, g_source_remove);
    g_clear_pointer(&front->mcp_sessions, g_hash_table_destroy);
    sbx_http_listings_free(front);
}
