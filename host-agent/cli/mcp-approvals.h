/*
 * `sandbox mcp`'s approvals asked of its MCP client (docs/mcp-server.md, "Approvals: asked of
 * the client"): a tool call that a catalog's policy holds is asked, by elicitation, on behalf of
 * the MCP call whose execution made it, and decided by the client's answer. Executions restored
 * here put their approvals in a list of the connection's (nobody else can answer them);
 * executions sent to `sandbox serve` wait in the server's, which tells each run's on its stream
 * as they start and stop waiting (a run sent with `"approvals": true`, docs/pool.md), and are
 * answered through its socket like `sandbox approve` (whoever answers first wins).
 */
#pragma once

#include "mcp-server/mcp-server.h"
#include "server/proto.h"
#include "tools.h"

typedef struct SbxMcpApprovals SbxMcpApprovals;

/** The approvals of @server's connection (@server must outlive it; free it after the server). */
SbxMcpApprovals *sbx_mcp_approvals_new(SbxMcpServer *server);

/**
 * Free @approvals (accepts NULL): after the executions (their approvals cancelled) and after
 * the server (its questions ended), with the answers to `sandbox serve` still in flight dropped.
 */
void sbx_mcp_approvals_free(SbxMcpApprovals *approvals);

/**
 * @call's execution runs here with @tools: when the client can be asked, its held calls wait
 * in the connection's list and are asked of the client; else nothing is set (they are denied
 * at once, nobody being there to ask).
 */
void sbx_mcp_approvals_local(SbxMcpApprovals *approvals, SbxMcpCall *call, SbxTools *tools);

/** Whether the client can be asked (a run sent to `sandbox serve` then asks for its approvals). */
gboolean sbx_mcp_approvals_can_ask(SbxMcpApprovals *approvals);

/**
 * The server told, on the stream of @call's run, that its approval @id waits (@pending) or
 * stopped waiting (@pending NULL): asked of the client, or the question withdrawn.
 */
void sbx_mcp_approvals_told(SbxMcpApprovals *approvals, SbxMcpCall *call,
                            const SbxServePending *pending, const char *id);

/** @call ends (before its finish): nothing more is asked for it. */
void sbx_mcp_approvals_done(SbxMcpApprovals *approvals, SbxMcpCall *call);
