/*
 * `sandbox serve [--socket PATH] [--pool N] [--profile NAME]...`: a long-lived host agent that
 * keeps a warm pool of restored VMs per machine profile and runs `sandbox run`'s requests on
 * them, over a Unix socket only its owner can reach (docs/pool.md). This file: options, the
 * socket, the client connections and their frames, the pools, shutdown. serve-run.c runs one
 * request.
 *
 * Everything a client sends is untrusted: frames are bounded, a frame that does not parse
 * closes the connection, one request runs per connection, connections are bounded.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib-unix.h>

#include "cli/serve-proto.h"
#include "cli/serve.h"
#include "prestart.h"
#include "protocol/frame.h"
#include "protocol/limits.h"

/* Default pool size: two ready VMs cover back-to-back requests while a third restores. */
#define SERVE_POOL_DEFAULT 2

/*
 * Largest sum of the pools' sizes over all the profiles: each pooled VM holds ~117 MB of RAM
 * copy plus QEMU's own memory, whichever profile it is of.
 */
#define SERVE_POOL_MAX 32

/*
 * Profiles pooled at once (--profile given several times). Each has its own pool, pre-started
 * QEMUs and snapshot (made at start if missing: ~10-20 s each under TCG), and its pool's
 * restores run besides the others' (two at a time each); 4 covers the shipped profiles that
 * restore here, while the totals of --pool and --prestart stay under their caps.
 */
#define SERVE_PROFILES_MAX 4

/*
 * Default pre-started QEMUs: one covers the restore of a burst's or an empty pool's first
 * request; more hold more memory (a RAM copy each) for a rarer case.
 */
#define SERVE_PRESTART_DEFAULT 1

/*
 * The pool's refill after a claim waits this long (unless a claim waits): a restore (QEMU's
 * start, the RAM copy, the guest's warm-up) right away would take a core from the execution
 * just claimed; 300 ms covers a short one (console.log(1) is ~100-150 ms under TCG).
 */
#define SERVE_REFILL_DELAY_MS 300

/*
 * The restore default (as for `sandbox run`): virtio-serial, in the snapshot with copy-on-write
 * RAM (docs/snapshot.md "Channel attachments"). The pool of a server started without --profile.
 */
#define SERVE_PROFILE_DEFAULT "q35-serial"

/* A shutdown waits at most this long for runs to end (they were aborted: milliseconds). */
#define SERVE_SHUTDOWN_GRACE_MS 5000

struct ServeConn {
    Serve *srv;
    int fd;
    guint in_source;
    guint out_source;
    SbxFrameReader reader;
    GByteArray *out;     /* encoded frames not yet written */
    ServeRun *run;       /* the request in flight, or NULL */
    guint detach_source; /* ends the run of a client too slow to read (from the loop) */
    gboolean queued;     /* run waits for a slot */
    pid_t peer_pid;      /* the client process (SO_PEERCRED), 0 if unknown */
    gboolean close_after_flush;
};

/* One pooled profile: its image, snapshot, factory of VMs and pool. */
typedef struct {
    SbxProfile *profile;
    SbxImage *image; /* the profile's (sbx_image_open_for): profiles may run different images */
    SbxSnapshot *snapshot;
    SbxPoolVmFactory *factory;
    SbxPool *pool;
    guint pool_size; /* VMs kept ready (--pool) */
    guint prestart;  /* QEMUs kept started (--prestart) */
    guint running;   /* runs of this profile started and not finished */
} ServeProfile;

struct Serve {
    SbxCli *cli;
    char *socket_opt;
    char **profile_names; /* --profile, in order; NULL: SERVE_PROFILE_DEFAULT */
    char **pool_opts;     /* --pool N (every profile) and --pool NAME=N (one), as given */
    char **prestart_opts; /* --prestart, the same way */
    /* Per profile, in the order of pooled_names(), from the two above. */
    guint pool_sizes[SERVE_PROFILES_MAX];
    guint prestarts[SERVE_PROFILES_MAX];
    gboolean no_warm_up;
    char *socket_path;
    char *socket_dir;
    gboolean made_dir;
    int listen_fd;
    guint listen_source;
    ServeProfile profiles[SERVE_PROFILES_MAX]; /* [0]: for requests without a profile */
    guint n_profiles;
    GList *conns;   /* ServeConn* */
    GQueue waiting; /* ServeConn* whose run waits for a slot */
    GList *runs;    /* every ServeRun, also those whose client is gone */
    guint running;  /* runs started and not finished */
    gboolean stopping;
    guint grace_source;
    SbxApprovals *approvals; /* tool calls of every run waiting for a person's answer */
};

