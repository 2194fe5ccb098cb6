/*
 * Encoding the frames of `sandbox serve`'s client protocol (serve-proto.h): a typed request or
 * message into its JSON text, with the JSON builder (base/json-builder.h): every string is
 * escaped whatever its bytes; JSON texts of ours (a report, a checked tool input) are inserted
 * as they are.
 */
#include "server/proto.h"

#include <string.h>

#include "base/json-builder.h"
#include "protocol/base64.h"

static const char *const request_names[] = {
    [SBX_SERVE_REQ_RUN] = "run",
    [SBX_SERVE_REQ_STATUS] = "status",
    [SBX_SERVE_REQ_APPROVALS] = "approvals",
    [SBX_SERVE_REQ_APPROVE] = "approve",
    [SBX_SERVE_REQ_DENY] = "deny",
    [SBX_SERVE_REQ_SESSION_NEW] = "session_new",
    [SBX_SERVE_REQ_SESSION_LIST] = "session_list",
    [SBX_SERVE_REQ_SESSION_SHOW] = "session_show",
    [SBX_SERVE_REQ_SESSION_END] = "session_end",
    [SBX_SERVE_REQ_FILE_PUT] = "file_put",
    [SBX_SERVE_REQ_FILE_GET] = "file_get",
    [SBX_SERVE_REQ_FILE_LIST] = "file_list",
    [SBX_SERVE_REQ_FILE_DELETE] = "file_delete",
};

