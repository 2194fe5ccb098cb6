/*
 * The `execute` tool of the MCP server (see execute.h): definition, arguments, result.
 */
#include "mcp-server/execute.h"

#include <string.h>

#include "exec/call.h"
#include "protocol/json.h"
#include "protocol/limits.h"

/* What a model reads to decide how to call the tool: what runs where, what comes back, limits. */
static const char DESCRIPTION[] =
    "Run a program in a fresh, isolated VM and get back what it printed and the value it ended "
    "with. Use it to compute, transform data, or call many host tools in one go (loops, "
    "Promise.all) instead of one tool call at a time.\n"
    "\n"
    "Languages: javascript (Node 24: top-level await, require and import of Node's built-in "
    "modules), typescript (the same, types stripped, not checked), python (3.11 with numpy, "
    "pandas and matplotlib).\n"
    "\n"
    "The result is the value of the program's last expression, as in a notebook cell: end "
    "JavaScript with `total` or `({a, b})`, Python with `total` (a final statement such as "
    "`x = 1` gives no result). console.log / print go to stdout, returned separately. Only JSON "
    "crosses: numbers, strings, booleans, null, arrays and objects. With `entry`, the program "
    "runs first, then the function of that name is called with `args` (and `kwargs` in Python) "
    "and its return value, awaited if it is a promise, is the result.\n"
    "\n"
    "Host tools, when the sandbox was started with a tool catalog, are called as "
    "`await tools.<provider>.<tool>(input)` in JavaScript and TypeScript, "
    "`tools.<provider>.<tool>(input)` in Python; a failed call throws.\n"
    "\n"
    "Limits: no network; nothing is kept between calls (each call is a new VM; files written "
    "under /workspace, the working directory, are gone afterwards)";

/* The rest of the limits, after DESCRIPTION (and DESCRIPTION_SESSIONS when offered). */
static const char DESCRIPTION_LIMITS[] =
    "; timeout_ms defaults to "
    "30000 (at most 600000); stdout and stderr together keep their first 1 MiB "
    "(output_truncated says when more was dropped); code at most 1 MiB. A program that throws, "
    "exits non-zero or runs out of time returns isError with the error and its stack.";

/* The schemas' figures, written out in the JSON below. */
G_STATIC_ASSERT(SBX_MCP_EXECUTE_TIMEOUT_MAX_MS == 600000);
G_STATIC_ASSERT(SBX_NAME_MAX == 128);

/* With sessions offered: where state is kept (between DESCRIPTION and DESCRIPTION_LIMITS). */
static const char DESCRIPTION_SESSIONS[] =
    ", unless `session` names a session opened with session_open: then the program runs in "
    "that session's VM and sees what its earlier executions left (variables, functions, imports, "
    "files; one state per language; a timeout, a cancel or sys.exit/process.exit ends the "
    "session)";

/* The input schema: its properties, then `session` when sessions are offered, then its end. */
static const char INPUT_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"language\":{\"type\":\"string\",\"enum\":[\"javascript\",\"typescript\",\"python\"],"
    "\"description\":\"The program's language.\"},"
    "\"code\":{\"type\":\"string\",\"description\":\"The program. The value of its last "
    "expression is the result; what it prints is stdout.\"},"
    "\"entry\":{\"type\":\"string\",\"pattern\":\"^[A-Za-z_$][A-Za-z0-9_$]*$\","
    "\"maxLength\":128,\"description\":\"A function the program defines, called once it "
    "ran: its return value is the result.\"},"
    "\"args\":{\"type\":\"array\",\"description\":\"The entry function's positional "
    "arguments (JSON values).\"},"
    "\"kwargs\":{\"type\":\"object\",\"description\":\"The entry function's keyword "
    "arguments (Python only).\"},"
    "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":600000,"
    "\"description\":\"Wall-clock limit of the execution in milliseconds (default 30000).\"}";

static const char INPUT_SCHEMA_SESSION[] =
    ",\"session\":{\"type\":\"string\",\"description\":\"A session's handle from "
    "session_open: run in its VM, with the state its earlier executions left.\"}";

static const char INPUT_SCHEMA_END[] =
    "},\"required\":[\"language\",\"code\"],\"additionalProperties\":false}";

