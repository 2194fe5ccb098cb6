/*
 * The session requests of `sandbox serve`'s Unix socket (docs/pool.md, "Sessions over the
 * socket"): open one (answered once its VM is ready), list, show and end the local clients'
 * sessions, and the errors of sessions.h and session-files.h as error frames. The state machine
 * is the server's (sessions.h); this file maps requests and answers. The socket is owner-only,
 * so its clients are one tenant, the local one (tenant_id NULL).
 */
#include <string.h>

#include "server/session-files.h"
#include "server/sessions.h"
#include "server/unix-private.h"

/* proto.c checks the requests against its own copy of the bounds (it stays pure). */
G_STATIC_ASSERT(SBX_SERVE_SESSION_SECONDS_MAX == SBX_SERVER_SESSION_IDLE_MAX_S);
G_STATIC_ASSERT(SBX_SERVE_SESSION_SECONDS_MAX == SBX_SERVER_SESSION_LIFETIME_MAX_S);

/* ---- errors ---------------------------------------------------------------------------------- */

void sbx_unix_conn_send_session_error(UnixConn *conn, const GError *error)
{
    sbx_unix_conn_send_error(conn, sbx_server_session_error_code(error), error->message);
}

SbxServerSession *sbx_unix_session_find(UnixConn *conn, const char *id)
{
    SbxServerSession *s = sbx_server_session_find(sbx_unix_conn_server(conn), NULL, id);

    if (s == NULL) {
        g_autofree char *why =
            g_strdup_printf("no session \"%s\" (ended long ago, or never opened here)", id);
        sbx_unix_conn_send_error(conn, "not_found", why);
    }
    return s;
}

/* ---- the session as the socket shows it ------------------------------------------------------ */

/* @reason cut to at most @max bytes at a character's start, with "..." when cut (new string). */
static char *cut_reason(const char *reason, gsize max)
{
    gsize len = reason != NULL ? strlen(reason) : 0;

    if (reason == NULL || len <= max) {
        return g_strdup(reason);
    }
    const char *end = reason + max;
    while (end > reason && (*end & 0xc0) == 0x80) {
        end--; /* not inside a UTF-8 sequence */
    }
    return g_strdup_printf("%.*s...", (int)(end - reason), reason);
}

/* @s as a message's session (strings borrowed from it, but end_reason: freed by the caller). */
static void session_view(SbxServerSession *s, gboolean listed, SbxServeSession *out)
{
    SbxServerSessionInfo i;

    sbx_server_session_info(s, &i);
    *out = (SbxServeSession){
        .id = (char *)i.id,
        .status = (char *)i.state,
        .profile = (char *)i.profile,
        .created_ms = i.created_ms,
        .last_active_ms = i.last_active_ms,
        .expires_ms = i.expires_ms,
        .ended_ms = i.ended_ms,
        .idle_timeout_s = i.idle_timeout_s,
        .max_lifetime_s = i.max_lifetime_s,
        .executions = i.executions,
        .memory_mib = i.memory_mib,
        .current_execution = (char *)i.current_execution,
        .end_status = (char *)i.end_status,
        .end_reason =
            cut_reason(i.end_reason, listed ? SBX_SERVE_SESSION_REASON_LISTED : G_MAXSIZE),
        .qemu_pid = sbx_server_session_qemu_pid(s),
    };
}

static void send_session(UnixConn *conn, SbxServerSession *s)
{
    SbxServeSession view;
    SbxServeMsg m = {.type = SBX_SERVE_MSG_SESSION, .sessions = &view, .n_sessions = 1};

    session_view(s, FALSE, &view);
    sbx_unix_conn_send_msg(conn, &m);
    g_free(view.end_reason);
}

/* ---- the requests ---------------------------------------------------------------------------- */

/* A session being opened: its answer waits for its VM. */
typedef struct {
    UnixOp op;
} Opening;

static void on_ready(SbxServerSession *s, const GError *error, gpointer data)
{
    Opening *o = data;

    if (o->op.conn == NULL) {
        if (error == NULL) { /* nobody learnt its id: nobody could use it */
            sbx_server_session_end(s, "deleted",
                                   "the client went away before its session was ready");
        }
    } else if (error != NULL) {
        sbx_unix_conn_send_session_error(o->op.conn, error);
    } else {
        send_session(o->op.conn, s);
    }
    sbx_unix_conn_op_end(&o->op);
    g_free(o);
}

static void open_session(UnixConn *conn, const SbxServeSessionNew *req)
{
    SbxServer *srv = sbx_unix_conn_server(conn);
    g_autoptr(GError) error = NULL;
    guint profile = 0;

    if (req->profile_not_name || !sbx_server_find_profile(srv, req->profile, &profile)) {
        sbx_unix_conn_send_error(conn, "unavailable", "this server does not pool that profile");
        return;
    }
    SbxServerSessionRequest sreq = {
        .profile = profile,
        .tenant_id = NULL,
        .front_end = "serve",
        .idle_timeout_s = req->idle_timeout_s,
        .max_lifetime_s = req->max_lifetime_s,
    };
    Opening *o = g_new0(Opening, 1);
    /* the server holds its own reference until the session ended */
    g_autoptr(SbxServerSession) s = sbx_server_session_new(srv, &sreq, on_ready, o, &error);
    if (s == NULL) {
        g_free(o);
        sbx_unix_conn_send_session_error(conn, error);
        return;
    }
    sbx_unix_conn_op_begin(conn, &o->op); /* its ready comes from the loop, never from new */
}

static void list_sessions(UnixConn *conn)
{
    g_autoptr(GPtrArray) all = sbx_server_sessions_list(sbx_unix_conn_server(conn), NULL);
    guint n = MIN(all->len, SBX_SERVE_SESSIONS_LISTED_MAX); /* newest first */
    g_autofree SbxServeSession *views = g_new0(SbxServeSession, n + 1);
    SbxServeMsg m = {.type = SBX_SERVE_MSG_SESSIONS, .sessions = views, .n_sessions = n};

    for (guint i = 0; i < n; i++) {
        session_view(all->pdata[i], TRUE, &views[i]);
    }
    sbx_unix_conn_send_msg(conn, &m);
    for (guint i = 0; i < n; i++) {
        g_free(views[i].end_reason);
    }
}

gboolean sbx_unix_session_message(UnixConn *conn, const SbxServeRequest *req)
{
    SbxServerSession *s;

    switch (req->type) {
    case SBX_SERVE_REQ_SESSION_NEW: /* checked by unix.c: none in flight, good fields */
        open_session(conn, &req->session_new);
        return TRUE;
    case SBX_SERVE_REQ_SESSION_LIST:
        list_sessions(conn);
        return TRUE;
    case SBX_SERVE_REQ_SESSION_SHOW:
    case SBX_SERVE_REQ_SESSION_END:
        if (req->bad != NULL) {
            sbx_unix_conn_send_error(conn, "bad_request", req->bad);
        } else if ((s = sbx_unix_session_find(conn, req->id)) != NULL) {
            if (req->type == SBX_SERVE_REQ_SESSION_END) {
                /* its VM killed; an execution in it ends, its client hears why */
                sbx_server_session_end(s, "deleted", "deleted by the client");
            }
            send_session(conn, s);
        }
        return TRUE;
    default:
        return FALSE;
    }
}
