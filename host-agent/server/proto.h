/*
 * The client protocol of `sandbox serve` (docs/pool.md, "Client protocol"): typed requests
 * (client -> server) and typed messages (server -> client), each with one encoder and one
 * decoder, shared by the server (unix.c, unix-run.c, unix-approvals.c) and the clients
 * (cli/serve-client.c, cli/approvals.c). Pure: no I/O, no server state (whether a profile is pooled
 * is the server's to check); cJSON stays inside.
 *
 * Ownership: every pointer in an SbxServeRequest or SbxServeMsg is owned by it and freed by its
 * clear function; optional strings are NULL when absent.
 */
#pragma once

#include <glib.h>

#include "protocol/message.h"

/* A run's wall-clock timeout, at most a day: a request is a program run, not a service. */
#define SBX_SERVE_TIMEOUT_MAX_MS 86400000

/* A run's output limit, at most 1 GiB: streamed to the client, or collected for its report. */
#define SBX_SERVE_OUTPUT_LIMIT_MAX (1024ull * 1024 * 1024)

/* An approval id: the server's counters are far shorter; longer is no id of ours. */
#define SBX_SERVE_APPROVAL_ID_MAX 64

/*
 * A session's idle timeout and maximum lifetime, in seconds: at most a day, the maxima of
 * server/sessions.h (SBX_SERVER_SESSION_IDLE_MAX_S, _LIFETIME_MAX_S; unix-sessions.c asserts
 * they are equal: this file stays pure, without the server's headers).
 */
#define SBX_SERVE_SESSION_SECONDS_MAX (24 * 60 * 60)

/*
 * One file in or out of a session's workspace: 32 MiB, server/session-files.h's
 * SBX_SESSION_FILE_MAX (unix-files.c asserts they are equal).
 */
#define SBX_SERVE_FILE_MAX (32u * 1024 * 1024)

/*
 * A file crosses the socket in pieces of at most 1 MiB, one request and one answer each: 1.4 MiB
 * of base64 is well within a frame (4 MiB), and a round trip on a Unix socket per MiB costs
 * nothing beside the guest's side.
 */
#define SBX_SERVE_FILE_CHUNK_MAX (1024u * 1024)

/*
 * Sessions in a `session_list` answer, newest first: the server keeps at most 16 open (more with
 * `serve --max-sessions`) and 256 ended; 1024 of them (each end_reason cut to
 * SBX_SERVE_SESSION_REASON_LISTED) stay far inside a frame.
 */
#define SBX_SERVE_SESSIONS_LISTED_MAX 1024

/* An ended session's end_reason in a list (whole in `session_show`): it may quote a guest error
 * of 16 KiB, and a list of them must fit one frame. */
#define SBX_SERVE_SESSION_REASON_LISTED 1024

typedef enum {
    SBX_SERVE_REQ_RUN,
    SBX_SERVE_REQ_STATUS,
    SBX_SERVE_REQ_APPROVALS,
    SBX_SERVE_REQ_APPROVE,
    SBX_SERVE_REQ_DENY,
    SBX_SERVE_REQ_SESSION_NEW,  /* open a session (its VM claimed); answered once it is ready */
    SBX_SERVE_REQ_SESSION_LIST, /* the local clients' sessions, open and recently ended */
    SBX_SERVE_REQ_SESSION_SHOW, /* one of them, by id */
    SBX_SERVE_REQ_SESSION_END,  /* end one (its VM killed) */
    SBX_SERVE_REQ_FILE_PUT,     /* a piece of a file into a session's workspace */
    SBX_SERVE_REQ_FILE_GET,     /* a piece of a file of a session's workspace */
    SBX_SERVE_REQ_FILE_LIST,    /* the entries under a directory of a session's workspace */
    SBX_SERVE_REQ_FILE_DELETE,  /* a file or directory of a session's workspace */
    SBX_SERVE_REQ_UNKNOWN,      /* a `type` the server does not know (bad is set) */
} SbxServeRequestType;

