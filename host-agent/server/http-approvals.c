/*
 * The approvals of the HTTP API (docs/api.md): a tenant lists the tool calls of its own
 * executions that wait for a person's answer, and answers them; each new one is also an
 * `approval` event of its execution. The server's approvals (tools/approvals.h) hold every
 * front end's; those of the HTTP API name their execution in their origin.
 */
#include "server/http-private.h"

#include <string.h>

#include <cJSON.h>

#include "base/json-builder.h"
#include "protocol/json.h"
#include "protocol/limits.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/* The execution of @a if it is @tenant_id's (NULL: anyone's), else NULL. */
static HttpExec *owner(HttpFront *front, const SbxApproval *a, const char *tenant_id)
{
    const char *id = sbx_http_exec_of_origin(a->origin);
    HttpExec *e = id != NULL ? g_hash_table_lookup(front->execs, id) : NULL;

    if (e != NULL && tenant_id != NULL) {
        e = sbx_http_exec_find(front, tenant_id, id);
    }
    return e;
}

static void approval_members(SbxJsonb *b, const SbxApproval *a, HttpExec *e)
{
    sbx_jsonb_member_string(b, "id", a->id);
    sbx_jsonb_member_string(b, "execution_id", sbx_http_exec_id(e));
    sbx_jsonb_member_string(b, "provider", a->provider);
    sbx_jsonb_member_string(b, "tool", a->tool);
    sbx_jsonb_member_raw(b, "input", a->input_json); /* checked compact JSON */
}

static void on_change(SbxApprovals *approvals, gpointer data)
{
    HttpFront *front = data;
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);

    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *a = pending->pdata[i];
        HttpExec *e = owner(front, a, NULL);
        if (e != NULL && !sbx_http_exec_seen_approval(e, a->id)) {
            SbxJsonb b;
            sbx_jsonb_init(&b);
            sbx_jsonb_begin_object(&b);
            approval_members(&b, a, e);
            sbx_jsonb_member_uint(&b, "timeout_ms", a->timeout_ms);
            sbx_jsonb_end_object(&b);
            g_autofree char *json = sbx_jsonb_finish(&b);
            sbx_http_exec_approval(e, json);
        }
    }
    sbx_http_mcp_approvals_changed(front); /* the one watcher, shared */
}

void sbx_http_approvals_watch(HttpFront *front)
{
    sbx_approvals_set_notify(sbx_server_approvals(front->srv), on_change, front);
}

static void list(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(sbx_server_approvals(front->srv));
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "approvals");
    sbx_jsonb_begin_array(&b);
    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *a = pending->pdata[i];
        HttpExec *e = owner(front, a, tenant->id);
        if (e == NULL) {
            continue;
        }
        sbx_jsonb_begin_object(&b);
        approval_members(&b, a, e);
        sbx_jsonb_member_int(&b, "waiting_ms", (g_get_monotonic_time() - a->since_us) / 1000);
        sbx_jsonb_member_uint(&b, "timeout_ms", a->timeout_ms);
        sbx_jsonb_end_object(&b);
    }
    sbx_jsonb_end_array(&b);
    sbx_jsonb_end_object(&b);
    sbx_http_reply_json(msg, SOUP_STATUS_OK, sbx_jsonb_finish(&b));
}

/* The body's decision: 1 approve, 0 deny, -1 when answered (400, 415). */
static int decision(SoupServerMessage *msg)
{
    SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
    const char *type = soup_message_headers_get_content_type(h, NULL);
    SoupMessageBody *body = soup_server_message_get_request_body(msg);

    if (type == NULL || g_ascii_strcasecmp(type, "application/json") != 0) {
        sbx_http_reply_error(msg, SOUP_STATUS_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                             "the body must be application/json");
        return -1;
    }
    g_autoptr(cJSON) v = sbx_json_parse(body->data, body->length, SBX_JSON_DEPTH_MAX, NULL);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(v, "decision");
    if (!cJSON_IsObject(v) || cJSON_GetArraySize(v) != 1 || !cJSON_IsString(d) ||
        (strcmp(d->valuestring, "approve") != 0 && strcmp(d->valuestring, "deny") != 0)) {
        sbx_http_reply_error(msg, SOUP_STATUS_BAD_REQUEST, "bad_request",
                             "the body must be {\"decision\": \"approve\" or \"deny\"}");
        return -1;
    }
    return strcmp(d->valuestring, "approve") == 0;
}

static void answer(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                   const char *id)
{
    SbxApprovals *approvals = sbx_server_approvals(front->srv);
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);
    gboolean ours = FALSE;
    int d = decision(msg);

    if (d < 0) {
        return;
    }
    for (guint i = 0; i < pending->len && !ours; i++) {
        const SbxApproval *a = pending->pdata[i];
        ours = strcmp(a->id, id) == 0 && owner(front, a, tenant->id) != NULL;
    }
    if (!ours || !sbx_approvals_decide(approvals, id, d == 1)) {
        sbx_http_reply_error(msg, SOUP_STATUS_NOT_FOUND, "not_found",
                             "no such approval waiting (answered, timed out, or its run ended)");
        return;
    }
    SbxJsonb b;
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "id", id);
    sbx_jsonb_member_string(&b, "decision", d == 1 ? "approve" : "deny");
    sbx_jsonb_end_object(&b);
    sbx_http_reply_json(msg, SOUP_STATUS_OK, sbx_jsonb_finish(&b));
}

void sbx_http_approvals_route(HttpFront *front, SoupServerMessage *msg, const SbxTenant *tenant,
                              const char *id)
{
    if (id == NULL) {
        list(front, msg, tenant);
    } else {
        answer(front, msg, tenant, id);
    }
}
