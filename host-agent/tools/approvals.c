/*
 * Pending approvals (approvals.h). Every ending (decision, timer, cancellation) goes through
 * finish(), which unlinks the entry, removes its sources and calls back once.
 */
#include "approvals.h"

#include <string.h>

typedef struct {
    SbxApproval pub;
    SbxApprovals *owner;
    guint timer;         /* the approval timeout */
    GSource *cancel_src; /* the call's cancellable, seen from the loop */
    guint idle;          /* an ending decided where calling back is not allowed */
    SbxApprovalOutcome outcome;
    char *answered_by;     /* who decided, or NULL */
    gint64 asked_at_ms;    /* unix ms */
    gint64 answered_at_ms; /* unix ms, 0 until decided */
    SbxApprovalFunc func;
    gpointer user_data;
} Pending;

struct SbxApprovals {
    GQueue pending; /* Pending*, oldest first */
    guint64 next_id;
    SbxApprovalsNotify notify;
    gpointer notify_data;
    GArray *watchers; /* Watcher: sbx_approvals_watch()'s */
    guint next_watch;
};

typedef struct {
    guint id;
    SbxApprovalsNotify func;
    gpointer data;
} Watcher;

/* The pending approvals changed: every watcher is told. */
static void changed(SbxApprovals *a)
{
    if (a->notify != NULL) {
        a->notify(a, a->notify_data);
    }
    for (guint i = 0; i < a->watchers->len; i++) {
        Watcher w = g_array_index(a->watchers, Watcher, i); /* a copy: it may unwatch */
        w.func(a, w.data);
    }
}

static const char *const outcome_names[] = {
    [SBX_APPROVAL_APPROVED] = "approved",       [SBX_APPROVAL_DENIED] = "denied",
    [SBX_APPROVAL_TIMED_OUT] = "timed_out",     [SBX_APPROVAL_CANCELLED] = "cancelled",
    [SBX_APPROVAL_UNAVAILABLE] = "unavailable",
};

const char *sbx_approval_outcome_name(SbxApprovalOutcome outcome)
{
    return outcome_names[outcome];
}

SbxApprovals *sbx_approvals_new(void)
{
    SbxApprovals *a = g_new0(SbxApprovals, 1);
    g_queue_init(&a->pending);
    a->next_id = 1;
    a->watchers = g_array_new(FALSE, FALSE, sizeof(Watcher));
    return a;
}

static void pending_free(Pending *p)
{
    g_clear_handle_id(&p->timer, g_source_remove);
    g_clear_handle_id(&p->idle, g_source_remove);
    if (p->cancel_src != NULL) {
        g_source_destroy(p->cancel_src);
        g_source_unref(p->cancel_src);
    }
    g_free(p->pub.id);
    g_free(p->pub.provider);
    g_free(p->pub.tool);
    g_free(p->pub.input_json);
    g_free(p->pub.origin);
    g_free(p->answered_by);
    g_free(p);
}

/* End @p with @outcome: unlink, call back, free. */
static void finish(Pending *p, SbxApprovalOutcome outcome)
{
    if (p->owner != NULL) {
        g_queue_remove(&p->owner->pending, p);
    }
    SbxApprovalFunc func = p->func;
    gpointer data = p->user_data;
    g_autofree char *by = g_steal_pointer(&p->answered_by);
    SbxApprovalAnswer answer = {
        .answered_by = by,
        .asked_at_ms = p->asked_at_ms,
        .answered_at_ms = p->answered_at_ms,
    };
    pending_free(p);
    func(outcome, &answer, data);
}

/*
 * @p stopped waiting without an answer: unlist it and tell the watcher (a prompt asking about
 * it must move on), before the callback (which may end what owns the approvals).
 */
static void unlist(Pending *p)
{
    SbxApprovals *owner = p->owner;

    if (owner == NULL) {
        return;
    }
    g_queue_remove(&owner->pending, p);
    p->owner = NULL;
    changed(owner);
}

static gboolean on_timeout(gpointer data)
{
    Pending *p = data;
    p->timer = 0;
    unlist(p);
    finish(p, SBX_APPROVAL_TIMED_OUT);
    return G_SOURCE_REMOVE;
}

static gboolean on_cancelled(GCancellable *cancel, gpointer data)
{
    Pending *p = data;
    (void)cancel;
    /* Destroying the source we are called from is fine in GLib; unref'd in pending_free. */
    unlist(p);
    finish(p, SBX_APPROVAL_CANCELLED);
    return G_SOURCE_REMOVE;
}

static gboolean on_idle(gpointer data)
{
    Pending *p = data;
    p->idle = 0;
    finish(p, p->outcome);
    return G_SOURCE_REMOVE;
}

