/*
 * What a program's run takes from the command line, for `sandbox run` and `sandbox session exec`
 * (docs/cli.md): the program's text, --timeout, --output-limit and the function to call
 * (--entry, --args, --kwargs), each checked; a failure is the user's (invalid usage, exit 2).
 */
#pragma once

#include <glib.h>

#include "protocol/message.h"

/*
 * Largest --output-limit. In --json mode output is kept in memory up to the limit, so the
 * limit is also the host memory one run may use for output; 1 GiB is already generous.
 */
#define SBX_CLI_OUTPUT_LIMIT_MAX (1024ull * 1024 * 1024)

/* Largest --timeout: a day. An execution meant to run longer is a mistake in the request. */
#define SBX_CLI_TIMEOUT_MAX_S 86400.0

/**
 * The program in file @path (`-`: stdin): at most SBX_FRAME_MAX bytes of UTF-8 without NUL
 * (docs/protocol.md). NULL with a message naming @path otherwise.
 */
char *sbx_cli_read_program(const char *path, GError **error);

/** The program given as the text @code (an argument): checked as sbx_cli_read_program(). */
gboolean sbx_cli_check_program(const char *code, GError **error);

/** --timeout @opt (seconds, decimals allowed; NULL: the default) into *@ret_ms. */
gboolean sbx_cli_parse_timeout(const char *opt, guint *ret_ms, GError **error);

/** --output-limit @opt (bytes, suffixes K, M, G; NULL: the default) into *@ret. */
gboolean sbx_cli_parse_output_limit(const char *opt, guint64 *ret, GError **error);

/**
 * --entry @entry, --args @args and --kwargs @kwargs (each NULL when not given) for a @language
 * program, checked as every front end does (exec/call.h); the arguments minified, their numbers'
 * literals unchanged, into *@ret_args_json and *@ret_kwargs_json (NULL when not given).
 */
gboolean sbx_cli_parse_call(SbxLanguage language, const char *entry, const char *args,
                            const char *kwargs, char **ret_args_json, char **ret_kwargs_json,
                            GError **error);
