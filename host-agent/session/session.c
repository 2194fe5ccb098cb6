/*
 * The execution driver: state machine of the host's end of the guest protocol (see session.h).
 *
 * States: NEW -> HELLO_SENT -> EXECUTE_SENT -> RUNNING -> IDLE (after a proper done; another
 * execution may follow) or CLOSED (anything else: the channel is stopped, the VM must die).
 * A handshake ahead of the execution (a pooled VM): NEW -> HANDSHAKING -> IDLE, and the run
 * goes IDLE -> EXECUTE_SENT. Pings (ours) may be outstanding in IDLE and beyond. Workspace
 * file requests (files.c, session-private.h): IDLE -> FILE (up to SBX_SESSION_FILE_WINDOW in
 * flight, answered in order) -> IDLE on the last one's answer, or CLOSED.
 */
#include "session.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "channel.h"
#include "files.h"
#include "protocol/frame.h"
#include "record.h"
#include "session-private.h"

/* Random bytes in the session token (hex-encoded: 64 characters <= SBX_TOKEN_MAX). */
#define TOKEN_BYTES 32

/* Random bytes in an execution id ("x" + 16 hex characters <= SBX_ID_MAX). */
#define EXEC_ID_BYTES 8
G_STATIC_ASSERT(SBX_SESSION_EXECUTION_ID_SIZE == EXEC_ID_BYTES * 2 + 2);

typedef enum {
    ST_NEW,
    ST_HANDSHAKING,
    ST_HELLO_SENT,
    ST_EXECUTE_SENT,
    ST_RUNNING,
    ST_IDLE,
    ST_FILE, /* `file` requests in flight (SBX_SESSION_FILE_WINDOW at most), no execution */
    ST_CLOSED
} State;

typedef struct {
    gint64 start_us;
    SbxToolRecord *rec; /* NULL if the record was full */
} InFlight;

/* A file request in flight: what its answer must say, and how long it may take. */
typedef struct {
    guint32 seq;
    guint timeout_ms;
} FileRequest;

struct SbxSession {
    SbxChannel *channel;
    SbxSessionCallbacks cb;
    gpointer user_data;
    State state;
    char token[TOKEN_BYTES * 2 + 1];
    char exec_id[SBX_ID_MAX + 1];
    SbxLanguage language;
    uint8_t *execute_frame; /* encoded at run(), sent once hello_ok checked out */
    size_t execute_len;
    guint64 output_limit;
    guint timeout_ms;
    gboolean keep; /* the current run asked the guest to keep its runner */
    guint calls_max;
    gboolean collect;
    gint64 exec_start_us;  /* 0 until execute is sent */
    GSource *timer;        /* hello timeout, then the execution's wall-clock timeout */
    GHashTable *in_flight; /* call id -> InFlight* */
    GHashTable *seen;      /* call ids used in this execution */
    gsize record_bytes;
    SbxRunResult result;
    guint offered; /* bit per SbxLanguage the agent offered in hello_ok */
    gint64 hello_us;
    SbxSessionGiven given; /* what the guest last got (hello, or a refreshing execute) */
    SbxSessionReadyFunc handshake_func;
    gpointer handshake_data;
    guint32 ping_seq;              /* the outstanding ping's seq (0: none); its pong is expected */
    guint32 ping_last;             /* the last seq used */
    SbxSessionReadyFunc ping_func; /* NULL once answered, failed or withdrawn */
    gpointer ping_data;
    GSource *ping_timer;
    char *closed_why; /* why the session closed outside an execution, or NULL */
    /* the file requests in flight (ST_FILE), oldest first: a ring */
    FileRequest file_reqs[SBX_SESSION_FILE_WINDOW];
    guint file_head, file_count;
    guint32 file_seq_last;       /* the last seq used */
    guint file_timeout_override; /* sbx_session_set_file_timeout(); 0: files.c's defaults */
    SbxSessionFileCheck file_check;
    SbxSessionFileFunc file_func; /* NULL once all answered, failed or withdrawn */
    gpointer file_data;
    SbxMsg data_msg;  /* a message whose announced data frame is due (on_data), or zeroed */
    gpointer file_op; /* files.c's operation in progress, or NULL */
    GDestroyNotify file_op_free;
    /* The execution's replay logs as they come (replay_log, then the done's clock_log), and
     * the first reason it is not replayable (the runner's, or a bound passed), or NULL. */
    GArray *clock_stream; /* guint64 */
    GArray *event_stream; /* guint64 */
    gboolean logs_came;   /* a clock log came (a replay_log, or the done's) */
    gboolean events_came; /* a replay_log came (or the run was killed: the logs are open) */
    char *log_reason;
};

/* (Re)arm the session's timer on the thread-default main context (where the channel is). */
static void timer_start(SbxSession *s, guint ms, GSourceFunc func)
{
    if (s->timer != NULL) {
        g_source_destroy(s->timer);
        g_source_unref(s->timer);
    }
    s->timer = g_timeout_source_new(ms);
    g_source_set_callback(s->timer, func, s, NULL);
    g_source_attach(s->timer, g_main_context_get_thread_default());
}

static void timer_stop(SbxSession *s)
{
    if (s->timer != NULL) {
        g_source_destroy(s->timer);
        g_source_unref(s->timer);
        s->timer = NULL;
    }
}

static gboolean executing(const SbxSession *s)
{
    return s->state == ST_HELLO_SENT || s->state == ST_EXECUTE_SENT || s->state == ST_RUNNING;
}

/* ---- random values ---------------------------------------------------------------------- */

static int fill_random(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom((uint8_t *)buf + got, len - got, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -errno;
        }
        got += n;
    }
    return 0;
}

static int random_hex(char *out, size_t n_bytes)
{
    uint8_t raw[64];
    g_assert(n_bytes <= sizeof(raw));
    int r = fill_random(raw, n_bytes);
    if (r < 0) {
        return r;
    }
    for (size_t i = 0; i < n_bytes; i++) {
        g_snprintf(out + 2 * i, 3, "%02x", raw[i]);
    }
    return 0;
}

/* ---- handshake and ping outcomes ---------------------------------------------------------- */

static void ping_timer_stop(SbxSession *s)
{
    if (s->ping_timer != NULL) {
        g_source_destroy(s->ping_timer);
        g_source_unref(s->ping_timer);
        s->ping_timer = NULL;
    }
}

/* Report the outstanding ping's outcome (once); @why NULL = answered. */
static void ping_complete(SbxSession *s, const char *why)
{
    SbxSessionReadyFunc func = s->ping_func;
    g_autoptr(GError) error = NULL;

    ping_timer_stop(s);
    s->ping_func = NULL;
    if (why != NULL) {
        s->ping_seq = 0;
    }
    if (func == NULL) {
        return;
    }
    if (why != NULL) {
        error = g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED, "ping: %s", why);
    }
    func(s, error, s->ping_data);
}

