/*
 * MCP over stdio: the server is a child process for the lifetime of the provider (one
 * execution's tools). Messages are lines on its stdin and stdout; its stderr is kept as a
 * bounded tail for error messages.
 *
 * The child starts like a command provider's (tool-proc.h: an allow-listed environment plus the
 * catalog's `env_pass` and `env`, its own process group, PR_SET_PDEATHSIG, rlimits). It takes no
 * tool process slot (tool-slots.h): it lives as long as the execution's tools, their number is
 * the catalog's, not the guest's to grow, and a slot held that long would starve command tools.
 * The server is an SbxChild (base/child.h): when it exits by itself its group is killed before
 * it is reaped (its helpers too, so that stderr reaches EOF); freeing the transport kills the
 * whole group with SIGKILL and reaps the server there and then, so it never outlives the
 * transport, not even as a zombie. A server that exits or closes its stdout fails every
 * pending call with its exit status and the end of its stderr.
 */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>

#include "mcp-transports.h"
#include "mcp-wire.h"
#include "tool-proc.h"

/* The end of stderr kept for error messages: the last lines are the ones that explain. */
#define STDERR_TAIL_MAX (4 * 1024)

/*
 * After stdout's EOF, how long the server has to exit before we call it hung and kill it: its
 * exit status and stderr explain a crash better than "closed its stdout".
 */
#define EXIT_GRACE_MS 1000

/*
 * After the server exited (or the transport was freed), how long its stderr has to reach EOF:
 * a grandchild that left the process group may hold it open for ever, and the exit is reported
 * (pending calls failed) only with stderr's end.
 */
#define STDERR_GRACE_MS 500

/* Read size for stdout and stderr. */
#define READ_CHUNK (64 * 1024)

/*
 * Bytes queued for the server's stdin and not written yet. At most 64 calls are in flight per
 * execution (SBX_TOOL_CALLS_IN_FLIGHT_MAX), each input at most 1 MiB: 96 MiB leaves room for
 * pings and cancellations; a server that stops reading its stdin would make it grow forever.
 */
#define WRITE_QUEUE_MAX (96 * 1024 * 1024)

typedef struct {
    SbxMcpTransport base;
    gint ref; /* the owner and each async operation */
    gboolean freed;
    SbxChild *child; /* the server, until the transport is freed */
    SbxToolPipes pipes;
    int status; /* its wait status, once exited */
    GCancellable *io_cancel;
    GCancellable *err_cancel; /* the stderr read: only after the exit and a grace */
    SbxMcpFramer *framer;
    GByteArray *err_tail;
    GQueue writes; /* GBytes* */
    gsize queued;
    gboolean writing;
    gboolean exited, out_eof, err_eof, closed;
    guint8 out_buf[READ_CHUNK];
    guint8 err_buf[READ_CHUNK];
} Stdio;

static Stdio *stdio_ref(Stdio *t)
{
    t->ref++;
    return t;
}

static void stdio_unref(Stdio *t)
{
    if (--t->ref > 0) {
        return;
    }
    g_queue_clear_full(&t->writes, (GDestroyNotify)g_bytes_unref);
    sbx_child_free(t->child); /* reaped already (exited, or killed by stdio_free) */
    sbx_tool_pipes_clear(&t->pipes);
    g_clear_object(&t->io_cancel);
    g_clear_object(&t->err_cancel);
    sbx_mcp_framer_free(t->framer);
    g_byte_array_unref(t->err_tail);
    g_free(t);
}

/* The exit watch reaps it. Nothing once reaped (base/child.h). */
static void kill_group(Stdio *t)
{
    sbx_child_kill_async(t->child);
}

/* Report the connection dead once (and stop the server if it still runs). */
static void close_with(Stdio *t, const char *why)
{
    if (t->closed || t->freed) {
        return;
    }
    t->closed = TRUE;
    kill_group(t);
    g_cancellable_cancel(t->io_cancel);
    sbx_mcp_client_closed(t->base.client, why);
}

