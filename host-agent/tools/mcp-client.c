/*
 * An MCP client connection (see mcp-client.h): JSON-RPC ids, pending requests, the server's
 * requests and notifications, timeouts and cancellation.
 */
#include "mcp-client.h"

#include <string.h>

#include "mcp-wire.h"
#include "protocol/json.h"
#include "protocol/message.h"
#include "tools-error.h"

/* JSON-RPC "method not found": the answer to server requests we do not implement. */
#define JSONRPC_METHOD_NOT_FOUND (-32601)

/* Longest server error message kept: it ends in a guest exception, keep it readable. */
#define SERVER_MESSAGE_MAX 2048

struct SbxMcpClient {
    char *name;
    SbxMcpTransport *transport;
    GHashTable *pending; /* &Pending.id -> Pending* */
    gint64 next_id;
    char *closed; /* why the connection is dead, or NULL */
    guint dropped;
};

typedef struct {
    SbxMcpClient *client;
    gint64 id;
    char *method;
    guint timeout_ms;
    SbxMcpReplyFunc fn;
    gpointer user_data;
    GSource *timer;
    GCancellable *cancellable;
    gulong cancel_id;
    GError *deferred; /* completed from an idle callback with this error */
    guint idle_id;
} Pending;

SbxMcpClient *sbx_mcp_client_new(const char *name)
{
    SbxMcpClient *c = g_new0(SbxMcpClient, 1);
    c->name = g_strdup(name);
    c->pending = g_hash_table_new(g_int64_hash, g_int64_equal);
    c->next_id = 1;
    return c;
}

void sbx_mcp_client_set_transport(SbxMcpClient *client, SbxMcpTransport *transport)
{
    client->transport = transport;
    transport->client = client;
}

guint sbx_mcp_client_pending(const SbxMcpClient *client)
{
    return g_hash_table_size(client->pending);
}

gboolean sbx_mcp_client_waits(const SbxMcpClient *client, gint64 id)
{
    const Pending *p = g_hash_table_lookup(client->pending, &id);
    return p != NULL && p->deferred == NULL;
}

guint sbx_mcp_client_dropped(const SbxMcpClient *client)
{
    return client->dropped;
}

/* ---- sending ----------------------------------------------------------------------------- */

static void send_json(SbxMcpClient *c, cJSON *msg, gint64 id)
{
    char *text = sbx_json_print(msg);
    if (text != NULL && c->closed == NULL && c->transport != NULL) {
        c->transport->ops->send(c->transport, text, id);
    }
    free(text);
}

static cJSON *new_message(void)
{
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
    return msg;
}

void sbx_mcp_client_notify(SbxMcpClient *client, const char *method, cJSON *params)
{
    cJSON *msg = new_message();
    cJSON_AddStringToObject(msg, "method", method);
    if (params != NULL) {
        cJSON_AddItemToObject(msg, "params", params);
    }
    send_json(client, msg, -1);
    cJSON_Delete(msg);
}

/* Tell the server we stopped waiting for @p (it may stop the work). */
static void send_cancelled(Pending *p, const char *reason)
{
    SbxMcpClient *c = p->client;

    if (strcmp(p->method, "initialize") == 0) { /* the spec forbids cancelling initialize */
        return;
    }
    cJSON *params = cJSON_CreateObject();
    cJSON_AddNumberToObject(params, "requestId", (double)p->id);
    cJSON_AddStringToObject(params, "reason", reason);
    sbx_mcp_client_notify(c, "notifications/cancelled", params);
    if (c->transport != NULL && c->transport->ops->abandon != NULL) {
        c->transport->ops->abandon(c->transport, p->id);
    }
}

void sbx_mcp_client_negotiated(SbxMcpClient *client, const char *version)
{
    if (client->transport != NULL && client->transport->ops->negotiated != NULL) {
        client->transport->ops->negotiated(client->transport, version);
    }
}

/* ---- completing -------------------------------------------------------------------------- */

