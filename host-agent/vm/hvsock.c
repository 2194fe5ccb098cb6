/* Hybrid-vsock client: CONNECT <port> through the bridge (see hvsock.h). */
#include "hvsock.h"

#include <errno.h>
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "vm-error.h"

/* "OK 4294967295\n" is 14 bytes; anything much longer is not the bridge speaking. */
#define ANSWER_MAX 32

typedef struct {
    int fd;
    char line[ANSWER_MAX];
    gsize got;
    GSource *io;
    GSource *timer;
    GSource *cancel;
} Attempt;

static void attempt_free(gpointer data)
{
    Attempt *a = data;

    if (a->fd >= 0)
        close(a->fd);
    g_free(a);
}

static void fd_box_free(gpointer data)
{
    close(GPOINTER_TO_INT(data) - 1);
}

static void drop_source(GSource **s)
{
    if (*s) {
        g_source_destroy(*s);
        g_source_unref(*s);
        *s = NULL;
    }
}

/* Finish @task with the connected fd (error == NULL) or @error. */
static void complete(GTask *task, GError *error)
{
    Attempt *a = g_task_get_task_data(task);
    int fd = a->fd;

    drop_source(&a->io);
    drop_source(&a->timer);
    drop_source(&a->cancel);
    if (error) {
        g_task_return_error(task, error);
        return;
    }
    a->fd = -1;
    g_unix_set_fd_nonblocking(fd, FALSE, NULL);
    /* Boxed as fd + 1 so that an unclaimed result still closes the socket. */
    g_task_return_pointer(task, GINT_TO_POINTER(fd + 1), fd_box_free);
}

static GError *parse_answer(const Attempt *a)
{
    guint64 port;

    if (a->got > 3 && memcmp(a->line, "OK ", 3) == 0 &&
        g_ascii_string_to_unsigned(a->line + 3, 10, 0, G_MAXUINT32, &port, NULL))
        return NULL;
    return g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_BRIDGE,
                       "the bridge answered CONNECT with something other than \"OK <port>\"");
}

/* Read the answer one byte at a time: bytes after the newline already belong to the guest. */
static gboolean on_readable(int fd, GIOCondition cond, gpointer data)
{
    GTask *task = data;
    Attempt *a = g_task_get_task_data(task);
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);

    (void)cond;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return G_SOURCE_CONTINUE;
    if (n <= 0) {
        complete(task, g_error_new(G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED,
                                   "the guest refused the vsock connection"));
        return G_SOURCE_REMOVE;
    }
    if (c == '\n') {
        a->line[a->got] = '\0';
        complete(task, parse_answer(a));
        return G_SOURCE_REMOVE;
    }
    a->line[a->got++] = c;
    if (a->got >= ANSWER_MAX - 1) {
        complete(task, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_BRIDGE,
                                   "the bridge's answer to CONNECT is too long"));
        return G_SOURCE_REMOVE;
    }
    return G_SOURCE_CONTINUE;
}

static gboolean on_timeout(gpointer data)
{
    complete(data,
             g_error_new(G_IO_ERROR, G_IO_ERROR_TIMED_OUT, "no answer from the bridge to CONNECT"));
    return G_SOURCE_REMOVE;
}

static gboolean on_cancelled(GCancellable *cancellable, gpointer data)
{
    GError *error = NULL;

    g_cancellable_set_error_if_cancelled(cancellable, &error);
    complete(data, error);
    return G_SOURCE_REMOVE;
}

/* socket + connect + "CONNECT <port>\n"; the fd in @a on success. */
static GError *start_attempt(Attempt *a, const char *uds_path, guint32 port)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char req[32];
    int len = snprintf(req, sizeof req, "CONNECT %u\n", port);

    if (strlen(uds_path) >= sizeof addr.sun_path)
        return g_error_new(G_IO_ERROR, G_IO_ERROR_FILENAME_TOO_LONG, "%s: path too long", uds_path);
    strcpy(addr.sun_path, uds_path);
    a->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0)
        return g_error_new(G_IO_ERROR, g_io_error_from_errno(errno), "socket: %s",
                           g_strerror(errno));
    if (connect(a->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = errno;
        /* EAGAIN: the bridge's backlog is full; like a refusal, worth another try. */
        return g_error_new(G_IO_ERROR,
                           e == EAGAIN ? G_IO_ERROR_CONNECTION_REFUSED : g_io_error_from_errno(e),
                           "connect %s: %s", uds_path, g_strerror(e));
    }
    if (send(a->fd, req, (size_t)len, MSG_NOSIGNAL) != len)
        return g_error_new(G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED,
                           "the bridge closed the connection before CONNECT");
    return NULL;
}

static GSource *attach(GSource *s, GSourceFunc func, GTask *task)
{
    g_source_set_callback(s, func, g_object_ref(task), g_object_unref);
    g_source_attach(s, g_task_get_context(task));
    return s;
}

void sbx_hvsock_connect_async(const char *uds_path, guint32 port, guint timeout_ms,
                              GCancellable *cancellable, GAsyncReadyCallback callback,
                              gpointer user_data)
{
    g_autoptr(GTask) task = g_task_new(NULL, cancellable, callback, user_data);
    Attempt *a = g_new0(Attempt, 1);
    GError *error;

    a->fd = -1;
    g_task_set_source_tag(task, sbx_hvsock_connect_async);
    g_task_set_task_data(task, a, attempt_free);
    error = start_attempt(a, uds_path, port);
    if (error) {
        g_task_return_error(task, error);
        return;
    }
    a->io = attach(g_unix_fd_source_new(a->fd, G_IO_IN | G_IO_HUP | G_IO_ERR),
                   G_SOURCE_FUNC(on_readable), task);
    a->timer = attach(g_timeout_source_new(timeout_ms), on_timeout, task);
    if (cancellable)
        a->cancel =
            attach(g_cancellable_source_new(cancellable), G_SOURCE_FUNC(on_cancelled), task);
}

int sbx_hvsock_connect_finish(GAsyncResult *result, GError **error)
{
    gpointer box = g_task_propagate_pointer(G_TASK(result), error);

    return box ? GPOINTER_TO_INT(box) - 1 : -1;
}
