/*
 * The MCP server's protocol core (see mcp-server.h): JSON-RPC 2.0 messages in, answers out,
 * the lifecycle, tools/list, tools/call (the calls in flight, their cancellation), batches, and
 * the elicitations that ask the client about held tool calls (their ids, answers, timeouts).
 */
#include "mcp-server/mcp-server.h"

#include <string.h>

#include "mcp-server/discover.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "protocol/message.h"

const char *const sbx_mcp_server_revisions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                "2024-11-05", NULL};

/* The one revision whose messages may be batches (2025-06-18 removed them again). */
#define BATCH_REVISION "2025-03-26"

/* What initialize tells the model about the server (2025-03-26 on). */
static const char INSTRUCTIONS[] =
    "This server runs code in isolated sandbox VMs (\"code mode\"). Instead of many tool calls, "
    "write one program with the execute tool: JavaScript, TypeScript or Python, whose printed "
    "output and last expression's value come back. Each call runs in a fresh VM without "
    "network.";

/* ... and when the transport offers sessions. */
static const char INSTRUCTIONS_SESSIONS[] =
    " For work that builds on earlier results, session_open keeps one VM for several execute "
    "calls (pass its handle as session), with files you move in and out (file_write, "
    "file_read); session_close ends it.";

/* A batch's answers, sent as one array once every call in it has finished. */
typedef struct {
    GPtrArray *answers; /* char* JSON texts */
    guint outstanding;  /* calls in flight, plus one while the batch is being read */
} Batch;

struct SbxMcpCall {
    SbxMcpServer *server;
    char *id_json; /* the request's id, as JSON text */
    SbxMcpTool tool;
    SbxMcpExecuteArgs args;  /* execute's */
    SbxMcpSessionArgs sargs; /* a session tool's */
    Batch *batch;            /* or NULL */
    gboolean cancelled;
    gpointer data;
    char *progress_token;   /* its JSON text, or NULL: the client asked for no progress */
    guint64 progress;       /* the last progress sent */
    gboolean progress_sent; /* any yet: the first output goes out at once */
    GString *held;          /* output not yet sent (sbx_mcp_server_output()), or NULL */
    SbxStream held_stream;
};

struct SbxMcpServer {
    const SbxMcpServerOps *ops;
    gpointer data;
    char *name;
    char *version;
    const char *revision;      /* one of sbx_mcp_server_revisions, or NULL before initialize */
    gboolean initialized;      /* notifications/initialized came */
    GHashTable *calls;         /* id_json -> SbxMcpCall* (the key is the call's) */
    GByteArray *line;          /* stdio: the line being received */
    gboolean skipping;         /* stdio: inside a line over the limit, dropped up to its newline */
    const SbxCatalog *catalog; /* the discovery tools' (set_catalog), or NULL: none */
    GPtrArray *sessions;       /* char*: the handles of the sessions opened here, not closed */
    guint opening;             /* session_open calls in flight */
    gboolean can_elicit;       /* the client declared elicitation (form mode) */
    char *client_name;         /* clientInfo.name, or NULL */
    GHashTable *elicits;       /* guint64* id -> Elicit* (the key is the elicit's) */
    guint64 next_elicit;       /* the id of the next elicitation/create */
};

/* An elicitation/create in flight (elicit.h). */
typedef struct {
    SbxMcpServer *server;
    guint64 id;
    SbxMcpCall *call;
    guint timer;
    SbxMcpElicitFunc func;
    gpointer data;
} Elicit;

SbxMcpServer *sbx_mcp_server_new(const SbxMcpServerOps *ops, gpointer data,
                                 const SbxMcpServerInfo *info)
{
    SbxMcpServer *s = g_new0(SbxMcpServer, 1);

    s->ops = ops;
    s->data = data;
    s->name = g_strdup(info->name);
    s->version = g_strdup(info->version);
    s->calls = g_hash_table_new(g_str_hash, g_str_equal);
    s->line = g_byte_array_new();
    s->sessions = g_ptr_array_new_with_free_func(g_free);
    s->elicits = g_hash_table_new(g_int64_hash, g_int64_equal);
    s->next_elicit = 1;
    return s;
}

static void elicit_end(SbxMcpServer *s, Elicit *e, SbxMcpElicitOutcome outcome, gboolean tell);

static void call_free(SbxMcpCall *call)
{
    free(call->progress_token);
    if (call->held != NULL) {
        g_string_free(call->held, TRUE);
    }
    sbx_mcp_execute_args_clear(&call->args);
    sbx_mcp_session_args_clear(&call->sargs);
    g_free(call->id_json);
    g_free(call);
}

static void batch_free(Batch *batch)
{
    g_ptr_array_unref(batch->answers);
    g_free(batch);
}

