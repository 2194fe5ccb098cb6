/*
 * The elicitation that asks the client to approve a host tool call, and its answer (elicit.h).
 */
#include "mcp-server/elicit.h"

#include <string.h>

#include "base/json-builder.h"
#include "protocol/json.h"
#include "protocol/limits.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/* The schema the client renders: one checkbox, unchecked by default (a denial). */
static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"approve\":{\"type\":\"boolean\",\"title\":\"Approve "
    "this call\",\"description\":\"Check to let the call run; leave unchecked, decline or cancel "
    "to deny it (the program gets "
    "policy_denied).\",\"default\":false}},\"required\":[\"approve\"]}";

/* @input cut to SBX_MCP_ELICIT_INPUT_MAX bytes at a character, saying how long it was. */
static char *shown_input(const char *input)
{
    gsize len = input != NULL ? strlen(input) : 0;

    if (len <= SBX_MCP_ELICIT_INPUT_MAX) {
        return g_strdup(input != NULL ? input : "{}");
    }
    const char *end = input + SBX_MCP_ELICIT_INPUT_MAX;
    while (end > input && ((guchar)*end & 0xc0) == 0x80) {
        end--; /* not inside a UTF-8 sequence */
    }
    return g_strdup_printf("%.*s... (%" G_GSIZE_FORMAT " bytes in all)", (int)(end - input), input,
                           len);
}

char *sbx_mcp_elicit_params(const SbxMcpApprovalAsk *ask)
{
    g_autofree char *input = shown_input(ask->input_json);
    g_autofree char *message = g_strdup_printf(
        "A program in the sandbox calls the host tool %.*s of provider %.*s; the policy asks a "
        "person first. Its input: %s. Approve this call? (Unanswered, it is denied after %u s.)",
        SBX_NAME_MAX, ask->tool, SBX_NAME_MAX, ask->provider, input,
        (ask->timeout_ms + 999) / 1000);
    SbxJsonb b;

    sbx_jsonb_init(&b);
    sbx_jsonb_begin_object(&b);
    /* Form mode: 2025-11-25 names it; 2025-06-18 clients ignore the member. */
    sbx_jsonb_member_string(&b, "mode", "form");
    sbx_jsonb_member_string(&b, "message", message);
    sbx_jsonb_member_raw(&b, "requestedSchema", SCHEMA);
    sbx_jsonb_end_object(&b);
    return sbx_jsonb_finish(&b);
}

SbxMcpElicitOutcome sbx_mcp_elicit_outcome(const char *text, gsize len)
{
    g_autoptr(cJSON) v = sbx_json_parse(text, len, SBX_JSON_DEPTH_MAX, NULL);
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(v, "result");
    const cJSON *action = cJSON_GetObjectItemCaseSensitive(result, "action");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(result, "content");
    const cJSON *approve = cJSON_GetObjectItemCaseSensitive(content, "approve");

    /* Only a clear yes approves: an error, a decline, a cancel or anything unreadable denies. */
    if (cJSON_IsObject(result) && cJSON_IsString(action) &&
        strcmp(action->valuestring, "accept") == 0 && cJSON_IsTrue(approve)) {
        return SBX_MCP_ELICIT_APPROVED;
    }
    return SBX_MCP_ELICIT_DENIED;
}

const char *sbx_mcp_elicit_outcome_name(SbxMcpElicitOutcome outcome)
{
    static const char *const names[] = {
        [SBX_MCP_ELICIT_APPROVED] = "approved",
        [SBX_MCP_ELICIT_DENIED] = "denied",
        [SBX_MCP_ELICIT_TIMED_OUT] = "timed_out",
        [SBX_MCP_ELICIT_CANCELLED] = "cancelled",
    };
    return names[outcome];
}
