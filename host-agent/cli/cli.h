/*
 * The `sandbox` command line: main.c parses the verb, owns the main loop and the signal
 * handlers; each verb lives in its own file in cli/ and does its work on that loop.
 */
#pragma once

#include <glib.h>
#include <stdio.h>

#include "exec/outcome.h" /* the exit codes (SBX_EXIT_*) */

typedef struct SbxCli SbxCli;

struct SbxCli {
    GMainLoop *loop;
    int exit_code;
    int signal; /* the first SIGINT/SIGTERM received, 0 if none */
    /* Set by a verb: called (on the loop) for the first SIGINT/SIGTERM. Unset: quit at once. */
    void (*on_signal)(SbxCli *cli, gpointer data);
    gpointer data;
};

typedef struct {
    const char *name;
    const char *summary;
    /*
     * Parse @argv (argv[0] is the verb) and start the work. Returns an exit code if the verb is
     * already finished, or -1 if the work runs on cli->loop until sbx_cli_quit().
     */
    int (*start)(SbxCli *cli, int argc, char **argv);
    /* Called after the loop stopped (or after start returned), to free what start made. */
    void (*cleanup)(SbxCli *cli);
} SbxCliVerb;

/** Stop the main loop; main() returns @exit_code. */
void sbx_cli_quit(SbxCli *cli, int exit_code);

/**
 * The subcommand argv[1] names, for a verb with subcommands (@verb: "sandbox tenant"): its index
 * in @names (@n_names of them). Otherwise -1 and *@ret_exit: 0 after --help (@usage printed on
 * stdout), SBX_EXIT_USAGE without a subcommand or for an unknown one (why, then @usage, on
 * stderr).
 */
int sbx_cli_subcommand(const char *verb, int argc, char **argv, const char *const *names,
                       gsize n_names, void (*usage)(FILE *out), int *ret_exit);

/** `sandbox run` (cli/run.c). */
extern const SbxCliVerb sbx_cli_verb_run;

/** `sandbox serve` (cli/serve.c). */
extern const SbxCliVerb sbx_cli_verb_serve;

/** `sandbox mcp` (cli/mcp.c). */
extern const SbxCliVerb sbx_cli_verb_mcp;

/** `sandbox tools` (cli/tools.c). */
extern const SbxCliVerb sbx_cli_verb_tools;

/** `sandbox approvals`, `sandbox approve ID`, `sandbox deny ID` (cli/approvals.c). */
extern const SbxCliVerb sbx_cli_verb_approvals;
extern const SbxCliVerb sbx_cli_verb_approve;
extern const SbxCliVerb sbx_cli_verb_deny;

/** `sandbox session new|ls|show|rm|exec|put|get|files|rmfile` (cli/session.c). */
extern const SbxCliVerb sbx_cli_verb_session;

/** `sandbox tenant add|list|remove|rotate-key` (cli/tenant.c). */
extern const SbxCliVerb sbx_cli_verb_tenant;

/** `sandbox records list|show` (cli/records.c). */
extern const SbxCliVerb sbx_cli_verb_records;

/** `sandbox replay ID` (cli/replay.c). */
extern const SbxCliVerb sbx_cli_verb_replay;

/** `sandbox version` (also `sandbox --version`) and `sandbox paths` (cli/paths.c). */
extern const SbxCliVerb sbx_cli_verb_version;
extern const SbxCliVerb sbx_cli_verb_paths;