void sbx_mcp_server_free(SbxMcpServer *s)
{
    GHashTableIter it;
    gpointer value;

    if (s == NULL) {
        return;
    }
    /* Elicitations end first (their funcs may look at their calls), told to nobody. */
    while (g_hash_table_size(s->elicits) > 0) {
        g_hash_table_iter_init(&it, s->elicits);
        g_hash_table_iter_next(&it, NULL, &value);
        elicit_end(s, value, SBX_MCP_ELICIT_CANCELLED, FALSE);
    }
    g_hash_table_destroy(s->elicits);
    /* Calls in flight are forgotten; a batch is freed with its last call. */
    g_hash_table_iter_init(&it, s->calls);
    while (g_hash_table_iter_next(&it, NULL, &value)) {
        SbxMcpCall *call = value;
        if (call->batch != NULL && --call->batch->outstanding == 0) {
            batch_free(call->batch);
        }
        call_free(call);
    }
    g_hash_table_destroy(s->calls);
    g_byte_array_unref(s->line);
    g_ptr_array_unref(s->sessions);
    g_free(s->client_name);
    g_free(s->name);
    g_free(s->version);
    g_free(s);
}

void sbx_mcp_server_set_catalog(SbxMcpServer *s, const SbxCatalog *catalog)
{
    s->catalog = catalog;
}

guint sbx_mcp_server_calls(const SbxMcpServer *s)
{
    return g_hash_table_size(s->calls);
}

const char *sbx_mcp_server_revision(const SbxMcpServer *s)
{
    return s->revision;
}

void sbx_mcp_call_set_data(SbxMcpCall *call, gpointer data)
{
    call->data = data;
}

gpointer sbx_mcp_call_get_data(const SbxMcpCall *call)
{
    return call->data;
}

SbxMcpTool sbx_mcp_call_tool(const SbxMcpCall *call)
{
    return call->tool;
}

/* The transport offers the session tools. */
static gboolean sessions_offered(const SbxMcpServer *s)
{
    return s->ops->session_open != NULL;
}

static gboolean session_known(const SbxMcpServer *s, const char *handle)
{
    for (guint i = 0; i < s->sessions->len; i++) {
        if (strcmp(g_ptr_array_index(s->sessions, i), handle) == 0) {
            return TRUE;
        }
    }
    return FALSE;
}

static void session_forget(SbxMcpServer *s, const char *handle)
{
    for (guint i = 0; i < s->sessions->len; i++) {
        if (strcmp(g_ptr_array_index(s->sessions, i), handle) == 0) {
            g_ptr_array_remove_index(s->sessions, i);
            return;
        }
    }
}

char **sbx_mcp_server_sessions(const SbxMcpServer *s)
{
    char **out = g_new0(char *, s->sessions->len + 1);

    for (guint i = 0; i < s->sessions->len; i++) {
        out[i] = g_strdup(g_ptr_array_index(s->sessions, i));
    }
    return out;
}

/* ---- answers -------------------------------------------------------------------------------- */

/* An answer goes out at once, or into its batch's array. Takes @json. */
static void answer(SbxMcpServer *s, Batch *batch, char *json)
{
    if (batch != NULL) {
        g_ptr_array_add(batch->answers, json);
        return;
    }
    s->ops->send(s->data, json, strlen(json));
    g_free(json);
}

static void answer_result(SbxMcpServer *s, Batch *batch, const char *id_json, const char *result)
{
    answer(s, batch,
           g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}", id_json, result));
}

/* An error answer; @id_json NULL: the id could not be read (null). */
static void answer_error(SbxMcpServer *s, Batch *batch, const char *id_json, int code,
                         const char *message)
{
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "jsonrpc", "2.0");
    sbx_jsonb_member_raw(&b, "id", id_json); /* NULL: null */
    sbx_jsonb_key(&b, "error");
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_int(&b, "code", code);
    sbx_jsonb_member_string(&b, "message", message);
    sbx_jsonb_end_object(&b);
    sbx_jsonb_end_object(&b);
    answer(s, batch, sbx_jsonb_finish(&b));
}

/* The batch was read, or one of its calls finished: sent once nothing is outstanding. */
static void batch_release(SbxMcpServer *s, Batch *batch)
{
    if (--batch->outstanding > 0) {
        return;
    }
    if (batch->answers->len > 0) { /* only notifications (or cancelled calls): nothing at all */
        GString *out = g_string_new("[");
        for (guint i = 0; i < batch->answers->len; i++) {
            g_string_append(out, i > 0 ? "," : "");
            g_string_append(out, g_ptr_array_index(batch->answers, i));
        }
        g_string_append_c(out, ']');
        s->ops->send(s->data, out->str, out->len);
        g_string_free(out, TRUE);
    }
    batch_free(batch);
}

/* ---- one request ---------------------------------------------------------------------------- */