/* A `run` request's fields, checked. */
typedef struct {
    SbxLanguage language;
    char *code; /* non-empty UTF-8 */
    /* The function to call, and its arguments as sent (minified): sbx_exec_call_check(). */
    char *entry;          /* or NULL */
    char *args_json;      /* a JSON array, or NULL */
    char *kwargs_json;    /* a JSON object (Python), or NULL */
    char *tools_path;     /* absolute, or NULL */
    guint timeout_ms;     /* 1..SBX_SERVE_TIMEOUT_MAX_MS (default SBX_SESSION_TIMEOUT_DEFAULT_MS) */
    guint64 output_limit; /* 1..SBX_SERVE_OUTPUT_LIMIT_MAX (default: the session's) */
    gboolean collect;     /* true: output into the report (`--json`), not streamed */
    gboolean live;        /* with collect: streamed as it comes too (`sandbox mcp`'s progress) */
    /* The run's approvals told on its stream as they start and stop waiting (`approval`,
     * `approval_over`: `sandbox mcp` asks its client), besides the server's list. */
    gboolean approvals;
    char *profile; /* the profile's name, or NULL: the server's default */
    /* `profile` was neither null nor a string: no server pools it (`unavailable`, not bad). */
    gboolean profile_not_name;
    /* The session to run in (sbx_id_valid()), its VM borrowed and its state kept; NULL: a VM of
     * its own. A run in a session names no profile (the session's is used). */
    char *session;
} SbxServeRun;

/* A `session_new` request's fields, checked. */
typedef struct {
    char *profile;             /* the profile's name, or NULL: the server's default */
    gboolean profile_not_name; /* as a run's */
    guint idle_timeout_s;      /* 1..SBX_SERVE_SESSION_SECONDS_MAX, or 0: the server's default */
    guint max_lifetime_s;      /* 1..SBX_SERVE_SESSION_SECONDS_MAX, or 0: the server's default */
} SbxServeSessionNew;

/*
 * A file request's fields, checked (docs/pool.md, "Sessions over the socket"). A put is a series
 * of pieces on one connection: offset 0 starts the file, each next piece's offset is the bytes
 * sent so far, the one with `last` puts it in place. A get's offset 0 fetches the file from the
 * guest and answers its first piece; a greater offset answers a further piece of that copy.
 */
typedef struct {
    char *session;  /* sbx_id_valid() */
    char *path;     /* a workspace path (sbx_workspace_path_valid()); NULL only for a list: the
                       workspace itself */
    guint64 offset; /* put, get: 0..SBX_SERVE_FILE_MAX */
    guint8 *data;   /* put: this piece, 0..SBX_SERVE_FILE_CHUNK_MAX bytes (NULL when empty) */
    gsize len;
    gboolean last; /* put: the file is whole (absent: true, a file in one request) */
} SbxServeFileReq;

typedef struct {
    SbxServeRequestType type;
    /* Static text: why the message's fields are wrong (answered `bad_request`), or NULL. */
    const char *bad;
    SbxServeRun run;                /* type RUN, when bad is NULL */
    SbxServeSessionNew session_new; /* type SESSION_NEW, when bad is NULL */
    SbxServeFileReq file;           /* types FILE_*, when bad is NULL */
    /*
     * When bad is NULL, at most SBX_SERVE_APPROVAL_ID_MAX bytes: types APPROVE and DENY (always)
     * and APPROVALS (optional: list that approval alone, its input whole; NULL: all of them);
     * a session's id (sbx_id_valid()) for SESSION_SHOW and SESSION_END.
     */
    char *id;
} SbxServeRequest;

/**
 * Decode the client's frame @payload (@len bytes) into *@ret (cleared first). FALSE if it is no
 * message at all (not a JSON object with a string `type`: the client broke the protocol, and
 * its connection is closed); TRUE otherwise, with @ret->bad set when a field is wrong or the
 * type unknown. Free with sbx_serve_proto_request_clear() in either case.
 */
gboolean sbx_serve_proto_request_decode(const char *payload, gsize len, SbxServeRequest *ret);

