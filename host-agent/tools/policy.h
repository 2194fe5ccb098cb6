/*
 * Tool policy (docs/tools.md, "Policy"): ordered rules of glob -> allow | approve | deny over
 * real names `provider.tool`. The first rule that matches decides; no match falls back to the
 * catalog's default, made at least `approve` for a tool marked destructive. Pure: no I/O.
 */
#pragma once

#include <glib.h>

/* Ordered from the loosest to the strictest: the fallback takes the stricter of two. */
typedef enum {
    SBX_POLICY_ALLOW,
    SBX_POLICY_APPROVE,
    SBX_POLICY_DENY,
} SbxPolicyAction;

/*
 * Rules in one catalog: each is checked for every call, so keep the list short enough that a
 * call's decision stays microseconds; 256 is far beyond a hand-written policy.
 */
#define SBX_POLICY_RULES_MAX 256

/* A rule's glob: a real name is at most 2 * 128 bytes + ".", so longer cannot be useful. */
#define SBX_POLICY_GLOB_MAX 512

/* Approval timeout: default 60 s (a person reading a prompt), at most 1 hour. */
#define SBX_POLICY_APPROVAL_TIMEOUT_DEFAULT_MS 60000
#define SBX_POLICY_APPROVAL_TIMEOUT_MAX_MS (60 * 60 * 1000)

typedef struct {
    char *glob;
    SbxPolicyAction action;
} SbxPolicyRule;

typedef struct {
    SbxPolicyRule *rules;
    gsize n_rules;
    SbxPolicyAction fallback;  /* no rule matched ("default"; allow unless set) */
    guint approval_timeout_ms; /* an unanswered approval is denied after this */
} SbxPolicy;

/* What the policy decided for one call, and why. */
typedef struct {
    SbxPolicyAction action;
    const char *rule; /* the glob that matched (owned by the policy), or NULL: the fallback */
} SbxPolicyDecision;

/** Set @policy to the defaults: no rules, fallback allow, 60 s approval timeout. */
void sbx_policy_init(SbxPolicy *policy);

/** Free what @policy owns and reset it to the defaults. */
void sbx_policy_clear(SbxPolicy *policy);

/**
 * Match @name against @glob: `*` any run of characters (also none, also `.`), `?` exactly one
 * character (UTF-8), `\` makes the next character literal; everything else is itself, case
 * sensitive. The whole name must match.
 */
gboolean sbx_glob_match(const char *glob, const char *name);

/** Check @glob's syntax (not empty, no trailing `\`, at most SBX_POLICY_GLOB_MAX bytes). */
gboolean sbx_glob_valid(const char *glob);

/** Decide for tool @tool of @provider (real names); @destructive: the tool says it destroys. */
SbxPolicyDecision sbx_policy_decide(const SbxPolicy *policy, const char *provider, const char *tool,
                                    gboolean destructive);

/** "allow", "approve", "deny". */
const char *sbx_policy_action_name(SbxPolicyAction action);

/** Parse an action name; FALSE if it is none of them. */
gboolean sbx_policy_action_from_name(const char *name, SbxPolicyAction *ret);
