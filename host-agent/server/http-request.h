/*
 * The bodies of POST /v1/executions and POST /v1/sessions (docs/api.md), decoded and checked
 * against a tenant's quotas and catalogs. Pure: no I/O, no server state; their fuzz target is
 * tests/host/fuzz-http-create.c.
 */
#pragma once

#include <glib.h>

#include "exec/exec-files.h"
#include "protocol/message.h"

/* A program's code: 1 MiB of source is far beyond what a person or a model writes for one run. */
#define SBX_HTTP_CODE_MAX (1024u * 1024)

/* The defaults of a creation that says nothing (within the tenant's maxima). */
#define SBX_HTTP_TIMEOUT_DEFAULT_MS 30000
#define SBX_HTTP_OUTPUT_LIMIT_DEFAULT (10u * 1024 * 1024)

/* What a tenant may ask for. */
typedef struct {
    guint64 max_timeout_ms;
    guint64 max_output_bytes;
    const char *const *catalogs; /* the catalogs it may name, NULL-terminated (NULL: none) */
} SbxHttpLimits;

/* A checked creation. */
typedef struct {
    SbxLanguage language;
    char *code;
    /* The function to call, and its arguments as sent (minified): exec/call.h. */
    char *entry;       /* or NULL */
    char *args_json;   /* a JSON array, or NULL */
    char *kwargs_json; /* a JSON object (Python), or NULL */
    char *catalog;     /* or NULL */
    guint timeout_ms;
    guint64 output_limit;
    /* `files`: put into the workspace first; the changed ones come back (exec-files.h). */
    gboolean with_files;
    SbxExecFileIn *files; /* n_files of them, paths unique */
    gsize n_files;
} SbxHttpCreate;

/**
 * Decode @len bytes of @body into *@ret (zeroed first) for a tenant with @limits. NULL on
 * success; else what is wrong, for the client (caller frees), with *@ret holding nothing.
 */
char *sbx_http_create_decode(const char *body, gsize len, const SbxHttpLimits *limits,
                             SbxHttpCreate *ret);

/** Free what @c holds and zero it. */
void sbx_http_create_clear(SbxHttpCreate *c);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(SbxHttpCreate, sbx_http_create_clear)

/* A checked session creation: every member optional (0, NULL: the server's default). */
typedef struct {
    char *profile;
    guint idle_timeout_s;
    guint max_lifetime_s;
} SbxHttpSessionCreate;

/**
 * Decode @len bytes of @body (empty: every default) into *@ret (zeroed first), with the
 * timeouts within @max_idle_s and @max_lifetime_s. NULL on success, else what is wrong.
 */
char *sbx_http_session_decode(const char *body, gsize len, guint max_idle_s, guint max_lifetime_s,
                              SbxHttpSessionCreate *ret);

void sbx_http_session_create_clear(SbxHttpSessionCreate *c);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC(SbxHttpSessionCreate, sbx_http_session_create_clear)
