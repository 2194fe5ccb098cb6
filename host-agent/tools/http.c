/*
 * The http provider: each tool is a JSON endpoint (catalog-http.h). A call becomes one request
 * through libsoup on the main loop (never blocking it): the URL from the template and the
 * input, the headers from the catalog with the host's secrets filled in, a JSON body for POST,
 * PUT and PATCH. The answer must be a 2xx with a JSON body (or none) of at most
 * SBX_TOOL_RESULT_MAX bytes; anything else is a tool_error with the status and a short excerpt
 * of the body. Redirects are followed by hand, at most HTTP_REDIRECTS_MAX times and only within
 * the same origin, so the headers (secrets included) never go to another host.
 *
 * Secrets stay on the host: they are only in the request headers, and no error message quotes
 * a request header (an excerpt of the server's answer has any secret value it echoes replaced).
 */
#include <cJSON.h>
#include <libsoup/soup.h>
#include <string.h>

#include "catalog-http.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "provider.h"
#include "secrets.h"
#include "tools-error.h"

/*
 * Redirects followed per call: APIs redirect once (a moved resource, a trailing slash); a
 * chain longer than 5 is a loop or a misconfiguration.
 */
#define HTTP_REDIRECTS_MAX 5

/* Excerpt of a failed answer's body in the error: enough for an API's error message. */
#define HTTP_ERROR_EXCERPT_MAX 1024

/* Read size of the response body. */
#define HTTP_READ_CHUNK (64 * 1024)

/* A tool's headers with the secrets filled in: provider-wide first, the tool's own after. */
typedef struct {
    GPtrArray *names;
    GPtrArray *values;
} Headers;

typedef struct {
    SbxProvider base;
    SoupSession *session;
    guint timeout_ms;
    GHashTable *tools;   /* real tool name -> const SbxHttpEndpoint * (the catalog's) */
    GHashTable *headers; /* real tool name -> Headers * */
    GPtrArray *secrets;  /* the secret values used, to keep them out of error excerpts */
} HttpProvider;

typedef struct {
    HttpProvider *prov;
    char *tool;
    char *method;
    char *body; /* or NULL */
    SoupMessage *msg;
    GInputStream *stream;
    GByteArray *data;
    guint redirects;
    GCancellable *cancel; /* ours: the caller's, or the timeout */
    GCancellable *caller; /* the caller's (may be NULL) */
    gulong caller_handler;
    guint timer;
    gboolean timed_out;
} HttpCall;

static void headers_free(gpointer p)
{
    Headers *h = p;
    g_ptr_array_unref(h->names);
    g_ptr_array_unref(h->values);
    g_free(h);
}

static void call_free(gpointer p)
{
    HttpCall *c = p;

    g_clear_handle_id(&c->timer, g_source_remove);
    if (c->caller != NULL) {
        g_cancellable_disconnect(c->caller, c->caller_handler);
        g_object_unref(c->caller);
    }
    g_clear_object(&c->cancel);
    g_clear_object(&c->msg);
    g_clear_object(&c->stream);
    if (c->data != NULL) {
        g_byte_array_unref(c->data);
    }
    g_free(c->tool);
    g_free(c->method);
    g_free(c->body);
    g_free(c);
}

/* @text with every secret value replaced by [secret]. */
static char *redact(HttpProvider *p, const char *text)
{
    char *out = g_strdup(text);

    for (guint i = 0; i < p->secrets->len; i++) {
        g_auto(GStrv) parts = g_strsplit(out, p->secrets->pdata[i], -1);
        g_free(out);
        out = g_strjoinv("[secret]", parts);
    }
    return out;
}

/* Read that far past the excerpt, a secret that starts in it is whole, and so redacted. */
static gsize longest_secret(HttpProvider *p)
{
    gsize longest = 0;

    for (guint i = 0; i < p->secrets->len; i++) {
        longest = MAX(longest, strlen(p->secrets->pdata[i]));
    }
    return longest;
}