/* What one message is, read from its text; the pointers into the tree. */
typedef struct {
    const char *text;
    gsize len;
    cJSON *root;
    const char *method;
    char *id_json; /* NULL: a notification (or an id that could not be read) */
    const cJSON *params;
    Batch *batch;
} Msg;

static const char *pick_revision(const char *asked)
{
    for (gsize i = 0; sbx_mcp_server_revisions[i] != NULL; i++) {
        if (strcmp(asked, sbx_mcp_server_revisions[i]) == 0) {
            return sbx_mcp_server_revisions[i];
        }
    }
    return sbx_mcp_server_revisions[0];
}

/*
 * What initialize says of the client: whether it can be asked (elicitation in form mode: `{}`
 * or with `form`; 2025-06-18 on, the first revision with elicitation) and its name.
 */
static void note_client(SbxMcpServer *s, const cJSON *caps, const cJSON *client)
{
    const cJSON *el = cJSON_GetObjectItemCaseSensitive(caps, "elicitation");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(client, "name");

    s->can_elicit =
        strcmp(s->revision, "2025-06-18") >= 0 && cJSON_IsObject(el) &&
        (el->child == NULL || cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(el, "form")));
    if (cJSON_IsString(name)) {
        gsize len = MIN(strlen(name->valuestring), (gsize)SBX_NAME_MAX);
        s->client_name = g_utf8_make_valid(name->valuestring, len);
    }
}

static void on_initialize(SbxMcpServer *s, const Msg *m)
{
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(m->params, "protocolVersion");
    const cJSON *caps = cJSON_GetObjectItemCaseSensitive(m->params, "capabilities");
    const cJSON *client = cJSON_GetObjectItemCaseSensitive(m->params, "clientInfo");

    if (s->revision != NULL) {
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_REQUEST,
                     "Invalid Request: the session is initialized already");
        return;
    }
    if (!cJSON_IsString(version) || !cJSON_IsObject(caps) || !cJSON_IsObject(client)) {
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_PARAMS,
                     "Invalid params: initialize takes protocolVersion (a string), capabilities "
                     "and clientInfo (objects)");
        return;
    }
    s->revision = pick_revision(version->valuestring);
    note_client(s, caps, client);

    SbxJsonb b;
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "protocolVersion", s->revision);
    sbx_jsonb_member_raw(&b, "capabilities", "{\"tools\":{\"listChanged\":false}}");
    sbx_jsonb_key(&b, "serverInfo");
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "name", s->name);
    sbx_jsonb_member_string(&b, "version", s->version);
    sbx_jsonb_end_object(&b);
    if (strcmp(s->revision, "2025-03-26") >= 0) {
        g_autofree char *instructions =
            g_strconcat(INSTRUCTIONS, sessions_offered(s) ? INSTRUCTIONS_SESSIONS : "", NULL);
        sbx_jsonb_member_string(&b, "instructions", instructions);
    }
    sbx_jsonb_end_object(&b);
    g_autofree char *result = sbx_jsonb_finish(&b);
    answer_result(s, m->batch, m->id_json, result);
}

static void on_tools_list(SbxMcpServer *s, const Msg *m)
{
    SbxJsonb b;

    /* One page: a cursor is always one we never gave. */
    if (cJSON_GetObjectItemCaseSensitive(m->params, "cursor") != NULL &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m->params, "cursor"))) {
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_PARAMS,
                     "Invalid params: unknown cursor (tools/list has one page)");
        return;
    }
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_key(&b, "tools");
    sbx_jsonb_begin_array(&b);
    sbx_mcp_execute_definition(&b, s->revision, s->catalog != NULL, sessions_offered(s));
    if (sessions_offered(s)) {
        sbx_mcp_session_definitions(&b, s->revision);
    }
    if (s->catalog != NULL) {
        sbx_mcp_discover_definitions(&b, s->revision);
    }
    sbx_jsonb_end_array(&b);
    sbx_jsonb_end_object(&b);
    g_autofree char *result = sbx_jsonb_finish(&b);
    answer_result(s, m->batch, m->id_json, result);
}

/* A refused call: a tool error the model reads (MCP: input errors are tool results). */
static void answer_tool_error(SbxMcpServer *s, const Msg *m, const char *message)
{
    g_autofree char *result = sbx_mcp_tool_error_result(message);
    answer_result(s, m->batch, m->id_json, result);
}

static char *id_text(const Msg *m, const cJSON *id);

/* tools/call's arguments, as text of their own (the JSON values forwarded as sent). */
static char *arguments_text(const Msg *m, const cJSON *arguments)
{
    return arguments != NULL ? sbx_json_item_text(m->text, m->len, m->root, arguments)
                             : strdup("{}");
}

