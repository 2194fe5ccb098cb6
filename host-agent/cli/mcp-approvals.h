/*
 * `sandbox mcp`'s approvals asked of its MCP client (docs/mcp-server.md, "Approvals: asked of
 * the client"): a tool call that a catalog's policy holds is asked, by elicitation, on behalf of
 * the MCP call whose execution made it, and decided by the client's answer. Executions restored
 * here put their approvals in a list of the connection's (nobody else can answer them);
 * executions sent to `sandbox serve` wait in the server's, which is asked for while one runs
 * (the server tells its clients nothing as approvals come), and answered through its socket
 * like `sandbox approve` (whoever answers first wins).
 */
#pragma once

#include "mcp-server/mcp-server.h"
#include "tools.h"

/*
 * How often the server's approvals are asked for while an execution of ours runs there and the
 * client can be asked: every 500 ms. A person then sees the question within half a second of
 * the call; each time is one short request on the owner-only socket, answered from the
 * server's loop.
 */
#define SBX_MCP_APPROVALS_POLL_MS 500

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

/** @call's execution runs in `sandbox serve`: its approvals are asked of the client. */
void sbx_mcp_approvals_serve(SbxMcpApprovals *approvals, SbxMcpCall *call);

/** @call ends (before its finish): nothing more is asked for it. */
void sbx_mcp_approvals_done(SbxMcpApprovals *approvals, SbxMcpCall *call);
