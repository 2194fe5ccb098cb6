/*
 * `sandbox session new|ls|show|rm|exec|put|get|files|rmfile` (docs/cli.md, "sandbox session"):
 * the sessions of `sandbox serve`, a VM kept across executions with its runner's state and its
 * workspace's files, through the server's socket (messages: docs/pool.md, "Sessions over the
 * socket"). Each subcommand parses, sends its requests and prints; `exec` is `sandbox run`'s
 * client run through the server (serve-client.h) with the session named, so its output,
 * report and exit codes are a run's. What a person reads is escaped for a terminal (escape.h):
 * reasons, paths and file names come from guests.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/escape.h"
#include "cli/language.h"
#include "cli/out.h"
#include "cli/program.h"
#include "cli/serve-client.h"
#include "server/proto.h"
#include "tools.h"

#define VERB "sandbox session"

/* The server answers these from its main loop; 5 s covers a loaded host (as `sandbox approvals`).
 */
#define SESSION_ANSWER_MS 5000

/*
 * An answer that waits on a VM: a new session's (a claim, restored on demand when the pool is
 * empty: seconds under TCG on a busy host) or a file's trip to the guest (32 MiB in 1 MiB
 * round trips). Two minutes, then the client gives up rather than hang a script.
 */
#define SESSION_WORK_MS 120000

/* The server refused what was asked (no such session or file, busy, ended, a quota, ...). */
#define SESSION_EXIT_REFUSED 1

typedef enum {
    SUB_NEW,
    SUB_LS,
    SUB_SHOW,
    SUB_RM,
    SUB_EXEC,
    SUB_PUT,
    SUB_GET,
    SUB_FILES,
    SUB_RMFILE,
} SessionSub;

static const struct {
    const char *name;
    const char *args; /* its positional arguments, for usage */
    guint min, max;   /* how many */
} subs[] = {
    [SUB_NEW] = {"new", "", 0, 0},
    [SUB_LS] = {"ls", "", 0, 0},
    [SUB_SHOW] = {"show", "ID", 1, 1},
    [SUB_RM] = {"rm", "ID", 1, 1},
    [SUB_EXEC] = {"exec", "ID [CODE | --file FILE | -]", 1, 2},
    [SUB_PUT] = {"put", "ID LOCAL [REMOTE]", 2, 3},
    [SUB_GET] = {"get", "ID REMOTE [LOCAL|-]", 2, 3},
    [SUB_FILES] = {"files", "ID [DIR]", 1, 2},
    [SUB_RMFILE] = {"rmfile", "ID PATH", 2, 2},
};

/* Each subcommand's line of `sandbox session --help`, with its options. */
static const char *const usage_lines[] = {
    [SUB_NEW] = "new [--profile NAME] [--idle-timeout SECONDS] [--max-lifetime SECONDS] [--json]",
    [SUB_LS] = "ls [--json]",
    [SUB_SHOW] = "show ID [--json]",
    [SUB_RM] = "rm ID",
    [SUB_EXEC] = "exec ID [--lang L] [--timeout S] [--output-limit BYTES] [--tools FILE]\n"
                 "            [--entry NAME [--args JSON] [--kwargs JSON]] [--json]\n"
                 "            (CODE | --file FILE | - | nothing, with --entry)",
    [SUB_PUT] = "put ID LOCAL [REMOTE]",
    [SUB_GET] = "get ID REMOTE [LOCAL|-]",
    [SUB_FILES] = "files ID [DIR] [--json]",
    [SUB_RMFILE] = "rmfile ID PATH",
};

typedef struct {
    SessionSub sub;
    char **args; /* the positional arguments (borrowed from argv) */
    guint n_args;
    /* new */
    char *profile;
    char *idle_opt;
    char *life_opt;
    guint idle_timeout_s;
    guint max_lifetime_s;
    gboolean json;
    /* exec: as `sandbox run`'s (cli/program.h) */
    char *lang_opt;
    char *file;
    char *tools_path;
    char *timeout_opt;
    char *output_limit_opt;
    char *entry;
    char *args_opt;
    char *kwargs_opt;
    char *code;
    SbxLanguage language;
    guint timeout_ms;
    guint64 output_limit;
    char *args_json;
    char *kwargs_json;
    SbxOut *out; /* exec's output, summary and report; outlives the client */
} SessionCtx;

static SessionCtx *session_ctx;

