/*
 * The executions of the HTTP API (http-private.h, docs/api.md): a request checked into a job
 * of the server, its state and output as it runs, its events kept for later streams and sent
 * to the streams and waiters attached, and its JSON object. Finished executions stay in memory
 * (the last SBX_HTTP_FINISHED_KEPT, within SBX_HTTP_FINISHED_BYTES_MAX).
 */
#include "server/http-private.h"

#include <string.h>

#include "base/json-builder.h"
#include "exec/report.h"
#include "server/http-object.h"
#include "server/http-request.h"
#include "server/sessions.h"
#include "tools.h"

/* One event, kept for streams that start later. */
typedef struct {
    char *name;
    char *data; /* JSON text */
} Event;

/* A client following the events (GET .../events), or waiting for the end (?wait=). */
typedef struct {
    HttpExec *exec;
    SoupServerMessage *msg;
    gboolean ndjson; /* else server-sent events */
    gboolean waiter; /* ?wait=: answered with the object at the end or the timeout */
    guint status;    /* a waiter's: 201 for a creation, else 200 */
    gsize queued;    /* bytes appended and not yet written */
    guint timeout;   /* a waiter's */
    gulong finished_handler;
    gulong wrote_handler;
} Follower;

struct HttpExec {
    HttpFront *front;
    char *id;
    char *tenant_id;
    char *origin; /* the approvals' origin of its calls: "http execution <id>" */
    SbxLanguage language;
    char *catalog;
    char *session_id; /* the session it runs in, or NULL */
    guint timeout_ms;
    guint64 output_limit;
    gint64 created_us; /* wall clock */
    gint64 started_us;
    gint64 finished_us;
    SbxServerJob *job; /* until done */
    gboolean done;
    GByteArray *out[SBX_STREAM__COUNT]; /* what it wrote (bounded by its output limit) */
    char *final_json;                   /* the object, once done */
    char *summary_json;                 /* and its summary for listings */
    char *status;                       /* once done */
    GPtrArray *events;                  /* Event* */
    gsize events_bytes;
    gboolean events_cut; /* past SBX_HTTP_EVENTS_KEPT_MAX: later events streamed live only */
    gsize held_bytes;    /* once done: its objects and events (front->finished_bytes) */
    GList *followers;    /* Follower* */
    GHashTable *approvals_seen;
    const SbxHttpExecWatch *watch; /* another front end's (the MCP transport's), or NULL */
    gpointer watch_data;
};

/* ---- the object --------------------------------------------------------------------------- */

/* What every view of @e shows while it runs (the outcome left out). */
static SbxHttpObject base_object(HttpExec *e, const char *status)
{
    SbxHttpObject o = {
        .id = e->id,
        .status = status,
        .language = sbx_language_name(e->language),
        .catalog = e->catalog,
        .session = e->session_id,
        .created_us = e->created_us,
        .started_us = e->started_us,
        .finished_us = e->finished_us,
        .timeout_ms = e->timeout_ms,
        .output_limit = e->output_limit,
    };

    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        o.out[i] = (const char *)e->out[i]->data;
        o.out_len[i] = e->out[i]->len;
    }
    return o;
}

static const char *live_status(HttpExec *e)
{
    return e->done ? e->status : sbx_server_job_queued(e->job) ? "queued" : "running";
}

/* The object (@full) or the summary of a listing. */
static char *object_json(HttpExec *e, gboolean full)
{
    if (e->done) {
        return g_strdup(full ? e->final_json : e->summary_json);
    }
    SbxHttpObject o = base_object(e, live_status(e));
    return sbx_http_object_json(&o, full);
}

/* The object and summary at the end, from the execution's outcome (the exec is freed after
 * done). */
