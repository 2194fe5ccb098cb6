/*
 * A session's files over the HTTP API (docs/api.md, "Files"): PUT, GET and DELETE
 * /v1/sessions/{id}/files/{path}, GET /v1/sessions/{id}/files (the listing). The work is the
 * server's (session-files.h); this file maps requests and answers.
 */
#include "server/http-private.h"

#include <string.h>

#include "base/json-builder.h"
#include "server/session-files.h"

/* A request waiting for its file operation. */
typedef struct {
    SoupServerMessage *msg; /* a reference */
    gulong finished_handler;
    gboolean gone; /* the client went away first: nothing to answer */
    guint status;  /* of a success */
} Pending;

static void on_finished(SoupServerMessage *msg, gpointer data)
{
    Pending *p = data;
    (void)msg;

    p->gone = TRUE;
}

static Pending *pending_new(SoupServerMessage *msg, guint status)
{
    Pending *p = g_new0(Pending, 1);

    p->msg = g_object_ref(msg);
    p->status = status;
    p->finished_handler = g_signal_connect(msg, "finished", G_CALLBACK(on_finished), p);
    return p;
}

/* Drop @p; TRUE if its client is still there to be answered (then answer and unpause). */
static gboolean pending_end(Pending *p, SoupServerMessage **ret_msg)
{
    gboolean here = !p->gone;

    g_signal_handler_disconnect(p->msg, p->finished_handler);
    *ret_msg = p->msg;
    g_free(p);
    return here;
}

static void answered(SoupServerMessage *msg)
{
    soup_server_message_unpause(msg);
    g_object_unref(msg);
}

/* An error of the files as an answer. */
static void reply_file_error(SoupServerMessage *msg, const GError *error)
{
    guint status = SOUP_STATUS_SERVICE_UNAVAILABLE;
    const char *code = "unavailable";

    if (error->domain == SBX_SERVER_SESSION_ERROR) {
        switch (error->code) {
        case SBX_SERVER_SESSION_ERROR_NOT_FOUND:
        case SBX_SERVER_SESSION_ERROR_FILE_NOT_FOUND:
            status = SOUP_STATUS_NOT_FOUND;
            code = "not_found";
            break;
        case SBX_SERVER_SESSION_ERROR_BUSY:
        case SBX_SERVER_SESSION_ERROR_ENDED:
            status = SOUP_STATUS_CONFLICT;
            code = "conflict";
            break;
        case SBX_SERVER_SESSION_ERROR_FILE_REFUSED:
            status = SOUP_STATUS_BAD_REQUEST;
            code = "bad_request";
            break;
        case SBX_SERVER_SESSION_ERROR_FILE_TOO_LARGE:
            status = SOUP_STATUS_REQUEST_ENTITY_TOO_LARGE;
            code = "payload_too_large";
            break;
        case SBX_SERVER_SESSION_ERROR_WORKSPACE_FULL:
            status = SOUP_STATUS_INSUFFICIENT_STORAGE;
            code = "workspace_full";
            break;
        case SBX_SERVER_SESSION_ERROR_FILE_FAILED:
            status = SOUP_STATUS_BAD_GATEWAY;
            code = "guest_failed";
            break;
        default:
            break;
        }
    }
    sbx_http_reply_error(msg, status, code, error->message);
}

static char *file_json(const SbxSessionFileResult *r)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "path", r->path);
    sbx_jsonb_member_uint(&b, "size", r->size);
    sbx_jsonb_member_string(&b, "sha256", r->sha256);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

static void on_put(SbxServerSession *s, const SbxSessionFileResult *r, const GError *error,
                   gpointer data)
{
    SoupServerMessage *msg;
    guint status = ((Pending *)data)->status;
    (void)s;

    if (pending_end(data, &msg)) {
        if (error != NULL) {
            reply_file_error(msg, error);
        } else {
            sbx_http_reply_json(msg, status, file_json(r));
        }
    }
    answered(msg);
}

static void on_get(SbxServerSession *s, const SbxSessionFileResult *r, const GError *error,
                   gpointer data)
{
    SoupServerMessage *msg;
    (void)s;

    if (pending_end(data, &msg)) {
        if (error != NULL) {
            reply_file_error(msg, error);
        } else {
            SoupMessageHeaders *h = soup_server_message_get_response_headers(msg);
            gsize len = 0;
            const char *bytes = g_bytes_get_data(r->data, &len);

            soup_message_headers_replace(h, "X-Sandbox-Sha256", r->sha256);
            soup_server_message_set_status(msg, SOUP_STATUS_OK, NULL);
            soup_server_message_set_response(msg, "application/octet-stream", SOUP_MEMORY_COPY,
                                             bytes != NULL ? bytes : "", len);
        }
    }
    answered(msg);
}

