/*
 * Fuzz target: the client protocol of `sandbox serve` (cli/serve-proto.c), both directions. The
 * input is decoded whole as a client's request (what serve.c acts on) and as a server's message
 * (what `sandbox run` and `sandbox approvals` act on); then, read as a byte stream, it goes
 * through the frame reader (protocol/frame.h) whole and in fragments whose sizes come from the
 * input's bytes, and each frame is decoded both ways too.
 * Checks: a request and a message decode from the same payloads (a JSON object with a string
 * `type`); an accepted request holds what the server relies on (a known language, non-empty
 * UTF-8 code, an absolute tools path, numbers in range, an id of at most 64 bytes, a function
 * call the core accepts: an identifier, args an array, kwargs an object for Python, both only
 * with an entry, as their minified JSON texts; a session's id, a workspace path, a file's piece
 * within 1 MiB and the file within 32 MiB) and a refused one says why and holds nothing; a
 * message's fields are in range (exit code, stream, PIDs, a SHA-256's 64 digits, entry types)
 * and its texts kept as sent (report, pending list) are JSON of the right kind; fragmenting a
 * stream changes neither its frames nor where it breaks; a request or message, encoded again
 * (serve-proto-encode.c) and decoded, is the same. Everything is freed (ASan).
 */
#include <errno.h>
#include <string.h>

#include <glib.h>

#include "../protocol/fuzz.h"
#include "exec/call.h"
#include "protocol/frame.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "server/proto.h"

/* Streams of more frames than this are cut: the checks per frame are what matters. */
#define FUZZ_FRAMES_MAX 64

/* @text parses as a JSON object. */
static gboolean is_json_object(const char *text)
{
    cJSON *v = sbx_json_parse(text, strlen(text), SBX_JSON_DEPTH_MAX, NULL);
    gboolean ok = cJSON_IsObject(v);

    cJSON_Delete(v);
    return ok;
}

/* @text (NULL: none) is the minified text of a JSON array or object (@kind '[' or '{'). */
static gboolean is_json_of(const char *text, char kind)
{
    if (text == NULL) {
        return TRUE;
    }
    cJSON *v = sbx_json_parse(text, strlen(text), SBX_JSON_DEPTH_MAX, NULL);
    char *min = sbx_json_minify(text, strlen(text));
    gboolean ok = (kind == '[' ? cJSON_IsArray(v) : cJSON_IsObject(v)) && min != NULL &&
                  strcmp(min, text) == 0;

    free(min);
    cJSON_Delete(v);
    return ok;
}

static void check_run(const SbxServeRequest *req)
{
    const SbxServeRun *run = &req->run;

    if (req->bad != NULL) {
        FUZZ_CHECK(run->code == NULL && run->tools_path == NULL && run->profile == NULL &&
                   run->session == NULL);
        FUZZ_CHECK(run->entry == NULL && run->args_json == NULL && run->kwargs_json == NULL);
        return;
    }
    /* The call: what exec/call.h allows (the core asserts it), its JSON as sent, minified. */
    FUZZ_CHECK(sbx_exec_call_check(run->language, run->entry, run->args_json, run->kwargs_json) ==
               NULL);
    FUZZ_CHECK(run->entry == NULL || sbx_identifier_valid(run->entry));
    FUZZ_CHECK(is_json_of(run->args_json, '[') && is_json_of(run->kwargs_json, '{'));
    FUZZ_CHECK(run->kwargs_json == NULL || run->language == SBX_LANG_PYTHON);
    FUZZ_CHECK(run->entry != NULL || (run->args_json == NULL && run->kwargs_json == NULL));
    FUZZ_CHECK(run->language < SBX_LANG__COUNT);
    /* empty code only with an entry: a session's earlier execution defined the function */
    FUZZ_CHECK(run->code != NULL && (run->code[0] != '\0' || run->entry != NULL) &&
               g_utf8_validate(run->code, -1, NULL));
    FUZZ_CHECK(run->tools_path == NULL || g_path_is_absolute(run->tools_path));
    FUZZ_CHECK(run->timeout_ms >= 1 && run->timeout_ms <= SBX_SERVE_TIMEOUT_MAX_MS);
    FUZZ_CHECK(run->output_limit >= 1 && run->output_limit <= SBX_SERVE_OUTPUT_LIMIT_MAX);
    FUZZ_CHECK(!run->profile_not_name || run->profile == NULL);
    FUZZ_CHECK(run->session == NULL ||
               (sbx_id_valid(run->session) && run->profile == NULL && !run->profile_not_name));
}