/* The handshake failed: the session is closed, the owner told. */
static void handshake_failed(SbxSession *s, const char *why)
{
    SbxSessionReadyFunc func = s->handshake_func;
    g_autoptr(GError) error = g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED, "hello: %s", why);

    timer_stop(s);
    s->state = ST_CLOSED;
    s->handshake_func = NULL;
    sbx_channel_stop(s->channel);
    if (func != NULL) {
        func(s, error, s->handshake_data);
    }
}

/* ---- ending an execution ----------------------------------------------------------------- */

/* The execution is over: stop the timer, forget calls in flight, tell the owner (last). */
static void finish(SbxSession *s, State next)
{
    timer_stop(s);
    if (s->exec_start_us != 0) {
        s->result.duration_ms = (g_get_monotonic_time() - s->exec_start_us) / 1000;
    }
    g_hash_table_remove_all(s->in_flight);
    g_hash_table_remove_all(s->seen);
    g_clear_pointer(&s->execute_frame, free);
    s->state = next;
    if (next == ST_CLOSED) {
        sbx_channel_stop(s->channel);
        ping_complete(s, "the channel is closed");
    }
    s->cb.on_done(s, &s->result, s->user_data);
}

/* Tell the guest to stop, if it was asked to run something. Best effort: errors ignored. */
static void send_cancel(SbxSession *s)
{
    SbxMsg msg = {.type = SBX_MSG_CANCEL, .cancel = {.id = s->exec_id}};
    uint8_t *frame = NULL;
    size_t len = 0;

    if (s->exec_start_us != 0 && sbx_msg_encode(&msg, &frame, &len) == 0) {
        sbx_channel_send(s->channel, frame, len);
    }
}

/* ---- replay logs -------------------------------------------------------------------------- */

/* Append @n entries to @to, at most @max in all: past it, none more, and the reason. */
static void append_log(SbxSession *s, GArray *to, const uint64_t *v, size_t n, guint max,
                       const char *what)
{
    if (n > max - MIN(to->len, max)) {
        if (s->log_reason == NULL) {
            s->log_reason = g_strdup_printf("too many %s (more than %u)", what, max);
        }
        return;
    }
    g_array_append_vals(to, v, (guint)n);
}

/* Non-NULL even when empty (an empty GArray may have no data: g_memdup2() would say NULL). */
static guint64 *log_copy(const GArray *a)
{
    guint64 *copy = g_new0(guint64, MAX(a->len, 1));

    if (a->len > 0) {
        memcpy(copy, a->data, a->len * sizeof(guint64));
    }
    return copy;
}

/* The logs that came into the result (which owns copies). */
static void take_logs(SbxSession *s)
{
    SbxRunResult *r = &s->result;

    g_clear_pointer(&r->clock_log, g_free);
    g_clear_pointer(&r->event_log, g_free);
    r->n_clock_log = r->n_event_log = 0;
    if (s->logs_came || s->events_came || s->clock_stream->len > 0) {
        r->clock_log = log_copy(s->clock_stream);
        r->n_clock_log = s->clock_stream->len;
    }
    /* Only a runner that streams (replay_log) has an event log: an older one's record has
     * none, and its replay delivers as things come. */
    if (s->events_came) {
        r->event_log = log_copy(s->event_stream);
        r->n_event_log = s->event_stream->len;
    }
}

/* How a run ends when something killed it: no runner's done can come. */
static gboolean killed_status(SbxStatus status)
{
    return status == SBX_STATUS_TIMEOUT || status == SBX_STATUS_MEMORY_LIMIT ||
           status == SBX_STATUS_CRASH || status == SBX_STATUS_TERMINATED ||
           status == SBX_STATUS_CANCELLED;
}

/*
 * A run killed after it started: its logs are what it streamed before (whatever it read
 * before anything it showed), open at their ends, and replayable unless the runner said why
 * not (docs/protocol.md, "Replay").
 */
static void settle_killed(SbxSession *s)
{
    SbxRunResult *r = &s->result;

    s->logs_came = s->events_came = TRUE; /* empty logs are logs: nothing read was shown */
    take_logs(s);
    r->log_open = TRUE;
    r->replayable = s->log_reason == NULL;
    g_free(r->not_replayable);
    r->not_replayable = g_strdup(s->log_reason);
}

static void end_with(SbxSession *s, SbxStatus status, SbxErrorCode code, gboolean cancel,
                     const char *fmt, ...) G_GNUC_PRINTF(5, 6);

/* End the running execution with a host-decided @status and error. */
static void end_with(SbxSession *s, SbxStatus status, SbxErrorCode code, gboolean cancel,
                     const char *fmt, ...)
{
    va_list ap;

    if (!executing(s)) {
        return;
    }
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    SbxError err = {.code = code, .message = msg};
    s->result.status = status;
    s->result.exit_code = -1;
    s->result.has_error = TRUE;
    /* No done will say whether output was cut: the guest stops sending at the limit, so output
     * that reached it was (or may have been) cut. */
    if (s->result.output_bytes >= s->output_limit) {
        s->result.output_truncated = TRUE;
    }
    sbx_error_clear(&s->result.error);
    sbx_error_copy(&s->result.error, &err);
    if (killed_status(status) && s->state == ST_RUNNING && !s->result.protocol_violation) {
        settle_killed(s);
    } else {
        take_logs(s);
    }
    if (cancel) {
        send_cancel(s);
    }
    finish(s, ST_CLOSED);
}

/* Fail the file request in flight (if its hook is still there) with @code and @reason. */
static void file_fail(SbxSession *s, GIOErrorEnum code, const char *reason)
{
    SbxSessionFileFunc func = g_steal_pointer(&s->file_func);

    if (func != NULL) {
        g_autoptr(GError) error = g_error_new(G_IO_ERROR, code, "%s", reason);
        func(s, NULL, error, s->file_data);
    }
}

/*
 * The channel cannot be used any more, outside an execution: the VM must not be reused.
 * @code: what a file request in flight fails with (a G_IO_ERROR).
 */
static void broken(SbxSession *s, GIOErrorEnum code, const char *reason)
{
    if (s->state != ST_IDLE && s->state != ST_FILE) {
        return;
    }
    gboolean file = s->state == ST_FILE;
    timer_stop(s); /* a file request's */
    s->state = ST_CLOSED;
    s->file_count = 0; /* their answers will never be read */
    s->closed_why = g_strdup(reason);
    sbx_channel_stop(s->channel);
    ping_complete(s, reason);
    if (file) {
        file_fail(s, code, reason);
    }
    if (s->cb.on_broken != NULL) {
        s->cb.on_broken(s, reason, s->user_data);
    }
}

