/*
 * The command provider: each call spawns the configured program, writes
 * {"tool": "<real name>", "input": <input>} and a newline on its stdin, and reads one JSON value
 * from its stdout. Exit status 0 and one JSON value on stdout make the result; anything else is
 * a tool_error whose message quotes the end of stderr. Everything is asynchronous on the main
 * loop: no call ever blocks it.
 *
 * A call first takes one of the host's tool process slots (tool-slots.h), waiting in a queue
 * if none is free; its timeout and cancellation run from the start, the wait included. The
 * program starts as tool-proc.h says (an allow-listed environment, its own process group,
 * PR_SET_PDEATHSIG, rlimits): a timeout, an oversized output or a cancellation kills the whole
 * group, and the process is always reaped (base/child.h: its exit watched through a pidfd, its
 * group killed before it is reaped) before the call completes and releases its slot. The host
 * process must ignore SIGPIPE: a program that exits without reading its stdin makes our write fail
 * with EPIPE.
 */
#include <cJSON.h>
#include <errno.h>
#include <string.h>
#include <sys/wait.h>

#include "protocol/json.h"
#include "protocol/limits.h"
#include "provider.h"
#include "tool-proc.h"
#include "tool-slots.h"
#include "tools-error.h"

/* The end of stderr kept for the error message: the last lines are the ones that explain. */
#define STDERR_TAIL_MAX (4 * 1024)

/* Read size for stdout and stderr. */
#define READ_CHUNK (64 * 1024)

typedef struct {
    SbxProvider base;
    char **argv;
    char *workdir;
    char **envp; /* tool-proc.h: built once, from the host agent's environment at creation */
    guint timeout_ms;
} CommandProvider;

typedef enum { ABORT_NONE, ABORT_TIMEOUT, ABORT_OVERFLOW, ABORT_CANCELLED } AbortReason;

typedef struct {
    const CommandProvider *provider; /* outlives its calls */
    GTask *task;                     /* borrowed: alive while an operation is pending */
    char *tool;
    guint timeout_ms;
    SbxToolSlotWait *wait;     /* queued for a slot, or NULL */
    SbxToolSlot *slot;         /* held from before the spawn until the call completes */
    GError *start_error;       /* no slot, or the spawn failed: no process */
    SbxChild *child;           /* the process, from the spawn until the call is freed */
    SbxToolPipes pipes;        /* its stdin, stdout and stderr */
    int status;                /* its wait status, once it exited */
    GCancellable *io_cancel;   /* stops our reads and writes once the call is abandoned */
    GCancellable *cancellable; /* the caller's */
    gulong cancel_handler;
    GSource *timer; /* the per-call timeout */
    guint pending;  /* async operations still running: the slot, or stdin, stdout, stderr, wait */
    AbortReason abort;
    GBytes *request;
    GByteArray *out;
    GByteArray *err;
    guint8 out_buf[READ_CHUNK];
    guint8 err_buf[READ_CHUNK];
} CommandCall;

static void call_free(gpointer p)
{
    CommandCall *c = p;
    g_assert(c->wait == NULL); /* the wait is an operation: the call completed after it */
    sbx_tool_slot_release(c->slot);
    g_clear_error(&c->start_error);
    sbx_child_free(c->child); /* reaped already: the call completed after its exit */
    sbx_tool_pipes_clear(&c->pipes);
    g_clear_object(&c->io_cancel);
    g_clear_object(&c->cancellable);
    g_bytes_unref(c->request);
    g_byte_array_unref(c->out);
    g_byte_array_unref(c->err);
    g_free(c->tool);
    g_free(c);
}

/* Kill the whole process group (and the leader, should it not have made its group); the exit
 * watch reaps it. */
static void kill_group(CommandCall *c)
{
    sbx_child_kill_async(c->child);
}

static void op_done(GTask *task);

static gboolean on_wait_left(gpointer data)
{
    op_done(data);
    return G_SOURCE_REMOVE;
}