/* A line on stderr, after the subcommand's name (`sandbox session put: ...`). */
static void G_GNUC_PRINTF(1, 2) say(const char *fmt, ...)
{
    va_list ap;
    g_autofree char *text = NULL;

    va_start(ap, fmt);
    text = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", g_get_prgname(), text);
}

/* ---- options --------------------------------------------------------------------------------- */

static gboolean parse_seconds(const char *name, const char *opt, guint *ret, GError **error)
{
    guint64 v = 0;

    if (opt == NULL) {
        return TRUE; /* 0: the server's default */
    }
    if (!g_ascii_string_to_unsigned(opt, 10, 1, SBX_SERVE_SESSION_SECONDS_MAX, &v, NULL)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "%s: expected whole seconds, 1 to %d", name, SBX_SERVE_SESSION_SECONDS_MAX);
        return FALSE;
    }
    *ret = (guint)v;
    return TRUE;
}

static void add_entries(GOptionContext *oc, SessionCtx *c)
{
    const GOptionEntry json[] = {
        {"json", 0, 0, G_OPTION_ARG_NONE, &c->json, "JSON instead of text", NULL},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry new_entries[] = {
        {"profile", 'p', 0, G_OPTION_ARG_STRING, &c->profile,
         "Machine profile, one the server pools (default: its first)", "NAME"},
        {"idle-timeout", 0, 0, G_OPTION_ARG_STRING, &c->idle_opt,
         "End it after this long without use (default: the server's, 600)", "SECONDS"},
        {"max-lifetime", 0, 0, G_OPTION_ARG_STRING, &c->life_opt,
         "End it this long after it opened (default: the server's, 3600)", "SECONDS"},
        G_OPTION_ENTRY_NULL,
    };
    /* FILENAME for the call's options: the bytes as given, checked by program.c */
    const GOptionEntry exec_entries[] = {
        {"lang", 'l', 0, G_OPTION_ARG_STRING, &c->lang_opt,
         "Language (default: from --file's extension)", "javascript|typescript|python"},
        {"language", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &c->lang_opt, NULL, NULL},
        {"file", 'f', 0, G_OPTION_ARG_FILENAME, &c->file, "The program, from a file", "FILE"},
        {"tools", 't', 0, G_OPTION_ARG_FILENAME, &c->tools_path, "Tool catalog", "FILE"},
        {"timeout", 0, 0, G_OPTION_ARG_STRING, &c->timeout_opt,
         "Wall-clock limit of the execution (default: 30)", "SECONDS"},
        {"output-limit", 0, 0, G_OPTION_ARG_STRING, &c->output_limit_opt,
         "Cap on stdout+stderr (default: 10M)", "BYTES"},
        {"entry", 0, 0, G_OPTION_ARG_FILENAME, &c->entry,
         "Call this function once the program ran; its value is the result", "NAME"},
        {"args", 0, 0, G_OPTION_ARG_FILENAME, &c->args_opt,
         "The function's positional arguments (with --entry)", "JSON-ARRAY"},
        {"kwargs", 0, 0, G_OPTION_ARG_FILENAME, &c->kwargs_opt,
         "The function's keyword arguments (with --entry; Python only)", "JSON-OBJECT"},
        G_OPTION_ENTRY_NULL,
    };

    if (c->sub == SUB_NEW || c->sub == SUB_LS || c->sub == SUB_SHOW || c->sub == SUB_EXEC ||
        c->sub == SUB_FILES) {
        g_option_context_add_main_entries(oc, json, NULL);
    }
    if (c->sub == SUB_NEW) {
        g_option_context_add_main_entries(oc, new_entries, NULL);
    }
    if (c->sub == SUB_EXEC) {
        g_option_context_add_main_entries(oc, exec_entries, NULL);
    }
}

/* The positional arguments: their number, and an ID that is a session's id. */
static gboolean check_args(SessionCtx *c, GError **error)
{
    if (c->n_args < subs[c->sub].min || c->n_args > subs[c->sub].max) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    "expected %s; see `" VERB " %s --help`",
                    subs[c->sub].min == 0 ? "no argument" : subs[c->sub].args, subs[c->sub].name);
        return FALSE;
    }
    if (c->n_args > 0 && !sbx_id_valid(c->args[0])) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "ID: a session's id, as `" VERB " new` printed it (`" VERB " ls` lists them)");
        return FALSE;
    }
    return TRUE;
}

