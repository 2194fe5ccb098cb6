/*
 * Fuzz target: what a hostile (or compromised) QEMU writes on the QMP socket, through the real
 * client (qmp.c) on the GLib main loop. The client holds one end of a socketpair; the input is
 * written to the other end in fragments of 1..143 bytes (as systemd's fuzz-varlink does), the
 * main context iterated after each, never blocking. The client runs the handshake, a command
 * or two once negotiated (replies are matched against ids 1, 2, 3...), and a query-status on
 * each STOP event as vm.c does; what it writes back is read and must be QMP commands.
 *
 * Input: byte 0 seeds the fragment sizes and picks options (below); the rest is the stream.
 * Nothing may crash, hang or leak, whatever the bytes: every callback runs exactly once, the
 * broken handler at most once and never after sbx_qmp_free(), events carry a short printable
 * name and a JSON object, a reply is JSON text or an error, and no GLib source outlives the
 * client. Errors are fine.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "qmp.h"
#include "vm-error.h"

/* Options in byte 0 of the input. */
#define OPT_LATE_HANDSHAKE 0x01 /* start the handshake after the first fragment, not before */
#define OPT_EOF 0x02            /* close our end for writing after the input: EOF */
#define OPT_FREE_IN_BROKEN 0x04 /* free the client in its broken handler (allowed by qmp.h) */
#define OPT_CANCEL 0x08         /* cancel the commands right after sending them */
#define OPT_FLOOD 0xf0          /* all four (rare: a flood is slow): flood() */

/* Timeouts far beyond a run, so that no timer fires and a run depends on its bytes only. */
#define FUZZ_TIMEOUT_MS (10 * 60 * 1000)

/* Commands sent in one run: two after the handshake, the rest on STOP events (bounded here;
 * vm.c itself sends one per STOP). */
#define COMMANDS_MAX 16

/* Iterations of the main context per pump, and pumps while the socket is full: a stuck client
 * fails the run rather than hanging it. */
#define PUMP_MAX 100000
#define STALLS_MAX 10000

/*
 * A flood of lines: past the 256 KiB the client reads per wakeup (READ_PER_DISPATCH), not up
 * to its 1 MiB limit: a line costs far more than a byte, and a run must stay short. In writes
 * of FLOOD_BLOCK bytes.
 */
#define LINES_FLOOD_BYTES (272 * 1024)
#define FLOOD_BLOCK (64 * 1024)

/* The client's output kept for checking: it sends a few short commands. */
#define OUTPUT_MAX (64 * 1024)

typedef struct Fx Fx;

typedef struct {
    Fx *fx;
    gboolean done;
} Call;

struct Fx {
    SbxQmp *qmp;
    int fd; /* our end: QEMU's */
    guint8 options;
    gboolean freed;
    guint broken;
    gboolean handshake_started;
    Call handshake;
    gboolean handshake_ok;
    gboolean commands_started;
    Call commands[COMMANDS_MAX];
    guint n_commands;
    GCancellable *cancel;
    GString *output; /* what the client wrote, not yet checked (a partial line) */
    gint64 last_id;
};

/* A message text the client passed on (an event's name, an error) is printable UTF-8. */
static void check_text(const char *s, gsize max)
{
    FUZZ_CHECK(s && strlen(s) <= max && g_utf8_validate(s, -1, NULL));
    for (; *s; s++)
        FUZZ_CHECK((guchar)*s >= 0x20 || *s == '\n' || *s == '\t');
}

/* @json is compact JSON text of a value (an object if @object), as the client promises. */
static void check_json(const char *json, gboolean object)
{
    char *why = NULL;
    cJSON *v = sbx_json_parse(json, strlen(json), SBX_JSON_DEPTH_MAX, &why);

    FUZZ_CHECK(v && !why);
    FUZZ_CHECK(!object || cJSON_IsObject(v));
    cJSON_Delete(v);
}

static void on_exec(GObject *src, GAsyncResult *res, gpointer data)
{
    Call *call = data;
    GError *error = NULL;
    char *json = sbx_qmp_execute_finish(NULL, res, &error);

    (void)src;
    FUZZ_CHECK(!call->done);
    call->done = TRUE;
    FUZZ_CHECK((json == NULL) != (error == NULL));
    if (json)
        check_json(json, FALSE);
    else
        check_text(error->message, 8192);
    g_free(json);
    g_clear_error(&error);
}

