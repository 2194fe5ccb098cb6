/*
 * Fuzz target: a client's bytes into the MCP server's protocol core (host-agent/mcp-server/)
 * as a stdio stream, in fragments of 1..143 bytes, after an initialize of the revision byte 0
 * picks (or none), with the discovery tools over a small catalog when its top bit is set, and
 * the session tools when bit 6 is. Calls started are finished at once, later, or cancelled
 * first, as the input's bits say: executions with a report that byte 0 also picks, session
 * tools with an outcome (a handle, an error, a session gone, a file's bytes) the seed picks.
 * When bit 5 is set the client declares elicitation, and now and then a call in flight asks it
 * to approve a tool call (elicitation/create, ids 1, 2, ...), withdrawn now and then: the
 * input's responses answer them (corpus `elicit`, `elicit-bad`).
 *
 * Invariants: every message sent is one line of JSON that our strict parser reads, a JSON-RPC
 * 2.0 answer (an object with an id and exactly one of result and error) or a non-empty array of
 * them; no id is answered twice while its call is in flight; the calls in flight never exceed
 * SBX_MCP_SERVER_CALLS_MAX; a cancelled call's finish sends nothing; a session tool's op gets
 * checked arguments (a handle the server opened, a workspace path, at most SBX_MCP_FILE_MAX
 * bytes), and the handles kept never exceed SBX_MCP_SESSIONS_MAX; the server's requests are
 * elicitation/create with a fresh numeric id, at most SBX_MCP_ELICITS_MAX in flight, each ended
 * exactly once (answered, withdrawn, its call's finish, the free), and a withdrawn one is said
 * with notifications/cancelled.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp-server/mcp-server.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "protocol/message.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            abort();                                                                               \
    } while (0)

typedef struct {
    SbxMcpServer *server;
    GPtrArray *calls; /* in flight, as the server started them */
    GHashTable *cancelled;
    guint sent;
    guint opened; /* handles made so far */
    uint32_t seed;
    GHashTable *asked;  /* elicitation ids in flight (as pointers) */
    guint64 last_asked; /* the highest id asked */
    guint withdrawn;    /* notifications/cancelled sent */
} Fuzz;

static const char *const reports[] = {
    ("{\"status\":\"ok\",\"exit_code\":0,\"result\":[1e400,-0.0],\"error\":null,\"stdout\":\"a\","
     "\"stderr\":\"\",\"output_truncated\":false,\"duration_ms\":1}"),
    "{\"status\":\"error\",\"exit_code\":1,\"error\":{\"code\":\"runtime_error\",\"stack\":\"\"}}",
    "{\"status\":7,\"exit_code\":\"x\",\"error\":[],\"stdout\":null}",
    "[]",
    "",
};

static void check_answer(Fuzz *f, const cJSON *v)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, "id");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(v, "method");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(v, "params");
    int64_t n = 0;

    if (cJSON_IsString(method) && strcmp(method->valuestring, "elicitation/create") == 0) {
        /* our one request: a fresh id */
        CHECK(sbx_json_int64(id, &n) && (guint64)n > f->last_asked);
        CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(params, "message")));
        return;
    }
    if (cJSON_IsString(method) && strcmp(method->valuestring, "notifications/cancelled") == 0) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
        CHECK(id == NULL && sbx_json_int64(rid, &n) && (guint64)n <= f->last_asked);
        f->withdrawn++;
        return;
    }
    if (cJSON_IsString(method)) { /* our other notification */
        CHECK(strcmp(method->valuestring, "notifications/progress") == 0 && id == NULL);
        return;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(v, "jsonrpc");
    gboolean result = cJSON_GetObjectItemCaseSensitive(v, "result") != NULL;
    gboolean error = cJSON_GetObjectItemCaseSensitive(v, "error") != NULL;

    CHECK(cJSON_IsObject(v) && cJSON_IsString(ver) && strcmp(ver->valuestring, "2.0") == 0);
    CHECK(cJSON_IsString(id) || cJSON_IsNumber(id) || cJSON_IsNull(id));
    CHECK(result != error);
}

