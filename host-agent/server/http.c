/*
 * The HTTP front end (http.h, docs/api.md): the listener and its connections (a cap, a deadline
 * for a request's headers and one for its body, an idle timeout), routing, authentication by
 * API key, the tenants' quotas, and error answers. Everything a client sends is untrusted.
 */
#include "server/http-private.h"

#include "server/session-files.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "base/json-builder.h"
#include "server-resources.h"

struct SbxHttpFront {
    HttpFront f;
};

/* One accepted connection, until libsoup lets go of it. */
typedef struct {
    HttpFront *front;
    GSocketConnection *conn; /* weak: libsoup holds it */
    GSocket *socket;
    GSocketAddress *remote; /* how its messages are told apart (conn_of()) */
    guint deadline;         /* the current request's headers or body must arrive before it */
} HttpConn;

/* ---- answers ------------------------------------------------------------------------------ */

void sbx_http_reply_json(SoupServerMessage *msg, guint status, char *body)
{
    soup_server_message_set_status(msg, status, NULL);
    soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
}

void sbx_http_reply_error(SoupServerMessage *msg, guint status, const char *code,
                          const char *message)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "error");
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "code", code);
    sbx_jsonb_member_string(&b, "message", message);
    sbx_jsonb_end_object(&b);
    sbx_jsonb_end_object(&b);
    sbx_http_reply_json(msg, status, sbx_jsonb_finish(&b));
}

/* ---- connections -------------------------------------------------------------------------- */

static gboolean same_peer(GSocketAddress *a, GSocketAddress *b)
{
    if (a == b) {
        return TRUE;
    }
    if (!G_IS_INET_SOCKET_ADDRESS(a) || !G_IS_INET_SOCKET_ADDRESS(b)) {
        return FALSE;
    }
    GInetSocketAddress *x = G_INET_SOCKET_ADDRESS(a), *y = G_INET_SOCKET_ADDRESS(b);
    return g_inet_socket_address_get_port(x) == g_inet_socket_address_get_port(y) &&
           g_inet_address_equal(g_inet_socket_address_get_address(x),
                                g_inet_socket_address_get_address(y));
}

/*
 * The connection of @msg, by its peer's address and port (unique among the open connections
 * of one listener). Not by its GSocket: a connection handed over with
 * soup_server_accept_iostream() has none in libsoup's eyes (NULL), and no request was then
 * found, so every deadline set at accept cut its connection 10 s later, mid-answer.
 */
static HttpConn *conn_of(HttpFront *front, SoupServerMessage *msg)
{
    GSocketAddress *remote = soup_server_message_get_remote_address(msg);

    for (GList *l = front->conns; remote != NULL && l != NULL; l = l->next) {
        HttpConn *c = l->data;
        if (same_peer(c->remote, remote)) {
            return c;
        }
    }
    return NULL;
}

GSocket *sbx_http_socket_of(HttpFront *front, SoupServerMessage *msg)
{
    HttpConn *c = conn_of(front, msg);

    return c != NULL ? c->socket : NULL;
}

/*
 * Say why the server closed a connection without an answer, at most once per 10 s: a flood of
 * slow or excess connections must not flood the log too.
 */
static void note_closed(HttpFront *front, const char *why)
{
    gint64 now = g_get_monotonic_time();

    front->closed_unanswered++;
    if (now - front->closed_noted_us >= 10 * G_USEC_PER_SEC) {
        g_message("http: closed a connection without an answer: %s (%" G_GUINT64_FORMAT " so far)",
                  why, front->closed_unanswered);
        front->closed_noted_us = now;
    }
}

static gboolean deadline_passed(gpointer data)
{
    HttpConn *c = data;

    c->deadline = 0;
    note_closed(c->front, "its request did not arrive in time");
    g_socket_shutdown(c->socket, TRUE, TRUE, NULL); /* libsoup's next read fails: it closes */
    return G_SOURCE_REMOVE;
}

static void arm(HttpConn *c, guint seconds)
{
    g_clear_handle_id(&c->deadline, g_source_remove);
    if (seconds > 0) {
        c->deadline = g_timeout_add_seconds(seconds, deadline_passed, c);
    }
}

static void on_conn_gone(gpointer data, GObject *where)
{
    HttpConn *c = data;
    (void)where;

    g_clear_handle_id(&c->deadline, g_source_remove);
    c->front->conns = g_list_remove(c->front->conns, c);
    g_clear_object(&c->remote);
    g_free(c);
}