static const char *const msg_names[] = {
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

/* @data (@len bytes) as a base64 string member. */
static void member_base64(SbxJsonb *b, const char *key, const guint8 *data, gsize len)
{
    g_autofree char *b64 = NULL;

    if (sbx_base64_encode(data, len, &b64) < 0) {
        g_error("out of memory"); /* our pieces are bounded: nothing else makes it fail */
    }
    sbx_jsonb_member_string(b, key, b64);
}

/* @v as an integer member, or null when 0 (a time or PID that is not there). */
static void member_uint_or_null(SbxJsonb *b, const char *key, guint64 v)
{
    if (v == 0) {
        sbx_jsonb_member_string(b, key, NULL);
    } else {
        sbx_jsonb_member_uint(b, key, v);
    }
}

/* ---- requests (client -> server) ------------------------------------------------------ */

static void encode_run(SbxJsonb *b, const SbxServeRun *run)
{
    sbx_jsonb_member_string(b, "language", sbx_language_name(run->language));
    sbx_jsonb_member_string(b, "code", run->code);
    if (run->entry != NULL) {
        sbx_jsonb_member_string(b, "entry", run->entry);
    }
    if (run->args_json != NULL) {
        sbx_jsonb_member_raw(b, "args", run->args_json);
    }
    if (run->kwargs_json != NULL) {
        sbx_jsonb_member_raw(b, "kwargs", run->kwargs_json);
    }
    sbx_jsonb_member_string(b, "tools", run->tools_path);
    sbx_jsonb_member_string(b, "profile", run->profile);
    sbx_jsonb_member_uint(b, "timeout_ms", run->timeout_ms);
    sbx_jsonb_member_uint(b, "output_limit", run->output_limit);
    sbx_jsonb_member_bool(b, "collect", run->collect);
    if (run->live) {
        sbx_jsonb_member_bool(b, "live", TRUE);
    }
    if (run->approvals) {
        sbx_jsonb_member_bool(b, "approvals", TRUE);
    }
    if (run->session != NULL) {
        sbx_jsonb_member_string(b, "session", run->session);
    }
}

static void encode_session_new(SbxJsonb *b, const SbxServeSessionNew *n)
{
    sbx_jsonb_member_string(b, "profile", n->profile);
    member_uint_or_null(b, "idle_timeout_s", n->idle_timeout_s);
    member_uint_or_null(b, "max_lifetime_s", n->max_lifetime_s);
}

static void encode_file_req(SbxJsonb *b, SbxServeRequestType type, const SbxServeFileReq *f)
{
    sbx_jsonb_member_string(b, "session", f->session);
    sbx_jsonb_member_string(b, "path", f->path);
    if (type == SBX_SERVE_REQ_FILE_PUT || type == SBX_SERVE_REQ_FILE_GET) {
        sbx_jsonb_member_uint(b, "offset", f->offset);
    }
    if (type == SBX_SERVE_REQ_FILE_PUT) {
        member_base64(b, "data", f->data, f->len);
        sbx_jsonb_member_bool(b, "last", f->last);
    }
}

char *sbx_serve_proto_request_encode(const SbxServeRequest *req)
{
    SbxJsonb b;

    g_assert(req->type < SBX_SERVE_REQ_UNKNOWN);
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "type", request_names[req->type]);
    switch (req->type) {
    case SBX_SERVE_REQ_RUN:
        encode_run(&b, &req->run);
        break;
    case SBX_SERVE_REQ_SESSION_NEW:
        encode_session_new(&b, &req->session_new);
        break;
    case SBX_SERVE_REQ_FILE_PUT:
    case SBX_SERVE_REQ_FILE_GET:
    case SBX_SERVE_REQ_FILE_LIST:
    case SBX_SERVE_REQ_FILE_DELETE:
        encode_file_req(&b, req->type, &req->file);
        break;
    case SBX_SERVE_REQ_STATUS:
    case SBX_SERVE_REQ_SESSION_LIST:
        break;
    default: /* approvals (an optional id), approve, deny, session_show, session_end */
        if (req->id != NULL || req->type != SBX_SERVE_REQ_APPROVALS) {
            sbx_jsonb_member_string(&b, "id", req->id);
        }
        break;
    }
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

/* ---- messages (server -> client) ------------------------------------------------------ */

static void member_pids(SbxJsonb *b, const char *name, const GArray *pids)
{
    sbx_jsonb_key(b, name);
    sbx_jsonb_begin_array(b);
    for (guint i = 0; pids != NULL && i < pids->len; i++) {
        sbx_jsonb_int(b, g_array_index(pids, GPid, i));
    }
    sbx_jsonb_end_array(b);
}

/* One profile's members (in the object open in @b). */
static void encode_profile(SbxJsonb *b, const SbxServeProfileStatus *p)
{
    sbx_jsonb_member_string(b, "profile", p->name);
    sbx_jsonb_member_uint(b, "pool_size", p->pool_size);
    sbx_jsonb_member_uint(b, "ready", p->ready);
    sbx_jsonb_member_uint(b, "starting", p->starting);
    sbx_jsonb_member_uint(b, "waiting", p->waiting);
    sbx_jsonb_member_uint(b, "running", p->running);
    sbx_jsonb_member_uint(b, "started_total", p->started_total);
    sbx_jsonb_member_uint(b, "failed_total", p->failed_total);
    sbx_jsonb_member_uint(b, "dropped_total", p->dropped_total);
    sbx_jsonb_member_uint(b, "claimed_total", p->claimed_total);
    member_pids(b, "ready_pids", p->ready_pids);
    member_pids(b, "running_pids", p->running_pids);
    sbx_jsonb_member_uint(b, "prestart", p->prestart);
    member_pids(b, "prestarted_pids", p->prestarted_pids);
    sbx_jsonb_member_uint(b, "sessions", p->sessions);
    member_pids(b, "session_pids", p->session_pids);
}

/*
 * The default profile's members at the top level (what clients before per-profile pools read),
 * then every pooled profile's under `profiles`, by name.
 */
static void encode_status(SbxJsonb *b, const SbxServeMsg *msg)
{
    if (msg->n_status > 0) {
        encode_profile(b, &msg->status[0]);
    }
    sbx_jsonb_key(b, "profiles");
    sbx_jsonb_begin_object(b);
    for (gsize i = 0; i < msg->n_status; i++) {
        sbx_jsonb_key(b, msg->status[i].name != NULL ? msg->status[i].name : "");
        sbx_jsonb_begin_object(b);
        encode_profile(b, &msg->status[i]);
        sbx_jsonb_end_object(b);
    }
    sbx_jsonb_end_object(b);
}

static void encode_output(SbxJsonb *b, const SbxServeMsg *msg)
{
    sbx_jsonb_member_string(b, "stream", sbx_stream_name(msg->stream));
    member_base64(b, "data", msg->data, msg->data_len);
}

static void encode_session(SbxJsonb *b, const SbxServeSession *s)
{
    sbx_jsonb_begin_object(b);
    sbx_jsonb_member_string(b, "id", s->id);
    sbx_jsonb_member_string(b, "status", s->status);
    sbx_jsonb_member_string(b, "profile", s->profile);
    sbx_jsonb_member_int(b, "created_ms", s->created_ms);
    sbx_jsonb_member_int(b, "last_active_ms", s->last_active_ms);
    member_uint_or_null(b, "expires_ms", (guint64)MAX(s->expires_ms, 0));
    member_uint_or_null(b, "ended_ms", (guint64)MAX(s->ended_ms, 0));
    sbx_jsonb_member_uint(b, "idle_timeout_s", s->idle_timeout_s);
    sbx_jsonb_member_uint(b, "max_lifetime_s", s->max_lifetime_s);
    sbx_jsonb_member_uint(b, "executions", s->executions);
    sbx_jsonb_member_uint(b, "memory_mib", s->memory_mib);
    sbx_jsonb_member_string(b, "current_execution", s->current_execution);
    sbx_jsonb_member_string(b, "end_status", s->end_status);
    sbx_jsonb_member_string(b, "end_reason", s->end_reason);
    member_uint_or_null(b, "qemu_pid", (guint64)MAX(s->qemu_pid, 0));
    sbx_jsonb_end_object(b);
}

static void encode_sessions(SbxJsonb *b, const SbxServeMsg *msg)
{
    if (msg->type == SBX_SERVE_MSG_SESSION) {
        g_assert(msg->n_sessions == 1);
        sbx_jsonb_key(b, "session");
        encode_session(b, &msg->sessions[0]);
        return;
    }
    sbx_jsonb_key(b, "sessions");
    sbx_jsonb_begin_array(b);
    for (gsize i = 0; i < msg->n_sessions; i++) {
        encode_session(b, &msg->sessions[i]);
    }
    sbx_jsonb_end_array(b);
}

static void encode_entries(SbxJsonb *b, const SbxServeMsg *msg)
{
    sbx_jsonb_key(b, "entries");
    sbx_jsonb_begin_array(b);
    for (gsize i = 0; i < msg->n_entries; i++) {
        const SbxServeFileEntry *e = &msg->entries[i];
        sbx_jsonb_begin_object(b);
        sbx_jsonb_member_string(b, "path", e->path);
        sbx_jsonb_member_string(b, "type", sbx_file_type_name(e->type));
        sbx_jsonb_member_uint(b, "size", e->size);
        sbx_jsonb_member_uint(b, "mtime_us", e->mtime_us);
        sbx_jsonb_end_object(b);
    }
    sbx_jsonb_end_array(b);
    sbx_jsonb_member_bool(b, "truncated", msg->truncated);
}

/* file_part, file, files, file_deleted */
static void encode_file_msg(SbxJsonb *b, const SbxServeMsg *msg)
{
    sbx_jsonb_member_string(b, "path", msg->path);
    if (msg->type == SBX_SERVE_MSG_FILES) {
        encode_entries(b, msg);
        return;
    }
    if (msg->type == SBX_SERVE_MSG_FILE_DELETED) {
        return;
    }
    sbx_jsonb_member_uint(b, "size", msg->size);
    if (msg->type == SBX_SERVE_MSG_FILE) {
        sbx_jsonb_member_string(b, "sha256", msg->sha256);
        if (msg->data != NULL) { /* a get's piece */
            sbx_jsonb_member_uint(b, "offset", msg->offset);
            member_base64(b, "data", msg->data, msg->data_len);
        }
    }
}

static void encode_pending(SbxJsonb *b, const SbxServePending *p)
{
    sbx_jsonb_begin_object(b);
    sbx_jsonb_member_string(b, "id", p->id);
    sbx_jsonb_member_string(b, "provider", p->provider);
    sbx_jsonb_member_string(b, "tool", p->tool);
    if (p->input_json != NULL) {
        sbx_jsonb_member_raw(b, "input", p->input_json); /* checked compact JSON */
    } else {
        sbx_jsonb_member_string(b, "input_excerpt", p->input_excerpt);
    }
    if (p->origin != NULL) {
        sbx_jsonb_member_string(b, "origin", p->origin);
    }
    sbx_jsonb_member_int(b, "waiting_ms", p->waiting_ms);
    sbx_jsonb_member_int(b, "timeout_ms", p->timeout_ms);
    sbx_jsonb_end_object(b);
}

static void encode_approvals(SbxJsonb *b, const SbxServeMsg *msg)
{
    sbx_jsonb_key(b, "pending");
    sbx_jsonb_begin_array(b);
    for (gsize i = 0; i < msg->n_pending; i++) {
        encode_pending(b, &msg->pending[i]);
    }
    sbx_jsonb_end_array(b);
}

char *sbx_serve_proto_msg_encode(const SbxServeMsg *msg)
{
    SbxJsonb b;

    g_assert(msg->type < SBX_SERVE_MSG_OTHER);
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "type", msg_names[msg->type]);
    switch (msg->type) {
    case SBX_SERVE_MSG_STATUS:
        encode_status(&b, msg);
        break;
    case SBX_SERVE_MSG_OUTPUT:
        encode_output(&b, msg);
        break;
    case SBX_SERVE_MSG_DONE:
        sbx_jsonb_member_int(&b, "exit_code", msg->exit_code);
        sbx_jsonb_member_string(&b, "summary", msg->summary);
        sbx_jsonb_member_raw(&b, "report", msg->report_json); /* ours: an object */
        break;
    case SBX_SERVE_MSG_ERROR:
        sbx_jsonb_member_string(&b, "code", msg->code);
        sbx_jsonb_member_string(&b, "message", msg->message);
        break;
    case SBX_SERVE_MSG_APPROVALS:
        encode_approvals(&b, msg);
        break;
    case SBX_SERVE_MSG_APPROVAL:
        g_assert(msg->n_pending >= 1);
        sbx_jsonb_key(&b, "approval");
        encode_pending(&b, &msg->pending[0]);
        break;
    case SBX_SERVE_MSG_APPROVED:
    case SBX_SERVE_MSG_DENIED:
    case SBX_SERVE_MSG_APPROVAL_OVER:
        sbx_jsonb_member_string(&b, "id", msg->id);
        break;
    case SBX_SERVE_MSG_SESSION:
    case SBX_SERVE_MSG_SESSIONS:
        encode_sessions(&b, msg);
        break;
    default: /* the file messages */
        encode_file_msg(&b, msg);
        break;
    }
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}