static void pending_free(Pending *p)
{
    if (p->timer != NULL) {
        g_source_destroy(p->timer);
        g_source_unref(p->timer);
    }
    if (p->cancel_id != 0) {
        g_cancellable_disconnect(p->cancellable, p->cancel_id);
    }
    g_clear_handle_id(&p->idle_id, g_source_remove);
    g_clear_object(&p->cancellable);
    g_clear_error(&p->deferred);
    g_free(p->method);
    g_free(p);
}

/* Remove @p, call its callback with @result or @error, free it. */
static void complete(Pending *p, const cJSON *result, const GError *error)
{
    SbxMcpReplyFunc fn = p->fn;
    gpointer user_data = p->user_data;

    g_hash_table_remove(p->client->pending, &p->id);
    /* Free first: the callback may free the client (the last call of an execution). */
    GError *copy = error != NULL ? g_error_copy(error) : NULL;
    pending_free(p);
    fn(result, copy, user_data);
    g_clear_error(&copy);
}

static gboolean on_deferred(gpointer data)
{
    Pending *p = data;
    GError *error = g_steal_pointer(&p->deferred);

    p->idle_id = 0;
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
        send_cancelled(p, "cancelled by the host"); /* not from inside g_cancellable_cancel() */
    }
    complete(p, NULL, error);
    g_error_free(error);
    return G_SOURCE_REMOVE;
}

/* Complete @p with @error (taken) from a fresh stack, once. */
static void complete_later(Pending *p, GError *error)
{
    if (p->deferred != NULL) {
        g_error_free(error);
        return;
    }
    p->deferred = error;
    p->idle_id = g_idle_add(on_deferred, p);
}

static gboolean on_timeout(gpointer data)
{
    Pending *p = data;

    g_clear_pointer(&p->timer, g_source_unref);
    send_cancelled(p, "timeout");
    complete_later(p, g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                  "MCP server \"%s\": %s timed out after %u ms", p->client->name,
                                  p->method, p->timeout_ms));
    return G_SOURCE_REMOVE;
}

/* May run inside g_cancellable_cancel() or g_cancellable_connect(): defer everything. */
static void on_cancelled(GCancellable *cancellable, gpointer data)
{
    (void)cancellable;
    Pending *p = data;
    complete_later(p, g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled"));
}

void sbx_mcp_client_request(SbxMcpClient *client, const char *method, cJSON *params,
                            guint timeout_ms, GCancellable *cancellable, SbxMcpReplyFunc fn,
                            gpointer user_data)
{
    Pending *p = g_new0(Pending, 1);

    p->client = client;
    p->id = client->next_id++;
    p->method = g_strdup(method);
    p->timeout_ms = timeout_ms;
    p->fn = fn;
    p->user_data = user_data;
    g_hash_table_insert(client->pending, &p->id, p);
    if (client->closed != NULL) {
        cJSON_Delete(params);
        complete_later(p, g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL, "MCP server \"%s\": %s",
                                      client->name, client->closed));
        return;
    }
    cJSON *msg = new_message();
    cJSON_AddNumberToObject(msg, "id", (double)p->id);
    cJSON_AddStringToObject(msg, "method", method);
    if (params != NULL) {
        cJSON_AddItemToObject(msg, "params", params);
    }
    if (timeout_ms > 0) {
        p->timer = g_timeout_source_new(timeout_ms);
        g_source_set_callback(p->timer, on_timeout, p, NULL);
        g_source_attach(p->timer, g_main_context_get_thread_default());
    }
    if (cancellable != NULL) {
        p->cancellable = g_object_ref(cancellable);
        p->cancel_id = g_cancellable_connect(cancellable, G_CALLBACK(on_cancelled), p, NULL);
    }
    gint64 id = p->id;
    send_json(client, msg, id); /* may fail the request (closed): @p may be deferred now */
    cJSON_Delete(msg);
}

/* ---- receiving --------------------------------------------------------------------------- */

/*
 * The server asks us something: ping is answered; elicitation/create is declined (there is no
 * person to ask: a tool call comes from guest code, and the host's approvals are for our own
 * policy, not a server's forms), so a server that asks anyway goes on with its fallback; everything
 * else (sampling, roots, unknown methods) is "method not found". Never left unanswered: a server
 * waiting for the answer would hold the call until its timeout.
 */