static void on_send(gpointer data, const char *json, gsize len)
{
    Fuzz *f = data;
    cJSON *v = sbx_json_parse(json, len, SBX_JSON_DEPTH_MAX + 8, NULL);
    const cJSON *item;

    f->sent++;
    CHECK(strlen(json) == len && memchr(json, '\n', len) == NULL && v != NULL);
    if (cJSON_IsArray(v)) {
        CHECK(cJSON_GetArraySize(v) > 0);
        cJSON_ArrayForEach(item, v) check_answer(f, item);
    } else {
        check_answer(f, v);
    }
    cJSON_Delete(v);
}

static void started(Fuzz *f, SbxMcpCall *call, const char *session);

static void on_execute(gpointer data, SbxMcpCall *call, const SbxMcpExecuteArgs *args)
{
    Fuzz *f = data;

    CHECK(args->code != NULL && strlen(args->code) <= SBX_MCP_EXECUTE_CODE_MAX);
    CHECK(args->timeout_ms >= 1 && args->timeout_ms <= SBX_MCP_EXECUTE_TIMEOUT_MAX_MS);
    CHECK(args->args_json == NULL || args->args_json[0] == '[');
    CHECK(args->kwargs_json == NULL || args->kwargs_json[0] == '{');
    started(f, call, args->session);
}

/* The session named by an op is one the server opened and holds. */
static void check_handle(Fuzz *f, const char *session)
{
    char **open = sbx_mcp_server_sessions(f->server);

    CHECK(g_strv_length(open) <= SBX_MCP_SESSIONS_MAX);
    CHECK(session == NULL || g_strv_contains((const char *const *)open, session));
    g_strfreev(open);
}

static void started(Fuzz *f, SbxMcpCall *call, const char *session)
{
    check_handle(f, session);
    g_ptr_array_add(f->calls, call);
    CHECK(f->calls->len <= SBX_MCP_SERVER_CALLS_MAX);
    CHECK(sbx_mcp_server_calls(f->server) == f->calls->len);
}

static void on_session_open(gpointer data, SbxMcpCall *call, guint idle_timeout_s,
                            guint max_lifetime_s)
{
    CHECK(idle_timeout_s <= SBX_MCP_SESSION_SECONDS_MAX &&
          max_lifetime_s <= SBX_MCP_SESSION_SECONDS_MAX);
    started(data, call, NULL);
}

static void on_session_close(gpointer data, SbxMcpCall *call, const char *session)
{
    CHECK(session != NULL);
    started(data, call, session);
}

static void on_file_write(gpointer data, SbxMcpCall *call, const char *session, const char *path,
                          const guint8 *bytes, gsize len)
{
    CHECK(sbx_workspace_path_valid(path) && len <= SBX_MCP_FILE_MAX && (len == 0 || bytes));
    started(data, call, session);
}

static void on_file_read(gpointer data, SbxMcpCall *call, const char *session, const char *path)
{
    CHECK(sbx_workspace_path_valid(path));
    started(data, call, session);
}

static void on_cancel(gpointer data, SbxMcpCall *call)
{
    Fuzz *f = data;

    CHECK(!g_hash_table_contains(f->cancelled, call)); /* once per call */
    g_hash_table_add(f->cancelled, call);
}

/* The discovery tools' catalog: two command providers (nothing is started). */
static const char CATALOG[] =
    "{\"providers\": {\"git-hub\": {\"kind\": \"command\", \"command\": [\"/bin/cat\"], "
    "\"tools\": {\"search-issues\": {\"description\": \"Find issues\", \"input_schema\": "
    "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}}}, \"class\": {}}},"
    "\"calc\": {\"kind\": \"command\", \"command\": [\"/bin/cat\"], \"tools\": {\"add\": "
    "{\"description\": \"a + b\", \"input_schema\": {\"type\": \"object\", \"properties\": "
    "{\"a\": {\"type\": \"number\"}}}}}}}}";

