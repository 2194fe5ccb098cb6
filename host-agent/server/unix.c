/*
 * The Unix socket front end of `sandbox serve` (unix.h, docs/pool.md): the socket, the client
 * connections and their frames, the status answer. unix-run.c runs one request;
 * unix-approvals.c answers the approval requests, unix-sessions.c the sessions', unix-files.c
 * those of their files.
 *
 * Everything a client sends is untrusted: frames are bounded, a frame that does not parse
 * closes the connection, one request runs per connection, connections are bounded.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib-unix.h>

#include "protocol/frame.h"
#include "protocol/limits.h"
#include "server/path.h"
#include "server/unix-private.h"

struct UnixConn {
    SbxUnixFront *front;
    int fd;
    guint in_source;
    guint out_source;
    SbxFrameReader reader;
    GByteArray *out;        /* encoded frames not yet written */
    UnixRun *run;           /* the run in flight, or NULL */
    UnixOp *op;             /* or the request in flight whose answer comes later, or NULL */
    UnixTransfer *transfer; /* a file in transit (a put's pieces, a got file), or NULL */
    guint detach_source;    /* ends the run of a client too slow to read (from the loop) */
    pid_t peer_pid;         /* the client process (SO_PEERCRED), 0 if unknown */
    gboolean close_after_flush;
};

struct SbxUnixFront {
    SbxServer *srv;
    char *socket_path;
    char *socket_dir;
    gboolean made_dir;
    int listen_fd;
    guint listen_source;
    GList *conns;           /* UnixConn* */
    guint64 transfers_held; /* bytes the connections' transfers hold together */
    guint approvals_watch;  /* the server's approvals, told to the runs that asked */
};

SbxServer *sbx_unix_conn_server(UnixConn *conn)
{
    return conn->front->srv;
}

/* ---- connections ---------------------------------------------------------------------- */

static void conn_free(UnixConn *conn);

/* End @conn's run without it: the run's job finishes on its own (VM killed, tools reaped). */
static void abandon_run(UnixConn *conn, const char *why)
{
    UnixRun *run = conn->run;

    conn->run = NULL;
    if (run != NULL) {
        sbx_unix_run_abandon(run, why);
    }
}

static gboolean abandon_idle(gpointer data)
{
    UnixConn *conn = data;

    conn->detach_source = 0;
    abandon_run(conn, "the client does not read its output");
    return G_SOURCE_REMOVE;
}

static gboolean on_writable(gint fd, GIOCondition cond, gpointer data)
{
    UnixConn *conn = data;
    (void)cond;

    while (conn->out->len > 0) {
        ssize_t n = send(fd, conn->out->data, conn->out->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return G_SOURCE_CONTINUE;
        }
        if (n < 0) {
            conn->out_source = 0;
            conn_free(conn); /* the client is gone */
            return G_SOURCE_REMOVE;
        }
        g_byte_array_remove_range(conn->out, 0, n);
    }
    conn->out_source = 0;
    if (conn->close_after_flush) {
        conn_free(conn);
    }
    return G_SOURCE_REMOVE;
}

static void conn_flush_later(UnixConn *conn)
{
    if (conn->out_source == 0) {
        conn->out_source = g_unix_fd_add(conn->fd, G_IO_OUT, on_writable, conn);
    }
}

GPid sbx_unix_conn_peer_pid(UnixConn *conn)
{
    return conn->peer_pid;
}

char *sbx_unix_conn_origin(UnixConn *conn)
{
    return conn != NULL && conn->peer_pid > 0
               ? g_strdup_printf("sandbox run, pid %d", (int)conn->peer_pid)
               : NULL;
}

