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

/** Send a tool call for the current execution. */
int fake_guest_tool_call(FakeGuest *g, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json);

/** Record a failure (first one wins). */
void fake_guest_fail(FakeGuest *g, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
