/*
 * `sandbox serve [--socket PATH] [--pool N] [--profile NAME]...`: a long-lived host agent that
 * keeps a warm pool of restored VMs per machine profile and runs requests on them: `sandbox
 * run`'s over a Unix socket only its owner can reach (docs/pool.md), and with --listen the HTTP
 * API's for tenants (docs/api.md). This file parses the
 * options, makes the server (server/server.h) and its front ends, and stops them on a signal.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "prestart.h"
#include "server/http.h"
#include "server/path.h"
#include "server/retention.h"
#include "server/server.h"
#include "server/unix.h"

/* Default pool size: two ready VMs cover back-to-back requests while a third restores. */
#define SERVE_POOL_DEFAULT 2

/*
 * Largest sum of the pools' sizes over all the profiles: each pooled VM holds ~117 MB of RAM
 * copy plus QEMU's own memory, whichever profile it is of.
 */
#define SERVE_POOL_MAX 32

/*
 * Default pre-started QEMUs: one covers the restore of a burst's or an empty pool's first
 * request; more hold more memory (a RAM copy each) for a rarer case.
 */
#define SERVE_PRESTART_DEFAULT 1

/*
 * The restore default (as for `sandbox run`): virtio-serial, in the snapshot with copy-on-write
 * RAM (docs/snapshot.md "Channel attachments"). The pool of a server started without --profile.
 */
#define SERVE_PROFILE_DEFAULT "q35-serial"

/* A shutdown waits at most this long for runs to end (they were aborted: milliseconds). */
#define SERVE_SHUTDOWN_GRACE_MS 5000

/*
 * Records kept by default (docs/service.md, "Retention"): a month answers "what ran last
 * week?" and an audit's usual window; 100000 records bound the file (each holds at most 2 MiB
 * of output, most a few KiB) for a busy server. An operator with other rules sets both.
 */
#define SERVE_KEEP_DAYS_DEFAULT 30
#define SERVE_KEEP_RECORDS_DEFAULT 100000

/*
 * The bytes of finished records kept by default, in MiB (--keep-mib; docs/service.md,
 * "Retention"): the count alone lets a tenant whose every record carries 2 MiB of output and
 * large texts fill hundreds of GiB within a month. 4 GiB holds the default 100000 records at
 * 40 KiB each (most are a few KiB, so the count or the age comes first for usual work), or some
 * 2000 that each carry the 2 MiB of output, and is a small share of a host's disk beside its images
 * and snapshots; the file holds at most about a tenth more between prunes (server/retention.h).
 */
#define SERVE_KEEP_MIB_DEFAULT 4096

/* A retention option not given (its default then): no value a person types, so that -1 given
 * is refused as any negative. */
#define SERVE_KEEP_UNSET G_MININT64

/* Sessions a server may hold (--max-sessions): each is a VM kept in RAM, ~200-300 MB with its
 * QEMU; 256 is already far more than a host of this size holds. */
#define SERVE_MAX_SESSIONS_MAX 256

typedef struct {
    SbxCli *cli;
    char *socket_opt;
    char **profile_names; /* --profile, in order; NULL: SERVE_PROFILE_DEFAULT */
    char **pool_opts;     /* --pool N (every profile) and --pool NAME=N (one), as given */
    char **prestart_opts; /* --prestart, the same way */
    /* Per profile, in the order of pooled_names(), from the two above. */
    guint pool_sizes[SBX_SERVER_PROFILES_MAX];
    guint prestarts[SBX_SERVER_PROFILES_MAX];
    gboolean no_warm_up;
    char *listen;
    char *tls_cert;
    char *tls_key;
    char *catalogs_dir;
    char *db_path;
    gint64 keep_days;    /* records' retention: SERVE_KEEP_UNSET the default */
    gint64 keep_records; /* the same */
    gint64 keep_mib;     /* the same */
    gint max_sessions;   /* 0: SBX_SERVER_SESSIONS_MAX */
    char *socket_path;
    SbxStore *store; /* every run's record; the tenants of the HTTP API */
    SbxRetention *retention;
    SbxServer *server;
    SbxUnixFront *unix_front;
    SbxHttpFront *http_front;
    guint grace_source;
} ServeCli;

static ServeCli *serve_ctx;

/* ---- shutdown ----------------------------------------------------------------------------- */

static void on_drained(gpointer data)
{
    ServeCli *srv = data;

    g_clear_handle_id(&srv->grace_source, g_source_remove);
    sbx_cli_quit(srv->cli, 0);
}

static gboolean grace_over(gpointer data)
{
    ServeCli *srv = data;

    srv->grace_source = 0;
    sbx_cli_quit(srv->cli, 0); /* cleanup frees what is left */
    return G_SOURCE_REMOVE;
}