static void end_objects(HttpExec *e, SbxExec *exec)
{
    const SbxRunResult *r = sbx_exec_result(exec);
    SbxHttpObject o = base_object(e, e->status);
    g_autofree char *error = NULL;

    if (r == NULL) {
        SbxError fail = {.code = SBX_ERR_INTERNAL, .message = (char *)sbx_exec_failure(exec)};
        error = sbx_report_error_json(&fail);
    } else if (r->has_error) {
        error = sbx_report_error_json(&r->error);
    }
    g_autofree char *calls =
        sbx_http_object_calls_live(r, sbx_tools_namespace(sbx_exec_tools(exec)));
    g_autofree char *files = sbx_exec_files_json_of(exec, TRUE);
    o.ended = TRUE;
    o.has_exit_code = r != NULL && r->exit_code >= 0;
    o.exit_code = r != NULL ? r->exit_code : -1;
    o.result_json = r != NULL ? r->result_json : NULL;
    o.error_json = error;
    o.output_truncated = r != NULL && r->output_truncated;
    o.has_duration = r != NULL;
    o.duration_ms = r != NULL ? r->duration_ms : 0;
    o.tool_calls_json = calls;
    o.files_json = files;
    e->final_json = sbx_http_object_json(&o, TRUE);
    e->summary_json = sbx_http_object_json(&o, FALSE);
}

/* ---- followers ---------------------------------------------------------------------------- */

static void follower_free(Follower *f)
{
    g_clear_handle_id(&f->timeout, g_source_remove);
    g_signal_handler_disconnect(f->msg, f->finished_handler);
    if (f->wrote_handler != 0) {
        g_signal_handler_disconnect(f->msg, f->wrote_handler);
    }
    g_object_unref(f->msg);
    g_free(f);
}

static void follower_drop(Follower *f)
{
    f->exec->followers = g_list_remove(f->exec->followers, f);
    follower_free(f);
}

/* The client went away, or its answer is complete. */
static void on_follower_finished(SoupServerMessage *msg, gpointer data)
{
    (void)msg;
    follower_drop(data);
}

static void on_wrote(SoupServerMessage *msg, gsize chunk, gpointer data)
{
    Follower *f = data;
    (void)msg;

    f->queued -= MIN(chunk, f->queued);
}

/* @f's answer ends: a waiter gets the object, a stream its end. @f is dropped by "finished". */
static void follower_end(Follower *f)
{
    SoupServerMessage *msg = f->msg;

    if (f->waiter) {
        sbx_http_reply_json(msg, f->status, object_json(f->exec, TRUE));
    } else {
        soup_message_body_complete(soup_server_message_get_response_body(msg));
    }
    f->exec->followers = g_list_remove(f->exec->followers, f);
    soup_server_message_unpause(msg);
    follower_free(f);
}

static void stream_append(Follower *f, const Event *ev)
{
    g_autofree char *text =
        f->ndjson ? g_strdup_printf("{\"event\":\"%s\",\"data\":%s}\n", ev->name, ev->data)
                  : g_strdup_printf("event: %s\ndata: %s\n\n", ev->name, ev->data);
    gsize len = strlen(text);

    if (f->queued + len > SBX_HTTP_STREAM_QUEUE_MAX) {
        follower_end(f); /* a client that does not read: its stream ends here */
        return;
    }
    f->queued += len;
    soup_message_body_append(soup_server_message_get_response_body(f->msg), SOUP_MEMORY_TAKE,
                             g_steal_pointer(&text), len);
    soup_server_message_unpause(f->msg);
}

static Follower *follow(HttpExec *e, SoupServerMessage *msg)
{
    Follower *f = g_new0(Follower, 1);

    f->exec = e;
    f->msg = g_object_ref(msg);
    f->finished_handler = g_signal_connect(msg, "finished", G_CALLBACK(on_follower_finished), f);
    e->followers = g_list_prepend(e->followers, f);
    soup_server_message_pause(msg);
    return f;
}

/* ---- events ------------------------------------------------------------------------------- */

static void event_free(Event *ev)
{
    g_free(ev->name);
    g_free(ev->data);
    g_free(ev);
}

/* Keep event @name with @data (JSON, taken) and send it to the streams. */
static void emit(HttpExec *e, const char *name, char *data)
{
    Event *ev = g_new0(Event, 1);

    ev->name = g_strdup(name);
    ev->data = data;
    for (GList *l = e->followers, *next; l != NULL; l = next) {
        next = l->next;
        Follower *f = l->data;
        if (!f->waiter) {
            stream_append(f, ev);
        }
    }
    gsize size = strlen(data) + strlen(name) + 32;
    if (!e->events_cut && e->events_bytes + size <= SBX_HTTP_EVENTS_KEPT_MAX) {
        e->events_bytes += size;
        g_ptr_array_add(e->events, ev);
        return;
    }
    e->events_cut = TRUE;
    event_free(ev);
}

