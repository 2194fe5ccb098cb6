/*
 * `sandbox approvals [--json]`, `sandbox approve ID`, `sandbox deny ID`: the approvals of tool
 * calls waiting in `sandbox serve` (docs/tools.md, "Approvals"; messages: docs/pool.md). Each
 * verb is one request and one answer on the server's socket, before the main loop runs
 * (`sandbox approvals` asks once more for each input too long for the list, to show it whole).
 * What a person reads is escaped for a terminal (escape.h): inputs and origins come from
 * programs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/escape.h"
#include "cli/input-view.h"
#include "cli/serve-client.h"
#include "protocol/limits.h"
#include "server/proto.h"

/* The server answers from its main loop; 5 s covers a loaded host without hanging a script. */
#define APPROVALS_ANSWER_MS 5000

/* The answer is not one that was asked for (not found, bad request). */
#define APPROVALS_EXIT_REFUSED 1

/*
 * An input this short (escaped) is listed on its approval's line, as one line of compact JSON;
 * a longer one below it, pretty-printed and folded, whole.
 */
#define APPROVALS_INLINE_MAX 200

/* Send @request and read the answer into @answer; FALSE (and a message) if there is no server
 * or no answer. */
static gboolean ask(const char *verb, const char *request, SbxServeMsg *answer)
{
    int fd = sbx_serve_client_connect();
    gboolean ok = FALSE;

    if (fd < 0) {
        fprintf(stderr,
                "sandbox %s: no `sandbox serve` answers (approvals live in the server; "
                "socket: $SANDBOX_SERVE_SOCKET or the default, docs/pool.md)\n",
                verb);
        return FALSE;
    }
    if (sbx_serve_client_send(fd, request)) {
        ok = sbx_serve_client_read(fd, g_get_monotonic_time() + APPROVALS_ANSWER_MS * 1000ll,
                                   answer);
    }
    close(fd);
    if (!ok) {
        fprintf(stderr, "sandbox %s: the server did not answer\n", verb);
    }
    return ok;
}

/* Ids are the server's counters: letters, digits, `-`, `_` (so they go into JSON as is). */
static gboolean id_valid(const char *id)
{
    gsize len = strlen(id);

    for (const char *p = id; *p != '\0'; p++) {
        if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_') {
            return FALSE;
        }
    }
    return len > 0 && len <= SBX_SERVE_APPROVAL_ID_MAX;
}

static const char *str(const char *s)
{
    return s != NULL ? s : "?";
}

/*
 * The input of @a whole (a new string), fetched alone when the list had only its start
 * (`input_excerpt`: the list of every approval must fit one frame). NULL if it cannot be had:
 * the approval is no longer pending, or the server is one that does not send it alone.
 */
static char *whole_input(const SbxServePending *a)
{
    if (a->input_json != NULL) {
        return g_strdup(a->input_json);
    }
    if (a->id == NULL || !id_valid(a->id)) {
        return NULL;
    }
    SbxServeRequest r = {.type = SBX_SERVE_REQ_APPROVALS, .id = a->id};
    g_autofree char *req = sbx_serve_proto_request_encode(&r);
    g_auto(SbxServeMsg) answer = {0};
    if (!ask("approvals", req, &answer) || answer.n_pending != 1 ||
        g_strcmp0(answer.pending[0].id, a->id) != 0 || answer.pending[0].input_json == NULL) {
        return NULL;
    }
    return g_strdup(answer.pending[0].input_json);
}

/* The lines about @a: a header, and its input on it if short, else below it, whole. */
static void print_pending(const SbxServePending *a, guint width)
{
    g_autofree char *head = g_strdup_printf("%s\t%s.%s\t%s\twaiting %.0f s of %.0f s", str(a->id),
                                            str(a->provider), str(a->tool), str(a->origin),
                                            a->waiting_ms / 1000.0, a->timeout_ms / 1000.0);
    g_autofree char *safe_head = sbx_escape(head, -1, SBX_ESCAPE_TEXT);
    g_autofree char *input = whole_input(a);
    const char *shown = input != NULL ? input : str(a->input_excerpt);
    g_autofree char *flat = sbx_escape(shown, -1, SBX_ESCAPE_TEXT);

    if (input != NULL && strlen(flat) <= APPROVALS_INLINE_MAX) {
        printf("%s\t%s\n", safe_head, flat);
        return;
    }
    g_autofree char *view = sbx_input_view(shown, strlen(shown), width, "  ", NULL);
    printf("%s\n%s", safe_head, view);
    if (input == NULL) {
        printf("  (only the first %" G_GSIZE_FORMAT
               " bytes: the server did not send the rest, or the call stopped waiting)\n",
               strlen(shown));
    }
}