static const SbxCatalog *catalog(void)
{
    static SbxCatalog *c;

    if (c == NULL) { /* made once, kept for the process */
        c = sbx_catalog_parse(CATALOG, strlen(CATALOG), "fuzz.json", "/", NULL);
        CHECK(c != NULL);
    }
    return c;
}

static const SbxMcpServerOps ops = {.send = on_send, .execute = on_execute, .cancel = on_cancel};
static const SbxMcpServerOps session_ops = {
    .send = on_send,
    .execute = on_execute,
    .cancel = on_cancel,
    .session_open = on_session_open,
    .session_close = on_session_close,
    .file_write = on_file_write,
    .file_read = on_file_read,
};

/* A session tool's outcome, as the seed picks: done (a new handle, a file), an error, gone. */
static void finish_session(Fuzz *f, SbxMcpCall *call)
{
    static const guint8 bytes[] = {'h', 'i', 0, 0xff, 0xc3, 0xa9};
    char handle[32];
    SbxMcpSessionOutcome o = {.sha256 = "00", .idle_timeout_s = 600, .max_lifetime_s = 3600};

    g_snprintf(handle, sizeof(handle), "se_%u", f->opened++);
    switch (f->seed % 5) {
    case 0:
        o.error_code = "not_found";
        o.error = "no such thing";
        break;
    case 1:
        o.error_code = "ended";
        o.error = "expired";
        o.gone = TRUE;
        break;
    case 2:
        o.size = SBX_MCP_FILE_MAX + 1; /* a read over the cap: its size only */
        break;
    default:
        o.session = handle;
        o.data = bytes;
        o.size = (f->seed >> 4) % (sizeof(bytes) + 1);
        break;
    }
    sbx_mcp_server_finish_session(f->server, call, &o);
    check_handle(f, NULL);
}

/* The elicitation of each id: the data given is the id itself, checked once ended. */
typedef struct {
    Fuzz *f;
    guint64 id;
} Asked;

static void on_elicit_end(SbxMcpServer *server, SbxMcpElicitOutcome outcome, gpointer data)
{
    Asked *a = data;

    (void)server;
    CHECK(outcome <= SBX_MCP_ELICIT_CANCELLED);
    CHECK(g_hash_table_remove(a->f->asked, GSIZE_TO_POINTER(a->id))); /* once each */
    g_free(a);
}

/* The oldest call in flight asks the client to approve a tool call. */
static void ask(Fuzz *f)
{
    static const SbxMcpApprovalAsk q = {
        .provider = "p", .tool = "t", .input_json = "{\"a\":1}", .timeout_ms = 60000};
    Asked *a = g_new0(Asked, 1);

    a->f = f;
    a->id = sbx_mcp_server_elicit_approval(f->server, g_ptr_array_index(f->calls, 0), &q,
                                           on_elicit_end, a);
    if (a->id == 0) {
        g_free(a);
        return;
    }
    CHECK(a->id > f->last_asked && !g_hash_table_contains(f->asked, GSIZE_TO_POINTER(a->id)));
    f->last_asked = a->id;
    g_hash_table_add(f->asked, GSIZE_TO_POINTER(a->id));
    CHECK(sbx_mcp_server_elicits(f->server) == g_hash_table_size(f->asked));
    CHECK(sbx_mcp_server_elicits(f->server) <= SBX_MCP_ELICITS_MAX);
}

