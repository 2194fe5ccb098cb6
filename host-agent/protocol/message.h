/*
 * Typed messages of the guest <-> host protocol (normative spec: docs/protocol.md).
 *
 * The only place that touches JSON for the protocol: nothing outside this module sees a cJSON
 * value. Arbitrary JSON values (tool input, tool result, the execution's result) travel as
 * validated JSON text (`*_json` fields): the sender's own text less the whitespace between
 * tokens, never re-printed, so every number keeps its literal (json.h). Pure C: no I/O, no
 * GLib, so the static guest agent links it too.
 *
 * Ownership: every pointer in an SbxMsg is malloc'd and owned by the message;
 * sbx_msg_clear() frees them all. Optional strings are NULL when absent.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limits.h"

typedef enum {
    SBX_MSG_HELLO,       /* host -> guest: first message on a connection */
    SBX_MSG_HELLO_OK,    /* guest -> host */
    SBX_MSG_EXECUTE,     /* host -> guest (and agent -> runner) */
    SBX_MSG_STARTED,     /* guest -> host */
    SBX_MSG_OUTPUT,      /* guest -> host */
    SBX_MSG_TOOL_CALL,   /* guest -> host (and runner -> agent) */
    SBX_MSG_TOOL_RESULT, /* host -> guest (and agent -> runner) */
    SBX_MSG_CANCEL,      /* host -> guest */
    SBX_MSG_DONE,        /* guest -> host (and runner -> agent) */
    SBX_MSG_PING,        /* either way */
    SBX_MSG_PONG,        /* answer to ping */
    SBX_MSG_ERROR,       /* either way: fatal protocol error, sender closes after it */
    SBX_MSG_FILE,        /* host -> guest: a step of a workspace file operation */
    SBX_MSG_FILE_RESULT, /* guest -> host: its answer */
    SBX_MSG_REPLAY_LOG,  /* guest -> host (and runner -> agent): a replay log's next entries */
    SBX_MSG__COUNT
} SbxMsgType;

/* TypeScript runs in the JavaScript runner, its types stripped (not checked) first. */
typedef enum {
    SBX_LANG_JAVASCRIPT,
    SBX_LANG_PYTHON,
    SBX_LANG_TYPESCRIPT,
    SBX_LANG__COUNT
} SbxLanguage;

/* The languages' protocol names, for messages ("language: ..."). */
#define SBX_LANGUAGE_NAMES "javascript, typescript or python"

typedef enum { SBX_STREAM_STDOUT, SBX_STREAM_STDERR, SBX_STREAM__COUNT } SbxStream;

typedef enum {
    SBX_STATUS_OK,
    SBX_STATUS_ERROR,
    SBX_STATUS_TIMEOUT,
    SBX_STATUS_MEMORY_LIMIT,
    SBX_STATUS_CRASH,
    SBX_STATUS_TERMINATED,
    SBX_STATUS_CANCELLED,
    SBX_STATUS__COUNT
} SbxStatus;

typedef enum {
    SBX_ERR_TIMEOUT,
    SBX_ERR_MEMORY_LIMIT,
    SBX_ERR_VALIDATION,        /* "validation_error" */
    SBX_ERR_TOOL,              /* "tool_error" */
    SBX_ERR_POLICY_DENIED,     /* "policy_denied" */
    SBX_ERR_RUNTIME,           /* "runtime_error" */
    SBX_ERR_SERIALIZATION,     /* "serialization_error" */
    SBX_ERR_INTERNAL,          /* "internal_error" */
    SBX_ERR_PROTOCOL,          /* "protocol_error" */
    SBX_ERR_REPLAY_DIVERGENCE, /* "replay_divergence": a replay read past its recorded log */
    SBX_ERR__COUNT
} SbxErrorCode;

/* An error as reported to the user: {code, type, message, stack}. */
typedef struct {
    SbxErrorCode code;
    char *type;    /* e.g. "TypeError", "ZeroDivisionError"; optional */
    char *message; /* required, <= SBX_ERROR_TEXT_MAX bytes */
    char *stack;   /* optional, <= SBX_ERROR_TEXT_MAX bytes */
} SbxError;

