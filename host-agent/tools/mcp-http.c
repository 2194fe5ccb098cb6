/*
 * MCP over streamable HTTP (libsoup 3): every message we send is a POST to the endpoint with
 * `Accept: application/json, text/event-stream`. A request's answer comes back as one JSON body
 * or as an SSE stream (which may carry the server's own requests and notifications first);
 * notifications and our answers get 202. The `Mcp-Session-Id` the server gives with the
 * initialize answer goes with every later message, and the session is ended with a DELETE when
 * the provider is freed.
 *
 * The general stream: once initialized, we GET the endpoint for the server's own stream, where
 * a server sends what it asks outside any answer's stream (the official SDK's server sends a
 * request made from a tool's handler there unless the handler ties it to its call). Its requests
 * are answered like any (elicitation declined, see mcp-client.c); a server without one answers
 * 405 and we do without. When it ends, it is opened again like a resumed stream (below).
 *
 * Resuming (2025-11-25, SEP-1699): a server may end a request's SSE stream before the answer,
 * gracefully or not, having given its events ids (a "priming" event with an id and no data comes
 * first). Then we wait the `retry` it asked for and GET the endpoint with `Last-Event-ID`; the
 * answer comes on that stream (which is ended once it came), or it ends too and we go again. A
 * stream without any event id cannot be resumed: the request fails as before.
 *
 * Order: POSTs are independent HTTP requests, so a server may handle a later one first. A
 * message sent after a notification (`notifications/initialized` above all: a server that sees
 * `tools/list` before it may fail it) is held until the notification's POST is answered.
 */
#include <libsoup/soup.h>
#include <string.h>

#include "mcp-transports.h"
#include "mcp-wire.h"
#include "protocol/limits.h"

/* Read size of a response body. */
#define READ_CHUNK (64 * 1024)

/*
 * Notifications and answers to the server's requests (ping...) POSTed or held but not yet
 * answered. Every server request gets an answer POST; a server that streams pings on an SSE body
 * and never answers those POSTs would grow them without bound. Room for a cancellation of each
 * call in flight at once (they go one at a time, see http_send) and as many pings besides; past
 * it the connection is failed.
 */
#define FIRE_AND_FORGET_MAX (2 * SBX_TOOL_CALLS_IN_FLIGHT_MAX)

/*
 * Connections libsoup opens: its defaults (2 per host, 10 in all) would queue all but 2 of the
 * calls an execution may have in flight, and queued calls time out while they wait. Each call
 * may hold its connection for an SSE answer; + 1 for the notification or answer POSTed (one at a
 * time), + 1 for the general stream, + 1 for the DELETE.
 */
#define CONNS_MAX (SBX_TOOL_CALLS_IN_FLIGHT_MAX + 3)

/*
 * Delay before resuming a stream whose server sent no `retry` field: the official TypeScript
 * SDK's first reconnection delay, so a server tuned for it sees the same pace from us.
 */
#define RESUME_DELAY_DEFAULT_MS 1000

/*
 * Bounds of a `retry` a server asks for. Below 50 ms a server ending every stream at once would
 * have us reconnect in a tight loop; above 60 s the call would most likely time out waiting (the
 * default per-call timeout is 10 s) while the server may well be ready long before.
 */
#define RESUME_DELAY_MIN_MS 50
#define RESUME_DELAY_MAX_MS 60000

/*
 * Resumptions in a row that may bring no event at all (the GET failed to connect, or its stream
 * ended empty); the next such one fails the request (or ends the general stream): a server
 * restarting gets a few chances, a server that can no longer resume (it lost the stream) does
 * not keep us reconnecting until the call's timeout. Any event resets the count: a server that
 * polls (ends each stream after a priming event while a long call runs) is bounded by the call's
 * timeout alone, as it should be.
 */
#define RESUME_FRUITLESS_MAX 3