/**
 * The JSON text of request @req (a frame's payload; caller frees): a `run` with @req->run's
 * fields (a NULL tools path or profile is sent as null; a NULL entry, args, kwargs or session
 * not at all; args and kwargs, JSON texts of ours, inserted as they are), `approvals` with
 * @req->id if set, `approve` and `deny` with @req->id, `status`; `session_new` with
 * @req->session_new's (0 seconds: null), `session_list`, `session_show` and `session_end` with
 * @req->id, the file requests with @req->file's fields that their type takes. The decoder gives
 * back what was encoded.
 */
char *sbx_serve_proto_request_encode(const SbxServeRequest *req);

/** Free what @req holds and zero it. */
void sbx_serve_proto_request_clear(SbxServeRequest *req);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(SbxServeRequest, sbx_serve_proto_request_clear)

typedef enum {
    SBX_SERVE_MSG_STATUS,
    SBX_SERVE_MSG_OUTPUT,
    SBX_SERVE_MSG_DONE,
    SBX_SERVE_MSG_ERROR,
    SBX_SERVE_MSG_APPROVALS,
    SBX_SERVE_MSG_APPROVED,
    SBX_SERVE_MSG_DENIED,
    SBX_SERVE_MSG_SESSION,       /* one session (the answer to session_new, _show, _end) */
    SBX_SERVE_MSG_SESSIONS,      /* the answer to session_list */
    SBX_SERVE_MSG_FILE_PART,     /* a put's piece was taken (not the last) */
    SBX_SERVE_MSG_FILE,          /* a put's end, or a get's piece */
    SBX_SERVE_MSG_FILES,         /* the answer to file_list */
    SBX_SERVE_MSG_FILE_DELETED,  /* the answer to file_delete */
    SBX_SERVE_MSG_APPROVAL,      /* on a run's stream: one of its approvals waits (pending[0]) */
    SBX_SERVE_MSG_APPROVAL_OVER, /* on a run's stream: that approval stopped waiting (id) */
    SBX_SERVE_MSG_OTHER,         /* a type this client does not know (type_name says which) */
} SbxServeMsgType;

/* One entry of an `approvals` answer's `pending` (fields NULL or 0 when missing). */
typedef struct {
    char *id;
    char *provider;
    char *tool;
    char *input_json;    /* the call's input, its JSON text as the server sent it */
    char *input_excerpt; /* instead of input_json: the start of a long input's text */
    char *origin;        /* which client's run made the call */
    gint64 waiting_ms;
    gint64 timeout_ms;
} SbxServePending;

/* One profile's pool in a `status` answer (docs/pool.md, "Client protocol"). */
typedef struct {
    char *name;
    guint pool_size; /* VMs kept ready (--pool) */
    guint ready;     /* ready now */
    guint starting;  /* being restored */
    guint waiting;   /* claims waiting for a VM */
    guint running;   /* executions of this profile */
    guint prestart;  /* QEMUs kept started (--prestart) */
    guint64 started_total, failed_total, dropped_total, claimed_total;
    GArray *ready_pids;      /* GPid: QEMUs of the ready VMs */
    GArray *running_pids;    /* GPid: QEMUs running an execution */
    GArray *prestarted_pids; /* GPid: pre-started QEMUs waiting */
    GArray *session_pids;    /* GPid: QEMUs of open sessions, every tenant's (idle or running) */
    guint sessions;          /* sessions open */
} SbxServeProfileStatus;

/* A session as the socket shows it (docs/pool.md; fields NULL or 0 when missing). */
typedef struct {
    char *id;
    char *status;                      /* "starting", "ready", "busy", "ended" */
    char *profile;                     /* its profile's name */
    gint64 created_ms, last_active_ms; /* unix ms */
    gint64 expires_ms;                 /* when it ends unless used; 0 once ended */
    gint64 ended_ms;                   /* 0 while open */
    guint idle_timeout_s, max_lifetime_s;
    guint executions;        /* executions run in it */
    guint64 memory_mib;      /* its VM's */
    char *current_execution; /* the id of the execution running in it, or NULL */
    char *end_status;        /* once ended: "deleted", "expired", "crashed", "interrupted" */
    char *end_reason;
    GPid qemu_pid; /* its VM's QEMU, 0 if none (ended, starting) */
} SbxServeSession;