/* structuredContent's members: what every execution's report has (docs/cli.md, "--json"). */
static const char OUTPUT_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"status\":{\"type\":\"string\",\"enum\":[\"ok\",\"error\",\"timeout\",\"memory_limit\","
    "\"crash\",\"terminated\",\"cancelled\"],\"description\":\"How the execution ended.\"},"
    "\"exit_code\":{\"type\":\"integer\",\"description\":\"The program's exit status; -1 when "
    "there is none (killed, never ran).\"},"
    "\"result\":{\"description\":\"The value of the last expression (or the entry's return "
    "value), any JSON; null when none.\"},"
    "\"error\":{\"type\":[\"object\",\"null\"],\"properties\":{"
    "\"code\":{\"type\":\"string\"},\"type\":{\"type\":[\"string\",\"null\"]},"
    "\"message\":{\"type\":[\"string\",\"null\"]},\"stack\":{\"type\":[\"string\",\"null\"]}},"
    "\"description\":\"Why the program failed, or null.\"},"
    "\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},"
    "\"output_truncated\":{\"type\":\"boolean\",\"description\":\"Output over the limit was "
    "dropped.\"},"
    "\"duration_ms\":{\"type\":\"integer\",\"description\":\"The execution's wall-clock "
    "time.\"},"
    "\"id\":{\"type\":\"string\",\"description\":\"The execution's id (its record's).\"}},"
    "\"required\":[\"status\",\"exit_code\",\"result\",\"error\",\"stdout\",\"stderr\","
    "\"output_truncated\",\"duration_ms\"]}";

gboolean sbx_mcp_revision_has(const char *revision, const char *since)
{
    /* Revisions are dates: they compare as strings. */
    return revision != NULL && strcmp(revision, since) >= 0;
}

/* With a catalog: where the model learns its tools. */
static const char DISCOVERY[] =
    " The host tools of this server: list_providers, search_tools, then get_tool_types for the "
    "declarations of the ones you use.";

void sbx_mcp_execute_definition(SbxJsonb *b, const char *revision, gboolean discovery,
                                gboolean sessions)
{
    sbx_jsonb_begin_object(b);
    sbx_jsonb_member_string(b, "name", "execute");
    if (sbx_mcp_revision_has(revision, "2025-06-18")) {
        sbx_jsonb_member_string(b, "title", "Run code in a sandbox VM");
    }
    g_autofree char *description =
        g_strconcat(DESCRIPTION, sessions ? DESCRIPTION_SESSIONS : "", DESCRIPTION_LIMITS,
                    discovery ? DISCOVERY : "", NULL);
    sbx_jsonb_member_string(b, "description", description);
    g_autofree char *schema =
        g_strconcat(INPUT_SCHEMA, sessions ? INPUT_SCHEMA_SESSION : "", INPUT_SCHEMA_END, NULL);
    sbx_jsonb_member_raw(b, "inputSchema", schema);
    if (sbx_mcp_revision_has(revision, "2025-06-18")) {
        sbx_jsonb_member_raw(b, "outputSchema", OUTPUT_SCHEMA);
    }
    if (sbx_mcp_revision_has(revision, "2025-03-26")) {
        /* It changes nothing outside its VM, but it is no read: every call runs new code. Not
         * idempotent (a program may read the clock or random numbers); no open world: no
         * network, only the host tools the catalog names. */
        sbx_jsonb_key(b, "annotations");
        sbx_jsonb_begin_object(b);
        sbx_jsonb_member_string(b, "title", "Run code in a sandbox VM");
        sbx_jsonb_member_bool(b, "readOnlyHint", FALSE);
        sbx_jsonb_member_bool(b, "destructiveHint", FALSE);
        sbx_jsonb_member_bool(b, "idempotentHint", FALSE);
        sbx_jsonb_member_bool(b, "openWorldHint", FALSE);
        sbx_jsonb_end_object(b);
    }
    sbx_jsonb_end_object(b);
}

/* ---- arguments ------------------------------------------------------------------------------ */

static const char *const KNOWN[] = {"language", "code",    "entry",     "args",
                                    "kwargs",   "session", "timeout_ms"};

static const char *unknown_member(const cJSON *root)
{
    const cJSON *m;

    cJSON_ArrayForEach(m, root)
    {
        gboolean known = FALSE;
        for (gsize i = 0; i < G_N_ELEMENTS(KNOWN); i++) {
            known = known || strcmp(m->string, KNOWN[i]) == 0;
        }
        if (!known) {
            return m->string;
        }
    }
    return NULL;
}

/* A member that may be absent or null: NULL then. */
static const cJSON *member(const cJSON *root, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, name);
    return cJSON_IsNull(m) ? NULL : m;
}