static void violation(SbxSession *s, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void violation(SbxSession *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *what = g_strdup_vprintf(fmt, ap);
    va_end(ap);

    /* docs/protocol.md: a peer in breach is told with `error` (best effort), then dropped. */
    SbxMsg msg = {.type = SBX_MSG_ERROR, .error = {.code = SBX_ERR_PROTOCOL, .message = what}};
    uint8_t *frame = NULL;
    size_t len = 0;
    if (s->state != ST_CLOSED && sbx_msg_encode(&msg, &frame, &len) == 0) {
        sbx_channel_send(s->channel, frame, len);
    }
    if (s->state == ST_HANDSHAKING) {
        g_autofree char *reason = g_strdup_printf("protocol violation: %s", what);
        handshake_failed(s, reason);
    } else if (executing(s)) {
        s->result.protocol_violation = TRUE;
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE, "protocol violation: %s", what);
    } else {
        g_autofree char *reason = g_strdup_printf("protocol violation: %s", what);
        broken(s, G_IO_ERROR_INVALID_DATA, reason);
    }
}

static void channel_lost(SbxSession *s, const char *what)
{
    if (s->state == ST_HANDSHAKING) {
        handshake_failed(s, what);
    } else if (executing(s)) {
        s->result.channel_lost = TRUE;
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE, "channel to the guest lost: %s",
                 what);
    } else {
        broken(s, G_IO_ERROR_CONNECTION_CLOSED, what);
    }
}

/* ---- sending ----------------------------------------------------------------------------- */

/* Queue @frame (taken). On failure the execution (or the session) ends; returns FALSE. */
static gboolean send_frame(SbxSession *s, uint8_t *frame, size_t len)
{
    int r = sbx_channel_send(s->channel, frame, len);
    if (r == -ENOBUFS) {
        violation(s, "the guest does not read its channel (%u bytes queued)",
                  SBX_SESSION_WRITE_QUEUE_MAX);
    } else if (r < 0) {
        channel_lost(s, "write to the guest failed");
    }
    return r == 0;
}

/* Queue a data frame's payload (its header ends the frame queued before). Like send_frame. */
static gboolean send_data(SbxSession *s, GBytes *data)
{
    int r = sbx_channel_send_bytes(s->channel, data);
    if (r == -ENOBUFS) {
        violation(s, "the guest does not read its channel (%u bytes queued)",
                  SBX_SESSION_WRITE_QUEUE_MAX);
    } else if (r < 0) {
        channel_lost(s, "write to the guest failed");
    }
    return r == 0;
}

static gboolean send_msg(SbxSession *s, const SbxMsg *msg)
{
    uint8_t *frame = NULL;
    size_t len = 0;
    int r = sbx_msg_encode(msg, &frame, &len);

    if (r < 0) {
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE, "cannot encode %s: %s",
                 sbx_msg_type_name(msg->type), g_strerror(-r));
        return FALSE;
    }
    return send_frame(s, frame, len);
}

/* ---- handlers of guest messages ---------------------------------------------------------- */

static gboolean check_id(SbxSession *s, const char *id, SbxMsgType type)
{
    if (strcmp(id, s->exec_id) != 0) {
        violation(s, "%s for execution \"%.*s\", expected \"%s\"", sbx_msg_type_name(type),
                  SBX_ID_MAX, id, s->exec_id);
        return FALSE;
    }
    return TRUE;
}