gboolean sbx_unix_conn_send(UnixConn *conn, const char *json, gsize len)
{
    g_autofree guint8 *frame = NULL;
    gsize flen;

    if (conn->close_after_flush) {
        return FALSE;
    }
    if (sbx_frame_encode(json, len, &frame, &flen) < 0 ||
        conn->out->len + flen > SBX_UNIX_WRITE_QUEUE_MAX) {
        /*
         * Too slow a client: end its run and drop it once what is queued went out. The run
         * is ended from the loop: this may be called from inside its session's callback.
         */
        conn->close_after_flush = TRUE;
        if (conn->detach_source == 0) {
            conn->detach_source = g_idle_add(abandon_idle, conn);
        }
        conn_flush_later(conn);
        return FALSE;
    }
    gsize sent = 0;
    if (conn->out->len == 0) {
        /* Straight out when nothing waits (the done frame goes before the VM's reaping). */
        ssize_t n = send(conn->fd, frame, flen, MSG_NOSIGNAL | MSG_DONTWAIT);
        sent = n > 0 ? (gsize)n : 0;
    }
    if (sent < flen) {
        g_byte_array_append(conn->out, frame + sent, flen - sent);
        conn_flush_later(conn);
    }
    return TRUE;
}

void sbx_unix_conn_send_msg(UnixConn *conn, const SbxServeMsg *msg)
{
    g_autofree char *json = sbx_serve_proto_msg_encode(msg);

    sbx_unix_conn_send(conn, json, strlen(json));
}

void sbx_unix_conn_send_error(UnixConn *conn, const char *code, const char *message)
{
    SbxServeMsg m = {.type = SBX_SERVE_MSG_ERROR, .code = (char *)code, .message = (char *)message};

    sbx_unix_conn_send_msg(conn, &m);
}

void sbx_unix_conn_run_over(UnixConn *conn)
{
    conn->run = NULL;
}

gboolean sbx_unix_conn_busy(UnixConn *conn)
{
    return conn->run != NULL || conn->op != NULL;
}

void sbx_unix_conn_op_begin(UnixConn *conn, UnixOp *op)
{
    g_assert(!sbx_unix_conn_busy(conn));
    op->conn = conn;
    conn->op = op;
}

void sbx_unix_conn_op_end(UnixOp *op)
{
    if (op->conn != NULL) {
        op->conn->op = NULL;
        op->conn = NULL;
    }
}

UnixTransfer **sbx_unix_conn_transfer(UnixConn *conn)
{
    return &conn->transfer;
}

guint64 *sbx_unix_conn_transfers_held(UnixConn *conn)
{
    return &conn->front->transfers_held;
}

/* ---- requests ------------------------------------------------------------------------- */

/* Requests answered later (a run's done, a session's start, a file operation's end). */
static gboolean answered_later(SbxServeRequestType type)
{
    return type == SBX_SERVE_REQ_RUN || type == SBX_SERVE_REQ_SESSION_NEW ||
           type == SBX_SERVE_REQ_FILE_PUT || type == SBX_SERVE_REQ_FILE_GET ||
           type == SBX_SERVE_REQ_FILE_LIST || type == SBX_SERVE_REQ_FILE_DELETE;
}

/* Such a request may start: none in flight on @conn, the server not stopping, its fields good. */
static gboolean may_start(UnixConn *conn, const SbxServeRequest *req)
{
    if (sbx_unix_conn_busy(conn)) {
        sbx_unix_conn_send_error(conn, "bad_request", "one request at a time per connection");
        return FALSE;
    }
    if (sbx_server_stopping(conn->front->srv)) {
        sbx_unix_conn_send_error(conn, "unavailable", "the server is shutting down");
        return FALSE;
    }
    if (req->bad != NULL) {
        sbx_unix_conn_send_error(conn, "bad_request", req->bad);
        return FALSE;
    }
    return TRUE;
}

