/*
 * Decoding the bodies of POST /v1/executions and /v1/sessions (http-request.h). The only file
 * of the HTTP API that looks into a client's JSON besides the approval decision.
 */
#include "server/http-request.h"

#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "exec/call.h"
#include "protocol/base64.h"
#include "protocol/json.h"
#include "protocol/limits.h"

G_DEFINE_AUTOPTR_CLEANUP_FUNC(cJSON, cJSON_Delete)

/* An optional integer member from 1 to @max into @out; FALSE if present and not one. */
static gboolean get_limit(const cJSON *body, const char *name, guint64 max, guint64 *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);
    int64_t n;

    if (v == NULL || cJSON_IsNull(v)) {
        return TRUE;
    }
    if (!sbx_json_int64(v, &n) || n < 1 || (guint64)n > max) {
        return FALSE;
    }
    *out = (guint64)n;
    return TRUE;
}

static char *check_members(const cJSON *body)
{
    static const char *const known[] = {"language", "code",       "entry",        "args", "kwargs",
                                        "catalog",  "timeout_ms", "output_limit", "files"};
    const cJSON *m;

    cJSON_ArrayForEach(m, body)
    {
        gboolean ok = FALSE;
        for (gsize i = 0; i < G_N_ELEMENTS(known); i++) {
            ok = ok || strcmp(m->string, known[i]) == 0;
        }
        if (!ok) {
            return g_strdup_printf("unknown member \"%s\"", m->string);
        }
    }
    return NULL;
}

/*
 * Member @name of @body (parsed from @text, @len bytes) as the text it was sent as, minified,
 * into *@ret: NULL when absent or null. FALSE when out of memory.
 */
static gboolean get_json_text(const char *text, gsize len, const cJSON *body, const char *name,
                              char **ret)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);

    if (v == NULL || cJSON_IsNull(v)) {
        return TRUE;
    }
    char *member = sbx_json_member_text(text, len, body, v);
    *ret = g_strdup(member);
    free(member);
    return *ret != NULL;
}

/* The function call (`entry`, `args`, `kwargs`: exec/call.h) into @req; NULL, or what is wrong. */
static char *check_call(const char *text, gsize len, const cJSON *body, SbxHttpCreate *req)
{
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(body, "entry");
    g_autofree char *args = NULL, *kwargs = NULL;

    if (entry != NULL && !cJSON_IsNull(entry) && !cJSON_IsString(entry)) {
        return g_strdup(SBX_EXEC_CALL_ENTRY_RULE);
    }
    if (!get_json_text(text, len, body, "args", &args) ||
        !get_json_text(text, len, body, "kwargs", &kwargs)) {
        return g_strdup("out of memory");
    }
    const char *name = cJSON_IsString(entry) ? entry->valuestring : NULL;
    const char *why = sbx_exec_call_check(req->language, name, args, kwargs);
    if (why != NULL) {
        return g_strdup(why);
    }
    req->entry = g_strdup(name);
    req->args_json = g_steal_pointer(&args);
    req->kwargs_json = g_steal_pointer(&kwargs);
    return NULL;
}

#define FILES_RULE                                                                                 \
    "files: an array of at most 64 {\"path\", and \"content\" (text) or \"content_base64\"}, "     \
    "4 MiB in all"