static void fail(GTask *task, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void fail(GTask *task, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL, "%s", msg);
}

/* A transport error: the caller's cancellation stays a cancellation; our timeout is an error. */
static void fail_transport(GTask *task, GError *error)
{
    HttpCall *c = g_task_get_task_data(task);

    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED) && !c->timed_out) {
        g_task_return_error(task, error);
        return;
    }
    if (c->timed_out) {
        fail(task, "tool \"%s\": no answer within %u ms", c->tool, c->prov->timeout_ms);
    } else {
        fail(task, "tool \"%s\": %s %s: %s", c->tool, c->method,
             g_uri_get_host(soup_message_get_uri(c->msg)), error->message);
    }
    g_error_free(error);
}

/* ---- the answer ------------------------------------------------------------------------ */

static void finish_answer(GTask *task)
{
    HttpCall *c = g_task_get_task_data(task);
    guint status = soup_message_get_status(c->msg);
    const char *text = (const char *)c->data->data;
    gsize len = c->data->len;

    if (!SOUP_STATUS_IS_SUCCESSFUL(status)) {
        /* Redact before the cut: a secret straddling the cut would leak its prefix. */
        g_autofree char *valid = g_utf8_make_valid(text, len);
        g_autofree char *redacted = redact(c->prov, valid);
        gsize rlen = strlen(redacted);
        const char *end = redacted + MIN(rlen, HTTP_ERROR_EXCERPT_MAX);
        if (end < redacted + rlen) {
            end = g_utf8_find_prev_char(redacted, end + 1); /* whole characters only */
        }
        gsize cut = end - redacted;
        fail(task, "tool \"%s\": HTTP %u %s%s%.*s%s", c->tool, status,
             soup_message_get_reason_phrase(c->msg) ? soup_message_get_reason_phrase(c->msg) : "",
             len > 0 ? ": " : "", (int)cut, redacted, rlen > cut ? "..." : "");
        return;
    }
    gsize blank = 0;
    while (blank < len && g_ascii_isspace(text[blank])) {
        blank++;
    }
    if (blank == len) {
        g_task_return_pointer(task, g_strdup("null"), g_free); /* no body (204) */
        return;
    }
    /* Forwarded as the server sent it, less the whitespace between tokens; one level is for
     * the tool_result message around it. */
    g_autofree char *why = NULL;
    char *json = sbx_json_normalize(text, len, SBX_JSON_DEPTH_MAX - 1, &why);
    if (json == NULL) {
        const char *type =
            soup_message_headers_get_content_type(soup_message_get_response_headers(c->msg), NULL);
        fail(task, "tool \"%s\": the answer is not JSON (Content-Type: %s): %s", c->tool,
             type != NULL ? type : "none", why != NULL ? why : "out of memory");
        return;
    }
    g_task_return_pointer(task, g_strdup(json), g_free);
    free(json);
}

static void on_read(GObject *src, GAsyncResult *res, gpointer data)
{
    GTask *task = data;
    HttpCall *c = g_task_get_task_data(task);
    GError *error = NULL;
    g_autoptr(GBytes) bytes = g_input_stream_read_bytes_finish(G_INPUT_STREAM(src), res, &error);

    if (bytes == NULL) {
        fail_transport(task, error);
        g_object_unref(task);
        return;
    }
    gsize n = g_bytes_get_size(bytes);
    if (n == 0) {
        finish_answer(task);
        g_object_unref(task);
        return;
    }
    if (c->data->len + n > SBX_TOOL_RESULT_MAX) {
        fail(task, "tool \"%s\": the answer is larger than %d bytes", c->tool, SBX_TOOL_RESULT_MAX);
        g_object_unref(task);
        return;
    }
    g_byte_array_append(c->data, g_bytes_get_data(bytes, NULL), n);
    if (!SOUP_STATUS_IS_SUCCESSFUL(soup_message_get_status(c->msg)) &&
        c->data->len > HTTP_ERROR_EXCERPT_MAX + longest_secret(c->prov)) {
        finish_answer(task); /* a failure: its excerpt is all we keep */
        g_object_unref(task);
        return;
    }
    g_input_stream_read_bytes_async(c->stream, HTTP_READ_CHUNK, G_PRIORITY_DEFAULT, c->cancel,
                                    on_read, task);
}