static gboolean offers_language(char **languages, SbxLanguage lang)
{
    for (char **l = languages; l != NULL && *l != NULL; l++) {
        if (strcmp(*l, sbx_language_name(lang)) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

static gboolean on_timer(gpointer data);

static void start_execute(SbxSession *s)
{
    uint8_t *frame = g_steal_pointer(&s->execute_frame);

    timer_stop(s);
    s->state = ST_EXECUTE_SENT;
    s->exec_start_us = g_get_monotonic_time();
    timer_start(s, s->timeout_ms, on_timer);
    send_frame(s, frame, s->execute_len);
}

/* The languages of hello_ok, as bits (checked again at each run). */
static guint offered_bits(char **languages)
{
    guint bits = 0;

    for (int l = 0; l < SBX_LANG__COUNT; l++) {
        if (offers_language(languages, (SbxLanguage)l)) {
            bits |= 1u << l;
        }
    }
    return bits;
}

static void handle_hello_ok(SbxSession *s, const SbxHelloOk *m)
{
    if (s->state != ST_HELLO_SENT && s->state != ST_HANDSHAKING) {
        violation(s, "unexpected hello_ok");
        return;
    }
    if (m->version != SBX_PROTOCOL_VERSION) {
        violation(s, "hello_ok has version %u, expected %u", m->version, SBX_PROTOCOL_VERSION);
        return;
    }
    if (strcmp(m->token, s->token) != 0) {
        violation(s, "hello_ok does not echo the session token");
        return;
    }
    s->offered = offered_bits(m->languages);
    s->hello_us = g_get_monotonic_time();
    if (s->state == ST_HANDSHAKING) {
        SbxSessionReadyFunc func = g_steal_pointer(&s->handshake_func);
        timer_stop(s);
        s->state = ST_IDLE;
        if (func != NULL) {
            func(s, NULL, s->handshake_data);
        }
    } else if (!offers_language(m->languages, s->language)) {
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE, "the guest agent does not offer %s",
                 sbx_language_name(s->language));
    } else {
        start_execute(s);
    }
}

static void handle_started(SbxSession *s, const SbxStarted *m)
{
    if (s->state != ST_EXECUTE_SENT) {
        violation(s, "unexpected started");
    } else if (check_id(s, m->id, SBX_MSG_STARTED)) {
        s->state = ST_RUNNING;
    }
}

static void handle_output(SbxSession *s, const SbxOutput *m)
{
    if (s->state != ST_RUNNING) {
        violation(s, "output %s", s->state == ST_EXECUTE_SENT ? "before started" : "unexpected");
        return;
    }
    if (!check_id(s, m->id, SBX_MSG_OUTPUT)) {
        return;
    }
    guint64 room = s->output_limit - s->result.output_bytes;
    gsize take = m->len <= room ? m->len : (gsize)room;
    if (take < m->len) {
        s->result.output_truncated = TRUE; /* whatever the guest says in done */
    }
    if (take == 0) {
        return;
    }
    s->result.output_bytes += take;
    if (s->collect) {
        g_byte_array_append(s->result.collected[m->stream], m->data, take);
    }
    if (s->cb.on_output != NULL) {
        s->cb.on_output(s, m->stream, m->data, take, s->user_data);
    }
}

/* Send the answer of an in-flight (or refused) call and record it. */
static gboolean answer(SbxSession *s, guint32 call_id, SbxToolRecord *rec, gint64 start_us,
                       const char *result_json, const SbxError *error)
{
    SbxMsg msg = {.type = SBX_MSG_TOOL_RESULT};
    SbxError cut = {0};
    uint8_t *frame = NULL;
    size_t len = 0;

    msg.tool_result.id = s->exec_id;
    msg.tool_result.call_id = call_id;
    msg.tool_result.ok = error == NULL;
    msg.tool_result.result_json = (char *)result_json;
    if (error != NULL) {
        sbx_error_copy(&cut, error);
        msg.tool_result.error = cut;
    }
    int r = sbx_msg_encode(&msg, &frame, &len);
    if (r < 0 && error == NULL) {
        /* Too large for a frame, or not JSON: the guest gets an error instead. */
        SbxError e = {.code = SBX_ERR_TOOL,
                      .message = "tool result cannot be sent to the guest "
                                 "(too large or not valid JSON)"};
        sbx_error_clear(&cut);
        return answer(s, call_id, rec, start_us, NULL, &e);
    }
    if (r < 0) {
        sbx_error_clear(&cut);
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE, "cannot encode tool_result: %s",
                 g_strerror(-r));
        return FALSE;
    }
    sbx_record_answer(&s->record_bytes, rec, result_json, error != NULL ? &cut : NULL,
                      (g_get_monotonic_time() - start_us) / 1000);
    sbx_error_clear(&cut);
    return send_frame(s, frame, len);
}

static void refuse_call(SbxSession *s, guint32 call_id, SbxToolRecord *rec, const char *why)
{
    SbxError e = {.code = SBX_ERR_TOOL, .message = (char *)why};
    answer(s, call_id, rec, g_get_monotonic_time(), NULL, &e);
}

/* The next entries of the running execution's replay logs, from a replay_log or a tool_call
 * that carried them (bounded in total: append_log). */
static void logs_in(SbxSession *s, const uint64_t *clock, gsize n_clock, const uint64_t *events,
                    gsize n_events, const char *not_replayable)
{
    s->logs_came = s->events_came = TRUE;
    if (clock != NULL) {
        append_log(s, s->clock_stream, clock, n_clock, SBX_CLOCK_READS_MAX, "clock reads");
    }
    if (events != NULL) {
        append_log(s, s->event_stream, events, n_events, SBX_EVENT_LOG_MAX, "events");
    }
    if (not_replayable != NULL && s->log_reason == NULL) {
        s->log_reason = g_strdup(not_replayable);
    }
}

static void handle_tool_call(SbxSession *s, const SbxToolCall *m)
{
    if (s->state != ST_RUNNING) {
        violation(s, "tool_call %s", s->state == ST_EXECUTE_SENT ? "before started" : "unexpected");
        return;
    }
    if (!check_id(s, m->id, SBX_MSG_TOOL_CALL)) {
        return;
    }
    if (m->clock != NULL || m->events != NULL || m->not_replayable != NULL) {
        logs_in(s, m->clock, m->n_clock, m->events, m->n_events, m->not_replayable);
    }
    if (g_hash_table_contains(s->seen, GUINT_TO_POINTER(m->call_id))) {
        violation(s, "tool_call reuses call id %u", m->call_id);
        return;
    }
    if (g_hash_table_size(s->seen) >= SBX_SESSION_CALLS_MAX) {
        end_with(s, SBX_STATUS_ERROR, SBX_ERR_TOOL, TRUE,
                 "more than %d tool calls in one execution", SBX_SESSION_CALLS_MAX);
        return;
    }
    g_hash_table_add(s->seen, GUINT_TO_POINTER(m->call_id));
    SbxToolRecord *rec = sbx_record_add(&s->result, &s->record_bytes, m->call_id, m->provider,
                                        m->tool, m->input_json);
    if (g_hash_table_size(s->in_flight) >= s->calls_max) {
        refuse_call(s, m->call_id, rec, "too many tool calls in flight");
        return;
    }
    if (s->cb.on_tool_call == NULL) {
        refuse_call(s, m->call_id, rec, "unknown tool");
        return;
    }
    InFlight *f = g_new0(InFlight, 1);
    f->start_us = g_get_monotonic_time();
    f->rec = rec;
    g_hash_table_insert(s->in_flight, GUINT_TO_POINTER(m->call_id), f);
    s->cb.on_tool_call(s, m->call_id, m->provider, m->tool, m->input_json, s->user_data);
}

static void handle_done(SbxSession *s, SbxDone *m)
{
    if (s->state != ST_EXECUTE_SENT && s->state != ST_RUNNING) {
        violation(s, "unexpected done");
        return;
    }
    if (!check_id(s, m->id, SBX_MSG_DONE)) {
        return;
    }
    SbxRunResult *r = &s->result;
    r->status = m->status;
    r->exit_code = m->exit_code;
    r->result_json = g_steal_pointer(&m->result_json);
    r->has_error = m->has_error;
    if (m->has_error) {
        sbx_error_copy(&r->error, &m->error);
    }
    r->output_truncated = r->output_truncated || m->output_truncated;
    r->kept = m->kept && s->keep;
    r->vm_reusable = TRUE;
    if (!m->has_replayable && killed_status(m->status) && s->state == ST_RUNNING) {
        /* The agent's done for a runner killed before its own (memory, a signal, cancel). */
        settle_killed(s);
        finish(s, ST_IDLE);
        return;
    }
    /* An older runner sends its whole clock log in the done, a newer one streams it
     * (replay_log) and sends none there: appended, both give the whole log. */
    if (m->clock_log != NULL) {
        s->logs_came = TRUE; /* even empty: the program read no clock */
        append_log(s, s->clock_stream, m->clock_log, m->n_clock_log, SBX_CLOCK_READS_MAX,
                   "clock reads");
    }
    take_logs(s);
    /* Replayable only when the runner says so, with a clock log, within the bounds. */
    const char *reason = m->not_replayable != NULL ? m->not_replayable : s->log_reason;
    r->replayable = m->has_replayable && m->replayable && r->clock_log != NULL && reason == NULL;
    if (!r->replayable) {
        r->not_replayable = g_strdup(reason);
    }
    finish(s, ST_IDLE);
}

static void handle_replay_log(SbxSession *s, const SbxReplayLog *m)
{
    if (s->state != ST_RUNNING) {
        violation(s, "replay_log %s",
                  s->state == ST_EXECUTE_SENT ? "before started" : "unexpected");
        return;
    }
    if (!check_id(s, m->id, SBX_MSG_REPLAY_LOG)) {
        return;
    }
    logs_in(s, m->clock, m->n_clock, m->events, m->n_events, m->not_replayable);
}

static void handle_guest_error(SbxSession *s, const SbxErrorMsg *m)
{
    g_autofree char *msg =
        g_strdup_printf("guest agent reported %s: %.*s", sbx_error_code_name(m->code),
                        SBX_ERROR_TEXT_MAX / 2, m->message);
    if (s->state == ST_HANDSHAKING) {
        handshake_failed(s, msg);
    } else if (executing(s)) {
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE, "%s", msg);
    } else {
        broken(s, G_IO_ERROR_FAILED, msg);
    }
}