static void finish_first(Fuzz *f, const char *report)
{
    SbxMcpCall *call = g_ptr_array_steal_index(f->calls, 0);
    gboolean cancelled = g_hash_table_remove(f->cancelled, call);
    guint before = f->sent - f->withdrawn;

    if (sbx_mcp_call_tool(call) == SBX_MCP_TOOL_EXECUTE) {
        sbx_mcp_server_finish(f->server, call, report);
    } else {
        finish_session(f, call);
    }
    /* Nothing but its elicitations' withdrawals (a batch may complete) */
    CHECK(!cancelled || f->sent - f->withdrawn == before || f->sent - f->withdrawn == before + 1);
    CHECK(sbx_mcp_server_elicits(f->server) == g_hash_table_size(f->asked));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const versions[] = {NULL, "2025-11-25", "2025-06-18", "2025-03-26",
                                           "2024-11-05"};
    SbxMcpServerInfo info = {.name = "sandbox", .version = "0"};
    Fuzz f = {0};
    size_t pos = 1;
    uint32_t seed;

    if (size < 1)
        return 0;
    seed = data[0];
    f.calls = g_ptr_array_new();
    f.cancelled = g_hash_table_new(NULL, NULL);
    f.asked = g_hash_table_new(NULL, NULL);
    f.server = sbx_mcp_server_new((data[0] & 0x40) ? &session_ops : &ops, &f, &info);
    if (data[0] & 0x80)
        sbx_mcp_server_set_catalog(f.server, catalog());
    const char *version = versions[data[0] % G_N_ELEMENTS(versions)];
    const char *report = reports[(data[0] >> 3) % G_N_ELEMENTS(reports)];
    if (version != NULL) {
        char *init = g_strdup_printf("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\","
                                     "\"params\":{\"protocolVersion\":\"%s\",\"capabilities\":%s,"
                                     "\"clientInfo\":{\"name\":\"f\",\"version\":\"1\"}}}\n",
                                     version, (data[0] & 0x20) ? "{\"elicitation\":{}}" : "{}");
        sbx_mcp_server_feed(f.server, (const guint8 *)init, strlen(init));
        g_free(init);
    }
    while (pos < size) {
        size_t n;
        seed = seed * 1103515245u + 12345u;
        f.seed = seed >> 16;
        n = 1 + (seed >> 16) % 143;
        if (n > size - pos)
            n = size - pos;
        sbx_mcp_server_feed(f.server, data + pos, n);
        pos += n;
        /* Now and then the oldest call in flight reports progress, or ends. */
        if (f.calls->len > 0 && (seed >> 12) % 3 == 0)
            sbx_mcp_server_progress(f.server, g_ptr_array_index(f.calls, 0), pos, size,
                                    (seed & 2) ? "running" : NULL);
        /* ... or its program's output: the bytes just fed, any bytes (messages stay JSON) */
        if (f.calls->len > 0 && (seed >> 14) % 3 == 0)
            sbx_mcp_server_output(f.server, g_ptr_array_index(f.calls, 0),
                                  (seed & 4) ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT,
                                  data + pos - n, n, pos * 50, size * 50);
        /* ... or asks the client to approve, or an approval asked is withdrawn. */
        if (f.calls->len > 0 && (seed >> 20) % 2 == 0)
            ask(&f);
        if (f.last_asked > 0 && (seed >> 24) % 5 == 0)
            sbx_mcp_server_elicit_cancel(f.server, 1 + (seed >> 4) % f.last_asked);
        CHECK(sbx_mcp_server_elicits(f.server) == g_hash_table_size(f.asked));
        if (f.calls->len > 0 && (seed >> 8) % 4 == 0)
            finish_first(&f, report);
    }
    sbx_mcp_server_feed_end(f.server);
    /* Half the time the rest end; else the server is freed with them in flight. */
    while ((seed & 1) && f.calls->len > 0)
        finish_first(&f, report);
    sbx_mcp_server_free(f.server);
    CHECK(g_hash_table_size(f.asked) == 0); /* every one ended, the free's included */
    g_hash_table_unref(f.asked);
    g_ptr_array_unref(f.calls);
    g_hash_table_unref(f.cancelled);
    return 0;
}