static void on_request_started(SoupServer *soup, SoupServerMessage *msg, gpointer data)
{
    HttpConn *c = conn_of(data, msg);
    (void)soup;

    /*
     * One request per connection, and every answer says so. libsoup keeps a connection alive
     * only if one of its own listeners accepted it, and ours are accepted here (to cap them
     * and set deadlines): without this header a client would send its next request on a
     * connection the server closes, and see it reset (docs/decisions.md).
     */
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Connection",
                                 "close");
    if (c != NULL) {
        arm(c, SBX_HTTP_HEADER_TIMEOUT_S);
    }
}

static void on_request_read(SoupServer *soup, SoupServerMessage *msg, gpointer data)
{
    HttpConn *c = conn_of(data, msg);
    (void)soup;

    if (c != NULL) {
        arm(c, 0); /* the answer may take long (?wait=, an event stream): the idle timeout rules */
    }
}

static void accept_next(HttpFront *front);

static void on_accepted(GObject *obj, GAsyncResult *res, gpointer data)
{
    HttpFront *front = data;
    g_autoptr(GError) error = NULL;
    g_autoptr(GSocketConnection) conn =
        g_socket_listener_accept_finish(G_SOCKET_LISTENER(obj), res, NULL, &error);

    if (conn == NULL) {
        if (!g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
            accept_next(front); /* EMFILE and the like: the next one may work */
        }
        return;
    }
    accept_next(front);
    if (g_list_length(front->conns) >= SBX_HTTP_CONNECTIONS_MAX) {
        note_closed(front, "too many connections");
        g_io_stream_close(G_IO_STREAM(conn), NULL, NULL);
        return;
    }
    HttpConn *c = g_new0(HttpConn, 1);
    c->front = front;
    c->conn = conn;
    c->socket = g_socket_connection_get_socket(conn);
    g_socket_set_timeout(c->socket, SBX_HTTP_IDLE_TIMEOUT_S);
    /*
     * No Nagle: a streamed answer (SSE events, an MCP call's answer and the chunked body's end)
     * is written in small pieces, and each one after the first waited for the client's delayed
     * ACK (40 ms here): an MCP execute over HTTP took 70 ms more than the API's request.
     */
    g_socket_set_option(c->socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
    front->conns = g_list_prepend(front->conns, c);
    g_object_weak_ref(G_OBJECT(conn), on_conn_gone, c);
    arm(c, SBX_HTTP_HEADER_TIMEOUT_S);
    g_autoptr(GSocketAddress) local = g_socket_connection_get_local_address(conn, NULL);
    g_autoptr(GSocketAddress) remote = g_socket_connection_get_remote_address(conn, NULL);
    c->remote = remote != NULL ? g_object_ref(remote) : NULL;
    /*
     * HTTPS: the TLS layer is ours too (libsoup's certificate applies to its own listeners
     * only; it read a ClientHello as plain HTTP, and the client hung). Its handshake happens on
     * libsoup's first read, within the header deadline armed above.
     */
    g_autoptr(GIOStream) stream = G_IO_STREAM(g_object_ref(conn));
    if (front->tls_cert != NULL) {
        g_clear_object(&stream);
        stream = g_tls_server_connection_new(G_IO_STREAM(conn), front->tls_cert, &error);
    }
    if (stream == NULL ||
        !soup_server_accept_iostream(front->soup, stream, local, remote, &error)) {
        g_io_stream_close(G_IO_STREAM(conn), NULL, NULL);
    }
}

static void accept_next(HttpFront *front)
{
    if (!front->closing) {
        g_socket_listener_accept_async(front->listener, front->accept_cancel, on_accepted, front);
    }
}

/* ---- requests ----------------------------------------------------------------------------- */

typedef struct {
    HttpFront *front;
    char *tenant_id;
    guint64 bytes;
} BodyHeld;

static guint64 *tenant_held(HttpFront *front, const char *tenant_id)
{
    guint64 *held = g_hash_table_lookup(front->tenant_bodies, tenant_id);

    if (held == NULL) {
        held = g_new0(guint64, 1);
        g_hash_table_insert(front->tenant_bodies, g_strdup(tenant_id), held);
    }
    return held;
}

/* The body is no longer held: its request finished (answered, or its client gone). Once. */
static void body_released(SoupServerMessage *msg, gpointer data)
{
    BodyHeld *h = data;
    guint64 *mine = tenant_held(h->front, h->tenant_id);
    (void)msg;

    h->front->bodies_held -= MIN(h->bytes, h->front->bodies_held);
    *mine -= MIN(h->bytes, *mine);
    if (*mine == 0) {
        g_hash_table_remove(h->front->tenant_bodies, h->tenant_id);
    }
    h->bytes = 0; /* "finished" comes once; this keeps a second one harmless */
}

/* With the handler (the message's end): the accounting is done by "finished" alone, which
 * every request gets, also when its client goes; the front may be gone by now. */
static void body_held_free(gpointer data, GClosure *closure)
{
    BodyHeld *h = data;
    (void)closure;

    g_free(h->tenant_id);
    g_free(h);
}

static gboolean authenticate(HttpFront *front, SoupServerMessage *msg, SbxTenant **ret);

/*
 * Count @bytes of @msg's body against SBX_HTTP_BODIES_HELD_MAX and its tenant's share, once
 * its key checked out; FALSE when answered (401, 503).
 */
static gboolean hold_body(HttpFront *front, SoupServerMessage *msg, goffset bytes)
{
    g_autoptr(SbxTenant) tenant = NULL;

    if (bytes <= 0) {
        return TRUE;
    }
    if (!authenticate(front, msg, &tenant)) {
        return FALSE;
    }
    guint64 *mine = tenant_held(front, tenant->id);
    if (front->bodies_held + (guint64)bytes > SBX_HTTP_BODIES_HELD_MAX ||
        *mine + (guint64)bytes > SBX_HTTP_TENANT_BODIES_HELD_MAX) {
        if (*mine == 0) {
            g_hash_table_remove(front->tenant_bodies, tenant->id);
        }
        soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Retry-After",
                                     "1");
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable",
                             "the server holds too many request bodies: try again");
        return FALSE;
    }
    BodyHeld *h = g_new0(BodyHeld, 1);
    h->front = front;
    h->tenant_id = g_strdup(tenant->id);
    h->bytes = (guint64)bytes;
    front->bodies_held += h->bytes;
    *mine += h->bytes;
    g_signal_connect_data(msg, "finished", G_CALLBACK(body_released), h, body_held_free, 0);
    return TRUE;
}