static void check_session_new(const SbxServeRequest *req)
{
    const SbxServeSessionNew *n = &req->session_new;

    FUZZ_CHECK(req->bad == NULL || n->profile == NULL);
    FUZZ_CHECK(!n->profile_not_name || n->profile == NULL);
    FUZZ_CHECK(n->idle_timeout_s <= SBX_SERVE_SESSION_SECONDS_MAX);
    FUZZ_CHECK(n->max_lifetime_s <= SBX_SERVE_SESSION_SECONDS_MAX);
}

/* A file request holds a session id, a workspace path (none only for a list) and a piece within
 * the bounds; a refused one holds nothing. */
static void check_file(const SbxServeRequest *req)
{
    const SbxServeFileReq *f = &req->file;

    if (req->bad != NULL) {
        FUZZ_CHECK(f->session == NULL && f->path == NULL && f->data == NULL && f->len == 0);
        return;
    }
    FUZZ_CHECK(f->session != NULL && sbx_id_valid(f->session));
    FUZZ_CHECK(f->path != NULL || req->type == SBX_SERVE_REQ_FILE_LIST);
    FUZZ_CHECK(f->path == NULL || sbx_workspace_path_valid(f->path));
    FUZZ_CHECK(f->offset <= SBX_SERVE_FILE_MAX && f->len <= SBX_SERVE_FILE_CHUNK_MAX);
    FUZZ_CHECK(f->offset + f->len <= SBX_SERVE_FILE_MAX);
    FUZZ_CHECK((f->data == NULL) == (f->len == 0));
    FUZZ_CHECK(req->type == SBX_SERVE_REQ_FILE_PUT || f->len == 0);
}

/* @b is @a again after an encoding and a decoding: equal, unless @a is no UTF-8 (the encoder
 * writes U+FFFD for what is not, e.g. from a lone surrogate's escape). */
static gboolean same_str(const char *a, const char *b)
{
    if (a == NULL || b == NULL) {
        return a == b;
    }
    return !g_utf8_validate(a, -1, NULL) || strcmp(a, b) == 0;
}

/* An accepted request, encoded and decoded again, is the same request. */
static void check_request_round_trip(const SbxServeRequest *req)
{
    g_autofree char *text = sbx_serve_proto_request_encode(req);
    g_auto(SbxServeRequest) again = {0};

    FUZZ_CHECK(sbx_serve_proto_request_decode(text, strlen(text), &again));
    FUZZ_CHECK(again.type == req->type && again.bad == NULL);
    FUZZ_CHECK(same_str(req->id, again.id));
    if (req->type == SBX_SERVE_REQ_RUN) {
        const SbxServeRun *a = &req->run, *b = &again.run;
        FUZZ_CHECK(a->language == b->language && same_str(a->code, b->code));
        FUZZ_CHECK(same_str(a->tools_path, b->tools_path) && same_str(a->profile, b->profile));
        FUZZ_CHECK(a->timeout_ms == b->timeout_ms && a->output_limit == b->output_limit);
        FUZZ_CHECK(same_str(a->entry, b->entry) && same_str(a->args_json, b->args_json));
        FUZZ_CHECK(same_str(a->kwargs_json, b->kwargs_json));
        FUZZ_CHECK(a->collect == b->collect && a->live == b->live && !b->profile_not_name);
        FUZZ_CHECK(same_str(a->session, b->session) && a->approvals == b->approvals);
    }
    if (req->type == SBX_SERVE_REQ_SESSION_NEW) {
        const SbxServeSessionNew *a = &req->session_new, *b = &again.session_new;
        FUZZ_CHECK(same_str(a->profile, b->profile) && !b->profile_not_name);
        FUZZ_CHECK(a->idle_timeout_s == b->idle_timeout_s);
        FUZZ_CHECK(a->max_lifetime_s == b->max_lifetime_s);
    }
    const SbxServeFileReq *f = &req->file, *g = &again.file;
    FUZZ_CHECK(same_str(f->session, g->session) && same_str(f->path, g->path));
    FUZZ_CHECK(f->offset == g->offset && f->len == g->len && f->last == g->last);
    FUZZ_CHECK(f->len == 0 || memcmp(f->data, g->data, f->len) == 0);
}