static Serve *serve_ctx;

SbxPool *sbx_serve_pool(Serve *srv, guint profile)
{
    g_assert(profile < srv->n_profiles);
    return srv->profiles[profile].pool;
}

SbxApprovals *sbx_serve_approvals(Serve *srv)
{
    return srv->approvals;
}

/* ---- connections ---------------------------------------------------------------------- */

static void conn_free(ServeConn *conn);
static void maybe_quit(Serve *srv);

/* End @conn's run without it: the run finishes on its own (VM killed, tools reaped). */
static void detach_run(ServeConn *conn, const char *why)
{
    ServeRun *run = conn->run;

    conn->run = NULL;
    if (run != NULL) {
        sbx_serve_run_abort(run, why, TRUE);
    }
}

static gboolean detach_idle(gpointer data)
{
    ServeConn *conn = data;

    conn->detach_source = 0;
    detach_run(conn, "the client does not read its output");
    return G_SOURCE_REMOVE;
}

static gboolean on_writable(gint fd, GIOCondition cond, gpointer data)
{
    ServeConn *conn = data;
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

static void conn_flush_later(ServeConn *conn)
{
    if (conn->out_source == 0) {
        conn->out_source = g_unix_fd_add(conn->fd, G_IO_OUT, on_writable, conn);
    }
}

char *sbx_serve_conn_origin(ServeConn *conn)
{
    return conn != NULL && conn->peer_pid > 0
               ? g_strdup_printf("sandbox run, pid %d", (int)conn->peer_pid)
               : NULL;
}

gboolean sbx_serve_conn_send(ServeConn *conn, const char *json, gsize len)
{
    g_autofree guint8 *frame = NULL;
    gsize flen;

    if (conn->close_after_flush) {
        return FALSE;
    }
    if (sbx_frame_encode(json, len, &frame, &flen) < 0 ||
        conn->out->len + flen > SBX_SERVE_WRITE_QUEUE_MAX) {
        /*
         * Too slow a client: end its run and drop it once what is queued went out. The run
         * is ended from the loop: this may be called from inside its session's callback.
         */
        conn->close_after_flush = TRUE;
        if (conn->detach_source == 0) {
            conn->detach_source = g_idle_add(detach_idle, conn);
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

void sbx_serve_conn_send_msg(ServeConn *conn, const SbxServeMsg *msg)
{
    g_autofree char *json = sbx_serve_proto_msg_encode(msg);

    sbx_serve_conn_send(conn, json, strlen(json));
}

static void send_error(ServeConn *conn, const char *code, const char *message)
{
    SbxServeMsg m = {.type = SBX_SERVE_MSG_ERROR, .code = (char *)code, .message = (char *)message};

    sbx_serve_conn_send_msg(conn, &m);
}

/* ---- requests ------------------------------------------------------------------------- */

static void start_waiting(Serve *srv)
{
    ServeConn *conn;

    while (!srv->stopping && srv->running < SBX_SERVE_RUNNING_MAX &&
           (conn = g_queue_pop_head(&srv->waiting)) != NULL) {
        conn->queued = FALSE;
        srv->running++;
        srv->profiles[sbx_serve_run_profile(conn->run)].running++;
        sbx_serve_run_start(conn->run);
    }
}

void sbx_serve_run_finished(Serve *srv, ServeConn *conn, ServeRun *run)
{
    ServeProfile *sp = &srv->profiles[sbx_serve_run_profile(run)];

    g_assert(srv->running > 0 && sp->running > 0);
    srv->running--;
    sp->running--;
    if (conn != NULL) {
        conn->run = NULL;
    }
    srv->runs = g_list_remove(srv->runs, run);
    sbx_serve_run_free(run);
    start_waiting(srv);
    maybe_quit(srv);
}

/* The index of the pooled profile @name in @index; FALSE if it is not pooled. */
static gboolean find_profile(Serve *srv, const char *name, guint *index)
{
    for (guint i = 0; i < srv->n_profiles; i++) {
        if (strcmp(name, sbx_profile_name(srv->profiles[i].profile)) == 0) {
            *index = i;
            return TRUE;
        }
    }
    return FALSE;
}

/* A `run` request (decoded by serve-proto.c; its strings are taken). */
static void handle_run(ServeConn *conn, SbxServeRun *run, const char *bad)
{
    Serve *srv = conn->srv;
    ServeRunRequest req = {0};

    if (conn->run != NULL) {
        send_error(conn, "bad_request", "one request at a time per connection");
        return;
    }
    if (srv->stopping) {
        send_error(conn, "unavailable", "the server is shutting down");
        return;
    }
    if (bad != NULL) {
        send_error(conn, "bad_request", bad);
        return;
    }
    if (run->profile_not_name ||
        (run->profile != NULL && !find_profile(srv, run->profile, &req.profile))) {
        send_error(conn, "unavailable", "this server does not pool that profile");
        return;
    }
    req.language = run->language;
    req.code = g_steal_pointer(&run->code);
    req.tools_path = g_steal_pointer(&run->tools_path);
    req.timeout_ms = run->timeout_ms;
    req.output_limit = run->output_limit;
    req.collect = run->collect;
    conn->run = sbx_serve_run_new(srv, conn, &req);
    srv->runs = g_list_prepend(srv->runs, conn->run);
    conn->queued = TRUE;
    g_queue_push_tail(&srv->waiting, conn);
    start_waiting(srv);
}

/* The QEMU PIDs of @sp's VMs: pooled (ready) and running an execution. */
static void profile_pids(Serve *srv, ServeProfile *sp, GArray *ready, GArray *running)
{
    g_autoptr(GPtrArray) vms = sbx_pool_ready_vms(sp->pool);

    for (guint i = 0; i < vms->len; i++) {
        GPid pid = sbx_pool_vm_ops.pid(vms->pdata[i], sp->factory);
        g_array_append_val(ready, pid);
    }
    for (GList *l = srv->conns; l != NULL; l = l->next) {
        ServeConn *c = l->data;
        GPid pid = c->run != NULL ? sbx_serve_run_pid(c->run) : 0;
        if (pid != 0 && &srv->profiles[sbx_serve_run_profile(c->run)] == sp) {
            g_array_append_val(running, pid);
        }
    }
}

/* One profile's pool, as the status message holds it (@st's strings are borrowed). */
static void profile_status(Serve *srv, ServeProfile *sp, SbxServeProfileStatus *st)
{
    SbxPoolStats ps;

    sbx_pool_stats(sp->pool, &ps);
    st->name = (char *)sbx_profile_name(sp->profile);
    st->pool_size = sp->pool_size;
    st->ready = ps.ready;
    st->starting = ps.starting;
    st->waiting = ps.waiting;
    st->running = sp->running;
    st->prestart = sp->prestart;
    st->started_total = ps.started_total;
    st->failed_total = ps.failed_total;
    st->dropped_total = ps.dropped_total;
    st->claimed_total = ps.claimed_total;
    st->ready_pids = g_array_new(FALSE, FALSE, sizeof(GPid));
    st->running_pids = g_array_new(FALSE, FALSE, sizeof(GPid));
    st->prestarted_pids = sbx_pool_vm_factory_prestart_pids(sp->factory);
    profile_pids(srv, sp, st->ready_pids, st->running_pids);
}

/* Every pooled profile's pool, the default first (docs/pool.md, "Client protocol"). */
static void handle_status(ServeConn *conn)
{
    Serve *srv = conn->srv;
    SbxServeProfileStatus st[SERVE_PROFILES_MAX] = {0};
    SbxServeMsg m = {.type = SBX_SERVE_MSG_STATUS, .status = st, .n_status = srv->n_profiles};

    if (srv->stopping) { /* the pools are gone; a connection may live on for the grace */
        send_error(conn, "unavailable", "the server is shutting down");
        return;
    }
    for (guint i = 0; i < srv->n_profiles; i++) {
        profile_status(srv, &srv->profiles[i], &st[i]);
    }
    sbx_serve_conn_send_msg(conn, &m);
    for (guint i = 0; i < srv->n_profiles; i++) {
        g_array_unref(st[i].ready_pids);
        g_array_unref(st[i].running_pids);
        g_array_unref(st[i].prestarted_pids);
    }
}

/* One frame from the client. FALSE: it broke the protocol, drop it. */
static gboolean handle_frame(ServeConn *conn, const char *payload, gsize len)
{
    g_auto(SbxServeRequest) req = {0};

    if (!sbx_serve_proto_request_decode(payload, len, &req)) {
        return FALSE;
    }
    if (req.type == SBX_SERVE_REQ_RUN) {
        handle_run(conn, &req.run, req.bad);
    } else if (req.type == SBX_SERVE_REQ_STATUS) {
        handle_status(conn);
    } else if (sbx_serve_approval_message(conn, conn->srv->approvals, &req)) {
        /* answered */
    } else {
        send_error(conn, "bad_request", req.bad);
    }
    return TRUE;
}

static gboolean on_readable(gint fd, GIOCondition cond, gpointer data)
{
    ServeConn *conn = data;
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

static void conn_free(ServeConn *conn)
{
    Serve *srv = conn->srv;

    srv->conns = g_list_remove(srv->conns, conn);
    if (conn->queued) {
        g_queue_remove(&srv->waiting, conn);
        srv->runs = g_list_remove(srv->runs, conn->run);
        sbx_serve_run_free(conn->run);
        conn->run = NULL;
    } else {
        detach_run(conn, "the client went away");
    }
    g_clear_handle_id(&conn->in_source, g_source_remove);
    g_clear_handle_id(&conn->out_source, g_source_remove);
    g_clear_handle_id(&conn->detach_source, g_source_remove);
    close(conn->fd);
    sbx_frame_reader_clear(&conn->reader);
    g_byte_array_unref(conn->out);
    g_free(conn);
    maybe_quit(srv);
}

static gboolean on_accept(gint fd, GIOCondition cond, gpointer data)
{
    Serve *srv = data;
    int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    (void)cond;

    if (cfd < 0) {
        return G_SOURCE_CONTINUE;
    }
    if (g_list_length(srv->conns) >= SBX_SERVE_CONNECTIONS_MAX) {
        close(cfd);
        return G_SOURCE_CONTINUE;
    }
    ServeConn *conn = g_new0(ServeConn, 1);
    struct ucred cred = {0};
    socklen_t cred_len = sizeof(cred);
    conn->srv = srv;
    conn->fd = cfd;
    if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0) {
        conn->peer_pid = cred.pid;
    }
    conn->out = g_byte_array_new();
    sbx_frame_reader_init(&conn->reader, SBX_FRAME_MAX);
    conn->in_source = g_unix_fd_add(cfd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_readable, conn);
    srv->conns = g_list_prepend(srv->conns, conn);
    return G_SOURCE_CONTINUE;
}

/* ---- the socket ----------------------------------------------------------------------- */

/* The socket's directory: made 0700 if missing, else it must already be ours alone. */
static gboolean prepare_dir(Serve *srv, GError **error)
{
    srv->socket_dir = g_path_get_dirname(srv->socket_path);
    if (mkdir(srv->socket_dir, 0700) == 0) {
        srv->made_dir = TRUE;
    } else if (errno != EEXIST) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "mkdir `%s`: %s",
                    srv->socket_dir, g_strerror(errno));
        return FALSE;
    }
    return sbx_serve_check_dir(srv->socket_dir, error);
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

static gboolean listen_socket(Serve *srv, GError **error)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};

    if (strlen(srv->socket_path) >= sizeof(addr.sun_path)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_FILENAME_TOO_LONG, "socket path too long: %s",
                    srv->socket_path);
        return FALSE;
    }
    strcpy(addr.sun_path, srv->socket_path);
    if (!prepare_dir(srv, error) || !clear_stale_socket(&addr, error)) {
        return FALSE;
    }
    srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    /* 0600 from the start (umask), not chmod'ed after bind: no window where others connect. */
    mode_t old = umask(0177);
    int r = bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
    umask(old);
    if (r < 0 || listen(srv->listen_fd, SBX_SERVE_BACKLOG) < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "listen on `%s`: %s",
                    srv->socket_path, g_strerror(errno));
        return FALSE;
    }
    srv->listen_source = g_unix_fd_add(srv->listen_fd, G_IO_IN, on_accept, srv);
    return TRUE;
}