typedef struct {
    SbxMcpTransport base;
    gint ref; /* the owner and each request in flight */
    gboolean freed;
    SoupSession *session;
    char *url;
    char **headers; /* name, value, ... */
    char *session_id;
    char *version;
    GHashTable *requests; /* &HttpReq.id -> HttpReq* (our requests; notifications are not kept) */
    guint notifying;      /* notification POSTs not yet answered */
    guint unanswered;     /* notification POSTs sent or held, not yet answered */
    GQueue held; /* Held*: sent while `notifying`, in order (at most the calls in flight) */
    struct HttpReq *general; /* the general stream (GET), while open or waiting to reopen */
    gboolean general_tried;  /* it was opened once (it is not opened again after a refusal) */
} Http;

typedef struct {
    char *json;
    gint64 id;
} Held;

typedef struct HttpReq {
    Http *t;
    gint64 id;        /* our request's, or -1: a notification, an answer, the general stream */
    gboolean general; /* the general stream */
    SoupMessage *msg;
    GCancellable *cancel;
    GInputStream *body;
    SbxMcpFramer *framer; /* an SSE body */
    GByteArray *json;     /* a JSON body being collected (one message, newlines allowed) */
    gboolean sse;
    guint8 *buf; /* READ_CHUNK bytes, only while a body is read */
    /* Resuming an SSE stream (our requests and the general stream): */
    gboolean resumed;    /* the body being read is a GET's (resuming, or the general stream) */
    char *last_event_id; /* the last event id of the request's streams so far, or NULL */
    gint64 retry_ms;     /* the last `retry` of the request's streams, or -1 */
    guint fruitless;     /* resumptions in a row that brought no event */
    guint resume_timer;  /* waiting to resume: the timer's source id, else 0 */
} HttpReq;

static Http *http_ref(Http *t)
{
    t->ref++;
    return t;
}

static void held_free(gpointer p)
{
    Held *h = p;
    g_free(h->json);
    g_free(h);
}

static void http_unref(Http *t)
{
    if (--t->ref > 0) {
        return;
    }
    g_queue_clear_full(&t->held, held_free);
    g_hash_table_destroy(t->requests);
    g_clear_object(&t->session);
    g_free(t->url);
    g_strfreev(t->headers);
    g_free(t->session_id);
    g_free(t->version);
    g_free(t);
}

static void post(Http *t, const char *json, gint64 id);
static void open_general(Http *t);

static void req_free(HttpReq *r)
{
    Http *t = r->t;

    gboolean notification = r->id < 0 && !r->general;

    if (r->id >= 0 && g_hash_table_lookup(t->requests, &r->id) == r) {
        g_hash_table_remove(t->requests, &r->id);
    }
    if (t->general == r) {
        t->general = NULL;
    }
    if (notification) {
        t->unanswered--;
    }
    if (notification && --t->notifying == 0) { /* send what waited for it, up to a notification */
        /* Initialized (notifications/initialized was the first): open the general stream. */
        if (!t->freed && t->version != NULL && !t->general_tried) {
            open_general(t);
        }
        while (!t->freed && t->notifying == 0 && !g_queue_is_empty(&t->held)) {
            Held *h = g_queue_pop_head(&t->held);
            post(t, h->json, h->id);
            held_free(h);
        }
    }
    g_clear_handle_id(&r->resume_timer, g_source_remove);
    g_clear_object(&r->msg);
    g_clear_object(&r->cancel);
    g_clear_object(&r->body);
    g_free(r->buf);
    sbx_mcp_framer_free(r->framer);
    if (r->json != NULL) {
        g_byte_array_unref(r->json);
    }
    g_free(r->last_event_id);
    g_free(r);
    http_unref(t);
}

/* Stop @r: a request being read is cancelled (its read ends it), one waiting to resume ends. */
static void req_abandon(HttpReq *r)
{
    if (r->resume_timer != 0) {
        req_free(r);
        return;
    }
    g_cancellable_cancel(r->cancel);
}

/* The request failed before its answer: the client gets @why for it (if it still waits). */
static void req_fail(HttpReq *r, const char *why)
{
    if (!r->t->freed && r->id >= 0) {
        sbx_mcp_client_fail_request(r->t->base.client, r->id, why);
    }
    req_free(r);
}

