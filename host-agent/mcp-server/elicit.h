/*
 * Approvals through the client (docs/mcp-server.md, "Approvals"): the `elicitation/create`
 * request that asks the person at an MCP client whether a host tool call the catalog's policy
 * holds may run, and the reading of the client's answer. Pure: the text of a request's params
 * and the outcome of a response's text; the core (mcp-server.c) sends one and keeps it in flight.
 */
#pragma once

#include <glib.h>

/*
 * Elicitations in flight to one client: 16. Each is a dialog a person answers on the client's
 * side, for a tool call a program made; a connection's executions may hold many more approvals
 * (8 calls of 64 tool calls each), more than anyone answers one by one. Beyond, an approval is
 * not asked of the client: it waits for the API or `sandbox approve`, or times out.
 */
#define SBX_MCP_ELICITS_MAX 16

/*
 * The tool call's input shown in the message: 1 KiB of its JSON, cut at a character with the
 * size said. A person reads it in a dialog; the whole input is in `sandbox approvals` and the
 * API's list.
 */
#define SBX_MCP_ELICIT_INPUT_MAX 1024

typedef enum {
    SBX_MCP_ELICIT_APPROVED,  /* accept with approve: true */
    SBX_MCP_ELICIT_DENIED,    /* accept with approve other than true, decline, cancel, an error,
                                 an answer we cannot read */
    SBX_MCP_ELICIT_TIMED_OUT, /* no answer within the approval's timeout */
    SBX_MCP_ELICIT_CANCELLED, /* withdrawn: answered elsewhere, its call ended, the server freed */
} SbxMcpElicitOutcome;

/* A tool call held for approval, as asked of the client. */
typedef struct {
    const char *provider; /* real names */
    const char *tool;
    const char *input_json; /* compact JSON, any size (cut for the message) */
    guint timeout_ms;       /* the approval's: the client's answer is awaited that long */
} SbxMcpApprovalAsk;

/** The params of `elicitation/create` for @ask: a message and a schema of one boolean. */
char *sbx_mcp_elicit_params(const SbxMcpApprovalAsk *ask);

/**
 * The outcome of the client's response @text (@len bytes: the whole JSON-RPC response, result
 * or error): APPROVED only for `{"action": "accept", "content": {"approve": true}}`; anything
 * else, a malformed answer included, is DENIED.
 */
SbxMcpElicitOutcome sbx_mcp_elicit_outcome(const char *text, gsize len);

/** "approved", "denied", "timed_out", "cancelled". */
const char *sbx_mcp_elicit_outcome_name(SbxMcpElicitOutcome outcome);
