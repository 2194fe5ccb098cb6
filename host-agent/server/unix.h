/*
 * The Unix socket front end of `sandbox serve` (docs/pool.md, "Client protocol"): the owner's
 * own clients (`sandbox run`, `sandbox approvals`) over a socket only its owner can reach, with
 * the framed protocol of proto.h. Runs their requests as jobs of the server (server.h).
 */
#pragma once

#include <glib.h>

#include "server/server.h"

typedef struct SbxUnixFront SbxUnixFront;

/**
 * Listen on @socket_path (its directory made 0700 if missing, else it must be ours alone; a
 * socket left by a dead server is replaced, a live one is an error).
 */
SbxUnixFront *sbx_unix_front_new(SbxServer *srv, const char *socket_path, GError **error);

/** Stop listening (the socket file goes); open connections live on until their runs end. */
void sbx_unix_front_close(SbxUnixFront *front);

/** Close every connection and free (accepts NULL). Before the server is freed. */
void sbx_unix_front_free(SbxUnixFront *front);
