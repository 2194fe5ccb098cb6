/*
 * Decoding the frames of `sandbox serve`'s client protocol (serve-proto.h): the checks of a
 * client's request, and the fields of a server's message. The only file of the serve protocol
 * that looks into JSON.
 */
#include "server/proto.h"

#include <string.h>

#include <cJSON.h>

#include "exec/call.h"
#include "protocol/base64.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "session/session.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

static const struct {
    const char *name;
    SbxServeRequestType type;
} request_types[] = {
    {"run", SBX_SERVE_REQ_RUN},
    {"status", SBX_SERVE_REQ_STATUS},
    {"approvals", SBX_SERVE_REQ_APPROVALS},
    {"approve", SBX_SERVE_REQ_APPROVE},
    {"deny", SBX_SERVE_REQ_DENY},
    {"session_new", SBX_SERVE_REQ_SESSION_NEW},
    {"session_list", SBX_SERVE_REQ_SESSION_LIST},
    {"session_show", SBX_SERVE_REQ_SESSION_SHOW},
    {"session_end", SBX_SERVE_REQ_SESSION_END},
    {"file_put", SBX_SERVE_REQ_FILE_PUT},
    {"file_get", SBX_SERVE_REQ_FILE_GET},
    {"file_list", SBX_SERVE_REQ_FILE_LIST},
    {"file_delete", SBX_SERVE_REQ_FILE_DELETE},
};

static const struct {
    const char *name;
    SbxServeMsgType type;
} msg_types[] = {
    {"status", SBX_SERVE_MSG_STATUS},
    {"output", SBX_SERVE_MSG_OUTPUT},
    {"done", SBX_SERVE_MSG_DONE},
    {"error", SBX_SERVE_MSG_ERROR},
    {"approvals", SBX_SERVE_MSG_APPROVALS},
    {"approved", SBX_SERVE_MSG_APPROVED},
    {"denied", SBX_SERVE_MSG_DENIED},
    {"session", SBX_SERVE_MSG_SESSION},
    {"sessions", SBX_SERVE_MSG_SESSIONS},
    {"file_part", SBX_SERVE_MSG_FILE_PART},
    {"file", SBX_SERVE_MSG_FILE},
    {"files", SBX_SERVE_MSG_FILES},
    {"file_deleted", SBX_SERVE_MSG_FILE_DELETED},
    {"approval", SBX_SERVE_MSG_APPROVAL},
    {"approval_over", SBX_SERVE_MSG_APPROVAL_OVER},
};

/* The JSON object of @payload and its string `type`, or NULL: no message. */
static cJSON *parse_message(const char *payload, gsize len, const char **ret_type)
{
    cJSON *msg = sbx_json_parse(payload, len, SBX_JSON_DEPTH_MAX, NULL);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(msg, "type");

    if (!cJSON_IsObject(msg) || !cJSON_IsString(type)) {
        cJSON_Delete(msg);
        return NULL;
    }
    *ret_type = type->valuestring;
    return msg;
}

/* A copy of member @name of @obj if it is a string, else NULL. */
static char *dup_string(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

    return cJSON_IsString(v) ? g_strdup(v->valuestring) : NULL;
}

/* ---- requests (client -> server) ------------------------------------------------------ */

/* An optional integer member from 1 to @max into @out; absent or null keeps the default. */
static gboolean get_uint(const cJSON *obj, const char *name, guint64 max, guint64 *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

    if (v == NULL || cJSON_IsNull(v)) {
        return TRUE;
    }
    int64_t n;
    if (!sbx_json_int64(v, &n) || n < 1 || (guint64)n > max) {
        return FALSE;
    }
    *out = (guint64)n;
    return TRUE;
}

static const char bad_session[] =
    "session: a session's id (1 to 64 letters, digits, `_`, `.` or `-`)";

/* A session's id: a string that is an id (the server's are `se_` and 24 hex digits). */
static gboolean is_id(const cJSON *v)
{
    return cJSON_IsString(v) && sbx_id_valid(v->valuestring);
}