/* Why a call naming session @handle (NULL: none) cannot go on, or NULL. Caller frees. */
static char *check_session(SbxMcpServer *s, const char *handle)
{
    if (handle == NULL || session_known(s, handle)) {
        return NULL;
    }
    if (!sessions_offered(s)) {
        return g_strdup("session: this server offers no sessions (each execute runs in a new VM)");
    }
    return g_strdup_printf("session \"%s\" is not open here: session_open opens one (a handle is "
                           "valid on the connection that opened it, until session_close or "
                           "its end)",
                           handle);
}

/* Why @call (a session tool's, checked) cannot start, or NULL. Caller frees. */
static char *check_session_call(SbxMcpServer *s, const SbxMcpCall *call)
{
    if (call->tool == SBX_MCP_TOOL_SESSION_OPEN &&
        s->sessions->len + s->opening >= SBX_MCP_SESSIONS_MAX) {
        return g_strdup("too many sessions open (at most " G_STRINGIFY(
            SBX_MCP_SESSIONS_MAX) " on one connection): close one with session_close first");
    }
    return check_session(s, call->sargs.session);
}

/* @call's arguments checked: NULL if it may start, else why not (caller frees). */
static char *parse_call(SbxMcpServer *s, SbxMcpCall *call, const char *text)
{
    char *bad;

    if (text == NULL) {
        return g_strdup("out of memory");
    }
    if (call->tool == SBX_MCP_TOOL_EXECUTE) {
        bad = sbx_mcp_execute_args_parse(text, strlen(text), &call->args);
        return bad != NULL ? bad : check_session(s, call->args.session);
    }
    bad = sbx_mcp_session_args_parse(call->tool, text, strlen(text), &call->sargs);
    return bad != NULL ? bad : check_session_call(s, call);
}

/* The op of @call's tool. */
static void dispatch(SbxMcpServer *s, SbxMcpCall *call)
{
    const SbxMcpSessionArgs *a = &call->sargs;

    switch (call->tool) {
    case SBX_MCP_TOOL_EXECUTE:
        s->ops->execute(s->data, call, &call->args);
        break;
    case SBX_MCP_TOOL_SESSION_OPEN:
        s->opening++;
        s->ops->session_open(s->data, call, a->idle_timeout_s, a->max_lifetime_s);
        break;
    case SBX_MCP_TOOL_SESSION_CLOSE:
        s->ops->session_close(s->data, call, a->session);
        break;
    case SBX_MCP_TOOL_FILE_WRITE:
        s->ops->file_write(s->data, call, a->session, a->path, a->data, a->len);
        break;
    case SBX_MCP_TOOL_FILE_READ:
        s->ops->file_read(s->data, call, a->session, a->path);
        break;
    }
}

static void start_call(SbxMcpServer *s, const Msg *m, const cJSON *arguments, SbxMcpTool tool)
{
    char *args_text = arguments_text(m, arguments);
    SbxMcpCall *call = g_new0(SbxMcpCall, 1);

    call->tool = tool;
    g_autofree char *bad = parse_call(s, call, args_text);
    free(args_text);
    if (bad != NULL) {
        call_free(call);
        answer_tool_error(s, m, bad);
        return;
    }
    call->server = s;
    call->id_json = g_strdup(m->id_json);
    /* A progress token is a string or a number, like an id (and as bounded). */
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(m->params, "_meta");
    call->progress_token = id_text(m, cJSON_GetObjectItemCaseSensitive(meta, "progressToken"));
    call->batch = m->batch;
    if (call->batch != NULL) {
        call->batch->outstanding++;
    }
    g_hash_table_insert(s->calls, call->id_json, call);
    dispatch(s, call);
}

/* A discovery tool: answered at once, from the catalog. */
static void discover(SbxMcpServer *s, const Msg *m, const cJSON *arguments, const char *name)
{
    char *args_text = arguments_text(m, arguments);
    g_autofree char *result =
        args_text != NULL ? sbx_mcp_discover_call(s->catalog, name, args_text, strlen(args_text))
                          : sbx_mcp_tool_error_result("out of memory");

    free(args_text);
    answer_result(s, m->batch, m->id_json, result);
}