/* SIGTERM/SIGINT: stop accepting, end every run (their VMs are killed), free the pools. */
static void on_signal(SbxCli *cli, gpointer data)
{
    ServeCli *srv = data;
    (void)cli;

    sbx_unix_front_close(srv->unix_front);
    if (srv->http_front != NULL) {
        sbx_http_front_close(srv->http_front);
    }
    srv->grace_source = g_timeout_add(SERVE_SHUTDOWN_GRACE_MS, grace_over, srv);
    sbx_server_shutdown(srv->server, on_drained, srv);
}

/* ---- options ------------------------------------------------------------------------------ */

/* The pooled profiles' names, in order: --profile's, or the default. */
static const char *const *pooled_names(const ServeCli *srv)
{
    static const char *const fallback[] = {SERVE_PROFILE_DEFAULT, NULL};

    return srv->profile_names != NULL ? (const char *const *)srv->profile_names : fallback;
}

static gboolean bad_value(GError **error, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static gboolean bad_value(GError **error, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error_literal(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, msg);
    return FALSE;
}

/*
 * An option given as N (every pooled profile) and NAME=N (the pooled profile NAME; each form
 * at most once per profile), e.g. --pool: the values into @sizes, in the order of
 * pooled_names(), @dflt where none applies. Each value and their sum are at most @max: the
 * memory they bound is the server's, whatever the profile.
 */
static gboolean parse_sizes(const ServeCli *srv, const char *option, char **opts, guint dflt,
                            guint max, guint *sizes, GError **error)
{
    const char *const *names = pooled_names(srv);
    guint n = g_strv_length((char **)names);
    guint64 every = dflt, one[SBX_SERVER_PROFILES_MAX], total = 0;
    gboolean every_given = FALSE, given[SBX_SERVER_PROFILES_MAX] = {FALSE};

    for (char **o = opts; o != NULL && *o != NULL; o++) {
        const char *eq = strchr(*o, '=');
        g_autofree char *name = eq != NULL ? g_strndup(*o, (gsize)(eq - *o)) : NULL;
        guint64 v;
        guint i = 0;

        if (!g_ascii_string_to_unsigned(eq != NULL ? eq + 1 : *o, 10, 0, max, &v, NULL))
            return bad_value(error, "%s %s: not a number from 0 to %u", option, *o, max);
        if (name == NULL) {
            if (every_given)
                return bad_value(error, "%s N given twice", option);
            every_given = TRUE;
            every = v;
            continue;
        }
        while (i < n && strcmp(names[i], name) != 0)
            i++;
        if (i == n)
            return bad_value(error, "%s %s: \"%s\" is not a pooled profile (--profile)", option, *o,
                             name);
        if (given[i])
            return bad_value(error, "%s %s=N given twice", option, name);
        given[i] = TRUE;
        one[i] = v;
    }
    for (guint i = 0; i < n; i++) {
        sizes[i] = (guint)(given[i] ? one[i] : every);
        total += sizes[i];
    }
    if (total > max)
        return bad_value(error, "%s: %" G_GUINT64_FORMAT " over all the profiles, at most %u",
                         option, total, max);
    return TRUE;
}

static gboolean parse_options(ServeCli *srv, int argc, char **argv, GError **error)
{
    const GOptionEntry entries[] = {
        {"socket", 's', 0, G_OPTION_ARG_FILENAME, &srv->socket_opt,
         "Unix socket (default: $XDG_RUNTIME_DIR/sandbox/sandbox.sock)", "PATH"},
        {"pool", 'n', 0, G_OPTION_ARG_STRING_ARRAY, &srv->pool_opts,
         "VMs kept ready: N for every profile (default: 2), NAME=N for one (repeatable)",
         "[NAME=]N"},
        {"profile", 'p', 0, G_OPTION_ARG_STRING_ARRAY, &srv->profile_names,
         "Machine profile of a pool (repeat for more; the first serves requests without one; "
         "default: " SERVE_PROFILE_DEFAULT ")",
         "NAME"},
        {"prestart", 'q', 0, G_OPTION_ARG_STRING_ARRAY, &srv->prestart_opts,
         "QEMUs kept started for restores on demand: N for every profile (default: 1), NAME=N "
         "for one (repeatable)",
         "[NAME=]N"},
        {"listen", 'l', 0, G_OPTION_ARG_STRING, &srv->listen,
         "Serve the HTTP API for tenants on ADDR:PORT (docs/api.md)", "ADDR:PORT"},
        {"tls-cert", 0, 0, G_OPTION_ARG_FILENAME, &srv->tls_cert,
         "HTTPS with this PEM certificate (with --tls-key)", "FILE"},
        {"tls-key", 0, 0, G_OPTION_ARG_FILENAME, &srv->tls_key, "The certificate's PEM key",
         "FILE"},
        {"catalogs-dir", 0, 0, G_OPTION_ARG_FILENAME, &srv->catalogs_dir,
         "The tool catalogs tenants may name (NAME.json)", "DIR"},
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &srv->db_path,
         "The store of records and tenants (default: sandbox.db in the state directory)", "PATH"},
        {"keep-days", 0, 0, G_OPTION_ARG_INT64, &srv->keep_days,
         "Delete finished records older than DAYS (default: 30; 0: keep them)", "DAYS"},
        {"keep-records", 0, 0, G_OPTION_ARG_INT64, &srv->keep_records,
         "Keep at most N finished records, the newest (default: 100000; 0: no bound)", "N"},
        {"keep-mib", 0, 0, G_OPTION_ARG_INT64, &srv->keep_mib,
         "Keep at most N MiB of finished records, the newest (default: 4096; 0: no bound)", "N"},
        {"max-sessions", 0, 0, G_OPTION_ARG_INT, &srv->max_sessions,
         "Sessions open at once over all tenants (default: 16; docs/sessions.md)", "N"},
        {"no-warm-up", 0, 0, G_OPTION_ARG_NONE, &srv->no_warm_up,
         "Offer pooled VMs without the runners' warm-up after the restore (for comparison)", NULL},
        G_OPTION_ENTRY_NULL,
    };
    g_autoptr(GOptionContext) oc =
        g_option_context_new("- keep a warm pool of VMs and serve `sandbox run`");
    g_set_prgname("sandbox serve");
    g_option_context_add_main_entries(oc, entries, NULL);
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    gint n = srv->profile_names != NULL ? (gint)g_strv_length(srv->profile_names) : 1;
    /* parse_sizes() below relies on this bound (and caps --pool and --prestart itself). */
    if (argc != 1 || n > SBX_SERVER_PROFILES_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "usage: sandbox serve [--socket PATH] [--db PATH] [--listen ADDR:PORT] "
                    "[--tls-cert FILE --tls-key FILE] [--catalogs-dir DIR] [--keep-days DAYS] "
                    "[--keep-records N] [--keep-mib N] [--max-sessions N] [--pool [NAME=]N]... "
                    "[--prestart [NAME=]N]... [--profile NAME]... [--no-warm-up] (up to %d "
                    "profiles)",
                    SBX_SERVER_PROFILES_MAX);
        return FALSE;
    }
    for (gint i = 0; i < n && srv->profile_names != NULL; i++) {
        if (g_strv_contains((const char *const *)srv->profile_names + i + 1,
                            srv->profile_names[i])) {
            g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                        "profile \"%s\" given twice", srv->profile_names[i]);
            return FALSE;
        }
    }
    if (!parse_sizes(srv, "--pool", srv->pool_opts, SERVE_POOL_DEFAULT, SERVE_POOL_MAX,
                     srv->pool_sizes, error) ||
        !parse_sizes(srv, "--prestart", srv->prestart_opts, SERVE_PRESTART_DEFAULT,
                     SBX_PRESTART_MAX, srv->prestarts, error))
        return FALSE;
    if (srv->keep_days == SERVE_KEEP_UNSET) {
        srv->keep_days = SERVE_KEEP_DAYS_DEFAULT;
    }
    if (srv->keep_records == SERVE_KEEP_UNSET) {
        srv->keep_records = SERVE_KEEP_RECORDS_DEFAULT;
    }
    if (srv->keep_mib == SERVE_KEEP_UNSET) {
        srv->keep_mib = SERVE_KEEP_MIB_DEFAULT;
    }
    if (srv->keep_days < 0 || srv->keep_days > SBX_RECORDS_AGE_MAX_DAYS || srv->keep_records < 0 ||
        srv->keep_mib < 0 || srv->keep_mib > SBX_RECORDS_MIB_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "--keep-days: 0 to %d; --keep-records: 0 or more; --keep-mib: 0 to %d",
                    SBX_RECORDS_AGE_MAX_DAYS, SBX_RECORDS_MIB_MAX);
        return FALSE;
    }
    if (srv->max_sessions < 0 || srv->max_sessions > SERVE_MAX_SESSIONS_MAX) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "--max-sessions: 0 to %d",
                    SERVE_MAX_SESSIONS_MAX);
        return FALSE;
    }
    srv->socket_path = sbx_serve_socket_path(srv->socket_opt);
    return TRUE;
}