/* ---- the request ----------------------------------------------------------------------- */

static void send_request(GTask *task, const char *url);

static gboolean same_origin(GUri *a, GUri *b)
{
    int pa = g_uri_get_port(a), pb = g_uri_get_port(b);
    int da = strcmp(g_uri_get_scheme(a), "https") == 0 ? 443 : 80;
    int db = strcmp(g_uri_get_scheme(b), "https") == 0 ? 443 : 80;

    if (g_uri_get_host(a) == NULL || g_uri_get_host(b) == NULL) {
        return FALSE; /* `http:/x` and the like: not a place to send secrets to */
    }
    return g_ascii_strcasecmp(g_uri_get_scheme(a), g_uri_get_scheme(b)) == 0 &&
           g_ascii_strcasecmp(g_uri_get_host(a), g_uri_get_host(b)) == 0 &&
           (pa < 0 ? da : pa) == (pb < 0 ? db : pb);
}

/* A 3xx with a Location: follow it (same origin only); FALSE if it is not a redirect. */
static gboolean follow_redirect(GTask *task)
{
    HttpCall *c = g_task_get_task_data(task);
    guint status = soup_message_get_status(c->msg);
    const char *loc =
        soup_message_headers_get_one(soup_message_get_response_headers(c->msg), "Location");

    if (!SOUP_STATUS_IS_REDIRECTION(status) || status == 304 || loc == NULL) {
        return FALSE;
    }
    GUri *base = soup_message_get_uri(c->msg);
    g_autoptr(GUri) next = g_uri_parse_relative(base, loc, SOUP_HTTP_URI_FLAGS, NULL);
    if (c->redirects >= HTTP_REDIRECTS_MAX) {
        fail(task, "tool \"%s\": more than %d redirects", c->tool, HTTP_REDIRECTS_MAX);
    } else if (next == NULL || !same_origin(base, next)) {
        fail(task,
             "tool \"%s\": HTTP %u redirects to another origin (or an invalid URL): not "
             "followed, the request's headers may hold secrets",
             c->tool, status);
    } else {
        c->redirects++;
        /* As browsers do: 303, and 301/302 after a POST, continue as a GET without body. */
        if (status == 303 || ((status == 301 || status == 302) && strcmp(c->method, "POST") == 0)) {
            g_free(c->method);
            c->method = g_strdup("GET");
            g_clear_pointer(&c->body, g_free);
        }
        g_autofree char *url = g_uri_to_string(next);
        g_clear_object(&c->stream);
        send_request(task, url);
        return TRUE;
    }
    g_object_unref(task);
    return TRUE;
}

static void on_sent(GObject *src, GAsyncResult *res, gpointer data)
{
    GTask *task = data;
    HttpCall *c = g_task_get_task_data(task);
    GError *error = NULL;

    c->stream = soup_session_send_finish(SOUP_SESSION(src), res, &error);
    if (c->stream == NULL) {
        fail_transport(task, error);
        g_object_unref(task);
        return;
    }
    if (follow_redirect(task)) {
        return;
    }
    c->data = g_byte_array_new();
    g_input_stream_read_bytes_async(c->stream, HTTP_READ_CHUNK, G_PRIORITY_DEFAULT, c->cancel,
                                    on_read, task);
}