static void handle_ping(SbxSession *s, const SbxPing *m)
{
    SbxMsg pong = {.type = SBX_MSG_PONG, .ping = {.seq = m->seq}};
    send_msg(s, &pong);
}

static void handle_pong(SbxSession *s, const SbxPing *m)
{
    if (s->ping_seq == 0 || m->seq != s->ping_seq) {
        violation(s, "unexpected pong %u (answers no ping of ours)", m->seq);
        return;
    }
    s->ping_seq = 0;
    ping_complete(s, NULL);
}

/* Answers come in the order of the requests: this one must answer the oldest in flight. */
static void handle_file_result(SbxSession *s, const SbxFileResult *m)
{
    if (s->state != ST_FILE) {
        violation(s, "unexpected file_result");
        return;
    }
    const FileRequest *head = &s->file_reqs[s->file_head];
    if (m->seq != head->seq) {
        violation(s, "file_result for request %u, expected %u", m->seq, head->seq);
        return;
    }
    g_autofree char *breach =
        m->ok && s->file_check != NULL ? s->file_check(m, s->file_data) : NULL;
    if (breach != NULL) {
        violation(s, "%s", breach);
        return;
    }
    s->file_head = (s->file_head + 1) % SBX_SESSION_FILE_WINDOW;
    s->file_count--;
    SbxSessionFileFunc func = s->file_func;
    if (s->file_count == 0) {
        timer_stop(s);
        s->state = ST_IDLE;
        s->file_func = NULL;
    } else { /* the next answer has its own time, from now */
        timer_start(s, s->file_reqs[s->file_head].timeout_ms, on_timer);
    }
    func(s, m, NULL, s->file_data);
}

static void dispatch(SbxSession *s, SbxMsg *msg)
{
    switch (msg->type) {
    case SBX_MSG_HELLO_OK:
        handle_hello_ok(s, &msg->hello_ok);
        break;
    case SBX_MSG_STARTED:
        handle_started(s, &msg->started);
        break;
    case SBX_MSG_OUTPUT:
        handle_output(s, &msg->output);
        break;
    case SBX_MSG_TOOL_CALL:
        handle_tool_call(s, &msg->tool_call);
        break;
    case SBX_MSG_DONE:
        handle_done(s, &msg->done);
        break;
    case SBX_MSG_REPLAY_LOG:
        handle_replay_log(s, &msg->replay_log);
        break;
    case SBX_MSG_PING:
        handle_ping(s, &msg->ping);
        break;
    case SBX_MSG_PONG:
        handle_pong(s, &msg->ping);
        break;
    case SBX_MSG_ERROR:
        handle_guest_error(s, &msg->error);
        break;
    case SBX_MSG_FILE_RESULT:
        handle_file_result(s, &msg->file_result);
        break;
    default: /* host -> guest messages */
        violation(s, "unexpected %s from the guest", sbx_msg_type_name(msg->type));
        break;
    }
}

/* ---- channel callbacks -------------------------------------------------------------------- */

static gboolean on_frame(const char *payload, gsize len, gpointer data)
{
    SbxSession *s = data;
    SbxMsg msg = {0};
    char *why = NULL;

    if (s->state == ST_CLOSED) {
        return FALSE;
    }
    if (sbx_msg_decode(payload, len, &msg, &why) < 0) {
        violation(s, "undecodable frame: %s", why != NULL ? why : "invalid");
        free(why);
        return FALSE;
    }
    /* A message that announces data is whole with its data frame, the next one: held till
     * then (the channel refuses anything else). */
    size_t n = sbx_msg_data_len(&msg);
    if (n > 0 && sbx_channel_expect_data(s->channel, (guint32)n) < 0) {
        /* cannot happen: the decoder bounds data_len */
        violation(s, "%s announces a data frame of %zu bytes", sbx_msg_type_name(msg.type), n);
        sbx_msg_clear(&msg);
        return FALSE;
    }
    if (n > 0) {
        s->data_msg = msg;
        return TRUE;
    }
    dispatch(s, &msg);
    sbx_msg_clear(&msg);
    return s->state != ST_CLOSED;
}

static gboolean on_data(guint8 *payload, gsize len, gpointer data)
{
    SbxSession *s = data;
    SbxMsg msg = s->data_msg;

    memset(&s->data_msg, 0, sizeof(s->data_msg));
    /* The channel checked the length against the announcement: this cannot fail. */
    if (sbx_msg_attach_data(&msg, payload, len) < 0 || s->state == ST_CLOSED) {
        sbx_msg_clear(&msg);
        return FALSE;
    }
    dispatch(s, &msg);
    sbx_msg_clear(&msg);
    return s->state != ST_CLOSED;
}

static void on_channel_error(SbxChannelFailure failure, const char *message, gpointer data)
{
    SbxSession *s = data;

    if (failure == SBX_CHANNEL_BAD_FRAME) {
        violation(s, "%s", message);
    } else {
        channel_lost(s, message);
    }
}

static gboolean on_timer(gpointer data)
{
    SbxSession *s = data;

    timer_stop(s); /* destroying the dispatching source is allowed; we return REMOVE anyway */
    if (s->state == ST_FILE) {
        g_autofree char *why = g_strdup_printf("the guest agent did not answer a file request "
                                               "within %u ms",
                                               s->file_reqs[s->file_head].timeout_ms);
        broken(s, G_IO_ERROR_TIMED_OUT, why);
    } else if (s->state == ST_HANDSHAKING) {
        g_autofree char *why = g_strdup_printf("the guest agent did not answer within %u ms",
                                               SBX_SESSION_HELLO_TIMEOUT_MS);
        handshake_failed(s, why);
    } else if (s->state == ST_HELLO_SENT) {
        end_with(s, SBX_STATUS_CRASH, SBX_ERR_INTERNAL, FALSE,
                 "the guest agent did not answer hello within %u ms", SBX_SESSION_HELLO_TIMEOUT_MS);
    } else {
        end_with(s, SBX_STATUS_TIMEOUT, SBX_ERR_TIMEOUT, TRUE, "execution timed out after %u ms",
                 s->timeout_ms);
    }
    return G_SOURCE_REMOVE;
}