static gboolean parse(SessionCtx *c, int argc, char **argv, GError **error)
{
    g_autofree char *prgname = g_strdup_printf(VERB " %s", subs[c->sub].name);
    g_autoptr(GOptionContext) oc = g_option_context_new(subs[c->sub].args);

    g_set_prgname(prgname);
    add_entries(oc, c);
    g_option_context_set_description(
        oc, c->sub == SUB_EXEC
                ? "Exit status: as `sandbox run`'s: the program's; 124 timeout, 125 sandbox "
                  "failure (also: no server, a session unknown, busy or ended), 2 invalid usage, "
                  "130/143 interrupted.\n"
                : "Exit status: 0; 1 if the server refuses (no such session or file, busy, "
                  "ended, a quota); 2 for invalid usage; 125 if no server answers or it fails.\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    c->args = argv + 1;
    c->n_args = (guint)argc - 1;
    return check_args(c, error) &&
           parse_seconds("--idle-timeout", c->idle_opt, &c->idle_timeout_s, error) &&
           parse_seconds("--max-lifetime", c->life_opt, &c->max_lifetime_s, error);
}

/* A workspace path argument (REMOTE, DIR, PATH): checked here as the server would. */
static gboolean check_path(const char *what, const char *path)
{
    if (!g_utf8_validate(path, -1, NULL) || !sbx_workspace_path_valid(path)) {
        say("%s: a workspace path (relative, components separated by single `/`, "
            "none `.` or `..`, no control characters, at most %d bytes)",
            what, SBX_PATH_MAX);
        return FALSE;
    }
    return TRUE;
}

/* ---- requests and answers -------------------------------------------------------------------- */

/* A connection to the server, or -1 after saying none answers. */
static int connect_or_say(void)
{
    int fd = sbx_serve_client_connect();

    if (fd < 0) {
        say("no `sandbox serve` answers (sessions live in the server; socket: "
            "$SANDBOX_SERVE_SOCKET or the default, docs/pool.md)");
    }
    return fd;
}

/* Error codes for what the request asked, not for the server's state (exit 1, not 125). */
static gboolean refusal(const char *code)
{
    static const char *const refused[] = {
        "not_found", "busy", "ended", "quota", "bad_request", "too_large", "workspace_full", NULL,
    };

    return code != NULL && g_strv_contains(refused, code);
}

/*
 * Send @req on @fd and read its answer into @answer within @timeout_ms. 0 if it is of type
 * @want; else the exit code, after saying why on stderr (a refusal 1, else 125).
 */
static int exchange(int fd, const SbxServeRequest *req, int timeout_ms, SbxServeMsgType want,
                    SbxServeMsg *answer)
{
    g_autofree char *json = sbx_serve_proto_request_encode(req);

    if (!sbx_serve_client_send(fd, json) ||
        !sbx_serve_client_read(fd, g_get_monotonic_time() + timeout_ms * 1000ll, answer)) {
        say("the server did not answer");
        return SBX_EXIT_SANDBOX;
    }
    if (answer->type == want) {
        return 0;
    }
    g_autofree char *why = sbx_escape(
        answer->message != NULL ? answer->message : "(no reason given)", -1, SBX_ESCAPE_TEXT);
    if (answer->type == SBX_SERVE_MSG_ERROR) {
        say("%s", why);
        return refusal(answer->code) ? SESSION_EXIT_REFUSED : SBX_EXIT_SANDBOX;
    }
    say("the server answered with a message of another kind (%s)", why);
    return SBX_EXIT_SANDBOX;
}

/* One request on a connection of its own. */
static int ask(const SbxServeRequest *req, int timeout_ms, SbxServeMsgType want,
               SbxServeMsg *answer)
{
    int fd = connect_or_say();

    if (fd < 0) {
        return SBX_EXIT_SANDBOX;
    }
    int rc = exchange(fd, req, timeout_ms, want, answer);
    close(fd);
    return rc;
}

/* JSON text the server sent, printed as it is: on a terminal DEL and C1 controls as escapes. */
static void print_json(const char *json)
{
    g_autofree char *text =
        isatty(STDOUT_FILENO) ? sbx_escape(json, -1, SBX_ESCAPE_JSON) : g_strdup(json);
    puts(text);
}

/* ---- new, ls, show, rm ----------------------------------------------------------------------- */

/* Unix ms as local time, "2024-05-01 12:00:00", or "-". */
static char *time_text(gint64 ms)
{
    g_autoptr(GDateTime) t = ms > 0 ? g_date_time_new_from_unix_local(ms / 1000) : NULL;
    return t != NULL ? g_date_time_format(t, "%F %T") : g_strdup("-");
}

static const char *str(const char *s)
{
    return s != NULL ? s : "-";
}

/* "key: value" lines of session @s, escaped. */
static void print_session(const SbxServeSession *s)
{
    g_autofree char *created = time_text(s->created_ms);
    g_autofree char *active = time_text(s->last_active_ms);
    g_autofree char *until = time_text(s->expires_ms);
    g_autofree char *ended = time_text(s->ended_ms);
    g_autofree char *limits =
        g_strdup_printf("idle timeout %u s, lifetime %u s", s->idle_timeout_s, s->max_lifetime_s);
    g_autofree char *executions = g_strdup_printf("%u", s->executions);
    g_autofree char *memory = g_strdup_printf("%" G_GUINT64_FORMAT " MiB", s->memory_mib);
    g_autofree char *qemu = s->qemu_pid > 0 ? g_strdup_printf("%d", (int)s->qemu_pid) : NULL;
    g_autofree char *end =
        s->end_status != NULL ? g_strdup_printf("%s: %s", s->end_status, str(s->end_reason)) : NULL;
    const char *fields[][2] = {
        {"id:", s->id},
        {"status:", s->status},
        {"profile:", s->profile},
        {"created:", created},
        {"last active:", active},
        {"expires:", until},
        {"ended:", ended},
        {"limits:", limits},
        {"executions:", executions},
        {"running:", s->current_execution},
        {"memory:", memory},
        {"QEMU PID:", qemu},
        {"end:", end},
    };

    for (gsize i = 0; i < G_N_ELEMENTS(fields); i++) {
        g_autofree char *safe = sbx_escape(str(fields[i][1]), -1, SBX_ESCAPE_TEXT);
        printf("%-13s %s\n", fields[i][0], safe);
    }
}

static void print_session_line(const SbxServeSession *s)
{
    g_autofree char *created = time_text(s->created_ms);
    g_autofree char *until = time_text(s->ended_ms > 0 ? s->ended_ms : s->expires_ms);
    g_autofree char *line = g_strdup_printf(
        "%s\t%s\t%s\t%u\t%s\t%s\t%s%s%s\n", str(s->id), str(s->status), str(s->profile),
        s->executions, created, until, str(s->end_status), s->end_reason != NULL ? ": " : "",
        s->end_reason != NULL ? s->end_reason : "");
    g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);

    fputs(safe, stdout);
}

