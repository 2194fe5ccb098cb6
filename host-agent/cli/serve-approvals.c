/*
 * The approval messages of `sandbox serve`'s clients (docs/pool.md): list the pending
 * approvals of every run, approve or deny one by its id. The socket is owner-only, so whoever
 * connects is the user who started the runs.
 */
#include <string.h>

#include "cli/report.h"
#include "cli/serve.h"
#include "protocol/limits.h"

/*
 * Input shown per pending approval. A call's input may be 1 MiB and up to
 * SBX_APPROVALS_PENDING_MAX may wait: 4 KiB each (at most 8 KiB once quoted as an excerpt)
 * keeps the list of 256 within one frame (4 MiB). A longer input is shown as the start of its
 * JSON text (`input_excerpt`).
 */
#define APPROVAL_INPUT_SHOWN_MAX (4 * 1024)

/*
 * Input sent whole when one approval is asked for by its id (`sandbox approvals` fetches each
 * long input so, to show it whole). The tools refuse inputs over 1 MiB (SBX_TOOL_INPUT_MAX)
 * before anyone is asked; this only keeps the answer within one frame whatever happens.
 */
#define APPROVAL_INPUT_ALONE_MAX (SBX_FRAME_MAX / 2)

static void send_error(ServeConn *conn, const char *code, const char *message)
{
    g_autoptr(GString) m = g_string_new("{\"type\":\"error\",\"code\":");

    sbx_json_append_string(m, code, strlen(code));
    g_string_append(m, ",\"message\":");
    sbx_json_append_string(m, message, strlen(message));
    g_string_append_c(m, '}');
    sbx_serve_conn_send(conn, m->str, m->len);
}

/* @a as an entry of `pending`, its input whole if it is at most @input_max bytes. */
static void append_pending(GString *m, const SbxApproval *a, gsize input_max)
{
    gsize len = strlen(a->input_json);

    g_string_append(m, "{\"id\":");
    sbx_json_append_string(m, a->id, strlen(a->id));
    g_string_append(m, ",\"provider\":");
    sbx_json_append_string(m, a->provider, strlen(a->provider));
    g_string_append(m, ",\"tool\":");
    sbx_json_append_string(m, a->tool, strlen(a->tool));
    if (len <= input_max) {
        g_string_append_printf(m, ",\"input\":%s", a->input_json); /* checked compact JSON */
    } else {
        g_string_append(m, ",\"input_excerpt\":");
        sbx_json_append_string(m, a->input_json, APPROVAL_INPUT_SHOWN_MAX);
    }
    if (a->origin != NULL) {
        g_string_append(m, ",\"origin\":");
        sbx_json_append_string(m, a->origin, strlen(a->origin));
    }
    g_string_append_printf(m, ",\"waiting_ms\":%" G_GINT64_FORMAT ",\"timeout_ms\":%u}",
                           (g_get_monotonic_time() - a->since_us) / 1000, a->timeout_ms);
}

/* Every pending approval (@id NULL), or approval @id alone (none if it is not pending). */
static void list(ServeConn *conn, SbxApprovals *approvals, const char *id)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);
    g_autoptr(GString) m = g_string_new("{\"type\":\"approvals\",\"pending\":[");
    gboolean first = TRUE;

    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *a = pending->pdata[i];
        if (id != NULL && strcmp(a->id, id) != 0) {
            continue;
        }
        g_string_append(m, first ? "" : ",");
        append_pending(m, a, id != NULL ? APPROVAL_INPUT_ALONE_MAX : APPROVAL_INPUT_SHOWN_MAX);
        first = FALSE;
    }
    g_string_append(m, "]}");
    sbx_serve_conn_send(conn, m->str, m->len);
}

/* An `approve` or `deny` (@req->id checked by serve-proto.c, unless @req->bad says why not). */
static void decide(ServeConn *conn, SbxApprovals *approvals, const SbxServeRequest *req)
{
    gboolean approve = req->type == SBX_SERVE_REQ_APPROVE;

    if (req->bad != NULL) {
        send_error(conn, "bad_request", req->bad);
        return;
    }
    if (!sbx_approvals_decide(approvals, req->id, approve)) {
        g_autofree char *why = g_strdup_printf(
            "no pending approval \"%s\" (answered, timed out, or its run ended)", req->id);
        send_error(conn, "not_found", why);
        return;
    }
    g_autoptr(GString) m = g_string_new(NULL);
    g_string_append_printf(m, "{\"type\":\"%s\",\"id\":", approve ? "approved" : "denied");
    sbx_json_append_string(m, req->id, strlen(req->id));
    g_string_append_c(m, '}');
    sbx_serve_conn_send(conn, m->str, m->len);
}

gboolean sbx_serve_approval_message(ServeConn *conn, SbxApprovals *approvals,
                                    const SbxServeRequest *req)
{
    if (req->type == SBX_SERVE_REQ_APPROVALS && req->bad != NULL) {
        send_error(conn, "bad_request", req->bad);
    } else if (req->type == SBX_SERVE_REQ_APPROVALS) {
        list(conn, approvals, req->id);
    } else if (req->type == SBX_SERVE_REQ_APPROVE || req->type == SBX_SERVE_REQ_DENY) {
        decide(conn, approvals, req);
    } else {
        return FALSE;
    }
    return TRUE;
}