/* One file of `files` into @f; NULL, or what is wrong. @total: the bytes so far. */
static char *check_file(const cJSON *item, SbxExecFileIn *f, gsize *total)
{
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(item, "path");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(item, "content");
    const cJSON *b64 = cJSON_GetObjectItemCaseSensitive(item, "content_base64");
    uint8_t *bytes = NULL;
    size_t n = 0;

    if (!cJSON_IsObject(item) || cJSON_GetArraySize(item) != 2 || !cJSON_IsString(path) ||
        (text != NULL) == (b64 != NULL)) {
        return g_strdup(FILES_RULE);
    }
    if (!sbx_workspace_path_valid(path->valuestring)) {
        return g_strdup_printf("files: \"%.64s\" is not a workspace path (relative, no . or .., "
                               "at most 1024 bytes)",
                               path->valuestring);
    }
    if (cJSON_IsString(text)) {
        n = strlen(text->valuestring);
        bytes = (uint8_t *)g_strdup(text->valuestring);
    } else if (!cJSON_IsString(b64) ||
               sbx_base64_decode(b64->valuestring, strlen(b64->valuestring), &bytes, &n) < 0) {
        return g_strdup_printf("files: %.64s: content must be text, content_base64 canonical "
                               "base64",
                               path->valuestring);
    }
    *total += n;
    f->path = g_strdup(path->valuestring);
    f->bytes = g_bytes_new_with_free_func(bytes, n, cJSON_IsString(text) ? g_free : free, bytes);
    return NULL;
}

/* `files` into @req; NULL, or what is wrong. */
static char *check_files(const cJSON *body, SbxHttpCreate *req)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(body, "files");
    const cJSON *item;
    gsize total = 0;

    if (files == NULL || cJSON_IsNull(files)) {
        return NULL;
    }
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) > SBX_EXEC_FILES_IN_MAX) {
        return g_strdup(FILES_RULE);
    }
    req->with_files = TRUE;
    req->files = g_new0(SbxExecFileIn, cJSON_GetArraySize(files) + 1);
    cJSON_ArrayForEach(item, files)
    {
        char *why = check_file(item, &req->files[req->n_files], &total);
        if (why != NULL) {
            return why;
        }
        req->n_files++;
        for (gsize i = 0; i + 1 < req->n_files; i++) {
            if (strcmp(req->files[i].path, req->files[req->n_files - 1].path) == 0) {
                return g_strdup_printf("files: \"%.64s\" twice", req->files[i].path);
            }
        }
        if (total > SBX_EXEC_FILES_IN_BYTES_MAX) {
            return g_strdup(FILES_RULE);
        }
    }
    return NULL;
}

static char *check(const char *text, gsize len, const cJSON *body, const SbxHttpLimits *limits,
                   SbxHttpCreate *req)
{
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(body, "language");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(body, "code");
    const cJSON *catalog = cJSON_GetObjectItemCaseSensitive(body, "catalog");
    guint64 timeout = MIN(SBX_HTTP_TIMEOUT_DEFAULT_MS, limits->max_timeout_ms);
    guint64 limit = MIN(SBX_HTTP_OUTPUT_LIMIT_DEFAULT, limits->max_output_bytes);
    char *why = check_members(body);

    if (why != NULL) {
        return why;
    }
    if (!cJSON_IsString(lang) || sbx_language_from_name(lang->valuestring, &req->language) < 0) {
        return g_strdup("language: " SBX_LANGUAGE_NAMES);
    }
    /* with an entry the code may be empty: a session's earlier execution defined the function */
    const cJSON *entry = cJSON_GetObjectItemCaseSensitive(body, "entry");
    gboolean calls = entry != NULL && !cJSON_IsNull(entry);
    if (!cJSON_IsString(code) || (code->valuestring[0] == '\0' && !calls) ||
        strlen(code->valuestring) > SBX_HTTP_CODE_MAX) {
        return g_strdup("code: a string of at most 1 MiB, not empty unless an entry is named");
    }
    why = check_call(text, len, body, req);
    if (why != NULL) {
        return why;
    }
    if (catalog != NULL && !cJSON_IsNull(catalog) &&
        (!cJSON_IsString(catalog) || limits->catalogs == NULL ||
         !g_strv_contains(limits->catalogs, catalog->valuestring))) {
        return g_strdup("catalog: the name of a catalog allowed to this tenant, or null");
    }
    if (!get_limit(body, "timeout_ms", limits->max_timeout_ms, &timeout)) {
        return g_strdup_printf("timeout_ms: an integer from 1 to %" G_GUINT64_FORMAT,
                               limits->max_timeout_ms);
    }
    if (!get_limit(body, "output_limit", limits->max_output_bytes, &limit)) {
        return g_strdup_printf("output_limit: an integer from 1 to %" G_GUINT64_FORMAT,
                               limits->max_output_bytes);
    }
    why = check_files(body, req);
    if (why != NULL) {
        return why;
    }
    req->code = g_strdup(code->valuestring);
    req->catalog = cJSON_IsString(catalog) ? g_strdup(catalog->valuestring) : NULL;
    req->timeout_ms = (guint)MIN(timeout, G_MAXUINT);
    req->output_limit = limit;
    return NULL;
}

