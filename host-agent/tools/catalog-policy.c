/*
 * The "policy" section of the catalog (docs/tools.md, "Policy"):
 *
 *   "policy": {"rules": [{"match": "github.*", "action": "allow"}, ...],
 *              "default": "allow", "approval_timeout_ms": 60000}
 */
#include <string.h>

#include "catalog-private.h"
#include "policy.h"
#include "protocol/json.h"

static gboolean parse_action(const cJSON *v, SbxPolicyAction *ret, const char *origin,
                             const char *where, GError **error)
{
    if (!cJSON_IsString(v) || !sbx_policy_action_from_name(v->valuestring, ret)) {
        sbx_catalog_invalid(error, origin, where, "expected \"allow\", \"approve\" or \"deny\"");
        return FALSE;
    }
    return TRUE;
}

static gboolean parse_rule(const cJSON *obj, SbxPolicyRule *rule, const char *origin,
                           const char *where, GError **error)
{
    static const char *const known[] = {"match", "action", NULL};
    const cJSON *match = cJSON_GetObjectItemCaseSensitive(obj, "match");
    const cJSON *action = cJSON_GetObjectItemCaseSensitive(obj, "action");
    g_autofree char *m_at = sbx_catalog_path_join(where, "match");
    g_autofree char *a_at = sbx_catalog_path_join(where, "action");

    if (!cJSON_IsObject(obj)) {
        sbx_catalog_invalid(error, origin, where, "expected {\"match\": GLOB, \"action\": ...}");
        return FALSE;
    }
    if (!sbx_catalog_check_members(obj, known, origin, where, error)) {
        return FALSE;
    }
    if (!cJSON_IsString(match) || !sbx_glob_valid(match->valuestring)) {
        sbx_catalog_invalid(error, origin, m_at,
                            "expected a glob over \"provider.tool\" (1 to %d bytes of UTF-8; "
                            "`*`, `?`, `\\` escapes)",
                            SBX_POLICY_GLOB_MAX);
        return FALSE;
    }
    if (action == NULL) {
        sbx_catalog_invalid(error, origin, where, "missing field \"action\"");
        return FALSE;
    }
    if (!parse_action(action, &rule->action, origin, a_at, error)) {
        return FALSE;
    }
    rule->glob = g_strdup(match->valuestring);
    return TRUE;
}

static gboolean parse_rules(const cJSON *arr, SbxPolicy *policy, const char *origin, GError **error)
{
    const cJSON *r;

    if (arr == NULL) {
        return TRUE;
    }
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > SBX_POLICY_RULES_MAX) {
        sbx_catalog_invalid(error, origin, "policy.rules",
                            "expected an array of at most %d rules (the first match decides)",
                            SBX_POLICY_RULES_MAX);
        return FALSE;
    }
    policy->rules = g_new0(SbxPolicyRule, cJSON_GetArraySize(arr));
    cJSON_ArrayForEach(r, arr)
    {
        g_autofree char *at = g_strdup_printf("policy.rules[%" G_GSIZE_FORMAT "]", policy->n_rules);
        if (!parse_rule(r, &policy->rules[policy->n_rules], origin, at, error)) {
            return FALSE;
        }
        policy->n_rules++;
    }
    return TRUE;
}

static gboolean parse_timeout(const cJSON *v, SbxPolicy *policy, const char *origin, GError **error)
{
    if (v == NULL) {
        return TRUE;
    }
    int64_t ms;
    if (!sbx_json_int64(v, &ms) || ms < 1 || ms > SBX_POLICY_APPROVAL_TIMEOUT_MAX_MS) {
        sbx_catalog_invalid(error, origin, "policy.approval_timeout_ms",
                            "expected an integer from 1 to %d", SBX_POLICY_APPROVAL_TIMEOUT_MAX_MS);
        return FALSE;
    }
    policy->approval_timeout_ms = (guint)ms;
    return TRUE;
}

gboolean sbx_catalog_parse_policy(const cJSON *root, SbxCatalog *cat, GError **error)
{
    static const char *const known[] = {"rules", "default", "approval_timeout_ms", NULL};
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "policy");
    const cJSON *def;

    if (obj == NULL) {
        return TRUE;
    }
    if (!cJSON_IsObject(obj)) {
        sbx_catalog_invalid(error, cat->origin, "policy", "expected an object");
        return FALSE;
    }
    if (!sbx_catalog_check_members(obj, known, cat->origin, "policy", error) ||
        !parse_rules(cJSON_GetObjectItemCaseSensitive(obj, "rules"), &cat->policy, cat->origin,
                     error) ||
        !parse_timeout(cJSON_GetObjectItemCaseSensitive(obj, "approval_timeout_ms"), &cat->policy,
                       cat->origin, error)) {
        return FALSE;
    }
    def = cJSON_GetObjectItemCaseSensitive(obj, "default");
    return def == NULL ||
           parse_action(def, &cat->policy.fallback, cat->origin, "policy.default", error);
}