static int do_new(SessionCtx *c)
{
    SbxServeRequest r = {
        .type = SBX_SERVE_REQ_SESSION_NEW,
        .session_new = {.profile = c->profile,
                        .idle_timeout_s = c->idle_timeout_s,
                        .max_lifetime_s = c->max_lifetime_s},
    };
    g_auto(SbxServeMsg) answer = {0};
    int rc = ask(&r, SESSION_WORK_MS, SBX_SERVE_MSG_SESSION, &answer);

    if (rc != 0) {
        return rc;
    }
    if (answer.n_sessions != 1 || answer.sessions[0].id == NULL ||
        !sbx_id_valid(answer.sessions[0].id)) {
        say("the server's answer names no session");
        return SBX_EXIT_SANDBOX;
    }
    if (c->json) {
        print_json(answer.sessions_json);
    } else {
        printf("%s\n", answer.sessions[0].id); /* alone on its line, for a script to take */
    }
    return 0;
}

static int do_ls(SessionCtx *c)
{
    SbxServeRequest r = {.type = SBX_SERVE_REQ_SESSION_LIST};
    g_auto(SbxServeMsg) answer = {0};
    int rc = ask(&r, SESSION_ANSWER_MS, SBX_SERVE_MSG_SESSIONS, &answer);

    if (rc != 0) {
        return rc;
    }
    if (c->json) {
        print_json(answer.sessions_json != NULL ? answer.sessions_json : "[]");
        return 0;
    }
    if (answer.n_sessions == 0) {
        fprintf(stderr, "no session (open or recently ended)\n");
        return 0;
    }
    printf("ID\tSTATUS\tPROFILE\tEXECUTIONS\tCREATED\tUNTIL\tEND\n");
    for (gsize i = 0; i < answer.n_sessions; i++) {
        print_session_line(&answer.sessions[i]);
    }
    return 0;
}

