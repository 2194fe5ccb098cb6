/*
 * What tools.c and tools-replay.c share: the tools of a replay, which answer each call from
 * the record (tools.h, "Replay"). Private to the tools library.
 */
#pragma once

#include <gio/gio.h>

#include "tools.h"

/**
 * Tools of @catalog (taken) whose calls @replay (taken, also on failure) answers: no provider
 * is built, the namespace and declarations are the catalog's.
 */
SbxTools *sbx_tools_new_answering(SbxCatalog *catalog, SbxToolsReplay *replay, GError **error);

/** The tools' replay, or NULL: they call providers. */
SbxToolsReplay *sbx_tools_replay_of(const SbxTools *tools);

/** Count a call in flight (+1) or settled (-1) that tools.c did not start. */
void sbx_tools_in_flight_add(SbxTools *tools, int delta);

/**
 * Answer @task, the call of @provider.@tool (real names, or the guest's when unknown) with
 * @input_json, from @r's next recorded call: its result, its error, or no answer until the
 * task's cancellable ends it (the original got none); a call other than the record's gets a
 * replay_divergence error and is noted (sbx_tools_replay_diverged()).
 */
void sbx_tools_replay_answer(SbxTools *tools, SbxToolsReplay *r, GTask *task, const char *provider,
                             const char *tool, const char *input_json);