static char *check_members(const cJSON *root, SbxMcpExecuteArgs *ret)
{
    const cJSON *lang = member(root, "language"), *code = member(root, "code");
    const cJSON *entry = member(root, "entry"), *timeout = member(root, "timeout_ms");
    const cJSON *session = member(root, "session");
    const char *unknown = unknown_member(root);
    int64_t ms = SBX_MCP_EXECUTE_TIMEOUT_DEFAULT_MS;

    if (unknown != NULL) {
        return g_strdup_printf("unknown argument \"%s\" (execute takes language, code, entry, "
                               "args, kwargs, session, timeout_ms)",
                               unknown);
    }
    if (!cJSON_IsString(lang) || sbx_language_from_name(lang->valuestring, &ret->language) < 0) {
        return g_strdup("language: \"javascript\", \"typescript\" or \"python\"");
    }
    if (entry != NULL && !cJSON_IsString(entry)) {
        return g_strdup(SBX_EXEC_CALL_ENTRY_RULE);
    }
    if (!cJSON_IsString(code) || (code->valuestring[0] == '\0' && entry == NULL) ||
        strlen(code->valuestring) > SBX_MCP_EXECUTE_CODE_MAX) {
        return g_strdup("code: the program, a string of at most 1 MiB (empty only with an entry)");
    }
    if (timeout != NULL &&
        (!sbx_json_int64(timeout, &ms) || ms < 1 || ms > SBX_MCP_EXECUTE_TIMEOUT_MAX_MS)) {
        return g_strdup("timeout_ms: an integer from 1 to 600000 (milliseconds)");
    }
    if (session != NULL && (!cJSON_IsString(session) || !sbx_id_valid(session->valuestring))) {
        return g_strdup("session: a session's handle, as session_open returned it");
    }
    ret->session = session != NULL ? g_strdup(session->valuestring) : NULL;
    ret->code = g_strdup(code->valuestring);
    ret->entry = entry != NULL ? g_strdup(entry->valuestring) : NULL;
    ret->timeout_ms = (guint)ms;
    return NULL;
}

char *sbx_mcp_execute_args_parse(const char *text, gsize len, SbxMcpExecuteArgs *ret)
{
    g_autofree char *why = NULL;
    char *bad;

    memset(ret, 0, sizeof(*ret));
    cJSON *root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return g_strdup("the arguments: a JSON object");
    }
    bad = check_members(root, ret);
    const cJSON *args = member(root, "args"), *kwargs = member(root, "kwargs");
    if (bad == NULL && args != NULL) {
        ret->args_json = sbx_json_member_text(text, len, root, args);
    }
    if (bad == NULL && kwargs != NULL) {
        ret->kwargs_json = sbx_json_member_text(text, len, root, kwargs);
    }
    cJSON_Delete(root);
    const char *call = bad == NULL ? sbx_exec_call_check(ret->language, ret->entry, ret->args_json,
                                                         ret->kwargs_json)
                                   : NULL;
    if (call != NULL) {
        bad = g_strdup(call);
    }
    if (bad != NULL) {
        sbx_mcp_execute_args_clear(ret);
    }
    return bad;
}

void sbx_mcp_execute_args_clear(SbxMcpExecuteArgs *args)
{
    g_free(args->code);
    free(args->args_json); /* sbx_json_member_text(): malloc'd */
    free(args->kwargs_json);
    g_free(args->entry);
    g_free(args->session);
    memset(args, 0, sizeof(*args));
}

/* ---- the result ----------------------------------------------------------------------------- */

/* The members of structuredContent, in order, and what stands for one the report lacks. */
static const struct {
    const char *name;
    const char *absent;
} STRUCTURED[] = {
    {"id", NULL},         {"status", "\"crash\""},
    {"exit_code", "-1"},  {"result", "null"},
    {"error", "null"},    {"stdout", "\"\""},
    {"stderr", "\"\""},   {"output_truncated", "false"},
    {"duration_ms", "0"},
};

static const char *string_of(const cJSON *root, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, name);
    return cJSON_IsString(m) ? m->valuestring : NULL;
}

/* The error as a model reads it: "TypeError: message" and the stack, or the code's words. */
static void append_error(GString *t, const cJSON *error)
{
    const char *type = string_of(error, "type"), *message = string_of(error, "message");
    const char *stack = string_of(error, "stack"), *code = string_of(error, "code");

    g_string_append_printf(t, "error (%s): ", code != NULL ? code : "unknown");
    if (stack != NULL && stack[0] != '\0') {
        gsize n = strlen(stack);
        g_string_append_printf(t, "%s%s", stack, stack[n - 1] == '\n' ? "" : "\n");
    } else {
        g_string_append_printf(t, "%s%s%s\n", type != NULL ? type : "", type != NULL ? ": " : "",
                               message != NULL ? message : "");
    }
}

