/*
 * Inside the Unix socket front end (unix.h): unix.c owns the socket, the connections and their
 * frames; unix-run.c runs one `run` request as a server job and forwards its events;
 * unix-approvals.c answers the approval requests; unix-sessions.c the session requests (open,
 * list, show, end) and unix-files.c the file requests of a session's workspace.
 */
#pragma once

#include <gio/gio.h>

#include "approvals.h"
#include "protocol/limits.h"
#include "protocol/message.h"
#include "server/proto.h"
#include "server/server.h"
#include "server/unix.h"

/*
 * Client connections at once. The socket is owner-only, so clients are the user's own
 * programs; each connection costs an fd, a frame buffer and a write queue. 16 is plenty for
 * one user's concurrent `sandbox run`s and bounds what a runaway script can hold.
 */
#define SBX_UNIX_CONNECTIONS_MAX 16

/*
 * Bytes queued for a client that does not read. Output is forwarded as it comes (up to the
 * request's output limit, which may be 1 GiB); a client more than 16 MiB behind is dropped
 * and its execution ended, so a stuck client cannot grow our memory.
 */
#define SBX_UNIX_WRITE_QUEUE_MAX (16u * 1024 * 1024)

/* Output is forwarded in pieces of at most this many bytes (base64 keeps it under a frame). */
#define SBX_UNIX_OUTPUT_CHUNK (256u * 1024)

/* Listen backlog: connections beyond SBX_UNIX_CONNECTIONS_MAX are refused anyway. */
#define SBX_UNIX_BACKLOG 16

/*
 * Bytes of files in transit held by the connections together: a put's pieces until its last,
 * a got file until its last piece is asked for. Each file is at most 32 MiB
 * (SBX_SERVE_FILE_MAX); two at once cover a script moving files in and out, and 16 connections
 * could otherwise hold 512 MiB. Beyond, a put or get is refused (`unavailable`: try again).
 */
#define SBX_UNIX_TRANSFERS_HELD_MAX (2ull * SBX_SERVE_FILE_MAX)

/*
 * Approvals told waiting on one run's stream at once (`"approvals": true`). A run waits for at
 * most as many approvals as it has tool calls in flight (SBX_TOOL_CALLS_IN_FLIGHT_MAX, 64), so
 * this only backstops what a run's teller keeps (an id each) and sends (an approval's entry,
 * at most ~8 KiB with its input cut as in the list): 64 of them are ~0.5 MiB, far within the
 * write queue. Beyond, an approval is not told; it is still in the list (`sandbox approve`).
 */
#define SBX_UNIX_RUN_APPROVALS_TOLD_MAX SBX_TOOL_CALLS_IN_FLIGHT_MAX

typedef struct UnixConn UnixConn;
typedef struct UnixApprovalTeller UnixApprovalTeller;
typedef struct UnixRun UnixRun;
typedef struct UnixTransfer UnixTransfer;

/*
 * A request answered later (a session's start, a file operation): its connection's request in
 * flight until the answer is queued. A connection that closes first sets conn to NULL and
 * leaves the request to end on its own (its callback frees it).
 */
typedef struct {
    UnixConn *conn; /* NULL once the client is gone */
} UnixOp;