/* After the server exited: its exit status and the end of its stderr. */
static void report_exit(Stdio *t)
{
    if (!t->exited || !t->err_eof || t->freed) {
        return;
    }
    g_autofree char *tail =
        t->err_tail->len > 0 ? g_utf8_make_valid((const char *)t->err_tail->data, t->err_tail->len)
                             : g_strdup("");
    g_autofree char *why =
        WIFEXITED(t->status)
            ? g_strdup_printf("the server exited (status %d)", WEXITSTATUS(t->status))
            : g_strdup_printf("the server was killed by signal %d", WTERMSIG(t->status));
    g_autofree char *full =
        g_strdup_printf("%s%s%s", why, g_strstrip(tail)[0] != '\0' ? ": " : "", g_strstrip(tail));
    close_with(t, full);
}

static gboolean on_stderr_grace(gpointer data)
{
    Stdio *t = data;
    g_cancellable_cancel(t->err_cancel); /* on_stderr() reports the exit */
    stdio_unref(t);
    return G_SOURCE_REMOVE;
}

/* Give up on stderr's EOF after STDERR_GRACE_MS. */
static void stderr_grace(Stdio *t)
{
    if (!t->err_eof) {
        g_timeout_add(STDERR_GRACE_MS, on_stderr_grace, stdio_ref(t));
    }
}

/* The server exited by itself; its group was killed before it was reaped (base/child.h). */
static void on_child_exit(SbxChild *child, int wait_status, gpointer data)
{
    Stdio *t = data;

    (void)child;
    t->status = wait_status;
    t->exited = TRUE;
    stderr_grace(t);
    report_exit(t);
    stdio_unref(t);
}

/* ---- reading ----------------------------------------------------------------------------- */

static void on_message(const char *text, gsize len, gpointer data)
{
    Stdio *t = data;
    if (!t->freed && !t->closed) {
        sbx_mcp_client_receive(t->base.client, text, len);
    }
}

static void read_stdout(Stdio *t);
static void read_stderr(Stdio *t);

static gboolean on_exit_grace(gpointer data)
{
    Stdio *t = data;
    if (!t->exited) {
        close_with(t, "the server closed its stdout");
    }
    stdio_unref(t);
    return G_SOURCE_REMOVE;
}

static void on_stdout(GObject *src, GAsyncResult *res, gpointer data)
{
    Stdio *t = data;
    g_autoptr(GError) error = NULL;
    gssize n = g_input_stream_read_finish(G_INPUT_STREAM(src), res, &error);

    if (t->freed || n < 0) {
        stdio_unref(t);
        return;
    }
    if (n == 0) {
        t->out_eof = TRUE;
        sbx_mcp_framer_finish(t->framer, on_message, t);
        if (!t->exited) {
            g_timeout_add(EXIT_GRACE_MS, on_exit_grace, t); /* keeps the reference */
            return;
        }
        stdio_unref(t);
        return;
    }
    if (!sbx_mcp_framer_feed(t->framer, t->out_buf, n, on_message, t, &error)) {
        g_autofree char *why = g_strdup_printf("the server sent %s", error->message);
        close_with(t, why);
        stdio_unref(t);
        return;
    }
    read_stdout(t); /* keeps the reference */
}

static void on_stderr(GObject *src, GAsyncResult *res, gpointer data)
{
    Stdio *t = data;
    gssize n = g_input_stream_read_finish(G_INPUT_STREAM(src), res, NULL);

    if (n <= 0) {
        t->err_eof = TRUE;
        report_exit(t);
        stdio_unref(t);
        return;
    }
    g_byte_array_append(t->err_tail, t->err_buf, n);
    if (t->err_tail->len > STDERR_TAIL_MAX) {
        g_byte_array_remove_range(t->err_tail, 0, t->err_tail->len - STDERR_TAIL_MAX);
    }
    read_stderr(t);
}

static void read_stdout(Stdio *t)
{
    g_input_stream_read_async(t->pipes.out, t->out_buf, READ_CHUNK, G_PRIORITY_DEFAULT,
                              t->io_cancel, on_stdout, t);
}

