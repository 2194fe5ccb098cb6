/*
 * What the verbs on the store (`sandbox tenant`, `sandbox records`) share: the --db option's
 * default, opening the store with a message, and exit codes for its errors; and the store the
 * front ends that run code (`sandbox run`, `sandbox mcp`) record their executions in.
 */
#pragma once

#include "cli/out.h"
#include "store/db.h"

/* The store refused (no such tenant or record, a name taken) or failed (the database). */
#define SBX_EXIT_STORE 1

/**
 * Open the store at @path (NULL: sbx_store_default_path()) as a client of a `sandbox serve` that
 * may be using it; NULL with @error on failure, for the caller to report.
 */
SbxStore *sbx_cli_store_try_open(const char *path, GError **error);

/**
 * Open the store at @path (NULL: sbx_store_default_path()); on failure print why, prefixed with
 * @verb ("sandbox tenant"), and return NULL.
 */
SbxStore *sbx_cli_store_open(const char *verb, const char *path);

/** Print @error prefixed with @verb; its exit code (SBX_EXIT_USAGE for invalid input). */
int sbx_cli_store_fail(const char *verb, const GError *error);

/**
 * The default store, to record a front end's executions in (docs/service.md, "Records"), or
 * NULL: with SANDBOX_RECORDS=off, or when it cannot be opened, which is a warning on @out's
 * stderr ("@unrecorded: why"), not a failure: the executions run unrecorded.
 */
SbxStore *sbx_cli_store_open_records(SbxOut *out, const char *unrecorded);