static void send_request(GTask *task, const char *url)
{
    HttpCall *c = g_task_get_task_data(task);
    Headers *h = g_hash_table_lookup(c->prov->headers, c->tool);

    g_clear_object(&c->msg);
    c->msg = soup_message_new(c->method, url);
    if (c->msg == NULL) {
        fail(task, "tool \"%s\": not a valid URL: %.256s", c->tool, url);
        g_object_unref(task);
        return;
    }
    soup_message_add_flags(c->msg, SOUP_MESSAGE_NO_REDIRECT);
    SoupMessageHeaders *req = soup_message_get_request_headers(c->msg);
    soup_message_headers_replace(req, "Accept", "application/json");
    for (guint i = 0; i < h->names->len; i++) {
        soup_message_headers_replace(req, h->names->pdata[i], h->values->pdata[i]);
    }
    if (c->body != NULL) {
        g_autoptr(GBytes) b = g_bytes_new(c->body, strlen(c->body));
        soup_message_set_request_body_from_bytes(c->msg, "application/json", b);
    }
    soup_session_send_async(c->prov->session, c->msg, G_PRIORITY_DEFAULT, c->cancel, on_sent, task);
}

static gboolean on_timeout(gpointer data)
{
    HttpCall *c = data;
    c->timer = 0;
    c->timed_out = TRUE;
    g_cancellable_cancel(c->cancel);
    return G_SOURCE_REMOVE;
}

static void on_caller_cancelled(GCancellable *caller, gpointer data)
{
    (void)caller;
    g_cancellable_cancel(data); /* another cancellable: no re-entrance into the caller's */
}

static void http_call_async(SbxProvider *provider, const char *tool, const char *input_json,
                            GCancellable *cancellable, GAsyncReadyCallback callback,
                            gpointer user_data)
{
    HttpProvider *p = (HttpProvider *)provider;
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);
    const SbxHttpEndpoint *ep = g_hash_table_lookup(p->tools, tool);
    HttpCall *c = g_new0(HttpCall, 1);
    g_autofree char *url = NULL;
    GError *error = NULL;

    g_task_set_task_data(task, c, call_free);
    c->prov = p;
    c->tool = g_strdup(tool);
    if (ep == NULL) {
        fail(task, "unknown tool \"%s\"", tool);
        g_object_unref(task);
        return;
    }
    c->method = g_strdup(ep->method);
    if (!sbx_http_build_request(ep, input_json, &url, &c->body, &error)) {
        g_task_return_error(task, error);
        g_object_unref(task);
        return;
    }
    c->cancel = g_cancellable_new();
    if (cancellable != NULL) {
        c->caller = g_object_ref(cancellable);
        c->caller_handler = g_cancellable_connect(cancellable, G_CALLBACK(on_caller_cancelled),
                                                  g_object_ref(c->cancel), g_object_unref);
    }
    c->timer = g_timeout_add(p->timeout_ms, on_timeout, c);
    send_request(task, url);
}

static char *http_call_finish(SbxProvider *provider, GAsyncResult *result, GError **error)
{
    (void)provider;
    g_return_val_if_fail(g_task_is_valid(result, NULL), NULL);
    return g_task_propagate_pointer(G_TASK(result), error);
}

static void http_free(SbxProvider *provider)
{
    HttpProvider *p = (HttpProvider *)provider;

    g_clear_object(&p->session);
    g_hash_table_destroy(p->tools);
    g_hash_table_destroy(p->headers);
    g_ptr_array_unref(p->secrets);
    g_free(p->base.name);
    g_free(p);
}

static const SbxProviderOps http_ops = {
    .call_async = http_call_async,
    .call_finish = http_call_finish,
    .free = http_free,
};

/* sbx_secret_lookup(), remembering the value to keep it out of error excerpts. */
static char *lookup_secret(const char *name, gpointer data, GError **error)
{
    HttpProvider *p = data;
    char *value = sbx_secret_lookup(name, NULL, error);

    if (value != NULL && value[0] != '\0') {
        g_ptr_array_add(p->secrets, g_strdup(value));
    }
    return value;
}

