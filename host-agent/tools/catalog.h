/*
 * The tool catalog: a JSON file (`sandbox run --tools FILE`) listing providers and their tools.
 * Format and rules: docs/tools.md. Every field is validated; an error names the file and the
 * field (`tools.json: providers.github.tools.search.timeout_ms: expected an integer ...`).
 * Unknown fields are errors, so a typo does not silently disable a setting.
 */
#pragma once

#include <glib.h>

#include "namespace.h"
#include "policy.h"
#include "schema.h"

/*
 * Largest catalog file. A catalog is configuration: SBX_TOOLS_MAX tools with a description and
 * a modest schema each is well under 1 MiB. The size is checked before the file is read.
 */
#define SBX_CATALOG_FILE_MAX (1024 * 1024)

/* Tool description: every description goes to the guest in `execute`, so keep them short. */
#define SBX_CATALOG_DESCRIPTION_MAX (4 * 1024)

/* A tool's input (or output) schema, compact JSON. Generous for real-world JSON Schemas. */
#define SBX_CATALOG_SCHEMA_MAX (64 * 1024)

/* Arguments of a command provider and the length of each (PATH_MAX). */
#define SBX_CATALOG_ARGV_MAX 256
#define SBX_CATALOG_ARG_LEN_MAX 4096

/*
 * Per-call timeout of a provider, milliseconds: default 10 s (a local command that takes longer
 * is unusual), at most 10 minutes (no execution is allowed to run that long anyway).
 */
#define SBX_CATALOG_TIMEOUT_DEFAULT_MS 10000
#define SBX_CATALOG_TIMEOUT_MAX_MS (10 * 60 * 1000)

/*
 * An MCP provider's server start-up (spawn or connect, initialize, list its tools): default
 * 20 s (npx fetching a package on first use is slow), at most SBX_CATALOG_TIMEOUT_MAX_MS.
 */
#define SBX_CATALOG_STARTUP_TIMEOUT_DEFAULT_MS 20000

/*
 * Environment variables of a tool process (`env`, and `env_pass` names) and HTTP headers of an
 * MCP provider: configuration, not data.
 */
#define SBX_CATALOG_ENV_MAX 256
#define SBX_CATALOG_HEADERS_MAX 64

/*
 * Variables of this prefix hold the http provider's secrets (secrets.h): no tool process ever
 * gets one, and a catalog that names one in `env` or `env_pass` is refused.
 */
#define SBX_CATALOG_SECRET_ENV_PREFIX "SANDBOX_SECRET_"

typedef enum {
    SBX_PROVIDER_COMMAND, /* a local program: one process per call, JSON on stdin/stdout */
    SBX_PROVIDER_MCP,     /* an MCP server: stdio child process or streamable HTTP endpoint */
    SBX_PROVIDER_HTTP,    /* a JSON endpoint per tool (catalog-http.h) */
} SbxProviderKind;

typedef struct SbxHttpEndpoint SbxHttpEndpoint; /* catalog-http.h */

typedef struct {
    char *name;               /* real name, as in the file */
    char *description;        /* optional */
    char *input_schema_json;  /* optional: compact JSON object */
    char *output_schema_json; /* optional: compact JSON object */
    SbxSchema *input_schema;  /* compiled input_schema_json, or NULL (anything goes) */
    SbxSchema *output_schema; /* compiled output_schema_json, or NULL */
    gboolean destructive;     /* MCP annotations.destructiveHint (policy: approve by default) */
    SbxHttpEndpoint *http;    /* kind http: method, URL template, headers */
} SbxCatalogTool;

typedef struct {
    char *name; /* real name, as in the file */
    SbxProviderKind kind;
    char **command; /* kind command: argv (NULL-terminated); argv[0] made absolute if relative */
    char *workdir;  /* kind command: working directory (the catalog file's directory) */
    /*
     * kind command and mcp stdio: the process's environment beyond the allow-list (child.h):
     * "NAME=value" entries (`env`), and names of host variables passed on (`env_pass`); NULL if
     * none. Never a SBX_CATALOG_SECRET_ENV_PREFIX name, never a name in both.
     */
    char **env;
    char **env_pass;
    guint timeout_ms;      /* per call */
    SbxHttpEndpoint *http; /* kind http: headers of every tool (method and url unset) */
    SbxCatalogTool *tools; /* kind mcp: empty until the server listed them (tools.c) */
    gsize n_tools;
    /* kind mcp (parse_mcp_provider): `command` (stdio, with `env`) or `url` (streamable HTTP) */
    char *url;                /* streamable HTTP endpoint, or NULL */
    char **headers;           /* HTTP: name, value, name, value, ... (NULL-terminated), or NULL */
    guint startup_timeout_ms; /* start, initialize and list */
    char **only_tools;        /* `tools`: expose only these listed tools, or NULL (all) */
} SbxCatalogProvider;

typedef struct {
    char *origin; /* file name used in messages */
    SbxCatalogProvider *providers;
    gsize n_providers;
    SbxPolicy policy; /* the "policy" section (defaults when absent) */
} SbxCatalog;

/** Read and validate the catalog file @path. */
SbxCatalog *sbx_catalog_load(const char *path, GError **error);

/**
 * Validate catalog text @text (@len bytes). @origin names it in error messages; relative
 * command paths are resolved against @base_dir (and commands run there).
 */
SbxCatalog *sbx_catalog_parse(const char *text, gsize len, const char *origin, const char *base_dir,
                              GError **error);

/**
 * Fill @ns (new, empty) with the catalog's providers and tools: the identifiers guest code
 * uses. Errors (a name no identifier can stand for) start with the catalog's origin.
 */
gboolean sbx_catalog_build_namespace(const SbxCatalog *catalog, SbxNamespace *ns, GError **error);

/** A catalog with no providers (`sandbox run` without --tools). */
SbxCatalog *sbx_catalog_new_empty(void);

/** Free @n tools of @tools (an array, as discovered from an MCP server). Accepts NULL. */
void sbx_catalog_tools_free(SbxCatalogTool *tools, gsize n);

/** Free @catalog. Accepts NULL. */
void sbx_catalog_free(SbxCatalog *catalog);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxCatalog, sbx_catalog_free)