/* Decode @payload as a client's request; TRUE if it is a message. */
static gboolean check_request(const char *payload, size_t len)
{
    g_auto(SbxServeRequest) req = {0};

    if (!sbx_serve_proto_request_decode(payload, len, &req)) {
        FUZZ_CHECK(req.bad == NULL && req.run.code == NULL && req.id == NULL);
        return FALSE;
    }
    switch (req.type) {
    case SBX_SERVE_REQ_RUN:
        check_run(&req);
        break;
    case SBX_SERVE_REQ_APPROVE:
    case SBX_SERVE_REQ_DENY:
        FUZZ_CHECK((req.bad == NULL) == (req.id != NULL));
        FUZZ_CHECK(req.id == NULL || strlen(req.id) <= SBX_SERVE_APPROVAL_ID_MAX);
        break;
    case SBX_SERVE_REQ_UNKNOWN:
        FUZZ_CHECK(req.bad != NULL);
        break;
    case SBX_SERVE_REQ_STATUS:
    case SBX_SERVE_REQ_SESSION_LIST:
        FUZZ_CHECK(req.bad == NULL);
        break;
    case SBX_SERVE_REQ_SESSION_NEW:
        check_session_new(&req);
        break;
    case SBX_SERVE_REQ_SESSION_SHOW:
    case SBX_SERVE_REQ_SESSION_END:
        FUZZ_CHECK((req.bad == NULL) == (req.id != NULL));
        FUZZ_CHECK(req.id == NULL || sbx_id_valid(req.id));
        break;
    case SBX_SERVE_REQ_FILE_PUT:
    case SBX_SERVE_REQ_FILE_GET:
    case SBX_SERVE_REQ_FILE_LIST:
    case SBX_SERVE_REQ_FILE_DELETE:
        check_file(&req);
        break;
    case SBX_SERVE_REQ_APPROVALS: /* an optional id */
        FUZZ_CHECK(req.bad == NULL || req.id == NULL);
        FUZZ_CHECK(req.id == NULL || strlen(req.id) <= SBX_SERVE_APPROVAL_ID_MAX);
        break;
    default:
        FUZZ_CHECK(!"a request type out of range");
    }
    if (req.bad == NULL && req.type != SBX_SERVE_REQ_UNKNOWN) {
        check_request_round_trip(&req);
    }
    return TRUE;
}

static void check_pending(const SbxServeMsg *msg)
{
    /* a list keeps its text; a run's one approval (`approval`) is an entry alone */
    if (msg->type == SBX_SERVE_MSG_APPROVAL) {
        FUZZ_CHECK(msg->pending_json == NULL && msg->n_pending <= 1);
    } else {
        FUZZ_CHECK(msg->pending_json != NULL || (msg->pending == NULL && msg->n_pending == 0));
    }
    if (msg->pending_json != NULL) {
        cJSON *list =
            sbx_json_parse(msg->pending_json, strlen(msg->pending_json), SBX_JSON_DEPTH_MAX, NULL);
        FUZZ_CHECK(cJSON_IsArray(list) && (gsize)cJSON_GetArraySize(list) == msg->n_pending);
        cJSON_Delete(list);
    }
    for (gsize i = 0; i < msg->n_pending; i++) {
        const char *in = msg->pending[i].input_json;
        /* Any JSON value: parse it whatever its type. */
        cJSON *v = in != NULL ? sbx_json_parse(in, strlen(in), SBX_JSON_DEPTH_MAX, NULL) : NULL;
        FUZZ_CHECK(in == NULL || v != NULL);
        cJSON_Delete(v);
    }
}