/* Fill the secrets of @ep's headers into @h (names replace earlier ones, case-insensitive). */
static gboolean add_headers(HttpProvider *p, Headers *h, const SbxHttpEndpoint *ep, GError **error)
{
    for (gsize i = 0; ep != NULL && i < ep->n_headers; i++) {
        char *value = sbx_http_expand_secrets(ep->header_values[i], lookup_secret, p, error);
        if (value == NULL) {
            g_prefix_error(error, "header %s: ", ep->header_names[i]);
            return FALSE;
        }
        for (guint j = 0; j < h->names->len; j++) {
            if (g_ascii_strcasecmp(h->names->pdata[j], ep->header_names[i]) == 0) {
                g_ptr_array_remove_index(h->names, j);
                g_ptr_array_remove_index(h->values, j);
                break;
            }
        }
        g_ptr_array_add(h->names, g_strdup(ep->header_names[i]));
        g_ptr_array_add(h->values, value);
    }
    return TRUE;
}

static const char *env2(const char *lower, const char *upper)
{
    const char *v = g_getenv(lower);
    v = v != NULL && v[0] != '\0' ? v : g_getenv(upper);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/*
 * Proxies from the environment only (http_proxy, https_proxy, no_proxy, or upper case): GLib's
 * default resolver may read the desktop's proxy settings through dconf, which writes under
 * $XDG_RUNTIME_DIR and assumes a desktop session that a host agent does not have.
 */
static GProxyResolver *env_proxy_resolver(void)
{
    const char *http = env2("http_proxy", "HTTP_PROXY");
    const char *https = env2("https_proxy", "HTTPS_PROXY");
    const char *no = env2("no_proxy", "NO_PROXY");
    g_auto(GStrv) ignore = g_strsplit(no != NULL ? no : "", ",", -1);

    for (char **h = ignore; *h != NULL; h++) {
        g_strstrip(*h);
    }
    GProxyResolver *r = g_simple_proxy_resolver_new(NULL, ignore);
    if (http != NULL) {
        g_simple_proxy_resolver_set_uri_proxy(G_SIMPLE_PROXY_RESOLVER(r), "http", http);
    }
    if (https != NULL) {
        g_simple_proxy_resolver_set_uri_proxy(G_SIMPLE_PROXY_RESOLVER(r), "https", https);
    }
    return r;
}

SbxProvider *sbx_http_provider_new(const SbxCatalogProvider *config, GError **error)
{
    HttpProvider *p = g_new0(HttpProvider, 1);

    p->base.ops = &http_ops;
    p->base.name = g_strdup(config->name);
    p->timeout_ms = config->timeout_ms;
    p->tools = g_hash_table_new(g_str_hash, g_str_equal);
    p->headers = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, headers_free);
    p->secrets = g_ptr_array_new_with_free_func(g_free);
    /* No I/O timeout of libsoup's own: the per-call timer covers the whole exchange. */
    g_autoptr(GProxyResolver) proxies = env_proxy_resolver();
    /*
     * libsoup's defaults (2 connections per host, 10 in all) would queue all but 2 of the
     * SBX_TOOL_CALLS_IN_FLIGHT_MAX calls an execution may make at once, and queued calls time
     * out while they wait.
     */
    p->session = soup_session_new_with_options(
        "user-agent", "sandbox-host-agent", "proxy-resolver", proxies, "max-conns-per-host",
        SBX_TOOL_CALLS_IN_FLIGHT_MAX, "max-conns", SBX_TOOL_CALLS_IN_FLIGHT_MAX, NULL);
    for (gsize i = 0; i < config->n_tools; i++) {
        const SbxCatalogTool *t = &config->tools[i];
        Headers *h = g_new0(Headers, 1);
        h->names = g_ptr_array_new_with_free_func(g_free);
        h->values = g_ptr_array_new_with_free_func(g_free);
        g_hash_table_insert(p->tools, t->name, t->http);
        g_hash_table_insert(p->headers, t->name, h);
        if (!add_headers(p, h, config->http, error) || !add_headers(p, h, t->http, error)) {
            g_prefix_error(error, "providers.%s.tools.%s: ", config->name, t->name);
            http_free(&p->base);
            return NULL;
        }
    }
    return &p->base;
}
