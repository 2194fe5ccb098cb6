/*
 * A fake guest agent for the session tests: the peer end of a socketpair, played from a thread
 * with blocking I/O and the protocol library, while the test's main thread runs the session on
 * the GLib main loop. The guest thread never asserts (cmocka is not thread-safe): it records
 * what it saw in FakeGuest and the main thread checks after joining it.
 */
#pragma once

#include <glib.h>
#include <stdbool.h>

#include "protocol/frame.h"
#include "protocol/message.h"

typedef struct FakeGuest FakeGuest;
typedef void (*FakeGuestScript)(FakeGuest *g);

struct FakeGuest {
    int fd;
    SbxFrameReader reader;
    guint8 buf[64 * 1024];
    size_t buf_len, buf_off;
    GThread *thread;
    FakeGuestScript script;
    gpointer data; /* for the script */
    /* what the guest saw, for the main thread to check */
    SbxMsg hello;
    SbxMsg execute;
    GPtrArray *received; /* SbxMsg* received after execute, in order */
    char *failure;       /* first problem the script met, or NULL */
};

/** Start @script in a thread on a fresh socketpair; *@ret_host_fd gets the host end. */
FakeGuest *fake_guest_start(FakeGuestScript script, gpointer data, int *ret_host_fd);

/** Wait for the script to end (idempotent). */
void fake_guest_join(FakeGuest *g);

/** Wait for the script to end, then free. The host end should be closed first. */
void fake_guest_join_free(FakeGuest *g);

/** Receive one message (blocking). 0, or -1 on EOF/error (failure recorded unless EOF). */
int fake_guest_recv(FakeGuest *g, SbxMsg *msg);

/** Receive one message and keep it in g->received: the message, or NULL on EOF/error. */
SbxMsg *fake_guest_recv_keep(FakeGuest *g);

/** Encode and send @msg. 0 or -1. */
int fake_guest_send(FakeGuest *g, const SbxMsg *msg);

/** Send raw bytes. 0 or -1. */
int fake_guest_send_raw(FakeGuest *g, const void *data, size_t len);

/** Send a raw JSON payload in a frame. 0 or -1. */
int fake_guest_send_json(FakeGuest *g, const char *json);

/**
 * The usual opening: receive hello, answer hello_ok (echoing the token unless @token is given),
 * receive execute. 0, or -1 (failure recorded).
 */
int fake_guest_handshake(FakeGuest *g, const char *token);

/** Send started, output or done for the current execution. */
int fake_guest_started(FakeGuest *g);
int fake_guest_output(FakeGuest *g, SbxStream stream, const char *text);
int fake_guest_done(FakeGuest *g, SbxStatus status, const char *result_json, int exit_code);

/**
 * Send an ok done for the current execution with the replay members @replay_members (JSON
 * members without braces: "\"clock_log\":[1],\"replayable\":true").
 */
int fake_guest_done_replay(FakeGuest *g, const char *replay_members);

/** Send a tool call for the current execution. */
int fake_guest_tool_call(FakeGuest *g, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json);

/** Record a failure (first one wins). */
void fake_guest_fail(FakeGuest *g, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/** Receive hello and answer hello_ok with its token. 0, or -1 (failure recorded). */
int fake_guest_hello(FakeGuest *g);

/*
 * A workspace in memory that the fake guest serves `file` requests from (docs/protocol.md,
 * "Files"), with knobs for hostile answers. Directories are implied by the files' paths. The
 * guest thread and the test's thread share it under its lock.
 */
typedef struct {
    GMutex lock;
    GHashTable *files;  /* workspace path -> GByteArray*: the regular files */
    GHashTable *writes; /* workspace path -> GByteArray*: writes in progress (temporary files) */
    /* knobs: set before the guest starts; requests are counted from 1 */
    guint wrong_seq_at;    /* the answer to this request has another seq */
    guint silent_from;     /* this request and all after it get no answer */
    guint hangup_at;       /* the guest closes the channel at this request */
    guint duplicate_at;    /* this request is answered twice */
    gsize read_extra;      /* read answers carry this many bytes more than they should */
    gint64 write_size_lie; /* added to the size of write answers */
    gint64 read_size_lie;  /* added to the size of read answers */
    gsize grow_per_read;   /* a file grows by this many bytes after each read of it */
    guint gather;          /* read this many requests before answering the first one ... */
    guint gather_at;       /* ... from this request on (0: the first) */
    const char *fail_type; /* fake_files_fail() */
    char *fail_message;    /* fake_files_fail() */
    guint fail_countdown;  /* fake_files_fail() */
    /* what the guest saw */
    guint requests;                /* file requests */
    guint ops[SBX_FILE_OP__COUNT]; /* file requests per operation */
    gsize write_max;               /* the largest chunk written */
    guint gathered;                /* gather: requests read before the first answer */
    gboolean more_while_gathering; /* gather: the host sent more before that answer */
} FakeFiles;

FakeFiles *fake_files_new(void);
void fake_files_free(FakeFiles *f);

/** Put a file of @len bytes at @path (a workspace path). */
void fake_files_set(FakeFiles *f, const char *path, const void *data, gsize len);

/** A copy of the file at @path, or NULL. */
GBytes *fake_files_get(FakeFiles *f, const char *path);

/** File requests of @op received so far. */
guint fake_files_count(FakeFiles *f, SbxFileOp op);

/**
 * The file request after the next @after ones is answered with ok false, errno name @type
 * (a static string) and @message (NULL: "fake failure"); once.
 */
void fake_files_fail(FakeFiles *f, guint after, const char *type, const char *message);

/** Answer one file request from @f (as the knobs say): 0, or -1 to stop serving. */
int fake_files_serve_one(FakeGuest *g, FakeFiles *f, const SbxFile *m);

/** Answer file requests from @f (and pings) until the host closes the channel. */
void fake_guest_serve_files(FakeGuest *g, FakeFiles *f);

/** A script: hello, then fake_guest_serve_files() with g->data (a FakeFiles). */
void fake_guest_script_files(FakeGuest *g);
