/*
 * The execution object of the HTTP API (docs/api.md) as JSON, from an execution the front end
 * holds or from its record in the store (http-object.c).
 */
#pragma once

#include "base/json-builder.h"
#include "exec/report.h"
#include "namespace.h"
#include "store/records.h"

/* What the object shows; every pointer is borrowed. */
typedef struct {
    const char *id;
    const char *status;
    const char *language;
    const char *catalog; /* NULL: none */
    const char *session; /* the session it ran in, NULL: none */
    gint64 created_us;   /* unix us; 0: not yet (null) */
    gint64 started_us;
    gint64 finished_us;
    guint64 timeout_ms;
    guint64 output_limit;
    gboolean ended; /* else the outcome members are null */
    gboolean has_exit_code;
    int exit_code;
    const char *result_json; /* JSON text or NULL */
    const char *error_json;
    gboolean output_truncated;
    gboolean has_duration;
    guint64 duration_ms;
    /* the full object only */
    const char *out[SBX_STREAM__COUNT]; /* bytes (NUL and invalid UTF-8 become U+FFFD) */
    gsize out_len[SBX_STREAM__COUNT];
    const char *tool_calls_json; /* the array (NULL: []) */
    const char *files_json;      /* the `files` object (exec-files.h), or NULL: none asked */
} SbxHttpObject;

/** @o as the API's Execution (@full) or ExecutionSummary (no result, error, output, calls). */
char *sbx_http_object_json(const SbxHttpObject *o, gboolean full);

/** Member @key: the time @us (unix us) in RFC 3339, UTC, or null when 0 (every object's times). */
void sbx_http_member_time(SbxJsonb *b, const char *key, gint64 us);

/** The tool calls of result @r (NULL: none) as the API's array, under their real names. */
char *sbx_http_object_calls_live(const SbxRunResult *r, const SbxNamespace *ns);

/** The tool calls of a record (SbxRecordCall *, or NULL) as the API's array. */
char *sbx_http_object_calls_stored(const GPtrArray *calls);

/** Fill @o from record @r, with @calls_json (may be NULL) as its tool calls. */
void sbx_http_object_from_record(SbxHttpObject *o, const SbxRecord *r, const char *calls_json);