static void on_tools_call(SbxMcpServer *s, const Msg *m)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(m->params, "name");
    const cJSON *arguments = cJSON_GetObjectItemCaseSensitive(m->params, "arguments");

    if (!cJSON_IsString(name) || (arguments != NULL && !cJSON_IsObject(arguments))) {
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_PARAMS,
                     "Invalid params: tools/call takes name (a string) and arguments (an "
                     "object)");
        return;
    }
    if (s->catalog != NULL && sbx_mcp_discover_is_tool(name->valuestring)) {
        discover(s, m, arguments, name->valuestring);
        return;
    }
    SbxMcpTool tool = SBX_MCP_TOOL_EXECUTE;
    if (strcmp(name->valuestring, "execute") != 0 &&
        !(sessions_offered(s) && sbx_mcp_session_is_tool(name->valuestring, &tool))) {
        g_autofree char *msg = g_strdup_printf("Invalid params: unknown tool \"%.*s\" (tools/list "
                                               "names the tools)",
                                               SBX_NAME_MAX, name->valuestring);
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_PARAMS, msg);
        return;
    }
    if (g_hash_table_contains(s->calls, m->id_json)) {
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_REQUEST,
                     "Invalid Request: the id of a request still in flight");
        return;
    }
    if (g_hash_table_size(s->calls) >= SBX_MCP_SERVER_CALLS_MAX) {
        answer_tool_error(s, m,
                          "too many executions at once (at most " G_STRINGIFY(
                              SBX_MCP_SERVER_CALLS_MAX) " calls in flight): wait for one to "
                                                        "finish, or do more in one program");
        return;
    }
    start_call(s, m, arguments, tool);
}

static void on_request(SbxMcpServer *s, const Msg *m)
{
    if (strcmp(m->method, "initialize") == 0) {
        on_initialize(s, m);
    } else if (strcmp(m->method, "ping") == 0) {
        answer_result(s, m->batch, m->id_json, "{}");
    } else if (s->revision == NULL) {
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_INVALID_REQUEST,
                     "Invalid Request: the session is not initialized (initialize first)");
    } else if (strcmp(m->method, "tools/list") == 0) {
        on_tools_list(s, m);
    } else if (strcmp(m->method, "tools/call") == 0) {
        on_tools_call(s, m);
    } else {
        g_autofree char *msg = g_strdup_printf("Method not found: %.*s", SBX_NAME_MAX, m->method);
        answer_error(s, m->batch, m->id_json, SBX_JSONRPC_METHOD_NOT_FOUND, msg);
    }
}

/* ---- notifications -------------------------------------------------------------------------- */

/* A request id as the JSON text we keep it by, or NULL if it is none (or too long). */
static char *id_text(const Msg *m, const cJSON *id)
{
    if (!cJSON_IsString(id) && !cJSON_IsNumber(id)) {
        return NULL;
    }
    char *text = sbx_json_item_text(m->text, m->len, m->root, id);
    if (text != NULL && strlen(text) > SBX_MCP_SERVER_ID_MAX) {
        g_clear_pointer(&text, free);
    }
    return text;
}

static void on_cancelled(SbxMcpServer *s, const Msg *m)
{
    char *id = id_text(m, cJSON_GetObjectItemCaseSensitive(m->params, "requestId"));
    SbxMcpCall *call = id != NULL ? g_hash_table_lookup(s->calls, id) : NULL;

    free(id);
    /* Unknown or finished already: the race MCP allows for; ignored. */
    if (call != NULL && !call->cancelled) {
        call->cancelled = TRUE;
        s->ops->cancel(s->data, call);
    }
}

/* A notification is never answered, not even when it is wrong (JSON-RPC). */
static void on_notification(SbxMcpServer *s, const Msg *m)
{
    if (strcmp(m->method, "notifications/initialized") == 0) {
        s->initialized = s->revision != NULL;
    } else if (strcmp(m->method, "notifications/cancelled") == 0 && s->revision != NULL) {
        on_cancelled(s, m);
    }
    /* Anything else (progress, roots changed, ...): nothing we act on. */
}

/* ---- elicitations -------------------------------------------------------------------------- */

/* End @e: unlisted, the client told (@tell) that we no longer wait, its func called, freed. */
static void elicit_end(SbxMcpServer *s, Elicit *e, SbxMcpElicitOutcome outcome, gboolean tell)
{
    g_hash_table_remove(s->elicits, &e->id);
    g_clear_handle_id(&e->timer, g_source_remove);
    if (tell) {
        g_autofree char *json = g_strdup_printf(
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
            "\"requestId\":%" G_GUINT64_FORMAT ",\"reason\":\"%s\"}}",
            e->id,
            outcome == SBX_MCP_ELICIT_TIMED_OUT ? "no answer in time: the call was denied"
                                                : "no longer needed");
        s->ops->send(s->data, json, strlen(json));
    }
    e->func(s, outcome, e->data);
    g_free(e);
}

static gboolean on_elicit_timeout(gpointer data)
{
    Elicit *e = data;

    e->timer = 0;
    elicit_end(e->server, e, SBX_MCP_ELICIT_TIMED_OUT, TRUE);
    return G_SOURCE_REMOVE;
}

/* A response from the client: an elicitation's answer, or nothing of ours (ignored). */
static void on_response(SbxMcpServer *s, const Msg *m, const cJSON *id)
{
    gint64 n = 0;

    if (!cJSON_IsNumber(id) || !sbx_json_int64(id, &n) || n <= 0) {
        return; /* our ids are positive integers */
    }
    guint64 key = (guint64)n;
    Elicit *e = g_hash_table_lookup(s->elicits, &key);
    if (e != NULL) {
        elicit_end(s, e, sbx_mcp_elicit_outcome(m->text, m->len), FALSE);
    }
}