static void on_make_snapshot(const char *dir, gpointer data)
{
    (void)data;
    fprintf(stderr, "sandbox serve: making the snapshot (once per image and profile): %s\n", dir);
}

/* The server and its front ends; errors are the sandbox's (125). */
static gboolean start_server(ServeCli *srv, GError **error)
{
    const char *const *names = pooled_names(srv);
    SbxServerProfileConfig profiles[SBX_SERVER_PROFILES_MAX];
    g_autofree char *db = srv->db_path != NULL ? g_strdup(srv->db_path) : sbx_store_default_path();
    SbxServerConfig config = {
        .profiles = profiles,
        .n_profiles = g_strv_length((char **)names),
        .no_warm_up = srv->no_warm_up,
        .max_sessions = (guint)srv->max_sessions,
        .on_make_snapshot = on_make_snapshot,
    };

    for (guint i = 0; i < config.n_profiles; i++) {
        profiles[i] = (SbxServerProfileConfig){
            .name = names[i], .pool_size = srv->pool_sizes[i], .prestart = srv->prestarts[i]};
    }
    /* Executions a killed server left are marked interrupted here (docs/service.md). */
    srv->store = sbx_store_open(db, error);
    if (srv->store == NULL) {
        return FALSE;
    }
    config.store = srv->store;
    srv->retention =
        sbx_retention_start(srv->store, (guint64)srv->keep_days * 86400, (guint64)srv->keep_records,
                            (guint64)srv->keep_mib * 1024 * 1024);
    srv->server = sbx_server_new(&config, error);
    if (srv->server == NULL) {
        return FALSE;
    }
    srv->unix_front = sbx_unix_front_new(srv->server, srv->socket_path, error);
    if (srv->unix_front == NULL || srv->listen == NULL) {
        return srv->unix_front != NULL;
    }
    SbxHttpConfig http = {
        .listen = srv->listen,
        .tls_cert = srv->tls_cert,
        .tls_key = srv->tls_key,
        .catalogs_dir = srv->catalogs_dir,
        .store = srv->store,
    };
    srv->http_front = sbx_http_front_new(srv->server, &http, error);
    if (srv->http_front == NULL) {
        return FALSE;
    }
    fprintf(stderr, "sandbox serve: HTTP API on %s://%s (port %u)\n",
            srv->tls_cert != NULL ? "https" : "http", srv->listen,
            sbx_http_front_port(srv->http_front));
    return TRUE;
}