/*
 * Member @name of @msg (parsed from @payload, @len bytes) as the text it was sent as, minified,
 * into *@ret: NULL when absent or null. FALSE when out of memory.
 */
static gboolean get_json_text(const char *payload, gsize len, const cJSON *msg, const char *name,
                              char **ret)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, name);

    if (v == NULL || cJSON_IsNull(v)) {
        return TRUE;
    }
    char *text = sbx_json_member_text(payload, len, msg, v);
    *ret = g_strdup(text);
    free(text);
    return *ret != NULL;
}

/*
 * The function call of a `run` (`entry`, `args`, `kwargs`; exec/call.h) into @run; NULL on
 * success, else what is wrong (and @run holds none of it).
 */
static const char *decode_call(const char *payload, gsize len, const cJSON *msg, SbxServeRun *run)
{
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(msg, "entry");
    g_autofree char *args = NULL, *kwargs = NULL;

    if (entry != NULL && !cJSON_IsNull(entry) && !cJSON_IsString(entry)) {
        return SBX_EXEC_CALL_ENTRY_RULE;
    }
    if (!get_json_text(payload, len, msg, "args", &args) ||
        !get_json_text(payload, len, msg, "kwargs", &kwargs)) {
        return "out of memory";
    }
    const char *name = cJSON_IsString(entry) ? entry->valuestring : NULL;
    const char *why = sbx_exec_call_check(run->language, name, args, kwargs);
    if (why != NULL) {
        return why;
    }
    run->entry = g_strdup(name);
    run->args_json = g_steal_pointer(&args);
    run->kwargs_json = g_steal_pointer(&kwargs);
    return NULL;
}

/* Check a `run` message (@payload, @len bytes, parsed: @msg) into @run; NULL on success, else
 * what is wrong. */
static const char *decode_run(const char *payload, gsize len, const cJSON *msg, SbxServeRun *run)
{
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(msg, "language");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(msg, "code");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(msg, "tools");
    const cJSON *profile = cJSON_GetObjectItemCaseSensitive(msg, "profile");
    guint64 timeout = SBX_SESSION_TIMEOUT_DEFAULT_MS, limit = SBX_SESSION_OUTPUT_LIMIT_DEFAULT;

    if (!cJSON_IsString(lang) || sbx_language_from_name(lang->valuestring, &run->language) < 0) {
        return "language: " SBX_LANGUAGE_NAMES;
    }
    /* with an entry the code may be empty: a session's earlier execution defined the function */
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(msg, "entry");
    gboolean calls = entry != NULL && !cJSON_IsNull(entry);
    if (!cJSON_IsString(code) || (strlen(code->valuestring) == 0 && !calls) ||
        !g_utf8_validate(code->valuestring, -1, NULL)) {
        return "code: a UTF-8 string, not empty unless an entry is named";
    }
    if (tools != NULL && !cJSON_IsNull(tools) &&
        (!cJSON_IsString(tools) || !g_path_is_absolute(tools->valuestring))) {
        return "tools: an absolute path or null";
    }
    if (!get_uint(msg, "timeout_ms", SBX_SERVE_TIMEOUT_MAX_MS, &timeout) ||
        !get_uint(msg, "output_limit", SBX_SERVE_OUTPUT_LIMIT_MAX, &limit)) {
        return "timeout_ms (1..86400000) and output_limit (1..2^30) are integers";
    }
    const cJSON *session = cJSON_GetObjectItemCaseSensitive(msg, "session");
    if (session != NULL && !cJSON_IsNull(session)) {
        if (!is_id(session)) {
            return bad_session;
        }
        if (profile != NULL && !cJSON_IsNull(profile)) {
            return "profile: a run in a session runs on the session's VM (name no profile)";
        }
    }
    const char *why = decode_call(payload, len, msg, run);
    if (why != NULL) {
        return why;
    }
    run->session = cJSON_IsString(session) ? g_strdup(session->valuestring) : NULL;
    run->code = g_strdup(code->valuestring);
    run->tools_path = cJSON_IsString(tools) ? g_strdup(tools->valuestring) : NULL;
    run->timeout_ms = (guint)timeout;
    run->output_limit = limit;
    run->collect = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "collect"));
    run->live = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "live"));
    run->approvals = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "approvals"));
    run->profile = cJSON_IsString(profile) ? g_strdup(profile->valuestring) : NULL;
    run->profile_not_name = profile != NULL && !cJSON_IsNull(profile) && !cJSON_IsString(profile);
    return NULL;
}