typedef struct {
    uint32_t version;
    char *token;        /* session token, echoed in hello_ok */
    uint8_t *entropy;   /* fresh random bytes to reseed the guest */
    size_t entropy_len; /* SBX_ENTROPY_MIN..SBX_ENTROPY_MAX */
    int64_t time_us;    /* host wall clock, microseconds since the Unix epoch */
    bool warm_up;       /* optional: answer once the runners re-ran their warm-up (a pool) */
    /* optional (0 = absent: the agent's default, 7 s): how long hello_ok may wait for the
     * pre-started runners to be warm, at most SBX_WARM_WAIT_MAX_MS (the snapshot maker's:
     * a snapshot must hold warm runners, however slow the boot) */
    uint32_t warm_wait_ms;
} SbxHello;

typedef struct {
    uint32_t version;
    char *token;      /* the hello's token */
    char *agent;      /* agent name and version, e.g. "sandbox-agent 0.1.0" */
    char **languages; /* NULL-terminated, e.g. {"javascript", "python", NULL} */
} SbxHelloOk;

/* One tool of the namespace, as the guest sees it (identifiers, already sanitised). */
typedef struct {
    char *provider;    /* identifier, e.g. "github" */
    char *name;        /* identifier, e.g. "search_issues" */
    char *description; /* optional */
} SbxToolDecl;

typedef struct {
    char *id; /* execution id chosen by the host */
    SbxLanguage language;
    char *code;        /* source text */
    char *entry;       /* optional: name of a function to call with args */
    char *args_json;   /* optional: JSON array of arguments for entry */
    char *kwargs_json; /* optional: JSON object of keyword arguments for entry (Python) */
    bool keep; /* a session's: the runner and its state stay for the next execute (its language) */
    SbxToolDecl *tools; /* namespace, n_tools entries (may be 0) */
    size_t n_tools;
    uint64_t output_limit; /* bytes of stdout+stderr the guest may send; 0 = host default */
    uint32_t timeout_ms;   /* informational: the host enforces it */
    /* Optional, for a session whose hello was long before (a pooled VM): the host's wall
     * clock (0 = absent) and fresh entropy (NULL = absent), applied before the code runs. */
    int64_t time_us;
    uint8_t *entropy;
    size_t entropy_len;
    /* Optional (NULL = absent): the seed of the runner's random generators, SBX_SEED_BYTES. */
    uint8_t *seed;
    /* Optional: a replay's recorded clock reads (docs/protocol.md, "Replay"); NULL = absent,
     * a record, not a replay. Non-NULL even when empty (n_clock_log 0): every read diverges. */
    uint64_t *clock_log;
    size_t n_clock_log; /* at most SBX_CLOCK_READS_MAX */
    /* Optional: a replay's recorded order of asynchronous deliveries (timers fired, tool
     * results delivered; runner-defined integers), NULL = absent: they come as they come. */
    uint64_t *event_log;
    size_t n_event_log; /* at most SBX_EVENT_LOG_MAX */
    /* The recorded execution was killed after its logs' last entries: a replay waits (never
     * returns) past their ends instead of diverging. */
    bool log_open;
} SbxExecute;

typedef struct {
    char *id;
} SbxStarted;

typedef struct {
    char *id;
    SbxStream stream;
    uint8_t *data; /* decoded bytes (base64 on the wire), 1..SBX_OUTPUT_CHUNK_MAX */
    size_t len;
} SbxOutput;

typedef struct {
    char *id;
    uint32_t call_id; /* > 0, unique per execution, chosen by the guest */
    char *provider;
    char *tool;
    char *input_json; /* any JSON value, compact */
    /* The replay logs' entries the runner had not sent yet, as a replay_log's (SbxReplayLog):
     * carried by the call rather than in a frame of their own before it (one frame a call
     * less). Absent (NULL) or 0..SBX_REPLAY_LOG_BATCH_MAX integers each. */
    uint64_t *clock;
    size_t n_clock;
    uint64_t *events;
    size_t n_events;
    char *not_replayable;
} SbxToolCall;

typedef struct {
    char *id;
    uint32_t call_id;
    bool ok;
    char *result_json; /* when ok: any JSON value, compact */
    SbxError error;    /* when !ok */
} SbxToolResult;

typedef struct {
    char *id;
} SbxCancel;