static void on_message(const char *text, gsize len, gpointer data)
{
    HttpReq *r = data;
    if (!r->t->freed) {
        sbx_mcp_client_receive(r->t->base.client, text, len);
    }
}

static gboolean req_resume(HttpReq *r, const char *why);

/* The body ended: if our request got no answer on it, it never will (unless it resumes). */
static void req_end(HttpReq *r)
{
    if (!r->sse && r->json != NULL && r->json->len > 0) {
        on_message((const char *)r->json->data, r->json->len, r);
    }
    if (req_resume(r, "the HTTP response ended without an answer")) {
        return;
    }
    if (r->id >= 0 && !r->t->freed) {
        sbx_mcp_client_fail_request(r->t->base.client, r->id,
                                    "the HTTP response ended without an answer");
    }
    req_free(r);
}

static void read_body(HttpReq *r);
static void on_sent(GObject *src, GAsyncResult *res, gpointer data);
static void add_headers(Http *t, SoupMessage *msg);

/* The body of @r is done with: forget it (the request itself may go on, resumed). */
static void req_reset_body(HttpReq *r)
{
    g_clear_object(&r->msg);
    g_clear_object(&r->body);
    g_clear_pointer(&r->buf, g_free);
    g_clear_pointer(&r->framer, sbx_mcp_framer_free);
    g_clear_pointer(&r->json, g_byte_array_unref);
}

/* Time to resume: GET the endpoint with the last event id; the answer goes through on_sent. */
static gboolean on_resume(gpointer data)
{
    HttpReq *r = data;
    Http *t = r->t;

    r->resume_timer = 0;
    r->resumed = TRUE;
    r->msg = soup_message_new(SOUP_METHOD_GET, t->url);
    soup_message_add_flags(r->msg, SOUP_MESSAGE_NO_REDIRECT); /* see on_sent */
    add_headers(t, r->msg);
    SoupMessageHeaders *h = soup_message_get_request_headers(r->msg);
    soup_message_headers_replace(h, "Accept", "text/event-stream");
    if (r->last_event_id != NULL) { /* the general stream may have had none */
        soup_message_headers_replace(h, "Last-Event-ID", r->last_event_id);
    }
    soup_session_send_async(t->session, r->msg, G_PRIORITY_DEFAULT, r->cancel, on_sent, r);
    return G_SOURCE_REMOVE;
}

/*
 * The SSE stream of request @r ended (or broke) before its answer: wait and resume it if it can
 * be (an event id to resume from, and not too many fruitless tries); TRUE if it will. Otherwise
 * FALSE, the caller fails the request (@why: what happened to the stream). The general stream
 * is reopened the same way, with or without an event id.
 */
static gboolean req_resume(HttpReq *r, const char *why)
{
    if (r->t->freed || (r->id < 0 && !r->general) ||
        (!r->general && !sbx_mcp_client_waits(r->t->base.client, r->id))) {
        return FALSE;
    }
    if (r->framer != NULL) {
        const char *id = sbx_mcp_framer_last_event_id(r->framer);
        if (id != NULL) {
            g_free(r->last_event_id);
            r->last_event_id = g_strdup(id);
        }
        r->retry_ms = sbx_mcp_framer_retry_ms(r->framer) >= 0 ? sbx_mcp_framer_retry_ms(r->framer)
                                                              : r->retry_ms;
        r->fruitless = sbx_mcp_framer_events(r->framer) > 0 ? 0 : r->fruitless + 1;
    } else if (r->resumed) {
        r->fruitless++; /* the GET failed before any event */
    }
    if (!r->general && (r->last_event_id == NULL || (!r->sse && !r->resumed))) {
        return FALSE; /* a JSON body, or a stream that gave no id: nothing to resume from */
    }
    if (r->fruitless > RESUME_FRUITLESS_MAX && r->general) {
        req_free(r); /* the server's stream is gone: we do without */
        return TRUE;
    }
    if (r->fruitless > RESUME_FRUITLESS_MAX) {
        g_autofree char *last = g_strdup_printf("%s (resumed %d times in a row without an event)",
                                                why, RESUME_FRUITLESS_MAX + 1);
        sbx_mcp_client_fail_request(r->t->base.client, r->id, last);
        req_free(r);
        return TRUE;
    }
    req_reset_body(r);
    g_clear_object(&r->cancel);
    r->cancel = g_cancellable_new();
    guint delay = r->retry_ms >= 0
                      ? (guint)CLAMP(r->retry_ms, RESUME_DELAY_MIN_MS, RESUME_DELAY_MAX_MS)
                      : RESUME_DELAY_DEFAULT_MS;
    r->resume_timer = g_timeout_add(delay, on_resume, r);
    return TRUE;
}