/* A `session_new` into @n; NULL on success, else what is wrong. */
static const char *decode_session_new(const cJSON *msg, SbxServeSessionNew *n)
{
    const cJSON *profile = cJSON_GetObjectItemCaseSensitive(msg, "profile");
    guint64 idle = 0, life = 0;

    if (!get_uint(msg, "idle_timeout_s", SBX_SERVE_SESSION_SECONDS_MAX, &idle) ||
        !get_uint(msg, "max_lifetime_s", SBX_SERVE_SESSION_SECONDS_MAX, &life)) {
        return "idle_timeout_s and max_lifetime_s: integers of seconds, 1..86400, or null";
    }
    n->idle_timeout_s = (guint)idle;
    n->max_lifetime_s = (guint)life;
    n->profile = cJSON_IsString(profile) ? g_strdup(profile->valuestring) : NULL;
    n->profile_not_name = profile != NULL && !cJSON_IsNull(profile) && !cJSON_IsString(profile);
    return NULL;
}

/* A session's `id` (session_show, session_end); NULL on success, else what is wrong. */
static const char *decode_session_id(const cJSON *msg, char **ret_id)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");

    if (!is_id(id)) {
        return "id: a session's id (1 to 64 letters, digits, `_`, `.` or `-`)";
    }
    *ret_id = g_strdup(id->valuestring);
    return NULL;
}

/* A workspace path member: NULL when absent or null (@optional), else checked into @ret. */
static const char *decode_path(const cJSON *msg, gboolean optional, char **ret)
{
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(msg, "path");

    if (optional && (path == NULL || cJSON_IsNull(path))) {
        return NULL;
    }
    if (!cJSON_IsString(path) || !g_utf8_validate(path->valuestring, -1, NULL) ||
        !sbx_workspace_path_valid(path->valuestring)) {
        return "path: a workspace path (relative, components separated by single `/`, none `.` "
               "or `..`, no control characters, at most 1024 bytes)";
    }
    *ret = g_strdup(path->valuestring);
    return NULL;
}

/* An optional integer member from 0 to @max into @out (absent or null: 0). */
static gboolean get_offset(const cJSON *obj, const char *name, guint64 max, guint64 *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    int64_t n;

    if (v == NULL || cJSON_IsNull(v)) {
        *out = 0;
        return TRUE;
    }
    if (!sbx_json_int64(v, &n) || n < 0 || (guint64)n > max) {
        return FALSE;
    }
    *out = (guint64)n;
    return TRUE;
}

/* A put's piece: `data` (base64, absent or null: none) and `last` (absent: true). */
static const char *decode_piece(const cJSON *msg, SbxServeFileReq *f)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(msg, "data");
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(msg, "last");
    uint8_t *bytes = NULL;
    size_t len = 0;

    if (last != NULL && !cJSON_IsBool(last)) {
        return "last: a boolean (absent: true, the file is whole)";
    }
    f->last = last == NULL || cJSON_IsTrue(last);
    if (data == NULL || cJSON_IsNull(data)) {
        return NULL;
    }
    if (!cJSON_IsString(data) ||
        strlen(data->valuestring) > sbx_base64_encoded_len(SBX_SERVE_FILE_CHUNK_MAX) ||
        sbx_base64_decode(data->valuestring, strlen(data->valuestring), &bytes, &len) < 0) {
        return "data: base64 (padded, no whitespace) of at most 1 MiB";
    }
    if (len > SBX_SERVE_FILE_CHUNK_MAX || f->offset + len > SBX_SERVE_FILE_MAX) {
        free(bytes);
        return len > SBX_SERVE_FILE_CHUNK_MAX ? "data: base64 (padded, no whitespace) of at most "
                                                "1 MiB"
                                              : "data: past the largest file (32 MiB)";
    }
    f->data = len > 0 ? g_memdup2(bytes, len) : NULL;
    f->len = len;
    free(bytes);
    return NULL;
}