/* unix.c, for unix-run.c and unix-approvals.c */
/** The server behind @conn. */
SbxServer *sbx_unix_conn_server(UnixConn *conn);
/** The PID of @conn's client (SO_PEERCRED), 0 if unknown. */
GPid sbx_unix_conn_peer_pid(UnixConn *conn);
/** Who is on the other end of @conn ("sandbox run, pid N"), for the approvals list. */
char *sbx_unix_conn_origin(UnixConn *conn);
/** Queue a frame with @json (a JSON object text) for @conn; FALSE if the client is too slow. */
gboolean sbx_unix_conn_send(UnixConn *conn, const char *json, gsize len);
/** Queue the frame of message @msg for @conn (as sbx_unix_conn_send()). */
void sbx_unix_conn_send_msg(UnixConn *conn, const SbxServeMsg *msg);
/** Queue an error message. */
void sbx_unix_conn_send_error(UnixConn *conn, const char *code, const char *message);
/** The run on @conn is over (its done frame is queued): @conn may take the next request. */
void sbx_unix_conn_run_over(UnixConn *conn);
/** Whether @conn has a request in flight (a run, or an answer to come): one at a time. */
gboolean sbx_unix_conn_busy(UnixConn *conn);
/** @op is @conn's request in flight from now (@conn not busy). */
void sbx_unix_conn_op_begin(UnixConn *conn, UnixOp *op);
/** @op's answer is queued, or its client gone: its connection may take the next request. */
void sbx_unix_conn_op_end(UnixOp *op);
/** @conn's file in transit (unix-files.c; freed with the connection), NULL if none. */
UnixTransfer **sbx_unix_conn_transfer(UnixConn *conn);
/** The bytes the connections' transfers hold together (SBX_UNIX_TRANSFERS_HELD_MAX). */
guint64 *sbx_unix_conn_transfers_held(UnixConn *conn);

/* unix-run.c */
/**
 * Start the checked `run` request @req on @conn as a server job; a refusal is answered with an
 * error frame and NULL is returned.
 */
UnixRun *sbx_unix_run_start(UnixConn *conn, const SbxServeRun *req);
/** The client is gone or too slow: end the run without it (its job ends on its own). */
void sbx_unix_run_abandon(UnixRun *run, const char *why);
/** QEMU PID of the run's VM, 0 if none. */
GPid sbx_unix_run_pid(UnixRun *run);

/* unix-sessions.c */
/**
 * Answer the session request @req (`session_new`, once its VM is ready; `session_list`,
 * `session_show`, `session_end` at once). FALSE if it is of another type.
 */
gboolean sbx_unix_session_message(UnixConn *conn, const SbxServeRequest *req);
/** The local clients' session @id, or NULL after answering `not_found`. Not a reference. */
SbxServerSession *sbx_unix_session_find(UnixConn *conn, const char *id);
/** Answer an error of sessions.h or session-files.h (its code by the error's: docs/pool.md). */
void sbx_unix_conn_send_session_error(UnixConn *conn, const GError *error);

/* unix-files.c */
/** Answer the file request @req (`file_put`, `_get`, `_list`, `_delete`). FALSE if of another
 * type. */
gboolean sbx_unix_file_message(UnixConn *conn, const SbxServeRequest *req);
/** Free a connection's file in transit (NULL is fine). */
void sbx_unix_transfer_free(UnixTransfer *t);

/** The approvals changed: the run on @conn, if any, tells its own (unix-run.c). */
void sbx_unix_run_approvals_changed(UnixRun *run, SbxApprovals *approvals);

/* unix-approvals.c */
/** A teller of the approvals owned by @owner (a run's SbxTools) to @conn, none told yet. */
UnixApprovalTeller *sbx_unix_approval_teller_new(UnixConn *conn, gconstpointer owner);
/** Free @teller (accepts NULL); nothing more is told. */
void sbx_unix_approval_teller_free(UnixApprovalTeller *teller);
/**
 * Tell @teller's connection what changed among its approvals in @approvals: an `approval_over`
 * for each told one that no longer waits, an `approval` for each that waits and was not told
 * (at most SBX_UNIX_RUN_APPROVALS_TOLD_MAX told waiting at once).
 */
void sbx_unix_approval_tell(UnixApprovalTeller *teller, SbxApprovals *approvals);

/**
 * Answer the client request @req if it is about approvals (`approvals`, `approve`, `deny`:
 * docs/pool.md). FALSE if it is of another type.
 */
gboolean sbx_unix_approval_message(UnixConn *conn, SbxApprovals *approvals,
                                   const SbxServeRequest *req);