static void on_started(gpointer data)
{
    HttpExec *e = data;

    e->started_us = g_get_real_time();
}

static void on_output(gpointer data, SbxStream stream, const guint8 *bytes, gsize len)
{
    HttpExec *e = data;
    SbxJsonb b;

    g_byte_array_append(e->out[stream], bytes, len); /* the session caps it at output_limit */
    if (e->watch != NULL && e->watch->output != NULL) {
        e->watch->output(e->watch_data, stream, bytes, len);
    }
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "stream", sbx_stream_name(stream));
    sbx_jsonb_key(&b, "data");
    sbx_jsonb_string_len(&b, (const char *)bytes, len);
    sbx_jsonb_end_object(&b);
    emit(e, "output", sbx_jsonb_finish(&b));
}

static void on_tool_call(gpointer data, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json)
{
    HttpExec *e = data;
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_uint(&b, "call_id", call_id);
    sbx_jsonb_member_string(&b, "provider", provider);
    sbx_jsonb_member_string(&b, "tool", tool);
    sbx_jsonb_member_raw(&b, "input", input_json); /* checked compact JSON */
    sbx_jsonb_end_object(&b);
    emit(e, "tool_call", sbx_jsonb_finish(&b));
}

static void on_tool_result(gpointer data, guint32 call_id, gboolean ok, guint64 duration_ms)
{
    HttpExec *e = data;

    emit(e, "tool_result",
         g_strdup_printf("{\"call_id\":%u,\"ok\":%s,\"duration_ms\":%" G_GUINT64_FORMAT "}",
                         call_id, ok ? "true" : "false", duration_ms));
}

void sbx_http_exec_approval(HttpExec *e, const char *json)
{
    emit(e, "approval", g_strdup(json));
}

static void forget_oldest(HttpFront *front)
{
    while (g_queue_get_length(&front->finished) > SBX_HTTP_FINISHED_KEPT ||
           front->finished_bytes > SBX_HTTP_FINISHED_BYTES_MAX) {
        HttpExec *old = g_queue_pop_head(&front->finished);
        front->finished_bytes -= old->held_bytes;
        g_hash_table_remove(front->execs, old->id);
        /* its followers, if any, hold no pointer that outlives it */
        while (old->followers != NULL) {
            follower_end(old->followers->data);
        }
        sbx_http_exec_free_one(old);
    }
}

static void on_done(gpointer data, SbxExec *exec)
{
    HttpExec *e = data;
    const SbxRunResult *r = sbx_exec_result(exec);

    e->done = TRUE;
    e->job = NULL; /* freed by the server after this */
    e->finished_us = g_get_real_time();
    e->status = g_strdup(sbx_status_name(r != NULL ? r->status : sbx_exec_failure_status(exec)));
    end_objects(e, exec);
    if (e->watch != NULL) {
        const SbxHttpExecWatch *w = g_steal_pointer(&e->watch);
        w->done(e->watch_data, e->final_json);
    }
    emit(e, "done", g_strdup(e->final_json));
    while (e->followers != NULL) {
        follower_end(e->followers->data);
    }
    for (int i = 0; i < SBX_STREAM__COUNT; i++) { /* the object holds the output from here on */
        g_byte_array_unref(e->out[i]);
        e->out[i] = g_byte_array_new();
    }
    e->held_bytes = e->events_bytes + strlen(e->final_json) + strlen(e->summary_json);
    e->front->finished_bytes += e->held_bytes;
    g_queue_push_tail(&e->front->finished, e);
    forget_oldest(e->front);
}

static const SbxExecSink sink = {
    .started = on_started,
    .output = on_output,
    .tool_call = on_tool_call,
    .tool_result = on_tool_result,
    .done = on_done,
};

/* ---- the request -------------------------------------------------------------------------- */

/* The body of a creation, checked; FALSE when answered (400, 415). */
static gboolean read_create(SoupServerMessage *msg, const SbxTenant *t, SbxHttpCreate *req)
{
    SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
    const char *type = soup_message_headers_get_content_type(h, NULL);
    SoupMessageBody *body = soup_server_message_get_request_body(msg);
    SbxHttpLimits limits = {
        .max_timeout_ms = t->quotas.max_timeout_ms,
        .max_output_bytes = t->quotas.max_output_bytes,
        .catalogs = (const char *const *)t->catalogs,
    };

    if (type == NULL || g_ascii_strcasecmp(type, "application/json") != 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                             "the body must be application/json");
        return FALSE;
    }
    g_autofree char *why =
        sbx_http_create_decode(body->data != NULL ? body->data : "", body->length, &limits, req);
    if (why != NULL) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request", why);
        return FALSE;
    }
    return TRUE;
}

