/*
 * `sandbox serve` internals (docs/pool.md): serve.c owns the socket, the connections and the
 * pool; serve-run.c runs one request on a claimed VM; serve-path.c is shared with the client
 * in `sandbox run` (serve-client.c).
 */
#pragma once

#include <gio/gio.h>

#include "approvals.h"
#include "cli/cli.h"
#include "cli/serve-proto.h"
#include "pool-vm.h"
#include "protocol/message.h"

/*
 * Executions at once. Each holds a VM (~117 MB of RAM copy plus QEMU) and under TCG keeps a
 * core busy while its program runs: on this 2-core machine 4 keeps both cores fed (a VM waits
 * on its guest, tools or I/O part of the time) without the refills starving. Requests beyond
 * wait in order.
 */
#define SBX_SERVE_RUNNING_MAX 4

/*
 * Client connections at once. The socket is owner-only, so clients are the user's own
 * programs; each connection costs an fd, a frame buffer and a write queue. 16 is plenty for
 * one user's concurrent `sandbox run`s and bounds what a runaway script can hold.
 */
#define SBX_SERVE_CONNECTIONS_MAX 16

/*
 * Bytes queued for a client that does not read. Output is forwarded as it comes (up to the
 * request's output limit, which may be 1 GiB); a client more than 16 MiB behind is dropped
 * and its execution ended, so a stuck client cannot grow our memory.
 */
#define SBX_SERVE_WRITE_QUEUE_MAX (16u * 1024 * 1024)

/* Output is forwarded in pieces of at most this many bytes (base64 keeps it under a frame). */
#define SBX_SERVE_OUTPUT_CHUNK (256u * 1024)

/* Listen backlog: connections beyond SBX_SERVE_CONNECTIONS_MAX are refused anyway. */
#define SBX_SERVE_BACKLOG 16

typedef struct Serve Serve;
typedef struct ServeConn ServeConn;
typedef struct ServeRun ServeRun;

/** A `run` request, parsed and checked (serve-run.c owns it once started). */
typedef struct {
    SbxLanguage language;
    char *code;
    char *tools_path; /* absolute, or NULL */
    guint timeout_ms;
    guint64 output_limit;
    gboolean collect;
    guint profile; /* index of the pooled profile (0: the default) */
} ServeRunRequest;

/* serve.c, for serve-run.c */
/** The pool of the server's @profile-th profile (ServeRunRequest.profile). */
SbxPool *sbx_serve_pool(Serve *srv, guint profile);
/** The approvals pending in every run of the server (docs/tools.md, "Approvals"). */
SbxApprovals *sbx_serve_approvals(Serve *srv);
/** Who is on the other end of @conn ("sandbox run, pid N"), for the approvals list. */
char *sbx_serve_conn_origin(ServeConn *conn);
/** Queue a frame with @json (a JSON object text) for @conn; FALSE if the client is too slow. */
gboolean sbx_serve_conn_send(ServeConn *conn, const char *json, gsize len);
/** Queue the frame of message @msg for @conn (as sbx_serve_conn_send()). */
void sbx_serve_conn_send_msg(ServeConn *conn, const SbxServeMsg *msg);
/** The run on @conn finished (its done frame is queued); @conn may take the next request. */
void sbx_serve_run_finished(Serve *srv, ServeConn *conn, ServeRun *run);

/* serve-run.c */
ServeRun *sbx_serve_run_new(Serve *srv, ServeConn *conn, ServeRunRequest *req);
/** Claim a VM and start; failures are reported to the client as a done frame. */
void sbx_serve_run_start(ServeRun *run);
/** Stop the execution now (client gone, shutdown); @conn is not written to any more if NULL'd. */
void sbx_serve_run_abort(ServeRun *run, const char *why, gboolean client_gone);
/** The run's profile (an index, as ServeRunRequest.profile). */
guint sbx_serve_run_profile(ServeRun *run);
/** QEMU PID of the run's VM, 0 if none. */
GPid sbx_serve_run_pid(ServeRun *run);
void sbx_serve_run_free(ServeRun *run);
void sbx_serve_request_clear(ServeRunRequest *req);

/* serve-approvals.c */
/**
 * Answer the client request @req if it is about approvals (`approvals`, `approve`, `deny`:
 * docs/pool.md). FALSE if it is of another type.
 */
gboolean sbx_serve_approval_message(ServeConn *conn, SbxApprovals *approvals,
                                    const SbxServeRequest *req);

/* serve-path.c, shared with the client */
/**
 * The socket path: @opt, else $SANDBOX_SERVE_SOCKET, else sandbox.sock in
 * sbx_paths_runtime_dir() ($RUNTIME_DIRECTORY of an installed service,
 * $XDG_RUNTIME_DIR/sandbox, else /tmp/sandbox-$UID).
 */
char *sbx_serve_socket_path(const char *opt);
/** The socket's directory is ours alone: a real directory, owned by us, mode 0700. */
gboolean sbx_serve_check_dir(const char *dir, GError **error);