static void close_socket(Serve *srv)
{
    g_clear_handle_id(&srv->listen_source, g_source_remove);
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
        srv->listen_fd = -1;
        unlink(srv->socket_path);
        if (srv->made_dir) {
            rmdir(srv->socket_dir);
        }
    }
}

/* ---- shutdown ------------------------------------------------------------------------- */

static void maybe_quit(Serve *srv)
{
    if (srv->stopping && srv->running == 0) {
        g_clear_handle_id(&srv->grace_source, g_source_remove);
        sbx_cli_quit(srv->cli, 0);
    }
}

static gboolean grace_over(gpointer data)
{
    Serve *srv = data;

    srv->grace_source = 0;
    sbx_cli_quit(srv->cli, 0); /* cleanup frees what is left */
    return G_SOURCE_REMOVE;
}

/* SIGTERM/SIGINT: stop accepting, end every run (their VMs are killed), free the pool. */
static void on_signal(SbxCli *cli, gpointer data)
{
    Serve *srv = data;
    (void)cli;

    srv->stopping = TRUE;
    close_socket(srv);
    for (guint i = 0; i < srv->n_profiles; i++) {
        ServeProfile *sp = &srv->profiles[i];
        g_clear_pointer(&sp->pool, sbx_pool_free);        /* fails queued claims: runs end */
        sbx_pool_vm_factory_set_prestart(sp->factory, 0); /* kills the pre-started QEMUs */
    }
    for (GList *l = srv->conns; l != NULL; l = l->next) {
        ServeConn *conn = l->data;
        if (conn->run != NULL && !conn->queued) {
            sbx_serve_run_abort(conn->run, "the server is shutting down", FALSE);
        }
    }
    srv->grace_source = g_timeout_add(SERVE_SHUTDOWN_GRACE_MS, grace_over, srv);
    maybe_quit(srv);
}

