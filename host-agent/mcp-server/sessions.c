/*
 * The MCP server's session tools (see sessions.h): definitions, arguments, results.
 */
#include "mcp-server/sessions.h"

#include <string.h>

#include "mcp-server/execute.h"
#include "protocol/base64.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "protocol/message.h"

/* The figures the descriptions and schemas write out. */
G_STATIC_ASSERT(SBX_MCP_FILE_MAX == 262144);
G_STATIC_ASSERT(SBX_MCP_SESSIONS_MAX == 4);
G_STATIC_ASSERT(SBX_PATH_MAX == 1024);
G_STATIC_ASSERT(SBX_MCP_SESSION_SECONDS_MAX == 86400);

/* One tool: its name, what a model reads, its schemas and its annotations. */
typedef struct {
    SbxMcpTool tool;
    const char *name;
    const char *title;
    const char *description;
    const char *input_schema;
    const char *output_schema;
    gboolean read_only, destructive, idempotent;
} ToolDef;

#define SESSION_PROP                                                                               \
    "\"session\":{\"type\":\"string\",\"description\":\"The session's handle, from "               \
    "session_open.\"}"
#define PATH_PROP                                                                                  \
    "\"path\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":1024,\"description\":\"Relative " \
    "to /workspace, e.g. data/in.csv (no leading /, . or ..).\"}"
#define ENCODING_PROP "\"encoding\":{\"type\":\"string\",\"enum\":[\"utf-8\",\"base64\"]}"
#define FILE_OUT_PROPS                                                                             \
    "\"path\":{\"type\":\"string\"},\"size\":{\"type\":\"integer\"},\"sha256\":{\"type\":"         \
    "\"string\"}"

static const ToolDef TOOLS[] = {
    {
        SBX_MCP_TOOL_SESSION_OPEN,
        "session_open",
        "Open a sandbox session",
        "Open a session: one sandbox VM kept for several execute calls, like a notebook. Pass "
        "its handle as `session` to execute (the program sees the variables, functions and "
        "files earlier executions left; JavaScript and Python keep separate states), file_write "
        "and file_read (files of /workspace, the programs' working directory). Use it when work "
        "builds on earlier results or needs files.\n"
        "\n"
        "Limits: at most 4 open at once; a session ends with session_close (do close it: it "
        "holds a VM), after its idle timeout or lifetime (returned), when an execution in it "
        "times out, is cancelled or exits its runtime, and when this connection ends.",
        "{\"type\":\"object\",\"properties\":{\"idle_timeout_s\":{\"type\":\"integer\","
        "\"minimum\":1,\"maximum\":86400,\"description\":\"Seconds without use after which the "
        "session ends (default 600).\"},\"max_lifetime_s\":{\"type\":\"integer\",\"minimum\":1,"
        "\"maximum\":86400,\"description\":\"Seconds after which it ends, used or not (default "
        "3600).\"}},\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{\"session\":{\"type\":\"string\"},"
        "\"idle_timeout_s\":{\"type\":\"integer\"},\"max_lifetime_s\":{\"type\":\"integer\"}},"
        "\"required\":[\"session\"]}",
        FALSE,
        FALSE,
        FALSE,
    },
    {
        SBX_MCP_TOOL_SESSION_CLOSE,
        "session_close",
        "Close a sandbox session",
        "Close a session opened with session_open: its VM is destroyed with every variable and "
        "file in it (read what you need first). Its handle is no longer valid afterwards.",
        "{\"type\":\"object\",\"properties\":{" SESSION_PROP "},\"required\":[\"session\"],"
        "\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{\"session\":{\"type\":\"string\"},\"closed\":{"
        "\"type\":\"boolean\"}},\"required\":[\"session\",\"closed\"]}",
        FALSE,
        TRUE,
        TRUE,
    },
    {
        SBX_MCP_TOOL_FILE_WRITE,
        "file_write",
        "Write a file into a session",
        "Write a file into a session's workspace (/workspace, the programs' working directory: "
        "path data/in.csv is open(\"data/in.csv\") in Python), replacing one of that path; "
        "missing directories are made. content is the file's text (encoding utf-8, the "
        "default) or its bytes as base64 (encoding base64, for binary data).\n"
        "\n"
        "Limits: 256 KiB (262144 bytes) at most: make larger data with a program (execute).",
        "{\"type\":\"object\",\"properties\":{" SESSION_PROP "," PATH_PROP ",\"content\":{"
        "\"type\":\"string\"}," ENCODING_PROP "},\"required\":[\"session\",\"path\","
        "\"content\"],\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{" FILE_OUT_PROPS "},\"required\":[\"path\","
        "\"size\",\"sha256\"]}",
        FALSE,
        TRUE,
        TRUE,
    },
    {
        SBX_MCP_TOOL_FILE_READ,
        "file_read",
        "Read a file of a session",
        "Read a file of a session's workspace (path relative to /workspace), e.g. what a program "
        "wrote. content comes back as text (encoding utf-8) when the file is UTF-8 without NUL "
        "bytes, else as base64 (encoding base64; ask for base64 to always get it).\n"
        "\n"
        "Limits: files of 256 KiB (262144 bytes) at most; from a larger one, let a program "
        "(execute in the session) return the part you need.",
        "{\"type\":\"object\",\"properties\":{" SESSION_PROP "," PATH_PROP "," ENCODING_PROP
        "},\"required\":[\"session\",\"path\"],\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{" FILE_OUT_PROPS "," ENCODING_PROP ",\"content\":{"
        "\"type\":\"string\"}},\"required\":[\"path\",\"size\",\"sha256\",\"encoding\","
        "\"content\"]}",
        TRUE,
        FALSE,
        TRUE,
    },
};

