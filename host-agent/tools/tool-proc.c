/*
 * How a tool process starts (tool-proc.h): its environment and what the child does before exec.
 */
#include "tool-proc.h"

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

/*
 * Host variables every tool process gets, because ordinary programs need them to run at all and
 * they carry no credentials: PATH (finding programs, `python3`, `npx`), HOME (caches and
 * configuration: npm, pip), USER and LOGNAME (who runs), LANG, LANGUAGE and every LC_* (the text
 * encoding: a Python or a Node without them may refuse UTF-8), TZ (local time), TMPDIR (where
 * temporary files go; the test suite points it at its scratch dir). Anything else (proxies,
 * which may hold a password; tokens; the agent's own SANDBOX_* settings; XDG_RUNTIME_DIR and its
 * sockets) must be named in the catalog: `env_pass` or `env`.
 */
static const char *const allowed[] = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", NULL,
};

gboolean sbx_tool_env_allowed(const char *name)
{
    if (g_str_has_prefix(name, SBX_CATALOG_SECRET_ENV_PREFIX)) {
        return FALSE;
    }
    return g_strv_contains(allowed, name) || (g_str_has_prefix(name, "LC_") && name[3] != '\0');
}

char **sbx_tool_environ(const SbxCatalogProvider *config, char *const *host)
{
    char **env = g_new0(char *, 1);

    for (char *const *e = host; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        g_autofree char *name = eq != NULL ? g_strndup(*e, eq - *e) : NULL;
        if (name != NULL && sbx_tool_env_allowed(name)) {
            env = g_environ_setenv(env, name, eq + 1, TRUE);
        }
    }
    /* The catalog never names a secret (catalog.c refuses it): checked again, cheaply. */
    for (char **n = config->env_pass; n != NULL && *n != NULL; n++) {
        const char *v = g_environ_getenv((char **)host, *n);
        if (v != NULL && !g_str_has_prefix(*n, SBX_CATALOG_SECRET_ENV_PREFIX)) {
            env = g_environ_setenv(env, *n, v, TRUE);
        }
    }
    for (char **e = config->env; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        g_autofree char *name = g_strndup(*e, eq - *e);
        if (!g_str_has_prefix(name, SBX_CATALOG_SECRET_ENV_PREFIX)) {
            env = g_environ_setenv(env, name, eq + 1, TRUE);
        }
    }
    return env;
}

/* What the child applies before exec, computed in the parent (the child may only make
 * async-signal-safe calls). */
typedef struct {
    pid_t parent;
    struct rlimit core;
    struct rlimit nofile;
} ChildSetup;

static void child_setup(gpointer data)
{
    const ChildSetup *s = data;

    /* Async-signal-safe only: runs between fork and exec. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != s->parent) { /* the host agent died before the line above */
        _exit(127);
    }
    /* Lowering a limit cannot fail; if it did, the program runs with the host agent's. */
    setrlimit(RLIMIT_CORE, &s->core);
    setrlimit(RLIMIT_NOFILE, &s->nofile);
}

static ChildSetup *child_setup_new(void)
{
    ChildSetup *s = g_new0(ChildSetup, 1);
    struct rlimit own = {.rlim_cur = RLIM_INFINITY, .rlim_max = RLIM_INFINITY};

    s->parent = getpid();
    /* A crashing tool writes no core file into the catalog's directory (with its memory:
     * its input, maybe its credentials). Hard 0: it cannot turn them back on. */
    s->core.rlim_cur = s->core.rlim_max = 0;
    getrlimit(RLIMIT_NOFILE, &own);
    s->nofile.rlim_max = MIN(own.rlim_max, (rlim_t)SBX_TOOL_NOFILE_HARD);
    s->nofile.rlim_cur = MIN(s->nofile.rlim_max, (rlim_t)SBX_TOOL_NOFILE_SOFT);
    return s;
}

GSubprocessLauncher *sbx_tool_launcher_new(const char *workdir, char *const *envp)
{
    GSubprocessLauncher *l = g_subprocess_launcher_new(
        G_SUBPROCESS_FLAGS_STDIN_PIPE | G_SUBPROCESS_FLAGS_STDOUT_PIPE |
        G_SUBPROCESS_FLAGS_STDERR_PIPE | G_SUBPROCESS_FLAGS_SEARCH_PATH_FROM_ENVP);

    g_subprocess_launcher_set_cwd(l, workdir);
    g_subprocess_launcher_set_environ(l, (char **)envp);
    g_subprocess_launcher_set_child_setup(l, child_setup, child_setup_new(), g_free);
    return l;
}
