/*
 * `sandbox mcp`'s own sessions (see mcp-local.h): a table of leased VMs, their operations and
 * their ends.
 */
#include "cli/mcp-local.h"

#include <string.h>

#include "exec/lease.h"
#include "files.h"
#include "server/session-clock.h"
#include "server/session-files.h"

typedef struct LocalSession LocalSession;

struct SbxMcpLocal {
    GHashTable *sessions; /* handle -> LocalSession* */
};

struct LocalSession {
    SbxMcpLocal *local;
    char *handle;
    SbxExecLease *lease;
    gboolean ready;         /* its VM is in hand */
    gboolean running;       /* an execution has it */
    char *ended;            /* why it ended, or NULL: open */
    const char *end_status; /* then, as a server session's: "expired", "crashed" */
    guint end_idle;         /* its lease's close, after an end found inside a callback */
    SbxMcpLocalOp *op;      /* the open, or the file operation (waiting or running), or NULL */
    SbxSessionClock clock;  /* its idle timeout and lifetime, as a server's session */
};

struct SbxMcpLocalOp {
    LocalSession *session;
    SbxMcpTool tool;
    char *path;
    GBytes *bytes;       /* a write's */
    SbxSession *channel; /* while a file operation runs on it */
    SbxMcpLocalDone done;
    gpointer data;
};

static void op_free(SbxMcpLocalOp *op)
{
    g_free(op->path);
    g_clear_pointer(&op->bytes, g_bytes_unref);
    g_free(op);
}

/* @s was used until now: idle from now unless something runs in it (or it ended). */
static void now_used(LocalSession *s)
{
    if (s->ended == NULL) {
        sbx_session_clock_used(&s->clock, s->ready && !s->running && s->op == NULL);
    }
}

/* @op ends with @o: its session forgets it, the caller hears, it is freed. */
static void op_finish(SbxMcpLocalOp *op, const SbxMcpSessionOutcome *o)
{
    if (op->session != NULL && op->session->op == op) {
        op->session->op = NULL;
        now_used(op->session);
    }
    op->done(op->data, o);
    op_free(op);
}

static void op_fail(SbxMcpLocalOp *op, const char *code, const char *why, gboolean gone)
{
    SbxMcpSessionOutcome o = {.error_code = code, .error = why, .gone = gone};
    op_finish(op, &o);
}

/* ---- a session's end --------------------------------------------------------------------------
 */

/* The session's operation ends with @why (its channel is about to go: no callback comes). */
static void drop_op(LocalSession *s, const char *why)
{
    SbxMcpLocalOp *op = g_steal_pointer(&s->op);

    if (op == NULL) {
        return;
    }
    if (op->channel != NULL) {
        sbx_session_file_cancel(op->channel); /* its callback never runs */
    }
    op->session = NULL;
    op_fail(op, "ended", why, op->tool != SBX_MCP_TOOL_SESSION_OPEN);
}

static gboolean close_lease(gpointer data)
{
    LocalSession *s = data;

    s->end_idle = 0;
    drop_op(s, s->ended);
    sbx_exec_lease_close(s->lease); /* kills the VM; an execution on it ends on its exit */
    return G_SOURCE_REMOVE;
}

/*
 * The session's state is gone (@why): the next request on it says so. The lease is closed from
 * the loop: this may run inside one of its channel's callbacks.
 */
static void end_session(LocalSession *s, const char *status, const char *why)
{
    if (s->ended != NULL) {
        return;
    }
    s->end_status = status;
    s->ended = g_strdup(why);
    sbx_session_clock_stop(&s->clock);
    s->end_idle = g_idle_add(close_lease, s);
}

/* Idle or open for too long, as a server's session: its VM is killed (an execution in it ends),
 * and the next request on it is told the session ended, and why. */
static void on_expired(gpointer data, const char *why)
{
    end_session(data, "expired", why);
}

/* Forget @s: its operation told, its VM killed. */
static void session_free(LocalSession *s)
{
    drop_op(s, "the session was closed");
    sbx_session_clock_stop(&s->clock);
    g_clear_handle_id(&s->end_idle, g_source_remove);
    sbx_exec_lease_close(s->lease);
    sbx_exec_lease_unref(s->lease);
    g_free(s->ended);
    g_free(s->handle);
    g_free(s);
}

SbxMcpLocal *sbx_mcp_local_new(void)
{
    SbxMcpLocal *local = g_new0(SbxMcpLocal, 1);

    local->sessions =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)session_free);
    return local;
}

void sbx_mcp_local_free(SbxMcpLocal *local)
{
    if (local == NULL) {
        return;
    }
    g_hash_table_destroy(local->sessions);
    g_free(local);
}

