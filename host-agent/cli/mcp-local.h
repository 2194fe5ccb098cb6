/*
 * `sandbox mcp`'s own sessions (docs/mcp-server.md, "Sessions"): when no `sandbox serve` answers
 * (or with --no-serve), a session is a VM restored here and held by a lease (exec/lease.h), as
 * server/sessions.c holds a server's: an execution borrows it (sbx_mcp_local_lend()) and asks
 * the guest to keep its state, files move between executions on its channel (session/files.h),
 * one thing at a time. A session ends with its close, after its idle timeout or maximum
 * lifetime (the server's clock and defaults: server/session-clock.h; its VM killed), when its
 * state is lost (an execution that did not keep it, the VM's death, a broken channel) and with
 * the connection (sbx_mcp_local_free()). An ended session's requests get `ended` and why, as a
 * server's do. Every outcome goes to the caller as an SbxMcpSessionOutcome.
 */
#pragma once

#include "exec/exec.h"
#include "mcp-server/sessions.h"

typedef struct SbxMcpLocal SbxMcpLocal;
typedef struct SbxMcpLocalOp SbxMcpLocalOp;

/* An operation's end: @outcome valid during the call. From the loop, or from the call that
 * started it when it cannot start (that call returns NULL then). */
typedef void (*SbxMcpLocalDone)(gpointer data, const SbxMcpSessionOutcome *outcome);

/** The local sessions of one `sandbox mcp`. */
SbxMcpLocal *sbx_mcp_local_new(void);

/** End every session (their VMs killed) and free (accepts NULL). No operation may be left. */
void sbx_mcp_local_free(SbxMcpLocal *local);

/** Whether @handle is a local session's (open or ended); FALSE for a NULL @local. */
gboolean sbx_mcp_local_has(SbxMcpLocal *local, const char *handle);

/**
 * Open a session on the VM @src (taken) will acquire, with @idle_timeout_s and @max_lifetime_s
 * (0: the server's defaults); @done gets its handle and those limits once it is ready, or the
 * error.
 */
SbxMcpLocalOp *sbx_mcp_local_open(SbxMcpLocal *local, SbxExecSource *src, guint idle_timeout_s,
                                  guint max_lifetime_s, SbxMcpLocalDone done, gpointer data);

/** End session @handle now (its VM killed; an operation on it ends with an error) and forget it. */
void sbx_mcp_local_close(SbxMcpLocal *local, const char *handle);

/** Put @len bytes of @bytes at workspace path @path of session @handle. */
SbxMcpLocalOp *sbx_mcp_local_write(SbxMcpLocal *local, const char *handle, const char *path,
                                   const guint8 *bytes, gsize len, SbxMcpLocalDone done,
                                   gpointer data);

/** Get the file at @path of session @handle (at most SBX_MCP_FILE_MAX bytes). */
SbxMcpLocalOp *sbx_mcp_local_read(SbxMcpLocal *local, const char *handle, const char *path,
                                  SbxMcpLocalDone done, gpointer data);

/** Abandon @op (accepts NULL): its done never runs; an open's session is ended. */
void sbx_mcp_local_op_cancel(SbxMcpLocalOp *op);

/**
 * A source lending session @handle's VM to one execution (its request must keep the state), or
 * NULL with why not in *@ret_why (caller frees): busy, ended.
 */
SbxExecSource *sbx_mcp_local_lend(SbxMcpLocal *local, const char *handle, char **ret_why);

/** The execution lent session @handle's VM ended (@exec NULL: it never ran, the source was
 * freed): whether the guest kept its state decides whether the session goes on. */
void sbx_mcp_local_exec_done(SbxMcpLocal *local, const char *handle, SbxExec *exec);