SbxTools *sbx_http_load_tools(HttpFront *front, const char *catalog, GError **error)
{
    g_autoptr(GError) local = NULL;

    if (catalog == NULL) {
        return sbx_tools_new(sbx_catalog_new_empty(), NULL);
    }
    g_autofree char *file = g_strdup_printf("%s.json", catalog);
    g_autofree char *path =
        front->catalogs_dir != NULL ? g_build_filename(front->catalogs_dir, file, NULL) : NULL;
    SbxTools *tools =
        path != NULL && sbx_tenant_name_valid(catalog) ? sbx_tools_load(path, &local) : NULL;
    if (tools == NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_FAILED, "catalog %s cannot be used: %s", catalog,
                    local != NULL ? local->message : "no catalogs on this server");
    }
    return tools;
}

char *sbx_http_random_id(const char *prefix, gsize n_bytes)
{
    GString *id = g_string_new(prefix);

    for (gsize i = 0; i < n_bytes; i++) {
        g_string_append_printf(id, "%02x", (guint)g_random_int_range(0, 256));
    }
    return g_string_free(id, FALSE);
}

gboolean sbx_http_query_only(SoupServerMessage *msg, GHashTable *query, const char *const *allowed)
{
    GHashTableIter it;
    gpointer key;

    if (query == NULL) {
        return TRUE;
    }
    g_hash_table_iter_init(&it, query);
    while (g_hash_table_iter_next(&it, &key, NULL)) {
        if (!g_strv_contains(allowed, key)) {
            g_autofree char *why = g_strdup_printf("unknown parameter \"%.64s\"", (char *)key);
            sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request", why);
            return FALSE;
        }
    }
    return TRUE;
}

/* The `?wait=` seconds: -1 when absent; FALSE when answered (400). */
static gboolean get_wait(SoupServerMessage *msg, GHashTable *query, gint *ret)
{
    const char *v = query != NULL ? g_hash_table_lookup(query, "wait") : NULL;
    guint64 n;

    *ret = -1;
    if (v == NULL) {
        return TRUE;
    }
    if (!g_ascii_string_to_unsigned(v, 10, 0, SBX_HTTP_WAIT_MAX_S, &n, NULL)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "wait: seconds from 0 to 300");
        return FALSE;
    }
    *ret = (gint)n;
    return TRUE;
}

static gboolean wait_over(gpointer data)
{
    Follower *f = data;

    f->timeout = 0;
    follower_end(f);
    return G_SOURCE_REMOVE;
}

/* Answer @msg with @e's object with @status now, or when it ends within @wait_s seconds. */
static void reply_object(HttpExec *e, SoupServerMessage *msg, guint status, gint wait_s)
{
    if (e->done || wait_s <= 0) {
        sbx_http_reply_json(msg, status, object_json(e, TRUE));
        return;
    }
    Follower *f = follow(e, msg);
    f->waiter = TRUE;
    f->status = status;
    f->timeout = g_timeout_add_seconds(wait_s, wait_over, f);
}

static HttpExec *exec_new(HttpFront *front, const SbxTenant *tenant, const SbxHttpCreate *req)
{
    HttpExec *e = g_new0(HttpExec, 1);

    e->front = front;
    e->id = sbx_http_random_id("ex_", 12);
    e->tenant_id = g_strdup(tenant->id);
    e->origin = g_strdup_printf("http execution %s", e->id);
    e->language = req->language;
    e->catalog = g_strdup(req->catalog);
    e->timeout_ms = req->timeout_ms;
    e->output_limit = req->output_limit;
    /* In ms, as its record keeps it: a listing orders both alike (http-stored.c). */
    e->created_us = g_get_real_time() / 1000 * 1000;
    e->events = g_ptr_array_new_with_free_func((GDestroyNotify)event_free);
    e->approvals_seen = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        e->out[i] = g_byte_array_new();
    }
    return e;
}