/* A file request of @type into @f; NULL on success, else what is wrong. */
static const char *decode_file(const cJSON *msg, SbxServeRequestType type, SbxServeFileReq *f)
{
    const cJSON *session = cJSON_GetObjectItemCaseSensitive(msg, "session");
    const char *bad;

    if (!is_id(session)) {
        return bad_session;
    }
    bad = decode_path(msg, type == SBX_SERVE_REQ_FILE_LIST, &f->path);
    if (bad == NULL && (type == SBX_SERVE_REQ_FILE_PUT || type == SBX_SERVE_REQ_FILE_GET) &&
        !get_offset(msg, "offset", SBX_SERVE_FILE_MAX, &f->offset)) {
        bad = "offset: an integer, 0..33554432 (32 MiB)";
    }
    if (bad == NULL && type == SBX_SERVE_REQ_FILE_PUT) {
        bad = decode_piece(msg, f);
    }
    if (bad != NULL) {
        g_clear_pointer(&f->path, g_free);
        memset(f, 0, sizeof(*f));
        return bad;
    }
    f->session = g_strdup(session->valuestring);
    return NULL;
}

/* The id of an `approve` or `deny`; NULL on success, else what is wrong. */
static const char *decode_id(const cJSON *msg, char **ret_id)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");

    if (!cJSON_IsString(id) || strlen(id->valuestring) > SBX_SERVE_APPROVAL_ID_MAX) {
        return "id: the approval's id (a string)";
    }
    *ret_id = g_strdup(id->valuestring);
    return NULL;
}

gboolean sbx_serve_proto_request_decode(const char *payload, gsize len, SbxServeRequest *ret)
{
    const char *type = NULL;

    memset(ret, 0, sizeof(*ret));
    g_autoptr(cJSON) msg = parse_message(payload, len, &type);
    if (msg == NULL) {
        return FALSE;
    }
    ret->type = SBX_SERVE_REQ_UNKNOWN;
    for (gsize i = 0; i < G_N_ELEMENTS(request_types); i++) {
        if (strcmp(type, request_types[i].name) == 0) {
            ret->type = request_types[i].type;
            break;
        }
    }
    switch (ret->type) {
    case SBX_SERVE_REQ_RUN:
        ret->bad = decode_run(payload, len, msg, &ret->run);
        break;
    case SBX_SERVE_REQ_APPROVE:
    case SBX_SERVE_REQ_DENY:
        ret->bad = decode_id(msg, &ret->id);
        break;
    case SBX_SERVE_REQ_APPROVALS:
        /* Optional: that approval alone, with its whole input (docs/cli.md, `sandbox approvals`).
         */
        if (cJSON_GetObjectItemCaseSensitive(msg, "id") != NULL) {
            ret->bad = decode_id(msg, &ret->id);
        }
        break;
    case SBX_SERVE_REQ_SESSION_NEW:
        ret->bad = decode_session_new(msg, &ret->session_new);
        break;
    case SBX_SERVE_REQ_SESSION_SHOW:
    case SBX_SERVE_REQ_SESSION_END:
        ret->bad = decode_session_id(msg, &ret->id);
        break;
    case SBX_SERVE_REQ_FILE_PUT:
    case SBX_SERVE_REQ_FILE_GET:
    case SBX_SERVE_REQ_FILE_LIST:
    case SBX_SERVE_REQ_FILE_DELETE:
        ret->bad = decode_file(msg, ret->type, &ret->file);
        break;
    case SBX_SERVE_REQ_UNKNOWN:
        ret->bad = "unknown message type";
        break;
    default: /* status, session_list: no fields */
        break;
    }
    return TRUE;
}