static void on_read(GObject *src, GAsyncResult *res, gpointer data)
{
    HttpReq *r = data;
    g_autoptr(GError) error = NULL;
    gssize n = g_input_stream_read_finish(G_INPUT_STREAM(src), res, &error);

    if (n < 0 || r->t->freed) {
        g_autofree char *why = g_strdup_printf("reading the HTTP response: %s",
                                               error != NULL ? error->message : "closed");
        if (r->t->freed || g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED) ||
            !req_resume(r, why)) {
            req_fail(r, why);
        }
        return;
    }
    if (n == 0) {
        req_end(r);
        return;
    }
    if (r->sse) {
        if (!sbx_mcp_framer_feed(r->framer, r->buf, n, on_message, r, &error)) {
            g_autofree char *why = g_strdup_printf("the server sent %s", error->message);
            req_fail(r, why);
            return;
        }
        /* A resumed stream is the server's general one: once our answer came, leave it. */
        if (r->resumed && !r->general &&
            (r->t->freed || !sbx_mcp_client_waits(r->t->base.client, r->id))) {
            req_free(r);
            return;
        }
    } else {
        if (r->json->len + n > SBX_MCP_MESSAGE_MAX) {
            g_autofree char *why = g_strdup_printf(
                "the server sent a JSON body larger than %d bytes", SBX_MCP_MESSAGE_MAX);
            req_fail(r, why);
            return;
        }
        g_byte_array_append(r->json, r->buf, n);
    }
    read_body(r);
}

static void read_body(HttpReq *r)
{
    g_input_stream_read_async(r->body, r->buf, READ_CHUNK, G_PRIORITY_DEFAULT, r->cancel, on_read,
                              r);
}

static void on_sent(GObject *src, GAsyncResult *res, gpointer data)
{
    HttpReq *r = data;
    g_autoptr(GError) error = NULL;

    r->body = soup_session_send_finish(SOUP_SESSION(src), res, &error);
    if (r->body == NULL) {
        g_autofree char *why = g_strdup_printf("HTTP: %s", error->message);
        /* A resumption that could not connect (a server restarting) is tried again. */
        if (!r->resumed || g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED) ||
            !req_resume(r, why)) {
            req_fail(r, why);
        }
        return;
    }
    guint status = soup_message_get_status(r->msg);
    SoupMessageHeaders *h = soup_message_get_response_headers(r->msg);
    const char *sid = soup_message_headers_get_one(h, "Mcp-Session-Id");
    if (sid != NULL && r->t->session_id == NULL && strlen(sid) <= 1024) {
        r->t->session_id = g_strdup(sid);
    }
    if (SOUP_STATUS_IS_REDIRECTION(status)) { /* the catalog's headers may carry secrets */
        g_autofree char *why = g_strdup_printf("HTTP status %u: redirects are not followed, set "
                                               "the final URL in the catalog",
                                               status);
        req_fail(r, why);
        return;
    }
    if (status < 200 || status > 299) {
        g_autofree char *why =
            g_strdup_printf("HTTP status %u %s", status, soup_message_get_reason_phrase(r->msg));
        req_fail(r, why);
        return;
    }
    const char *type = soup_message_headers_get_content_type(h, NULL);
    if (r->id < 0 && !r->general) {
        req_free(r); /* accepted (a notification, an answer): nothing to read */
        return;
    }
    if (status == 202 || type == NULL) { /* a request must be answered: it never will be */
        g_autofree char *why = g_strdup_printf(
            "HTTP status %u without an answer (%s)", status,
            type == NULL ? "no Content-Type" : "accepted as if it were a notification");
        req_fail(r, why);
        return;
    }
    r->sse = g_ascii_strcasecmp(type, "text/event-stream") == 0;
    if (r->resumed && !r->sse) { /* a GET is answered with a stream, or not at all */
        g_autofree char *why =
            g_strdup_printf("resuming the SSE stream: the GET was answered with %s", type);
        req_fail(r, why);
        return;
    }
    if (r->sse) {
        r->framer = sbx_mcp_framer_new(SBX_MCP_FRAMING_SSE, SBX_MCP_MESSAGE_MAX);
    } else {
        r->json = g_byte_array_new();
    }
    r->buf = g_malloc(READ_CHUNK);
    read_body(r);
}