typedef struct {
    char *id;
    SbxStatus status;
    char *result_json; /* optional: the value of the program (JSON), when status is ok */
    bool has_error;
    SbxError error;        /* when has_error */
    int32_t exit_code;     /* the runtime's exit status; -1 when killed by a signal */
    uint64_t duration_ms;  /* as measured by the guest (the host measures its own) */
    bool output_truncated; /* the guest dropped output over output_limit */
    bool kept;             /* a keep execute's runner is still there, its state with it */
    /* What a replay needs (docs/protocol.md, "Replay"), from the runner; the host trusts none
     * of it beyond its shape. clock_log: the program's clock reads in order, NULL = absent
     * (non-NULL when present, even empty). replayable absent is not replayable (an old
     * runner, no runner's done); not_replayable: why not, or NULL. */
    uint64_t *clock_log;
    size_t n_clock_log; /* at most SBX_CLOCK_READS_MAX */
    bool has_replayable;
    bool replayable;
    char *not_replayable; /* text, cut at SBX_REASON_MAX */
} SbxDone;

/*
 * The next entries of an execution's replay logs (docs/protocol.md, "Replay"), sent before
 * each output, tool call and done, so that a run killed later keeps what it read before
 * anything it showed. Each array is absent (NULL) or 0..SBX_REPLAY_LOG_BATCH_MAX integers
 * 0..2^53-1; not_replayable: the runner's first reason, once.
 */
typedef struct {
    char *id;
    uint64_t *clock; /* clock reads, in order */
    size_t n_clock;
    uint64_t *events; /* asynchronous deliveries, in order (runner-defined integers) */
    size_t n_events;
    char *not_replayable; /* text, cut at SBX_REASON_MAX */
} SbxReplayLog;

typedef struct {
    uint32_t seq;
} SbxPing; /* also pong */

typedef struct {
    SbxErrorCode code;
    char *message;
} SbxErrorMsg;

/* Operations on the guest's workspace (docs/protocol.md, "Files"). */
typedef enum {
    SBX_FILE_WRITE,  /* one chunk of a file, in order; the last one puts the file in place */
    SBX_FILE_READ,   /* one chunk of a file from an offset */
    SBX_FILE_LIST,   /* every entry under a directory, recursively */
    SBX_FILE_DELETE, /* a file, or a directory with everything in it */
    SBX_FILE_OP__COUNT
} SbxFileOp;

typedef enum {
    SBX_FILE_TYPE_FILE,
    SBX_FILE_TYPE_DIR,
    SBX_FILE_TYPE_SYMLINK,
    SBX_FILE_TYPE_OTHER,
    SBX_FILE_TYPE__COUNT
} SbxFileType;

/*
 * A file's chunk (a write's, a read answer's) is no member of the JSON: the message says
 * "data_len" (len here) and the bytes follow in a data frame (frame.h). The decoder leaves data
 * NULL; the connection's reader attaches the data frame's payload (sbx_msg_attach_data()), and
 * sends data after the message's frame (sbx_msg_data_len()); the encoder writes data_len only.
 */
typedef struct {
    uint32_t seq; /* chosen by the host, echoed by the answer */
    SbxFileOp op;
    char *path;      /* a workspace path (sbx_workspace_path_valid()); NULL for list: the root */
    uint64_t offset; /* write, read: where the chunk starts */
    uint8_t *data;   /* write: the chunk's len bytes, from its data frame (NULL when 0) */
    size_t len;      /* write: data_len, 0..SBX_FILE_CHUNK_MAX (0: no data frame) */
    bool last;       /* write: the file is complete */
    uint32_t length; /* read: bytes asked for, 1..SBX_FILE_CHUNK_MAX */
} SbxFile;

typedef struct {
    char *path; /* workspace path */
    SbxFileType type;
    uint64_t size;
    uint64_t mtime_us; /* modification time, microseconds since the Unix epoch */
} SbxFileEntry;

typedef struct {
    uint32_t seq;
    bool ok;
    SbxError error;        /* when !ok: code, and type an errno name ("ENOENT") */
    uint64_t size;         /* write: bytes written so far; read: the file's size */
    uint8_t *data;         /* read: the chunk's len bytes, from its data frame (NULL when 0) */
    size_t len;            /* read: data_len, 0..length (0: no data frame) */
    SbxFileEntry *entries; /* list: at most SBX_FILE_LIST_MAX */
    size_t n_entries;
    bool truncated; /* list: more entries than the answer holds */
} SbxFileResult;

