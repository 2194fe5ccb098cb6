/*
 * The one JSON object `sandbox run --json` prints at the end (docs/cli.md).
 */
#pragma once

#include <glib.h>

#include "base/json-builder.h" /* sbx_json_append_string() */

#include "namespace.h"
#include "session.h"

typedef struct {
    const SbxRunResult *result; /* NULL if no execution ran (the sandbox failed first) */
    const char *failure;        /* why the sandbox failed, when result is NULL */
    SbxStatus failure_status;   /* crash, or terminated when a signal stopped the start */
    const SbxNamespace *ns;     /* maps the guest's tool identifiers to real names; optional */
    gint64 boot_ms;             /* VM start to agent ready; -1 if unknown */
} SbxReport;

/** @e as the report's error object ({"code","type","message","stack"}), appended to @out. */
void sbx_report_append_error(GString *out, const SbxError *e);

/** The report as one line of JSON (caller frees). */
char *sbx_report_json(const SbxReport *report);

/** An error as the report writes it: {"code","type","message","stack"} (caller frees). */
char *sbx_report_error_json(const SbxError *e);

/** The tool calls of @r as the report writes them, a JSON array (real names through @ns). */
char *sbx_report_tool_calls_json(const SbxRunResult *r, const SbxNamespace *ns);