static const ToolDef *def_of(SbxMcpTool tool)
{
    for (gsize i = 0; i < G_N_ELEMENTS(TOOLS); i++) {
        if (TOOLS[i].tool == tool) {
            return &TOOLS[i];
        }
    }
    g_assert_not_reached();
}

gboolean sbx_mcp_session_is_tool(const char *name, SbxMcpTool *ret)
{
    for (gsize i = 0; i < G_N_ELEMENTS(TOOLS); i++) {
        if (strcmp(name, TOOLS[i].name) == 0) {
            *ret = TOOLS[i].tool;
            return TRUE;
        }
    }
    return FALSE;
}

static void definition(SbxJsonb *b, const ToolDef *t, const char *revision)
{
    sbx_jsonb_begin_object(b);
    sbx_jsonb_member_string(b, "name", t->name);
    if (sbx_mcp_revision_has(revision, "2025-06-18")) {
        sbx_jsonb_member_string(b, "title", t->title);
    }
    sbx_jsonb_member_string(b, "description", t->description);
    sbx_jsonb_member_raw(b, "inputSchema", t->input_schema);
    if (sbx_mcp_revision_has(revision, "2025-06-18")) {
        sbx_jsonb_member_raw(b, "outputSchema", t->output_schema);
    }
    if (sbx_mcp_revision_has(revision, "2025-03-26")) {
        /* No open world: a session's VM has no network, and only this server is touched. */
        sbx_jsonb_key(b, "annotations");
        sbx_jsonb_begin_object(b);
        sbx_jsonb_member_string(b, "title", t->title);
        sbx_jsonb_member_bool(b, "readOnlyHint", t->read_only);
        sbx_jsonb_member_bool(b, "destructiveHint", t->destructive);
        sbx_jsonb_member_bool(b, "idempotentHint", t->idempotent);
        sbx_jsonb_member_bool(b, "openWorldHint", FALSE);
        sbx_jsonb_end_object(b);
    }
    sbx_jsonb_end_object(b);
}

void sbx_mcp_session_definitions(SbxJsonb *b, const char *revision)
{
    for (gsize i = 0; i < G_N_ELEMENTS(TOOLS); i++) {
        definition(b, &TOOLS[i], revision);
    }
}