/* What a server message named @name is (docs/pool.md, "Client protocol"). */
static SbxServeMsgType type_of(const char *name)
{
    static const char *const names[] = {
        [SBX_SERVE_MSG_STATUS] = "status",
        [SBX_SERVE_MSG_OUTPUT] = "output",
        [SBX_SERVE_MSG_DONE] = "done",
        [SBX_SERVE_MSG_ERROR] = "error",
        [SBX_SERVE_MSG_APPROVALS] = "approvals",
        [SBX_SERVE_MSG_APPROVED] = "approved",
        [SBX_SERVE_MSG_DENIED] = "denied",
        [SBX_SERVE_MSG_SESSION] = "session",
        [SBX_SERVE_MSG_SESSIONS] = "sessions",
        [SBX_SERVE_MSG_FILE_PART] = "file_part",
        [SBX_SERVE_MSG_FILE] = "file",
        [SBX_SERVE_MSG_FILES] = "files",
        [SBX_SERVE_MSG_FILE_DELETED] = "file_deleted",
        [SBX_SERVE_MSG_APPROVAL] = "approval",
        [SBX_SERVE_MSG_APPROVAL_OVER] = "approval_over",
    };

    for (gsize i = 0; i < G_N_ELEMENTS(names); i++) {
        if (strcmp(name, names[i]) == 0) {
            return (SbxServeMsgType)i;
        }
    }
    return SBX_SERVE_MSG_OTHER;
}

static void check_profiles_round_trip(const SbxServeMsg *a, const SbxServeMsg *b)
{
    FUZZ_CHECK(a->n_status == b->n_status);
    FUZZ_CHECK(a->n_status == 0 || same_str(a->status[0].name, b->profile));
    for (gsize i = 0; i < a->n_status; i++) {
        const SbxServeProfileStatus *p = &a->status[i], *q = &b->status[i];
        FUZZ_CHECK(same_str(p->name, q->name) && p->pool_size == q->pool_size);
        FUZZ_CHECK(p->ready == q->ready && p->starting == q->starting);
        FUZZ_CHECK(p->waiting == q->waiting && p->running == q->running);
        FUZZ_CHECK(p->prestart == q->prestart && p->claimed_total == q->claimed_total);
        FUZZ_CHECK(p->started_total == q->started_total && p->failed_total == q->failed_total);
        FUZZ_CHECK(p->dropped_total == q->dropped_total);
        FUZZ_CHECK(p->ready_pids->len == q->ready_pids->len);
        FUZZ_CHECK(p->running_pids->len == q->running_pids->len);
        FUZZ_CHECK(p->prestarted_pids->len == q->prestarted_pids->len);
        FUZZ_CHECK(p->session_pids->len == q->session_pids->len && p->sessions == q->sessions);
    }
}

static void check_sessions_round_trip(const SbxServeMsg *a, const SbxServeMsg *b)
{
    FUZZ_CHECK(a->n_sessions == b->n_sessions);
    for (gsize i = 0; i < a->n_sessions; i++) {
        const SbxServeSession *p = &a->sessions[i], *q = &b->sessions[i];
        FUZZ_CHECK(same_str(p->id, q->id) && same_str(p->status, q->status));
        FUZZ_CHECK(same_str(p->profile, q->profile) && p->created_ms == q->created_ms);
        FUZZ_CHECK(p->last_active_ms == q->last_active_ms && p->expires_ms == q->expires_ms);
        FUZZ_CHECK(p->ended_ms == q->ended_ms && p->idle_timeout_s == q->idle_timeout_s);
        FUZZ_CHECK(p->max_lifetime_s == q->max_lifetime_s && p->executions == q->executions);
        FUZZ_CHECK(p->memory_mib == q->memory_mib && p->qemu_pid == q->qemu_pid);
        FUZZ_CHECK(same_str(p->current_execution, q->current_execution));
        FUZZ_CHECK(same_str(p->end_status, q->end_status));
        FUZZ_CHECK(same_str(p->end_reason, q->end_reason));
    }
}

