/*
 * `sandbox run` through `sandbox serve` (serve-client.h, docs/pool.md), and `sandbox session
 * exec`, a run in a session of the server. The server is the user's own process behind an
 * owner-only socket, but its frames are still checked: bounded, parsed, and a broken stream ends
 * the run as a sandbox failure (125).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib-unix.h>

#include "cli/serve-client.h"
#include "exec/report.h"
#include "protocol/frame.h"
#include "protocol/limits.h"
#include "server/path.h"
#include "server/proto.h"

typedef struct {
    SbxCli *cli;
    int fd;
    guint source;
    gboolean json;
    gboolean session; /* a session's run (its report says "start":"session") */
    SbxFrameReader reader;
    SbxOut *out; /* never blocks the loop (out.h): the run's end is seen on time */
} Client;

static Client *client;

/* Write all of @data to @fd; FALSE if it is gone. */
static gboolean write_all(int fd, const void *data, gsize len)
{
    const guint8 *p = data;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            struct pollfd q = {.fd = fd, .events = POLLOUT};
            poll(&q, 1, -1);
            continue;
        }
        if (n <= 0) {
            return FALSE;
        }
        p += n;
        len -= n;
    }
    return TRUE;
}

static gboolean send_frame(int fd, const char *json, gsize len)
{
    g_autofree guint8 *frame = NULL;
    gsize flen;

    return sbx_frame_encode(json, len, &frame, &flen) == 0 && write_all(fd, frame, flen);
}

/*
 * Read one frame and decode it into @msg, waiting at most @timeout_ms in all (blocking; before
 * the loop runs). FALSE if none came in time or it is no message.
 */
static gboolean read_frame_blocking(int fd, int timeout_ms, SbxServeMsg *msg)
{
    SbxFrameReader r;
    gint64 deadline = g_get_monotonic_time() + timeout_ms * 1000ll;
    gboolean got = FALSE, ok = FALSE;
    guint8 b;

    sbx_frame_reader_init(&r, SBX_FRAME_MAX);
    while (!got) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        int left = (int)((deadline - g_get_monotonic_time()) / 1000);
        char *payload = NULL;
        size_t plen;
        /* One byte at a time: the status answer is small, and nothing after it is consumed. */
        if (left <= 0 || poll(&q, 1, left) <= 0 || read(fd, &b, 1) != 1 ||
            sbx_frame_reader_feed(&r, &b, 1, &payload, &plen) < 0) {
            break;
        }
        if (payload != NULL) {
            got = TRUE;
            ok = sbx_serve_proto_msg_decode(payload, plen, msg);
            free(payload);
        }
    }
    sbx_frame_reader_clear(&r);
    return ok;
}