void sbx_serve_proto_request_clear(SbxServeRequest *req)
{
    g_free(req->run.code);
    g_free(req->run.entry);
    g_free(req->run.args_json);
    g_free(req->run.kwargs_json);
    g_free(req->run.tools_path);
    g_free(req->run.profile);
    g_free(req->run.session);
    g_free(req->session_new.profile);
    g_free(req->file.session);
    g_free(req->file.path);
    g_free(req->file.data);
    g_free(req->id);
    memset(req, 0, sizeof(*req));
}

/* ---- messages (server -> client) ------------------------------------------------------ */

/* A member that is an integer from 0 to @max, else 0. */
static guint64 get_count(const cJSON *obj, const char *name, guint64 max)
{
    int64_t n;

    return sbx_json_int64(cJSON_GetObjectItemCaseSensitive(obj, name), &n) && n >= 0 &&
                   (guint64)n <= max
               ? (guint64)n
               : 0;
}

/* The PIDs in array member @name (entries that are no PID are skipped). */
static GArray *get_pids(const cJSON *obj, const char *name)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, name), *v;
    GArray *pids = g_array_new(FALSE, FALSE, sizeof(GPid));

    cJSON_ArrayForEach(v, (cJSON_IsArray(a) ? a : NULL))
    {
        int64_t n;
        if (sbx_json_int64(v, &n) && n > 0 && n <= G_MAXINT32) {
            GPid pid = (GPid)n;
            g_array_append_val(pids, pid);
        }
    }
    return pids;
}

static void decode_profile(const char *name, const cJSON *p, SbxServeProfileStatus *st)
{
    st->name = g_strdup(name);
    st->pool_size = (guint)get_count(p, "pool_size", G_MAXUINT);
    st->ready = (guint)get_count(p, "ready", G_MAXUINT);
    st->starting = (guint)get_count(p, "starting", G_MAXUINT);
    st->waiting = (guint)get_count(p, "waiting", G_MAXUINT);
    st->running = (guint)get_count(p, "running", G_MAXUINT);
    st->prestart = (guint)get_count(p, "prestart", G_MAXUINT);
    st->started_total = get_count(p, "started_total", G_MAXINT64);
    st->failed_total = get_count(p, "failed_total", G_MAXINT64);
    st->dropped_total = get_count(p, "dropped_total", G_MAXINT64);
    st->claimed_total = get_count(p, "claimed_total", G_MAXINT64);
    st->ready_pids = get_pids(p, "ready_pids");
    st->running_pids = get_pids(p, "running_pids");
    st->prestarted_pids = get_pids(p, "prestarted_pids");
    st->session_pids = get_pids(p, "session_pids");
    st->sessions = (guint)get_count(p, "sessions", G_MAXUINT);
}

/*
 * The default profile's name, and the entries of `profiles` whose values are objects: the
 * profiles the server pools, their names and their pools.
 */
static void decode_status(const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *profiles = cJSON_GetObjectItemCaseSensitive(msg, "profiles");
    GPtrArray *names = g_ptr_array_new();
    const cJSON *p;

    m->profile = dup_string(msg, "profile");
    m->status = g_new0(SbxServeProfileStatus,
                       cJSON_IsObject(profiles) ? (gsize)cJSON_GetArraySize(profiles) : 0);
    cJSON_ArrayForEach(p, (cJSON_IsObject(profiles) ? profiles : NULL))
    {
        if (cJSON_IsObject(p)) {
            g_ptr_array_add(names, g_strdup(p->string));
            decode_profile(p->string, p, &m->status[m->n_status++]);
        }
    }
    g_ptr_array_add(names, NULL);
    m->profiles = (char **)g_ptr_array_free(names, FALSE);
}

/* `data` if it is canonical base64, into data/data_len (an empty one is there, not NULL). */
static void decode_data(const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(msg, "data");
    uint8_t *bytes = NULL;
    size_t len = 0;

    if (!cJSON_IsString(data) ||
        sbx_base64_decode(data->valuestring, strlen(data->valuestring), &bytes, &len) < 0) {
        return;
    }
    m->data = g_memdup2(bytes, len != 0 ? len : 1);
    m->data_len = len;
    free(bytes);
}