static void check_file_round_trip(const SbxServeMsg *a, const SbxServeMsg *b)
{
    FUZZ_CHECK(same_str(a->path, b->path));
    if (a->type == SBX_SERVE_MSG_FILE_PART || a->type == SBX_SERVE_MSG_FILE) {
        FUZZ_CHECK(a->size == b->size);
    }
    if (a->type == SBX_SERVE_MSG_FILE) {
        FUZZ_CHECK(same_str(a->sha256, b->sha256) && (a->data == NULL) == (b->data == NULL));
        FUZZ_CHECK(a->data == NULL || (a->offset == b->offset && a->data_len == b->data_len));
        FUZZ_CHECK(a->data_len == 0 || memcmp(a->data, b->data, a->data_len) == 0);
    }
    FUZZ_CHECK(a->n_entries == b->n_entries && a->truncated == b->truncated);
    for (gsize i = 0; i < a->n_entries; i++) {
        const SbxServeFileEntry *p = &a->entries[i], *q = &b->entries[i];
        FUZZ_CHECK(same_str(p->path, q->path) && p->type == q->type);
        FUZZ_CHECK(p->size == q->size && p->mtime_us == q->mtime_us);
    }
}

static void check_pending_round_trip(const SbxServeMsg *a, const SbxServeMsg *b)
{
    FUZZ_CHECK(a->n_pending == b->n_pending);
    for (gsize i = 0; i < a->n_pending; i++) {
        const SbxServePending *p = &a->pending[i], *q = &b->pending[i];
        FUZZ_CHECK(same_str(p->id, q->id) && same_str(p->provider, q->provider));
        FUZZ_CHECK(same_str(p->tool, q->tool) && same_str(p->input_json, q->input_json));
        FUZZ_CHECK(same_str(p->origin, q->origin));
        FUZZ_CHECK(p->input_json != NULL || same_str(p->input_excerpt, q->input_excerpt));
        FUZZ_CHECK(p->waiting_ms == q->waiting_ms && p->timeout_ms == q->timeout_ms);
    }
}

/* A message of a known type, encoded and decoded again, says the same. */
static void check_message_round_trip(const SbxServeMsg *msg)
{
    g_autofree char *text = sbx_serve_proto_msg_encode(msg);
    g_auto(SbxServeMsg) again = {0};

    FUZZ_CHECK(sbx_serve_proto_msg_decode(text, strlen(text), &again));
    FUZZ_CHECK(again.type == msg->type);
    switch (msg->type) {
    case SBX_SERVE_MSG_STATUS:
        check_profiles_round_trip(msg, &again);
        break;
    case SBX_SERVE_MSG_OUTPUT:
        FUZZ_CHECK(again.stream == msg->stream && again.data_len == msg->data_len);
        FUZZ_CHECK(msg->data_len == 0 || memcmp(again.data, msg->data, msg->data_len) == 0);
        break;
    case SBX_SERVE_MSG_DONE:
        FUZZ_CHECK(again.exit_code == msg->exit_code && same_str(msg->summary, again.summary));
        FUZZ_CHECK(same_str(msg->report_json, again.report_json));
        break;
    case SBX_SERVE_MSG_ERROR:
        FUZZ_CHECK(same_str(msg->code, again.code) && same_str(msg->message, again.message));
        break;
    case SBX_SERVE_MSG_APPROVALS:
    case SBX_SERVE_MSG_APPROVAL:
        check_pending_round_trip(msg, &again);
        break;
    case SBX_SERVE_MSG_APPROVED:
    case SBX_SERVE_MSG_DENIED:
    case SBX_SERVE_MSG_APPROVAL_OVER:
        FUZZ_CHECK(same_str(msg->id, again.id));
        break;
    case SBX_SERVE_MSG_SESSION:
    case SBX_SERVE_MSG_SESSIONS:
        check_sessions_round_trip(msg, &again);
        break;
    default: /* the file messages */
        check_file_round_trip(msg, &again);
        break;
    }
}

