/*
 * Host secrets for the header values of http tools (`${secret:NAME}`, docs/tools.md): from the
 * environment variable SANDBOX_SECRET_<NAME>, else from the secrets file ($SANDBOX_SECRETS_FILE,
 * else $XDG_CONFIG_HOME/sandbox/secrets, else ~/.config/sandbox/secrets): lines `NAME=value`,
 * `#` comments. The file must be a regular file owned by the user that nobody else may read or
 * write (mode 0600 or stricter). A secret's value never appears in an error message.
 */
#pragma once

#include <glib.h>

/* The secrets file: a handful of tokens; larger is a mistake (a wrong path). */
#define SBX_SECRETS_FILE_MAX (64 * 1024)

/** The value of secret @name, or NULL with @error (SBX_CATALOG_ERROR) saying where it looked. */
char *sbx_secret_lookup(const char *name, gpointer unused, GError **error);

/** The secrets file's path (caller frees). */
char *sbx_secrets_file_path(void);