HttpExec *sbx_http_exec_start(HttpFront *front, const SbxTenant *tenant, const SbxHttpCreate *req,
                              SbxServerSession *session, const char *front_end, GError **error)
{
    SbxTools *tools = sbx_http_load_tools(front, req->catalog, error);

    if (tools == NULL) {
        return NULL;
    }
    HttpExec *e = exec_new(front, tenant, req);
    e->session_id = session != NULL ? g_strdup(sbx_server_session_id(session)) : NULL;
    SbxServerRequest sreq = {
        .exec = {.id = e->id,
                 .language = req->language,
                 .code = req->code,
                 .entry = req->entry,
                 .args_json = req->args_json,
                 .kwargs_json = req->kwargs_json,
                 .timeout_ms = req->timeout_ms,
                 .output_limit = req->output_limit,
                 .files = req->files,
                 .n_files = req->n_files,
                 .with_files = req->with_files},
        .front_end = front_end,
        .tenant_id = tenant->id,
        .origin = e->origin,
        .catalog = req->catalog,
        .created_at_ms = e->created_us / 1000,
        .session = session,
    };
    e->job = sbx_server_submit(front->srv, &sreq, tools, &sink, e, error);
    if (e->job == NULL) {
        sbx_http_exec_free_one(e);
        return NULL;
    }
    g_hash_table_insert(front->execs, e->id, e);
    sbx_http_exec_note_start(front, tenant->id);
    return e;
}

void sbx_http_exec_watch(HttpExec *e, const SbxHttpExecWatch *watch, gpointer data)
{
    e->watch = e->done ? NULL : watch;
    e->watch_data = data;
}

void sbx_http_exec_cancel(HttpExec *e, const char *why)
{
    if (!e->done) {
        sbx_server_job_abort(e->job, SBX_STATUS_CANCELLED, why);
    }
}

void sbx_http_exec_create(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                          GHashTable *query, SbxServerSession *session)
{
    g_autoptr(GError) error = NULL;
    g_auto(SbxHttpCreate) req = {0};
    gint wait_s;

    static const char *const with_wait[] = {"wait", NULL};

    if (!sbx_http_query_only(msg, query, with_wait) || !get_wait(msg, query, &wait_s) ||
        !read_create(msg, tenant, &req)) {
        return;
    }
    if (session != NULL && !sbx_server_session_can_run(session, &error)) {
        sbx_http_reply_error(msg, SOUP_STATUS_CONFLICT, "conflict", error->message);
        return;
    }
    HttpExec *e = sbx_http_exec_start(front, tenant, &req, session, "http", &error);
    if (e == NULL) {
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable", error->message);
        return;
    }
    g_autofree char *location = g_strdup_printf("/v1/executions/%s", e->id);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Location",
                                 location);
    reply_object(e, msg, SOUP_STATUS_CREATED, wait_s);
}

/* ---- fetch, cancel, events ---------------------------------------------------------------- */

HttpExec *sbx_http_exec_find(HttpFront *front, const char *tenant_id, const char *id)
{
    HttpExec *e = g_hash_table_lookup(front->execs, id);

    return e != NULL && strcmp(e->tenant_id, tenant_id) == 0 ? e : NULL;
}

const char *sbx_http_exec_of_origin(const char *origin)
{
    return origin != NULL && g_str_has_prefix(origin, "http execution ")
               ? origin + strlen("http execution ")
               : NULL;
}

static void cancel(HttpExec *e, SoupServerMessage *msg)
{
    if (e->done) {
        sbx_http_reply_error(msg, SOUP_STATUS_CONFLICT, "conflict", "the execution has ended");
        return;
    }
    sbx_http_exec_cancel(e, "cancelled by the client");
    sbx_http_reply_json(msg, SOUP_STATUS_ACCEPTED, object_json(e, TRUE));
}

