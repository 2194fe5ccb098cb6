/*
 * `sandbox tenant add|list|remove|rotate-key|set` (docs/service.md, "Tenants and API keys"): the
 * operator's commands on the tenants of the store. An API key is printed once, to stdout, when
 * it is made (add, rotate-key); the store keeps only its hash. `set` changes quotas.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/store-open.h"
#include "store/tenants.h"

#define VERB "sandbox tenant"

typedef struct {
    char *db;
    gboolean json;
    char *max_concurrent;
    char *per_minute;
    char *max_timeout;
    char *max_output;
    char *max_sessions;
    char *max_session_memory;
    char **catalogs;
} TenantOpts;

/* The subcommands, in the order of their names. */
typedef enum { SUB_ADD, SUB_LIST, SUB_REMOVE, SUB_ROTATE, SUB_SET } TenantSub;
static const char *const SUB_NAMES[] = {"add", "list", "remove", "rotate-key", "set"};

static void opts_clear(TenantOpts *o)
{
    g_free(o->db);
    g_free(o->max_concurrent);
    g_free(o->per_minute);
    g_free(o->max_timeout);
    g_free(o->max_output);
    g_free(o->max_sessions);
    g_free(o->max_session_memory);
    g_strfreev(o->catalogs);
}

/*
 * @s as a whole number from 1 to @max into *@ret; @sizes: with a K, M or G suffix (powers of
 * 1024). NULL: *@ret stays 0 (the default).
 */
static gboolean parse_number(const char *opt, const char *s, guint64 max, gboolean sizes,
                             guint64 *ret, GError **error)
{
    char *end = NULL;
    guint64 mult = 1;

    if (s == NULL) {
        return TRUE;
    }
    guint64 v = g_ascii_isdigit(*s) ? g_ascii_strtoull(s, &end, 10) : 0;
    if (sizes && end != NULL && *end != '\0' && end[1] == '\0') {
        const char *units = "KMG";
        const char *u = strchr(units, *end);
        mult = u != NULL ? 1ull << (10 * (u - units + 1)) : 0;
        end += u != NULL ? 1 : 0;
    }
    if (end == NULL || *end != '\0' || v == 0 || mult == 0 || v > max / mult) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                    "%s: expected 1 to %" G_GUINT64_FORMAT "%s", opt, max,
                    sizes ? " bytes (suffixes K, M, G allowed)" : "");
        return FALSE;
    }
    *ret = v * mult;
    return TRUE;
}

/* The quotas given in @o into *@q; 0 in each not given. */
static gboolean parse_quotas(const TenantOpts *o, SbxTenantQuotas *q, GError **error)
{
    guint64 conc = 0, per_min = 0, timeout_s = 0, output = 0, sessions = 0, memory = 0;

    if (!parse_number("--max-concurrent", o->max_concurrent, SBX_TENANT_CONCURRENT_MAX, FALSE,
                      &conc, error) ||
        !parse_number("--per-minute", o->per_minute, SBX_TENANT_PER_MINUTE_MAX, FALSE, &per_min,
                      error) ||
        !parse_number("--max-timeout", o->max_timeout, SBX_TENANT_TIMEOUT_MAX_MS / 1000, FALSE,
                      &timeout_s, error) ||
        !parse_number("--max-output", o->max_output, SBX_TENANT_OUTPUT_MAX, TRUE, &output, error) ||
        !parse_number("--max-sessions", o->max_sessions, SBX_TENANT_SESSIONS_MAX, FALSE, &sessions,
                      error) ||
        !parse_number("--max-session-memory", o->max_session_memory,
                      SBX_TENANT_SESSION_MEMORY_MAX_MIB, FALSE, &memory, error)) {
        return FALSE;
    }
    *q = (SbxTenantQuotas){.max_concurrent = (guint)conc,
                           .max_per_minute = (guint)per_min,
                           .max_timeout_ms = timeout_s * 1000,
                           .max_output_bytes = output,
                           .max_sessions = (guint)sessions,
                           .max_session_memory_mib = memory};
    return TRUE;
}

/* @q's fields that are not 0 over @base's: what `set` was given over what the tenant has. */
static SbxTenantQuotas quotas_over(SbxTenantQuotas base, const SbxTenantQuotas *q)
{
#define OVER(field) base.field = q->field != 0 ? q->field : base.field
    OVER(max_concurrent);
    OVER(max_per_minute);
    OVER(max_timeout_ms);
    OVER(max_output_bytes);
    OVER(max_sessions);
    OVER(max_session_memory_mib);
#undef OVER
    return base;
}

