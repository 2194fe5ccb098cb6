/*
 * The tools in a replay (tools.h, "Replay"): what a record keeps of the tools the guest was
 * given (their real names and descriptions, in the catalog's order: the same namespace again),
 * and the tools of a replay, which answer each call from the record instead of a provider.
 */
#include <string.h>

#include "base/json-builder.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "tools-error.h"
#include "tools-private.h"
#include "tools.h"

/* Nesting of the given tools' JSON: an array of providers, each with an array of tools. */
#define GIVEN_JSON_DEPTH 4

struct SbxToolsReplay {
    GPtrArray *calls;  /* SbxToolsRecordedCall*, in the order the guest made them */
    guint next;        /* the next recorded call a call of the replay is held against */
    gboolean diverged; /* a call was not the record's */
};

void sbx_tools_recorded_call_free(SbxToolsRecordedCall *c)
{
    if (c == NULL) {
        return;
    }
    g_free(c->provider);
    g_free(c->tool);
    g_free(c->input_json);
    g_free(c->result_json);
    g_free(c->error_json);
    g_free(c);
}

SbxToolsReplay *sbx_tools_replay_new(GPtrArray *calls)
{
    SbxToolsReplay *r = g_new0(SbxToolsReplay, 1);

    r->calls = calls;
    return r;
}

void sbx_tools_replay_free(SbxToolsReplay *r)
{
    if (r == NULL) {
        return;
    }
    g_ptr_array_unref(r->calls);
    g_free(r);
}

/* ---- what the record keeps ---------------------------------------------------------------- */

char *sbx_tools_given_json(const SbxTools *tools)
{
    const SbxCatalog *c = sbx_tools_catalog(tools);
    g_autoptr(GString) out = g_string_new("[");

    for (gsize i = 0; i < c->n_providers; i++) {
        const SbxCatalogProvider *p = &c->providers[i];
        g_string_append(out, i > 0 ? ",{\"provider\":" : "{\"provider\":");
        sbx_json_append_string(out, p->name, strlen(p->name));
        g_string_append(out, ",\"tools\":[");
        for (gsize j = 0; j < p->n_tools; j++) {
            g_string_append(out, j > 0 ? ",{\"name\":" : "{\"name\":");
            sbx_json_append_string(out, p->tools[j].name, strlen(p->tools[j].name));
            if (p->tools[j].description != NULL) {
                g_string_append(out, ",\"description\":");
                sbx_json_append_string(out, p->tools[j].description,
                                       strlen(p->tools[j].description));
            }
            g_string_append_c(out, '}');
        }
        g_string_append(out, "]}");
    }
    g_string_append_c(out, ']');
    return g_string_free(g_steal_pointer(&out), FALSE);
}

static gboolean given_bad(GError **error, const char *why)
{
    g_set_error(error, SBX_TOOL_ERROR, SBX_ERR_INTERNAL, "the record's tools: %s", why);
    return FALSE;
}

static const char *string_member(const cJSON *o, const char *name)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, name);

    return cJSON_IsString(m) && m->valuestring[0] != '\0' ? m->valuestring : NULL;
}

static gboolean given_tool(const cJSON *t, SbxCatalogTool *out, GError **error)
{
    const char *name = string_member(t, "name");
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");

    if (name == NULL || (desc != NULL && !cJSON_IsString(desc))) {
        return given_bad(error, "a tool without a name");
    }
    out->name = g_strdup(name);
    out->description = desc != NULL ? g_strdup(desc->valuestring) : NULL;
    return TRUE;
}

