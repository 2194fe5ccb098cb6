/*
 * The approval messages of `sandbox serve`'s clients (docs/pool.md): list the pending
 * approvals of every run, approve or deny one by its id; and a run that asked for them
 * (`"approvals": true`) is told its own approvals on its stream as they start and stop waiting.
 * The socket is owner-only, so whoever connects is the user who started the runs.
 */
#include <string.h>

#include "protocol/limits.h"
#include "server/unix-private.h"

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

/* @a as an entry of `pending` (strings borrowed), its input whole if at most @input_max bytes. */
static void pending_entry(const SbxApproval *a, gsize input_max, SbxServePending *p)
{
    gsize len = strlen(a->input_json);

    p->id = a->id;
    p->provider = a->provider;
    p->tool = a->tool;
    if (len <= input_max) {
        p->input_json = a->input_json; /* checked compact JSON */
    } else {
        p->input_excerpt = g_strndup(a->input_json, APPROVAL_INPUT_SHOWN_MAX); /* freed below */
    }
    p->origin = a->origin;
    p->waiting_ms = (g_get_monotonic_time() - a->since_us) / 1000;
    p->timeout_ms = a->timeout_ms;
}

/* ---- a run's approvals, told on its stream -------------------------------------------------- */

struct UnixApprovalTeller {
    UnixConn *conn;
    gconstpointer owner; /* the run's SbxTools: SbxApproval.owner of its approvals */
    GPtrArray *told;     /* char *: the ids told waiting and not yet told over */
};

UnixApprovalTeller *sbx_unix_approval_teller_new(UnixConn *conn, gconstpointer owner)
{
    UnixApprovalTeller *t = g_new0(UnixApprovalTeller, 1);

    t->conn = conn;
    t->owner = owner;
    t->told = g_ptr_array_new_with_free_func(g_free);
    return t;
}

void sbx_unix_approval_teller_free(UnixApprovalTeller *t)
{
    if (t == NULL) {
        return;
    }
    g_ptr_array_unref(t->told);
    g_free(t);
}

/* Whether @id is among @pending's approvals of @owner. */
static gboolean waits(GPtrArray *pending, gconstpointer owner, const char *id)
{
    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *a = pending->pdata[i];
        if (a->owner == owner && strcmp(a->id, id) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

static gboolean told(UnixApprovalTeller *t, const char *id)
{
    for (guint i = 0; i < t->told->len; i++) {
        if (strcmp(t->told->pdata[i], id) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

void sbx_unix_approval_tell(UnixApprovalTeller *t, SbxApprovals *approvals)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);

    for (guint i = t->told->len; i > 0; i--) {
        const char *id = t->told->pdata[i - 1];
        if (!waits(pending, t->owner, id)) {
            SbxServeMsg m = {.type = SBX_SERVE_MSG_APPROVAL_OVER, .id = (char *)id};
            sbx_unix_conn_send_msg(t->conn, &m);
            g_ptr_array_remove_index(t->told, i - 1);
        }
    }
    for (guint i = 0; i < pending->len && t->told->len < SBX_UNIX_RUN_APPROVALS_TOLD_MAX; i++) {
        const SbxApproval *a = pending->pdata[i];
        if (a->owner != t->owner || told(t, a->id)) {
            continue;
        }
        SbxServePending entry = {0};
        pending_entry(a, APPROVAL_INPUT_SHOWN_MAX, &entry);
        SbxServeMsg m = {.type = SBX_SERVE_MSG_APPROVAL, .pending = &entry, .n_pending = 1};
        sbx_unix_conn_send_msg(t->conn, &m);
        g_free(entry.input_excerpt);
        g_ptr_array_add(t->told, g_strdup(a->id));
    }
}

/* ---- the approval requests ------------------------------------------------------------------ */

/* Every pending approval (@id NULL), or approval @id alone (none if it is not pending). */
static void list(UnixConn *conn, SbxApprovals *approvals, const char *id)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);
    g_autofree SbxServePending *entries = g_new0(SbxServePending, pending->len + 1);
    SbxServeMsg m = {.type = SBX_SERVE_MSG_APPROVALS, .pending = entries};

    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *a = pending->pdata[i];
        if (id == NULL || strcmp(a->id, id) == 0) {
            pending_entry(a, id != NULL ? APPROVAL_INPUT_ALONE_MAX : APPROVAL_INPUT_SHOWN_MAX,
                          &entries[m.n_pending++]);
        }
    }
    sbx_unix_conn_send_msg(conn, &m);
    for (gsize i = 0; i < m.n_pending; i++) {
        g_free(entries[i].input_excerpt);
    }
}

/* An `approve` or `deny` (@req->id checked by proto.c, unless @req->bad says why not). */
static void decide(UnixConn *conn, SbxApprovals *approvals, const SbxServeRequest *req)
{
    gboolean approve = req->type == SBX_SERVE_REQ_APPROVE;

    if (req->bad != NULL) {
        sbx_unix_conn_send_error(conn, "bad_request", req->bad);
        return;
    }
    g_autofree char *by =
        g_strdup_printf("a client of sandbox serve, pid %d", (int)sbx_unix_conn_peer_pid(conn));
    if (!sbx_approvals_decide_by(approvals, req->id, approve, by)) {
        g_autofree char *why = g_strdup_printf(
            "no pending approval \"%s\" (answered, timed out, or its run ended)", req->id);
        sbx_unix_conn_send_error(conn, "not_found", why);
        return;
    }
    SbxServeMsg m = {
        .type = approve ? SBX_SERVE_MSG_APPROVED : SBX_SERVE_MSG_DENIED,
        .id = req->id,
    };
    sbx_unix_conn_send_msg(conn, &m);
}

gboolean sbx_unix_approval_message(UnixConn *conn, SbxApprovals *approvals,
                                   const SbxServeRequest *req)
{
    if (req->type == SBX_SERVE_REQ_APPROVALS && req->bad != NULL) {
        sbx_unix_conn_send_error(conn, "bad_request", req->bad);
    } else if (req->type == SBX_SERVE_REQ_APPROVALS) {
        list(conn, approvals, req->id);
    } else if (req->type == SBX_SERVE_REQ_APPROVE || req->type == SBX_SERVE_REQ_DENY) {
        decide(conn, approvals, req);
    } else {
        return FALSE;
    }
    return TRUE;
}