const char *sbx_approvals_request_of(SbxApprovals *approvals, gconstpointer owner,
                                     const char *provider, const char *tool, const char *input_json,
                                     const char *origin, guint timeout_ms, GCancellable *cancel,
                                     SbxApprovalFunc func, gpointer user_data)
{
    Pending *p = g_new0(Pending, 1);

    p->pub.owner = owner;

    p->pub.id = g_strdup_printf("%" G_GUINT64_FORMAT, approvals->next_id++);
    p->pub.provider = g_strdup(provider);
    p->pub.tool = g_strdup(tool);
    p->pub.input_json = g_strdup(input_json);
    p->pub.origin = g_strdup(origin);
    p->pub.since_us = g_get_monotonic_time();
    p->asked_at_ms = g_get_real_time() / 1000;
    p->pub.timeout_ms = timeout_ms;
    p->func = func;
    p->user_data = user_data;
    if (g_queue_get_length(&approvals->pending) >= SBX_APPROVALS_PENDING_MAX) {
        p->outcome = SBX_APPROVAL_UNAVAILABLE; /* not listed: nobody could answer it */
        p->idle = g_idle_add(on_idle, p);
        return p->pub.id;
    }
    p->owner = approvals;
    g_queue_push_tail(&approvals->pending, p);
    p->timer = g_timeout_add(timeout_ms, on_timeout, p);
    if (cancel != NULL) {
        p->cancel_src = g_cancellable_source_new(cancel);
        g_source_set_callback(p->cancel_src, G_SOURCE_FUNC(on_cancelled), p, NULL);
        g_source_attach(p->cancel_src, NULL);
    }
    changed(approvals);
    return p->pub.id;
}

const char *sbx_approvals_request(SbxApprovals *approvals, const char *provider, const char *tool,
                                  const char *input_json, const char *origin, guint timeout_ms,
                                  GCancellable *cancel, SbxApprovalFunc func, gpointer user_data)
{
    return sbx_approvals_request_of(approvals, NULL, provider, tool, input_json, origin, timeout_ms,
                                    cancel, func, user_data);
}

void sbx_approvals_set_notify(SbxApprovals *approvals, SbxApprovalsNotify func, gpointer data)
{
    approvals->notify = func;
    approvals->notify_data = data;
}

guint sbx_approvals_watch(SbxApprovals *approvals, SbxApprovalsNotify func, gpointer data)
{
    Watcher w = {.id = ++approvals->next_watch, .func = func, .data = data};

    g_array_append_val(approvals->watchers, w);
    return w.id;
}

void sbx_approvals_unwatch(SbxApprovals *approvals, guint id)
{
    for (guint i = 0; id != 0 && i < approvals->watchers->len; i++) {
        if (g_array_index(approvals->watchers, Watcher, i).id == id) {
            g_array_remove_index(approvals->watchers, i);
            return;
        }
    }
}

static Pending *find(SbxApprovals *approvals, const char *id)
{
    for (GList *l = approvals->pending.head; l != NULL; l = l->next) {
        Pending *p = l->data;
        if (p->idle == 0 && strcmp(p->pub.id, id) == 0) {
            return p;
        }
    }
    return NULL;
}

gboolean sbx_approvals_decide(SbxApprovals *approvals, const char *id, gboolean approve)
{
    return sbx_approvals_decide_by(approvals, id, approve, NULL);
}

gboolean sbx_approvals_decide_by(SbxApprovals *approvals, const char *id, gboolean approve,
                                 const char *by)
{
    Pending *p = find(approvals, id);

    if (p == NULL) {
        return FALSE;
    }
    /* The answer is taken now; the call goes on from the loop (the caller may be mid-frame). */
    p->outcome = approve ? SBX_APPROVAL_APPROVED : SBX_APPROVAL_DENIED;
    p->answered_at_ms = g_get_real_time() / 1000;
    if (by != NULL) {
        p->answered_by = g_utf8_make_valid(by, MIN(strlen(by), (gsize)SBX_APPROVAL_BY_MAX));
    }
    g_clear_handle_id(&p->timer, g_source_remove);
    p->idle = g_idle_add(on_idle, p);
    /* No longer listed: whoever else asks about it (an MCP client) withdraws its question. */
    changed(approvals);
    return TRUE;
}

GPtrArray *sbx_approvals_pending(SbxApprovals *approvals)
{
    GPtrArray *out = g_ptr_array_new();

    for (GList *l = approvals->pending.head; l != NULL; l = l->next) {
        Pending *p = l->data;
        if (p->idle == 0) {
            g_ptr_array_add(out, &p->pub);
        }
    }
    return out;
}

void sbx_approvals_free(SbxApprovals *approvals)
{
    Pending *p;

    if (approvals == NULL) {
        return;
    }
    while ((p = g_queue_pop_head(&approvals->pending)) != NULL) {
        pending_free(p); /* the callback's data may be gone: see approvals.h */
    }
    g_array_unref(approvals->watchers);
    g_free(approvals);
}