/* The elicitations of @call end with it (before its answer goes out). */
static void elicits_of_call_end(SbxMcpServer *s, const SbxMcpCall *call)
{
    GHashTableIter it;
    gpointer value;
    gboolean found = TRUE;

    while (found) {
        found = FALSE;
        g_hash_table_iter_init(&it, s->elicits);
        while (!found && g_hash_table_iter_next(&it, NULL, &value)) {
            found = ((Elicit *)value)->call == call;
        }
        if (found) {
            elicit_end(s, value, SBX_MCP_ELICIT_CANCELLED, TRUE);
        }
    }
}

gboolean sbx_mcp_server_can_elicit(const SbxMcpServer *s)
{
    return s->revision != NULL && s->can_elicit;
}

const char *sbx_mcp_server_client_name(const SbxMcpServer *s)
{
    return s->client_name;
}

guint sbx_mcp_server_elicits(const SbxMcpServer *s)
{
    return g_hash_table_size(s->elicits);
}

SbxMcpCall *sbx_mcp_server_elicit_call(const SbxMcpServer *s, guint64 id)
{
    Elicit *e = g_hash_table_lookup(s->elicits, &id);

    return e != NULL ? e->call : NULL;
}

guint64 sbx_mcp_server_elicit_approval(SbxMcpServer *s, SbxMcpCall *call,
                                       const SbxMcpApprovalAsk *ask, SbxMcpElicitFunc func,
                                       gpointer data)
{
    if (!sbx_mcp_server_can_elicit(s) || call->cancelled ||
        g_hash_table_size(s->elicits) >= SBX_MCP_ELICITS_MAX) {
        return 0;
    }
    Elicit *e = g_new0(Elicit, 1);
    e->server = s;
    e->id = s->next_elicit++;
    e->call = call;
    e->func = func;
    e->data = data;
    e->timer = g_timeout_add(MAX(ask->timeout_ms, 1u), on_elicit_timeout, e);
    g_hash_table_insert(s->elicits, &e->id, e);

    g_autofree char *params = sbx_mcp_elicit_params(ask);
    g_autofree char *json = g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":%" G_GUINT64_FORMAT
                                            ",\"method\":\"elicitation/create\",\"params\":%s}",
                                            e->id, params);
    s->ops->send(s->data, json, strlen(json));
    return e->id;
}

void sbx_mcp_server_elicit_cancel(SbxMcpServer *s, guint64 id)
{
    Elicit *e = g_hash_table_lookup(s->elicits, &id);

    if (e != NULL) {
        elicit_end(s, e, SBX_MCP_ELICIT_CANCELLED, TRUE);
    }
}

/* ---- messages ------------------------------------------------------------------------------- */

/* One message (not a batch): @root parsed from @text. */
static void handle_one(SbxMcpServer *s, const char *text, gsize len, cJSON *root, Batch *batch)
{
    Msg m = {.text = text, .len = len, .root = root, .batch = batch};
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "jsonrpc");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");

    if (!cJSON_IsObject(root)) {
        answer_error(s, batch, NULL, SBX_JSONRPC_INVALID_REQUEST,
                     "Invalid Request: a message is a JSON object");
        return;
    }
    g_autofree char *id_json = NULL;
    char *idt = id_text(&m, id);
    id_json = idt != NULL ? g_strdup(idt) : NULL;
    free(idt);
    m.id_json = id_json;
    m.params = cJSON_GetObjectItemCaseSensitive(root, "params");
    if (method == NULL && (cJSON_GetObjectItemCaseSensitive(root, "result") != NULL ||
                           cJSON_GetObjectItemCaseSensitive(root, "error") != NULL)) {
        on_response(s, &m, id);
        return;
    }
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0 || !cJSON_IsString(method) ||
        (id != NULL && id_json == NULL) ||
        (m.params != NULL && !cJSON_IsObject(m.params) && !cJSON_IsArray(m.params))) {
        if (id != NULL || !cJSON_IsString(method)) { /* a notification gets no answer at all */
            answer_error(s, batch, id_json, SBX_JSONRPC_INVALID_REQUEST,
                         "Invalid Request: not a JSON-RPC 2.0 request (jsonrpc \"2.0\", a "
                         "method, an id that is a string or a number of at most " G_STRINGIFY(
                             SBX_MCP_SERVER_ID_MAX) " bytes, params an object)");
        }
        return;
    }
    m.method = method->valuestring;
    if (id == NULL) {
        on_notification(s, &m);
    } else if (m.params != NULL && !cJSON_IsObject(m.params)) {
        answer_error(s, batch, id_json, SBX_JSONRPC_INVALID_PARAMS,
                     "Invalid params: params is an object");
    } else {
        on_request(s, &m);
    }
}

