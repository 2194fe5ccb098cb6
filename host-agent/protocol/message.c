/*
 * Message helpers shared by the encoder and the decoder: wire names, syntax of ids and
 * identifiers, freeing.
 */
#include "message.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[SBX_MSG__COUNT] = {
    [SBX_MSG_HELLO] = "hello",
    [SBX_MSG_HELLO_OK] = "hello_ok",
    [SBX_MSG_EXECUTE] = "execute",
    [SBX_MSG_STARTED] = "started",
    [SBX_MSG_OUTPUT] = "output",
    [SBX_MSG_TOOL_CALL] = "tool_call",
    [SBX_MSG_TOOL_RESULT] = "tool_result",
    [SBX_MSG_CANCEL] = "cancel",
    [SBX_MSG_DONE] = "done",
    [SBX_MSG_PING] = "ping",
    [SBX_MSG_PONG] = "pong",
    [SBX_MSG_ERROR] = "error",
    [SBX_MSG_FILE] = "file",
    [SBX_MSG_FILE_RESULT] = "file_result",
    [SBX_MSG_REPLAY_LOG] = "replay_log",
};

static const char *const file_op_names[SBX_FILE_OP__COUNT] = {
    [SBX_FILE_WRITE] = "write",
    [SBX_FILE_READ] = "read",
    [SBX_FILE_LIST] = "list",
    [SBX_FILE_DELETE] = "delete",
};

static const char *const file_type_names[SBX_FILE_TYPE__COUNT] = {
    [SBX_FILE_TYPE_FILE] = "file",
    [SBX_FILE_TYPE_DIR] = "dir",
    [SBX_FILE_TYPE_SYMLINK] = "symlink",
    [SBX_FILE_TYPE_OTHER] = "other",
};

static const char *const language_names[SBX_LANG__COUNT] = {
    [SBX_LANG_JAVASCRIPT] = "javascript",
    [SBX_LANG_PYTHON] = "python",
    [SBX_LANG_TYPESCRIPT] = "typescript",
};

static const char *const stream_names[SBX_STREAM__COUNT] = {
    [SBX_STREAM_STDOUT] = "stdout",
    [SBX_STREAM_STDERR] = "stderr",
};

static const char *const status_names[SBX_STATUS__COUNT] = {
    [SBX_STATUS_OK] = "ok",
    [SBX_STATUS_ERROR] = "error",
    [SBX_STATUS_TIMEOUT] = "timeout",
    [SBX_STATUS_MEMORY_LIMIT] = "memory_limit",
    [SBX_STATUS_CRASH] = "crash",
    [SBX_STATUS_TERMINATED] = "terminated",
    [SBX_STATUS_CANCELLED] = "cancelled",
};

static const char *const error_code_names[SBX_ERR__COUNT] = {
    [SBX_ERR_TIMEOUT] = "timeout",
    [SBX_ERR_MEMORY_LIMIT] = "memory_limit",
    [SBX_ERR_VALIDATION] = "validation_error",
    [SBX_ERR_TOOL] = "tool_error",
    [SBX_ERR_POLICY_DENIED] = "policy_denied",
    [SBX_ERR_RUNTIME] = "runtime_error",
    [SBX_ERR_SERIALIZATION] = "serialization_error",
    [SBX_ERR_INTERNAL] = "internal_error",
    [SBX_ERR_PROTOCOL] = "protocol_error",
    [SBX_ERR_REPLAY_DIVERGENCE] = "replay_divergence",
};

/* Enum values come from callers and may be out of range: answer NULL rather than read past. */
static const char *name_of(const char *const *names, unsigned n, unsigned v)
{
    return v < n ? names[v] : NULL;
}

