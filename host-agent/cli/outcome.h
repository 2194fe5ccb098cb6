/*
 * How a finished run ends for the user, shared by `sandbox run` (direct) and `sandbox serve`
 * (which computes it for its clients): the exit code and the one-line summary on stderr.
 */
#pragma once

#include <glib.h>

#include "session.h"

/** Exit code of a finished execution (docs/cli.md). */
int sbx_outcome_exit_code(const SbxRunResult *r);

/**
 * What a streamed run prints on stderr at its end (may be ""; caller frees): the failure
 * (@r NULL), truncation at @output_limit, the program's error, a host-ended status.
 */
char *sbx_outcome_summary(const SbxRunResult *r, const char *failure, guint64 output_limit);
