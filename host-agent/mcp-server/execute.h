/*
 * The MCP server's `execute` tool (docs/mcp-server.md): its definition for tools/list (the
 * description a model reads, the input and output schemas, the annotations), the check of its
 * arguments, and its result from the execution's report (`sandbox run --json`'s object): text
 * content for the model, `structuredContent` for programs. Pure: the protocol library, the JSON
 * builder and exec/call.c (the check of a function call every front end makes).
 */
#pragma once

#include <glib.h>

#include "base/json-builder.h"
#include "protocol/message.h"

/*
 * The program's text: 1 MiB, the HTTP API's limit (SBX_HTTP_CODE_MAX). A model writes programs
 * of kilobytes; data belongs in the arguments or files, not in the code.
 */
#define SBX_MCP_EXECUTE_CODE_MAX (1024u * 1024)

/* The wall-clock limit when the call names none: `sandbox run`'s default. */
#define SBX_MCP_EXECUTE_TIMEOUT_DEFAULT_MS 30000

/*
 * The longest a call may ask for: 10 minutes. A client waits on a tool call with a timeout of
 * its own (the TypeScript SDK's is 60 s by default), and an agent's turn should not hang on one
 * call for longer; longer work belongs to the HTTP API (docs/api.md).
 */
#define SBX_MCP_EXECUTE_TIMEOUT_MAX_MS (10u * 60 * 1000)

/*
 * stdout and stderr together, per execution: 1 MiB (more is dropped and output_truncated set).
 * A model reads all of it, twice in a result (the text content and structuredContent), and 1
 * MiB is already far more than it should; `sandbox run`'s 10 MiB default is for people.
 */
#define SBX_MCP_EXECUTE_OUTPUT_LIMIT (1024u * 1024)

/* The checked arguments of one call. Strings owned (sbx_mcp_execute_args_clear()). */
typedef struct {
    SbxLanguage language;
    char *code;        /* UTF-8, at most SBX_MCP_EXECUTE_CODE_MAX; empty only with an entry */
    char *entry;       /* or NULL */
    char *args_json;   /* a JSON array's text as the client sent it (minified), or NULL */
    char *kwargs_json; /* a JSON object's text (Python), or NULL */
    guint timeout_ms;  /* 1..SBX_MCP_EXECUTE_TIMEOUT_MAX_MS */
    char *session;     /* the session to run in: a handle this connection opened; or NULL */
} SbxMcpExecuteArgs;

/**
 * Append the tool's definition (an element of tools/list's `tools`) to @b, as revision
 * @revision of MCP has it: `title` and `outputSchema` from 2025-06-18 on, `annotations` from
 * 2025-03-26 on. @discovery: the discovery tools are there too (its description says so).
 * @sessions: the session tools are (sessions.h): the input has `session`, the description says
 * what it keeps.
 */
void sbx_mcp_execute_definition(SbxJsonb *b, const char *revision, gboolean discovery,
                                gboolean sessions);

/**
 * Check the call's arguments, the JSON object text @text (@len bytes, checked JSON), into
 * *@ret (cleared first). NULL if they are fine, else what is wrong, for the model (caller
 * frees; *@ret left cleared).
 */
char *sbx_mcp_execute_args_parse(const char *text, gsize len, SbxMcpExecuteArgs *ret);

/** Free what @args holds and zero it. */
void sbx_mcp_execute_args_clear(SbxMcpExecuteArgs *args);

/**
 * The CallToolResult of an execution whose report (`sandbox run --json`'s object, docs/cli.md)
 * is @report_json: `content` (one text: how it ended, stdout, stderr, the value or the error),
 * `structuredContent` (from revision 2025-06-18 on; before it, its JSON as a second text) and
 * `isError` when the program failed. Caller frees.
 */
char *sbx_mcp_execute_result(const char *report_json, const char *revision);

/**
 * A CallToolResult of @text for the model and the object @object_json as structuredContent
 * (before revision 2025-06-18, which has none: as a second text), isError @is_error. Caller
 * frees.
 */
char *sbx_mcp_structured_result(const char *text, const char *object_json, gboolean is_error,
                                const char *revision);

/** Whether revision @revision is @since or newer (NULL: none is). */
gboolean sbx_mcp_revision_has(const char *revision, const char *since);

/** A CallToolResult of the one text @text, isError @is_error. Caller frees. */
char *sbx_mcp_text_result(const char *text, gboolean is_error);

/** A CallToolResult with isError and the one text @message (a refused call). Caller frees. */
char *sbx_mcp_tool_error_result(const char *message);