/*
 * Parse the options of subcommand @sub (argv[0]) into @o; *@ret_name: its one NAME argument
 * (every subcommand but list has one).
 */
static gboolean parse(int argc, char **argv, TenantSub sub, TenantOpts *o, char **ret_name,
                      GError **error)
{
    gboolean want_name = sub != SUB_LIST, quotas = sub == SUB_ADD || sub == SUB_SET;
    const GOptionEntry common[] = {
        {"db", 0, 0, G_OPTION_ARG_FILENAME, &o->db, "The store (default: docs/service.md)", "PATH"},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry list_entries[] = {
        {"json", 0, 0, G_OPTION_ARG_NONE, &o->json, "One JSON array of tenants", NULL},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry quota_entries[] = {
        {"max-concurrent", 0, 0, G_OPTION_ARG_STRING, &o->max_concurrent,
         "Executions at once (default 2)", "N"},
        {"per-minute", 0, 0, G_OPTION_ARG_STRING, &o->per_minute,
         "Executions started per minute (default 60)", "N"},
        {"max-timeout", 0, 0, G_OPTION_ARG_STRING, &o->max_timeout,
         "Longest timeout it may ask for, in seconds (default 300)", "S"},
        {"max-output", 0, 0, G_OPTION_ARG_STRING, &o->max_output,
         "Largest output limit it may ask for (default 10M)", "BYTES"},
        {"max-sessions", 0, 0, G_OPTION_ARG_STRING, &o->max_sessions,
         "Sessions open at once (default 2)", "N"},
        {"max-session-memory", 0, 0, G_OPTION_ARG_STRING, &o->max_session_memory,
         "Memory of its open sessions' VMs together, in MiB (default 1024)", "MIB"},
        G_OPTION_ENTRY_NULL,
    };
    const GOptionEntry add_entries[] = {
        {"catalog", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->catalogs,
         "A tool catalog it may name (repeat for more)", "NAME"},
        G_OPTION_ENTRY_NULL,
    };
    g_autofree char *prgname = g_strdup_printf(VERB " %s", argv[0]);
    g_autoptr(GOptionContext) oc = g_option_context_new(want_name ? "NAME" : NULL);
    g_set_prgname(prgname);
    g_option_context_add_main_entries(oc, common, NULL);
    g_option_context_add_main_entries(oc, quotas ? quota_entries : list_entries, NULL);
    if (sub == SUB_ADD) {
        g_option_context_add_main_entries(oc, add_entries, NULL);
    }
    g_option_context_set_description(
        oc, "Exit status: 0, 1 if the store refuses or fails, 2 for invalid usage.\n");
    if (!g_option_context_parse(oc, &argc, &argv, error)) {
        return FALSE;
    }
    if (argc != (want_name ? 2 : 1)) {
        g_set_error(error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED, "expected %s; see `%s --help`",
                    want_name ? "one NAME" : "no argument", prgname);
        return FALSE;
    }
    *ret_name = want_name ? g_strdup(argv[1]) : NULL;
    return TRUE;
}

/* Print a key made just now, once: stdout gets the key alone, for a script to take. */
static int print_key(const char *name, char *key)
{
    printf("%s\n", key);
    fprintf(stderr,
            VERB ": the API key of \"%s\" is above; it is not shown again (the store keeps its "
                 "hash only)\n",
            name);
    explicit_bzero(key, strlen(key));
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

static int do_add(SbxStore *store, const char *name, const TenantOpts *o)
{
    SbxTenantQuotas q;
    g_autoptr(GError) error = NULL;
    g_autofree char *key = NULL;

    if (!parse_quotas(o, &q, &error)) {
        fprintf(stderr, VERB ": %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    if (!sbx_tenant_add(store, name, &q, o->catalogs, &key, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    return print_key(name, key);
}

/* `set`: the quotas given replace the tenant's, the others stay. */
static int do_set(SbxStore *store, const char *name, const TenantOpts *o)
{
    SbxTenantQuotas q;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxTenant) t = NULL;

    if (!parse_quotas(o, &q, &error)) {
        fprintf(stderr, VERB ": %s\n", error->message);
        return SBX_EXIT_USAGE;
    }
    if (q.max_concurrent == 0 && q.max_per_minute == 0 && q.max_timeout_ms == 0 &&
        q.max_output_bytes == 0 && q.max_sessions == 0 && q.max_session_memory_mib == 0) {
        fprintf(stderr, VERB ": expected a quota to set; see `" VERB " set --help`\n");
        return SBX_EXIT_USAGE;
    }
    if (!sbx_tenant_get(store, name, &t, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    SbxTenantQuotas next = quotas_over(t->quotas, &q);
    if (!sbx_tenant_set_quotas(store, t->id, &next, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    fprintf(stderr, VERB ": quotas of \"%s\" set\n", name);
    return 0;
}

static void print_tenant(const SbxTenant *t)
{
    g_autofree char *catalogs = g_strjoinv(",", t->catalogs);

    printf("%s\t%s\t%s...\t%u\t%u/min\t%" G_GUINT64_FORMAT " s\t%" G_GUINT64_FORMAT
           " bytes\t%u\t%" G_GUINT64_FORMAT " MiB\t%s\n",
           t->name, t->id, t->key_prefix, t->quotas.max_concurrent, t->quotas.max_per_minute,
           t->quotas.max_timeout_ms / 1000, t->quotas.max_output_bytes, t->quotas.max_sessions,
           t->quotas.max_session_memory_mib, *catalogs != '\0' ? catalogs : "-");
}

static int do_list(SbxStore *store, const TenantOpts *o)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) list = NULL;

    if (!sbx_tenant_list(store, &list, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    if (o->json) {
        printf("[");
    } else if (list->len > 0) {
        printf("NAME\tID\tKEY\tCONCURRENT\tRATE\tTIMEOUT\tOUTPUT\tSESSIONS\tSESSION MEMORY\t"
               "CATALOGS\n");
    }
    for (guint i = 0; i < list->len; i++) {
        if (o->json) {
            g_autofree char *json = sbx_tenant_to_json(g_ptr_array_index(list, i));
            printf("%s%s", i > 0 ? ",\n" : "\n", json);
        } else {
            print_tenant(g_ptr_array_index(list, i));
        }
    }
    if (o->json) {
        printf("\n]\n");
    }
    return fflush(stdout) == 0 ? 0 : SBX_EXIT_STORE;
}

static int do_remove(SbxStore *store, const char *name)
{
    g_autoptr(GError) error = NULL;

    if (!sbx_tenant_remove(store, name, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    fprintf(stderr, VERB ": removed \"%s\" (its execution records stay)\n", name);
    return 0;
}

static int do_rotate(SbxStore *store, const char *name)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *key = NULL;

    if (!sbx_tenant_rotate_key(store, name, &key, &error)) {
        return sbx_cli_store_fail(VERB, error);
    }
    return print_key(name, key);
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: " VERB " add NAME [QUOTA]... [--catalog NAME]...\n"
                 "       " VERB " set NAME QUOTA...\n"
                 "       " VERB " list [--json]\n"
                 "       " VERB " remove NAME\n"
                 "       " VERB " rotate-key NAME\n"
                 "QUOTA: --max-concurrent N, --per-minute N, --max-timeout S, --max-output BYTES, "
                 "--max-sessions N, --max-session-memory MIB (`set` changes those given).\n"
                 "Each takes --db PATH (the store; default $SANDBOX_STATE_DIR/sandbox.db, else "
                 "$XDG_STATE_HOME/sandbox/sandbox.db). `" VERB " SUBCOMMAND --help` for more.\n");
}

static int tenant_start(SbxCli *cli, int argc, char **argv)
{
    int rc = SBX_EXIT_USAGE;
    int sub = sbx_cli_subcommand(VERB, argc, argv, SUB_NAMES, G_N_ELEMENTS(SUB_NAMES), usage, &rc);

    (void)cli;
    if (sub < 0) {
        return rc;
    }
    TenantOpts o = {0};
    g_autofree char *name = NULL;
    g_autoptr(GError) error = NULL;
    if (!parse(argc - 1, argv + 1, (TenantSub)sub, &o, &name, &error)) {
        fprintf(stderr, VERB ": %s\n", error->message);
    } else {
        g_autoptr(SbxStore) store = sbx_cli_store_open(VERB, o.db);
        rc = store == NULL       ? SBX_EXIT_STORE
             : sub == SUB_ADD    ? do_add(store, name, &o)
             : sub == SUB_LIST   ? do_list(store, &o)
             : sub == SUB_REMOVE ? do_remove(store, name)
             : sub == SUB_ROTATE ? do_rotate(store, name)
                                 : do_set(store, name, &o);
    }
    opts_clear(&o);
    return rc;
}

const SbxCliVerb sbx_cli_verb_tenant = {
    .name = "tenant",
    .summary = "Add, list, remove tenants, set their quotas and rotate their API keys",
    .start = tenant_start,
};
