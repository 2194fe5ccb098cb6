/*
 * The tools of one execution (see tools.h).
 */
#include "tools.h"

#include <string.h>

#include "provider.h"
#include "tools-error.h"
#include "tools-private.h"

typedef struct Start Start;

struct SbxTools {
    SbxCatalog *catalog;
    SbxNamespace *ns;
    GHashTable *providers; /* real provider name -> SbxProvider* (owned) */
    SbxToolDecl *decls;    /* strings borrowed from the namespace and the catalog */
    gsize n_decls;
    guint in_flight;
    Start *start;            /* sbx_tools_start() in progress, or NULL */
    GPtrArray *warnings;     /* char*, NULL-terminated */
    SbxApprovals *approvals; /* or NULL: approvals cannot be asked for */
    char *origin;            /* who makes the calls, for the approvals list */
    SbxToolsReplay *replay;  /* a replay's: calls answered from the record (tools-replay.c) */
};

/*
 * A start in progress. Outlives the tools if they are freed first (the discoveries then complete
 * as cancelled): @tools is NULL from then on and nothing is reported.
 */
struct Start {
    gint ref;
    SbxTools *tools;
    GCancellable *cancel;
    guint pending; /* discoveries not completed */
    guint idle_id; /* nothing to discover: report from an idle callback */
    SbxToolsReadyFunc ready;
    gpointer user_data;
};

typedef struct {
    SbxTools *tools;
    SbxProvider *provider;
    const SbxCatalogTool *tool; /* owned by the catalog: its schemas */
    const char *prov_real;      /* owned by the namespace */
    const char *tool_real;
    char *input_json; /* kept while an approval is pending */
    GString *policy;  /* the decision for the record (JSON object, open) */
    gint64 asked_us;  /* when the approval was asked for */
} CallData;

static void call_data_free(gpointer p)
{
    CallData *cd = p;
    g_free(cd->input_json);
    if (cd->policy != NULL) {
        g_string_free(cd->policy, TRUE);
    }
    g_free(cd);
}

static void build_decls(SbxTools *t)
{
    gsize total = 0;
    g_clear_pointer(&t->decls, g_free);
    t->n_decls = 0;
    for (gsize i = 0; i < t->catalog->n_providers; i++) {
        total += t->catalog->providers[i].n_tools;
    }
    t->decls = g_new0(SbxToolDecl, total + 1);
    for (gsize i = 0; i < t->catalog->n_providers; i++) {
        const SbxCatalogProvider *p = &t->catalog->providers[i];
        for (gsize j = 0; j < p->n_tools; j++) {
            SbxToolDecl *d = &t->decls[t->n_decls++];
            d->provider = (char *)sbx_namespace_provider_ident(t->ns, p->name);
            d->name = (char *)sbx_namespace_tool_ident(t->ns, p->name, p->tools[j].name);
            d->description = p->tools[j].description;
        }
    }
}

/*
 * @listing_only: build only the providers whose tools must be discovered (MCP), so that listing
 * the namespace reads no host secret and starts nothing else; calls then fail.
 */
static SbxTools *tools_new(SbxCatalog *catalog, gboolean listing_only, SbxToolsReplay *replay,
                           GError **error)
{
    g_autoptr(SbxTools) t = g_new0(SbxTools, 1);
    t->catalog = catalog;
    t->ns = sbx_namespace_new();
    t->providers =
        g_hash_table_new_full(g_str_hash, g_str_equal, NULL, (GDestroyNotify)sbx_provider_free);
    t->warnings = g_ptr_array_new_with_free_func(g_free);
    g_ptr_array_add(t->warnings, NULL);
    t->replay = replay;
    if (!sbx_catalog_build_namespace(t->catalog, t->ns, error)) {
        return NULL;
    }
    for (gsize i = 0; replay == NULL && i < catalog->n_providers; i++) {
        if (listing_only && catalog->providers[i].kind != SBX_PROVIDER_MCP) {
            continue;
        }
        SbxProvider *p = sbx_provider_new(&catalog->providers[i], error);
        if (p == NULL) {
            return NULL;
        }
        g_hash_table_insert(t->providers, p->name, p);
    }
    build_decls(t);
    return g_steal_pointer(&t);
}