/* ---- the verb ------------------------------------------------------------------------- */

/* The pooled profiles' names, in order: --profile's, or the default. */
static const char *const *pooled_names(const Serve *srv)
{
    static const char *const fallback[] = {SERVE_PROFILE_DEFAULT, NULL};

    return srv->profile_names != NULL ? (const char *const *)srv->profile_names : fallback;
}

static gboolean bad_value(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static gboolean bad_value(GError **error, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, msg);
    return FALSE;
}

/*
 * An option given as N (every pooled profile) and NAME=N (the pooled profile NAME; each form
 * at most once per profile), e.g. --pool: the values into @sizes, in the order of
 * pooled_names(), @dflt where none applies. Each value and their sum are at most @max: the
 * memory they bound is the server's, whatever the profile.
 */
static gboolean parse_sizes(const Serve *srv, const char *option, char **opts, guint dflt,
                            guint max, guint *sizes, GError **error)
{
    const char *const *names = pooled_names(srv);
    guint n = g_strv_length((char **)names);
    guint64 every = dflt, one[SERVE_PROFILES_MAX], total = 0;
    gboolean every_given = FALSE, given[SERVE_PROFILES_MAX] = {FALSE};

    for (char **o = opts; o != NULL && *o != NULL; o++) {
        const char *eq = strchr(*o, '=');
        g_autofree char *name = eq != NULL ? g_strndup(*o, (gsize)(eq - *o)) : NULL;
        guint64 v;
        guint i = 0;

        if (!g_ascii_string_to_unsigned(eq != NULL ? eq + 1 : *o, 10, 0, max, &v, NULL))
            return bad_value(error, "%s %s: not a number from 0 to %u", option, *o, max);
        if (name == NULL) {
            if (every_given)
                return bad_value(error, "%s N given twice", option);
            every_given = TRUE;
            every = v;
            continue;
        }
        while (i < n && strcmp(names[i], name) != 0)
            i++;
        if (i == n)
            return bad_value(error, "%s %s: \"%s\" is not a pooled profile (--profile)", option, *o,
                             name);
        if (given[i])
            return bad_value(error, "%s %s=N given twice", option, name);
        given[i] = TRUE;
        one[i] = v;
    }
    for (guint i = 0; i < n; i++) {
        sizes[i] = (guint)(given[i] ? one[i] : every);
        total += sizes[i];
    }
    if (total > max)
        return bad_value(error, "%s: %" G_GUINT64_FORMAT " over all the profiles, at most %u",
                         option, total, max);
    return TRUE;
}

