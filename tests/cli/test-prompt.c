/*
 * Approval prompts on a terminal (host-agent/cli/prompt.c), on a pseudo-terminal of 80x24:
 * a 5 KB input is shown whole, a page at a time (exactly the folded view, nothing cut or
 * added), approving waits for the last page; a short input stays on the question's line; what
 * is shown cannot drive the terminal.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "approvals.h"
#include "cli/input-view.h"
#include "cli/prompt.h"
#include "pty.h"

#define COLS 80
#define ROWS 24

/* The prompt's questions, as it asks them. */
#define MORE_RE                                                                                    \
    "sandbox: shown [0-9]+ of [0-9]+ lines; Enter: more, a: all the rest, n: deny \\(y once all "  \
    "is shown\\) "
#define APPROVE "sandbox: approve it? [y/N]"

typedef struct {
    SbxApprovals *approvals;
    SbxPrompt *prompt;
    int master;
    GString *shown; /* everything the terminal got */
    gsize seen;     /* how much of it wait_for() has looked at */
    int decided;
    SbxApprovalOutcome outcome;
} Fixture;

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);
    int term;

    test_pty_open(COLS, ROWS, &term, &f->master);
    f->approvals = sbx_approvals_new();
    f->prompt = sbx_prompt_new_fd(f->approvals, term);
    f->shown = g_string_new(NULL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    Fixture *f = *state;

    sbx_prompt_free(f->prompt);
    sbx_approvals_free(f->approvals);
    close(f->master);
    g_string_free(f->shown, TRUE);
    g_free(f);
    return 0;
}

static void on_decided(SbxApprovalOutcome outcome, const SbxApprovalAnswer *answer, gpointer data)
{
    Fixture *f = data;
    (void)answer;

    f->decided++;
    f->outcome = outcome;
}

/* Run the loop and read the terminal until @text shows after what was seen (10 s at most). */
static void wait_for(Fixture *f, const char *text)
{
    gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
    const char *at;

    while ((at = strstr(f->shown->str + f->seen, text)) == NULL) {
        if (g_get_monotonic_time() > end) {
            fail_msg("\"%s\" never showed; the terminal got:\n%s", text, f->shown->str + f->seen);
        }
        g_main_context_iteration(NULL, FALSE);
        test_pty_drain(f->master, f->shown);
        g_usleep(1000);
    }
    f->seen = at - f->shown->str + strlen(text);
}

static void type(Fixture *f, const char *line)
{
    assert_int_equal(write(f->master, line, strlen(line)), (ssize_t)strlen(line));
}