static void call_abort(CommandCall *c, AbortReason why)
{
    if (c->abort == ABORT_NONE) {
        c->abort = why;
    }
    if (c->wait != NULL) {
        /* Out of the queue; the call completes from the main loop, not from inside a
         * cancellable's handler (which cannot disconnect itself). */
        sbx_tool_slot_wait_cancel(c->wait);
        c->wait = NULL;
        GSource *idle = g_idle_source_new();
        g_source_set_callback(idle, on_wait_left, c->task, NULL); /* the wait's reference */
        g_source_attach(idle, g_main_context_get_thread_default());
        g_source_unref(idle);
    }
    kill_group(c);
    g_cancellable_cancel(c->io_cancel);
}

/* Last lines of stderr, valid UTF-8, trimmed; "" if nothing was written. */
static char *stderr_tail(CommandCall *c)
{
    g_autofree char *text = g_utf8_make_valid((const char *)c->err->data, c->err->len);
    return g_strdup(g_strstrip(text));
}

static GError *exit_error(CommandCall *c)
{
    g_autofree char *tail = stderr_tail(c);
    const char *sep = tail[0] != '\0' ? ": " : "";

    if (!WIFEXITED(c->status)) {
        return g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL,
                           "tool \"%s\" was killed by signal %d%s%.*s", c->tool,
                           WTERMSIG(c->status), sep, SBX_ERROR_TEXT_MAX / 2, tail);
    }
    return g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL, "tool \"%s\" failed (exit status %d)%s%.*s",
                       c->tool, WEXITSTATUS(c->status), sep, SBX_ERROR_TEXT_MAX / 2, tail);
}

/*
 * stdout must hold exactly one JSON value (surrounding whitespace allowed). It is forwarded as
 * the tool printed it, less the whitespace between tokens: every number keeps its literal.
 */
static char *parse_stdout(CommandCall *c, GError **error)
{
    const char *text = (const char *)c->out->data;
    gsize len = c->out->len;
    char *why = NULL;

    if (len == 0) {
        g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                    "tool \"%s\" printed nothing on stdout, not one JSON value", c->tool);
        return NULL;
    }
    /* One level for the tool_result message around it. */
    char *out = sbx_json_normalize(text, len, SBX_JSON_DEPTH_MAX - 1, &why);
    if (out == NULL || strlen(out) > SBX_TOOL_RESULT_MAX) {
        g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                    "tool \"%s\" did not print one JSON value on stdout: %s", c->tool,
                    why != NULL   ? why
                    : out != NULL ? "larger than 1 MiB"
                                  : "out of memory");
        free(why);
        free(out);
        return NULL;
    }
    char *copy = g_strdup(out);
    free(out);
    return copy;
}

static void call_complete(GTask *task)
{
    CommandCall *c = g_task_get_task_data(task);
    GError *error = NULL;

    if (c->timer != NULL) {
        g_source_destroy(c->timer);
        g_clear_pointer(&c->timer, g_source_unref);
    }
    if (c->cancel_handler != 0) {
        g_cancellable_disconnect(c->cancellable, c->cancel_handler);
        c->cancel_handler = 0;
    }
    /* Reaped, and any descendant still in its group (a daemonised helper) killed before
     * (base/child.h). The process is gone: the next call may have its slot. */
    sbx_tool_slot_release(g_steal_pointer(&c->slot));

    switch (c->abort) {
    case ABORT_CANCELLED:
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "tool call cancelled");
        return;
    case ABORT_TIMEOUT:
        if (c->child == NULL && c->start_error == NULL) {
            g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                    "tool \"%s\" timed out after %u ms waiting to start: the "
                                    "host's %u tool process slots (%s) stayed taken",
                                    c->tool, c->timeout_ms, sbx_tool_slots_cap(NULL),
                                    SBX_TOOL_PROCS_ENV);
            return;
        }
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "tool \"%s\" timed out after %u ms", c->tool, c->timeout_ms);
        return;
    case ABORT_OVERFLOW:
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "tool \"%s\" wrote more than %d bytes on stdout", c->tool,
                                SBX_TOOL_RESULT_MAX);
        return;
    case ABORT_NONE:
        break;
    }
    if (c->start_error != NULL) {
        g_task_return_error(task, g_steal_pointer(&c->start_error));
        return;
    }
    if (!WIFEXITED(c->status) || WEXITSTATUS(c->status) != 0) {
        g_task_return_error(task, exit_error(c));
        return;
    }
    char *result = parse_stdout(c, &error);
    if (result == NULL) {
        g_task_return_error(task, error);
        return;
    }
    g_task_return_pointer(task, result, g_free);
}