static void decode_output(const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(msg, "stream");

    if (!cJSON_IsString(stream)) {
        return;
    }
    decode_data(msg, m);
    if (m->data != NULL && strcmp(stream->valuestring, "stderr") == 0) {
        m->stream = SBX_STREAM_STDERR;
    }
}

/* The report is kept as the server's text: `sandbox run --json` prints it, never re-printed. */
static void decode_done(const char *payload, gsize len, const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(msg, "exit_code");
    const cJSON *report = cJSON_GetObjectItemCaseSensitive(msg, "report");
    int64_t rc;

    m->exit_code = sbx_json_int64(code, &rc) && rc >= 0 && rc <= 255 ? (int)rc : -1;
    m->summary = dup_string(msg, "summary");
    if (cJSON_IsObject(report)) {
        char *text = sbx_json_member_text(payload, len, msg, report);
        m->report_json = g_strdup(text);
        free(text);
    }
}

/* A member that is an integer in int64's range, else 0. */
static gint64 get_int64(const cJSON *obj, const char *name)
{
    int64_t n;

    return sbx_json_int64(cJSON_GetObjectItemCaseSensitive(obj, name), &n) ? n : 0;
}

static void decode_pending(const cJSON *a, SbxServePending *p)
{
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(a, "input");

    if (!cJSON_IsObject(a)) {
        return;
    }
    p->id = dup_string(a, "id");
    p->provider = dup_string(a, "provider");
    p->tool = dup_string(a, "tool");
    if (input != NULL) {
        char *text = sbx_json_print(input); /* numbers keep their literals */
        p->input_json = g_strdup(text);
        free(text);
    }
    p->input_excerpt = dup_string(a, "input_excerpt");
    p->origin = dup_string(a, "origin");
    p->waiting_ms = get_int64(a, "waiting_ms");
    p->timeout_ms = get_int64(a, "timeout_ms");
}

static void decode_approvals(const char *payload, gsize len, const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *pending = cJSON_GetObjectItemCaseSensitive(msg, "pending");
    const cJSON *a;

    if (!cJSON_IsArray(pending)) {
        return;
    }
    char *text = sbx_json_member_text(payload, len, msg, pending);
    m->pending_json = g_strdup(text);
    free(text);
    m->pending = g_new0(SbxServePending, cJSON_GetArraySize(pending));
    cJSON_ArrayForEach(a, pending)
    {
        decode_pending(a, &m->pending[m->n_pending++]);
    }
}

/* One approval that waits, on a run's stream: an approvals' entry. */
static void decode_approval(const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(msg, "approval");

    if (!cJSON_IsObject(a)) {
        return;
    }
    m->pending = g_new0(SbxServePending, 1);
    m->n_pending = 1;
    decode_pending(a, &m->pending[0]);
}

/* A member that is an integer from 1 to G_MAXINT32 (a PID), else 0. */
static GPid get_pid(const cJSON *obj, const char *name)
{
    return (GPid)get_count(obj, name, G_MAXINT32);
}

static void decode_session(const cJSON *o, SbxServeSession *s)
{
    s->id = dup_string(o, "id");
    s->status = dup_string(o, "status");
    s->profile = dup_string(o, "profile");
    s->created_ms = (gint64)get_count(o, "created_ms", G_MAXINT64);
    s->last_active_ms = (gint64)get_count(o, "last_active_ms", G_MAXINT64);
    s->expires_ms = (gint64)get_count(o, "expires_ms", G_MAXINT64);
    s->ended_ms = (gint64)get_count(o, "ended_ms", G_MAXINT64);
    s->idle_timeout_s = (guint)get_count(o, "idle_timeout_s", G_MAXUINT);
    s->max_lifetime_s = (guint)get_count(o, "max_lifetime_s", G_MAXUINT);
    s->executions = (guint)get_count(o, "executions", G_MAXUINT);
    s->memory_mib = get_count(o, "memory_mib", G_MAXINT64);
    s->current_execution = dup_string(o, "current_execution");
    s->end_status = dup_string(o, "end_status");
    s->end_reason = dup_string(o, "end_reason");
    s->qemu_pid = get_pid(o, "qemu_pid");
}