static void read_stderr(Stdio *t)
{
    /* Not cancelled by io_cancel: the end of stderr explains a crash. EOF comes with the exit. */
    g_input_stream_read_async(t->pipes.err, t->err_buf, READ_CHUNK, G_PRIORITY_DEFAULT,
                              t->err_cancel, on_stderr, t);
}

/* ---- writing ----------------------------------------------------------------------------- */

static void write_next(Stdio *t);

static void on_written(GObject *src, GAsyncResult *res, gpointer data)
{
    Stdio *t = data;
    g_autoptr(GError) error = NULL;
    GBytes *done = g_queue_pop_head(&t->writes);

    t->queued -= g_bytes_get_size(done);
    g_bytes_unref(done);
    t->writing = FALSE;
    if (!g_output_stream_write_all_finish(G_OUTPUT_STREAM(src), res, NULL, &error)) {
        if (!g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
            g_autofree char *why =
                g_strdup_printf("cannot write to the server: %s", error->message);
            close_with(t, why);
        }
        stdio_unref(t);
        return;
    }
    if (!t->freed && !t->closed) {
        write_next(t);
    }
    stdio_unref(t);
}

static void write_next(Stdio *t)
{
    GBytes *b = g_queue_peek_head(&t->writes);
    gsize len = 0;

    if (t->writing || b == NULL) {
        return;
    }
    const void *data = g_bytes_get_data(b, &len);
    t->writing = TRUE;
    g_output_stream_write_all_async(t->pipes.in, data, len, G_PRIORITY_DEFAULT, t->io_cancel,
                                    on_written, stdio_ref(t));
}

static void stdio_send(SbxMcpTransport *base, const char *json, gint64 id)
{
    Stdio *t = (Stdio *)base;
    gsize len = strlen(json);
    (void)id;

    if (t->closed) {
        return;
    }
    if (t->queued + len + 1 > WRITE_QUEUE_MAX) {
        close_with(t, "the server does not read its stdin");
        return;
    }
    char *line = g_strconcat(json, "\n", NULL); /* compact JSON has no raw newline */
    g_queue_push_tail(&t->writes, g_bytes_new_take(line, len + 1));
    t->queued += len + 1;
    write_next(t);
}

static void stdio_free(SbxMcpTransport *base)
{
    Stdio *t = (Stdio *)base;

    t->freed = TRUE;
    if (!t->exited) {
        /* Killed and reaped now: the exit watch, and its reference, end here. */
        g_clear_pointer(&t->child, sbx_child_free);
        t->exited = TRUE;
        stdio_unref(t);
    }
    g_cancellable_cancel(t->io_cancel);
    g_cancellable_cancel(t->err_cancel); /* nobody is left to read the end of stderr */
    stdio_unref(t);
}

static const SbxMcpTransportOps stdio_ops = {
    .send = stdio_send,
    .free = stdio_free,
};

SbxMcpTransport *sbx_mcp_stdio_new(const SbxCatalogProvider *config, GError **error)
{
    g_auto(GStrv) host = g_get_environ();
    g_auto(GStrv) envp = sbx_tool_environ(config, host);
    SbxToolPipes pipes = {0};
    SbxChild *child =
        sbx_tool_spawn((const char *const *)config->command, config->workdir, envp, &pipes, error);
    if (child == NULL) {
        return NULL;
    }
    Stdio *t = g_new0(Stdio, 1);
    t->base.ops = &stdio_ops;
    t->ref = 1;
    t->child = child;
    t->pipes = pipes;
    t->io_cancel = g_cancellable_new();
    t->err_cancel = g_cancellable_new();
    t->framer = sbx_mcp_framer_new(SBX_MCP_FRAMING_LINES, SBX_MCP_MESSAGE_MAX);
    t->err_tail = g_byte_array_new();
    g_queue_init(&t->writes);
    read_stdout(stdio_ref(t));
    read_stderr(stdio_ref(t));
    sbx_child_watch(child, on_child_exit, stdio_ref(t));
    return &t->base;
}