/* ---- public API --------------------------------------------------------------------------- */

SbxSession *sbx_session_new(int fd, const SbxSessionCallbacks *callbacks, gpointer user_data,
                            GError **error)
{
    static const SbxChannelCallbacks channel_cb = {
        .on_frame = on_frame,
        .on_data = on_data,
        .on_error = on_channel_error,
    };
    g_return_val_if_fail(callbacks != NULL, NULL);

    SbxSession *s = g_new0(SbxSession, 1);
    s->channel =
        sbx_channel_new(fd, SBX_FRAME_MAX, SBX_SESSION_WRITE_QUEUE_MAX, &channel_cb, s, error);
    if (s->channel == NULL) {
        g_free(s);
        return NULL;
    }
    s->cb = *callbacks;
    s->user_data = user_data;
    s->in_flight = g_hash_table_new_full(NULL, NULL, NULL, g_free);
    s->seen = g_hash_table_new(NULL, NULL);
    s->clock_stream = g_array_new(FALSE, FALSE, sizeof(guint64));
    s->event_stream = g_array_new(FALSE, FALSE, sizeof(guint64));
    return s;
}

void sbx_session_free(SbxSession *session)
{
    if (session == NULL) {
        return;
    }
    timer_stop(session);
    ping_timer_stop(session);
    if (session->file_op != NULL) {
        session->file_op_free(session->file_op);
    }
    sbx_msg_clear(&session->data_msg);
    g_free(session->closed_why);
    sbx_channel_free(session->channel);
    g_hash_table_destroy(session->in_flight);
    g_hash_table_destroy(session->seen);
    g_array_unref(session->clock_stream);
    g_array_unref(session->event_stream);
    g_free(session->log_reason);
    free(session->execute_frame);
    sbx_run_result_clear(&session->result);
    g_free(session);
}

/* Reset the result and the limits for a new execution. */
static void prepare(SbxSession *s, const SbxRunRequest *req)
{
    sbx_run_result_clear(&s->result);
    s->result.exit_code = -1;
    s->result.tool_calls = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_tool_record_free);
    if (req->collect_output) {
        for (int i = 0; i < SBX_STREAM__COUNT; i++) {
            s->result.collected[i] = g_byte_array_new();
        }
    }
    s->record_bytes = 0;
    s->exec_start_us = 0;
    g_array_set_size(s->clock_stream, 0);
    g_array_set_size(s->event_stream, 0);
    s->logs_came = s->events_came = FALSE;
    g_clear_pointer(&s->log_reason, g_free);
    s->language = req->language;
    s->collect = req->collect_output;
    s->output_limit = req->output_limit != 0 ? req->output_limit : SBX_SESSION_OUTPUT_LIMIT_DEFAULT;
    s->timeout_ms = req->timeout_ms != 0 ? req->timeout_ms : SBX_SESSION_TIMEOUT_DEFAULT_MS;
    s->keep = req->keep;
    s->calls_max = req->tool_calls_max != 0 && req->tool_calls_max < SBX_TOOL_CALLS_IN_FLIGHT_MAX
                       ? req->tool_calls_max
                       : SBX_TOOL_CALLS_IN_FLIGHT_MAX;
}

/* Keep what the guest is given for the execution's record (never logged). */
static void keep_given(SbxSession *s, const uint8_t *entropy, gsize len, gint64 time_us)
{
    g_assert(len <= sizeof(s->given.entropy));
    memcpy(s->given.entropy, entropy, len);
    s->given.entropy_len = len;
    s->given.time_us = time_us;
}

/*
 * @refresh: the hello was before this run (a handshake ahead, or an earlier execution), maybe
 * long ago: the execute carries the clock and fresh entropy again (applied before the code runs).
 */
/* The execute's seed: a replay's, or fresh from the kernel's generator. */
static gboolean seed_of(const SbxRunRequest *req, uint8_t seed[SBX_SEED_BYTES], GError **error)
{
    if (req->seed != NULL) {
        memcpy(seed, req->seed, SBX_SEED_BYTES);
        return TRUE;
    }
    int r = fill_random(seed, SBX_SEED_BYTES);
    if (r < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(-r), "getrandom: %s", g_strerror(-r));
        return FALSE;
    }
    return TRUE;
}

static gboolean encode_execute(SbxSession *s, const SbxRunRequest *req, gboolean refresh,
                               GError **error)
{
    SbxMsg msg = {.type = SBX_MSG_EXECUTE};
    SbxExecute *e = &msg.execute;
    uint8_t entropy[SBX_SESSION_ENTROPY_BYTES];
    uint8_t seed[SBX_SEED_BYTES];

    /* A fresh seed from the kernel's generator (a replay brings its record's): the runners'
     * randomness all derives from it (docs/protocol.md, "Replay"). */
    s->given.has_seed = FALSE;
    if (!req->no_seed) {
        if (!seed_of(req, seed, error)) {
            return FALSE;
        }
        e->seed = seed;
        memcpy(s->given.seed, seed, sizeof(seed));
        s->given.has_seed = TRUE;
    }
    /* The encoder takes the log as it is (it only reads it). */
    e->clock_log = (uint64_t *)req->clock_log;
    e->n_clock_log = req->n_clock_log;
    e->event_log = (uint64_t *)req->event_log;
    e->n_event_log = req->n_event_log;
    e->log_open = req->log_open;
    if (refresh) {
        int r = fill_random(entropy, sizeof(entropy));
        if (r < 0) {
            g_set_error(error, G_IO_ERROR, g_io_error_from_errno(-r), "getrandom: %s",
                        g_strerror(-r));
            return FALSE;
        }
        e->entropy = entropy;
        e->entropy_len = sizeof(entropy);
        e->time_us = g_get_real_time();
        keep_given(s, entropy, sizeof(entropy), e->time_us);
    }

    e->id = s->exec_id;
    e->language = req->language;
    e->code = (char *)req->code;
    e->entry = (char *)req->entry;
    e->args_json = (char *)req->args_json;
    e->kwargs_json = (char *)req->kwargs_json;
    e->keep = req->keep;
    e->tools = (SbxToolDecl *)req->tools;
    e->n_tools = req->n_tools;
    e->output_limit = s->output_limit;
    e->timeout_ms = s->timeout_ms;
    /* The encoder refuses a code string of SBX_FRAME_MAX bytes or more as invalid. */
    int r = strlen(req->code) >= SBX_FRAME_MAX
                ? -EMSGSIZE
                : sbx_msg_encode(&msg, &s->execute_frame, &s->execute_len);
    explicit_bzero(entropy, sizeof(entropy));
    explicit_bzero(seed, sizeof(seed));
    if (r == -EMSGSIZE) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                    "the program, its tool namespace and its clock log exceed the frame limit "
                    "(%u bytes)",
                    SBX_FRAME_MAX);
    } else if (r < 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "invalid execute request: %s",
                    g_strerror(-r));
    }
    return r == 0;
}