static void answer_request(SbxMcpClient *c, const SbxMcpMessage *m)
{
    cJSON *msg = new_message();

    cJSON_AddItemToObject(msg, "id", cJSON_Duplicate(m->id, TRUE));
    if (strcmp(m->method, "ping") == 0) {
        cJSON_AddItemToObject(msg, "result", cJSON_CreateObject());
    } else if (strcmp(m->method, "elicitation/create") == 0) {
        cJSON *result = cJSON_AddObjectToObject(msg, "result");
        cJSON_AddStringToObject(result, "action", "decline");
    } else {
        cJSON *err = cJSON_AddObjectToObject(msg, "error");
        cJSON_AddNumberToObject(err, "code", JSONRPC_METHOD_NOT_FOUND);
        cJSON_AddStringToObject(err, "message", "method not found");
    }
    send_json(c, msg, -1);
    cJSON_Delete(msg);
}

static void answer_pending(SbxMcpClient *c, const SbxMcpMessage *m)
{
    Pending *p = m->id_is_int ? g_hash_table_lookup(c->pending, &m->id_int) : NULL;

    if (p == NULL || p->deferred != NULL) { /* an id we never sent, or gave up on */
        c->dropped++;
        return;
    }
    if (m->kind == SBX_MCP_MSG_RESULT) {
        complete(p, m->result, NULL);
        return;
    }
    g_autoptr(GError) error = g_error_new(
        SBX_TOOL_ERROR, SBX_ERR_TOOL, "MCP server \"%s\": %s failed: %.*s (%" G_GINT64_FORMAT ")",
        c->name, p->method, SERVER_MESSAGE_MAX, m->error_message, m->error_code);
    complete(p, NULL, error);
}

void sbx_mcp_client_receive(SbxMcpClient *client, const char *text, gsize len)
{
    g_autoptr(SbxMcpMessage) m = sbx_mcp_message_parse(text, len, NULL);

    if (m == NULL || client->closed != NULL) {
        client->dropped++;
        return;
    }
    switch (m->kind) {
    case SBX_MCP_MSG_REQUEST:
        answer_request(client, m);
        break;
    case SBX_MCP_MSG_NOTIFICATION:
        /* Logging, progress, list_changed: nothing to do (the namespace is fixed per execution). */
        break;
    case SBX_MCP_MSG_RESULT:
    case SBX_MCP_MSG_ERROR:
        answer_pending(client, m);
        break;
    }
}

void sbx_mcp_client_fail_request(SbxMcpClient *client, gint64 id, const char *why)
{
    Pending *p = g_hash_table_lookup(client->pending, &id);

    if (p != NULL) {
        complete_later(p, g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL, "MCP server \"%s\": %s: %s",
                                      client->name, p->method, why));
    }
}

void sbx_mcp_client_closed(SbxMcpClient *client, const char *why)
{
    GHashTableIter it;
    gpointer value;

    if (client->closed != NULL) {
        return;
    }
    client->closed = g_strdup(why);
    g_hash_table_iter_init(&it, client->pending);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        Pending *p = value;
        complete_later(p, g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL, "MCP server \"%s\": %s",
                                      client->name, why));
    }
}

void sbx_mcp_client_free(SbxMcpClient *client)
{
    GHashTableIter it;
    gpointer value;

    if (client == NULL) {
        return;
    }
    /* Nothing may be sent from here on: the transport goes next. */
    g_free(client->closed);
    client->closed = g_strdup("closed");
    g_autoptr(GError) error = g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled");
    while (g_hash_table_size(client->pending) > 0) {
        g_hash_table_iter_init(&it, client->pending);
        g_hash_table_iter_next(&it, NULL, &value);
        complete(value, NULL, error);
    }
    if (client->transport != NULL) {
        client->transport->ops->free(client->transport);
    }
    g_hash_table_destroy(client->pending);
    g_free(client->closed);
    g_free(client->name);
    g_free(client);
}
