/*
 * Approval prompts on the terminal (prompt.h). The terminal is read from the main loop and
 * written by a writer thread (writer.h), never blocking the loop: the program's other tool calls
 * go on while a question waits, and a stopped terminal (^S) stops nothing but the prompt.
 *
 * The call's input is shown whole, never cut (docs/cli.md, "Approvals on the terminal"): on the
 * question's line when it fits, else pretty-printed and folded to the terminal's width
 * (input-view.h), a page at a time; the approval is asked once the last page was shown.
 * Everything shown is escaped for the terminal: neither the input nor the guest's output (which
 * out.h escapes on a terminal too) can move the cursor or erase the question.
 */
#include "cli/prompt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <glib-unix.h>

#include "cli/escape.h"
#include "cli/input-view.h"
#include "cli/writer.h"

/* An answer is a word; a longer line is read up to here and taken as "no". */
#define PROMPT_LINE_MAX 256

/* The terminal's size when it does not say (TIOCGWINSZ): the classic terminal's. */
#define PROMPT_COLS_DEFAULT 80
#define PROMPT_ROWS_DEFAULT 24

/* Lines of input per page, at least: a terminal of fewer rows still shows some each time. */
#define PROMPT_PAGE_MIN 4

/* Indentation of the input's lines, apart from the prompt's own "sandbox: " lines. */
#define PROMPT_INPUT_PREFIX "  "

struct SbxPrompt {
    SbxApprovals *approvals;
    int fd;
    SbxWriter *out;
    guint source;
    char *asking;      /* id of the approval asked about, or NULL */
    gboolean deciding; /* inside our own decision (its notify is not news) */
    guint timeout_s;
    GString *line;
    /* The input of the call asked about, folded, while some of it was not shown (else NULL). */
    char *view;
    const char *view_next; /* its first line not shown yet */
    guint view_shown, view_lines;
};

static void say(SbxPrompt *p, const char *text)
{
    /* Past the queue's bound if need be: a question is never cut (one is asked at a time). */
    sbx_writer_push(p->out, text, strlen(text), TRUE);
}

static void term_size(SbxPrompt *p, guint *ret_cols, guint *ret_rows)
{
    struct winsize ws = {0};

    if (ioctl(p->fd, TIOCGWINSZ, &ws) < 0 || ws.ws_col == 0 || ws.ws_row == 0) {
        ws.ws_col = PROMPT_COLS_DEFAULT;
        ws.ws_row = PROMPT_ROWS_DEFAULT;
    }
    *ret_cols = ws.ws_col;
    *ret_rows = ws.ws_row;
}

static void ask_approval(SbxPrompt *p)
{
    g_autofree char *q =
        g_strdup_printf("sandbox: approve it? [y/N] (denied after %u s) ", p->timeout_s);

    say(p, q);
}

static void ask_more(SbxPrompt *p)
{
    g_autofree char *q = g_strdup_printf("sandbox: shown %u of %u lines; Enter: more, a: all the "
                                         "rest, n: deny (y once all is shown) ",
                                         p->view_shown, p->view_lines);

    say(p, q);
}

/* The next @n lines of the input; then the approval question, or the question for more. */
static void show_page(SbxPrompt *p, guint n)
{
    const char *end = p->view_next;
    guint k = 0;

    for (; *end != '\0' && k < n; k++) {
        end = strchr(end, '\n') + 1; /* every line of a view ends with one */
    }
    g_autofree char *page = g_strndup(p->view_next, end - p->view_next);
    say(p, page);
    p->view_next = end;
    p->view_shown += k;
    if (*end != '\0') {
        ask_more(p);
        return;
    }
    g_clear_pointer(&p->view, g_free);
    ask_approval(p);
}

static guint page_lines(SbxPrompt *p)
{
    guint cols, rows;

    term_size(p, &cols, &rows);
    /* The question for more stays in sight above the page, and the next one below it. */
    return rows > PROMPT_PAGE_MIN + 2 ? rows - 2 : PROMPT_PAGE_MIN;
}