static int connect_server(void)
{
    g_autofree char *path = sbx_serve_socket_path(NULL);
    g_autofree char *dir = g_path_get_dirname(path);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};

    /* A socket in a directory others can write could be someone else's: not ours to use. */
    if (strlen(path) >= sizeof(addr.sun_path) || !sbx_serve_check_dir(dir, NULL)) {
        return -1;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/*
 * The server answers a status request and pools @profile (NULL: its default): its default
 * (`profile`) or one of `profiles` (a server of one profile before per-profile pools has only
 * the former).
 */
static gboolean server_fits(int fd, const char *profile)
{
    SbxServeRequest req = {.type = SBX_SERVE_REQ_STATUS};
    g_autofree char *status = sbx_serve_proto_request_encode(&req);
    g_auto(SbxServeMsg) msg = {0};

    if (!send_frame(fd, status, strlen(status)) ||
        !read_frame_blocking(fd, SBX_SERVE_CLIENT_PROBE_MS, &msg) ||
        msg.type != SBX_SERVE_MSG_STATUS || msg.profile == NULL) {
        return FALSE;
    }
    return profile == NULL || strcmp(profile, msg.profile) == 0 ||
           g_strv_contains((const char *const *)msg.profiles, profile);
}

static char *run_message(const SbxServeClientRequest *req)
{
    g_autofree char *tools =
        req->tools_path != NULL ? g_canonicalize_filename(req->tools_path, NULL) : NULL;
    SbxServeRequest r = {
        .type = SBX_SERVE_REQ_RUN,
        .run =
            {
                .language = req->language,
                .code = (char *)req->code,
                .entry = (char *)req->entry,
                .args_json = (char *)req->args_json,
                .kwargs_json = (char *)req->kwargs_json,
                .tools_path = tools,
                .timeout_ms = req->timeout_ms,
                .output_limit = req->output_limit,
                .collect = req->json,
                .live = req->live,
                .approvals = req->approvals,
                .profile = (char *)req->profile,
                .session = (char *)req->session,
            },
    };

    return sbx_serve_proto_request_encode(&r);
}

/* ---- on the loop ---------------------------------------------------------------------- */

void sbx_serve_client_report_failure(SbxOut *out, gboolean json, gboolean session,
                                     const char *message, SbxStatus status)
{
    if (json) {
        SbxReport rep = {.failure = message, .failure_status = status, .boot_ms = -1};
        g_autofree char *report = sbx_report_json(&rep);
        g_autofree char *text =
            g_strdup_printf("{\"start\":\"%s\",%s", session ? "session" : "pool", report + 1);
        sbx_out_json(out, SBX_STREAM_STDOUT, text, strlen(text));
    } else {
        g_autofree char *text = g_strdup_printf("sandbox: %s\n", message);
        sbx_out_text(out, SBX_STREAM_STDERR, text);
    }
}

/* The run ended without a done frame: report it like a direct run's failure. */
static void finish_failed(Client *c, const char *message, SbxStatus status, int code)
{
    sbx_serve_client_report_failure(c->out, c->json, c->session, message, status);
    sbx_cli_quit(c->cli, code);
}

static void on_output(Client *c, const SbxServeMsg *msg)
{
    if (msg->data == NULL) {
        return; /* not base64, or no stream: ignored */
    }
    sbx_out_guest(c->out, msg->stream, msg->data, msg->data_len);
}

/* The server's done frame: the report is printed as the server sent it, never re-printed. */
static void on_done(Client *c, const SbxServeMsg *msg)
{
    if (c->json) {
        if (msg->report_json != NULL) {
            g_autofree char *text = g_strdup_printf("%s\n", msg->report_json);
            sbx_out_json(c->out, SBX_STREAM_STDOUT, text, strlen(text));
        }
    } else if (msg->summary != NULL) {
        sbx_out_text(c->out, SBX_STREAM_STDERR, msg->summary);
    }
    sbx_cli_quit(c->cli, msg->exit_code >= 0 ? msg->exit_code : SBX_EXIT_SANDBOX);
}

/* One frame from the server. FALSE: the run is over (done or broken). */
static gboolean on_frame(gpointer data, const char *payload, gsize len)
{
    Client *c = data;
    g_auto(SbxServeMsg) msg = {0};

    if (!sbx_serve_proto_msg_decode(payload, len, &msg)) {
        finish_failed(c, "the server sent a broken frame", SBX_STATUS_CRASH, SBX_EXIT_SANDBOX);
        return FALSE;
    }
    if (msg.type == SBX_SERVE_MSG_OUTPUT) {
        on_output(c, &msg);
        return TRUE;
    }
    if (msg.type == SBX_SERVE_MSG_DONE) {
        on_done(c, &msg);
        return FALSE;
    }
    g_autofree char *why = g_strdup_printf("the server refused the request: %s",
                                           msg.message != NULL ? msg.message : "no reason");
    finish_failed(c, why, SBX_STATUS_CRASH, SBX_EXIT_SANDBOX);
    return FALSE;
}

/* What read_frames() did with what the socket had. */
typedef enum { FRAMES_MORE, FRAMES_STOPPED, FRAMES_BROKEN } FramesRead;

/*
 * Read what @fd has into @r and hand each whole frame to @frame (FALSE from it: stop, its owner
 * may be gone). FRAMES_BROKEN: the connection ended, failed, or sent a frame over the limit.
 */
static FramesRead read_frames(gint fd, SbxFrameReader *r,
                              gboolean (*frame)(gpointer, const char *, gsize), gpointer data)
{
    guint8 buf[64 * 1024];
    ssize_t n = read(fd, buf, sizeof(buf));

    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return FRAMES_MORE;
    }
    for (gsize off = 0; n > 0 && off < (gsize)n;) {
        char *payload = NULL;
        size_t plen = 0;
        ssize_t used = sbx_frame_reader_feed(r, buf + off, n - off, &payload, &plen);
        if (used < 0) {
            return FRAMES_BROKEN; /* a frame over the limit or empty: the stream is broken */
        }
        gboolean more = payload == NULL || frame(data, payload, plen);
        free(payload);
        if (!more) {
            return FRAMES_STOPPED;
        }
        off += used;
    }
    return n > 0 ? FRAMES_MORE : FRAMES_BROKEN;
}