/* ---- arguments ------------------------------------------------------------------------------ */

/* The members each tool takes, NULL-terminated. */
static const char *const *known_members(SbxMcpTool tool)
{
    static const char *const open[] = {"idle_timeout_s", "max_lifetime_s", NULL};
    static const char *const close[] = {"session", NULL};
    static const char *const write[] = {"session", "path", "content", "encoding", NULL};
    static const char *const read[] = {"session", "path", "encoding", NULL};

    switch (tool) {
    case SBX_MCP_TOOL_SESSION_CLOSE:
        return close;
    case SBX_MCP_TOOL_FILE_WRITE:
        return write;
    case SBX_MCP_TOOL_FILE_READ:
        return read;
    default:
        return open;
    }
}

static char *check_unknown(SbxMcpTool tool, const cJSON *root)
{
    const char *const *known = known_members(tool);
    const cJSON *m;

    cJSON_ArrayForEach(m, root)
    {
        if (!g_strv_contains(known, m->string)) {
            g_autofree char *takes = g_strjoinv(", ", (char **)known);
            return g_strdup_printf("unknown argument \"%.*s\" (%s takes %s)", SBX_NAME_MAX,
                                   m->string, def_of(tool)->name,
                                   known[0] != NULL ? takes : "none");
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

/* `encoding`: absent, "utf-8" or "base64"; into *@base64. FALSE if it is something else. */
static gboolean check_encoding(const cJSON *root, gboolean *base64)
{
    const cJSON *enc = member(root, "encoding");

    *base64 = FALSE;
    if (enc == NULL) {
        return TRUE;
    }
    if (!cJSON_IsString(enc)) {
        return FALSE;
    }
    *base64 = strcmp(enc->valuestring, "base64") == 0;
    return *base64 || strcmp(enc->valuestring, "utf-8") == 0;
}

/* A write's content, decoded as its encoding says, into @ret. */
static char *check_content(const cJSON *root, gboolean base64, SbxMcpSessionArgs *ret)
{
    const cJSON *content = member(root, "content");

    if (!cJSON_IsString(content)) {
        return g_strdup("content: the file's text, or its bytes as base64 (encoding base64)");
    }
    const char *text = content->valuestring;
    gsize len = strlen(text);
    if (!base64) {
        if (len > SBX_MCP_FILE_MAX) {
            return g_strdup_printf("content: %zu bytes, more than a file written here may have "
                                   "(262144, 256 KiB): make larger files with a program",
                                   len);
        }
        ret->data = len > 0 ? g_memdup2(text, len) : NULL;
        ret->len = len;
        return NULL;
    }
    uint8_t *bytes = NULL;
    size_t n = 0;
    if (len > sbx_base64_encoded_len(SBX_MCP_FILE_MAX) ||
        sbx_base64_decode(text, len, &bytes, &n) < 0 || n > SBX_MCP_FILE_MAX) {
        free(bytes);
        return g_strdup("content: base64 (standard alphabet, padded, no whitespace) of at most "
                        "262144 bytes (256 KiB)");
    }
    ret->data = n > 0 ? g_memdup2(bytes, n) : NULL;
    ret->len = n;
    free(bytes);
    return NULL;
}

/* An open's `name` (absent or null: 0, the default) into *@ret; FALSE if it is out of range. */
static gboolean check_seconds(const cJSON *root, const char *name, guint *ret)
{
    const cJSON *m = member(root, name);
    int64_t v = 0;

    if (m != NULL && (!sbx_json_int64(m, &v) || v < 1 || v > SBX_MCP_SESSION_SECONDS_MAX)) {
        return FALSE;
    }
    *ret = (guint)v;
    return TRUE;
}

static char *check_open(const cJSON *root, SbxMcpSessionArgs *ret)
{
    if (!check_seconds(root, "idle_timeout_s", &ret->idle_timeout_s)) {
        return g_strdup("idle_timeout_s: an integer from 1 to 86400 (seconds)");
    }
    if (!check_seconds(root, "max_lifetime_s", &ret->max_lifetime_s)) {
        return g_strdup("max_lifetime_s: an integer from 1 to 86400 (seconds)");
    }
    return NULL;
}

static char *check_members(SbxMcpTool tool, const cJSON *root, SbxMcpSessionArgs *ret)
{
    const cJSON *session = member(root, "session"), *path = member(root, "path");
    char *bad = check_unknown(tool, root);

    if (bad != NULL) {
        return bad;
    }
    if (tool == SBX_MCP_TOOL_SESSION_OPEN) {
        return check_open(root, ret);
    }
    if (!cJSON_IsString(session) || !sbx_id_valid(session->valuestring)) {
        return g_strdup("session: a session's handle, as session_open returned it");
    }
    ret->session = g_strdup(session->valuestring);
    if (tool == SBX_MCP_TOOL_SESSION_CLOSE) {
        return NULL;
    }
    if (!cJSON_IsString(path) || !sbx_workspace_path_valid(path->valuestring)) {
        return g_strdup("path: a path relative to the workspace (no leading /, components "
                        "separated by single /, none . or .., no control characters, at most "
                        "1024 bytes)");
    }
    ret->path = g_strdup(path->valuestring);
    if (!check_encoding(root, &ret->base64)) {
        return g_strdup("encoding: \"utf-8\" or \"base64\"");
    }
    return tool == SBX_MCP_TOOL_FILE_WRITE ? check_content(root, ret->base64, ret) : NULL;
}

char *sbx_mcp_session_args_parse(SbxMcpTool tool, const char *text, gsize len,
                                 SbxMcpSessionArgs *ret)
{
    memset(ret, 0, sizeof(*ret));
    cJSON *root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, NULL);
    char *bad = cJSON_IsObject(root) ? check_members(tool, root, ret)
                                     : g_strdup("the arguments: an object");

    cJSON_Delete(root);
    if (bad != NULL) {
        sbx_mcp_session_args_clear(ret);
    }
    return bad;
}

void sbx_mcp_session_args_clear(SbxMcpSessionArgs *args)
{
    g_free(args->session);
    g_free(args->path);
    g_free(args->data);
    memset(args, 0, sizeof(*args));
}

/* ---- results -------------------------------------------------------------------------------- */

static char *error_result(const SbxMcpSessionOutcome *o)
{
    g_autofree char *text = g_strdup_printf("error (%s): %s", o->error_code,
                                            o->error != NULL ? o->error : "no reason given");
    return sbx_mcp_tool_error_result(text);
}

static char *open_result(const SbxMcpSessionOutcome *o, const char *revision)
{
    SbxJsonb b;

    if (o->session == NULL || !sbx_id_valid(o->session)) {
        return sbx_mcp_tool_error_result("error (failed): the sandbox named no session");
    }
    g_autofree char *limits =
        o->idle_timeout_s > 0 && o->max_lifetime_s > 0
            ? g_strdup_printf("after %u s without use or %u s after it opened, ", o->idle_timeout_s,
                              o->max_lifetime_s)
            : g_strdup("");
    g_autofree char *text = g_strdup_printf(
        "session %s is open: pass \"session\": \"%s\" to execute, file_write and file_read. It "
        "ends with session_close, %sor when this connection ends.",
        o->session, o->session, limits);
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "session", o->session);
    if (o->idle_timeout_s > 0) {
        sbx_jsonb_member_uint(&b, "idle_timeout_s", o->idle_timeout_s);
    }
    if (o->max_lifetime_s > 0) {
        sbx_jsonb_member_uint(&b, "max_lifetime_s", o->max_lifetime_s);
    }
    sbx_jsonb_end_object(&b);
    g_autofree char *object = sbx_jsonb_finish(&b);
    return sbx_mcp_structured_result(text, object, FALSE, revision);
}

static char *close_result(const SbxMcpSessionArgs *a, const char *revision)
{
    SbxJsonb b;
    g_autofree char *text =
        g_strdup_printf("session %s is closed: its VM and files are gone.", a->session);

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "session", a->session);
    sbx_jsonb_member_bool(&b, "closed", TRUE);
    sbx_jsonb_end_object(&b);
    g_autofree char *object = sbx_jsonb_finish(&b);
    return sbx_mcp_structured_result(text, object, FALSE, revision);
}