/* The width to fold to: the terminal's, or 0 (not folded) when stdout is none. */
static guint out_width(void)
{
    struct winsize ws = {0};

    if (!isatty(STDOUT_FILENO) || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0) {
        return 0;
    }
    return ws.ws_col;
}

static int approvals_start(SbxCli *cli, int argc, char **argv)
{
    gboolean json = FALSE;
    (void)cli;

    if (argc == 2 && strcmp(argv[1], "--json") == 0) {
        json = TRUE;
    } else if (argc != 1) {
        fprintf(stderr, "usage: sandbox approvals [--json]\n");
        return SBX_EXIT_USAGE;
    }
    g_auto(SbxServeMsg) answer = {0};
    SbxServeRequest r = {.type = SBX_SERVE_REQ_APPROVALS};
    g_autofree char *req = sbx_serve_proto_request_encode(&r);
    if (!ask("approvals", req, &answer) || answer.pending_json == NULL) {
        return SBX_EXIT_SANDBOX;
    }
    if (json) {
        /* Exact in a pipe; on a terminal DEL and C1 controls as JSON escapes (the same JSON). */
        g_autofree char *text = isatty(STDOUT_FILENO)
                                    ? sbx_escape(answer.pending_json, -1, SBX_ESCAPE_JSON)
                                    : g_strdup(answer.pending_json);
        puts(text);
        return 0;
    }
    if (answer.n_pending == 0) {
        fprintf(stderr, "no tool call waits for an approval\n");
    }
    guint width = out_width();
    for (gsize i = 0; i < answer.n_pending; i++) {
        print_pending(&answer.pending[i], width);
    }
    return 0;
}

static int decide(const char *verb, int argc, char **argv)
{
    if (argc != 2 || !id_valid(argv[1])) {
        fprintf(stderr, "usage: sandbox %s ID   (IDs: `sandbox approvals`)\n", verb);
        return SBX_EXIT_USAGE;
    }
    SbxServeRequest r = {
        .type = strcmp(verb, "approve") == 0 ? SBX_SERVE_REQ_APPROVE : SBX_SERVE_REQ_DENY,
        .id = argv[1],
    };
    g_autofree char *req = sbx_serve_proto_request_encode(&r);
    g_auto(SbxServeMsg) answer = {0};
    if (!ask(verb, req, &answer)) {
        return SBX_EXIT_SANDBOX;
    }
    if (answer.type == SBX_SERVE_MSG_ERROR) {
        fprintf(stderr, "sandbox %s: %s\n", verb, str(answer.message));
        return APPROVALS_EXIT_REFUSED;
    }
    printf("%s %s\n", answer.type_name, argv[1]);
    return 0;
}

static int approve_start(SbxCli *cli, int argc, char **argv)
{
    (void)cli;
    return decide("approve", argc, argv);
}

static int deny_start(SbxCli *cli, int argc, char **argv)
{
    (void)cli;
    return decide("deny", argc, argv);
}

const SbxCliVerb sbx_cli_verb_approvals = {
    .name = "approvals",
    .summary = "List the tool calls waiting for an approval in `sandbox serve`",
    .start = approvals_start,
};

const SbxCliVerb sbx_cli_verb_approve = {
    .name = "approve",
    .summary = "Approve a waiting tool call: sandbox approve ID",
    .start = approve_start,
};

const SbxCliVerb sbx_cli_verb_deny = {
    .name = "deny",
    .summary = "Deny a waiting tool call: sandbox deny ID",
    .start = deny_start,
};
