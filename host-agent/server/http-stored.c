/*
 * Executions the HTTP front end no longer holds (it forgets the oldest finished ones past
 * SBX_HTTP_FINISHED_KEPT, and holds none from before a restart), read back from the store's
 * records: fetched, their events (the end only), cancel (409: ended), and listed beside the
 * ones in memory (http-private.h).
 */
#include "server/http-private.h"

#include <string.h>

#include "server/http-object.h"

/*
 * @id's record of @tenant_id as the API's object; NULL if there is none, or (*@ret_failed) if
 * the store failed. Every record of a tenant that is still running is one this server holds in
 * memory (a server marks the others interrupted at its start, and holds the lock), so a record
 * read here has ended.
 */
static char *stored_json(HttpFront *front, const char *tenant_id, const char *id,
                         gboolean *ret_failed)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxRecord) rec = NULL;
    g_autoptr(GPtrArray) calls = NULL;
    g_autoptr(GPtrArray) approvals = NULL;
    SbxHttpObject o;

    *ret_failed = FALSE;
    if (front->store == NULL) {
        return NULL;
    }
    if (!sbx_records_get(front->store, tenant_id, id, &rec, &error) ||
        !sbx_records_get_calls(front->store, tenant_id, id, &calls, &approvals, &error)) {
        if (!g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND)) {
            g_warning("http: execution %s: %s", id, error->message);
            *ret_failed = TRUE;
        }
        return NULL;
    }
    g_autofree char *calls_json = sbx_http_object_calls_stored(calls);
    sbx_http_object_from_record(&o, rec, calls_json);
    return sbx_http_object_json(&o, TRUE);
}

/* GET .../events of an ended execution: its end, the one event a record can give. */
static void stored_events(SoupServerMessage *msg, const char *json)
{
    const char *accept =
        soup_message_headers_get_one(soup_server_message_get_request_headers(msg), "Accept");
    gboolean ndjson = accept != NULL && strstr(accept, "application/x-ndjson") != NULL;
    SoupMessageHeaders *rh = soup_server_message_get_response_headers(msg);
    char *text = ndjson ? g_strdup_printf("{\"event\":\"done\",\"data\":%s}\n", json)
                        : g_strdup_printf("event: done\ndata: %s\n\n", json);

    soup_message_headers_replace(rh, "Cache-Control", "no-store");
    soup_server_message_set_status(msg, SOUP_STATUS_OK, NULL);
    soup_server_message_set_response(msg, ndjson ? "application/x-ndjson" : "text/event-stream",
                                     SOUP_MEMORY_TAKE, text, strlen(text));
}

gboolean sbx_http_stored_route(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                               const char *id, const char *rest)
{
    gboolean failed = FALSE;
    g_autofree char *json = stored_json(front, tenant->id, id, &failed);

    if (failed) {
        sbx_http_reply_error(msg, SOUP_STATUS_SERVICE_UNAVAILABLE, "unavailable",
                             "the records cannot be read now");
        return TRUE;
    }
    if (json == NULL) {
        return FALSE;
    }
    if (strcmp(rest, "/cancel") == 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_CONFLICT, "conflict", "the execution has ended");
    } else if (strcmp(rest, "/events") == 0) {
        stored_events(msg, json);
    } else {
        sbx_http_reply_json(msg, SOUP_STATUS_OK, g_steal_pointer(&json));
    }
    return TRUE;
}

void sbx_http_list_item_free(SbxHttpListItem *item)
{
    g_free(item->id);
    g_free(item->json);
    g_free(item);
}

gboolean sbx_http_stored_page(HttpFront *front, const SbxRecordFilter *f, GPtrArray *items,
                              GError **error)
{
    g_autoptr(GPtrArray) recs = NULL;

    if (front->store == NULL) {
        return TRUE;
    }
    if (!sbx_records_list(front->store, f, &recs, error)) {
        return FALSE;
    }
    for (guint i = 0; i < recs->len; i++) {
        SbxRecord *rec = recs->pdata[i];
        SbxHttpObject o;
        if (g_hash_table_contains(front->execs, rec->id)) {
            continue; /* held in memory: the caller lists that one, as it stands now */
        }
        SbxHttpListItem *item = g_new0(SbxHttpListItem, 1);
        sbx_http_object_from_record(&o, rec, NULL);
        item->created_us = rec->created_at_ms * 1000;
        item->id = g_strdup(rec->id);
        item->json = sbx_http_object_json(&o, FALSE);
        g_ptr_array_add(items, item);
    }
    return TRUE;
}