/* The elements of a batch, each from its own text. */
static void handle_batch(SbxMcpServer *s, const char *text, gsize len, const cJSON *root)
{
    int n = cJSON_GetArraySize(root);
    const cJSON *item;

    if (s->revision == NULL || strcmp(s->revision, BATCH_REVISION) != 0 || n == 0 ||
        n > SBX_MCP_SERVER_BATCH_MAX) {
        answer_error(s, NULL, NULL, SBX_JSONRPC_INVALID_REQUEST,
                     s->revision == NULL || strcmp(s->revision, BATCH_REVISION) != 0
                         ? "Invalid Request: batches only after initialize, and only in "
                           "revision 2025-03-26"
                         : "Invalid Request: a batch of 1 to " G_STRINGIFY(
                               SBX_MCP_SERVER_BATCH_MAX) " messages");
        return;
    }
    Batch *batch = g_new0(Batch, 1);
    batch->answers = g_ptr_array_new_with_free_func(g_free);
    batch->outstanding = 1;
    cJSON_ArrayForEach(item, root)
    {
        char *one = sbx_json_item_text(text, len, root, item);
        cJSON *elem =
            one != NULL ? sbx_json_parse(one, strlen(one), SBX_JSON_DEPTH_MAX, NULL) : NULL;
        if (elem != NULL) {
            handle_one(s, one, strlen(one), elem, batch);
        } else {
            answer_error(s, batch, NULL, SBX_JSONRPC_INTERNAL_ERROR, "Internal error");
        }
        cJSON_Delete(elem);
        free(one);
    }
    batch_release(s, batch);
}

void sbx_mcp_server_receive(SbxMcpServer *s, const char *text, gsize len)
{
    g_autofree char *why = NULL;

    if (len > SBX_MCP_SERVER_MESSAGE_MAX) {
        answer_error(s, NULL, NULL, SBX_JSONRPC_INVALID_REQUEST,
                     "Invalid Request: a message over 4 MiB (SBX_MCP_SERVER_MESSAGE_MAX)");
        return;
    }
    cJSON *root = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, &why);
    if (root == NULL) {
        g_autofree char *msg =
            g_strdup_printf("Parse error: %s", why != NULL ? why : "out of memory");
        answer_error(s, NULL, NULL, SBX_JSONRPC_PARSE_ERROR, msg);
        return;
    }
    if (cJSON_IsArray(root)) {
        handle_batch(s, text, len, root);
    } else {
        handle_one(s, text, len, root, NULL);
    }
    cJSON_Delete(root);
}

/* @call ended: its answer @result (NULL: none, it was cancelled) goes out; @call is freed. */
static void finish_call(SbxMcpServer *s, SbxMcpCall *call, const char *result)
{
    Batch *batch = call->batch;

    elicits_of_call_end(s, call);
    g_hash_table_remove(s->calls, call->id_json);
    if (result != NULL) {
        answer_result(s, batch, call->id_json, result);
    }
    call_free(call);
    if (batch != NULL) {
        batch_release(s, batch);
    }
}

void sbx_mcp_server_finish(SbxMcpServer *s, SbxMcpCall *call, const char *report_json)
{
    g_autofree char *result =
        call->cancelled ? NULL : sbx_mcp_execute_result(report_json, s->revision);

    finish_call(s, call, result);
}

/* The handles after @call's @o: an open's kept (also a cancelled one's), a close's dropped. */
static void track_session(SbxMcpServer *s, const SbxMcpCall *call, const SbxMcpSessionOutcome *o)
{
    if (call->tool == SBX_MCP_TOOL_SESSION_OPEN) {
        s->opening--;
        if (o->error_code == NULL && o->session != NULL && sbx_id_valid(o->session) &&
            !session_known(s, o->session)) {
            g_ptr_array_add(s->sessions, g_strdup(o->session));
        }
    } else if (call->sargs.session != NULL &&
               (call->tool == SBX_MCP_TOOL_SESSION_CLOSE || (o->error_code != NULL && o->gone))) {
        session_forget(s, call->sargs.session);
    }
}

void sbx_mcp_server_finish_session(SbxMcpServer *s, SbxMcpCall *call,
                                   const SbxMcpSessionOutcome *outcome)
{
    track_session(s, call, outcome);
    g_autofree char *result =
        call->cancelled ? NULL
                        : sbx_mcp_session_result(call->tool, &call->sargs, outcome, s->revision);

    finish_call(s, call, result);
}

gboolean sbx_mcp_call_wants_progress(const SbxMcpCall *call)
{
    return call->progress_token != NULL;
}

/* One notifications/progress for @call (a progress token, not cancelled): @progress above the
 * last one sent. */