/* GET .../events: what was kept, then live, in the format the client accepts. */
static void events(HttpExec *e, SoupServerMessage *msg)
{
    SoupMessageHeaders *rh = soup_server_message_get_response_headers(msg);
    const char *accept =
        soup_message_headers_get_one(soup_server_message_get_request_headers(msg), "Accept");
    gboolean ndjson = accept != NULL && strstr(accept, "application/x-ndjson") != NULL;

    soup_server_message_set_status(msg, SOUP_STATUS_OK, NULL);
    soup_message_headers_set_content_type(rh, ndjson ? "application/x-ndjson" : "text/event-stream",
                                          NULL);
    soup_message_headers_replace(rh, "Cache-Control", "no-store");
    soup_message_headers_set_encoding(rh, SOUP_ENCODING_CHUNKED);
    Follower *f = follow(e, msg);
    f->ndjson = ndjson;
    f->wrote_handler = g_signal_connect(msg, "wrote-body-data", G_CALLBACK(on_wrote), f);
    for (guint i = 0; i < e->events->len && g_list_find(e->followers, f) != NULL; i++) {
        stream_append(f, g_ptr_array_index(e->events, i));
    }
    if (g_list_find(e->followers, f) != NULL && e->done) {
        follower_end(f);
    }
}

void sbx_http_exec_route(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                         const char *id, const char *rest, GHashTable *query)
{
    static const char *const with_wait[] = {"wait", NULL}, *const none[] = {NULL};
    gboolean is_cancel = strcmp(rest, "/cancel") == 0, is_object = strcmp(rest, "") == 0;
    const char *method = soup_server_message_get_method(msg);
    gint wait_s = -1;

    if (strcmp(rest, "/replay") == 0) {
        sbx_http_is(msg, "POST") ? sbx_http_replay(front, msg, tenant, id, query)
                                 : sbx_http_reply_method(msg, "POST");
        return;
    }
    /* The path, the method, then the parameters, and only then whether it exists: the same
     * request gets the same error for any id. */
    if (!is_object && !is_cancel && strcmp(rest, "/events") != 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such path");
        return;
    }
    if (strcmp(method, is_cancel ? "POST" : "GET") != 0) {
        soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                     is_cancel ? "POST" : "GET");
        sbx_http_reply_error(msg, SOUP_STATUS_METHOD_NOT_ALLOWED, "method_not_allowed",
                             "this path does not take that method");
        return;
    }
    if (!sbx_http_query_only(msg, query, is_object ? with_wait : none) ||
        (is_object && !get_wait(msg, query, &wait_s))) {
        return;
    }
    HttpExec *e = sbx_http_exec_find(front, tenant->id, id);
    if (e == NULL) {
        if (!sbx_http_stored_route(front, msg, tenant, id, rest)) {
            sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such execution");
        }
    } else if (is_cancel) {
        cancel(e, msg);
    } else if (!is_object) {
        events(e, msg);
    } else {
        reply_object(e, msg, SOUP_STATUS_OK, wait_s);
    }
}

/* ---- listing ------------------------------------------------------------------------------ */

/* Newest first; ties by id. */
static gint newest_first(gconstpointer a, gconstpointer b)
{
    const SbxHttpListItem *x = *(SbxHttpListItem *const *)a, *y = *(SbxHttpListItem *const *)b;

    if (x->created_us != y->created_us) {
        return x->created_us > y->created_us ? -1 : 1;
    }
    return -strcmp(x->id, y->id);
}

/* An RFC 3339 time query member into unix us; FALSE if present and not one. */
static gboolean get_time(GHashTable *query, const char *name, gint64 *ret)
{
    const char *v = query != NULL ? g_hash_table_lookup(query, name) : NULL;

    if (v == NULL) {
        return TRUE;
    }
    g_autoptr(GDateTime) t = g_date_time_new_from_iso8601(v, NULL);
    if (t == NULL) {
        return FALSE;
    }
    *ret = g_date_time_to_unix(t) * G_USEC_PER_SEC + g_date_time_get_microsecond(t);
    return TRUE;
}

/* The cursor "<created_us>.<id>" of the last execution of a page. */
static gboolean get_cursor(GHashTable *query, gint64 *ret_us, const char **ret_id)
{
    const char *v = query != NULL ? g_hash_table_lookup(query, "cursor") : NULL;
    char *end = NULL;

    if (v == NULL) {
        return TRUE;
    }
    *ret_us = g_ascii_strtoll(v, &end, 10);
    if (end == v || *end != '.' || *ret_us <= 0 || !sbx_id_valid(end + 1)) {
        return FALSE;
    }
    *ret_id = end + 1;
    return TRUE;
}

/* A status of the API (openapi.json's Status). */
static gboolean status_known(const char *status)
{
    static const char *const known[] = {"queued",  "running",      "ok",        "error",
                                        "timeout", "memory_limit", "cancelled", "terminated",
                                        "crash",   "interrupted",  NULL};

    return g_strv_contains(known, status);
}

