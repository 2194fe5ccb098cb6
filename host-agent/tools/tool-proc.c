/*
 * How a tool process starts (tool-proc.h): its environment and what the child does before exec.
 */
#include "tool-proc.h"

#include <gio/gunixinputstream.h>
#include <gio/gunixoutputstream.h>
#include <string.h>
#include <sys/resource.h>

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

/* What the child applies before exec, after base/child.c's steps (its process group, the
 * death signal); computed in the parent: the child may only make async-signal-safe calls. */
typedef struct {
    struct rlimit core;
    struct rlimit nofile;
} ChildSetup;

static void child_setup(gpointer data)
{
    const ChildSetup *s = data; /* the parent's stack, copied by fork */

    /* Lowering a limit cannot fail; if it did, the program runs with the host agent's. */
    setrlimit(RLIMIT_CORE, &s->core);
    setrlimit(RLIMIT_NOFILE, &s->nofile);
}

static void child_setup_init(ChildSetup *s)
{
    struct rlimit own = {.rlim_cur = RLIM_INFINITY, .rlim_max = RLIM_INFINITY};

    /* A crashing tool writes no core file into the catalog's directory (with its memory:
     * its input, maybe its credentials). Hard 0: it cannot turn them back on. */
    s->core.rlim_cur = s->core.rlim_max = 0;
    getrlimit(RLIMIT_NOFILE, &own);
    s->nofile.rlim_max = MIN(own.rlim_max, (rlim_t)SBX_TOOL_NOFILE_HARD);
    s->nofile.rlim_cur = MIN(s->nofile.rlim_max, (rlim_t)SBX_TOOL_NOFILE_SOFT);
}

SbxChild *sbx_tool_spawn(const char *const *argv, const char *workdir, char *const *envp,
                         SbxToolPipes *ret_pipes, GError **error)
{
    ChildSetup setup;
    int in = -1, out = -1, err = -1;
    SbxChildFds fds = {
        .stderr_fd = -1,
        .stdin_pipe = &in,
        .stdout_pipe = &out,
        .stderr_pipe = &err,
        .envp = (const char *const *)envp,
        .path_from_envp = TRUE,
        .cwd = workdir,
        .setup = child_setup,
        .setup_data = &setup,
        .launcher_info_fd = -1,
    };

    child_setup_init(&setup);
    SbxChild *child = sbx_child_spawn(argv, &fds, "the tool program", error);
    if (child == NULL) {
        return NULL;
    }
    ret_pipes->in = g_unix_output_stream_new(in, TRUE);
    ret_pipes->out = g_unix_input_stream_new(out, TRUE);
    ret_pipes->err = g_unix_input_stream_new(err, TRUE);
    return child;
}

void sbx_tool_pipes_clear(SbxToolPipes *pipes)
{
    g_clear_object(&pipes->in);
    g_clear_object(&pipes->out);
    g_clear_object(&pipes->err);
}
