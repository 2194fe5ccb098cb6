/*
 * Provider dispatch: one constructor per kind, calls through the ops table.
 */
#include "provider.h"

SbxProvider *sbx_provider_new(const SbxCatalogProvider *config, GError **error)
{
    switch (config->kind) {
    case SBX_PROVIDER_COMMAND:
        return sbx_command_provider_new(config, error);
    case SBX_PROVIDER_MCP:
        return sbx_mcp_provider_new(config, error);
    case SBX_PROVIDER_HTTP:
        return sbx_http_provider_new(config, error);
    }
    g_assert_not_reached();
}

void sbx_provider_call_async(SbxProvider *provider, const char *tool, const char *input_json,
                             GCancellable *cancellable, GAsyncReadyCallback callback,
                             gpointer user_data)
{
    provider->ops->call_async(provider, tool, input_json, cancellable, callback, user_data);
}

char *sbx_provider_call_finish(SbxProvider *provider, GAsyncResult *result, GError **error)
{
    return provider->ops->call_finish(provider, result, error);
}

void sbx_provider_free(SbxProvider *provider)
{
    if (provider != NULL) {
        provider->ops->free(provider);
    }
}
