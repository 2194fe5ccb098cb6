/*
 * Tool policy decisions (policy.h).
 */
#include "policy.h"

#include <string.h>

static const char *const action_names[] = {
    [SBX_POLICY_ALLOW] = "allow",
    [SBX_POLICY_APPROVE] = "approve",
    [SBX_POLICY_DENY] = "deny",
};

void sbx_policy_init(SbxPolicy *policy)
{
    memset(policy, 0, sizeof(*policy));
    policy->fallback = SBX_POLICY_ALLOW;
    policy->approval_timeout_ms = SBX_POLICY_APPROVAL_TIMEOUT_DEFAULT_MS;
}

void sbx_policy_clear(SbxPolicy *policy)
{
    for (gsize i = 0; i < policy->n_rules; i++) {
        g_free(policy->rules[i].glob);
    }
    g_free(policy->rules);
    sbx_policy_init(policy);
}

const char *sbx_policy_action_name(SbxPolicyAction action)
{
    return action_names[action];
}

gboolean sbx_policy_action_from_name(const char *name, SbxPolicyAction *ret)
{
    for (gsize i = 0; i < G_N_ELEMENTS(action_names); i++) {
        if (strcmp(name, action_names[i]) == 0) {
            *ret = (SbxPolicyAction)i;
            return TRUE;
        }
    }
    return FALSE;
}

gboolean sbx_glob_valid(const char *glob)
{
    gsize len = strlen(glob);

    if (len == 0 || len > SBX_POLICY_GLOB_MAX || !g_utf8_validate(glob, len, NULL)) {
        return FALSE;
    }
    for (const char *p = glob; *p != '\0'; p++) {
        if (*p == '\\' && *++p == '\0') {
            return FALSE; /* a `\` escapes nothing */
        }
    }
    return TRUE;
}

/*
 * The classic iterative matcher: on a mismatch, go back to the last `*` and let it take one
 * more character. Each `*` only moves forward, so the work is at most
 * strlen(glob) * strlen(name): no exponential backtracking, whatever the glob.
 */
gboolean sbx_glob_match(const char *glob, const char *name)
{
    const char *g = glob, *n = name;
    const char *star_g = NULL, *star_n = NULL;

    while (*n != '\0') {
        if (*g == '*') {
            star_g = ++g;
            star_n = n;
            continue;
        }
        if (*g == '?') {
            g++;
            n = g_utf8_next_char(n);
            continue;
        }
        const char *lit = *g == '\\' ? g + 1 : g;
        if (*lit != '\0' && *lit == *n) {
            g = lit + 1;
            n++;
            continue;
        }
        if (star_g == NULL) {
            return FALSE;
        }
        g = star_g;
        n = star_n = g_utf8_next_char(star_n);
    }
    while (*g == '*') {
        g++;
    }
    return *g == '\0';
}

SbxPolicyDecision sbx_policy_decide(const SbxPolicy *policy, const char *provider, const char *tool,
                                    gboolean destructive)
{
    g_autofree char *name = g_strconcat(provider, ".", tool, NULL);
    SbxPolicyDecision d = {.action = policy->fallback};

    for (gsize i = 0; i < policy->n_rules; i++) {
        if (sbx_glob_match(policy->rules[i].glob, name)) {
            d.action = policy->rules[i].action;
            d.rule = policy->rules[i].glob;
            return d;
        }
    }
    /* A destructive tool needs at least an approval unless a rule said otherwise. */
    if (destructive && d.action < SBX_POLICY_APPROVE) {
        d.action = SBX_POLICY_APPROVE;
    }
    return d;
}