/*
 * Before the body is read: a body that may not be bounded ahead (chunked) or is too large is
 * refused unread, as is one past what the server holds of all bodies at once; the body's
 * deadline starts.
 */
static void early_checks(SoupServer *soup, SoupServerMessage *msg, const char *path,
                         GHashTable *query, gpointer data)
{
    SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
    HttpConn *c = conn_of(data, msg);
    (void)soup;
    (void)query;

    if (soup_message_headers_get_encoding(h) == SOUP_ENCODING_CHUNKED) {
        sbx_http_reply_error(msg, SOUP_STATUS_LENGTH_REQUIRED, "bad_request",
                             "a request body needs a Content-Length");
        return;
    }
    /* a session's file (PUT /v1/sessions/{id}/files/{path}) may be larger than a request */
    gboolean file = sbx_http_is(msg, "PUT") && g_str_has_prefix(path, "/v1/sessions/") &&
                    strstr(path, "/files/") != NULL;
    goffset max = file ? SBX_SESSION_FILE_MAX : SBX_HTTP_BODY_MAX;
    if (soup_message_headers_get_encoding(h) == SOUP_ENCODING_CONTENT_LENGTH &&
        soup_message_headers_get_content_length(h) > max) {
        sbx_http_reply_error(msg, SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE, "payload_too_large",
                             file ? "the file is larger than 32 MiB"
                                  : "the request body is larger than 7 MiB + 64 KiB");
        return;
    }
    if (soup_message_headers_get_encoding(h) == SOUP_ENCODING_CONTENT_LENGTH &&
        !hold_body(data, msg, soup_message_headers_get_content_length(h))) {
        return;
    }
    if (c != NULL) {
        arm(c, SBX_HTTP_BODY_TIMEOUT_S);
    }
}

/*
 * Before the body is read (above). A request refused there is answered after its body was
 * read (libsoup reads it unless the client asked `Expect: 100-continue`, then the answer goes
 * at once): the body is dropped as it comes, never kept, within the header deadline.
 */