/* show and rm: one session's object, ended first by rm. */
static int do_one(SessionCtx *c)
{
    SbxServeRequest r = {
        .type = c->sub == SUB_RM ? SBX_SERVE_REQ_SESSION_END : SBX_SERVE_REQ_SESSION_SHOW,
        .id = c->args[0],
    };
    g_auto(SbxServeMsg) answer = {0};
    int rc = ask(&r, SESSION_ANSWER_MS, SBX_SERVE_MSG_SESSION, &answer);

    if (rc != 0) {
        return rc;
    }
    if (answer.n_sessions != 1) {
        say("the server's answer holds no session");
        return SBX_EXIT_SANDBOX;
    }
    if (c->json) {
        print_json(answer.sessions_json);
    } else if (c->sub == SUB_SHOW) {
        print_session(&answer.sessions[0]);
    } else {
        g_autofree char *line =
            g_strdup_printf("%s ended (%s)\n", c->args[0], str(answer.sessions[0].end_status));
        g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
        fputs(safe, stdout);
    }
    return 0;
}

/* ---- exec ------------------------------------------------------------------------------------ */

/* The program (CODE, --file or -), its language, limits and call: as `sandbox run` checks them. */
static gboolean exec_inputs(SessionCtx *c, GError **error)
{
    const char *code = c->n_args > 1 ? c->args[1] : NULL;

    if (code != NULL && c->file != NULL) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                    "expected the program: CODE, --file FILE or - (stdin), one of them");
        return FALSE;
    }
    if (code == NULL && c->file == NULL) {
        if (c->entry == NULL) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
                        "expected the program: CODE, --file FILE or - (stdin), one of them; "
                        "none only with --entry (a function an earlier execution defined)");
            return FALSE;
        }
        c->code = g_strdup("");
    } else if (c->file != NULL || strcmp(code, "-") == 0) {
        c->code = sbx_cli_read_program(c->file != NULL ? c->file : "-", error);
    } else if (sbx_cli_check_program(code, error)) {
        c->code = g_strdup(code);
    }
    if (c->code == NULL) {
        return FALSE;
    }
    if (c->tools_path != NULL) {
        /* Only checked here: the server loads it and runs its providers (as for `sandbox run`). */
        g_autoptr(SbxCatalog) catalog = sbx_catalog_load(c->tools_path, error);
        if (catalog == NULL) {
            return FALSE;
        }
    }
    return sbx_cli_language_pick(c->lang_opt, c->file, &c->language, error) &&
           sbx_cli_parse_timeout(c->timeout_opt, &c->timeout_ms, error) &&
           sbx_cli_parse_output_limit(c->output_limit_opt, &c->output_limit, error) &&
           sbx_cli_parse_call(c->language, c->entry, c->args_opt, c->kwargs_opt, &c->args_json,
                              &c->kwargs_json, error);
}

static int do_exec(SbxCli *cli, SessionCtx *c)
{
    g_autoptr(GError) error = NULL;

    if (!exec_inputs(c, &error)) {
        say("%s", error->message);
        return SBX_EXIT_USAGE;
    }
    c->out = sbx_out_new(); /* from here on stdout and stderr never block the loop */
    SbxServeClientRequest req = {
        .language = c->language,
        .code = c->code,
        .entry = c->entry,
        .args_json = c->args_json,
        .kwargs_json = c->kwargs_json,
        .tools_path = c->tools_path,
        .timeout_ms = c->timeout_ms,
        .output_limit = c->output_limit,
        .session = c->args[0],
        .json = c->json,
        .out = c->out,
    };
    if (sbx_serve_client_try(cli, &req)) {
        return -1; /* on the loop, which quits with the run's exit code */
    }
    sbx_serve_client_report_failure(
        c->out, c->json, TRUE,
        "no `sandbox serve` answers (sessions live in the server; socket: "
        "$SANDBOX_SERVE_SOCKET or the default, docs/pool.md)",
        SBX_STATUS_CRASH);
    return SBX_EXIT_SANDBOX;
}

/* ---- files ----------------------------------------------------------------------------------- */