gboolean sbx_mcp_local_has(SbxMcpLocal *local, const char *handle)
{
    return local != NULL && g_hash_table_contains(local->sessions, handle);
}

void sbx_mcp_local_close(SbxMcpLocal *local, const char *handle)
{
    g_hash_table_remove(local->sessions, handle);
}

/* ---- the lease ------------------------------------------------------------------------------ */

static void start_file_op(LocalSession *s);

static void on_ready(SbxExecLease *lease, const GError *error, gpointer data)
{
    LocalSession *s = data;
    SbxMcpLocalOp *op = s->op;
    (void)lease;

    if (error != NULL) {
        g_autofree char *why =
            g_strdup_printf("the session's VM could not be started: %s", error->message);
        end_session(s, "crashed",
                    why); /* kept, ended, until the connection ends: nobody has its handle */
        op_fail(op, "unavailable", why, FALSE);
        return;
    }
    s->ready = TRUE;
    SbxMcpSessionOutcome o = {
        .session = s->handle,
        .idle_timeout_s = s->clock.idle_timeout_s,
        .max_lifetime_s = s->clock.max_lifetime_s,
    };
    op_finish(op, &o); /* idle from now */
}

static void on_lost(SbxExecLease *lease, const char *reason, gpointer data)
{
    LocalSession *s = data;
    (void)lease;

    if (!s->running) { /* an execution's end says more: sbx_mcp_local_exec_done() */
        end_session(s, "crashed", reason);
    }
}

static void on_returned(SbxExecLease *lease, gpointer data)
{
    LocalSession *s = data;
    (void)lease;

    if (s->op != NULL && s->op->channel == NULL && s->ended == NULL) {
        start_file_op(s); /* it waited for the execution before it to give the VM back */
    }
}

static const SbxExecLeaseCallbacks lease_callbacks = {
    .ready = on_ready,
    .lost = on_lost,
    .returned = on_returned,
};

SbxMcpLocalOp *sbx_mcp_local_open(SbxMcpLocal *local, SbxExecSource *src, guint idle_timeout_s,
                                  guint max_lifetime_s, SbxMcpLocalDone done, gpointer data)
{
    LocalSession *s = g_new0(LocalSession, 1);
    SbxMcpLocalOp *op = g_new0(SbxMcpLocalOp, 1);

    s->local = local;
    s->handle = g_strdup_printf("lo_%08x%08x%08x", g_random_int(), g_random_int(), g_random_int());
    s->lease = sbx_exec_lease_new(src);
    s->op = op;
    op->session = s;
    op->tool = SBX_MCP_TOOL_SESSION_OPEN;
    op->done = done;
    op->data = data;
    g_hash_table_insert(local->sessions, s->handle, s);
    /* its lifetime runs from now, as a server's session's (its VM's start counts) */
    sbx_session_clock_start(&s->clock, idle_timeout_s, max_lifetime_s, on_expired, s);
    sbx_exec_lease_start(s->lease, &lease_callbacks, s);
    return op;
}

void sbx_mcp_local_op_cancel(SbxMcpLocalOp *op)
{
    LocalSession *s = op != NULL ? op->session : NULL;

    if (op == NULL) {
        return;
    }
    if (s != NULL) {
        s->op = NULL;
        if (op->channel != NULL && !sbx_session_file_cancel(op->channel)) {
            end_session(s, "crashed",
                        "a file operation was abandoned mid-way"); /* its channel is closed */
        }
        if (op->tool == SBX_MCP_TOOL_SESSION_OPEN) {
            g_hash_table_remove(s->local->sessions, s->handle); /* nobody has its handle */
        } else {
            now_used(s); /* idle again: its idle timeout runs */
        }
    }
    op_free(op);
}

/* ---- files ---------------------------------------------------------------------------------- */

static void on_file_done(SbxSession *channel, const SbxFileOutcome *outcome, const GError *error,
                         gpointer data)
{
    SbxMcpLocalOp *op = data;
    LocalSession *s = op->session;

    op->channel = NULL;
    if (error != NULL) {
        gboolean broken = !sbx_session_is_ready(channel);
        if (broken) {
            g_autofree char *why = g_strdup_printf("its channel broke: %s", error->message);
            end_session(s, "crashed", why);
        }
        op_fail(op, broken ? "failed" : sbx_server_session_file_error_code(error), error->message,
                broken);
        return;
    }
    gsize len = 0;
    const guint8 *bytes = outcome->data != NULL ? g_bytes_get_data(outcome->data, &len) : NULL;
    SbxMcpSessionOutcome o = {.size = outcome->size, .sha256 = outcome->sha256, .data = bytes};
    op_finish(op, &o);
}