static void send_progress(SbxMcpServer *s, SbxMcpCall *call, guint64 progress, guint64 total,
                          const char *message)
{
    SbxJsonb b;

    call->progress = progress;
    call->progress_sent = TRUE;
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "jsonrpc", "2.0");
    sbx_jsonb_member_string(&b, "method", "notifications/progress");
    sbx_jsonb_key(&b, "params");
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_raw(&b, "progressToken", call->progress_token);
    sbx_jsonb_member_uint(&b, "progress", progress);
    if (total > 0) {
        sbx_jsonb_member_uint(&b, "total", total);
    }
    if (message != NULL) {
        sbx_jsonb_member_string(&b, "message", message);
    }
    sbx_jsonb_end_object(&b);
    sbx_jsonb_end_object(&b);
    g_autofree char *json = sbx_jsonb_finish(&b);
    s->ops->send(s->data, json, strlen(json));
}

/* The output held for @call goes out now, as the message of a notification at @progress (or
 * just above the last one). */
static void flush_output(SbxMcpServer *s, SbxMcpCall *call, guint64 progress, guint64 total)
{
    g_autoptr(GString) text = g_steal_pointer(&call->held);

    if (text == NULL || text->len == 0) {
        return;
    }
    /* A message is a JSON string: output that is not UTF-8 is shown with U+FFFD. */
    g_autofree char *valid = g_utf8_make_valid(text->str, (gssize)text->len);
    g_autofree char *message = call->held_stream == SBX_STREAM_STDERR
                                   ? g_strconcat("stderr: ", valid, NULL)
                                   : g_steal_pointer(&valid);
    send_progress(s, call, MAX(progress, call->progress + 1), total, message);
}

void sbx_mcp_server_progress(SbxMcpServer *s, SbxMcpCall *call, guint64 progress, guint64 total,
                             const char *message)
{
    if (call->progress_token == NULL || call->cancelled || progress <= call->progress) {
        return;
    }
    if (call->held != NULL && call->held->len > 0) {
        flush_output(s, call, progress, total); /* the output says more than "running for" */
        return;
    }
    send_progress(s, call, progress, total, message);
}

void sbx_mcp_server_output(SbxMcpServer *s, SbxMcpCall *call, SbxStream stream, const guint8 *bytes,
                           gsize len, guint64 progress, guint64 total)
{
    if (call->progress_token == NULL || call->cancelled || len == 0) {
        return;
    }
    if (call->held != NULL && call->held_stream != stream) {
        flush_output(s, call, progress, total);
    }
    if (call->held == NULL) {
        call->held = g_string_new(NULL);
        call->held_stream = stream;
    }
    gsize room = SBX_MCP_OUTPUT_HELD_MAX - MIN(call->held->len, SBX_MCP_OUTPUT_HELD_MAX);
    g_string_append_len(call->held, (const char *)bytes, (gssize)MIN(len, room));
    if (!call->progress_sent || progress >= call->progress + SBX_MCP_OUTPUT_EVERY_MS) {
        flush_output(s, call, progress, total);
    }
}

/* ---- stdio ---------------------------------------------------------------------------------- */

static void line_done(SbxMcpServer *s)
{
    const char *text = (const char *)s->line->data;
    gsize len = s->line->len;

    if (len > 0 && text[len - 1] == '\r') {
        len--;
    }
    gsize i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t')) {
        i++;
    }
    if (i < len) { /* blank lines between messages are harmless */
        sbx_mcp_server_receive(s, text, len);
    }
    g_byte_array_set_size(s->line, 0);
}

void sbx_mcp_server_feed(SbxMcpServer *s, const guint8 *data, gsize len)
{
    while (len > 0) {
        const guint8 *nl = memchr(data, '\n', len);
        gsize take = nl != NULL ? (gsize)(nl - data) : len;

        if (!s->skipping && s->line->len + take > SBX_MCP_SERVER_MESSAGE_MAX) {
            /* Answered once, then the rest of the line is dropped as it comes. */
            g_byte_array_set_size(s->line, 0);
            s->skipping = TRUE;
            answer_error(s, NULL, NULL, SBX_JSONRPC_INVALID_REQUEST,
                         "Invalid Request: a message over 4 MiB (SBX_MCP_SERVER_MESSAGE_MAX)");
        }
        if (!s->skipping) {
            g_byte_array_append(s->line, data, take);
        }
        if (nl == NULL) {
            return;
        }
        data += take + 1;
        len -= take + 1;
        if (s->skipping) {
            s->skipping = FALSE;
        } else {
            line_done(s);
        }
    }
}

void sbx_mcp_server_feed_end(SbxMcpServer *s)
{
    if (!s->skipping && s->line->len > 0) {
        line_done(s);
    }
    g_byte_array_set_size(s->line, 0);
    s->skipping = FALSE;
}
