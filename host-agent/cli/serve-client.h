/*
 * The client side of `sandbox serve` in `sandbox run` (docs/pool.md): send the run to a warm
 * pool when a server answers on the socket, with the same output, report and exit code.
 */
#pragma once

#include "cli/cli.h"
#include "cli/out.h"
#include "protocol/message.h"

/*
 * How long the client waits for the server's status answer before running directly: the
 * server answers from its main loop within microseconds unless it is wedged.
 */
#define SBX_SERVE_CLIENT_PROBE_MS 1000

typedef struct {
    SbxLanguage language;
    const char *code;
    const char *entry;       /* or NULL */
    const char *args_json;   /* checked (exec/call.h), or NULL */
    const char *kwargs_json; /* checked, or NULL */
    const char *tools_path;  /* or NULL */
    guint timeout_ms;
    guint64 output_limit;
    const char *profile; /* or NULL: the server's */
    gboolean json;
    SbxOut *out; /* where the run's output, summary and report go; outlives the client */
} SbxServeClientRequest;

/**
 * Send @req to the server if one answers on the socket (and pools @req->profile). TRUE: the
 * run goes on on @cli's loop, which quits with the exit code (signals are handled);
 * FALSE: no usable server, nothing was sent: run directly.
 */
gboolean sbx_serve_client_try(SbxCli *cli, const SbxServeClientRequest *req);

/** Free what a client run holds (after the loop stopped). */
void sbx_serve_client_cleanup(void);

/* For the other clients of the server (`sandbox approvals`, cli/approvals.c). */
/** Connect to the server's socket (after the directory check); -1 if none answers. */
int sbx_serve_client_connect(void);
/** Send one frame holding @json; FALSE if the server is gone. Blocking. */
gboolean sbx_serve_client_send(int fd, const char *json);