/* Member @v of @msg (parsed from @payload, @len bytes) as the text it was sent as, minified. */
static char *member_text(const char *payload, gsize len, const cJSON *msg, const cJSON *v)
{
    char *text = sbx_json_member_text(payload, len, msg, v);
    char *copy = g_strdup(text);

    free(text);
    return copy;
}

/* session: the object `session`; sessions: the objects of the array `sessions`; each also as
 * the text it was sent as (`sandbox session ... --json` prints it, never re-printed). */
static void decode_sessions(const char *payload, gsize len, const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(msg, "session");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(msg, "sessions");
    const cJSON *o;

    if (m->type == SBX_SERVE_MSG_SESSION) {
        m->sessions = g_new0(SbxServeSession, 1);
        if (cJSON_IsObject(one)) {
            decode_session(one, &m->sessions[m->n_sessions++]);
            m->sessions_json = member_text(payload, len, msg, one);
        }
        return;
    }
    if (cJSON_IsArray(all)) {
        m->sessions_json = member_text(payload, len, msg, all);
    }
    m->sessions = g_new0(SbxServeSession, cJSON_IsArray(all) ? cJSON_GetArraySize(all) : 0);
    cJSON_ArrayForEach(o, (cJSON_IsArray(all) ? all : NULL))
    {
        if (cJSON_IsObject(o)) {
            decode_session(o, &m->sessions[m->n_sessions++]);
        }
    }
}

/* A string of 64 hex digits (a SHA-256), else NULL. */
static char *get_sha256(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);

    if (!cJSON_IsString(v) || strlen(v->valuestring) != 64) {
        return NULL;
    }
    for (const char *p = v->valuestring; *p != '\0'; p++) {
        if (!g_ascii_isxdigit(*p)) {
            return NULL;
        }
    }
    return g_strdup(v->valuestring);
}

static void decode_entries(const char *payload, gsize len, const cJSON *msg, SbxServeMsg *m)
{
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(msg, "entries");
    const cJSON *e;

    if (cJSON_IsArray(entries)) {
        m->entries_json = member_text(payload, len, msg, entries);
    }
    m->truncated = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "truncated"));
    m->entries =
        g_new0(SbxServeFileEntry, cJSON_IsArray(entries) ? cJSON_GetArraySize(entries) : 0);
    cJSON_ArrayForEach(e, (cJSON_IsArray(entries) ? entries : NULL))
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(e, "path");
        if (!cJSON_IsObject(e) || !cJSON_IsString(path)) {
            continue;
        }
        SbxServeFileEntry *out = &m->entries[m->n_entries++];
        out->path = g_strdup(path->valuestring);
        if (!cJSON_IsString(type) || sbx_file_type_from_name(type->valuestring, &out->type) < 0) {
            out->type = SBX_FILE_TYPE_OTHER;
        }
        out->size = get_count(e, "size", G_MAXINT64);
        out->mtime_us = get_count(e, "mtime_us", G_MAXINT64);
    }
}

static void decode_file_msg(const char *payload, gsize len, const cJSON *msg, SbxServeMsg *m)
{
    m->path = dup_string(msg, "path");
    if (m->type == SBX_SERVE_MSG_FILES) {
        decode_entries(payload, len, msg, m);
        return;
    }
    m->size = get_count(msg, "size", G_MAXINT64);
    if (m->type == SBX_SERVE_MSG_FILE) {
        m->sha256 = get_sha256(msg, "sha256");
        m->offset = get_count(msg, "offset", G_MAXINT64);
        decode_data(msg, m);
    }
}