static void early_handler(SoupServer *soup, SoupServerMessage *msg, const char *path,
                          GHashTable *query, gpointer data)
{
    early_checks(soup, msg, path, query, data);
    if (soup_server_message_get_status(msg) != 0) {
        soup_message_body_set_accumulate(soup_server_message_get_request_body(msg), FALSE);
    }
}

/* The tenant of the request's bearer key; FALSE when answered (401, 500). */
static gboolean authenticate(HttpFront *front, SoupServerMessage *msg, SbxTenant **ret)
{
    SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
    const char *auth = soup_message_headers_get_one(h, "Authorization");
    g_autoptr(GError) error = NULL;

    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "WWW-Authenticate",
                                 "Bearer");
    if (auth == NULL || g_ascii_strncasecmp(auth, "Bearer ", 7) != 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_UNAUTHORIZED, "unauthorized",
                             "an API key is needed: Authorization: Bearer <key>");
        return FALSE;
    }
    if (!sbx_tenant_authenticate(front->store, auth + 7, ret, &error)) {
        gboolean ours = error->domain == SBX_STORE_ERROR && error->code != SBX_STORE_ERROR_DB;
        sbx_http_reply_error(msg,
                             ours ? SOUP_STATUS_UNAUTHORIZED : SOUP_STATUS_INTERNAL_SERVER_ERROR,
                             ours ? "unauthorized" : "internal",
                             ours ? "unknown API key" : "the tenant store failed");
        return FALSE;
    }
    soup_message_headers_remove(soup_server_message_get_response_headers(msg), "WWW-Authenticate");
    return TRUE;
}

void sbx_http_reply_method(SoupServerMessage *msg, const char *allow)
{
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow", allow);
    sbx_http_reply_error(msg, SOUP_STATUS_METHOD_NOT_ALLOWED, "method_not_allowed",
                         "this path does not take that method");
}

gboolean sbx_http_is(SoupServerMessage *msg, const char *method)
{
    return strcmp(soup_server_message_get_method(msg), method) == 0;
}

char *sbx_http_quota_refusal(HttpFront *front, const SbxTenant *tenant, guint *ret_retry_s)
{
    gint64 oldest = 0;

    *ret_retry_s = 1;
    /* A replay holds a VM and runs the tenant's code as an execution does: it counts as one. */
    if (sbx_server_tenant_jobs(front->srv, tenant->id) +
            sbx_http_replays_running(front, tenant->id) >=
        tenant->quotas.max_concurrent) {
        return g_strdup_printf("at most %u executions at once for this tenant",
                               tenant->quotas.max_concurrent);
    }
    if (sbx_http_exec_started_last_minute(front, tenant->id, &oldest) >=
        tenant->quotas.max_per_minute) {
        gint64 wait_s = (oldest + 60 * G_USEC_PER_SEC - g_get_monotonic_time()) / G_USEC_PER_SEC;
        *ret_retry_s = (guint)MAX(wait_s + 1, 1);
        return g_strdup_printf("at most %u executions a minute for this tenant",
                               tenant->quotas.max_per_minute);
    }
    return NULL;
}

/* The quotas of @tenant on a new execution; FALSE when answered (429 with Retry-After). */
gboolean sbx_http_within_quota(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant)
{
    guint retry_s;
    g_autofree char *why = sbx_http_quota_refusal(front, tenant, &retry_s);

    if (why == NULL) {
        return TRUE;
    }
    g_autofree char *after = g_strdup_printf("%u", retry_s);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Retry-After",
                                 after);
    sbx_http_reply_error(msg, 429, "rate_limited", why);
    return FALSE;
}

static void route_executions(HttpFront *front, SoupServerMessage *msg, const char *rest,
                             GHashTable *query, const SbxTenant *tenant)
{
    if (*rest == '\0') {
        if (sbx_http_is(msg, "POST")) {
            if (sbx_http_within_quota(front, msg, tenant)) {
                sbx_http_exec_create(front, msg, tenant, query, NULL);
            }
        } else if (sbx_http_is(msg, "GET")) {
            sbx_http_exec_list(front, msg, tenant, query);
        } else {
            sbx_http_reply_method(msg, "GET, POST");
        }
        return;
    }
    const char *slash = strchr(rest + 1, '/');
    g_autofree char *id =
        g_strndup(rest + 1, slash != NULL ? (gsize)(slash - rest - 1) : strlen(rest + 1));
    sbx_http_exec_route(front, msg, tenant, id, slash != NULL ? slash : "", query);
}