/* The exact bounds of a page (unix us; 0: none), which the records' filter rounds to ms. */
typedef struct {
    gint64 after_us;
    gint64 before_us;
    gint64 cursor_us;
} Page;

/* The filter of a listing, checked; FALSE when answered (400). */
static gboolean get_filter(SoupServerMessage *msg, GHashTable *query, SbxRecordFilter *f,
                           Page *page)
{
    static const char *const allowed[] = {
        "limit", "status", "created_after", "created_before", "cursor", "session", NULL};
    const char *limit_text = query != NULL ? g_hash_table_lookup(query, "limit") : NULL;
    guint64 limit = SBX_HTTP_LIST_DEFAULT;

    if (!sbx_http_query_only(msg, query, allowed)) {
        return FALSE;
    }
    f->status = query != NULL ? g_hash_table_lookup(query, "status") : NULL;
    f->session_id = query != NULL ? g_hash_table_lookup(query, "session") : NULL;
    if ((limit_text != NULL &&
         !g_ascii_string_to_unsigned(limit_text, 10, 1, SBX_HTTP_LIST_MAX, &limit, NULL)) ||
        (f->status != NULL && !status_known(f->status)) ||
        !get_time(query, "created_after", &page->after_us) ||
        !get_time(query, "created_before", &page->before_us) ||
        (f->session_id != NULL && !sbx_id_valid(f->session_id)) ||
        !get_cursor(query, &page->cursor_us, &f->cursor_id)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "limit (1..100), status (as an execution's), created_after and "
                             "created_before (RFC 3339), cursor (from next_cursor), session (an "
                             "id)");
        return FALSE;
    }
    f->limit = (guint)limit;
    /* Records keep ms: the bounds (exclusive) rounded outwards find at least what the exact
     * ones do; in_page() filters every item by the exact ones. */
    f->created_after_ms = page->after_us / 1000;
    f->created_before_ms = (page->before_us + 999) / 1000;
    f->cursor_created_ms = (page->cursor_us + 999) / 1000;
    return TRUE;
}

/* Whether @item is within @page's exact bounds (after @cursor_id, if any). */
static gboolean in_page(const SbxHttpListItem *item, const Page *page, const char *cursor_id)
{
    if ((page->after_us != 0 && item->created_us <= page->after_us) ||
        (page->before_us != 0 && item->created_us >= page->before_us)) {
        return FALSE;
    }
    return cursor_id == NULL || item->created_us < page->cursor_us ||
           (item->created_us == page->cursor_us && strcmp(item->id, cursor_id) < 0);
}

void sbx_http_exec_list(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                        GHashTable *query)
{
    SbxRecordFilter f = {.tenant_id = tenant->id};
    Page page = {0};
    g_autoptr(GPtrArray) all =
        g_ptr_array_new_with_free_func((GDestroyNotify)sbx_http_list_item_free);
    g_autoptr(GError) error = NULL;
    guint live = 0;
    SbxJsonb b;

    if (!get_filter(msg, query, &f, &page)) {
        return;
    }
    /* What is in memory, as it stands now. */
    GHashTableIter it;
    gpointer value;
    g_hash_table_iter_init(&it, front->execs);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        HttpExec *e = value;
        if (strcmp(e->tenant_id, tenant->id) != 0) {
            continue;
        }
        live += !e->done;
        if ((f.status != NULL && strcmp(f.status, live_status(e)) != 0) ||
            (f.session_id != NULL && g_strcmp0(f.session_id, e->session_id) != 0)) {
            continue;
        }
        SbxHttpListItem probe = {.created_us = e->created_us, .id = e->id};
        if (!in_page(&probe, &page, f.cursor_id)) {
            continue;
        }
        SbxHttpListItem *item = g_new0(SbxHttpListItem, 1);
        item->created_us = e->created_us;
        item->id = g_strdup(e->id);
        item->json = object_json(e, FALSE); /* only for those on the page's side of its bounds */
        g_ptr_array_add(all, item);
    }
    /*
     * Then the records not in memory. A record of one in memory may match the filter when the
     * one in memory does not (a status changed since): those are skipped, so ask for as many
     * more as there are live ones, and the page is still whole.
     */
    SbxRecordFilter stored = f;
    stored.limit = MIN(f.limit + 1 + live, SBX_RECORDS_LIST_MAX);
    if (!sbx_http_stored_page(front, &stored, all, &error)) {
        g_warning("http: list executions: %s", error->message);
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable",
                             "the records cannot be read now");
        return;
    }
    for (guint i = all->len; i-- > 0;) {
        if (!in_page(all->pdata[i], &page, f.cursor_id)) {
            g_ptr_array_remove_index_fast(all, i);
        }
    }
    g_ptr_array_sort(all, newest_first);
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "executions");
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; i < all->len && i < f.limit; i++) {
        sbx_jsonb_raw(&b, ((SbxHttpListItem *)all->pdata[i])->json);
    }
    sbx_jsonb_end_array(&b);
    g_autofree char *next = NULL;
    if (all->len > f.limit) {
        SbxHttpListItem *last = all->pdata[f.limit - 1];
        next = g_strdup_printf("%" G_GINT64_FORMAT ".%s", last->created_us, last->id);
    }
    sbx_jsonb_member_string(&b, "next_cursor", next);
    sbx_jsonb_end_object(&b);
    sbx_http_reply_json(msg, SOUP_STATUS_OK, sbx_jsonb_finish(&b));
}