/* One async operation ended; the last one completes the call. Consumes a task reference. */
static void op_done(GTask *task)
{
    CommandCall *c = g_task_get_task_data(task);
    g_assert(c->pending > 0);
    if (--c->pending == 0) {
        call_complete(task);
    }
    g_object_unref(task);
}

static void on_child_exit(SbxChild *child, int wait_status, gpointer data)
{
    CommandCall *c = g_task_get_task_data(data);

    (void)child;
    c->status = wait_status;
    op_done(data);
}

static void on_stdin_written(GObject *src, GAsyncResult *res, gpointer data)
{
    /* EPIPE (the program did not read its input) is not an error by itself: the exit status
     * and stdout decide. */
    g_output_stream_write_all_finish(G_OUTPUT_STREAM(src), res, NULL, NULL);
    g_output_stream_close(G_OUTPUT_STREAM(src), NULL, NULL);
    op_done(data);
}

static void read_next(GTask *task, gboolean is_out);

static void on_read(GObject *src, GAsyncResult *res, gpointer data, gboolean is_out)
{
    GTask *task = data;
    CommandCall *c = g_task_get_task_data(task);
    gssize n = g_input_stream_read_finish(G_INPUT_STREAM(src), res, NULL);

    if (n <= 0) { /* EOF, or cancelled after an abort */
        op_done(task);
        return;
    }
    if (is_out) {
        if (c->out->len + n > SBX_TOOL_RESULT_MAX) {
            call_abort(c, ABORT_OVERFLOW);
            op_done(task);
            return;
        }
        g_byte_array_append(c->out, c->out_buf, n);
    } else {
        g_byte_array_append(c->err, c->err_buf, n);
        if (c->err->len > STDERR_TAIL_MAX) {
            g_byte_array_remove_range(c->err, 0, c->err->len - STDERR_TAIL_MAX);
        }
    }
    read_next(task, is_out);
}

static void on_stdout(GObject *src, GAsyncResult *res, gpointer data)
{
    on_read(src, res, data, TRUE);
}

static void on_stderr(GObject *src, GAsyncResult *res, gpointer data)
{
    on_read(src, res, data, FALSE);
}

static void read_next(GTask *task, gboolean is_out)
{
    CommandCall *c = g_task_get_task_data(task);
    GInputStream *in = is_out ? c->pipes.out : c->pipes.err;
    g_input_stream_read_async(in, is_out ? c->out_buf : c->err_buf, READ_CHUNK, G_PRIORITY_DEFAULT,
                              c->io_cancel, is_out ? on_stdout : on_stderr, task);
}

static gboolean on_timeout(gpointer data)
{
    CommandCall *c = data;
    call_abort(c, ABORT_TIMEOUT);
    return G_SOURCE_REMOVE;
}

static void on_cancelled(GCancellable *cancellable, gpointer data)
{
    (void)cancellable;
    call_abort(data, ABORT_CANCELLED);
}

static SbxChild *spawn(const CommandProvider *p, SbxToolPipes *ret_pipes, GError **error)
{
    return sbx_tool_spawn((const char *const *)p->argv, p->workdir, p->envp, ret_pipes, error);
}

static GBytes *build_request(const char *tool, const char *input_json)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "tool", tool);
    cJSON_AddRawToObject(obj, "input", input_json);
    char *text = sbx_json_print(obj);
    cJSON_Delete(obj);
    if (text == NULL) {
        return NULL;
    }
    char *line = g_strconcat(text, "\n", NULL);
    free(text);
    return g_bytes_new_take(line, strlen(line));
}

/* Start the four operations; each holds a task reference until it ends. */
static void start_ops(GTask *task, CommandCall *c)
{
    c->pending += 4;
    gsize len = 0;
    const void *data = g_bytes_get_data(c->request, &len);
    g_output_stream_write_all_async(c->pipes.in, data, len, G_PRIORITY_DEFAULT, c->io_cancel,
                                    on_stdin_written, g_object_ref(task));
    read_next(g_object_ref(task), TRUE);
    read_next(g_object_ref(task), FALSE);
    sbx_child_watch(c->child, on_child_exit, g_object_ref(task));
}

/*
 * The slot operation ends: with a slot, the process starts and its four operations take over
 * the call; without (@error), or if the spawn fails, the call completes with the reason.
 * Consumes the slot operation's task reference.
 */
