#include "msg-equal.h"

#include <string.h>

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool bytes_eq(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static bool error_eq(const SbxError *a, const SbxError *b)
{
    return a->code == b->code && str_eq(a->type, b->type) && str_eq(a->message, b->message) &&
           str_eq(a->stack, b->stack);
}

static bool languages_eq(char **a, char **b)
{
    size_t i = 0;

    for (; a && b && a[i] && b[i]; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    /* NULL and an empty list mean the same. */
    return (!a || !a[i]) && (!b || !b[i]);
}

/* Clock logs: both absent, or both present with the same reads. */
static bool clock_log_eq(const uint64_t *a, size_t an, const uint64_t *b, size_t bn)
{
    return (!a && !b) || (a && b && an == bn && (an == 0 || !memcmp(a, b, an * sizeof(*a))));
}

static bool execute_eq(const SbxExecute *a, const SbxExecute *b)
{
    if (!str_eq(a->id, b->id) || a->language != b->language || !str_eq(a->code, b->code) ||
        !str_eq(a->entry, b->entry) || !str_eq(a->args_json, b->args_json) ||
        !str_eq(a->kwargs_json, b->kwargs_json) || a->keep != b->keep || a->n_tools != b->n_tools ||
        a->output_limit != b->output_limit || a->timeout_ms != b->timeout_ms ||
        a->time_us != b->time_us ||
        !bytes_eq(a->entropy, a->entropy_len, b->entropy, b->entropy_len) ||
        !bytes_eq(a->seed, a->seed ? SBX_SEED_BYTES : 0, b->seed, b->seed ? SBX_SEED_BYTES : 0) ||
        !clock_log_eq(a->clock_log, a->n_clock_log, b->clock_log, b->n_clock_log) ||
        !clock_log_eq(a->event_log, a->n_event_log, b->event_log, b->n_event_log) ||
        a->log_open != b->log_open)
        return false;
    for (size_t i = 0; i < a->n_tools; i++)
        if (!str_eq(a->tools[i].provider, b->tools[i].provider) ||
            !str_eq(a->tools[i].name, b->tools[i].name) ||
            !str_eq(a->tools[i].description, b->tools[i].description))
            return false;
    return true;
}

static bool done_eq(const SbxDone *a, const SbxDone *b)
{
    return str_eq(a->id, b->id) && a->status == b->status &&
           str_eq(a->result_json, b->result_json) && a->has_error == b->has_error &&
           (!a->has_error || error_eq(&a->error, &b->error)) && a->exit_code == b->exit_code &&
           a->duration_ms == b->duration_ms && a->output_truncated == b->output_truncated &&
           a->kept == b->kept &&
           clock_log_eq(a->clock_log, a->n_clock_log, b->clock_log, b->n_clock_log) &&
           a->has_replayable == b->has_replayable && a->replayable == b->replayable &&
           str_eq(a->not_replayable, b->not_replayable);
}

static bool tool_result_eq(const SbxToolResult *a, const SbxToolResult *b)
{
    return str_eq(a->id, b->id) && a->call_id == b->call_id && a->ok == b->ok &&
           (a->ok ? str_eq(a->result_json, b->result_json) : error_eq(&a->error, &b->error));
}

/* A file's chunk is not in the message (a data frame carries it): only its length is. */
static bool file_eq(const SbxFile *a, const SbxFile *b)
{
    return a->seq == b->seq && a->op == b->op && str_eq(a->path, b->path) &&
           a->offset == b->offset && a->len == b->len && a->last == b->last &&
           a->length == b->length;
}

static bool file_result_eq(const SbxFileResult *a, const SbxFileResult *b)
{
    if (a->seq != b->seq || a->ok != b->ok)
        return false;
    if (!a->ok)
        return error_eq(&a->error, &b->error);
    if (a->size != b->size || a->len != b->len || !a->entries != !b->entries ||
        a->n_entries != b->n_entries || a->truncated != b->truncated)
        return false;
    for (size_t i = 0; i < a->n_entries; i++)
        if (!str_eq(a->entries[i].path, b->entries[i].path) ||
            a->entries[i].type != b->entries[i].type || a->entries[i].size != b->entries[i].size ||
            a->entries[i].mtime_us != b->entries[i].mtime_us)
            return false;
    return true;
}

bool test_msg_equal(const SbxMsg *a, const SbxMsg *b)
{
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case SBX_MSG_HELLO:
        return a->hello.version == b->hello.version && str_eq(a->hello.token, b->hello.token) &&
               bytes_eq(a->hello.entropy, a->hello.entropy_len, b->hello.entropy,
                        b->hello.entropy_len) &&
               a->hello.time_us == b->hello.time_us && a->hello.warm_up == b->hello.warm_up &&
               a->hello.warm_wait_ms == b->hello.warm_wait_ms;
    case SBX_MSG_HELLO_OK:
        return a->hello_ok.version == b->hello_ok.version &&
               str_eq(a->hello_ok.token, b->hello_ok.token) &&
               str_eq(a->hello_ok.agent, b->hello_ok.agent) &&
               languages_eq(a->hello_ok.languages, b->hello_ok.languages);
    case SBX_MSG_EXECUTE:
        return execute_eq(&a->execute, &b->execute);
    case SBX_MSG_STARTED:
        return str_eq(a->started.id, b->started.id);
    case SBX_MSG_OUTPUT:
        return str_eq(a->output.id, b->output.id) && a->output.stream == b->output.stream &&
               bytes_eq(a->output.data, a->output.len, b->output.data, b->output.len);
    case SBX_MSG_TOOL_CALL:
        return str_eq(a->tool_call.id, b->tool_call.id) &&
               a->tool_call.call_id == b->tool_call.call_id &&
               str_eq(a->tool_call.provider, b->tool_call.provider) &&
               str_eq(a->tool_call.tool, b->tool_call.tool) &&
               str_eq(a->tool_call.input_json, b->tool_call.input_json);
    case SBX_MSG_TOOL_RESULT:
        return tool_result_eq(&a->tool_result, &b->tool_result);
    case SBX_MSG_CANCEL:
        return str_eq(a->cancel.id, b->cancel.id);
    case SBX_MSG_DONE:
        return done_eq(&a->done, &b->done);
    case SBX_MSG_PING:
    case SBX_MSG_PONG:
        return a->ping.seq == b->ping.seq;
    case SBX_MSG_ERROR:
        return a->error.code == b->error.code && str_eq(a->error.message, b->error.message);
    case SBX_MSG_FILE:
        return file_eq(&a->file, &b->file);
    case SBX_MSG_FILE_RESULT:
        return file_result_eq(&a->file_result, &b->file_result);
    case SBX_MSG_REPLAY_LOG:
        return str_eq(a->replay_log.id, b->replay_log.id) &&
               clock_log_eq(a->replay_log.clock, a->replay_log.n_clock, b->replay_log.clock,
                            b->replay_log.n_clock) &&
               clock_log_eq(a->replay_log.events, a->replay_log.n_events, b->replay_log.events,
                            b->replay_log.n_events) &&
               str_eq(a->replay_log.not_replayable, b->replay_log.not_replayable);
    default:
        return false;
    }
}