static void route_approvals(HttpFront *front, SoupServerMessage *msg, const char *rest,
                            const SbxTenant *tenant)
{
    if (*rest == '\0') {
        sbx_http_is(msg, "GET") ? sbx_http_approvals_route(front, msg, tenant, NULL)
                                : sbx_http_reply_method(msg, "GET");
    } else if (strchr(rest + 1, '/') != NULL) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such path");
    } else {
        sbx_http_is(msg, "POST") ? sbx_http_approvals_route(front, msg, tenant, rest + 1)
                                 : sbx_http_reply_method(msg, "POST");
    }
}

/*
 * The OpenAPI document, compiled in (openapi.gresource.xml). Looked up in the resource itself:
 * the global registry depends on a constructor in a static library's object that nothing else
 * references, which the linker may leave out (the document was then served empty).
 */
static void reply_openapi(SoupServerMessage *msg)
{
    g_autoptr(GBytes) doc =
        g_resource_lookup_data(sbx_server_get_resource(), "/org/sandbox/server/openapi.json",
                               G_RESOURCE_LOOKUP_FLAGS_NONE, NULL);
    gsize len = 0;
    const char *data = doc != NULL ? g_bytes_get_data(doc, &len) : NULL;

    if (data == NULL || len == 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_INTERNAL_SERVER_ERROR, "internal",
                             "the OpenAPI document is missing from this build");
        return;
    }

    soup_server_message_set_status(msg, SOUP_STATUS_OK, NULL);
    soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_COPY, data, len);
}

static void handler(SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query,
                    gpointer data)
{
    HttpFront *front = data;
    g_autoptr(SbxTenant) tenant = NULL;
    (void)soup;

    if (soup_server_message_get_status(msg) != 0) {
        return; /* answered early (413, 411) */
    }
    if (strcmp(path, "/v1/health") == 0 || strcmp(path, "/v1/openapi.json") == 0) {
        if (!sbx_http_is(msg, "GET")) {
            sbx_http_reply_method(msg, "GET");
        } else if (path[4] == 'h') {
            sbx_http_reply_json(msg, SOUP_STATUS_OK, g_strdup("{\"status\":\"ok\"}"));
        } else {
            reply_openapi(msg);
        }
        return;
    }
    gboolean execs =
        g_str_has_prefix(path, "/v1/executions") && (path[14] == '\0' || path[14] == '/');
    gboolean approvals =
        g_str_has_prefix(path, "/v1/approvals") && (path[13] == '\0' || path[13] == '/');
    gboolean sessions =
        g_str_has_prefix(path, "/v1/sessions") && (path[12] == '\0' || path[12] == '/');
    gboolean mcp = strcmp(path, "/mcp") == 0;
    if (!execs && !approvals && !sessions && !mcp) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such path");
        return;
    }
    if (!authenticate(front, msg, &tenant)) {
        return;
    }
    if (front->closing || sbx_server_stopping(front->srv)) {
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable",
                             "the server is shutting down");
        return;
    }
    if (mcp) {
        sbx_http_mcp_route(front, msg, query, tenant);
    } else if (execs) {
        route_executions(front, msg, path + 14, query, tenant);
    } else if (sessions) {
        sbx_http_session_route(front, msg, path + 12, query, tenant);
    } else {
        route_approvals(front, msg, path + 13, tenant);
    }
}

/* ---- the listener ------------------------------------------------------------------------- */

/* "ADDR:PORT" ("[::1]:8080" for IPv6) into a socket address. */
static GSocketAddress *parse_listen(const char *listen, GError **error)
{
    const char *colon = strrchr(listen, ':');
    g_autofree char *host = NULL;
    guint64 port;

    if (colon == NULL || !g_ascii_string_to_unsigned(colon + 1, 10, 0, 65535, &port, NULL)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "--listen %s: expected ADDR:PORT (e.g. 127.0.0.1:8080)", listen);
        return NULL;
    }
    host = g_strndup(listen, colon - listen);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    GSocketAddress *addr = g_inet_socket_address_new_from_string(host, (guint)port);
    if (addr == NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "--listen %s: \"%s\" is no IP address", listen, host);
    }
    return addr;
}