static int index_of(const char *const *names, unsigned n, const char *name, unsigned *ret)
{
    for (unsigned i = 0; name && i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            *ret = i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *sbx_msg_type_name(SbxMsgType t)
{
    return name_of(type_names, SBX_MSG__COUNT, t);
}

const char *sbx_language_name(SbxLanguage l)
{
    return name_of(language_names, SBX_LANG__COUNT, l);
}

const char *sbx_stream_name(SbxStream s)
{
    return name_of(stream_names, SBX_STREAM__COUNT, s);
}

const char *sbx_status_name(SbxStatus s)
{
    return name_of(status_names, SBX_STATUS__COUNT, s);
}

const char *sbx_error_code_name(SbxErrorCode c)
{
    return name_of(error_code_names, SBX_ERR__COUNT, c);
}

const char *sbx_file_op_name(SbxFileOp op)
{
    return name_of(file_op_names, SBX_FILE_OP__COUNT, op);
}

const char *sbx_file_type_name(SbxFileType t)
{
    return name_of(file_type_names, SBX_FILE_TYPE__COUNT, t);
}

int sbx_file_op_from_name(const char *name, SbxFileOp *ret)
{
    unsigned i;
    int r = index_of(file_op_names, SBX_FILE_OP__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxFileOp)i;
    return r;
}

int sbx_file_type_from_name(const char *name, SbxFileType *ret)
{
    unsigned i;
    int r = index_of(file_type_names, SBX_FILE_TYPE__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxFileType)i;
    return r;
}

int sbx_msg_type_from_name(const char *name, SbxMsgType *ret)
{
    unsigned i;
    int r = index_of(type_names, SBX_MSG__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxMsgType)i;
    return r;
}

int sbx_language_from_name(const char *name, SbxLanguage *ret)
{
    unsigned i;
    int r = index_of(language_names, SBX_LANG__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxLanguage)i;
    return r;
}

int sbx_stream_from_name(const char *name, SbxStream *ret)
{
    unsigned i;
    int r = index_of(stream_names, SBX_STREAM__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxStream)i;
    return r;
}

int sbx_status_from_name(const char *name, SbxStatus *ret)
{
    unsigned i;
    int r = index_of(status_names, SBX_STATUS__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxStatus)i;
    return r;
}

int sbx_error_code_from_name(const char *name, SbxErrorCode *ret)
{
    unsigned i;
    int r = index_of(error_code_names, SBX_ERR__COUNT, name, &i);

    if (r == 0)
        *ret = (SbxErrorCode)i;
    return r;
}

bool sbx_id_valid(const char *id)
{
    size_t n = 0;

    if (!id)
        return false;
    for (; id[n]; n++) {
        char c = id[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';

        if (!ok || n >= SBX_ID_MAX)
            return false;
    }
    return n > 0;
}

static bool ident_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
           (!first && c >= '0' && c <= '9');
}

bool sbx_identifier_valid(const char *s)
{
    size_t n = 0;

    if (!s)
        return false;
    for (; s[n]; n++)
        if (n >= SBX_NAME_MAX || !ident_char(s[n], n == 0))
            return false;
    return n > 0;
}

bool sbx_workspace_path_valid(const char *path)
{
    size_t n = 0, name = 0;

    if (!path || !path[0])
        return false;
    for (;; n++) {
        unsigned char c = (unsigned char)path[n];

        if (c == '/' || c == '\0') {
            /* the component path[n - name .. n) */
            if (name == 0 || name > SBX_PATH_NAME_MAX)
                return false;
            if (path[n - name] == '.' && (name == 1 || (name == 2 && path[n - 1] == '.')))
                return false;
            if (c == '\0')
                return n <= SBX_PATH_MAX;
            name = 0;
            continue;
        }
        if (c < 0x20 || c == 0x7f || n >= SBX_PATH_MAX)
            return false;
        name++;
    }
}

static void error_clear(SbxError *e)
{
    free(e->type);
    free(e->message);
    free(e->stack);
}

static void execute_clear(SbxExecute *m)
{
    free(m->entropy);
    free(m->seed);
    free(m->clock_log);
    free(m->event_log);
    free(m->id);
    free(m->code);
    free(m->entry);
    free(m->args_json);
    free(m->kwargs_json);
    for (size_t i = 0; m->tools && i < m->n_tools; i++) {
        free(m->tools[i].provider);
        free(m->tools[i].name);
        free(m->tools[i].description);
    }
    free(m->tools);
}

static void hello_ok_clear(SbxHelloOk *m)
{
    free(m->token);
    free(m->agent);
    for (size_t i = 0; m->languages && m->languages[i]; i++)
        free(m->languages[i]);
    free(m->languages);
}

size_t sbx_msg_data_len(const SbxMsg *msg)
{
    if (msg->type == SBX_MSG_FILE && msg->file.op == SBX_FILE_WRITE)
        return msg->file.len;
    if (msg->type == SBX_MSG_FILE_RESULT && msg->file_result.ok)
        return msg->file_result.len;
    return 0;
}

int sbx_msg_attach_data(SbxMsg *msg, uint8_t *data, size_t len)
{
    uint8_t **slot = msg->type == SBX_MSG_FILE ? &msg->file.data : &msg->file_result.data;

    if (len == 0 || len != sbx_msg_data_len(msg) || *slot) {
        free(data);
        return -EINVAL;
    }
    *slot = data;
    return 0;
}

void sbx_msg_clear(SbxMsg *msg)
{
    switch (msg->type) {
    case SBX_MSG_HELLO:
        free(msg->hello.token);
        free(msg->hello.entropy);
        break;
    case SBX_MSG_HELLO_OK:
        hello_ok_clear(&msg->hello_ok);
        break;
    case SBX_MSG_EXECUTE:
        execute_clear(&msg->execute);
        break;
    case SBX_MSG_STARTED:
        free(msg->started.id);
        break;
    case SBX_MSG_OUTPUT:
        free(msg->output.id);
        free(msg->output.data);
        break;
    case SBX_MSG_TOOL_CALL:
        free(msg->tool_call.id);
        free(msg->tool_call.provider);
        free(msg->tool_call.tool);
        free(msg->tool_call.input_json);
        free(msg->tool_call.clock);
        free(msg->tool_call.events);
        free(msg->tool_call.not_replayable);
        break;
    case SBX_MSG_TOOL_RESULT:
        free(msg->tool_result.id);
        free(msg->tool_result.result_json);
        error_clear(&msg->tool_result.error);
        break;
    case SBX_MSG_CANCEL:
        free(msg->cancel.id);
        break;
    case SBX_MSG_DONE:
        free(msg->done.id);
        free(msg->done.result_json);
        free(msg->done.clock_log);
        free(msg->done.not_replayable);
        error_clear(&msg->done.error);
        break;
    case SBX_MSG_REPLAY_LOG:
        free(msg->replay_log.id);
        free(msg->replay_log.clock);
        free(msg->replay_log.events);
        free(msg->replay_log.not_replayable);
        break;
    case SBX_MSG_ERROR:
        free(msg->error.message);
        break;
    case SBX_MSG_FILE:
        free(msg->file.path);
        free(msg->file.data);
        break;
    case SBX_MSG_FILE_RESULT:
        error_clear(&msg->file_result.error);
        free(msg->file_result.data);
        for (size_t i = 0; msg->file_result.entries && i < msg->file_result.n_entries; i++)
            free(msg->file_result.entries[i].path);
        free(msg->file_result.entries);
        break;
    default:
        break;
    }
    memset(msg, 0, sizeof(*msg));
}
