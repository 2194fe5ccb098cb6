/*
 * Pending approvals (docs/tools.md, "Approvals"): a tool call the policy says needs a person's
 * yes waits here until it is approved, denied, times out, or its execution ends. Each gets an
 * id; `sandbox serve` lists them and takes decisions from its clients (`sandbox approve ID`).
 * Runs on the GLib main loop of its creator; no I/O of its own.
 */
#pragma once

#include <gio/gio.h>

/*
 * Approvals waiting at once. A call waits here while it is in flight, so the calls-in-flight
 * caps bound it already (64 per execution, 4 executions in serve = 256); this is the backstop
 * that keeps the list a client reads within one frame. Beyond: denied at once.
 */
#define SBX_APPROVALS_PENDING_MAX 256

typedef enum {
    SBX_APPROVAL_APPROVED,
    SBX_APPROVAL_DENIED,
    SBX_APPROVAL_TIMED_OUT,
    SBX_APPROVAL_CANCELLED,   /* the call's cancellable fired (execution over), or shutdown */
    SBX_APPROVAL_UNAVAILABLE, /* too many pending: refused without asking */
} SbxApprovalOutcome;

/* Who answered, kept for the execution's record: a pid and a program's name are ample. */
#define SBX_APPROVAL_BY_MAX 128

/* How an approval ended, for the record (valid during the SbxApprovalFunc only). */
typedef struct {
    const char *answered_by; /* who answered (sbx_approvals_decide_by()), or NULL: nobody */
    gint64 asked_at_ms;      /* unix ms */
    gint64 answered_at_ms;   /* unix ms of the decision; 0: not answered (timed out, ...) */
} SbxApprovalAnswer;

typedef void (*SbxApprovalFunc)(SbxApprovalOutcome outcome, const SbxApprovalAnswer *answer,
                                gpointer user_data);

/* A pending approval, as listed. */
typedef struct {
    char *id;
    char *provider; /* real names */
    char *tool;
    char *input_json; /* compact JSON */
    char *origin;     /* who made the call ("sandbox run, pid 4242"), or NULL */
    /* Which execution's call waits: its SbxTools (sbx_approvals_request_of()), or NULL. A tag
     * that tells a front end's executions apart, compared, never dereferenced. */
    gconstpointer owner;
    gint64 since_us; /* monotonic time of the request */
    guint timeout_ms;
} SbxApproval;

typedef struct SbxApprovals SbxApprovals;

SbxApprovals *sbx_approvals_new(void);

/**
 * Free @approvals. Approvals still pending are dropped without calling back: their owners cancel
 * them first (a cancelled call completes from the loop). Accepts NULL.
 */
void sbx_approvals_free(SbxApprovals *approvals);

/**
 * Ask for an approval of @tool of @provider with @input_json, made by @origin (shown to the
 * person who answers; NULL: unknown). @func runs exactly once, from
 * the main loop, never from inside this call: on a decision, after @timeout_ms, or when
 * @cancel fires. Returns the approval's id (owned by the registry while pending).
 */
const char *sbx_approvals_request(SbxApprovals *approvals, const char *provider, const char *tool,
                                  const char *input_json, const char *origin, guint timeout_ms,
                                  GCancellable *cancel, SbxApprovalFunc func, gpointer user_data);

/** As sbx_approvals_request(), the approval tagged with @owner (SbxApproval.owner). */
const char *sbx_approvals_request_of(SbxApprovals *approvals, gconstpointer owner,
                                     const char *provider, const char *tool, const char *input_json,
                                     const char *origin, guint timeout_ms, GCancellable *cancel,
                                     SbxApprovalFunc func, gpointer user_data);

/**
 * Called when an approval starts waiting (from inside sbx_approvals_request()) and when one stops
 * waiting (decided, from inside sbx_approvals_decide_by(); timed out, cancelled; already
 * unlisted).
 */
typedef void (*SbxApprovalsNotify)(SbxApprovals *approvals, gpointer data);

/** Call @func when the pending approvals change as above (one watcher; NULL to stop). */
void sbx_approvals_set_notify(SbxApprovals *approvals, SbxApprovalsNotify func, gpointer data);

/**
 * Another watcher, besides set_notify's (a second front end of one server), called after it as
 * above; the id is for sbx_approvals_unwatch(). At most a few: one per front end.
 */
guint sbx_approvals_watch(SbxApprovals *approvals, SbxApprovalsNotify func, gpointer data);

/** Stop the watcher @id of sbx_approvals_watch() (0 is ignored). */
void sbx_approvals_unwatch(SbxApprovals *approvals, guint id);

/** Approve (@approve TRUE) or deny approval @id. FALSE if no such approval is pending. */
gboolean sbx_approvals_decide(SbxApprovals *approvals, const char *id, gboolean approve);

/**
 * As sbx_approvals_decide(), saying who answered (@by: "the terminal", "sandbox approve, pid
 * 4242"; cut at SBX_APPROVAL_BY_MAX bytes; NULL: unknown) for the execution's record.
 */
gboolean sbx_approvals_decide_by(SbxApprovals *approvals, const char *id, gboolean approve,
                                 const char *by);

/** The pending approvals, oldest first (const SbxApproval *, valid until the loop runs). */
GPtrArray *sbx_approvals_pending(SbxApprovals *approvals);

/** "approved", "denied", "timed_out", "cancelled", "unavailable". */
const char *sbx_approval_outcome_name(SbxApprovalOutcome outcome);