/* All of @fd, at most @max bytes; NULL (and a message) if it cannot be read or is larger. */
static GByteArray *read_all(int fd, const char *name, gsize max)
{
    g_autoptr(GByteArray) buf = g_byte_array_new();
    guint8 chunk[64 * 1024];

    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            say("read `%s`: %s", name, g_strerror(errno));
            return NULL;
        }
        if (n == 0) {
            return g_steal_pointer(&buf);
        }
        if (buf->len + (gsize)n > max) {
            say("`%s` has more than %zu bytes (32 MiB), the most a file "
                "in a session may have",
                name, max);
            return NULL;
        }
        g_byte_array_append(buf, chunk, n);
    }
}

/* The bytes of LOCAL (`-`: stdin), or NULL after saying why (invalid input: exit 2). */
static GByteArray *read_local(const char *local)
{
    gboolean in = strcmp(local, "-") == 0;
    int fd = in ? dup(STDIN_FILENO) : open(local, O_RDONLY | O_CLOEXEC);
    struct stat st;

    if (fd < 0) {
        say("open `%s`: %s", local, g_strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        say("`%s` is a directory (put moves one file)", local);
        close(fd);
        return NULL;
    }
    GByteArray *data = read_all(fd, local, SBX_SERVE_FILE_MAX);
    close(fd);
    return data;
}

static char *sha256_hex(const guint8 *data, gsize len)
{
    return g_compute_checksum_for_data(G_CHECKSUM_SHA256, data, len);
}

/* Each piece of @data to REMOTE on @fd, the last one answered with the file's end. */
static int put_pieces(int fd, const char *id, const char *remote, GByteArray *data,
                      SbxServeMsg *end)
{
    gsize offset = 0;

    do {
        gsize n = MIN(data->len - offset, SBX_SERVE_FILE_CHUNK_MAX);
        gboolean last = offset + n == data->len;
        SbxServeRequest r = {
            .type = SBX_SERVE_REQ_FILE_PUT,
            .file = {.session = (char *)id,
                     .path = (char *)remote,
                     .offset = offset,
                     .data = n > 0 ? data->data + offset : NULL,
                     .len = n,
                     .last = last},
        };
        g_auto(SbxServeMsg) part = {0};
        SbxServeMsg *answer = last ? end : &part;
        int rc = exchange(fd, &r, last ? SESSION_WORK_MS : SESSION_ANSWER_MS,
                          last ? SBX_SERVE_MSG_FILE : SBX_SERVE_MSG_FILE_PART, answer);
        if (rc != 0) {
            return rc;
        }
        if (!last && part.size != offset + n) {
            say("the server took %" G_GUINT64_FORMAT " bytes of %zu", part.size, offset + n);
            return SBX_EXIT_SANDBOX;
        }
        offset += n;
    } while (offset < data->len);
    return 0;
}

static int do_put(SessionCtx *c)
{
    const char *id = c->args[0], *local = c->args[1];
    g_autofree char *base = g_path_get_basename(local);
    const char *remote = c->n_args > 2 ? c->args[2] : base;

    if (c->n_args < 3 && strcmp(local, "-") == 0) {
        say("REMOTE is needed with - (stdin)");
        return SBX_EXIT_USAGE;
    }
    if (!check_path("REMOTE", remote)) {
        return SBX_EXIT_USAGE;
    }
    g_autoptr(GByteArray) data = read_local(local);
    if (data == NULL) {
        return SBX_EXIT_USAGE;
    }
    g_autofree char *sha = sha256_hex(data->data, data->len);
    int fd = connect_or_say();
    if (fd < 0) {
        return SBX_EXIT_SANDBOX;
    }
    g_auto(SbxServeMsg) end = {0};
    int rc = put_pieces(fd, id, remote, data, &end);
    close(fd);
    if (rc != 0) {
        return rc;
    }
    if (end.size != data->len || g_strcmp0(end.sha256, sha) != 0) {
        say("the guest has %" G_GUINT64_FORMAT " bytes, sha256 %s; we sent "
            "%u, sha256 %s",
            end.size, str(end.sha256), data->len, sha);
        return SBX_EXIT_SANDBOX;
    }
    g_autofree char *line = g_strdup_printf("%s: %u bytes, sha256 %s\n", remote, data->len, sha);
    g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
    fputs(safe, stdout);
    return 0;
}

/*
 * The first answer sets the file's size and hash; every piece must agree with them and come
 * where it was asked for. FALSE (said why) otherwise.
 */
static gboolean piece_fits(const SbxServeMsg *m, guint64 offset, guint64 size, const char *sha)
{
    if (m->data == NULL || m->sha256 == NULL || m->offset != offset ||
        m->size > SBX_SERVE_FILE_MAX ||
        (offset > 0 && (m->size != size || strcmp(m->sha256, sha) != 0)) ||
        offset + m->data_len > m->size || (m->data_len == 0 && offset < m->size)) {
        say("the server sent a piece that does not fit the file");
        return FALSE;
    }
    return TRUE;
}

/* Every piece of REMOTE from @fd into @data; its hash into @ret_sha. */
static int get_pieces(int fd, const char *id, const char *remote, GByteArray *data, char **ret_sha)
{
    guint64 size = 0;

    do {
        SbxServeRequest r = {
            .type = SBX_SERVE_REQ_FILE_GET,
            .file = {.session = (char *)id, .path = (char *)remote, .offset = data->len},
        };
        g_auto(SbxServeMsg) m = {0};
        int rc = exchange(fd, &r, data->len == 0 ? SESSION_WORK_MS : SESSION_ANSWER_MS,
                          SBX_SERVE_MSG_FILE, &m);
        if (rc != 0) {
            return rc;
        }
        if (!piece_fits(&m, data->len, size, *ret_sha)) {
            return SBX_EXIT_SANDBOX;
        }
        if (data->len == 0) {
            size = m.size;
            *ret_sha = g_strdup(m.sha256);
        }
        g_byte_array_append(data, m.data, m.data_len);
    } while (data->len < size);
    return 0;
}

/* The file's bytes to LOCAL (`-`: stdout, escaped on a terminal); FALSE after saying why. */
static gboolean write_local(const char *local, GByteArray *data)
{
    g_autoptr(GError) error = NULL;

    if (strcmp(local, "-") != 0) {
        /* a temporary file beside it, renamed: LOCAL is the old file or the whole new one */
        if (!g_file_set_contents(local, (const char *)data->data, data->len, &error)) {
            say("%s", error->message);
            return FALSE;
        }
        return TRUE;
    }
    g_autofree char *shown = isatty(STDOUT_FILENO)
                                 ? sbx_escape((const char *)data->data, data->len, SBX_ESCAPE_TEXT)
                                 : NULL;
    gsize n = shown != NULL ? strlen(shown) : data->len;
    if (fwrite(shown != NULL ? (const guint8 *)shown : data->data, 1, n, stdout) != n ||
        fflush(stdout) != 0) {
        say("write to stdout: %s", g_strerror(errno));
        return FALSE;
    }
    return TRUE;
}

static int do_get(SessionCtx *c)
{
    const char *id = c->args[0], *remote = c->args[1];
    g_autofree char *base = g_path_get_basename(remote);
    const char *local = c->n_args > 2 ? c->args[2] : base;
    g_autoptr(GByteArray) data = g_byte_array_new();
    g_autofree char *sha = NULL;

    if (!check_path("REMOTE", remote)) {
        return SBX_EXIT_USAGE;
    }
    int fd = connect_or_say();
    if (fd < 0) {
        return SBX_EXIT_SANDBOX;
    }
    int rc = get_pieces(fd, id, remote, data, &sha);
    close(fd);
    if (rc != 0) {
        return rc;
    }
    g_autofree char *got = sha256_hex(data->data, data->len);
    if (strcmp(got, sha) != 0) {
        say("the bytes have sha256 %s, the server said %s", got, sha);
        return SBX_EXIT_SANDBOX;
    }
    if (!write_local(local, data)) {
        return SESSION_EXIT_REFUSED;
    }
    if (strcmp(local, "-") != 0) {
        g_autofree char *line = g_strdup_printf("%s: %u bytes, sha256 %s\n", local, data->len, sha);
        g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
        fputs(safe, stdout);
    }
    return 0;
}

static int do_files(SessionCtx *c)
{
    const char *dir = c->n_args > 1 ? c->args[1] : NULL;
    SbxServeRequest r = {
        .type = SBX_SERVE_REQ_FILE_LIST,
        .file = {.session = c->args[0], .path = (char *)dir},
    };
    g_auto(SbxServeMsg) answer = {0};

    if (dir != NULL && !check_path("DIR", dir)) {
        return SBX_EXIT_USAGE;
    }
    int rc = ask(&r, SESSION_WORK_MS, SBX_SERVE_MSG_FILES, &answer);
    if (rc != 0) {
        return rc;
    }
    if (c->json) {
        print_json(answer.entries_json != NULL ? answer.entries_json : "[]");
    }
    for (gsize i = 0; !c->json && i < answer.n_entries; i++) {
        const SbxServeFileEntry *e = &answer.entries[i];
        g_autofree char *mtime = time_text((gint64)(e->mtime_us / 1000));
        g_autofree char *line =
            g_strdup_printf("%s\t%" G_GUINT64_FORMAT "\t%s\t%s\n", sbx_file_type_name(e->type),
                            e->size, mtime, e->path);
        g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
        fputs(safe, stdout);
    }
    if (answer.truncated) {
        say("more entries than a list holds (%d): the rest not shown", SBX_FILE_LIST_MAX);
    }
    return 0;
}

static int do_rmfile(SessionCtx *c)
{
    SbxServeRequest r = {
        .type = SBX_SERVE_REQ_FILE_DELETE,
        .file = {.session = c->args[0], .path = c->args[1]},
    };
    g_auto(SbxServeMsg) answer = {0};

    if (!check_path("PATH", c->args[1])) {
        return SBX_EXIT_USAGE;
    }
    int rc = ask(&r, SESSION_WORK_MS, SBX_SERVE_MSG_FILE_DELETED, &answer);
    if (rc == 0) {
        g_autofree char *line = g_strdup_printf("deleted %s\n", c->args[1]);
        g_autofree char *safe = sbx_escape(line, -1, SBX_ESCAPE_TEXT);
        fputs(safe, stdout);
    }
    return rc;
}

/* ---- the verb -------------------------------------------------------------------------------- */

static void usage(FILE *out)
{
    for (gsize i = 0; i < G_N_ELEMENTS(usage_lines); i++) {
        fprintf(out, "%s" VERB " %s\n", i == 0 ? "Usage: " : "       ", usage_lines[i]);
    }
    fprintf(out, "Sessions live in `sandbox serve` (socket: $SANDBOX_SERVE_SOCKET or the "
                 "default). `" VERB " SUBCOMMAND --help` for more; docs/cli.md.\n");
}

static int run_sub(SbxCli *cli, SessionCtx *c)
{
    switch (c->sub) {
    case SUB_NEW:
        return do_new(c);
    case SUB_LS:
        return do_ls(c);
    case SUB_SHOW:
    case SUB_RM:
        return do_one(c);
    case SUB_EXEC:
        return do_exec(cli, c);
    case SUB_PUT:
        return do_put(c);
    case SUB_GET:
        return do_get(c);
    case SUB_FILES:
        return do_files(c);
    default:
        return do_rmfile(c);
    }
}

static int session_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    gsize sub = 0;

    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SBX_EXIT_USAGE : 0;
    }
    while (sub < G_N_ELEMENTS(subs) && strcmp(argv[1], subs[sub].name) != 0) {
        sub++;
    }
    if (sub == G_N_ELEMENTS(subs)) {
        fprintf(stderr, VERB ": unknown subcommand \"%s\"\n", argv[1]);
        usage(stderr);
        return SBX_EXIT_USAGE;
    }
    SessionCtx *c = session_ctx = g_new0(SessionCtx, 1);
    c->sub = (SessionSub)sub;
    if (!parse(c, argc - 1, argv + 1, &error)) {
        fprintf(stderr, VERB " %s: %s\n", subs[sub].name, error->message);
        return SBX_EXIT_USAGE;
    }
    return run_sub(cli, c);
}

static void session_cleanup(SbxCli *cli)
{
    SessionCtx *c = session_ctx;
    (void)cli;

    if (c == NULL) {
        return;
    }
    sbx_serve_client_cleanup();
    sbx_out_free(c->out); /* last: what a slow reader still takes (bounded) */
    g_free(c->profile);
    g_free(c->idle_opt);
    g_free(c->life_opt);
    g_free(c->lang_opt);
    g_free(c->file);
    g_free(c->tools_path);
    g_free(c->timeout_opt);
    g_free(c->output_limit_opt);
    g_free(c->entry);
    g_free(c->args_opt);
    g_free(c->kwargs_opt);
    g_free(c->code);
    g_free(c->args_json);
    g_free(c->kwargs_json);
    g_free(c);
    session_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_session = {
    .name = "session",
    .summary = "Sessions of `sandbox serve`: a VM kept across executions, and its files",
    .start = session_start,
    .cleanup = session_cleanup,
};