typedef struct {
    SbxMsgType type;
    union {
        SbxHello hello;
        SbxHelloOk hello_ok;
        SbxExecute execute;
        SbxStarted started;
        SbxOutput output;
        SbxToolCall tool_call;
        SbxToolResult tool_result;
        SbxCancel cancel;
        SbxDone done;
        SbxPing ping; /* SBX_MSG_PING and SBX_MSG_PONG */
        SbxErrorMsg error;
        SbxFile file;
        SbxFileResult file_result;
        SbxReplayLog replay_log;
    };
} SbxMsg;

/**
 * Parse one frame payload (@json, @len bytes, need not be NUL-terminated) into @out.
 * Every field is checked: types, required fields, string lengths, id syntax, enum values,
 * base64, limits from limits.h. Unknown fields are ignored (forward compatibility).
 * Returns 0, or -EBADMSG with *@ret_error set to a malloc'd human-readable reason (caller frees;
 * @ret_error may be NULL), or -ENOMEM. On error @out is zeroed and owns nothing.
 */
int sbx_msg_decode(const char *json, size_t len, SbxMsg *out, char **ret_error);

/**
 * Serialise @msg as a complete frame (header + JSON): *@ret_frame is malloc'd. A message that
 * announces data (sbx_msg_data_len()) is encoded without it: the caller sends the data frame.
 * Returns 0, -EINVAL if @msg breaks a rule (a missing required field, an invalid *_json text,
 * a limit exceeded), -EMSGSIZE if the JSON exceeds SBX_FRAME_MAX, -ENOMEM.
 */
int sbx_msg_encode(const SbxMsg *msg, uint8_t **ret_frame, size_t *ret_len);

/**
 * Bytes @msg announces in a data frame right after it: a file write's or an ok file_result's
 * len (data_len on the wire); 0 for every other message (none follows).
 */
size_t sbx_msg_data_len(const SbxMsg *msg);

/**
 * Attach @data (malloc'd, taken in every case) to the decoded @msg, which announced @len bytes
 * (sbx_msg_data_len()). Returns 0, or -EINVAL if @msg announced another length or already has
 * its data.
 */
int sbx_msg_attach_data(SbxMsg *msg, uint8_t *data, size_t len);

/** Free everything @msg owns and zero it. Accepts a zeroed message. */
void sbx_msg_clear(SbxMsg *msg);

/** Wire names: "hello", "javascript", "stdout", "ok", "tool_error", ... (static strings). */
const char *sbx_msg_type_name(SbxMsgType t);
const char *sbx_language_name(SbxLanguage l);
const char *sbx_stream_name(SbxStream s);
const char *sbx_status_name(SbxStatus s);
const char *sbx_error_code_name(SbxErrorCode c);
const char *sbx_file_op_name(SbxFileOp op);
const char *sbx_file_type_name(SbxFileType t);

/** Reverse lookups; return 0 and set *ret, or -EINVAL for an unknown name. */
int sbx_language_from_name(const char *name, SbxLanguage *ret);
int sbx_status_from_name(const char *name, SbxStatus *ret);
int sbx_error_code_from_name(const char *name, SbxErrorCode *ret);
int sbx_msg_type_from_name(const char *name, SbxMsgType *ret);
int sbx_stream_from_name(const char *name, SbxStream *ret);
int sbx_file_op_from_name(const char *name, SbxFileOp *ret);
int sbx_file_type_from_name(const char *name, SbxFileType *ret);

/** True if @id is a valid execution id: 1..SBX_ID_MAX chars of [A-Za-z0-9_.-]. */
bool sbx_id_valid(const char *id);

/** True if @s is a valid identifier: 1..SBX_NAME_MAX chars, [A-Za-z_$][A-Za-z0-9_$]*. */
bool sbx_identifier_valid(const char *s);

/**
 * True if @path is a valid workspace path: 1..SBX_PATH_MAX bytes, relative, components of
 * 1..SBX_PATH_NAME_MAX bytes separated by single slashes, none of them "." or "..", no control
 * character (below 0x20, 0x7f). UTF-8 validity is the JSON layer's check.
 */
bool sbx_workspace_path_valid(const char *path);
