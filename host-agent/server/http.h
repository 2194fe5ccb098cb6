/*
 * The HTTP API of `sandbox serve --listen ADDR:PORT` (docs/api.md): tenants authenticated by
 * their API keys (store/tenants.h) create executions, follow their events, fetch, list and
 * cancel them, and answer their approvals. Executions run as jobs of the server (server.h),
 * queued per tenant. libsoup 3 speaks HTTP (TLS through glib-networking); this front end owns
 * the connections (a cap, deadlines for a request's headers and body) and hands them to it.
 */
#pragma once

#include <glib.h>

#include "server/server.h"
#include "store/db.h"

typedef struct SbxHttpFront SbxHttpFront;

typedef struct {
    const char *listen;   /* "ADDR:PORT" (an IPv4 or IPv6 literal; PORT 0: any free port) */
    const char *tls_cert; /* PEM certificate and key: HTTPS; both or neither */
    const char *tls_key;
    const char *catalogs_dir; /* the operator's tool catalogs, NAME.json; NULL: none */
    SbxStore *store;          /* the tenants (must outlive the front end) */
} SbxHttpConfig;

/** Listen as @config says. */
SbxHttpFront *sbx_http_front_new(SbxServer *srv, const SbxHttpConfig *config, GError **error);

/** The port listened on (the one picked when the configuration said 0). */
guint16 sbx_http_front_port(SbxHttpFront *front);

/** Stop accepting connections and end the event streams (executions end with the server). */
void sbx_http_front_close(SbxHttpFront *front);

/** Close every connection and free (accepts NULL). Before the server is freed. */
void sbx_http_front_free(SbxHttpFront *front);
