/* The QMP client (see qmp.h). */
#include "qmp.h"

#include <errno.h>
#include <fcntl.h>
#include <glib-unix.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/jsonfile.h"
#include "base/logring.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "vm-error.h"

/* One read(); the socket buffer is about this size. */
#define READ_CHUNK (16 * 1024)

/*
 * Bytes read per wakeup before giving the main loop back: a QEMU flooding events must not
 * starve the other VMs handled by this thread.
 */
#define READ_PER_DISPATCH (256 * 1024)

/* QEMU's error descriptions are one sentence; cut anything longer before it reaches a log. */
#define ERROR_DESC_MAX 1024

/* Event names are short identifiers ("SHUTDOWN", "DEVICE_DELETED"). */
#define EVENT_NAME_MAX 64

typedef struct {
    gint64 id;
    char *command;
    GTask *task; /* NULL for the internal qmp_capabilities */
    guint timer; /* 0 for qmp_capabilities: the handshake timer covers it */
    guint timeout_ms;
} Pending;

struct SbxQmp {
    gint ref;
    int fd;
    guint in_watch;
    guint out_watch;
    GString *in;
    gsize in_start;   /* bytes of @in handled already, dropped at the end of process_input() */
    gsize in_scanned; /* bytes of @in handled or known to hold no newline */
    GString *out;
    int out_fd; /* an fd to pass with the byte at out_fd_at of @out (getfd); -1: none */
    gsize out_fd_at;
    gboolean greeted;
    gboolean negotiated;
    gboolean closed;
    gboolean freed;
    char *version;
    GHashTable *pending; /* &Pending.id -> Pending */
    gint64 next_id;
    GTask *handshake;
    guint handshake_timer;
    SbxQmpEventFunc event_func;
    SbxQmpBrokenFunc broken_func;
    gpointer user_data;
};

static void pending_free(gpointer data)
{
    Pending *p = data;

    if (p->timer)
        g_source_remove(p->timer);
    g_clear_object(&p->task);
    g_free(p->command);
    g_free(p);
}

static SbxQmp *qmp_ref(SbxQmp *q)
{
    q->ref++;
    return q;
}

static void qmp_unref(SbxQmp *q)
{
    if (--q->ref > 0)
        return;
    g_assert(q->closed);
    g_hash_table_unref(q->pending);
    g_string_free(q->in, TRUE);
    g_string_free(q->out, TRUE);
    if (q->out_fd >= 0)
        close(q->out_fd);
    g_free(q->version);
    g_free(q);
}

/* Stop all I/O and fail everything pending with @error. Callbacks may run (and free @q). */
static void close_connection(SbxQmp *q, const GError *error)
{
    g_autoptr(GList) list = NULL;
    GTask *handshake;

    if (q->closed)
        return;
    q->closed = TRUE;
    if (q->in_watch)
        g_source_remove(q->in_watch);
    if (q->out_watch)
        g_source_remove(q->out_watch);
    q->in_watch = q->out_watch = 0;
    if (q->fd >= 0)
        close(q->fd);
    q->fd = -1;
    if (q->handshake_timer)
        g_source_remove(q->handshake_timer);
    q->handshake_timer = 0;
    handshake = g_steal_pointer(&q->handshake);
    list = g_hash_table_get_values(q->pending);
    g_hash_table_steal_all(q->pending);
    if (handshake) {
        g_task_return_error(handshake, g_error_copy(error));
        g_object_unref(handshake);
    }
    for (GList *l = list; l; l = l->next) {
        Pending *p = l->data;
        if (p->task)
            g_task_return_error(p->task, g_error_copy(error));
        pending_free(p);
    }
}

/* The connection is unusable: fail everything, then tell the owner (once). */
static void break_connection(SbxQmp *q, GError *error)
{
    g_autoptr(GError) owned = error;

    if (q->closed)
        return;
    qmp_ref(q);
    close_connection(q, owned);
    if (!q->freed && q->broken_func)
        q->broken_func(q, owned, q->user_data);
    qmp_unref(q);
}

static gboolean on_writable(int fd, GIOCondition cond, gpointer data);