static void add_headers(Http *t, SoupMessage *msg)
{
    SoupMessageHeaders *h = soup_message_get_request_headers(msg);

    for (char **p = t->headers; p != NULL && p[0] != NULL; p += 2) {
        soup_message_headers_replace(h, p[0], p[1]);
    }
    if (t->session_id != NULL) {
        soup_message_headers_replace(h, "Mcp-Session-Id", t->session_id);
    }
    if (t->version != NULL) {
        soup_message_headers_replace(h, "MCP-Protocol-Version", t->version);
    }
}

static void http_send(SbxMcpTransport *base, const char *json, gint64 id)
{
    Http *t = (Http *)base;

    if (id < 0 && t->unanswered >= FIRE_AND_FORGET_MAX) {
        g_autofree char *why =
            g_strdup_printf("the server left more than %d notifications and answers unacknowledged",
                            FIRE_AND_FORGET_MAX);
        sbx_mcp_client_closed(t->base.client, why);
        return;
    }
    if (id < 0) {
        t->unanswered++;
    }
    if (t->notifying > 0) {
        Held *h = g_new0(Held, 1);
        h->json = g_strdup(json);
        h->id = id;
        g_queue_push_tail(&t->held, h);
        return;
    }
    post(t, json, id);
}

static void post(Http *t, const char *json, gint64 id)
{
    HttpReq *r = g_new0(HttpReq, 1);

    r->t = http_ref(t);
    r->id = id;
    r->retry_ms = -1;
    r->cancel = g_cancellable_new();
    r->msg = soup_message_new(SOUP_METHOD_POST, t->url);
    soup_message_add_flags(r->msg, SOUP_MESSAGE_NO_REDIRECT); /* see on_sent */
    add_headers(t, r->msg);
    soup_message_headers_replace(soup_message_get_request_headers(r->msg), "Accept",
                                 "application/json, text/event-stream");
    g_autoptr(GBytes) body = g_bytes_new(json, strlen(json));
    soup_message_set_request_body_from_bytes(r->msg, "application/json", body);
    if (id >= 0) {
        g_hash_table_insert(t->requests, &r->id, r);
    } else {
        t->notifying++;
    }
    soup_session_send_async(t->session, r->msg, G_PRIORITY_DEFAULT, r->cancel, on_sent, r);
}

static void http_abandon(SbxMcpTransport *base, gint64 id)
{
    Http *t = (Http *)base;
    HttpReq *r = g_hash_table_lookup(t->requests, &id);

    if (r != NULL) {
        req_abandon(r);
        return;
    }
    for (GList *l = t->held.head; l != NULL; l = l->next) { /* not sent yet: never will be */
        Held *h = l->data;
        if (h->id == id) {
            g_queue_delete_link(&t->held, l);
            held_free(h);
            return;
        }
    }
}

