/* Tool calls from a session to the providers and back (relay.h). */
#include "exec/relay.h"

#include "tools-error.h"

typedef struct {
    SbxSession *session;
    SbxTools *tools;
    guint32 call_id;
    gint64 t_start; /* monotonic us */
    SbxRelaySettledFunc settled;
    gpointer user_data;
} RelayCall;

static void on_tool_done(GObject *src, GAsyncResult *res, gpointer data)
{
    RelayCall *rc = data;
    g_autoptr(GError) error = NULL;
    (void)src;

    g_autofree char *result = sbx_tools_call_finish(rc->tools, res, &error);
    g_autofree char *policy = sbx_tools_call_policy(res);
    if (policy != NULL) {
        sbx_session_tool_policy(rc->session, rc->call_id, policy);
    }
    if (result != NULL) {
        sbx_session_tool_result(rc->session, rc->call_id, result, NULL);
    } else {
        SbxError e = {
            .code = error->domain == SBX_TOOL_ERROR ? (SbxErrorCode)error->code : SBX_ERR_INTERNAL,
            .message = error->message,
        };
        sbx_session_tool_result(rc->session, rc->call_id, NULL, &e);
    }
    rc->settled(rc->user_data, rc->call_id, result != NULL,
                (guint64)(g_get_monotonic_time() - rc->t_start) / 1000);
    g_free(rc);
}

void sbx_relay_tool_call(SbxSession *session, SbxTools *tools, guint32 call_id,
                         const char *provider, const char *tool, const char *input_json,
                         GCancellable *cancel, SbxRelaySettledFunc settled, gpointer user_data)
{
    RelayCall *rc = g_new0(RelayCall, 1);

    rc->session = session;
    rc->tools = tools;
    rc->call_id = call_id;
    rc->t_start = g_get_monotonic_time();
    rc->settled = settled;
    rc->user_data = user_data;
    sbx_tools_call_async(tools, provider, tool, input_json, cancel, on_tool_done, rc);
}