/* send() of @len bytes with @fd attached (SCM_RIGHTS) to the first; @fd < 0: none. */
static ssize_t send_with_fd(int sock, const char *data, gsize len, int fd)
{
    union {
        struct cmsghdr hdr;
        char buf[CMSG_SPACE(sizeof(int))];
    } control = {0};
    struct iovec iov = {(void *)data, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    struct cmsghdr *c;

    if (fd < 0)
        return send(sock, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Send what is queued; wait for POLLOUT if the socket is full. */
static void flush(SbxQmp *q)
{
    while (!q->closed && q->out->len > 0) {
        gboolean with_fd = q->out_fd >= 0 && q->out_fd_at == 0;
        gsize len =
            q->out_fd >= 0 && q->out_fd_at > 0 ? MIN(q->out->len, q->out_fd_at) : q->out->len;
        ssize_t n = send_with_fd(q->fd, q->out->str, len, with_fd ? q->out_fd : -1);
        if (n > 0) {
            g_string_erase(q->out, 0, n);
            if (with_fd) {
                close(q->out_fd); /* QEMU has its own now */
                q->out_fd = -1;
            } else if (q->out_fd >= 0) {
                q->out_fd_at -= (gsize)n;
            }
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!q->out_watch)
                q->out_watch = g_unix_fd_add(q->fd, G_IO_OUT, on_writable, q);
            return;
        }
        break_connection(q, g_error_new(G_IO_ERROR, g_io_error_from_errno(errno),
                                        "QMP: write to QEMU: %s", g_strerror(errno)));
        return;
    }
}

static gboolean on_writable(int fd, GIOCondition cond, gpointer data)
{
    SbxQmp *q = data;

    (void)fd;
    (void)cond;
    q->out_watch = 0;
    qmp_ref(q);
    flush(q);
    qmp_unref(q);
    return G_SOURCE_REMOVE;
}

static gboolean on_command_timeout(gpointer data)
{
    Pending *p = data;
    SbxQmp *q = g_task_get_task_data(p->task);

    p->timer = 0;
    break_connection(q, g_error_new(G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                    "QMP: QEMU did not answer '%s' within %u ms", p->command,
                                    p->timeout_ms));
    return G_SOURCE_REMOVE;
}

/* Queue {"execute": @command, "arguments": @args, "id": N} and register it as pending. */
static void send_command(SbxQmp *q, const char *command, cJSON *args, Pending *p)
{
    g_autoptr(cJSON) msg = cJSON_CreateObject();
    g_autofree char *text = NULL;

    p->id = ++q->next_id;
    cJSON_AddStringToObject(msg, "execute", command);
    if (args)
        cJSON_AddItemToObject(msg, "arguments", args);
    cJSON_AddNumberToObject(msg, "id", (double)p->id);
    text = sbx_json_print(msg);
    g_string_append(q->out, text);
    g_string_append_c(q->out, '\n');
    g_hash_table_insert(q->pending, &p->id, p);
    flush(q);
}

static void send_capabilities(SbxQmp *q)
{
    Pending *p = g_new0(Pending, 1);

    p->command = g_strdup("qmp_capabilities");
    send_command(q, "qmp_capabilities", NULL, p);
}

static char *version_of(const cJSON *greeting)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(greeting, "version");
    const cJSON *qemu = cJSON_GetObjectItemCaseSensitive(v, "qemu");
    const cJSON *major = cJSON_GetObjectItemCaseSensitive(qemu, "major");
    const cJSON *minor = cJSON_GetObjectItemCaseSensitive(qemu, "minor");
    const cJSON *micro = cJSON_GetObjectItemCaseSensitive(qemu, "micro");

    if (!cJSON_IsNumber(major) || !cJSON_IsNumber(minor) || !cJSON_IsNumber(micro))
        return g_strdup("unknown");
    return g_strdup_printf("%d.%d.%d", major->valueint, minor->valueint, micro->valueint);
}

static void handle_greeting(SbxQmp *q, const cJSON *greeting)
{
    if (q->greeted) {
        break_connection(
            q, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP, "QMP: a second greeting from QEMU"));
        return;
    }
    q->greeted = TRUE;
    q->version = version_of(greeting);
    if (q->handshake)
        send_capabilities(q);
}