static gboolean send_hello(SbxSession *s, gboolean warm_up, GError **error)
{
    uint8_t entropy[SBX_SESSION_ENTROPY_BYTES];
    SbxMsg msg = {.type = SBX_MSG_HELLO};
    uint8_t *frame = NULL;
    size_t len = 0;
    int r = random_hex(s->token, TOKEN_BYTES);

    if (r == 0) {
        r = fill_random(entropy, sizeof(entropy));
    }
    if (r < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(-r), "getrandom: %s", g_strerror(-r));
        return FALSE;
    }
    msg.hello.version = SBX_PROTOCOL_VERSION;
    msg.hello.token = s->token;
    msg.hello.entropy = entropy;
    msg.hello.entropy_len = sizeof(entropy);
    msg.hello.time_us = g_get_real_time();
    msg.hello.warm_up = warm_up;
    r = sbx_msg_encode(&msg, &frame, &len);
    if (r == 0) {
        r = sbx_channel_send(s->channel, frame, len);
    }
    if (r == 0) {
        keep_given(s, entropy, sizeof(entropy), msg.hello.time_us);
    }
    explicit_bzero(entropy, sizeof(entropy));
    if (r < 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE, "cannot send hello: %s",
                    g_strerror(-r));
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_session_run(SbxSession *session, const SbxRunRequest *request, GError **error)
{
    SbxSession *s = session;

    g_return_val_if_fail(s->cb.on_done != NULL, FALSE);
    if ((s->state != ST_NEW && s->state != ST_IDLE) || s->file_op != NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BUSY, "the session is %s",
                    s->state == ST_CLOSED ? "closed" : "busy");
        return FALSE;
    }
    if (s->state == ST_IDLE && !(s->offered & (1u << request->language))) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                    "the guest agent does not offer %s", sbx_language_name(request->language));
        return FALSE;
    }
    if (request->id != NULL && !sbx_id_valid(request->id)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT, "invalid execution id");
        return FALSE;
    }
    prepare(s, request);
    if (request->id != NULL) {
        g_strlcpy(s->exec_id, request->id, sizeof(s->exec_id));
    } else if (!sbx_session_new_execution_id(s->exec_id, error)) {
        return FALSE;
    }
    if (!encode_execute(s, request, s->state == ST_IDLE, error)) {
        return FALSE;
    }
    if (s->state == ST_IDLE) {
        s->state = ST_EXECUTE_SENT;
        start_execute(s); /* a failure ends the execution through on_done */
        return TRUE;
    }
    if (!send_hello(s, FALSE, error)) {
        g_clear_pointer(&s->execute_frame, free);
        s->state = ST_CLOSED;
        return FALSE;
    }
    s->state = ST_HELLO_SENT;
    timer_start(s, SBX_SESSION_HELLO_TIMEOUT_MS, on_timer);
    sbx_channel_start(s->channel);
    return TRUE;
}

gboolean sbx_session_handshake_async(SbxSession *session, gboolean warm_up,
                                     SbxSessionReadyFunc func, gpointer user_data, GError **error)
{
    SbxSession *s = session;

    if (s->state != ST_NEW) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BUSY, "the session has said hello already");
        return FALSE;
    }
    if (!send_hello(s, warm_up, error)) {
        s->state = ST_CLOSED;
        return FALSE;
    }
    s->state = ST_HANDSHAKING;
    s->handshake_func = func;
    s->handshake_data = user_data;
    /* The agent's warm-up is bounded by its own wait (PRESTART_HELLO_WAIT_MS, 7 s): in time. */
    timer_start(s, SBX_SESSION_HELLO_TIMEOUT_MS, on_timer);
    sbx_channel_start(s->channel);
    return TRUE;
}

static gboolean on_ping_timer(gpointer data)
{
    SbxSession *s = data;
    g_autofree char *why =
        g_strdup_printf("no pong within %u ms", (guint)SBX_SESSION_PING_TIMEOUT_MS);

    ping_complete(s, why); /* destroys this source: allowed, we return REMOVE anyway */
    return G_SOURCE_REMOVE;
}

gboolean sbx_session_ping_async(SbxSession *session, SbxSessionReadyFunc func, gpointer user_data)
{
    SbxSession *s = session;
    SbxMsg msg = {.type = SBX_MSG_PING};

    if (s->state != ST_IDLE || s->ping_seq != 0) {
        return FALSE;
    }
    s->ping_last = s->ping_last == G_MAXUINT32 ? 1 : s->ping_last + 1;
    msg.ping.seq = s->ping_last;
    if (!send_msg(s, &msg)) {
        return FALSE; /* the session broke (on_broken told the owner) */
    }
    s->ping_seq = msg.ping.seq;
    s->ping_func = func;
    s->ping_data = user_data;
    s->ping_timer = g_timeout_source_new(SBX_SESSION_PING_TIMEOUT_MS);
    g_source_set_callback(s->ping_timer, on_ping_timer, s, NULL);
    g_source_attach(s->ping_timer, g_main_context_get_thread_default());
    return TRUE;
}

void sbx_session_ping_cancel(SbxSession *session)
{
    ping_timer_stop(session);
    session->ping_func = NULL;
}

gboolean sbx_session_is_ready(const SbxSession *session)
{
    return session->state == ST_IDLE && session->file_op == NULL;
}

gint64 sbx_session_hello_time(const SbxSession *session)
{
    return session->hello_us;
}

void sbx_session_set_callbacks(SbxSession *session, const SbxSessionCallbacks *callbacks,
                               gpointer user_data)
{
    session->cb = *callbacks;
    session->user_data = user_data;
}

gboolean sbx_session_tool_result(SbxSession *session, guint32 call_id, const char *result_json,
                                 const SbxError *error)
{
    InFlight *f = g_hash_table_lookup(session->in_flight, GUINT_TO_POINTER(call_id));

    g_return_val_if_fail(error != NULL || result_json != NULL, FALSE);
    if (f == NULL || session->state != ST_RUNNING) {
        return FALSE;
    }
    gint64 start = f->start_us;
    SbxToolRecord *rec = f->rec;
    g_hash_table_remove(session->in_flight, GUINT_TO_POINTER(call_id));
    answer(session, call_id, rec, start, result_json, error);
    return TRUE;
}