/* The members a written or read file's result starts with. */
static void file_members(SbxJsonb *b, const SbxMcpSessionArgs *a, const SbxMcpSessionOutcome *o)
{
    sbx_jsonb_member_string(b, "path", a->path);
    sbx_jsonb_member_uint(b, "size", o->size);
    sbx_jsonb_member_string(b, "sha256", o->sha256 != NULL ? o->sha256 : "");
}

static char *write_result(const SbxMcpSessionArgs *a, const SbxMcpSessionOutcome *o,
                          const char *revision)
{
    SbxJsonb b;
    g_autofree char *text =
        g_strdup_printf("wrote %s: %" G_GUINT64_FORMAT " bytes, sha256 %s", a->path, o->size,
                        o->sha256 != NULL ? o->sha256 : "unknown");

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    file_members(&b, a, o);
    sbx_jsonb_end_object(&b);
    g_autofree char *object = sbx_jsonb_finish(&b);
    return sbx_mcp_structured_result(text, object, FALSE, revision);
}

/* Text a model can read as it is: valid UTF-8 without NUL (JSON carries no NUL here). */
static gboolean is_text(const guint8 *data, gsize len)
{
    return memchr(data, '\0', len) == NULL && g_utf8_validate((const char *)data, len, NULL);
}

static char *read_result(const SbxMcpSessionArgs *a, const SbxMcpSessionOutcome *o,
                         const char *revision)
{
    SbxJsonb b;

    if (o->size > SBX_MCP_FILE_MAX || (o->data == NULL && o->size > 0)) {
        g_autofree char *text = g_strdup_printf(
            "error (too_large): %s has %" G_GUINT64_FORMAT " bytes, more than file_read returns "
            "(262144, 256 KiB): read the part you need with a program (execute in the session)",
            a->path, o->size);
        return sbx_mcp_tool_error_result(text);
    }
    const guint8 *data = o->data != NULL ? o->data : (const guint8 *)"";
    gboolean base64 = a->base64 || !is_text(data, o->size);
    g_autofree char *content =
        base64 ? g_base64_encode(data, o->size) : g_strndup((const char *)data, o->size);
    const char *encoding = base64 ? "base64" : "utf-8";
    g_autofree char *text =
        g_strdup_printf("%s: %" G_GUINT64_FORMAT " bytes, sha256 %s, content as %s:\n%s", a->path,
                        o->size, o->sha256 != NULL ? o->sha256 : "unknown", encoding, content);

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    file_members(&b, a, o);
    sbx_jsonb_member_string(&b, "encoding", encoding);
    sbx_jsonb_member_string(&b, "content", content);
    sbx_jsonb_end_object(&b);
    g_autofree char *object = sbx_jsonb_finish(&b);
    return sbx_mcp_structured_result(text, object, FALSE, revision);
}

char *sbx_mcp_session_result(SbxMcpTool tool, const SbxMcpSessionArgs *args,
                             const SbxMcpSessionOutcome *outcome, const char *revision)
{
    if (outcome->error_code != NULL) {
        return error_result(outcome);
    }
    switch (tool) {
    case SBX_MCP_TOOL_SESSION_OPEN:
        return open_result(outcome, revision);
    case SBX_MCP_TOOL_SESSION_CLOSE:
        return close_result(args, revision);
    case SBX_MCP_TOOL_FILE_WRITE:
        return write_result(args, outcome, revision);
    case SBX_MCP_TOOL_FILE_READ:
        return read_result(args, outcome, revision);
    default:
        g_assert_not_reached();
    }
}
