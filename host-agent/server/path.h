/*
 * Where `sandbox serve` listens, shared by the server and its clients (`sandbox run`,
 * `sandbox approvals`), and the check that nobody else can reach or replace it.
 */
#pragma once

#include <glib.h>

/**
 * The socket path: @opt, else $SANDBOX_SERVE_SOCKET, else sandbox.sock in the runtime dir
 * ($RUNTIME_DIRECTORY for the service, $XDG_RUNTIME_DIR/sandbox, /tmp/sandbox-$UID).
 */
char *sbx_serve_socket_path(const char *opt);

/** The socket's directory is ours alone: a real directory, owned by us, mode 0700. */
gboolean sbx_serve_check_dir(const char *dir, GError **error);