static void append_stream(GString *t, const cJSON *root, const char *name)
{
    const char *s = string_of(root, name);

    if (s != NULL && s[0] != '\0') {
        gsize n = strlen(s);
        g_string_append_printf(t, "%s:\n%s%s", name, s, s[n - 1] == '\n' ? "" : "\n");
    }
}

/* The text content: how it ended, the output, then the value or the error. */
static char *result_text(const char *text, gsize len, const cJSON *root)
{
    GString *t = g_string_new(NULL);
    const char *status = string_of(root, "status");
    const cJSON *exit_code = cJSON_GetObjectItemCaseSensitive(root, "exit_code");
    const cJSON *duration = cJSON_GetObjectItemCaseSensitive(root, "duration_ms");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(root, "result");
    int64_t code = -1, ms = 0;

    sbx_json_int64(exit_code, &code);
    sbx_json_int64(duration, &ms);
    g_string_append_printf(t,
                           "status: %s (exit code %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT " ms)\n",
                           status != NULL ? status : "unknown", (gint64)code, (gint64)ms);
    append_stream(t, root, "stdout");
    append_stream(t, root, "stderr");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "output_truncated"))) {
        g_string_append(t, "(output over the limit was dropped)\n");
    }
    if (cJSON_IsObject(error)) {
        append_error(t, error);
    }
    if (result != NULL && !cJSON_IsNull(result)) {
        char *value = sbx_json_member_text(text, len, root, result);
        g_string_append_printf(t, "result: %s\n", value != NULL ? value : "?");
        free(value);
    }
    return g_string_free(t, FALSE);
}

static char *structured(const char *text, gsize len, const cJSON *root)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    for (gsize i = 0; i < G_N_ELEMENTS(STRUCTURED); i++) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, STRUCTURED[i].name);
        /* null (the API's exit_code of an execution that never ran) stands for absent */
        char *value =
            m != NULL && !cJSON_IsNull(m) ? sbx_json_member_text(text, len, root, m) : NULL;
        if (value != NULL || STRUCTURED[i].absent != NULL) {
            sbx_jsonb_member_raw(&b, STRUCTURED[i].name,
                                 value != NULL ? value : STRUCTURED[i].absent);
        }
        free(value);
    }
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

char *sbx_mcp_execute_result(const char *report_json, const char *revision)
{
    gsize len = strlen(report_json);
    cJSON *root = sbx_json_parse(report_json, len, SBX_JSON_DEPTH_MAX, NULL);

    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sbx_mcp_tool_error_result("the sandbox's report of the execution is unreadable");
    }
    g_autofree char *text = result_text(report_json, len, root);
    g_autofree char *object = structured(report_json, len, root);
    const char *status = string_of(root, "status");
    const cJSON *exit_code = cJSON_GetObjectItemCaseSensitive(root, "exit_code");
    int64_t code = -1;
    /* A program that ended ok with a non-zero exit code (process.exit(3)) failed too. */
    gboolean failed = g_strcmp0(status, "ok") != 0 || !sbx_json_int64(exit_code, &code) || code;
    cJSON_Delete(root);

    return sbx_mcp_structured_result(text, object, failed, revision);
}

char *sbx_mcp_structured_result(const char *text, const char *object_json, gboolean is_error,
                                const char *revision)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "content");
    sbx_jsonb_begin_array(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "type", "text");
    sbx_jsonb_member_string(&b, "text", text);
    sbx_jsonb_end_object(&b);
    if (!sbx_mcp_revision_has(revision, "2025-06-18")) {
        /* No structuredContent before 2025-06-18: the same object as a text. */
        sbx_jsonb_begin_object(&b);
        sbx_jsonb_member_string(&b, "type", "text");
        sbx_jsonb_member_string(&b, "text", object_json);
        sbx_jsonb_end_object(&b);
    }
    sbx_jsonb_end_array(&b);
    if (sbx_mcp_revision_has(revision, "2025-06-18")) {
        sbx_jsonb_member_raw(&b, "structuredContent", object_json);
    }
    sbx_jsonb_member_bool(&b, "isError", is_error);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

char *sbx_mcp_text_result(const char *text, gboolean is_error)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "content");
    sbx_jsonb_begin_array(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "type", "text");
    sbx_jsonb_member_string(&b, "text", text);
    sbx_jsonb_end_object(&b);
    sbx_jsonb_end_array(&b);
    sbx_jsonb_member_bool(&b, "isError", is_error);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

char *sbx_mcp_tool_error_result(const char *message)
{
    return sbx_mcp_text_result(message, TRUE);
}
