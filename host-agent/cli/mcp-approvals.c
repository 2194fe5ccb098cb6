/*
 * `sandbox mcp`'s approvals asked of its client (mcp-approvals.h): the connection's own list
 * for the executions restored here, the server's told on each run's stream for the executions
 * that run there; each question is an elicitation of the core's (mcp-server.h), withdrawn when
 * its approval stops waiting.
 */
#include "cli/mcp-approvals.h"

#include <string.h>

#include "approvals.h"
#include "cli/serve-client.h"

/* Where an approval waits. */
typedef enum { WAITS_HERE, WAITS_IN_SERVE } Where;

/* A call whose execution runs here, whose approvals may be asked. */
typedef struct {
    SbxMcpCall *call;
    char *origin; /* its approvals' origin ("sandbox mcp, call N") */
} Watched;

/* An approval asked of the client. */
typedef struct {
    SbxMcpApprovals *owner;
    Where where;
    char *approval_id;
    guint64 elicit_id;
} Ask;

struct SbxMcpApprovals {
    SbxMcpServer *server;
    SbxApprovals *here;   /* the executions restored here */
    GPtrArray *watched;   /* Watched*: calls running here */
    GPtrArray *asks;      /* Ask* */
    guint made;           /* origins given */
    GPtrArray *decisions; /* Decision*: answers sent to the server, not acknowledged */
};

/* An answer sent to the server. */
typedef struct {
    SbxMcpApprovals *owner;
    SbxServeAsk *ask;
} Decision;

static void ask_free(Ask *k)
{
    g_ptr_array_remove(k->owner->asks, k);
    g_free(k->approval_id);
    g_free(k);
}

/* The question about approval @approval_id of @where (ids of here and of the server may meet). */
static Ask *ask_of(SbxMcpApprovals *a, Where where, const char *approval_id)
{
    for (guint i = 0; i < a->asks->len; i++) {
        Ask *k = g_ptr_array_index(a->asks, i);
        if (k->where == where && strcmp(k->approval_id, approval_id) == 0) {
            return k;
        }
    }
    return NULL;
}

/* ---- decisions ------------------------------------------------------------------------------ */

static void decision_free(Decision *d)
{
    sbx_serve_ask_free(d->ask);
    g_free(d);
}

static void on_decided(gpointer data, const SbxServeMsg *answer, const char *failure)
{
    Decision *d = data;
    (void)answer; /* not_found: answered elsewhere first, timed out, or its run ended */
    (void)failure;

    g_ptr_array_remove(d->owner->decisions, d);
    decision_free(d);
}

/* Send the client's decision to the server, as `sandbox approve` / `deny` would. */
static void decide_in_serve(SbxMcpApprovals *a, const char *id, gboolean approve)
{
    SbxServeRequest req = {
        .type = approve ? SBX_SERVE_REQ_APPROVE : SBX_SERVE_REQ_DENY,
        .id = (char *)id,
    };
    Decision *d = g_new0(Decision, 1);

    d->owner = a;
    d->ask = sbx_serve_client_ask(&req, SBX_SERVE_CLIENT_PROBE_MS, on_decided, d);
    if (d->ask == NULL) {
        g_free(d); /* the server is gone: so is the approval */
        return;
    }
    g_ptr_array_add(a->decisions, d);
}

/* The client's answer decides the approval (or the question ended without one). */
static void on_asked(SbxMcpServer *server, SbxMcpElicitOutcome outcome, gpointer data)
{
    Ask *k = data;
    SbxMcpApprovals *a = k->owner;
    Where where = k->where;
    g_autofree char *id = g_strdup(k->approval_id);
    gboolean approve = outcome == SBX_MCP_ELICIT_APPROVED;

    ask_free(k); /* first: the decision's notify comes back to on_changed() */
    if (outcome != SBX_MCP_ELICIT_APPROVED && outcome != SBX_MCP_ELICIT_DENIED) {
        return;
    }
    if (where == WAITS_HERE) {
        const char *name = sbx_mcp_server_client_name(server);
        g_autofree char *by = g_strdup_printf("the MCP client %s", name != NULL ? name : "");
        sbx_approvals_decide_by(a->here, id, approve, by);
    } else {
        decide_in_serve(a, id, approve);
    }
}

/* Ask the client about approval @id for @call; FALSE if it was not asked (the bound). */
static gboolean ask_client(SbxMcpApprovals *a, SbxMcpCall *call, Where where, const char *id,
                           const SbxMcpApprovalAsk *q)
{
    Ask *k = g_new0(Ask, 1);

    k->owner = a;
    k->where = where;
    k->approval_id = g_strdup(id);
    g_ptr_array_add(a->asks, k);
    k->elicit_id = sbx_mcp_server_elicit_approval(a->server, call, q, on_asked, k);
    if (k->elicit_id == 0) {
        ask_free(k);
        return FALSE;
    }
    return TRUE;
}

/* Withdraw the questions about approvals of @where no longer in @ids. */
static void withdraw_gone(SbxMcpApprovals *a, Where where, GHashTable *ids)
{
    for (guint i = a->asks->len; i > 0; i--) {
        Ask *k = g_ptr_array_index(a->asks, i - 1);
        if (k->where == where && !g_hash_table_contains(ids, k->approval_id)) {
            sbx_mcp_server_elicit_cancel(a->server, k->elicit_id); /* frees k */
        }
    }
}

/* ---- here ----------------------------------------------------------------------------------- */