/* A session or file message's fields are of their type and in range. */
static void check_session_or_file(const SbxServeMsg *msg)
{
    FUZZ_CHECK(msg->type == SBX_SERVE_MSG_SESSION || msg->type == SBX_SERVE_MSG_SESSIONS ||
               msg->n_sessions == 0);
    FUZZ_CHECK(msg->type != SBX_SERVE_MSG_SESSION || msg->n_sessions <= 1);
    for (gsize i = 0; i < msg->n_sessions; i++) {
        FUZZ_CHECK(msg->sessions[i].qemu_pid >= 0 && msg->sessions[i].created_ms >= 0);
    }
    FUZZ_CHECK(msg->sessions_json == NULL || msg->type == SBX_SERVE_MSG_SESSION ||
               msg->type == SBX_SERVE_MSG_SESSIONS);
    if (msg->sessions_json != NULL) {
        cJSON *v = sbx_json_parse(msg->sessions_json, strlen(msg->sessions_json),
                                  SBX_JSON_DEPTH_MAX, NULL);
        FUZZ_CHECK(msg->type == SBX_SERVE_MSG_SESSION ? cJSON_IsObject(v) : cJSON_IsArray(v));
        cJSON_Delete(v);
    }
    if (msg->entries_json != NULL) {
        cJSON *v =
            sbx_json_parse(msg->entries_json, strlen(msg->entries_json), SBX_JSON_DEPTH_MAX, NULL);
        FUZZ_CHECK(msg->type == SBX_SERVE_MSG_FILES && cJSON_IsArray(v));
        cJSON_Delete(v);
    }
    FUZZ_CHECK(msg->sha256 == NULL || strlen(msg->sha256) == 64);
    FUZZ_CHECK(msg->type == SBX_SERVE_MSG_FILES || msg->n_entries == 0);
    for (gsize i = 0; i < msg->n_entries; i++) {
        FUZZ_CHECK(msg->entries[i].path != NULL && msg->entries[i].type < SBX_FILE_TYPE__COUNT);
    }
}

/* Decode @payload as a server's message; TRUE if it is a message. */
static gboolean check_message(const char *payload, size_t len)
{
    g_auto(SbxServeMsg) msg = {0};

    if (!sbx_serve_proto_msg_decode(payload, len, &msg)) {
        FUZZ_CHECK(msg.type_name == NULL && msg.data == NULL && msg.report_json == NULL);
        return FALSE;
    }
    FUZZ_CHECK(msg.type_name != NULL);
    FUZZ_CHECK(msg.exit_code >= -1 && msg.exit_code <= 255);
    FUZZ_CHECK(msg.exit_code == -1 || msg.type == SBX_SERVE_MSG_DONE);
    switch (msg.type) {
    case SBX_SERVE_MSG_STATUS:
        FUZZ_CHECK(msg.profiles != NULL);
        break;
    case SBX_SERVE_MSG_OUTPUT:
        FUZZ_CHECK(msg.stream < SBX_STREAM__COUNT);
        FUZZ_CHECK(msg.data != NULL || msg.data_len == 0);
        FUZZ_CHECK(msg.data_len <= len); /* base64 is longer than its bytes */
        break;
    case SBX_SERVE_MSG_DONE:
        FUZZ_CHECK(msg.report_json == NULL || is_json_object(msg.report_json));
        FUZZ_CHECK(msg.report_json == NULL || strlen(msg.report_json) <= len);
        break;
    case SBX_SERVE_MSG_APPROVALS:
    case SBX_SERVE_MSG_APPROVAL:
        check_pending(&msg);
        break;
    case SBX_SERVE_MSG_FILE:
        FUZZ_CHECK(msg.data != NULL || msg.data_len == 0);
        FUZZ_CHECK(msg.data_len <= len);
        break;
    default:
        break;
    }
    check_session_or_file(&msg);
    FUZZ_CHECK(msg.type == type_of(msg.type_name));
    /* An output frame whose data is no base64 is ignored, as a session message or an approval
     * without its object: nothing to encode again. */
    if (msg.type != SBX_SERVE_MSG_OTHER && (msg.type != SBX_SERVE_MSG_OUTPUT || msg.data != NULL) &&
        (msg.type != SBX_SERVE_MSG_SESSION || msg.n_sessions == 1) &&
        (msg.type != SBX_SERVE_MSG_APPROVAL || msg.n_pending == 1)) {
        check_message_round_trip(&msg);
    }
    return TRUE;
}

