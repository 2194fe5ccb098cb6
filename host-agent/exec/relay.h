/*
 * Relays one tool call of a session to the tool providers and answers it: the glue between
 * session/ (which validates and tracks calls) and tools/ (which validates input and runs the
 * provider), shared by `sandbox run` and `sandbox serve`.
 */
#pragma once

#include <gio/gio.h>

#include "session.h"
#include "tools.h"

/*
 * Called after relayed call @call_id was answered (@ok: with a result) or dropped because the
 * session ended, @duration_ms after it was relayed, so that the owner can check whether it may
 * finish: sbx_tools_in_flight() has already dropped by one.
 */
typedef void (*SbxRelaySettledFunc)(gpointer user_data, guint32 call_id, gboolean ok,
                                    guint64 duration_ms);

/**
 * Run @tool of @provider with @input_json through @tools and answer @call_id on @session with
 * its result or its error (code and message). @cancel aborts the provider (its process is
 * killed and reaped first). @session and @tools must outlive the call.
 */
void sbx_relay_tool_call(SbxSession *session, SbxTools *tools, guint32 call_id,
                         const char *provider, const char *tool, const char *input_json,
                         GCancellable *cancel, SbxRelaySettledFunc settled, gpointer user_data);