static void execute(Fx *fx, const char *command, const char *args, GCancellable *cancel)
{
    Call *call;

    if (fx->n_commands == COMMANDS_MAX || !fx->qmp)
        return;
    call = &fx->commands[fx->n_commands++];
    call->fx = fx;
    sbx_qmp_execute_async(fx->qmp, command, args, FUZZ_TIMEOUT_MS, cancel, on_exec, call);
}

static void on_event(SbxQmp *qmp, const char *event, const char *data_json, gpointer data)
{
    Fx *fx = data;

    FUZZ_CHECK(qmp == fx->qmp && !fx->freed);
    check_text(event, 4 * 64); /* at most 64 bytes, each escaped as \xNN at worst */
    check_json(data_json, TRUE);
    if (g_str_equal(event, "STOP"))
        execute(fx, "query-status", NULL, NULL);
}

static void on_broken(SbxQmp *qmp, const GError *error, gpointer data)
{
    Fx *fx = data;

    FUZZ_CHECK(qmp == fx->qmp && !fx->freed && fx->broken == 0);
    FUZZ_CHECK(sbx_qmp_is_broken(qmp));
    check_text(error->message, 8192);
    fx->broken++;
    if (fx->options & OPT_FREE_IN_BROKEN) {
        fx->freed = TRUE;
        sbx_qmp_free(g_steal_pointer(&fx->qmp));
    }
}

static void on_handshake(GObject *src, GAsyncResult *res, gpointer data)
{
    Call *call = data;
    GError *error = NULL;

    (void)src;
    FUZZ_CHECK(!call->done);
    call->done = TRUE;
    call->fx->handshake_ok = sbx_qmp_handshake_finish(NULL, res, &error);
    FUZZ_CHECK(call->fx->handshake_ok == (error == NULL));
    if (error)
        check_text(error->message, 8192);
    else if (call->fx->qmp)
        FUZZ_CHECK(sbx_qmp_version(call->fx->qmp) != NULL);
    g_clear_error(&error);
}

static void start_handshake(Fx *fx)
{
    fx->handshake_started = TRUE;
    fx->handshake.fx = fx;
    sbx_qmp_handshake_async(fx->qmp, FUZZ_TIMEOUT_MS, NULL, on_handshake, &fx->handshake);
}

/* Once negotiated: a command without arguments and one with (big numbers travel as text). */
static void start_commands(Fx *fx)
{
    if (fx->commands_started || !fx->handshake_ok || !fx->qmp || sbx_qmp_is_broken(fx->qmp))
        return;
    fx->commands_started = TRUE;
    execute(fx, "query-status", NULL, NULL);
    execute(fx, "human-monitor-command",
            "{\"command-line\":\"info version\",\"n\":123456789012345678901234567890}", fx->cancel);
    if (fx->options & OPT_CANCEL)
        g_cancellable_cancel(fx->cancel);
}

/* One line the client wrote: a QMP command with a fresh id. */
static void check_command(Fx *fx, const char *line, gsize len)
{
    cJSON *msg = sbx_json_parse(line, len, SBX_JSON_DEPTH_MAX, NULL);
    const cJSON *execute = cJSON_GetObjectItemCaseSensitive(msg, "execute");
    int64_t id = 0;

    FUZZ_CHECK(cJSON_IsObject(msg) && cJSON_IsString(execute));
    FUZZ_CHECK(sbx_json_int64(cJSON_GetObjectItemCaseSensitive(msg, "id"), &id));
    FUZZ_CHECK(id == fx->last_id + 1);
    fx->last_id = id;
    cJSON_Delete(msg);
}