static gboolean given_provider(const cJSON *p, SbxCatalogProvider *out, GError **error)
{
    const char *name = string_member(p, "provider");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(p, "tools");
    int n = cJSON_GetArraySize(tools);

    if (name == NULL || !cJSON_IsArray(tools) || n > SBX_TOOLS_MAX) {
        return given_bad(error, "a provider without a name or tools");
    }
    out->name = g_strdup(name);
    out->kind = SBX_PROVIDER_COMMAND; /* never built: the record answers */
    out->tools = g_new0(SbxCatalogTool, MAX(n, 1));
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        if (!given_tool(t, &out->tools[out->n_tools++], error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* The catalog of @json (sbx_tools_given_json()'s): names and descriptions, no providers. */
static SbxCatalog *given_catalog(const char *json, GError **error)
{
    g_autoptr(SbxCatalog) c = sbx_catalog_new_empty();
    g_autofree char *why = NULL;
    cJSON *root = json != NULL ? sbx_json_parse(json, strlen(json), GIVEN_JSON_DEPTH, &why) : NULL;
    int n = cJSON_GetArraySize(root);
    gboolean ok = TRUE;

    if (json == NULL) {
        return g_steal_pointer(&c); /* recorded before the tools were: none */
    }
    if (!cJSON_IsArray(root) || n > SBX_TOOLS_MAX) {
        cJSON_Delete(root);
        given_bad(error, why != NULL ? why : "not an array of providers");
        return NULL;
    }
    c->providers = g_new0(SbxCatalogProvider, MAX(n, 1));
    const cJSON *p;
    cJSON_ArrayForEach(p, root)
    {
        if (ok) {
            ok = given_provider(p, &c->providers[c->n_providers++], error);
        }
    }
    cJSON_Delete(root);
    return ok ? g_steal_pointer(&c) : NULL;
}

SbxTools *sbx_tools_new_replay(const char *given_json, SbxToolsReplay *replay, GError **error)
{
    g_autoptr(SbxToolsReplay) r = replay;
    SbxCatalog *catalog = given_catalog(given_json, error);

    if (catalog == NULL) {
        return NULL;
    }
    return sbx_tools_new_answering(catalog, g_steal_pointer(&r), error);
}

/* ---- answering from the record ------------------------------------------------------------ */

/* Whether the replay's call is the recorded one: the same tool with the same input. */
static gboolean same_call(const SbxToolsRecordedCall *rec, const char *provider, const char *tool,
                          const char *input)
{
    return strcmp(rec->provider, provider) == 0 && strcmp(rec->tool, tool) == 0 &&
           strcmp(rec->input_json, input) == 0;
}

/* The recorded error object @json as the call's error (code and message, as a provider's). */
static void return_recorded_error(GTask *task, const char *json)
{
    g_autofree char *why = NULL;
    cJSON *e = sbx_json_parse(json, strlen(json), GIVEN_JSON_DEPTH, &why);
    const char *code = string_member(e, "code");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
    SbxErrorCode c = SBX_ERR_TOOL;

    if (code != NULL) {
        sbx_error_code_from_name(code, &c);
    }
    g_task_return_new_error(task, SBX_TOOL_ERROR, c, "%s",
                            cJSON_IsString(msg) ? msg->valuestring : "tool error");
    cJSON_Delete(e);
}

typedef struct {
    SbxTools *tools;
    GTask *task;
} Held;

/* A call the original never got an answer to (its execution ended first): it waits for the
 * end of this one too, and then counts as answered. */
static gboolean held_cancelled(gpointer data)
{
    Held *h = data;

    sbx_tools_in_flight_add(h->tools, -1);
    g_task_return_new_error(h->task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "the execution ended");
    g_object_unref(h->task);
    g_free(h);
    return G_SOURCE_REMOVE;
}

static void on_held_cancel(GCancellable *cancel, gpointer data)
{
    (void)cancel;
    g_idle_add(held_cancelled, data); /* not from inside the cancel's emission */
}

static void hold(SbxTools *tools, GTask *task)
{
    GCancellable *cancel = g_task_get_cancellable(task);

    if (cancel == NULL) { /* nothing could end the wait (the exec always passes one) */
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "never answered");
        return;
    }
    Held *h = g_new0(Held, 1);
    h->tools = tools;
    h->task = g_object_ref(task);
    sbx_tools_in_flight_add(tools, 1);
    g_cancellable_connect(cancel, G_CALLBACK(on_held_cancel), h, NULL);
}

void sbx_tools_replay_answer(SbxTools *tools, SbxToolsReplay *r, GTask *task, const char *provider,
                             const char *tool, const char *input_json)
{
    guint i = r->next++;
    const SbxToolsRecordedCall *rec = i < r->calls->len ? g_ptr_array_index(r->calls, i) : NULL;

    /* The verdict names what differs (replay/verdict.c): the guest just gets no answer of the
     * record's. */
    if (rec == NULL || !same_call(rec, provider, tool, input_json)) {
        r->diverged = TRUE;
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_REPLAY_DIVERGENCE,
                                "replay: tool call %u is not the record's", i + 1);
    } else if (rec->ok) {
        g_task_return_pointer(task, g_strdup(rec->result_json), g_free);
    } else if (rec->error_json != NULL) {
        return_recorded_error(task, rec->error_json);
    } else {
        hold(tools, task);
    }
}

gboolean sbx_tools_replay_diverged(const SbxTools *tools)
{
    const SbxToolsReplay *r = sbx_tools_replay_of(tools);

    return r != NULL && r->diverged;
}
