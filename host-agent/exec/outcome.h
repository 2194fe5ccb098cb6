/*
 * How a finished run ends for the user, shared by `sandbox run` (direct) and `sandbox serve`
 * (which computes it for its clients): the exit code and the one-line summary on stderr.
 */
#pragma once

#include <glib.h>

#include "session.h"

/* Exit codes of `sandbox run` (docs/cli.md), also sent to clients of `sandbox serve`. */
#define SBX_EXIT_USAGE 2         /* invalid usage or input: options, program file, tool catalog */
#define SBX_EXIT_TIMEOUT 124     /* the execution hit its wall-clock timeout (like timeout(1)) */
#define SBX_EXIT_SANDBOX 125     /* the sandbox failed: image, profile, VM, guest agent, protocol */
#define SBX_EXIT_MEMORY 137      /* the guest program hit its memory limit (like an OOM kill) */
#define SBX_EXIT_SIGNAL_BASE 128 /* + signal number: SIGINT 130, SIGTERM 143 */

/** Exit code of a finished execution (docs/cli.md). */
int sbx_outcome_exit_code(const SbxRunResult *r);

/**
 * What a streamed run prints on stderr at its end (may be ""; caller frees): the failure
 * (@r NULL), truncation at @output_limit, the program's error, a host-ended status.
 */
char *sbx_outcome_summary(const SbxRunResult *r, const char *failure, guint64 output_limit);