/* Read and check what the client wrote (never blocks). */
static void drain(Fx *fx)
{
    char buf[4096], *nl;
    ssize_t n;

    while ((n = recv(fx->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
        g_string_append_len(fx->output, buf, n);
        FUZZ_CHECK(fx->output->len <= OUTPUT_MAX);
    }
    while ((nl = memchr(fx->output->str, '\n', fx->output->len))) {
        gsize len = (gsize)(nl - fx->output->str);
        check_command(fx, fx->output->str, len);
        g_string_erase(fx->output, 0, len + 1);
    }
}

/* Run the main context until nothing is ready; start what the state calls for. */
static void pump(Fx *fx)
{
    for (guint i = 0; i < PUMP_MAX; i++) {
        drain(fx);
        start_commands(fx);
        if (!g_main_context_iteration(NULL, FALSE))
            return;
    }
    FUZZ_CHECK(!"the main context never became idle");
}

/* Write @n bytes to the client; FALSE once it is gone (closed its end). */
static gboolean feed(Fx *fx, const guint8 *buf, size_t n)
{
    guint stalls = 0;

    while (n > 0) {
        ssize_t w = send(fx->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            buf += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            FUZZ_CHECK(++stalls < STALLS_MAX); /* the client stopped reading an open socket */
        } else {
            return FALSE; /* EPIPE, ECONNRESET: the client broke the connection */
        }
        pump(fx);
    }
    return TRUE;
}

/*
 * The stream's last line (or its unfinished tail) again and again, in big writes: an unfinished
 * line until the client saw more than its limit, lines (events, blank ones) for a few wakeups.
 */
static void flood(Fx *fx, const guint8 *data, size_t size)
{
    const guint8 *nl = memrchr(data, '\n', data[size - 1] == '\n' ? size - 1 : size);
    GByteArray *block = g_byte_array_new();
    size_t sent = 0, total;

    if (nl) {
        size -= (size_t)(nl + 1 - data);
        data = nl + 1;
    }
    total = memchr(data, '\n', size) ? LINES_FLOOD_BYTES : SBX_QMP_MESSAGE_MAX + 1;
    while (block->len < FLOOD_BLOCK)
        g_byte_array_append(block, data, size);
    while (sent <= total && feed(fx, block->data, block->len))
        sent += block->len;
    g_byte_array_unref(block);
}

static gboolean never_runs(gpointer data)
{
    (void)data;
    return G_SOURCE_REMOVE;
}

/* Ids of sources attached from now on are above the returned one (GLib counts them up). */
static guint source_watermark(void)
{
    guint id = g_idle_add(never_runs, NULL);

    g_source_remove(id);
    return id;
}

static void run(Fx *fx, const uint8_t *data, size_t size)
{
    uint32_t seed = data[0];
    size_t pos = 1;

    if (!(fx->options & OPT_LATE_HANDSHAKE))
        start_handshake(fx);
    while (pos < size) {
        size_t n;
        seed = seed * 1103515245u + 12345u;
        n = 1 + (seed >> 16) % 143;
        if (n > size - pos)
            n = size - pos;
        if (!feed(fx, data + pos, n))
            return;
        pos += n;
        if (!fx->handshake_started && fx->qmp)
            start_handshake(fx);
    }
    if ((fx->options & OPT_FLOOD) == OPT_FLOOD && size > 1)
        flood(fx, data + 1, size - 1);
    if (fx->options & OPT_EOF) {
        shutdown(fx->fd, SHUT_WR);
        pump(fx);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fx fx = {.fd = -1};
    guint first = source_watermark(), last;
    int sv[2];

    if (size < 1)
        return 0;
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fx.qmp = sbx_qmp_new(sv[0]);
    fx.fd = sv[1];
    fx.options = data[0];
    fx.cancel = g_cancellable_new();
    fx.output = g_string_new(NULL);
    sbx_qmp_set_handlers(fx.qmp, on_event, on_broken, &fx);
    run(&fx, data, size);
    pump(&fx);
    if (fx.qmp) {
        fx.freed = TRUE;
        sbx_qmp_free(g_steal_pointer(&fx.qmp));
    }
    pump(&fx); /* the callbacks of what sbx_qmp_free() failed */
    FUZZ_CHECK(!fx.handshake_started || fx.handshake.done);
    for (guint i = 0; i < fx.n_commands; i++)
        FUZZ_CHECK(fx.commands[i].done);
    last = source_watermark();
    for (guint id = first + 1; id < last; id++)
        FUZZ_CHECK(g_main_context_find_source_by_id(NULL, id) == NULL);
    close(fx.fd);
    g_object_unref(fx.cancel);
    g_string_free(fx.output, TRUE);
    return 0;
}