static void handle_event(SbxQmp *q, const cJSON *msg, const cJSON *event)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(msg, "data");
    g_autofree char *data_json = NULL;
    g_autofree char *name = NULL;

    if (!cJSON_IsString(event) || strlen(event->valuestring) > EVENT_NAME_MAX) {
        break_connection(
            q, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP, "QMP: an event without a valid name"));
        return;
    }
    name = sbx_log_sanitize(event->valuestring, strlen(event->valuestring));
    data_json = cJSON_IsObject(data) ? sbx_json_print(data) : g_strdup("{}");
    if (q->event_func && !q->freed)
        q->event_func(q, name, data_json, q->user_data);
}

static GError *error_of_reply(const Pending *p, const cJSON *err)
{
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(err, "class");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(err, "desc");
    const char *c = cJSON_IsString(cls) ? cls->valuestring : "UnknownClass";
    const char *d = cJSON_IsString(desc) ? desc->valuestring : "no description";
    g_autofree char *c_clean = sbx_log_sanitize(c, MIN(strlen(c), EVENT_NAME_MAX));
    g_autofree char *d_clean = sbx_log_sanitize(d, MIN(strlen(d), ERROR_DESC_MAX));

    return g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP, "QMP command '%s' failed: %s: %s",
                       p->command, c_clean, d_clean);
}

/* The handshake's own reply (qmp_capabilities). */
static void finish_handshake(SbxQmp *q, GError *error)
{
    GTask *task = g_steal_pointer(&q->handshake);

    if (q->handshake_timer)
        g_source_remove(q->handshake_timer);
    q->handshake_timer = 0;
    q->negotiated = !error;
    if (!task) {
        g_clear_error(&error);
        return;
    }
    if (error)
        g_task_return_error(task, error);
    else
        g_task_return_boolean(task, TRUE);
    g_object_unref(task);
}

static void handle_reply(SbxQmp *q, const cJSON *msg, const cJSON *id)
{
    const cJSON *ret = cJSON_GetObjectItemCaseSensitive(msg, "return");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
    /* Our ids are small positive integers; anything else (2^60, 1.5) matches nothing. */
    int64_t n;
    gint64 key = sbx_json_int64(id, &n) && n >= 1 && n <= 1000000000000000 ? n : -1;
    Pending *p = g_hash_table_lookup(q->pending, &key);

    if (!p || (!ret && !cJSON_IsObject(err))) {
        break_connection(
            q, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP, "QMP: a reply that matches no command"));
        return;
    }
    g_hash_table_steal(q->pending, &key);
    if (!p->task) {
        finish_handshake(q, ret ? NULL : error_of_reply(p, err));
    } else if (ret) {
        g_task_return_pointer(p->task, sbx_json_print(ret), g_free);
    } else {
        g_task_return_error(p->task, error_of_reply(p, err));
    }
    pending_free(p);
}

static void handle_message(SbxQmp *q, const cJSON *msg)
{
    const cJSON *greeting = cJSON_GetObjectItemCaseSensitive(msg, "QMP");
    const cJSON *event = cJSON_GetObjectItemCaseSensitive(msg, "event");

    if (greeting) {
        handle_greeting(q, greeting);
    } else if (!q->greeted) {
        break_connection(q, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP,
                                        "QMP: QEMU did not start with a greeting"));
    } else if (event) {
        handle_event(q, msg, event);
    } else {
        handle_reply(q, msg, cJSON_GetObjectItemCaseSensitive(msg, "id"));
    }
}

static void handle_line(SbxQmp *q, const char *line, gsize len)
{
    g_autoptr(cJSON) msg = NULL;

    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0)
        return;
    msg = sbx_json_parse(line, len, SBX_JSON_DEPTH_MAX, NULL);
    if (!cJSON_IsObject(msg)) {
        break_connection(q, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP,
                                        "QMP: QEMU sent something that is not a JSON object"));
        return;
    }
    handle_message(q, msg);
}