static gboolean parse_options(Serve *srv, int argc, char **argv, GError **error)
{
    const GOptionEntry entries[] = {
        {"socket", 's', 0, G_OPTION_ARG_FILENAME, &srv->socket_opt,
         "Unix socket (default: $XDG_RUNTIME_DIR/sandbox/sandbox.sock)", "PATH"},
        {"pool", 'n', 0, G_OPTION_ARG_STRING_ARRAY, &srv->pool_opts,
         "VMs kept ready: N for every profile (default: 2), NAME=N for one (repeatable)",
         "[NAME=]N"},
        {"profile", 'p', 0, G_OPTION_ARG_STRING_ARRAY, &srv->profile_names,
         "Machine profile of a pool (repeat for more; the first serves requests without one; "
         "default: " SERVE_PROFILE_DEFAULT ")",
         "NAME"},
        {"prestart", 'q', 0, G_OPTION_ARG_STRING_ARRAY, &srv->prestart_opts,
         "QEMUs kept started for restores on demand: N for every profile (default: 1), NAME=N "
         "for one (repeatable)",
         "[NAME=]N"},
        {"no-warm-up", 0, 0, G_OPTION_ARG_NONE, &srv->no_warm_up,
         "Offer pooled VMs without the runners' warm-up after the restore (for comparison)", NULL},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(GOptionContext) oc =
        g_option_context_new("- keep a warm pool of VMs and serve `sandbox run`");
    g_set_prgname("sandbox serve");
    g_option_context_add_main_entries(oc, entries, NULL);
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    gint n = srv->profile_names != NULL ? (gint)g_strv_length(srv->profile_names) : 1;
    /* parse_sizes() below relies on this bound (and caps --pool and --prestart itself). */
    if (argc != 1 || n > SERVE_PROFILES_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "usage: sandbox serve [--socket PATH] [--pool [NAME=]N]... "
                    "[--prestart [NAME=]N]... [--profile NAME]... [--no-warm-up] (up to %d "
                    "profiles)",
                    SERVE_PROFILES_MAX);
        return FALSE;
    }
    for (gint i = 0; i < n && srv->profile_names != NULL; i++) {
        if (g_strv_contains((const char *const *)srv->profile_names + i + 1,
                            srv->profile_names[i])) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "profile \"%s\" given twice", srv->profile_names[i]);
            return FALSE;
        }
    }
    if (!parse_sizes(srv, "--pool", srv->pool_opts, SERVE_POOL_DEFAULT, SERVE_POOL_MAX,
                     srv->pool_sizes, error) ||
        !parse_sizes(srv, "--prestart", srv->prestart_opts, SERVE_PRESTART_DEFAULT,
                     SBX_PRESTART_MAX, srv->prestarts, error))
        return FALSE;
    srv->socket_path = sbx_serve_socket_path(srv->socket_opt);
    return TRUE;
}