/* An entry of a `files` answer (a workspace path, as the guest listed it). */
typedef struct {
    char *path;
    SbxFileType type;
    guint64 size;
    guint64 mtime_us;
} SbxServeFileEntry;

typedef struct {
    SbxServeMsgType type;
    char *type_name; /* `type` as sent */
    char *message;   /* `message` if a string: an error's (kept for any type the client shows) */
    char *code;      /* error: `code` if a string */
    /* status: the default profile (NULL if `profile` is no string) and the keys of `profiles`
     * whose values are objects (NULL-terminated, empty when none) */
    char *profile;
    char **profiles;
    /* status: every pooled profile's pool, the default first (encoded: at the top level too) */
    SbxServeProfileStatus *status;
    gsize n_status;
    /* output: the bytes of `data`, or NULL when `stream` or `data` is no string or `data` is no
     * canonical base64 (such a frame is ignored); `stream` stderr if "stderr", else stdout */
    SbxStream stream;
    guint8 *data;
    gsize data_len;
    /* done */
    int exit_code;     /* 0..255, or -1 when missing, not an integer or out of range */
    char *summary;     /* what a streamed run prints on stderr at the end, or NULL */
    char *report_json; /* `report` if an object: its text as the server sent it (minified) */
    /* approvals: `pending` if an array: its text as sent (minified), and its entries;
     * approval: the `approval` object as the one entry (n_pending 1; 0 if it is no object) */
    char *pending_json;
    SbxServePending *pending;
    gsize n_pending;
    /* approved, denied, approval_over */
    char *id;
    /* session: one (n_sessions 1, or 0 if `session` is no object); sessions: every one that is
     * an object */
    SbxServeSession *sessions;
    gsize n_sessions;
    char *sessions_json; /* the `session` object or `sessions` array as sent (minified), or NULL */
    /* file_part, file, files, file_deleted: the workspace path (files: the directory, NULL for
     * the workspace); file_part: `size` the bytes taken so far; file: `size` the file's, its
     * `sha256` (64 hex digits, else NULL), and for a get's piece `offset` and the bytes in
     * data/data_len (NULL when absent or no canonical base64) */
    char *path;
    guint64 size;
    guint64 offset;
    char *sha256;
    /* files: the entries that are objects with a string path, and whether the guest had more */
    SbxServeFileEntry *entries;
    gsize n_entries;
    char *entries_json; /* `entries` if an array: its text as sent (minified) */
    gboolean truncated;
} SbxServeMsg;

/**
 * Decode the server's frame @payload (@len bytes) into *@ret (cleared first). FALSE if it is no
 * message (not a JSON object with a string `type`: the stream is broken); TRUE otherwise, with
 * the fields of its type that are present and well-formed. Free with sbx_serve_proto_msg_clear() in
 * either case.
 */
gboolean sbx_serve_proto_msg_decode(const char *payload, gsize len, SbxServeMsg *ret);

/**
 * The JSON text of message @msg (a frame's payload; caller frees), with the fields of its type:
 * status (from @msg->status), output (@msg->data base64-encoded), done (@msg->report_json, a
 * JSON object text of ours, inserted as is), error, approvals (from @msg->pending: an entry's
 * input_json, checked compact JSON, is inserted as is), approved, denied, approval (the first
 * entry of @msg->pending, as an approvals' entry), approval_over; session (the first of
 * @msg->sessions), sessions, file_part, file (@msg->data as a get's piece when not NULL), files,
 * file_deleted. Not for type OTHER.
 */
char *sbx_serve_proto_msg_encode(const SbxServeMsg *msg);

/** Free what @msg holds and zero it. */
void sbx_serve_proto_msg_clear(SbxServeMsg *msg);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(SbxServeMsg, sbx_serve_proto_msg_clear)