/*
 * Handle every complete line in the input buffer; refuse an oversize partial one. The lines
 * handled are dropped once at the end: erasing each in turn moved the rest of the buffer every
 * time, quadratic in a read of short lines (16 KiB of blank lines: 128 MiB moved).
 */
static void process_input(SbxQmp *q)
{
    char *nl;

    while (!q->closed &&
           (nl = memchr(q->in->str + q->in_scanned, '\n', q->in->len - q->in_scanned))) {
        gsize start = q->in_start, len = (gsize)(nl - q->in->str) - start;
        g_autofree char *line = g_memdup2(q->in->str + start, len + 1);
        q->in_start = q->in_scanned = start + len + 1;
        if (len > SBX_QMP_MESSAGE_MAX) {
            break_connection(q, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP,
                                            "QMP: a message larger than %d bytes",
                                            SBX_QMP_MESSAGE_MAX));
            return;
        }
        handle_line(q, line, len);
    }
    g_string_erase(q->in, 0, q->in_start);
    q->in_start = 0;
    q->in_scanned = q->in->len;
    if (!q->closed && q->in->len > SBX_QMP_MESSAGE_MAX)
        break_connection(q,
                         g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_QMP,
                                     "QMP: a message larger than %d bytes", SBX_QMP_MESSAGE_MAX));
}

/* Read what is there (bounded per wakeup). FALSE once the connection is gone. */
static gboolean read_input(SbxQmp *q)
{
    char buf[READ_CHUNK];

    for (gsize total = 0; total < READ_PER_DISPATCH && !q->closed;) {
        ssize_t n = read(q->fd, buf, sizeof buf);
        if (n > 0) {
            g_string_append_len(q->in, buf, n);
            total += (gsize)n;
            process_input(q);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        break_connection(q, n == 0 ? g_error_new(G_IO_ERROR, G_IO_ERROR_CLOSED,
                                                 "QMP: QEMU closed the connection")
                                   : g_error_new(G_IO_ERROR, g_io_error_from_errno(errno),
                                                 "QMP: read: %s", g_strerror(errno)));
    }
    return !q->closed;
}

static gboolean on_readable(int fd, GIOCondition cond, gpointer data)
{
    SbxQmp *q = data;
    gboolean open;

    (void)fd;
    (void)cond;
    qmp_ref(q);
    open = read_input(q);
    if (!open)
        q->in_watch = 0; /* already removed by close_connection */
    qmp_unref(q);
    return open ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

SbxQmp *sbx_qmp_new(int fd)
{
    SbxQmp *q = g_new0(SbxQmp, 1);

    q->ref = 1;
    q->fd = fd;
    q->in = g_string_new(NULL);
    q->out = g_string_new(NULL);
    q->out_fd = -1;
    q->pending = g_hash_table_new(g_int64_hash, g_int64_equal);
    g_unix_set_fd_nonblocking(fd, TRUE, NULL);
    q->in_watch = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_readable, q);
    return q;
}

void sbx_qmp_set_handlers(SbxQmp *qmp, SbxQmpEventFunc event, SbxQmpBrokenFunc broken,
                          gpointer user_data)
{
    qmp->event_func = event;
    qmp->broken_func = broken;
    qmp->user_data = user_data;
}

static gboolean on_handshake_timeout(gpointer data)
{
    SbxQmp *q = data;

    q->handshake_timer = 0;
    break_connection(q, g_error_new(G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                    q->greeted ? "QMP: QEMU did not answer qmp_capabilities"
                                               : "QMP: no greeting from QEMU"));
    return G_SOURCE_REMOVE;
}

void sbx_qmp_handshake_async(SbxQmp *qmp, guint timeout_ms, GCancellable *cancellable,
                             GAsyncReadyCallback callback, gpointer user_data)
{
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);

    g_task_set_source_tag(task, sbx_qmp_handshake_async);
    g_assert(!qmp->handshake && !qmp->negotiated);
    if (qmp->closed) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CLOSED, "QMP: connection closed");
        g_object_unref(task);
        return;
    }
    qmp->handshake = task;
    qmp->handshake_timer =
        g_timeout_add(timeout_ms ? timeout_ms : SBX_QMP_TIMEOUT_MS, on_handshake_timeout, qmp);
    if (qmp->greeted) {
        qmp_ref(qmp);
        send_capabilities(qmp);
        qmp_unref(qmp);
    }
}