static gboolean set_tls(HttpFront *front, const SbxHttpConfig *config, GError **error)
{
    if ((config->tls_cert == NULL) != (config->tls_key == NULL)) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                            "--tls-cert and --tls-key go together");
        return FALSE;
    }
    if (config->tls_cert == NULL) {
        return TRUE;
    }
    g_autoptr(GTlsCertificate) cert =
        g_tls_certificate_new_from_files(config->tls_cert, config->tls_key, error);
    if (cert == NULL) {
        g_prefix_error(error, "TLS certificate: ");
        return FALSE;
    }
    front->tls_cert = g_steal_pointer(&cert); /* the accepted connections' (on_accepted()) */
    front->https = TRUE;
    return TRUE;
}

static gboolean start_listening(HttpFront *front, const char *listen, GError **error)
{
    g_autoptr(GSocketAddress) addr = parse_listen(listen, error);
    g_autoptr(GSocketAddress) bound = NULL;

    if (addr == NULL) {
        return FALSE;
    }
    front->listener = g_socket_listener_new();
    if (!g_socket_listener_add_address(front->listener, addr, G_SOCKET_TYPE_STREAM,
                                       G_SOCKET_PROTOCOL_TCP, NULL, &bound, error)) {
        g_prefix_error(error, "listen on %s: ", listen);
        return FALSE;
    }
    front->port = g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound));
    front->loopback = g_inet_address_get_is_loopback(
        g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(bound)));
    front->accept_cancel = g_cancellable_new();
    accept_next(front);
    return TRUE;
}

/* A tenant's starts of the last minute: a GQueue of gint64 * (http-exec.c). */
static void free_starts(gpointer q)
{
    g_queue_free_full(q, g_free);
}

SbxHttpFront *sbx_http_front_new(SbxServer *srv, const SbxHttpConfig *config, GError **error)
{
    SbxHttpFront *pub = g_new0(SbxHttpFront, 1);
    HttpFront *front = &pub->f;

    front->srv = srv;
    front->store = config->store;
    front->catalogs_dir = g_strdup(config->catalogs_dir);
    front->execs = g_hash_table_new(g_str_hash, g_str_equal);
    front->recent_starts = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, free_starts);
    front->tenant_bodies = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_queue_init(&front->finished);
    sbx_http_mcp_init(front);
    front->soup = soup_server_new("server-header", "sandbox", NULL);
    soup_server_add_early_handler(front->soup, NULL, early_handler, front, NULL);
    soup_server_add_handler(front->soup, NULL, handler, front, NULL);
    g_signal_connect(front->soup, "request-started", G_CALLBACK(on_request_started), front);
    g_signal_connect(front->soup, "request-read", G_CALLBACK(on_request_read), front);
    if (!set_tls(front, config, error) || !start_listening(front, config->listen, error)) {
        sbx_http_front_free(pub);
        return NULL;
    }
    sbx_http_approvals_watch(front);
    return pub;
}

guint16 sbx_http_front_port(SbxHttpFront *pub)
{
    return pub->f.port;
}

void sbx_http_front_close(SbxHttpFront *pub)
{
    HttpFront *front = &pub->f;

    front->closing = TRUE;
    if (front->accept_cancel != NULL) {
        g_cancellable_cancel(front->accept_cancel);
    }
    if (front->listener != NULL) {
        g_socket_listener_close(front->listener);
    }
    sbx_http_mcp_close(front);
    sbx_http_exec_end_streams(front);
}

void sbx_http_front_free(SbxHttpFront *pub)
{
    if (pub == NULL) {
        return;
    }
    HttpFront *front = &pub->f;
    sbx_http_front_close(pub);
    sbx_approvals_set_notify(sbx_server_approvals(front->srv), NULL, NULL);
    sbx_http_mcp_free(front);
    sbx_http_replays_free(front);
    sbx_http_exec_free_all(front);
    soup_server_disconnect(front->soup);
    for (GList *l = front->conns; l != NULL; l = l->next) {
        HttpConn *c = l->data;
        g_clear_handle_id(&c->deadline, g_source_remove);
        g_object_weak_unref(G_OBJECT(c->conn), on_conn_gone, c);
        g_clear_object(&c->remote);
        g_free(c);
    }
    g_list_free(front->conns);
    g_clear_object(&front->soup);
    g_clear_object(&front->tls_cert);
    g_clear_object(&front->listener);
    g_clear_object(&front->accept_cancel);
    g_hash_table_destroy(front->execs);
    g_hash_table_destroy(front->recent_starts);
    g_hash_table_destroy(front->tenant_bodies);
    g_free(front->catalogs_dir);
    g_free(pub);
}