static gboolean on_readable(gint fd, GIOCondition cond, gpointer data)
{
    Client *c = data;
    (void)cond;

    switch (read_frames(fd, &c->reader, on_frame, c)) {
    case FRAMES_MORE:
        return G_SOURCE_CONTINUE;
    case FRAMES_STOPPED:
        c->source = 0;
        return G_SOURCE_REMOVE;
    default:
        c->source = 0;
        finish_failed(c, "the connection to `sandbox serve` was lost", SBX_STATUS_CRASH,
                      SBX_EXIT_SANDBOX);
        return G_SOURCE_REMOVE;
    }
}

/* SIGINT/SIGTERM: hang up; the server ends the execution and kills the VM. */
static void on_signal(SbxCli *cli, gpointer data)
{
    Client *c = data;
    g_autofree char *msg =
        g_strdup_printf("interrupted by %s", cli->signal == SIGINT ? "SIGINT" : "SIGTERM");

    g_clear_handle_id(&c->source, g_source_remove);
    shutdown(c->fd, SHUT_RDWR);
    finish_failed(c, msg, SBX_STATUS_TERMINATED, SBX_EXIT_SIGNAL_BASE + cli->signal);
}

gboolean sbx_serve_client_try(SbxCli *cli, const SbxServeClientRequest *req)
{
    g_autofree char *run = NULL;
    int fd = connect_server();

    if (fd < 0) {
        return FALSE;
    }
    run = run_message(req);
    /* A session's run has no other place to go: no probe, a refusal is the server's to say. */
    if (strlen(run) > SBX_FRAME_MAX || (req->session == NULL && !server_fits(fd, req->profile)) ||
        !send_frame(fd, run, strlen(run))) {
        close(fd); /* too large for a frame, no answer, another profile: run directly */
        return FALSE;
    }
    client = g_new0(Client, 1);
    client->cli = cli;
    client->fd = fd;
    client->json = req->json;
    client->session = req->session != NULL;
    client->out = req->out;
    sbx_frame_reader_init(&client->reader, SBX_FRAME_MAX);
    client->source = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_readable, client);
    cli->on_signal = on_signal;
    cli->data = client;
    return TRUE;
}

void sbx_serve_client_cleanup(void)
{
    if (client == NULL) {
        return;
    }
    g_clear_handle_id(&client->source, g_source_remove);
    close(client->fd);
    sbx_frame_reader_clear(&client->reader);
    g_clear_pointer(&client, g_free);
}

/* ---- a collected run, many at once (sandbox mcp) ------------------------------------------ */

struct SbxServeCall {
    int fd;
    guint source;
    SbxFrameReader reader;
    SbxServeCallDone done;
    SbxServeCallOutput output;
    SbxServeCallApproval approval;
    gpointer data;
};

/*
 * The call's end, from its source's callback, which then returns G_SOURCE_REMOVE: the source is
 * forgotten first, so that @done may free the call.
 */
static void call_end(SbxServeCall *c, const char *report, const char *failure)
{
    SbxServeCallDone done = c->done;

    c->source = 0;
    c->done = NULL;
    if (done != NULL) {
        done(c->data, report, failure);
    }
}