/* ---- quotas, the end ---------------------------------------------------------------------- */

/* @tenant_id's starts of the last minute, the older ones dropped. */
static GQueue *recent(HttpFront *front, const char *tenant_id)
{
    GQueue *q = g_hash_table_lookup(front->recent_starts, tenant_id);
    gint64 since = g_get_monotonic_time() - 60 * G_USEC_PER_SEC;

    if (q == NULL) {
        q = g_queue_new();
        g_hash_table_insert(front->recent_starts, g_strdup(tenant_id), q);
    }
    while (!g_queue_is_empty(q) && *(gint64 *)g_queue_peek_head(q) < since) {
        g_free(g_queue_pop_head(q));
    }
    return q;
}

guint sbx_http_exec_started_last_minute(HttpFront *front, const char *tenant_id,
                                        gint64 *ret_oldest_us)
{
    GQueue *q = recent(front, tenant_id);

    *ret_oldest_us = g_queue_is_empty(q) ? 0 : *(gint64 *)g_queue_peek_head(q);
    return g_queue_get_length(q);
}

void sbx_http_exec_note_start(HttpFront *front, const char *tenant_id)
{
    gint64 *now = g_new(gint64, 1);

    *now = g_get_monotonic_time();
    g_queue_push_tail(recent(front, tenant_id), now);
}

void sbx_http_exec_end_streams(HttpFront *front)
{
    GHashTableIter it;
    gpointer value;

    g_hash_table_iter_init(&it, front->execs);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        HttpExec *e = value;
        while (e->followers != NULL) {
            follower_end(e->followers->data);
        }
    }
}

void sbx_http_exec_free_one(HttpExec *e)
{
    if (e->job != NULL) {
        sbx_server_job_detach(e->job); /* the job ends on its own, nothing reaches us */
        sbx_server_job_abort(e->job, SBX_STATUS_TERMINATED, "the server is shutting down");
    }
    while (e->followers != NULL) {
        follower_drop(e->followers->data);
    }
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        g_byte_array_unref(e->out[i]);
    }
    g_ptr_array_unref(e->events);
    g_hash_table_destroy(e->approvals_seen);
    g_free(e->id);
    g_free(e->tenant_id);
    g_free(e->origin);
    g_free(e->catalog);
    g_free(e->session_id);
    g_free(e->final_json);
    g_free(e->summary_json);
    g_free(e->status);
    g_free(e);
}

void sbx_http_exec_free_all(HttpFront *front)
{
    g_autoptr(GList) all = g_hash_table_get_values(front->execs);

    g_hash_table_remove_all(front->execs);
    g_queue_clear(&front->finished);
    for (GList *l = all; l != NULL; l = l->next) {
        sbx_http_exec_free_one(l->data);
    }
}

gboolean sbx_http_exec_seen_approval(HttpExec *e, const char *approval_id)
{
    if (g_hash_table_contains(e->approvals_seen, approval_id)) {
        return TRUE;
    }
    g_hash_table_add(e->approvals_seen, g_strdup(approval_id));
    return FALSE;
}

const char *sbx_http_exec_id(HttpExec *e)
{
    return e->id;
}