static void start_process(GTask *task, SbxToolSlot *slot, const GError *error)
{
    CommandCall *c = g_task_get_task_data(task);
    g_autoptr(GError) local = NULL;

    c->slot = slot;
    c->child = slot != NULL ? spawn(c->provider, &c->pipes, &local) : NULL;
    if (c->child == NULL) {
        c->start_error =
            g_error_new(SBX_TOOL_ERROR, SBX_ERR_TOOL, "cannot start provider \"%s\": %s",
                        c->provider->base.name, error != NULL ? error->message : local->message);
        op_done(task);
        return;
    }
    start_ops(task, c);
    op_done(task);
}

static void on_slot(SbxToolSlot *slot, const GError *error, gpointer data)
{
    CommandCall *c = g_task_get_task_data(data);
    c->wait = NULL;
    start_process(data, slot, error);
}

static void command_call_async(SbxProvider *provider, const char *tool, const char *input_json,
                               GCancellable *cancellable, GAsyncReadyCallback callback,
                               gpointer user_data)
{
    CommandProvider *p = (CommandProvider *)provider;
    g_autoptr(GTask) task = g_task_new(NULL, cancellable, callback, user_data);
    g_autoptr(GError) error = NULL;
    CommandCall *c = g_new0(CommandCall, 1);
    SbxToolSlot *slot = NULL;

    g_task_set_source_tag(task, command_call_async);
    g_task_set_task_data(task, c, call_free);
    c->provider = p;
    c->task = task;
    c->tool = g_strdup(tool);
    c->timeout_ms = p->timeout_ms;
    c->io_cancel = g_cancellable_new();
    c->out = g_byte_array_new();
    c->err = g_byte_array_new();
    c->request = build_request(tool, input_json);
    if (g_cancellable_is_cancelled(cancellable)) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "tool call cancelled");
        return;
    }
    if (c->request == NULL) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "cannot start provider \"%s\": out of memory", provider->name);
        return;
    }
    /* The slot operation: the wait in the queue, then the start. */
    c->pending = 1;
    if (!sbx_tool_slot_acquire(on_slot, g_object_ref(task), &slot, &c->wait, &error)) {
        start_process(task, NULL, error);
    } else if (slot != NULL) {
        start_process(task, slot, NULL);
    }
    if (c->pending == 0) { /* completed already: it could not start */
        return;
    }
    /* From the call's start, not the process's: a queued call honours them too. */
    c->timer = g_timeout_source_new(c->timeout_ms);
    g_source_set_callback(c->timer, on_timeout, c, NULL);
    g_source_attach(c->timer, g_main_context_get_thread_default());
    if (cancellable != NULL) {
        c->cancellable = g_object_ref(cancellable);
        c->cancel_handler = g_cancellable_connect(cancellable, G_CALLBACK(on_cancelled), c, NULL);
    }
}

static char *command_call_finish(SbxProvider *provider, GAsyncResult *result, GError **error)
{
    (void)provider;
    g_return_val_if_fail(g_task_is_valid(result, NULL), NULL);
    return g_task_propagate_pointer(G_TASK(result), error);
}

static void command_free(SbxProvider *provider)
{
    CommandProvider *p = (CommandProvider *)provider;
    g_strfreev(p->argv);
    g_strfreev(p->envp);
    g_free(p->workdir);
    g_free(p->base.name);
    g_free(p);
}

static const SbxProviderOps command_ops = {
    .call_async = command_call_async,
    .call_finish = command_call_finish,
    .free = command_free,
};

SbxProvider *sbx_command_provider_new(const SbxCatalogProvider *config, GError **error)
{
    if (sbx_tool_slots_cap(error) == 0) { /* a bad SANDBOX_TOOL_PROCS: say so before any call */
        return NULL;
    }
    CommandProvider *p = g_new0(CommandProvider, 1);
    g_auto(GStrv) host = g_get_environ();
    p->base.ops = &command_ops;
    p->base.name = g_strdup(config->name);
    p->argv = g_strdupv(config->command);
    p->workdir = g_strdup(config->workdir);
    p->envp = sbx_tool_environ(config, host);
    p->timeout_ms = config->timeout_ms;
    return &p->base;
}