static void on_make_snapshot(const char *dir, gpointer data)
{
    (void)data;
    fprintf(stderr, "sandbox serve: making the snapshot (once per image and profile): %s\n", dir);
}

/* @name's profile, image and snapshot into the next ServeProfile. */
static gboolean load_profile(Serve *srv, const char *name, GError **error)
{
    SbxSnapshotOptions so = {.on_make = on_make_snapshot};
    ServeProfile *sp = &srv->profiles[srv->n_profiles];

    sp->pool_size = srv->pool_sizes[srv->n_profiles];
    sp->prestart = srv->prestarts[srv->n_profiles];
    sp->profile = sbx_profile_load_named(NULL, name, error);
    if (sp->profile == NULL) {
        return FALSE;
    }
    srv->n_profiles++; /* freed by the cleanup from now on */
    sp->image = sbx_image_open_for(sp->profile, error);
    if (sp->image == NULL) {
        return FALSE;
    }
    sp->snapshot = sbx_snapshot_ensure(sp->profile, sp->image, &so, error);
    return sp->snapshot != NULL;
}

/* Each profile, its image and its snapshot (made first if missing: blocks, before the loop). */
static gboolean load_vm_inputs(Serve *srv, GError **error)
{
    const char *const *names = pooled_names(srv);

    for (guint i = 0; names[i] != NULL; i++) {
        if (!load_profile(srv, names[i], error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* @sp's factory (with its pre-started QEMUs) and pool; its first starts come from the loop. */
static void start_pool(Serve *srv, ServeProfile *sp)
{
    SbxPoolConfig cfg = {.size = sp->pool_size, .refill_delay_ms = SERVE_REFILL_DELAY_MS};

    sp->factory = sbx_pool_vm_factory_new(sp->profile, sp->image, sp->snapshot);
    sbx_pool_vm_factory_set_warm_up(sp->factory, !srv->no_warm_up);
    sbx_pool_vm_factory_set_prestart(sp->factory, sp->prestart);
    /* The factory reports to the pool. */
    sp->pool = sbx_pool_new(&sbx_pool_vm_ops, sp->factory, &cfg);
    sbx_pool_vm_factory_set_pool(sp->factory, sp->pool);
}

static int serve_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    Serve *srv = serve_ctx = g_new0(Serve, 1);

    srv->cli = cli;
    srv->listen_fd = -1;
    g_queue_init(&srv->waiting);
    srv->approvals = sbx_approvals_new();
    if (!parse_options(srv, argc, argv, &error)) {
        fprintf(stderr, "sandbox serve: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    if (!load_vm_inputs(srv, &error) || !listen_socket(srv, &error)) {
        fprintf(stderr, "sandbox serve: %s\n", error->message);
        return SBX_EXIT_SANDBOX;
    }
    g_autoptr(GString) names = g_string_new(NULL);
    for (guint i = 0; i < srv->n_profiles; i++) {
        start_pool(srv, &srv->profiles[i]);
        g_string_append_printf(names, "%s%s %u", i > 0 ? ", " : "",
                               sbx_profile_name(srv->profiles[i].profile),
                               srv->profiles[i].pool_size);
    }
    cli->on_signal = on_signal;
    cli->data = srv;
    fprintf(stderr, "sandbox serve: listening on %s (VMs kept ready: %s)\n", srv->socket_path,
            names->str);
    return -1;
}

static void serve_cleanup(SbxCli *cli)
{
    Serve *srv = serve_ctx;
    (void)cli;

    if (srv == NULL) {
        return;
    }
    close_socket(srv);
    for (guint i = 0; i < srv->n_profiles; i++) {
        g_clear_pointer(&srv->profiles[i].pool, sbx_pool_free);
    }
    srv->stopping = FALSE; /* the loop is over: nothing to quit any more */
    g_queue_clear(&srv->waiting);
    while (srv->conns != NULL) {
        ServeConn *conn = srv->conns->data;
        conn->run = NULL; /* freed below */
        conn->queued = FALSE;
        conn_free(conn);
    }
    /* Runs that did not end within the grace period: their VMs are killed now. */
    g_list_free_full(g_steal_pointer(&srv->runs), (GDestroyNotify)sbx_serve_run_free);
    sbx_approvals_free(srv->approvals); /* after the runs: nothing calls back any more */
    g_clear_handle_id(&srv->grace_source, g_source_remove);
    for (guint i = 0; i < srv->n_profiles; i++) {
        ServeProfile *sp = &srv->profiles[i];
        sbx_pool_vm_factory_free(sp->factory);
        sbx_snapshot_free(sp->snapshot);
        sbx_image_free(sp->image);
        sbx_profile_free(sp->profile);
    }
    g_free(srv->socket_opt);
    g_strfreev(srv->profile_names);
    g_strfreev(srv->pool_opts);
    g_strfreev(srv->prestart_opts);
    g_free(srv->socket_path);
    g_free(srv->socket_dir);
    g_free(srv);
    serve_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_serve = {
    .name = "serve",
    .summary = "Keep a warm pool of VMs and serve `sandbox run` on a Unix socket",
    .start = serve_start,
    .cleanup = serve_cleanup,
};