/* One frame; FALSE: the call ended (done called). */
static gboolean call_frame(gpointer data, const char *payload, gsize len)
{
    SbxServeCall *c = data;
    g_auto(SbxServeMsg) msg = {0};

    if (!sbx_serve_proto_msg_decode(payload, len, &msg)) {
        call_end(c, NULL, "the server sent a broken frame");
        return FALSE;
    }
    if (msg.type == SBX_SERVE_MSG_OUTPUT) {
        /* a live run's (the report has it all); a frame without data is ignored */
        if (c->output != NULL && msg.data != NULL) {
            c->output(c->data, msg.stream, msg.data, msg.data_len);
        }
        return TRUE;
    }
    if (msg.type == SBX_SERVE_MSG_APPROVAL || msg.type == SBX_SERVE_MSG_APPROVAL_OVER) {
        /* an approval without an id cannot be answered: ignored as a broken output frame is */
        const SbxServePending *p = msg.n_pending == 1 ? &msg.pending[0] : NULL;
        const char *id = p != NULL ? p->id : msg.id;
        if (c->approval != NULL && id != NULL &&
            (p != NULL || msg.type == SBX_SERVE_MSG_APPROVAL_OVER)) {
            c->approval(c->data, p, id);
        }
        return TRUE;
    }
    if (msg.type == SBX_SERVE_MSG_DONE && msg.report_json != NULL) {
        call_end(c, msg.report_json, NULL);
        return FALSE;
    }
    g_autofree char *why = g_strdup_printf("the server refused the request: %s",
                                           msg.message != NULL ? msg.message : "no report");
    call_end(c, NULL, why);
    return FALSE;
}

static gboolean on_call_readable(gint fd, GIOCondition cond, gpointer data)
{
    SbxServeCall *c = data;
    (void)cond;

    switch (read_frames(fd, &c->reader, call_frame, c)) {
    case FRAMES_MORE:
        return G_SOURCE_CONTINUE;
    case FRAMES_STOPPED:
        return G_SOURCE_REMOVE; /* @c may be freed */
    default:
        break;
    }
    call_end(c, NULL, "the connection to `sandbox serve` was lost");
    return G_SOURCE_REMOVE;
}

SbxServeCall *sbx_serve_client_call(const SbxServeClientRequest *req, SbxServeCallDone done,
                                    gpointer data)
{
    SbxServeClientRequest collected = *req;
    g_autofree char *run = NULL;
    int fd = connect_server();

    if (fd < 0) {
        return NULL;
    }
    collected.json = TRUE;
    run = run_message(&collected);
    /* A session's run has no other place to go: no probe, a refusal is the server's to say. */
    if (strlen(run) > SBX_FRAME_MAX || (req->session == NULL && !server_fits(fd, req->profile)) ||
        !send_frame(fd, run, strlen(run))) {
        close(fd);
        return NULL;
    }
    SbxServeCall *c = g_new0(SbxServeCall, 1);
    c->fd = fd;
    c->done = done;
    c->data = data;
    sbx_frame_reader_init(&c->reader, SBX_FRAME_MAX);
    c->source = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_call_readable, c);
    return c;
}

void sbx_serve_call_set_output(SbxServeCall *c, SbxServeCallOutput output)
{
    c->output = output;
}

void sbx_serve_call_set_approvals(SbxServeCall *c, SbxServeCallApproval approval)
{
    c->approval = approval;
}

void sbx_serve_call_free(SbxServeCall *c)
{
    if (c == NULL) {
        return;
    }
    g_clear_handle_id(&c->source, g_source_remove);
    close(c->fd);
    sbx_frame_reader_clear(&c->reader);
    g_free(c);
}

/* ---- one request, one answer, on the loop (sandbox mcp's session tools) ------------------- */

struct SbxServeAsk {
    int fd;
    guint source;
    guint timer;
    SbxFrameReader reader;
    SbxServeAskDone done;
    gpointer data;
};

/* The ask's end, from one of its sources' callbacks, which then returns G_SOURCE_REMOVE: both
 * are forgotten first (the other removed), so that @done may free the ask. */