/* Show the input of @a and ask about it. */
static void ask(SbxPrompt *p, const SbxApproval *a)
{
    guint cols, rows;
    g_autofree char *flat = sbx_escape(a->input_json, -1, SBX_ESCAPE_TEXT);
    g_autofree char *call = g_strdup_printf("%s.%s", a->provider, a->tool);
    g_autofree char *safe_call = sbx_escape(call, -1, SBX_ESCAPE_TEXT);
    g_autofree char *head = g_strdup_printf("sandbox: tool %s wants to run with ", safe_call);

    p->asking = g_strdup(a->id);
    p->timeout_s = a->timeout_ms / 1000;
    term_size(p, &cols, &rows);
    if (sbx_input_view_columns(head) + sbx_input_view_columns(flat) <= cols) {
        g_autofree char *q = g_strdup_printf("\n%s%s\n", head, flat);
        say(p, q);
        ask_approval(p);
        return;
    }
    gsize len = strlen(a->input_json);
    p->view = sbx_input_view(a->input_json, len, cols, PROMPT_INPUT_PREFIX, &p->view_lines);
    p->view_next = p->view;
    p->view_shown = 0;
    g_autofree char *q =
        g_strdup_printf("\nsandbox: tool %s wants to run with this input (%" G_GSIZE_FORMAT
                        " bytes of JSON, %u lines):\n",
                        safe_call, len, p->view_lines);
    say(p, q);
    show_page(p, page_lines(p) - 1); /* the line above is on screen too */
}

/* Ask about the oldest approval nobody has answered yet, if any. */
static void ask_next(SbxPrompt *p)
{
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(p->approvals);

    g_clear_pointer(&p->asking, g_free);
    g_clear_pointer(&p->view, g_free);
    if (pending->len > 0) {
        ask(p, pending->pdata[0]);
    }
}

static gboolean is_word(const char *line, const char *a, const char *b)
{
    return g_ascii_strcasecmp(line, a) == 0 || g_ascii_strcasecmp(line, b) == 0;
}

/* An answer while pages of the input are unseen: TRUE if it was about paging. */
static gboolean answer_paging(SbxPrompt *p, const char *line)
{
    if (line[0] == '\0') {
        show_page(p, page_lines(p));
    } else if (is_word(line, "a", "all")) {
        show_page(p, G_MAXUINT);
    } else if (is_word(line, "y", "yes")) {
        say(p, "sandbox: not all of the input was shown yet\n");
        ask_more(p);
    } else {
        return FALSE; /* `n`, or anything else: denied, as at the question */
    }
    return TRUE;
}

static void answer(SbxPrompt *p)
{
    g_strstrip(p->line->str);
    g_autofree char *line = g_strdup(p->line->str);
    g_string_truncate(p->line, 0);
    if (p->asking == NULL || (p->view != NULL && answer_paging(p, line))) {
        return;
    }
    p->deciding = TRUE; /* the decision's notify is about the call asked: not news */
    gboolean taken = sbx_approvals_decide_by(p->approvals, p->asking, is_word(line, "y", "yes"),
                                             "the terminal of sandbox run");
    p->deciding = FALSE;
    if (!taken) {
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

    if (p->deciding || p->source == 0 || (p->asking != NULL && asked_pending(p))) {
        return;
    }
    if (p->asking != NULL) {
        say(p, "\nsandbox: that call is no longer waiting (timed out or cancelled)\n");
    }
    ask_next(p);
}

SbxPrompt *sbx_prompt_new_fd(SbxApprovals *approvals, int fd)
{
    SbxPrompt *p = g_new0(SbxPrompt, 1);

    p->approvals = approvals;
    p->fd = fd;
    p->out = sbx_writer_new(fd);
    p->line = g_string_new(NULL);
    p->source = g_unix_fd_add(fd, G_IO_IN | G_IO_HUP | G_IO_ERR, on_tty, p);
    sbx_approvals_set_notify(approvals, on_pending_changed, p);
    return p;
}

SbxPrompt *sbx_prompt_new(SbxApprovals *approvals)
{
    /* A description of our own: O_NONBLOCK here changes nobody else's terminal. */
    int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    if (fd < 0) {
        return NULL; /* no controlling terminal: nobody to ask */
    }
    return sbx_prompt_new_fd(approvals, fd);
}

void sbx_prompt_free(SbxPrompt *prompt)
{
    if (prompt == NULL) {
        return;
    }
    sbx_approvals_set_notify(prompt->approvals, NULL, NULL);
    g_clear_handle_id(&prompt->source, g_source_remove);
    sbx_writer_flush(prompt->out, SBX_WRITER_FLUSH_STALL_MS, SBX_WRITER_FLUSH_MAX_MS);
    sbx_writer_free(prompt->out);
    close(prompt->fd);
    g_free(prompt->asking);
    g_free(prompt->view);
    g_string_free(prompt->line, TRUE);
    g_free(prompt);
}