gboolean sbx_session_tool_policy(SbxSession *session, guint32 call_id, const char *policy_json)
{
    InFlight *f = g_hash_table_lookup(session->in_flight, GUINT_TO_POINTER(call_id));

    gsize len = strlen(policy_json);

    if (f == NULL || f->rec == NULL || f->rec->policy_json != NULL ||
        len > SBX_SESSION_POLICY_NOTE_MAX ||
        len > SBX_SESSION_RECORD_BYTES_MAX - session->record_bytes) {
        return FALSE;
    }
    f->rec->policy_json = g_strdup(policy_json);
    session->record_bytes += len;
    return TRUE;
}

void sbx_session_abort(SbxSession *session, SbxStatus status, SbxErrorCode code,
                       const char *message)
{
    end_with(session, status, code, TRUE, "%s", message);
}

void sbx_session_amend_error(SbxSession *session, const char *message)
{
    if (session->result.has_error) {
        g_free(session->result.error.message);
        session->result.error.message = g_strdup(message);
    }
}

const char *sbx_session_execution_id(const SbxSession *session)
{
    return session->exec_id[0] != '\0' ? session->exec_id : NULL;
}

gboolean sbx_session_new_execution_id(char out[SBX_SESSION_EXECUTION_ID_SIZE], GError **error)
{
    out[0] = 'x';
    int r = random_hex(out + 1, EXEC_ID_BYTES);
    if (r < 0) {
        g_set_error(error, G_IO_ERROR, g_io_error_from_errno(-r), "getrandom: %s", g_strerror(-r));
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_session_given(const SbxSession *session, SbxSessionGiven *out)
{
    *out = session->given;
    return out->entropy_len > 0;
}

/* ---- file requests (session-private.h) ----------------------------------------------------- */

gboolean sbx_session_file_can_send(const SbxSession *session, GError **error)
{
    switch (session->state) {
    case ST_IDLE:
        return TRUE;
    case ST_NEW:
    case ST_HANDSHAKING:
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_INITIALIZED,
                    "the session has not said hello yet (sbx_session_handshake_async() first)");
        return FALSE;
    case ST_FILE:
        if (session->file_count < SBX_SESSION_FILE_WINDOW) {
            return TRUE;
        }
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BUSY, "%d file requests are in flight",
                    SBX_SESSION_FILE_WINDOW);
        return FALSE;
    case ST_CLOSED:
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_CLOSED, "the session is closed%s%s",
                    session->closed_why != NULL ? ": " : "",
                    session->closed_why != NULL ? session->closed_why : "");
        return FALSE;
    default:
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BUSY, "an execution is running");
        return FALSE;
    }
}

/* @file's frame, and the header of its data frame at its end when it has data. */
static int encode_file(const SbxFile *file, uint8_t **ret_frame, size_t *ret_len)
{
    SbxMsg msg = {.type = SBX_MSG_FILE, .file = *file};
    uint8_t *frame = NULL;
    size_t len = 0;
    int r = sbx_msg_encode(&msg, &frame, &len);

    if (r == 0 && sbx_msg_data_len(&msg) > 0) {
        uint8_t *grown = realloc(frame, len + SBX_FRAME_HEADER);
        r = grown != NULL ? sbx_frame_data_header(file->len, grown + len) : -ENOMEM;
        frame = grown != NULL ? grown : frame;
        len += SBX_FRAME_HEADER;
    }
    if (r < 0) {
        free(frame);
        return r;
    }
    *ret_frame = frame;
    *ret_len = len;
    return 0;
}

gboolean sbx_session_file_send(SbxSession *session, SbxFile *file, GBytes *data, guint timeout_ms,
                               SbxSessionFileCheck check, SbxSessionFileFunc func,
                               gpointer user_data, GError **error)
{
    SbxSession *s = session;
    uint8_t *frame = NULL;
    size_t len = 0;

    if (!sbx_session_file_can_send(s, error)) {
        return FALSE;
    }
    g_return_val_if_fail(s->file_count == 0 || (func == s->file_func && check == s->file_check &&
                                                user_data == s->file_data),
                         FALSE);
    g_return_val_if_fail(file->op != SBX_FILE_WRITE || file->len == 0 ||
                             (data != NULL && g_bytes_get_size(data) == file->len),
                         FALSE);
    guint32 seq = s->file_seq_last == G_MAXUINT32 ? 1 : s->file_seq_last + 1;
    file->seq = seq;
    int r = encode_file(file, &frame, &len);
    if (r < 0) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "cannot encode the file request: %s", g_strerror(-r));
        return FALSE;
    }
    s->file_seq_last = seq;
    /* A send that breaks the session fails this call only: no hook of the requests in flight
     * runs then (they are the caller's). */
    s->file_func = NULL;
    if (s->file_count == 0) {
        s->state = ST_FILE;
        timer_start(s, timeout_ms, on_timer);
    }
    s->file_reqs[(s->file_head + s->file_count) % SBX_SESSION_FILE_WINDOW] =
        (FileRequest){.seq = seq, .timeout_ms = timeout_ms};
    s->file_count++;
    if (!send_frame(s, frame, len) || (file->len > 0 && file->op == SBX_FILE_WRITE &&
                                       !send_data(s, data))) { /* closed: on_broken ran */
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_CLOSED, "cannot send the file request: %s",
                    s->closed_why != NULL ? s->closed_why : "the session is closed");
        return FALSE;
    }
    s->file_check = check;
    s->file_func = func;
    s->file_data = user_data;
    return TRUE;
}

guint sbx_session_file_in_flight(const SbxSession *session)
{
    return session->state == ST_FILE ? session->file_count : 0;
}

gboolean sbx_session_file_withdraw(SbxSession *session)
{
    if (session->state != ST_FILE) {
        return TRUE;
    }
    session->file_func = NULL;
    broken(session, G_IO_ERROR_CANCELLED,
           "a file operation was cancelled with requests in flight (their answers would be left "
           "unread)");
    return FALSE;
}

void sbx_session_file_attach(SbxSession *session, gpointer op, GDestroyNotify destroy)
{
    session->file_op = op;
    session->file_op_free = destroy;
}

gpointer sbx_session_file_attached(const SbxSession *session)
{
    return session->file_op;
}

void sbx_session_file_set_timeout(SbxSession *session, guint timeout_ms)
{
    session->file_timeout_override = timeout_ms;
}

guint sbx_session_file_get_timeout(const SbxSession *session)
{
    return session->file_timeout_override;
}