SbxTools *sbx_tools_new(SbxCatalog *catalog, GError **error)
{
    return tools_new(catalog, FALSE, NULL, error);
}

SbxTools *sbx_tools_new_listing(SbxCatalog *catalog, GError **error)
{
    return tools_new(catalog, TRUE, NULL, error);
}

SbxTools *sbx_tools_new_answering(SbxCatalog *catalog, SbxToolsReplay *replay, GError **error)
{
    return tools_new(catalog, FALSE, replay, error); /* @replay is the tools' from the start */
}

SbxToolsReplay *sbx_tools_replay_of(const SbxTools *tools)
{
    return tools->replay;
}

void sbx_tools_in_flight_add(SbxTools *tools, int delta)
{
    tools->in_flight += delta;
}

void sbx_tools_set_approvals(SbxTools *tools, SbxApprovals *approvals, const char *origin)
{
    tools->approvals = approvals;
    g_free(tools->origin);
    tools->origin = g_strdup(origin);
}

SbxTools *sbx_tools_load(const char *path, GError **error)
{
    SbxCatalog *catalog = path != NULL ? sbx_catalog_load(path, error) : sbx_catalog_new_empty();
    return catalog != NULL ? sbx_tools_new(catalog, error) : NULL;
}

void sbx_tools_free(SbxTools *tools)
{
    if (tools == NULL) {
        return;
    }
    /* A call still running would reference freed providers: a bug in the owner. */
    g_warn_if_fail(tools->in_flight == 0);
    if (tools->start != NULL) { /* no report from here on; the servers die with their providers */
        tools->start->tools = NULL;
        g_cancellable_cancel(tools->start->cancel);
    }
    g_ptr_array_unref(tools->warnings);
    g_free(tools->decls);
    g_free(tools->origin);
    g_hash_table_destroy(tools->providers);
    sbx_namespace_free(tools->ns);
    sbx_catalog_free(tools->catalog);
    sbx_tools_replay_free(tools->replay);
    g_free(tools);
}

const SbxToolDecl *sbx_tools_decls(const SbxTools *tools, gsize *ret_n)
{
    *ret_n = tools->n_decls;
    return tools->decls;
}

const SbxNamespace *sbx_tools_namespace(const SbxTools *tools)
{
    return tools->ns;
}

const SbxCatalog *sbx_tools_catalog(const SbxTools *tools)
{
    return tools->catalog;
}

const char *const *sbx_tools_warnings(const SbxTools *tools)
{
    return (const char *const *)tools->warnings->pdata;
}

/* ---- start: discover the tools of MCP providers ---------------------------------------- */

static void start_unref(Start *st)
{
    if (--st->ref > 0) {
        return;
    }
    g_clear_handle_id(&st->idle_id, g_source_remove);
    g_object_unref(st->cancel);
    g_free(st);
}

/* Report once: the first error, or success when every discovery is in. */
static void start_report(Start *st, const GError *error)
{
    SbxTools *t = st->tools;

    if (t == NULL) {
        return;
    }
    st->tools = NULL;
    t->start = NULL;
    g_cancellable_cancel(st->cancel); /* the other discoveries, if @error */
    st->ready(t, error, st->user_data);
}

static void add_warning(SbxTools *t, char *text)
{
    t->warnings->pdata[t->warnings->len - 1] = text;
    g_ptr_array_add(t->warnings, NULL);
}

/* All providers listed their tools: the namespace and declarations again, with them. */
static void start_complete(Start *st)
{
    SbxTools *t = st->tools;
    g_autoptr(GError) error = NULL;
    gsize total = 0;

    for (gsize i = 0; i < t->catalog->n_providers; i++) {
        total += t->catalog->providers[i].n_tools;
    }
    if (total > SBX_TOOLS_MAX) {
        g_set_error(&error, SBX_TOOL_ERROR, SBX_ERR_TOOL, "%s: more than %d tools in all",
                    t->catalog->origin, SBX_TOOLS_MAX);
    } else if (sbx_catalog_build_namespace(t->catalog, t->ns, &error)) {
        build_decls(t);
    }
    start_report(st, error);
}

