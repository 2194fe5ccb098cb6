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
};

static const char *const msg_names[] = {
    [SBX_SERVE_MSG_STATUS] = "status",       [SBX_SERVE_MSG_OUTPUT] = "output",
    [SBX_SERVE_MSG_DONE] = "done",           [SBX_SERVE_MSG_ERROR] = "error",
    [SBX_SERVE_MSG_APPROVALS] = "approvals", [SBX_SERVE_MSG_APPROVED] = "approved",
    [SBX_SERVE_MSG_DENIED] = "denied",
};

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
}

char *sbx_serve_proto_request_encode(const SbxServeRequest *req)
{
    SbxJsonb b;

    g_assert(req->type < SBX_SERVE_REQ_UNKNOWN);
    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    sbx_jsonb_member_string(&b, "type", request_names[req->type]);
    if (req->type == SBX_SERVE_REQ_RUN) {
        encode_run(&b, &req->run);
    } else if (req->type != SBX_SERVE_REQ_STATUS &&
               (req->id != NULL || req->type != SBX_SERVE_REQ_APPROVALS)) {
        sbx_jsonb_member_string(&b, "id", req->id);
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
    g_autofree char *b64 = NULL;

    if (sbx_base64_encode(msg->data, msg->data_len, &b64) < 0) {
        g_error("out of memory"); /* our chunks are bounded: nothing else makes it fail */
    }
    sbx_jsonb_member_string(b, "stream", sbx_stream_name(msg->stream));
    sbx_jsonb_member_string(b, "data", b64);
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
    default: /* approved, denied */
        sbx_jsonb_member_string(&b, "id", msg->id);
        break;
    }
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}
