/*
 * The end of a run as the user sees it (outcome.h).
 */
#include <signal.h>

#include "exec/outcome.h"

int sbx_outcome_exit_code(const SbxRunResult *r)
{
    switch (r->status) {
    case SBX_STATUS_OK:
    case SBX_STATUS_ERROR:
        if (r->exit_code < 0 || r->exit_code > 255) {
            return 1;
        }
        return r->status == SBX_STATUS_ERROR && r->exit_code == 0 ? 1 : r->exit_code;
    case SBX_STATUS_TIMEOUT:
        return SBX_EXIT_TIMEOUT;
    case SBX_STATUS_MEMORY_LIMIT:
        return SBX_EXIT_MEMORY;
    case SBX_STATUS_CANCELLED:
        return SBX_EXIT_SIGNAL_BASE + SIGINT;
    default: /* crash, terminated: the sandbox did not deliver the program's own ending */
        return SBX_EXIT_SANDBOX;
    }
}

char *sbx_outcome_summary(const SbxRunResult *r, const char *failure, guint64 output_limit)
{
    GString *out = g_string_new(NULL);

    if (r == NULL) {
        g_string_append_printf(out, "sandbox: %s\n", failure != NULL ? failure : "failed");
        return g_string_free(out, FALSE);
    }
    if (r->output_truncated) {
        g_string_append_printf(out, "sandbox: output truncated at %" G_GUINT64_FORMAT " bytes\n",
                               output_limit);
    }
    if (r->status == SBX_STATUS_ERROR && r->has_error) {
        if (r->error.type == NULL && r->error.stack == NULL && r->exit_code > 0) {
            /* sys.exit(3) / process.exit(3): the exit status says it all, like a shell. */
        } else if (r->error.stack != NULL) {
            g_string_append_printf(out, "%s\n", r->error.stack);
        } else {
            g_string_append_printf(out, "%s: %s\n", r->error.type != NULL ? r->error.type : "Error",
                                   r->error.message);
        }
    } else if (r->status != SBX_STATUS_OK) {
        g_string_append_printf(out, "sandbox: %s: %s\n", sbx_status_name(r->status),
                               r->has_error ? r->error.message : "no details");
    }
    return g_string_free(out, FALSE);
}