/* The session's waiting file operation on its channel, now that nothing else has it. */
static void start_file_op(LocalSession *s)
{
    SbxMcpLocalOp *op = s->op;
    SbxSession *channel = sbx_exec_lease_session(s->lease);
    g_autoptr(GError) error = NULL;
    gboolean ok = FALSE;

    if (channel != NULL && op->tool == SBX_MCP_TOOL_FILE_WRITE) {
        ok = sbx_session_file_put_async(channel, op->path, op->bytes, on_file_done, op, &error);
    } else if (channel != NULL) {
        ok = sbx_session_file_get_async(channel, op->path, SBX_MCP_FILE_MAX, NULL, on_file_done, op,
                                        &error);
    }
    if (ok) {
        op->channel = channel;
        return;
    }
    op_fail(op, error != NULL ? sbx_server_session_file_error_code(error) : "ended",
            error != NULL ? error->message : "the session's VM is gone", error == NULL);
}

/* Why session @s cannot take a request now (a message; *@gone when it has ended), or NULL. */
static char *refusal(LocalSession *s, gboolean *gone)
{
    *gone = s->ended != NULL;
    if (s->ended != NULL) {
        return g_strdup_printf("the session has ended (%s): %s", s->end_status, s->ended);
    }
    if (!s->ready || s->running || s->op != NULL) {
        return g_strdup("the session is busy (one execution or file operation at a time)");
    }
    return NULL;
}

static SbxMcpLocalOp *file_op(SbxMcpLocal *local, const char *handle, SbxMcpTool tool,
                              const char *path, GBytes *bytes, SbxMcpLocalDone done, gpointer data)
{
    LocalSession *s = g_hash_table_lookup(local->sessions, handle);
    SbxMcpLocalOp *op = g_new0(SbxMcpLocalOp, 1);
    gboolean gone = FALSE;

    op->tool = tool;
    op->path = g_strdup(path);
    op->bytes = bytes;
    op->done = done;
    op->data = data;
    g_autofree char *why = s != NULL ? refusal(s, &gone) : g_strdup("no such session");
    if (why != NULL) {
        op_fail(op, gone ? "ended" : s != NULL ? "busy" : "not_found", why, gone || s == NULL);
        return NULL;
    }
    op->session = s;
    s->op = op;
    sbx_session_clock_busy(&s->clock);
    if (!sbx_exec_lease_lent(s->lease)) {
        start_file_op(s);
    } /* else: once the execution before it gave the VM back (on_returned) */
    return s->op == op ? op : NULL;
}

SbxMcpLocalOp *sbx_mcp_local_write(SbxMcpLocal *local, const char *handle, const char *path,
                                   const guint8 *bytes, gsize len, SbxMcpLocalDone done,
                                   gpointer data)
{
    return file_op(local, handle, SBX_MCP_TOOL_FILE_WRITE, path, g_bytes_new(bytes, len), done,
                   data);
}

SbxMcpLocalOp *sbx_mcp_local_read(SbxMcpLocal *local, const char *handle, const char *path,
                                  SbxMcpLocalDone done, gpointer data)
{
    return file_op(local, handle, SBX_MCP_TOOL_FILE_READ, path, NULL, done, data);
}

/* ---- executions ----------------------------------------------------------------------------- */

SbxExecSource *sbx_mcp_local_lend(SbxMcpLocal *local, const char *handle, char **ret_why)
{
    LocalSession *s = g_hash_table_lookup(local->sessions, handle);
    gboolean gone = FALSE;
    char *why = s != NULL ? refusal(s, &gone) : g_strdup("no such session");

    if (why != NULL) {
        *ret_why = why;
        return NULL;
    }
    s->running = TRUE;
    sbx_session_clock_busy(&s->clock);    /* no idle time while it runs */
    return sbx_exec_lease_lend(s->lease); /* its turn once an execution before gave it back */
}

void sbx_mcp_local_exec_done(SbxMcpLocal *local, const char *handle, SbxExec *exec)
{
    LocalSession *s = g_hash_table_lookup(local->sessions, handle);
    const SbxRunResult *r = exec != NULL ? sbx_exec_result(exec) : NULL;
    if (s == NULL) {
        return; /* closed meanwhile */
    }
    s->running = FALSE;
    if (r != NULL && !r->kept) {
        g_autofree char *why = g_strdup_printf(
            "its execution ended with %s (exit code %d): the runtime and its state are gone",
            sbx_status_name(r->status), r->exit_code);
        end_session(s, "crashed", why);
    } else if (sbx_exec_lease_lost(s->lease)) {
        end_session(s, "crashed", "its VM was lost under an execution");
    }
    now_used(s);
}
