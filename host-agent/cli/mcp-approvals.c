/*
 * `sandbox mcp`'s approvals asked of its client (mcp-approvals.h): the connection's own list
 * for the executions restored here, the server's asked for while executions run there; each
 * question is an elicitation of the core's (mcp-server.h), withdrawn when its approval stops
 * waiting.
 */
#include "cli/mcp-approvals.h"

#include <string.h>
#include <unistd.h>

#include "approvals.h"
#include "cli/serve-client.h"

/* Where an approval waits. */
typedef enum { WAITS_HERE, WAITS_IN_SERVE } Where;

/* A call whose approvals may be asked: its execution runs here (origin) or in the server. */
typedef struct {
    SbxMcpCall *call;
    Where where;
    char *origin; /* here: its approvals' origin ("sandbox mcp, call N") */
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
    SbxApprovals *here; /* the executions restored here */
    GPtrArray *watched; /* Watched* */
    GPtrArray *asks;    /* Ask* */
    guint made;         /* origins given */
    char *serve_origin; /* the server's origin of our runs ("sandbox run, pid N") */
    guint poll;         /* the server's list asked for, while a watched call runs there */
    SbxServeAsk *listing;
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

static Ask *ask_of(SbxMcpApprovals *a, const char *approval_id)
{
    for (guint i = 0; i < a->asks->len; i++) {
        Ask *k = g_ptr_array_index(a->asks, i);
        if (strcmp(k->approval_id, approval_id) == 0) {
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
        if (w->origin != NULL && strcmp(w->origin, origin) == 0) {
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
        if (w != NULL && ask_of(a, p->id) == NULL &&
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
    w->where = WAITS_HERE;
    w->origin = g_strdup_printf("sandbox mcp, call %u", ++a->made);
    g_ptr_array_add(a->watched, w);
    sbx_tools_set_approvals(tools, a->here, w->origin);
}

/* ---- in `sandbox serve` --------------------------------------------------------------------- */

/* A call of ours whose execution runs in the server (the server's origin names no call). */
static SbxMcpCall *serve_call(SbxMcpApprovals *a)
{
    for (guint i = 0; i < a->watched->len; i++) {
        Watched *w = g_ptr_array_index(a->watched, i);
        if (w->where == WAITS_IN_SERVE) {
            return w->call;
        }
    }
    return NULL;
}

static void ask_pending(SbxMcpApprovals *a, const SbxServePending *p, SbxMcpCall *call)
{
    g_autofree char *excerpt =
        p->input_json == NULL ? g_strdup_printf("%s...", p->input_excerpt) : NULL;
    SbxMcpApprovalAsk q = {
        .provider = p->provider,
        .tool = p->tool,
        .input_json = p->input_json != NULL ? p->input_json : excerpt,
        .timeout_ms = (guint)CLAMP(p->timeout_ms - p->waiting_ms, 1, G_MAXUINT),
    };

    if (p->id != NULL && p->provider != NULL && p->tool != NULL &&
        (p->input_json != NULL || p->input_excerpt != NULL) && ask_of(a, p->id) == NULL) {
        ask_client(a, call, WAITS_IN_SERVE, p->id, &q); /* not asked: `sandbox approve` */
    }
}

static void on_listed(gpointer data, const SbxServeMsg *answer, const char *failure)
{
    SbxMcpApprovals *a = data;
    g_autoptr(GHashTable) ids = g_hash_table_new(g_str_hash, g_str_equal);
    SbxMcpCall *call = serve_call(a);
    (void)failure;

    sbx_serve_ask_free(g_steal_pointer(&a->listing));
    if (answer == NULL || answer->type != SBX_SERVE_MSG_APPROVALS) {
        return; /* asked again at the next tick */
    }
    for (gsize i = 0; i < answer->n_pending; i++) {
        const SbxServePending *p = &answer->pending[i];
        if (p->id != NULL && g_strcmp0(p->origin, a->serve_origin) == 0) {
            g_hash_table_add(ids, p->id);
        }
    }
    withdraw_gone(a, WAITS_IN_SERVE, ids);
    for (gsize i = 0; call != NULL && i < answer->n_pending; i++) {
        const SbxServePending *p = &answer->pending[i];
        if (p->id != NULL && g_hash_table_contains(ids, p->id)) {
            ask_pending(a, p, call);
        }
    }
}

static gboolean poll_tick(gpointer data)
{
    SbxMcpApprovals *a = data;
    SbxServeRequest req = {.type = SBX_SERVE_REQ_APPROVALS};

    if (a->listing == NULL) {
        a->listing = sbx_serve_client_ask(&req, SBX_SERVE_CLIENT_PROBE_MS, on_listed, a);
    }
    return G_SOURCE_CONTINUE;
}

void sbx_mcp_approvals_serve(SbxMcpApprovals *a, SbxMcpCall *call)
{
    if (!sbx_mcp_server_can_elicit(a->server)) {
        return;
    }
    Watched *w = g_new0(Watched, 1);
    w->call = call;
    w->where = WAITS_IN_SERVE;
    g_ptr_array_add(a->watched, w);
    if (a->poll == 0) {
        a->poll = g_timeout_add(SBX_MCP_APPROVALS_POLL_MS, poll_tick, a);
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
    if (serve_call(a) == NULL) {
        /* nothing of ours runs in the server: its questions end with their calls' finish */
        g_clear_handle_id(&a->poll, g_source_remove);
        sbx_serve_ask_free(g_steal_pointer(&a->listing));
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
    a->serve_origin = g_strdup_printf("sandbox run, pid %d", (int)getpid());
    sbx_approvals_set_notify(a->here, on_changed, a);
    return a;
}

void sbx_mcp_approvals_free(SbxMcpApprovals *a)
{
    if (a == NULL) {
        return;
    }
    g_clear_handle_id(&a->poll, g_source_remove);
    sbx_serve_ask_free(a->listing);
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
    g_free(a->serve_origin);
    g_free(a);
}
