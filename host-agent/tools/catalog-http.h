/*
 * Kind `http` of the tool catalog (docs/tools.md, "The http provider"): the fields of an http
 * provider and of its tools, how a call's input becomes a request (URL template, query or
 * JSON body), and the `${secret:NAME}` references of header values. Pure: no I/O.
 */
#pragma once

#include <cJSON.h>
#include <glib.h>

#include "catalog.h"

/* URL template: longer URLs are refused by many servers anyway (8 KiB is a common limit). */
#define SBX_HTTP_URL_TEMPLATE_MAX 4096

/* Headers of one endpoint (provider-wide or per tool): configuration, not data. */
#define SBX_HTTP_HEADERS_MAX 64
#define SBX_HTTP_HEADER_NAME_MAX 256
#define SBX_HTTP_HEADER_VALUE_MAX 8192

/* A placeholder name (`{owner}`) or a secret name (`${secret:TOKEN}`). */
#define SBX_HTTP_NAME_MAX 128

/*
 * A request URL after the input is filled in: the template plus the query from the input. The
 * input may be 1 MiB, but servers refuse URLs far shorter; 64 KiB keeps a wrong method (a big
 * input sent as GET) a clear error rather than a confusing one from the server.
 */
#define SBX_HTTP_URL_MAX (64 * 1024)

struct SbxHttpEndpoint {
    char *method;         /* GET, POST, PUT, PATCH, DELETE; NULL for provider-wide headers */
    char *url;            /* template, e.g. https://api.example.com/repos/{owner}/{repo}; or NULL */
    char **header_names;  /* NULL-terminated, as written */
    char **header_values; /* templates: literal text and ${secret:NAME} */
    gsize n_headers;
};

/* Fields of an http provider, and of one of its tools (NULL-terminated). */
extern const char *const sbx_catalog_http_provider_fields[];
extern const char *const sbx_catalog_http_tool_fields[];

/** The provider-wide fields of http provider @obj ("headers") into @prov->http. */
gboolean sbx_catalog_http_parse_provider(const cJSON *obj, SbxCatalogProvider *prov,
                                         const char *origin, const char *where, GError **error);

/** The endpoint of http tool @obj ("method", "url", "headers") into @tool->http. */
gboolean sbx_catalog_http_parse_tool(const cJSON *obj, SbxCatalogTool *tool, const char *origin,
                                     const char *where, GError **error);

/** Free @ep. Accepts NULL. */
void sbx_http_endpoint_free(SbxHttpEndpoint *ep);

/** The method sends the rest of the input as a JSON body (POST, PUT, PATCH), not a query. */
gboolean sbx_http_method_has_body(const char *method);

/**
 * Build the request of a call of @ep with @input_json (compact JSON, untrusted): *@ret_url is
 * the template with each `{name}` replaced by the input's member `name` (percent-encoded), plus,
 * for GET and DELETE, the other members as the query; *@ret_body (POST, PUT, PATCH) is the
 * other members as a JSON object, else NULL. An input that does not fit fails with an
 * SBX_TOOL_ERROR SBX_ERR_VALIDATION naming the member.
 */
gboolean sbx_http_build_request(const SbxHttpEndpoint *ep, const char *input_json, char **ret_url,
                                char **ret_body, GError **error);

/**
 * Replace each `${secret:NAME}` of @value_template with lookup(NAME). A lookup that fails
 * (NULL and @error set) fails the expansion. The result is what the header carries.
 */
typedef char *(*SbxSecretLookup)(const char *name, gpointer data, GError **error);
char *sbx_http_expand_secrets(const char *value_template, SbxSecretLookup lookup, gpointer data,
                              GError **error);
