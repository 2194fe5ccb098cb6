/*
 * `sandbox`: the host agent's command line. Only the verb dispatch (and a verb's subcommand's),
 * the main loop and the signal handlers live here; each verb is one file in cli/.
 */
#include <gio/gio.h>
#include <glib-unix.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const SbxCliVerb *const verbs[] = {
    &sbx_cli_verb_run,     &sbx_cli_verb_serve,  &sbx_cli_verb_tools,   &sbx_cli_verb_approvals,
    &sbx_cli_verb_approve, &sbx_cli_verb_deny,   &sbx_cli_verb_session, &sbx_cli_verb_tenant,
    &sbx_cli_verb_records, &sbx_cli_verb_replay, &sbx_cli_verb_mcp,     &sbx_cli_verb_version,
    &sbx_cli_verb_paths,
};

void sbx_cli_quit(SbxCli *cli, int exit_code)
{
    cli->exit_code = exit_code;
    g_main_loop_quit(cli->loop);
}

int sbx_cli_subcommand(const char *verb, int argc, char **argv, const char *const *names,
                       gsize n_names, void (*usage)(FILE *out), int *ret_exit)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        *ret_exit = argc < 2 ? SBX_EXIT_USAGE : 0;
        return -1;
    }
    for (gsize i = 0; i < n_names; i++) {
        if (strcmp(argv[1], names[i]) == 0) {
            return (int)i;
        }
    }
    fprintf(stderr, "%s: unknown subcommand \"%s\"\n", verb, argv[1]);
    usage(stderr);
    *ret_exit = SBX_EXIT_USAGE;
    return -1;
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: sandbox VERB [OPTIONS...]\n\nVerbs:\n");
    for (gsize i = 0; i < G_N_ELEMENTS(verbs); i++) {
        fprintf(out, "  %-10s %s\n", verbs[i]->name, verbs[i]->summary);
    }
    fprintf(out, "\n`sandbox VERB --help` describes a verb's options (docs/cli.md).\n");
}

static gboolean on_signal(SbxCli *cli, int signo)
{
    if (cli->signal != 0) {
        return G_SOURCE_CONTINUE; /* already shutting down */
    }
    cli->signal = signo;
    if (cli->on_signal != NULL) {
        cli->on_signal(cli, cli->data);
    } else {
        sbx_cli_quit(cli, SBX_EXIT_SIGNAL_BASE + signo);
    }
    return G_SOURCE_CONTINUE;
}

static gboolean on_sigint(gpointer data)
{
    return on_signal(data, SIGINT);
}

static gboolean on_sigterm(gpointer data)
{
    return on_signal(data, SIGTERM);
}

static const SbxCliVerb *find_verb(const char *name)
{
    for (gsize i = 0; i < G_N_ELEMENTS(verbs); i++) {
        if (strcmp(verbs[i]->name, name) == 0) {
            return verbs[i];
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    /* Writes to a closed pipe (a tool provider that exits early, `sandbox run | head`) must
     * fail with EPIPE, not kill the host agent and orphan its VM. */
    signal(SIGPIPE, SIG_IGN);

    /*
     * Every socket connection (the http tool provider's) makes GLib's default proxy resolver,
     * even next to a resolver of its own (tools/http.c reads the proxy environment variables),
     * and the desktop one it would pick writes $XDG_RUNTIME_DIR/dconf through GSettings. Pin it
     * to GLib's inert one now, while no other thread runs, and unset the variable again so
     * that tool processes do not inherit it.
     */
    if (g_getenv("GIO_USE_PROXY_RESOLVER") == NULL) {
        g_setenv("GIO_USE_PROXY_RESOLVER", "dummy", TRUE);
        (void)g_proxy_resolver_get_default(); /* made once, kept for the process */
        g_unsetenv("GIO_USE_PROXY_RESOLVER");
    }

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SBX_EXIT_USAGE : 0;
    }
    /* `--version` is the GNU spelling of the verb `version` */
    const SbxCliVerb *verb = find_verb(strcmp(argv[1], "--version") == 0 ? "version" : argv[1]);
    if (verb == NULL) {
        fprintf(stderr, "sandbox: unknown verb \"%s\"\n", argv[1]);
        usage(stderr);
        return SBX_EXIT_USAGE;
    }
    SbxCli cli = {.loop = g_main_loop_new(NULL, FALSE)};
    guint sigint = g_unix_signal_add(SIGINT, on_sigint, &cli);
    guint sigterm = g_unix_signal_add(SIGTERM, on_sigterm, &cli);

    int rc = verb->start(&cli, argc - 1, argv + 1);
    if (rc < 0) {
        g_main_loop_run(cli.loop);
        rc = cli.exit_code;
    }
    if (verb->cleanup != NULL) {
        verb->cleanup(&cli);
    }
    g_source_remove(sigint);
    g_source_remove(sigterm);
    g_main_loop_unref(cli.loop);
    return rc;
}