static int serve_start(SbxCli *cli, int argc, char **argv)
{
    g_autoptr(GError) error = NULL;
    ServeCli *srv = serve_ctx = g_new0(ServeCli, 1);

    srv->cli = cli;
    srv->keep_days = srv->keep_records = srv->keep_mib = SERVE_KEEP_UNSET;
    if (!parse_options(srv, argc, argv, &error)) {
        fprintf(stderr, "sandbox serve: %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    if (!start_server(srv, &error)) {
        fprintf(stderr, "sandbox serve: %s\n", error->message);
        return SBX_EXIT_SANDBOX;
    }
    g_autoptr(GString) names = g_string_new(NULL);
    for (guint i = 0; i < sbx_server_n_profiles(srv->server); i++) {
        g_string_append_printf(names, "%s%s %u", i > 0 ? ", " : "",
                               sbx_server_profile_name(srv->server, i), srv->pool_sizes[i]);
    }
    cli->on_signal = on_signal;
    cli->data = srv;
    fprintf(stderr, "sandbox serve: listening on %s (VMs kept ready: %s)\n", srv->socket_path,
            names->str);
    return -1;
}

static void serve_cleanup(SbxCli *cli)
{
    ServeCli *srv = serve_ctx;
    (void)cli;

    if (srv == NULL) {
        return;
    }
    sbx_http_front_free(srv->http_front); /* its executions' jobs are detached */
    sbx_unix_front_free(srv->unix_front); /* its connections' runs are abandoned */
    sbx_server_free(srv->server);         /* jobs left after the grace: their VMs killed now */
    g_clear_handle_id(&srv->grace_source, g_source_remove);
    sbx_retention_free(srv->retention);
    sbx_store_close(srv->store); /* after the jobs: their records are written */
    g_free(srv->listen);
    g_free(srv->tls_cert);
    g_free(srv->tls_key);
    g_free(srv->catalogs_dir);
    g_free(srv->db_path);
    g_free(srv->socket_opt);
    g_strfreev(srv->profile_names);
    g_strfreev(srv->pool_opts);
    g_strfreev(srv->prestart_opts);
    g_free(srv->socket_path);
    g_free(srv);
    serve_ctx = NULL;
}

const SbxCliVerb sbx_cli_verb_serve = {
    .name = "serve",
    .summary = "Keep a warm pool of VMs and serve `sandbox run` on a Unix socket",
    .start = serve_start,
    .cleanup = serve_cleanup,
};