gboolean sbx_serve_proto_msg_decode(const char *payload, gsize len, SbxServeMsg *ret)
{
    const char *type = NULL;

    memset(ret, 0, sizeof(*ret));
    ret->exit_code = -1;
    g_autoptr(cJSON) msg = parse_message(payload, len, &type);
    if (msg == NULL) {
        return FALSE;
    }
    ret->type = SBX_SERVE_MSG_OTHER;
    for (gsize i = 0; i < G_N_ELEMENTS(msg_types); i++) {
        if (strcmp(type, msg_types[i].name) == 0) {
            ret->type = msg_types[i].type;
            break;
        }
    }
    ret->type_name = g_strdup(type);
    ret->message = dup_string(msg, "message");
    if (ret->type == SBX_SERVE_MSG_STATUS) {
        decode_status(msg, ret);
    } else if (ret->type == SBX_SERVE_MSG_OUTPUT) {
        decode_output(msg, ret);
    } else if (ret->type == SBX_SERVE_MSG_DONE) {
        decode_done(payload, len, msg, ret);
    } else if (ret->type == SBX_SERVE_MSG_ERROR) {
        ret->code = dup_string(msg, "code");
    } else if (ret->type == SBX_SERVE_MSG_APPROVALS) {
        decode_approvals(payload, len, msg, ret);
    } else if (ret->type == SBX_SERVE_MSG_APPROVAL) {
        decode_approval(msg, ret);
    } else if (ret->type == SBX_SERVE_MSG_APPROVED || ret->type == SBX_SERVE_MSG_DENIED ||
               ret->type == SBX_SERVE_MSG_APPROVAL_OVER) {
        ret->id = dup_string(msg, "id");
    } else if (ret->type == SBX_SERVE_MSG_SESSION || ret->type == SBX_SERVE_MSG_SESSIONS) {
        decode_sessions(payload, len, msg, ret);
    } else if (ret->type != SBX_SERVE_MSG_OTHER) { /* the file messages */
        decode_file_msg(payload, len, msg, ret);
    }
    return TRUE;
}

static void profile_clear(SbxServeProfileStatus *st)
{
    g_free(st->name);
    g_clear_pointer(&st->ready_pids, g_array_unref);
    g_clear_pointer(&st->running_pids, g_array_unref);
    g_clear_pointer(&st->prestarted_pids, g_array_unref);
    g_clear_pointer(&st->session_pids, g_array_unref);
}

static void session_clear(SbxServeSession *s)
{
    g_free(s->id);
    g_free(s->status);
    g_free(s->profile);
    g_free(s->current_execution);
    g_free(s->end_status);
    g_free(s->end_reason);
}

static void pending_clear(SbxServePending *p)
{
    g_free(p->id);
    g_free(p->provider);
    g_free(p->tool);
    g_free(p->input_json);
    g_free(p->input_excerpt);
    g_free(p->origin);
}

void sbx_serve_proto_msg_clear(SbxServeMsg *msg)
{
    g_free(msg->type_name);
    g_free(msg->message);
    g_free(msg->code);
    g_free(msg->profile);
    g_strfreev(msg->profiles);
    for (gsize i = 0; i < msg->n_status; i++) {
        profile_clear(&msg->status[i]);
    }
    g_free(msg->status);
    g_free(msg->data);
    g_free(msg->summary);
    g_free(msg->report_json);
    g_free(msg->pending_json);
    for (gsize i = 0; i < msg->n_pending; i++) {
        pending_clear(&msg->pending[i]);
    }
    g_free(msg->pending);
    g_free(msg->id);
    for (gsize i = 0; i < msg->n_sessions; i++) {
        session_clear(&msg->sessions[i]);
    }
    g_free(msg->sessions);
    g_free(msg->sessions_json);
    g_free(msg->entries_json);
    g_free(msg->path);
    g_free(msg->sha256);
    for (gsize i = 0; i < msg->n_entries; i++) {
        g_free(msg->entries[i].path);
    }
    g_free(msg->entries);
    memset(msg, 0, sizeof(*msg));
}