static void check_payload(const char *payload, size_t len)
{
    gboolean req = check_request(payload, len);
    gboolean msg = check_message(payload, len);

    FUZZ_CHECK(req == msg); /* both need exactly a JSON object with a string `type` */
}

/* What a frame reader made of a stream. */
typedef struct {
    GPtrArray *frames; /* GBytes */
    ssize_t error;     /* the reader's error, 0 if none */
    gboolean pending;  /* a frame was cut at the end */
} Stream;

/* The frames of @data (up to FUZZ_FRAMES_MAX): fed whole, or @fragmented in pieces of 1 to 13
 * bytes, the k-th piece's size from byte k of @data. */
static Stream read_stream(const uint8_t *data, size_t size, gboolean fragmented)
{
    Stream s = {.frames = g_ptr_array_new_with_free_func((GDestroyNotify)g_bytes_unref)};
    SbxFrameReader r;
    size_t off = 0;

    sbx_frame_reader_init(&r, SBX_FRAME_MAX);
    for (size_t k = 0; off < size && s.frames->len < FUZZ_FRAMES_MAX; k++) {
        size_t piece = fragmented ? 1 + (size_t)(data[k % size] % 13) : size - off;
        size_t end = MIN(size, off + piece);
        while (off < end && s.frames->len < FUZZ_FRAMES_MAX) {
            char *payload = NULL;
            size_t plen = 0;
            ssize_t used = sbx_frame_reader_feed(&r, data + off, end - off, &payload, &plen);
            if (used < 0) {
                FUZZ_CHECK(used == -EMSGSIZE || used == -EBADMSG);
                s.error = used;
                goto out;
            }
            FUZZ_CHECK(used > 0 && (size_t)used <= end - off);
            off += used;
            if (payload != NULL) {
                FUZZ_CHECK(plen >= 1 && plen <= SBX_FRAME_MAX && payload[plen] == '\0');
                g_ptr_array_add(s.frames, g_bytes_new_take(payload, plen));
            }
        }
    }
out:
    s.pending = sbx_frame_reader_pending(&r);
    sbx_frame_reader_clear(&r);
    return s;
}

static void check_stream(const uint8_t *data, size_t size)
{
    Stream whole = read_stream(data, size, FALSE);
    Stream pieces = read_stream(data, size, TRUE);

    FUZZ_CHECK(whole.frames->len == pieces.frames->len);
    for (guint i = 0; i < whole.frames->len; i++) {
        FUZZ_CHECK(g_bytes_equal(whole.frames->pdata[i], pieces.frames->pdata[i]));
        gsize plen;
        const char *payload = g_bytes_get_data(whole.frames->pdata[i], &plen);
        check_payload(payload, plen);
    }
    FUZZ_CHECK(whole.error == pieces.error);
    if (whole.error == 0 && whole.frames->len < FUZZ_FRAMES_MAX) {
        FUZZ_CHECK(whole.pending == pieces.pending); /* a cut frame is cut either way */
    }
    g_ptr_array_unref(whole.frames);
    g_ptr_array_unref(pieces.frames);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_payload((const char *)data, size);
    if (size > 0) {
        check_stream(data, size);
    }
    return 0;
}
