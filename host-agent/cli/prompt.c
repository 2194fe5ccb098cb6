/*
 * Approval prompts on the terminal (prompt.h). The terminal is read from the main loop, never
 * blocking it: the program's other tool calls go on while a question waits.
 */
#include "cli/prompt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib-unix.h>

/* An answer is a word; a longer line is read up to here and taken as "no". */
#define PROMPT_LINE_MAX 256

/* Input shown in the question: enough to recognise the call, short enough for a terminal. */
#define PROMPT_INPUT_SHOWN 300

struct SbxPrompt {
    SbxApprovals *approvals;
    int fd;
    guint source;
    char *asking; /* id of the approval asked about, or NULL */
    GString *line;
};

static void say(SbxPrompt *p, const char *text)
{
    gsize len = strlen(text);

    while (len > 0) {
        ssize_t n = write(p->fd, text, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return; /* the terminal is gone: the approval will time out */
        }
        text += n;
        len -= n;
    }
}

/* Ask about the oldest approval nobody has answered yet, if any. */
static void ask_next(SbxPrompt *p)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(p->approvals);

    g_clear_pointer(&p->asking, g_free);
    if (pending->len == 0) {
        return;
    }
    const SbxApproval *a = pending->pdata[0];
    gboolean cut = strlen(a->input_json) > PROMPT_INPUT_SHOWN;
    g_autofree char *input = g_utf8_make_valid(a->input_json, cut ? PROMPT_INPUT_SHOWN : -1);
    g_autofree char *q = g_strdup_printf(
        "\nsandbox: tool %s.%s wants to run with %s%s\nsandbox: approve it? [y/N] (denied "
        "after %u s) ",
        a->provider, a->tool, input, cut ? "..." : "", a->timeout_ms / 1000);
    p->asking = g_strdup(a->id);
    say(p, q);
}

static void answer(SbxPrompt *p)
{
    g_strstrip(p->line->str);
    gboolean yes =
        g_ascii_strcasecmp(p->line->str, "y") == 0 || g_ascii_strcasecmp(p->line->str, "yes") == 0;
    g_string_truncate(p->line, 0);
    if (p->asking == NULL) {
        return;
    }
    if (!sbx_approvals_decide(p->approvals, p->asking, yes)) {
        say(p, "sandbox: too late: that call is no longer waiting\n");
    }
    ask_next(p);
}

static gboolean on_tty(gint fd, GIOCondition cond, gpointer data)
{
    SbxPrompt *p = data;
    char buf[PROMPT_LINE_MAX];
    ssize_t n = read(fd, buf, sizeof(buf));
    (void)cond;

    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return G_SOURCE_CONTINUE;
    }
    if (n <= 0) {
        p->source = 0; /* no more answers: what waits times out */
        return G_SOURCE_REMOVE;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            answer(p);
        } else if (p->line->len < PROMPT_LINE_MAX) {
            g_string_append_c(p->line, buf[i]);
        }
    }
    return G_SOURCE_CONTINUE;
}

/* Whether the approval asked about still waits for its answer. */
static gboolean asked_pending(SbxPrompt *p)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(p->approvals);

    for (guint i = 0; i < pending->len; i++) {
        if (strcmp(((const SbxApproval *)pending->pdata[i])->id, p->asking) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

/* A new approval, or one that timed out or was cancelled: if it was the one asked, move on. */
static void on_pending_changed(SbxApprovals *approvals, gpointer data)
{
    SbxPrompt *p = data;
    (void)approvals;

    if (p->source == 0 || (p->asking != NULL && asked_pending(p))) {
        return;
    }
    if (p->asking != NULL) {
        say(p, "\nsandbox: that call is no longer waiting (timed out or cancelled)\n");
    }
    ask_next(p);
}

SbxPrompt *sbx_prompt_new(SbxApprovals *approvals)
{
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    if (fd < 0) {
        return NULL; /* no controlling terminal: nobody to ask */
    }
    SbxPrompt *p = g_new0(SbxPrompt, 1);
    p->approvals = approvals;
    p->fd = fd;
    p->line = g_string_new(NULL);
    p->source = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_tty, p);
    sbx_approvals_set_notify(approvals, on_pending_changed, p);
    return p;
}

void sbx_prompt_free(SbxPrompt *prompt)
{
    if (prompt == NULL) {
        return;
    }
    sbx_approvals_set_notify(prompt->approvals, NULL, NULL);
    g_clear_handle_id(&prompt->source, g_source_remove);
    close(prompt->fd);
    g_free(prompt->asking);
    g_string_free(prompt->line, TRUE);
    g_free(prompt);
}
