/*
 * `sandbox approvals [--json]`, `sandbox approve ID`, `sandbox deny ID`: the approvals of tool
 * calls waiting in `sandbox serve` (docs/tools.md, "Approvals"; messages: docs/pool.md). Each
 * verb is one request and one answer on the server's socket, before the main loop runs.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/serve-client.h"
#include "cli/serve-proto.h"
#include "protocol/frame.h"
#include "protocol/limits.h"

/* The server answers from its main loop; 5 s covers a loaded host without hanging a script. */
#define APPROVALS_ANSWER_MS 5000

/* The answer is not one that was asked for (not found, bad request). */
#define APPROVALS_EXIT_REFUSED 1

/*
 * Read one frame (the answer) within @deadline_us (monotonic), in chunks, and decode it into
 * @msg: the server closes nothing, but sends nothing else on this connection either. FALSE if
 * none came in time or it is no message.
 */
static gboolean read_answer(int fd, gint64 deadline_us, SbxServeMsg *msg)
{
    SbxFrameReader r;
    guint8 buf[64 * 1024];
    gboolean over = FALSE, got = FALSE, ok = FALSE;

    sbx_frame_reader_init(&r, SBX_FRAME_MAX);
    while (!got && !over) {
        struct pollfd q = {.fd = fd, .events = POLLIN};
        int left = (int)((deadline_us - g_get_monotonic_time()) / 1000);
        ssize_t n = left > 0 && poll(&q, 1, left) > 0 ? read(fd, buf, sizeof(buf)) : -1;
        over = n <= 0;
        for (gsize off = 0; n > 0 && off < (gsize)n && !got;) {
            char *payload = NULL;
            size_t plen = 0;
            ssize_t used = sbx_frame_reader_feed(&r, buf + off, n - off, &payload, &plen);
            if (used < 0) {
                over = TRUE;
                break;
            }
            got = payload != NULL;
            ok = got && sbx_serve_proto_msg_decode(payload, plen, msg);
            free(payload);
            off += used;
        }
    }
    sbx_frame_reader_clear(&r);
    return ok;
}

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
        ok = read_answer(fd, g_get_monotonic_time() + APPROVALS_ANSWER_MS * 1000ll, answer);
    }
    close(fd);
    if (!ok) {
        fprintf(stderr, "sandbox %s: the server did not answer\n", verb);
    }
    return ok;
}

static const char *str(const char *s)
{
    return s != NULL ? s : "?";
}

static void print_pending(const SbxServePending *a)
{
    const char *in = a->input_json != NULL ? a->input_json : str(a->input_excerpt);

    printf("%s\t%s.%s\t%s\twaiting %.0f s of %.0f s\t%.200s%s\n", str(a->id), str(a->provider),
           str(a->tool), str(a->origin), a->waiting_ms / 1000.0, a->timeout_ms / 1000.0, in,
           strlen(in) > 200 ? "..." : "");
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
    if (!ask("approvals", "{\"type\":\"approvals\"}", &answer) || answer.pending_json == NULL) {
        return SBX_EXIT_SANDBOX;
    }
    if (json) {
        puts(answer.pending_json);
        return 0;
    }
    if (answer.n_pending == 0) {
        fprintf(stderr, "no tool call waits for an approval\n");
    }
    for (gsize i = 0; i < answer.n_pending; i++) {
        print_pending(&answer.pending[i]);
    }
    return 0;
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

static int decide(const char *verb, int argc, char **argv)
{
    if (argc != 2 || !id_valid(argv[1])) {
        fprintf(stderr, "usage: sandbox %s ID   (IDs: `sandbox approvals`)\n", verb);
        return SBX_EXIT_USAGE;
    }
    g_autoptr(GString) req = g_string_new(NULL);
    g_string_printf(req, "{\"type\":\"%s\",\"id\":\"%s\"}", verb, argv[1]);
    g_auto(SbxServeMsg) answer = {0};
    if (!ask(verb, req->str, &answer)) {
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