typedef struct {
    Start *st;
    SbxProvider *provider;
    SbxCatalogProvider *config;
} Discovering;

static void on_discovered(GObject *src, GAsyncResult *res, gpointer data)
{
    Discovering *dg = data;
    Start *st = dg->st;
    g_autoptr(GError) error = NULL;
    gsize n = 0;
    (void)src;

    st->pending--;
    if (st->tools != NULL) { /* else: the provider is gone, only free what is ours */
        g_autoptr(GPtrArray) warnings = g_ptr_array_new();
        SbxCatalogTool *tools =
            dg->provider->ops->discover_finish(dg->provider, res, &n, warnings, &error);
        for (guint i = 0; i < warnings->len; i++) {
            add_warning(st->tools, warnings->pdata[i]);
        }
        if (tools == NULL) {
            start_report(st, error);
        } else {
            sbx_catalog_tools_free(dg->config->tools, dg->config->n_tools);
            dg->config->tools = tools;
            dg->config->n_tools = n;
            if (st->pending == 0) {
                start_complete(st);
            }
        }
    }
    start_unref(st);
    g_free(dg);
}

static gboolean on_nothing_to_discover(gpointer data)
{
    Start *st = data;
    st->idle_id = 0;
    start_report(st, NULL);
    start_unref(st);
    return G_SOURCE_REMOVE;
}

void sbx_tools_start(SbxTools *tools, SbxToolsReadyFunc ready, gpointer user_data)
{
    Start *st = g_new0(Start, 1);

    g_return_if_fail(tools->start == NULL);
    st->ref = 1;
    st->tools = tools;
    st->cancel = g_cancellable_new();
    st->ready = ready;
    st->user_data = user_data;
    tools->start = st;
    for (gsize i = 0; i < tools->catalog->n_providers; i++) {
        SbxCatalogProvider *config = &tools->catalog->providers[i];
        SbxProvider *p = g_hash_table_lookup(tools->providers, config->name);
        if (p == NULL || p->ops->discover_async == NULL) { /* NULL: sbx_tools_new_listing() */
            continue;
        }
        Discovering *dg = g_new0(Discovering, 1);
        dg->st = st;
        dg->provider = p;
        dg->config = config;
        st->ref++;
        st->pending++;
        p->ops->discover_async(p, st->cancel, on_discovered, dg);
    }
    if (st->pending == 0) { /* the first reference passes to the idle callback */
        st->idle_id = g_idle_add(on_nothing_to_discover, st);
        return;
    }
    start_unref(st); /* the discoveries hold theirs */
}

guint sbx_tools_in_flight(const SbxTools *tools)
{
    return tools->in_flight;
}

/* The catalog entry of tool @tool (real name) of provider @provider (real name). */
static const SbxCatalogTool *find_tool(const SbxTools *t, const char *provider, const char *tool)
{
    for (gsize i = 0; i < t->catalog->n_providers; i++) {
        const SbxCatalogProvider *p = &t->catalog->providers[i];
        for (gsize j = 0; strcmp(p->name, provider) == 0 && j < p->n_tools; j++) {
            if (strcmp(p->tools[j].name, tool) == 0) {
                return &p->tools[j];
            }
        }
    }
    return NULL;
}

/*
 * Check @json against @schema (NULL: anything goes). A failure becomes the guest's
 * validation_error with the validator's message, which names the place (`input.q: ...`).
 */
static gboolean check_schema(const SbxSchema *schema, const char *root, const char *json,
                             GError **error)
{
    g_autoptr(GError) local = NULL;
    if (schema == NULL || sbx_schema_validate(schema, root, json, &local)) {
        return TRUE;
    }
    g_set_error_literal(error, SBX_TOOL_ERROR, SBX_ERR_VALIDATION, local->message);
    return FALSE;
}

static void on_provider_done(GObject *src, GAsyncResult *res, gpointer data)
{
    (void)src;
    g_autoptr(GTask) task = data;
    CallData *cd = g_task_get_task_data(task);
    GError *error = NULL;

    char *result = sbx_provider_call_finish(cd->provider, res, &error);
    cd->tools->in_flight--;
    if (result == NULL) {
        g_task_return_error(task, error);
        return;
    }
    if (!check_schema(cd->tool->output_schema, "output", result, &error)) {
        g_free(result);
        g_task_return_error(task, error);
        return;
    }
    g_task_return_pointer(task, result, g_free);
}