static Watched *watched_of_origin(SbxMcpApprovals *a, const char *origin)
{
    for (guint i = 0; origin != NULL && i < a->watched->len; i++) {
        Watched *w = g_ptr_array_index(a->watched, i);
        if (strcmp(w->origin, origin) == 0) {
            return w;
        }
    }
    return NULL;
}

/* New approvals here are asked of the client; questions whose approvals ended are withdrawn. */
static void on_changed(SbxApprovals *approvals, gpointer data)
{
    SbxMcpApprovals *a = data;
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);
    g_autoptr(GHashTable) ids = g_hash_table_new(g_str_hash, g_str_equal);

    for (guint i = 0; i < pending->len; i++) {
        g_hash_table_add(ids, ((SbxApproval *)pending->pdata[i])->id);
    }
    withdraw_gone(a, WAITS_HERE, ids);
    for (guint i = 0; i < pending->len; i++) {
        const SbxApproval *p = pending->pdata[i];
        Watched *w = watched_of_origin(a, p->origin);
        gint64 waited_ms = (g_get_monotonic_time() - p->since_us) / 1000;
        SbxMcpApprovalAsk q = {
            .provider = p->provider,
            .tool = p->tool,
            .input_json = p->input_json,
            .timeout_ms = (guint)MAX((gint64)p->timeout_ms - waited_ms, 1),
        };
        if (w != NULL && ask_of(a, WAITS_HERE, p->id) == NULL &&
            !ask_client(a, w->call, WAITS_HERE, p->id, &q)) {
            /* Nobody else can answer here: denied now rather than after its timeout. */
            sbx_approvals_decide_by(approvals, p->id, FALSE,
                                    "sandbox mcp: too many questions to the MCP client at once");
        }
    }
}

void sbx_mcp_approvals_local(SbxMcpApprovals *a, SbxMcpCall *call, SbxTools *tools)
{
    if (!sbx_mcp_server_can_elicit(a->server)) {
        return;
    }
    Watched *w = g_new0(Watched, 1);
    w->call = call;
    w->origin = g_strdup_printf("sandbox mcp, call %u", ++a->made);
    g_ptr_array_add(a->watched, w);
    sbx_tools_set_approvals(tools, a->here, w->origin);
}

/* ---- in `sandbox serve` --------------------------------------------------------------------- */

gboolean sbx_mcp_approvals_can_ask(SbxMcpApprovals *a)
{
    return sbx_mcp_server_can_elicit(a->server);
}

/* Approval @p of @call's run waits in the server: asked of the client, unless it was already. */
static void ask_pending(SbxMcpApprovals *a, SbxMcpCall *call, const SbxServePending *p)
{
    g_autofree char *excerpt =
        p->input_json == NULL ? g_strdup_printf("%s...", p->input_excerpt) : NULL;
    SbxMcpApprovalAsk q = {
        .provider = p->provider,
        .tool = p->tool,
        .input_json = p->input_json != NULL ? p->input_json : excerpt,
        .timeout_ms = (guint)CLAMP(p->timeout_ms - p->waiting_ms, 1, G_MAXUINT),
    };

    if (p->provider != NULL && p->tool != NULL &&
        (p->input_json != NULL || p->input_excerpt != NULL) &&
        ask_of(a, WAITS_IN_SERVE, p->id) == NULL) {
        ask_client(a, call, WAITS_IN_SERVE, p->id, &q); /* not asked: `sandbox approve` */
    }
}

void sbx_mcp_approvals_told(SbxMcpApprovals *a, SbxMcpCall *call, const SbxServePending *p,
                            const char *id)
{
    Ask *k = ask_of(a, WAITS_IN_SERVE, id);

    if (p != NULL) {
        ask_pending(a, call, p);
    } else if (k != NULL) {
        sbx_mcp_server_elicit_cancel(a->server, k->elicit_id); /* frees k */
    }
}

/* ---- the connection ------------------------------------------------------------------------- */

void sbx_mcp_approvals_done(SbxMcpApprovals *a, SbxMcpCall *call)
{
    for (guint i = 0; i < a->watched->len; i++) {
        Watched *w = g_ptr_array_index(a->watched, i);
        if (w->call == call) {
            g_ptr_array_remove_index(a->watched, i);
            g_free(w->origin);
            g_free(w);
            break;
        }
    }
}

SbxMcpApprovals *sbx_mcp_approvals_new(SbxMcpServer *server)
{
    SbxMcpApprovals *a = g_new0(SbxMcpApprovals, 1);

    a->server = server;
    a->here = sbx_approvals_new();
    a->watched = g_ptr_array_new();
    a->asks = g_ptr_array_new();
    a->decisions = g_ptr_array_new();
    sbx_approvals_set_notify(a->here, on_changed, a);
    return a;
}

void sbx_mcp_approvals_free(SbxMcpApprovals *a)
{
    if (a == NULL) {
        return;
    }
    for (guint i = 0; i < a->decisions->len; i++) {
        decision_free(g_ptr_array_index(a->decisions, i));
    }
    sbx_approvals_set_notify(a->here, NULL, NULL);
    sbx_approvals_free(a->here);
    while (a->asks->len > 0) {
        ask_free(g_ptr_array_index(a->asks, 0)); /* only if the server was not freed first */
    }
    for (guint i = 0; i < a->watched->len; i++) {
        Watched *w = g_ptr_array_index(a->watched, i);
        g_free(w->origin);
        g_free(w);
    }
    g_ptr_array_unref(a->watched);
    g_ptr_array_unref(a->asks);
    g_ptr_array_unref(a->decisions);
    g_free(a);
}
