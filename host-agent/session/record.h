/*
 * The bounded in-memory record of an execution's tool calls (SbxToolRecord in session.h), and
 * SbxError helpers. Private to the session library.
 */
#pragma once

#include "session.h"

/**
 * Record a new call in @result. Returns the record (owned by @result->tool_calls), or NULL if
 * the record is full (the call is then counted in tool_calls_dropped). *@bytes tracks the
 * record's size against SBX_SESSION_RECORD_BYTES_MAX.
 */
SbxToolRecord *sbx_record_add(SbxRunResult *result, gsize *bytes, guint32 call_id,
                              const char *provider, const char *tool, const char *input_json);

/**
 * Store the answer of @rec (NULL: nothing to do). A result that does not fit the record's
 * bounds is not stored (result_dropped).
 */
void sbx_record_answer(gsize *bytes, SbxToolRecord *rec, const char *result_json,
                       const SbxError *error, guint64 duration_ms);

/** Free everything @result owns and zero it. */
void sbx_run_result_clear(SbxRunResult *result);
