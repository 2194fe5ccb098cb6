/*
 * The execution's record in the store (docs/service.md, "Records"), built from what the core
 * knows: the request, the source, the outcome, the tool calls with their policy notes and
 * approvals, and what the guest was given. Internal to the execution core (exec.c).
 */
#pragma once

#include "exec/exec.h"
#include "namespace.h"
#include "store/records.h"

/* What exec.c hands over; every pointer is borrowed. */
typedef struct {
    const char *id;
    const SbxExecRecordInfo *info;
    SbxLanguage language;
    const char *code;
    const char *entry;       /* or NULL */
    const char *args_json;   /* or NULL */
    const char *kwargs_json; /* or NULL */
    guint timeout_ms;
    guint64 output_limit;
    gint64 started_at_ms; /* unix ms the execute went out, 0: never */
    gint64 boot_ms;       /* -1: unknown */
    const SbxRunResult *result;
    const char *failure; /* when result is NULL */
    SbxStatus failure_status;
    /* Streamed output, as kept by the core (NULL when collected: the result has it). */
    const GByteArray *kept[SBX_STREAM__COUNT];
    gboolean kept_cut[SBX_STREAM__COUNT];
    const SbxNamespace *ns;
    const SbxSessionGiven *given; /* NULL: nothing was sent to the guest */
    const char *files_json;       /* the `files` object without contents, or NULL: none */
    gboolean files_in;            /* files were put into the workspace before the execute */
    const char *tools_json;       /* the tools the guest was given (sbx_tools_given_json()) */
} SbxExecRecordInput;

/** Record that the execution starts (status running). */
gboolean sbx_exec_record_begin(SbxStore *store, const SbxExecRecordInput *in, GError **error);

/** Record its end: the outcome, output, tool calls and approvals, in one transaction. */
gboolean sbx_exec_record_finish(SbxStore *store, const SbxExecRecordInput *in, GError **error);

/**
 * The outcome of the execution as its record would hold it (status, exit code, result, error,
 * output cut at the record's cap and flagged), and its tool calls (*@ret_calls: SbxRecordCall*)
 * with their answers: what a replay compares with the record. Owned by the caller.
 */
SbxRecord *sbx_exec_record_view(const SbxExecRecordInput *in, GPtrArray **ret_calls);