static void wait_decided(Fixture *f)
{
    gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;

    while (f->decided == 0 && g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
    assert_int_equal(f->decided, 1);
}

/* 5 KB in a string, numbered so that a lost or doubled piece shows, and a number kept exact. */
static char *big_input(void)
{
    GString *s = g_string_new("{\"path\":\"/tmp/x\",\"text\":\"");

    for (int i = 0; i < 1000; i++) {
        g_string_append_printf(s, "%04d,", i);
    }
    g_string_append(s, "\",\"n\":12345678901234567890,\"list\":[1,2,{\"k\":null}]}");
    return g_string_free(s, FALSE);
}

/* The input lines the terminal showed, the prompt's own lines between the pages taken out. */
static char *shown_input(Fixture *f, gsize from)
{
    const char *start = strstr(f->shown->str + from, "lines):\n");
    const char *end = strstr(f->shown->str + from, APPROVE);
    assert_non_null(start);
    assert_non_null(end);
    start += strlen("lines):\n");
    g_autofree char *pages = g_strndup(start, end - start);
    g_autoptr(GRegex) re =
        g_regex_new(MORE_RE "|sandbox: not all of the input was shown yet\n", 0, 0, NULL);
    return g_regex_replace_literal(re, pages, -1, 0, "", 0, NULL);
}

static void test_big_input_whole(void **state)
{
    Fixture *f = *state;
    g_autofree char *input = big_input();
    guint lines = 0;
    g_autofree char *view = sbx_input_view(input, strlen(input), COLS, "  ", &lines);

    assert_true(strlen(input) > 5000);
    sbx_approvals_request(f->approvals, "files", "write", input, "test", 60000, NULL, on_decided,
                          f);
    wait_for(f, "sandbox: tool files.write wants to run with this input (");
    g_autofree char *first = g_strdup_printf("sandbox: shown %u of %u lines;", ROWS - 3, lines);
    wait_for(f, first); /* a screenful: the header, the page, the question */
    type(f, "y\n");     /* too early: not all was shown */
    wait_for(f, "sandbox: not all of the input was shown yet\n");
    wait_for(f, "Enter: more");
    assert_int_equal(f->decided, 0);
    int pages = 1;
    while (strstr(f->shown->str + f->seen, APPROVE) == NULL) {
        assert_true(pages++ < 100);
        type(f, "\n");
        gint64 end = g_get_monotonic_time() + 10 * G_USEC_PER_SEC;
        gsize before = f->shown->len;
        while (f->shown->len == before || (!g_str_has_suffix(f->shown->str, "shown) ") &&
                                           !g_str_has_suffix(f->shown->str, "s) "))) {
            assert_true(g_get_monotonic_time() < end);
            g_main_context_iteration(NULL, FALSE);
            test_pty_drain(f->master, f->shown);
            g_usleep(1000);
        }
    }
    assert_true(pages > 2);
    g_autofree char *got = shown_input(f, 0);
    assert_string_equal(got, view); /* every line of the input, once, in order */
    type(f, "y\n");
    wait_decided(f);
    assert_int_equal(f->outcome, SBX_APPROVAL_APPROVED);
}

/* `a` shows the rest at once; `n` while pages wait denies. */
static void test_all_and_deny(void **state)
{
    Fixture *f = *state;
    g_autofree char *input = big_input();

    sbx_approvals_request(f->approvals, "files", "write", input, NULL, 60000, NULL, on_decided, f);
    wait_for(f, "Enter: more");
    type(f, "a\n");
    wait_for(f, APPROVE);
    g_autofree char *got = shown_input(f, 0);
    g_autofree char *view = sbx_input_view(input, strlen(input), COLS, "  ", NULL);
    assert_string_equal(got, view);
    type(f, "n\n");
    wait_decided(f);
    assert_int_equal(f->outcome, SBX_APPROVAL_DENIED);

    f->decided = 0;
    sbx_approvals_request(f->approvals, "files", "write", input, NULL, 60000, NULL, on_decided, f);
    wait_for(f, "Enter: more");
    type(f, "n\n");
    wait_decided(f);
    assert_int_equal(f->outcome, SBX_APPROVAL_DENIED);
}

/* A short input is on the question's line, as before. */
static void test_short_inline(void **state)
{
    Fixture *f = *state;

    sbx_approvals_request(f->approvals, "api", "guarded", "{\"p\":1}", NULL, 60000, NULL,
                          on_decided, f);
    wait_for(f, "\nsandbox: tool api.guarded wants to run with {\"p\":1}\n" APPROVE);
    type(f, "yes\n");
    wait_decided(f);
    assert_int_equal(f->outcome, SBX_APPROVAL_APPROVED);
}

/* Nothing in an input (raw DEL and C1 controls in strings) or a name drives the terminal. */
static void test_nothing_drives_the_terminal(void **state)
{
    Fixture *f = *state;
    g_autoptr(GString) input = g_string_new("{\"a\":\"\x7f\xc2\x9b"
                                            "2J\xc2\x9d"
                                            "0;x\",\"b\":\"");

    for (int i = 0; i < 300; i++) {
        g_string_append(input, "\xc2\x9b"
                               "1A\x7f");
    }
    g_string_append(input, "\"}");
    sbx_approvals_request(f->approvals, "p\x1b[2J", "t\r", input->str, NULL, 60000, NULL,
                          on_decided, f);
    wait_for(f, "Enter: more");
    type(f, "a\n");
    wait_for(f, APPROVE);
    for (gsize i = 0; i < f->shown->len; i++) {
        guint8 b = f->shown->str[i];
        assert_true(b >= 0x20 || b == '\n');
        assert_true(b != 0x7f);
        assert_false(b == 0xc2 && (guint8)f->shown->str[i + 1] < 0xa0);
    }
    assert_non_null(strstr(f->shown->str, "tool p\\x1b[2J.t\\x0d wants"));
    assert_non_null(strstr(f->shown->str, "\\x7f\\u009b2J\\u009d0;x"));
    type(f, "n\n");
    wait_decided(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_big_input_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_all_and_deny, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_inline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nothing_drives_the_terminal, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