/* Every pooled profile's pool, the default first (docs/pool.md, "Client protocol"). */
static void handle_status(UnixConn *conn)
{
    SbxServer *srv = conn->front->srv;
    guint n = sbx_server_n_profiles(srv);
    SbxServerProfileState st[SBX_SERVER_PROFILES_MAX] = {0};
    SbxServeProfileStatus ps[SBX_SERVER_PROFILES_MAX] = {0};
    SbxServeMsg m = {.type = SBX_SERVE_MSG_STATUS, .status = ps, .n_status = n};

    if (sbx_server_stopping(srv)) { /* the pools are gone; a connection may live on a while */
        sbx_unix_conn_send_error(conn, "unavailable", "the server is shutting down");
        return;
    }
    for (guint i = 0; i < n; i++) {
        sbx_server_profile_state(srv, i, &st[i]);
        ps[i] = (SbxServeProfileStatus){
            .name = (char *)sbx_server_profile_name(srv, i),
            .pool_size = st[i].pool_size,
            .ready = st[i].pool.ready,
            .starting = st[i].pool.starting,
            .waiting = st[i].pool.waiting,
            .running = st[i].running,
            .prestart = st[i].prestart,
            .started_total = st[i].pool.started_total,
            .failed_total = st[i].pool.failed_total,
            .dropped_total = st[i].pool.dropped_total,
            .claimed_total = st[i].pool.claimed_total,
            .ready_pids = st[i].ready_pids,
            .running_pids = st[i].running_pids,
            .prestarted_pids = st[i].prestarted_pids,
            .session_pids = st[i].session_pids,
            .sessions = st[i].sessions,
        };
    }
    sbx_unix_conn_send_msg(conn, &m);
    for (guint i = 0; i < n; i++) {
        sbx_server_profile_state_clear(&st[i]);
    }
}

/* One frame from the client. FALSE: it broke the protocol, drop it. */
static gboolean handle_frame(UnixConn *conn, const char *payload, gsize len)
{
    g_auto(SbxServeRequest) req = {0};

    if (!sbx_serve_proto_request_decode(payload, len, &req)) {
        return FALSE;
    }
    if (answered_later(req.type) && !may_start(conn, &req)) {
        /* refused */
    } else if (req.type == SBX_SERVE_REQ_RUN) {
        conn->run = sbx_unix_run_start(conn, &req.run);
    } else if (req.type == SBX_SERVE_REQ_STATUS) {
        handle_status(conn);
    } else if (sbx_unix_approval_message(conn, sbx_server_approvals(conn->front->srv), &req) ||
               sbx_unix_session_message(conn, &req) || sbx_unix_file_message(conn, &req)) {
        /* answered, or to be */
    } else {
        sbx_unix_conn_send_error(conn, "bad_request", req.bad);
    }
    return TRUE;
}

static gboolean on_readable(gint fd, GIOCondition cond, gpointer data)
{
    UnixConn *conn = data;
    guint8 buf[64 * 1024];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    (void)cond;

    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return G_SOURCE_CONTINUE;
    }
    for (gsize off = 0; n > 0 && off < (gsize)n;) {
        char *payload = NULL;
        size_t plen = 0;
        ssize_t used = sbx_frame_reader_feed(&conn->reader, buf + off, n - off, &payload, &plen);
        gboolean ok = used >= 0 && (payload == NULL || handle_frame(conn, payload, plen));
        free(payload);
        if (!ok) {
            n = -1;
            break;
        }
        off += used;
    }
    if (n <= 0) {
        conn->in_source = 0;
        conn_free(conn); /* EOF, error or a broken frame: the client is gone */
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static void conn_free(UnixConn *conn)
{
    SbxUnixFront *front = conn->front;

    front->conns = g_list_remove(front->conns, conn);
    abandon_run(conn, "the client went away");
    if (conn->op != NULL) {
        conn->op->conn = NULL; /* it ends on its own (a session being opened is ended then) */
        conn->op = NULL;
    }
    sbx_unix_transfer_free(g_steal_pointer(&conn->transfer));
    g_clear_handle_id(&conn->in_source, g_source_remove);
    g_clear_handle_id(&conn->out_source, g_source_remove);
    g_clear_handle_id(&conn->detach_source, g_source_remove);
    close(conn->fd);
    sbx_frame_reader_clear(&conn->reader);
    g_byte_array_unref(conn->out);
    g_free(conn);
}

static gboolean on_accept(gint fd, GIOCondition cond, gpointer data)
{
    SbxUnixFront *front = data;
    int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    (void)cond;

    if (cfd < 0) {
        return G_SOURCE_CONTINUE;
    }
    if (g_list_length(front->conns) >= SBX_UNIX_CONNECTIONS_MAX) {
        close(cfd);
        return G_SOURCE_CONTINUE;
    }
    UnixConn *conn = g_new0(UnixConn, 1);
    struct ucred cred = {0};
    socklen_t cred_len = sizeof(cred);
    conn->front = front;
    conn->fd = cfd;
    if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0) {
        conn->peer_pid = cred.pid;
    }
    conn->out = g_byte_array_new();
    sbx_frame_reader_init(&conn->reader, SBX_FRAME_MAX);
    conn->in_source = g_unix_fd_add(cfd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_readable, conn);
    front->conns = g_list_prepend(front->conns, conn);
    return G_SOURCE_CONTINUE;
}