static void on_delete(SbxServerSession *s, const SbxSessionFileResult *r, const GError *error,
                      gpointer data)
{
    SoupServerMessage *msg;
    (void)s, (void)r;

    if (pending_end(data, &msg)) {
        if (error != NULL) {
            reply_file_error(msg, error);
        } else {
            soup_server_message_set_status(msg, SOUP_STATUS_NO_CONTENT, NULL);
        }
    }
    answered(msg);
}

static void on_list(SbxServerSession *s, const SbxFileEntry *entries, gsize n, gboolean truncated,
                    const GError *error, gpointer data)
{
    SoupServerMessage *msg;
    (void)s;

    if (pending_end(data, &msg)) {
        if (error != NULL) {
            reply_file_error(msg, error);
        } else {
            SbxJsonb b;
            sbx_jsonb_init(&b);
            sbx_jsonb_begin_object(&b);
            sbx_jsonb_key(&b, "entries");
            sbx_jsonb_begin_array(&b);
            for (gsize i = 0; i < n; i++) {
                sbx_jsonb_begin_object(&b);
                sbx_jsonb_member_string(&b, "path", entries[i].path);
                sbx_jsonb_member_string(&b, "type", sbx_file_type_name(entries[i].type));
                sbx_jsonb_member_uint(&b, "size", entries[i].size);
                sbx_jsonb_member_uint(&b, "mtime_us", entries[i].mtime_us);
                sbx_jsonb_end_object(&b);
            }
            sbx_jsonb_end_array(&b);
            sbx_jsonb_member_bool(&b, "truncated", truncated);
            sbx_jsonb_end_object(&b);
            sbx_http_reply_json(msg, SOUP_STATUS_OK, sbx_jsonb_finish(&b));
        }
    }
    answered(msg);
}

/* The workspace path in the URL (percent-decoded), or NULL when answered (400). */
static char *url_path(SoupServerMessage *msg, const char *escaped)
{
    char *path = g_uri_unescape_string(escaped, NULL); /* NULL for an escaped NUL */

    if (path == NULL || !sbx_workspace_path_valid(path)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "the file's path: relative to the workspace, no \".\" or \"..\" "
                             "component, at most 1024 bytes");
        g_free(path);
        return NULL;
    }
    return path;
}

static void one_file(SoupServerMessage *msg, SbxServerSession *s, const char *escaped)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *path = url_path(msg, escaped);
    gboolean started = FALSE;

    if (path == NULL) {
        return;
    }
    if (sbx_http_is(msg, "PUT")) {
        SoupMessageBody *body = soup_server_message_get_request_body(msg);
        g_autoptr(GBytes) data = soup_message_body_flatten(body);
        Pending *p = pending_new(msg, SOUP_STATUS_CREATED);
        started = sbx_server_session_put_file(s, path, data, on_put, p, &error);
        if (!started) {
            g_signal_handler_disconnect(msg, p->finished_handler);
            g_object_unref(p->msg);
            g_free(p);
        }
    } else if (sbx_http_is(msg, "GET") || sbx_http_is(msg, "DELETE")) {
        gboolean get = sbx_http_is(msg, "GET");
        Pending *p = pending_new(msg, SOUP_STATUS_OK);
        started = get ? sbx_server_session_get_file(s, path, on_get, p, &error)
                      : sbx_server_session_delete_file(s, path, on_delete, p, &error);
        if (!started) {
            g_signal_handler_disconnect(msg, p->finished_handler);
            g_object_unref(p->msg);
            g_free(p);
        }
    } else {
        sbx_http_reply_method(msg, "GET, PUT, DELETE");
        return;
    }
    if (!started) {
        reply_file_error(msg, error);
        return;
    }
    soup_server_message_pause(msg);
}

static void listing(SoupServerMessage *msg, SbxServerSession *s, GHashTable *query)
{
    g_autoptr(GError) error = NULL;
    const char *dir = query != NULL ? g_hash_table_lookup(query, "path") : NULL;

    if (!sbx_http_is(msg, "GET")) {
        sbx_http_reply_method(msg, "GET");
        return;
    }
    if (query != NULL && g_hash_table_size(query) > (dir != NULL ? 1u : 0u)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "the only parameter is path");
        return;
    }
    if (dir != NULL && !sbx_workspace_path_valid(dir)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "path: a directory relative to the workspace");
        return;
    }
    Pending *p = pending_new(msg, SOUP_STATUS_OK);
    if (!sbx_server_session_list_files(s, dir, on_list, p, &error)) {
        g_signal_handler_disconnect(msg, p->finished_handler);
        g_object_unref(p->msg);
        g_free(p);
        reply_file_error(msg, error);
        return;
    }
    soup_server_message_pause(msg);
}

void sbx_http_files_route(HttpFront *front, SoupServerMessage *msg, SbxServerSession *s,
                          const char *rest, GHashTable *query)
{
    (void)front;
    if (*rest == '\0') {
        listing(msg, s, query);
    } else if (rest[1] == '\0') {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found", "no such path");
    } else if (query != NULL && g_hash_table_size(query) > 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "a file takes no parameters");
    } else {
        one_file(msg, s, rest + 1);
    }
}