gboolean sbx_qmp_handshake_finish(SbxQmp *qmp, GAsyncResult *result, GError **error)
{
    (void)qmp;
    return g_task_propagate_boolean(G_TASK(result), error);
}

const char *sbx_qmp_version(SbxQmp *qmp)
{
    return qmp->version;
}

/* Parse the caller's arguments: a JSON object text or NULL. */
static gboolean parse_args(const char *args_json, cJSON **ret, GError **error)
{
    cJSON *args;

    *ret = NULL;
    if (!args_json)
        return TRUE;
    args = sbx_json_parse(args_json, strlen(args_json), SBX_JSON_DEPTH_MAX, NULL);
    if (!cJSON_IsObject(args)) {
        cJSON_Delete(args);
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "QMP: arguments must be a JSON object");
        return FALSE;
    }
    *ret = args;
    return TRUE;
}

static void execute(SbxQmp *qmp, const char *command, const char *args_json, int fd,
                    guint timeout_ms, GCancellable *cancellable, GAsyncReadyCallback callback,
                    gpointer user_data)
{
    g_autoptr(GTask) task = g_task_new(NULL, cancellable, callback, user_data);
    g_autoptr(GError) error = NULL;
    cJSON *args = NULL;
    Pending *p;

    g_task_set_source_tag(task, sbx_qmp_execute_async);
    g_task_set_task_data(task, qmp, NULL);
    if (qmp->closed || !qmp->negotiated) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CLOSED,
                                qmp->closed ? "QMP: connection closed" : "QMP: handshake not done");
        return;
    }
    if (!parse_args(args_json, &args, &error)) {
        g_task_return_error(task, g_steal_pointer(&error));
        return;
    }
    if (fd >= 0) {
        /* One at a time: the only user passes one fd per save. */
        if (qmp->out_fd >= 0 || (qmp->out_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0) {
            cJSON_Delete(args);
            g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_BUSY,
                                    "QMP: cannot pass a file descriptor now");
            return;
        }
        qmp->out_fd_at = qmp->out->len;
    }
    p = g_new0(Pending, 1);
    p->command = g_strdup(command);
    p->task = g_object_ref(task);
    p->timeout_ms = timeout_ms ? timeout_ms : SBX_QMP_TIMEOUT_MS;
    p->timer = g_timeout_add(p->timeout_ms, on_command_timeout, p);
    qmp_ref(qmp);
    send_command(qmp, command, args, p);
    qmp_unref(qmp);
}

void sbx_qmp_execute_async(SbxQmp *qmp, const char *command, const char *args_json,
                           guint timeout_ms, GCancellable *cancellable,
                           GAsyncReadyCallback callback, gpointer user_data)
{
    execute(qmp, command, args_json, -1, timeout_ms, cancellable, callback, user_data);
}

void sbx_qmp_execute_with_fd_async(SbxQmp *qmp, const char *command, const char *args_json, int fd,
                                   guint timeout_ms, GCancellable *cancellable,
                                   GAsyncReadyCallback callback, gpointer user_data)
{
    execute(qmp, command, args_json, fd, timeout_ms, cancellable, callback, user_data);
}

char *sbx_qmp_execute_finish(SbxQmp *qmp, GAsyncResult *result, GError **error)
{
    (void)qmp;
    return g_task_propagate_pointer(G_TASK(result), error);
}

gboolean sbx_qmp_is_broken(SbxQmp *qmp)
{
    return qmp->closed;
}

void sbx_qmp_free(SbxQmp *qmp)
{
    g_autoptr(GError) error = NULL;

    if (!qmp || qmp->freed)
        return;
    qmp->freed = TRUE;
    error = g_error_new(G_IO_ERROR, G_IO_ERROR_CLOSED, "QMP: connection closed");
    qmp_ref(qmp);
    close_connection(qmp, error);
    qmp_unref(qmp);
    qmp_unref(qmp);
}