char *sbx_http_create_decode(const char *body, gsize len, const SbxHttpLimits *limits,
                             SbxHttpCreate *ret)
{
    g_autofree char *error = NULL;

    memset(ret, 0, sizeof(*ret));
    g_autoptr(cJSON) v = sbx_json_parse(body, len, SBX_JSON_DEPTH_MAX, &error);
    if (!cJSON_IsObject(v)) {
        return g_strdup_printf("the body must be one JSON object%s%s", error != NULL ? ": " : "",
                               error != NULL ? error : "");
    }
    char *why = check(body, len, v, limits, ret);
    if (why != NULL) {
        sbx_http_create_clear(ret);
    }
    return why;
}

void sbx_http_create_clear(SbxHttpCreate *c)
{
    g_free(c->code);
    g_free(c->entry);
    g_free(c->args_json);
    g_free(c->kwargs_json);
    g_free(c->catalog);
    for (gsize i = 0; i < c->n_files; i++) {
        g_free(c->files[i].path);
        g_bytes_unref(c->files[i].bytes);
    }
    g_free(c->files);
    memset(c, 0, sizeof(*c));
}

char *sbx_http_session_decode(const char *body, gsize len, guint max_idle_s, guint max_lifetime_s,
                              SbxHttpSessionCreate *ret)
{
    g_autofree char *error = NULL;
    guint64 idle = 0, life = 0;
    const cJSON *m;

    memset(ret, 0, sizeof(*ret));
    if (len == 0) {
        return NULL;
    }
    g_autoptr(cJSON) v = sbx_json_parse(body, len, SBX_JSON_DEPTH_MAX, &error);
    if (!cJSON_IsObject(v)) {
        return g_strdup_printf("the body must be one JSON object%s%s", error != NULL ? ": " : "",
                               error != NULL ? error : "");
    }
    cJSON_ArrayForEach(m, v)
    {
        if (strcmp(m->string, "profile") != 0 && strcmp(m->string, "idle_timeout_s") != 0 &&
            strcmp(m->string, "max_lifetime_s") != 0) {
            return g_strdup_printf("unknown member \"%.64s\"", m->string);
        }
    }
    const cJSON *profile = cJSON_GetObjectItemCaseSensitive(v, "profile");
    if (profile != NULL && !cJSON_IsNull(profile) &&
        (!cJSON_IsString(profile) || profile->valuestring[0] == '\0' ||
         strlen(profile->valuestring) > 64)) {
        return g_strdup("profile: the name of a profile this server pools, or null");
    }
    if (!get_limit(v, "idle_timeout_s", max_idle_s, &idle)) {
        return g_strdup_printf("idle_timeout_s: an integer from 1 to %u", max_idle_s);
    }
    if (!get_limit(v, "max_lifetime_s", max_lifetime_s, &life)) {
        return g_strdup_printf("max_lifetime_s: an integer from 1 to %u", max_lifetime_s);
    }
    ret->profile = cJSON_IsString(profile) ? g_strdup(profile->valuestring) : NULL;
    ret->idle_timeout_s = (guint)idle;
    ret->max_lifetime_s = (guint)life;
    return NULL;
}

void sbx_http_session_create_clear(SbxHttpSessionCreate *c)
{
    g_free(c->profile);
    memset(c, 0, sizeof(*c));
}