/* Open the general stream (see the top of the file): a GET, as if resuming a stream. */
static void open_general(Http *t)
{
    HttpReq *r = g_new0(HttpReq, 1);

    r->t = http_ref(t);
    r->id = -1;
    r->general = TRUE;
    r->retry_ms = -1;
    r->cancel = g_cancellable_new();
    t->general = r;
    t->general_tried = TRUE;
    on_resume(r);
}

static void http_negotiated(SbxMcpTransport *base, const char *version)
{
    Http *t = (Http *)base;
    g_free(t->version);
    t->version = g_strdup(version);
}

static void on_deleted(GObject *src, GAsyncResult *res, gpointer data)
{
    GBytes *b = soup_session_send_and_read_finish(SOUP_SESSION(src), res, NULL);
    if (b != NULL) {
        g_bytes_unref(b);
    }
    http_unref(data);
}

static void http_free(SbxMcpTransport *base)
{
    Http *t = (Http *)base;

    t->freed = TRUE;
    /* A copy: a request waiting to resume is freed at once (and leaves the table). */
    GList *reqs = g_hash_table_get_values(t->requests);
    for (GList *l = reqs; l != NULL; l = l->next) {
        req_abandon(l->data);
    }
    g_list_free(reqs);
    if (t->general != NULL) {
        req_abandon(t->general);
    }
    /*
     * End the session (best effort: a server may refuse with 405). Asynchronous: under `sandbox
     * serve` the loop goes on and it completes; when `sandbox run` exits first, the server's own
     * session timeout ends it.
     */
    if (t->session_id != NULL) {
        g_autoptr(SoupMessage) msg = soup_message_new(SOUP_METHOD_DELETE, t->url);
        soup_message_add_flags(msg, SOUP_MESSAGE_NO_REDIRECT);
        add_headers(t, msg);
        soup_session_send_and_read_async(t->session, msg, G_PRIORITY_DEFAULT, NULL, on_deleted,
                                         http_ref(t));
    }
    http_unref(t);
}

static const SbxMcpTransportOps http_ops = {
    .send = http_send,
    .abandon = http_abandon,
    .negotiated = http_negotiated,
    .free = http_free,
};

/* https_proxy / http_proxy and no_proxy, as curl reads them; NULL if none is set. */
static GProxyResolver *env_proxy_resolver(void)
{
    const char *proxy = g_getenv("https_proxy");
    proxy = proxy != NULL ? proxy : g_getenv("HTTPS_PROXY");
    proxy = proxy != NULL ? proxy : g_getenv("http_proxy");
    proxy = proxy != NULL ? proxy : g_getenv("HTTP_PROXY");
    if (proxy == NULL || proxy[0] == '\0') {
        return NULL;
    }
    const char *no = g_getenv("no_proxy");
    no = no != NULL ? no : g_getenv("NO_PROXY");
    g_auto(GStrv) ignore = no != NULL ? g_strsplit(no, ",", -1) : NULL;
    return g_simple_proxy_resolver_new(proxy, ignore);
}

SbxMcpTransport *sbx_mcp_http_new(const SbxCatalogProvider *config, GError **error)
{
    if (!g_uri_is_valid(config->url, G_URI_FLAGS_NONE, error)) {
        return NULL;
    }
    Http *t = g_new0(Http, 1);
    t->base.ops = &http_ops;
    t->ref = 1;
    t->url = g_strdup(config->url);
    t->headers = g_strdupv(config->headers);
    /*
     * Timeouts are per request (the client's timers); libsoup's own would cut long SSE streams.
     * The proxy comes from the environment only: GIO's default resolver would load GSettings,
     * and dconf leaves files in XDG_RUNTIME_DIR.
     */
    g_autoptr(GProxyResolver) proxy = env_proxy_resolver();
    t->session = soup_session_new_with_options("timeout", 0, "idle-timeout", 0, "proxy-resolver",
                                               proxy, "max-conns-per-host", CONNS_MAX, "max-conns",
                                               CONNS_MAX, NULL);
    t->requests = g_hash_table_new(g_int64_hash, g_int64_equal);
    return &t->base;
}
