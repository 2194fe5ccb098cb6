/*
 * Approvals for a direct `sandbox run` (docs/tools.md, "Approvals"): with a terminal
 * (/dev/tty), each tool call that needs an approval is asked there, one at a time, with its
 * whole input (a page at a time when it is long), and the answer (`y` approves, anything else
 * denies) goes to the approvals list. Without a terminal
 * there is no prompt, and the caller leaves approvals unset (such calls are denied at once).
 */
#pragma once

#include "approvals.h"

typedef struct SbxPrompt SbxPrompt;

/** Ask on /dev/tty for the approvals of @approvals; NULL if there is no terminal. */
SbxPrompt *sbx_prompt_new(SbxApprovals *approvals);

/** Ask on the terminal @fd instead (owned: closed by sbx_prompt_free()); for tests. */
SbxPrompt *sbx_prompt_new_fd(SbxApprovals *approvals, int fd);

/** Stop asking and close the terminal. Accepts NULL. */
void sbx_prompt_free(SbxPrompt *prompt);