static void ask_end(SbxServeAsk *a, const SbxServeMsg *answer, const char *failure,
                    gboolean from_timer)
{
    SbxServeAskDone done = a->done;

    if (from_timer) {
        a->timer = 0;
        g_clear_handle_id(&a->source, g_source_remove);
    } else {
        a->source = 0;
        g_clear_handle_id(&a->timer, g_source_remove);
    }
    a->done = NULL;
    if (done != NULL) {
        done(a->data, answer, failure);
    }
}

static gboolean ask_frame(gpointer data, const char *payload, gsize len)
{
    SbxServeAsk *a = data;
    g_auto(SbxServeMsg) msg = {0};

    if (!sbx_serve_proto_msg_decode(payload, len, &msg)) {
        ask_end(a, NULL, "the server sent a broken frame", FALSE);
    } else {
        ask_end(a, &msg, NULL, FALSE);
    }
    return FALSE;
}

static gboolean on_ask_readable(gint fd, GIOCondition cond, gpointer data)
{
    SbxServeAsk *a = data;
    (void)cond;

    switch (read_frames(fd, &a->reader, ask_frame, a)) {
    case FRAMES_MORE:
        return G_SOURCE_CONTINUE;
    case FRAMES_STOPPED:
        return G_SOURCE_REMOVE; /* @a may be freed */
    default:
        break;
    }
    ask_end(a, NULL, "the connection to `sandbox serve` was lost", FALSE);
    return G_SOURCE_REMOVE;
}

static gboolean on_ask_timeout(gpointer data)
{
    ask_end(data, NULL, "`sandbox serve` did not answer in time", TRUE);
    return G_SOURCE_REMOVE;
}

SbxServeAsk *sbx_serve_client_ask(const SbxServeRequest *req, guint timeout_ms,
                                  SbxServeAskDone done, gpointer data)
{
    g_autofree char *json = sbx_serve_proto_request_encode(req);
    int fd = connect_server();

    if (fd < 0) {
        return NULL;
    }
    if (strlen(json) > SBX_FRAME_MAX || !send_frame(fd, json, strlen(json))) {
        close(fd);
        return NULL;
    }
    SbxServeAsk *a = g_new0(SbxServeAsk, 1);
    a->fd = fd;
    a->done = done;
    a->data = data;
    sbx_frame_reader_init(&a->reader, SBX_FRAME_MAX);
    a->source = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_ask_readable, a);
    a->timer = g_timeout_add(timeout_ms, on_ask_timeout, a);
    return a;
}

void sbx_serve_ask_free(SbxServeAsk *a)
{
    if (a == NULL) {
        return;
    }
    g_clear_handle_id(&a->source, g_source_remove);
    g_clear_handle_id(&a->timer, g_source_remove);
    close(a->fd);
    sbx_frame_reader_clear(&a->reader);
    g_free(a);
}

int sbx_serve_client_connect(void)
{
    return connect_server();
}

gboolean sbx_serve_client_read(int fd, gint64 deadline_us, SbxServeMsg *msg)
{
    SbxFrameReader r;
    guint8 buf[64 * 1024];
    gboolean over = FALSE, got = FALSE, ok = FALSE;

    sbx_frame_reader_init(&r, SBX_FRAME_MAX);
    while (!got && !over) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        int left = (int)((deadline_us - g_get_monotonic_time()) / 1000);
        ssize_t n = left > 0 && poll(&q, 1, left) > 0 ? read(fd, buf, sizeof(buf)) : -1;
        over = n <= 0;
        for (gsize off = 0; n > 0 && off < (gsize)n && !got;) {
            char *payload = NULL;
            size_t plen = 0;
            ssize_t used = sbx_frame_reader_feed(&r, buf + off, n - off, &payload, &plen);
            if (used < 0) {
                over = TRUE;
                break;
            }
            got = payload != NULL;
            ok = got && sbx_serve_proto_msg_decode(payload, plen, msg);
            free(payload);
            off += used;
        }
    }
    sbx_frame_reader_clear(&r);
    return ok;
}

gboolean sbx_serve_client_send(int fd, const char *json)
{
    return send_frame(fd, json, strlen(json));
}