/* ---- the socket ----------------------------------------------------------------------- */

/* The socket's directory: made 0700 if missing, else it must already be ours alone. */
static gboolean prepare_dir(SbxUnixFront *front, GError **error)
{
    front->socket_dir = g_path_get_dirname(front->socket_path);
    if (mkdir(front->socket_dir, 0700) == 0) {
        front->made_dir = TRUE;
    } else if (errno != EEXIST) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "mkdir `%s`: %s",
                    front->socket_dir, g_strerror(errno));
        return FALSE;
    }
    return sbx_serve_check_dir(front->socket_dir, error);
}

/* A socket file left by a dead server is removed; a live server is an error. */
static gboolean clear_stale_socket(const struct sockaddr_un *addr, GError **error)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int r = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));

    close(fd);
    if (r == 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_ADDRESS_IN_USE,
                    "another `sandbox serve` listens on %s", addr->sun_path);
        return FALSE;
    }
    if (unlink(addr->sun_path) < 0 && errno != ENOENT) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "unlink `%s`: %s",
                    addr->sun_path, g_strerror(errno));
        return FALSE;
    }
    return TRUE;
}

static gboolean listen_socket(SbxUnixFront *front, GError **error)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};

    if (strlen(front->socket_path) >= sizeof(addr.sun_path)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_FILENAME_TOO_LONG, "socket path too long: %s",
                    front->socket_path);
        return FALSE;
    }
    strcpy(addr.sun_path, front->socket_path);
    if (!prepare_dir(front, error) || !clear_stale_socket(&addr, error)) {
        return FALSE;
    }
    front->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    /* 0600 from the start (umask), not chmod'ed after bind: no window where others connect. */
    mode_t old = umask(0177);
    int r = bind(front->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (r < 0 || listen(front->listen_fd, SBX_UNIX_BACKLOG) < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "listen on `%s`: %s",
                    front->socket_path, g_strerror(errno));
        return FALSE;
    }
    front->listen_source = g_unix_fd_add(front->listen_fd, G_IO_IN, on_accept, front);
    return TRUE;
}

/* The server's approvals changed: each run that asked is told its own (unix-approvals.c). */
static void on_approvals_changed(SbxApprovals *approvals, gpointer data)
{
    SbxUnixFront *front = data;

    for (GList *l = front->conns; l != NULL; l = l->next) {
        UnixConn *conn = l->data;
        if (conn->run != NULL) {
            sbx_unix_run_approvals_changed(conn->run, approvals);
        }
    }
}

SbxUnixFront *sbx_unix_front_new(SbxServer *srv, const char *socket_path, GError **error)
{
    SbxUnixFront *front = g_new0(SbxUnixFront, 1);

    front->srv = srv;
    front->listen_fd = -1;
    front->socket_path = g_strdup(socket_path);
    if (!listen_socket(front, error)) {
        sbx_unix_front_free(front);
        return NULL;
    }
    front->approvals_watch =
        sbx_approvals_watch(sbx_server_approvals(srv), on_approvals_changed, front);
    return front;
}

void sbx_unix_front_close(SbxUnixFront *front)
{
    g_clear_handle_id(&front->listen_source, g_source_remove);
    if (front->listen_fd >= 0) {
        close(front->listen_fd);
        front->listen_fd = -1;
        unlink(front->socket_path);
        if (front->made_dir) {
            rmdir(front->socket_dir);
        }
    }
}

void sbx_unix_front_free(SbxUnixFront *front)
{
    if (front == NULL) {
        return;
    }
    sbx_unix_front_close(front);
    sbx_approvals_unwatch(sbx_server_approvals(front->srv), front->approvals_watch);
    while (front->conns != NULL) {
        conn_free(front->conns->data);
    }
    g_free(front->socket_path);
    g_free(front->socket_dir);
    g_free(front);
}