/* @s (valid UTF-8: a glob or an id) as a JSON string. */
static void append_json_string(GString *out, const char *s)
{
    g_string_append_c(out, '"');
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\') {
            g_string_append_printf(out, "\\%c", *s);
        } else if ((unsigned char)*s < 0x20) {
            g_string_append_printf(out, "\\u%04x", *s);
        } else {
            g_string_append_c(out, *s);
        }
    }
    g_string_append_c(out, '"');
}

static void run_provider(GTask *task)
{
    CallData *cd = g_task_get_task_data(task);

    sbx_provider_call_async(cd->provider, cd->tool_real, cd->input_json,
                            g_task_get_cancellable(task), on_provider_done, task);
}

static void deny(GTask *task, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* The call fails with policy_denied (the guest's PolicyDenied). */
static void deny(GTask *task, const char *fmt, ...)
{
    CallData *cd = g_task_get_task_data(task);
    va_list ap;
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_POLICY_DENIED, "tool %s.%s: %s",
                            cd->prov_real, cd->tool_real, msg);
}

static void on_approval(SbxApprovalOutcome outcome, const SbxApprovalAnswer *answer, gpointer data)
{
    GTask *task = data;
    CallData *cd = g_task_get_task_data(task);

    g_string_append_printf(cd->policy, ",\"approval\":\"%s\",\"wait_ms\":%" G_GINT64_FORMAT,
                           sbx_approval_outcome_name(outcome),
                           (g_get_monotonic_time() - cd->asked_us) / 1000);
    /* Who answered and when: the execution's record of its approvals (exec-record.c). */
    g_string_append(cd->policy, ",\"answered_by\":");
    if (answer->answered_by != NULL) {
        append_json_string(cd->policy, answer->answered_by);
    } else {
        g_string_append(cd->policy, "null");
    }
    g_string_append_printf(
        cd->policy, ",\"asked_at_ms\":%" G_GINT64_FORMAT ",\"answered_at_ms\":%" G_GINT64_FORMAT,
        answer->asked_at_ms, answer->answered_at_ms);
    if (outcome == SBX_APPROVAL_APPROVED) {
        run_provider(task); /* still in flight */
        return;
    }
    /* Before returning, as on_provider_done does: the caller may free the tools at once. */
    cd->tools->in_flight--;
    switch (outcome) {
    case SBX_APPROVAL_APPROVED:
        break;
    case SBX_APPROVAL_DENIED:
        deny(task, "the approval was denied");
        break;
    case SBX_APPROVAL_TIMED_OUT:
        deny(task, "no approval within %u ms (policy.approval_timeout_ms)",
             cd->tools->catalog->policy.approval_timeout_ms);
        break;
    case SBX_APPROVAL_UNAVAILABLE:
        deny(task, "too many approvals pending (%d)", SBX_APPROVALS_PENDING_MAX);
        break;
    case SBX_APPROVAL_CANCELLED:
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled");
        break;
    }
    g_object_unref(task);
}

/* Apply the policy to the call in @task; the provider runs if (and when) it allows. */
static void apply_policy(GTask *task)
{
    CallData *cd = g_task_get_task_data(task);
    SbxTools *t = cd->tools;
    SbxPolicyDecision d =
        sbx_policy_decide(&t->catalog->policy, cd->prov_real, cd->tool_real, cd->tool->destructive);

    cd->policy = g_string_new("{\"action\":");
    g_string_append_printf(cd->policy, "\"%s\",\"rule\":", sbx_policy_action_name(d.action));
    if (d.rule != NULL) {
        append_json_string(cd->policy, d.rule);
    } else {
        g_string_append(cd->policy, "null");
    }
    if (cd->tool->destructive) {
        g_string_append(cd->policy, ",\"destructive\":true");
    }
    t->in_flight++; /* until just before its answer is returned (the caller may free @t then) */
    if (d.action == SBX_POLICY_ALLOW) {
        run_provider(task);
        return;
    }
    if (d.action != SBX_POLICY_DENY && t->approvals != NULL) {
        cd->asked_us = g_get_monotonic_time();
        const char *id =
            sbx_approvals_request_of(t->approvals, t, cd->prov_real, cd->tool_real, cd->input_json,
                                     t->origin, t->catalog->policy.approval_timeout_ms,
                                     g_task_get_cancellable(task), on_approval, task);
        g_string_append(cd->policy, ",\"approval_id\":");
        append_json_string(cd->policy, id);
        return;
    }
    t->in_flight--;
    if (d.action == SBX_POLICY_DENY) {
        deny(task, "denied by the policy (%s%s%s)", d.rule != NULL ? "rule \"" : "the default",
             d.rule != NULL ? d.rule : "", d.rule != NULL ? "\"" : "");
    } else {
        deny(task, "needs an approval, and this `sandbox run` has no terminal to ask on: "
                   "start `sandbox serve`, run again, and answer with `sandbox approve ID` or "
                   "`sandbox deny ID` (`sandbox approvals` lists them)");
    }
    g_object_unref(task);
}

void sbx_tools_call_async(SbxTools *tools, const char *provider_ident, const char *tool_ident,
                          const char *input_json, GCancellable *cancellable,
                          GAsyncReadyCallback callback, gpointer user_data)
{
    g_autoptr(GTask) task = g_task_new(NULL, cancellable, callback, user_data);
    const char *prov_real = NULL, *tool_real = NULL;

    g_task_set_source_tag(task, sbx_tools_call_async);
    if (tools->replay != NULL) {
        /* the record's names: real ones when the guest's resolve, else the guest's */
        prov_real = provider_ident;
        tool_real = tool_ident;
        sbx_namespace_resolve(tools->ns, provider_ident, tool_ident, &prov_real, &tool_real);
        sbx_tools_replay_answer(tools, tools->replay, task, prov_real, tool_real, input_json);
        return;
    }
    if (!sbx_namespace_resolve(tools->ns, provider_ident, tool_ident, &prov_real, &tool_real)) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL, "unknown tool %.*s.%.*s",
                                SBX_NAME_MAX, provider_ident, SBX_NAME_MAX, tool_ident);
        return;
    }
    if (strlen(input_json) > SBX_TOOL_INPUT_MAX) {
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_VALIDATION,
                                "tool input larger than %d bytes", SBX_TOOL_INPUT_MAX);
        return;
    }
    const SbxCatalogTool *tool = find_tool(tools, prov_real, tool_real);
    g_assert(tool != NULL); /* the namespace was built from this catalog */
    CallData *cd = g_new0(CallData, 1);
    cd->tools = tools;
    cd->provider = g_hash_table_lookup(tools->providers, prov_real);
    if (cd->provider == NULL) { /* sbx_tools_new_listing() */
        g_task_set_task_data(task, cd, call_data_free);
        g_task_return_new_error(task, SBX_TOOL_ERROR, SBX_ERR_TOOL,
                                "tool %s.%s: these tools are for listing only", prov_real,
                                tool_real);
        return;
    }
    cd->tool = tool;
    cd->prov_real = prov_real;
    cd->tool_real = tool_real;
    cd->input_json = g_strdup(input_json);
    g_task_set_task_data(task, cd, call_data_free);
    GError *error = NULL;
    if (!check_schema(tool->input_schema, "input", input_json, &error)) {
        g_task_return_error(task, error); /* the provider never sees it, nobody is asked */
        return;
    }
    apply_policy(g_steal_pointer(&task));
}

char *sbx_tools_call_policy(GAsyncResult *result)
{
    CallData *cd = g_task_get_task_data(G_TASK(result));

    if (cd == NULL || cd->policy == NULL) {
        return NULL;
    }
    return g_strconcat(cd->policy->str, "}", NULL);
}

char *sbx_tools_call_finish(SbxTools *tools, GAsyncResult *result, GError **error)
{
    (void)tools;
    g_return_val_if_fail(g_task_is_valid(result, NULL), NULL);
    return g_task_propagate_pointer(G_TASK(result), error);
}
