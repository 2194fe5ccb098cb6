/* The scripted fake QMP server (see fake-qmp.h). */
#include "fake-qmp.h"

#include <cJSON.h>
#include <errno.h>
#include <glib-unix.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char fake_qmp_greeting[] =
    "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}, "
    "\"package\": \"Debian 1:7.2+dfsg-7+deb12u18+b3\"}, \"capabilities\": [\"oob\"]}}\r\n";

struct FakeQmp {
    int fd;
    guint watch;
    GString *in;
    const FakeQmpStep *steps;
    gsize n_steps;
    gsize done;
    char *error;
    char *last_line;
};

void fake_qmp_send(FakeQmp *f, const char *data, gsize len)
{
    while (f->fd >= 0 && len > 0) {
        ssize_t n = write(f->fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            g_usleep(1000); /* the client reads on the same loop: only for large sends */
            continue;
        }
        if (n <= 0)
            return;
        data += n;
        len -= (gsize)n;
    }
}

static void set_error(FakeQmp *f, char *msg)
{
    if (!f->error)
        f->error = msg;
    else
        g_free(msg);
}

/* Answer one command line with the next step. */
static void handle(FakeQmp *f, const char *line)
{
    cJSON *msg = cJSON_Parse(line);
    const cJSON *exec = cJSON_GetObjectItemCaseSensitive(msg, "execute");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const FakeQmpStep *step = f->done < f->n_steps ? &f->steps[f->done++] : NULL;
    char *id_text = id ? cJSON_PrintUnformatted(id) : strdup("null");

    g_free(f->last_line);
    f->last_line = g_strdup(line);
    if (!cJSON_IsString(exec))
        set_error(f, g_strdup_printf("not a command: %s", line));
    else if (!step)
        set_error(f, g_strdup_printf("unexpected command %s", exec->valuestring));
    else if (step->expect && !g_str_equal(step->expect, exec->valuestring))
        set_error(f, g_strdup_printf("expected %s, got %s", step->expect, exec->valuestring));
    if (step && step->reply) {
        GString *r = g_string_new(step->reply);
        g_string_replace(r, "%ID%", id_text, 0);
        fake_qmp_send(f, r->str, r->len);
        g_string_free(r, TRUE);
    }
    free(id_text);
    cJSON_Delete(msg);
}

static gboolean on_readable(int fd, GIOCondition cond, gpointer data)
{
    FakeQmp *f = data;
    char buf[4096], *nl;
    ssize_t n = read(fd, buf, sizeof buf);

    (void)cond;
    if (n < 0 && errno == EAGAIN)
        return G_SOURCE_CONTINUE;
    if (n <= 0) {
        f->watch = 0;
        return G_SOURCE_REMOVE;
    }
    g_string_append_len(f->in, buf, n);
    while ((nl = memchr(f->in->str, '\n', f->in->len))) {
        char *line = g_strndup(f->in->str, (gsize)(nl - f->in->str));
        g_string_erase(f->in, 0, nl - f->in->str + 1);
        handle(f, line);
        g_free(line);
    }
    return G_SOURCE_CONTINUE;
}

FakeQmp *fake_qmp_new(int fd, const char *greeting, const FakeQmpStep *steps, gsize n_steps)
{
    FakeQmp *f = g_new0(FakeQmp, 1);

    f->fd = fd;
    f->in = g_string_new(NULL);
    f->steps = steps;
    f->n_steps = n_steps;
    g_unix_set_fd_nonblocking(fd, TRUE, NULL);
    f->watch = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP, on_readable, f);
    if (greeting)
        fake_qmp_send(f, greeting, strlen(greeting));
    return f;
}

void fake_qmp_close(FakeQmp *f)
{
    if (f->watch)
        g_source_remove(f->watch);
    f->watch = 0;
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

gsize fake_qmp_steps_done(FakeQmp *f)
{
    return f->done;
}

const char *fake_qmp_last_line(FakeQmp *f)
{
    return f->last_line;
}

const char *fake_qmp_error(FakeQmp *f)
{
    return f->error;
}

void fake_qmp_free(FakeQmp *f)
{
    if (!f)
        return;
    fake_qmp_close(f);
    g_string_free(f->in, TRUE);
    g_free(f->error);
    g_free(f->last_line);
    g_free(f);
}
