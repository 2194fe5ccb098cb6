/*
 * The tool policy: globs, first match wins, the default and destructive tools, the "policy"
 * section's errors, and pending approvals (approved, denied, timed out, cancelled).
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "approvals.h"
#include "catalog.h"
#include "policy.h"
#include "tools-error.h"
#include "tools.h"

static void test_glob(void **state)
{
    (void)state;
    assert_true(sbx_glob_match("github.*", "github.search"));
    assert_true(sbx_glob_match("github.*", "github."));
    assert_false(sbx_glob_match("github.*", "gitlab.search"));
    assert_false(sbx_glob_match("github.*", "xgithub.search"));
    assert_true(sbx_glob_match("*.delete_*", "fs.delete_file"));
    assert_true(sbx_glob_match("*.delete_*", "a.b.delete_"));
    assert_false(sbx_glob_match("*.delete_*", "fs.undelete_file"));
    assert_true(sbx_glob_match("*", "anything.at.all"));
    assert_true(sbx_glob_match("a?c.t", "abc.t"));
    assert_true(sbx_glob_match("a?c.t", "aéc.t")); /* one character, two bytes */
    assert_false(sbx_glob_match("a?c.t", "ac.t"));
    assert_true(sbx_glob_match("p.\\*", "p.*"));
    assert_false(sbx_glob_match("p.\\*", "p.x"));
    assert_true(sbx_glob_match("*a*b*c*", "xxaxxbxxcxx"));
    assert_false(sbx_glob_match("*a*b*c*", "xxaxxcxxbxx"));
    assert_false(sbx_glob_match("exact.name", "exact.name2"));
    assert_true(sbx_glob_match("Exact.Name", "Exact.Name"));
    assert_false(sbx_glob_match("exact.name", "Exact.Name")); /* case sensitive */
    assert_true(sbx_glob_valid("*.x"));
    assert_false(sbx_glob_valid(""));
    assert_false(sbx_glob_valid("abc\\"));
}

/* Many stars against a long name that fails: linear backtracking, not exponential. */
static void test_glob_is_fast(void **state)
{
    (void)state;
    g_autofree char *glob = g_strnfill(200, '*');
    g_autofree char *name = g_strnfill(255, 'a');
    g_autofree char *g2 = g_strconcat(glob, "b", NULL);
    gint64 t = g_get_monotonic_time();
    assert_false(sbx_glob_match(g2, name));
    assert_true(g_get_monotonic_time() - t < 1000000);
}

static SbxCatalog *parse(const char *json, GError **error)
{
    return sbx_catalog_parse(json, strlen(json), "cat.json", "/base", error);
}

#define PROVIDERS                                                                                  \
    "\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"/bin/true\"], "                \
    "\"tools\": {}}}"

static void test_first_match_wins(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat = parse("{" PROVIDERS ", \"policy\": {\"rules\": ["
                                      "{\"match\": \"github.delete_*\", \"action\": \"approve\"},"
                                      "{\"match\": \"*.delete_*\", \"action\": \"deny\"},"
                                      "{\"match\": \"github.*\", \"action\": \"allow\"}],"
                                      "\"default\": \"deny\", \"approval_timeout_ms\": 5000}}",
                                      &error);
    assert_non_null(cat);
    assert_int_equal(cat->policy.n_rules, 3);
    assert_int_equal(cat->policy.approval_timeout_ms, 5000);
    SbxPolicyDecision d = sbx_policy_decide(&cat->policy, "github", "delete_repo", FALSE);
    assert_int_equal(d.action, SBX_POLICY_APPROVE);
    assert_string_equal(d.rule, "github.delete_*");
    d = sbx_policy_decide(&cat->policy, "fs", "delete_file", FALSE);
    assert_int_equal(d.action, SBX_POLICY_DENY);
    assert_string_equal(d.rule, "*.delete_*");
    d = sbx_policy_decide(&cat->policy, "github", "search", TRUE);
    assert_int_equal(d.action, SBX_POLICY_ALLOW); /* a rule beats destructive */
    d = sbx_policy_decide(&cat->policy, "other", "read", FALSE);
    assert_int_equal(d.action, SBX_POLICY_DENY); /* the default */
    assert_null(d.rule);
}

static void test_defaults(void **state)
{
    (void)state;
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxCatalog) cat = parse("{" PROVIDERS "}", &error);
    assert_non_null(cat);
    assert_int_equal(cat->policy.n_rules, 0);
    assert_int_equal(cat->policy.approval_timeout_ms, SBX_POLICY_APPROVAL_TIMEOUT_DEFAULT_MS);
    SbxPolicyDecision d = sbx_policy_decide(&cat->policy, "p", "t", FALSE);
    assert_int_equal(d.action, SBX_POLICY_ALLOW);
    d = sbx_policy_decide(&cat->policy, "p", "t", TRUE);
    assert_int_equal(d.action, SBX_POLICY_APPROVE); /* destructive: at least approve */
    cat->policy.fallback = SBX_POLICY_DENY;
    d = sbx_policy_decide(&cat->policy, "p", "t", TRUE);
    assert_int_equal(d.action, SBX_POLICY_DENY); /* the stricter of the two */
}

static void expect_error(const char *policy, const char *message)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *json = g_strdup_printf("{" PROVIDERS ", \"policy\": %s}", policy);
    g_autoptr(SbxCatalog) cat = parse(json, &error);
    assert_null(cat);
    assert_non_null(error);
    if (strstr(error->message, message) == NULL) {
        fail_msg("expected \"%s\" in \"%s\"", message, error->message);
    }
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("[]", "cat.json: policy: expected an object");
    expect_error("{\"rulez\": []}", "policy: unknown field \"rulez\"");
    expect_error("{\"rules\": {}}", "policy.rules: expected an array");
    expect_error("{\"rules\": [{\"match\": \"a.*\", \"action\": \"maybe\"}]}",
                 "policy.rules[0].action: expected \"allow\", \"approve\" or \"deny\"");
    expect_error("{\"rules\": [{\"match\": \"a.*\"}]}", "policy.rules[0]: missing field");
    expect_error("{\"rules\": [{\"match\": \"a.*\", \"action\": \"deny\"}, {\"match\": \"\", "
                 "\"action\": \"deny\"}]}",
                 "policy.rules[1].match: expected a glob");
    expect_error("{\"rules\": [{\"match\": \"a\\\\\", \"action\": \"deny\"}]}",
                 "policy.rules[0].match");
    expect_error("{\"rules\": [{\"match\": \"a\", \"action\": \"deny\", \"x\": 1}]}",
                 "unknown field \"x\"");
    expect_error("{\"default\": \"yes\"}", "policy.default: expected");
    expect_error("{\"approval_timeout_ms\": 0}", "policy.approval_timeout_ms: expected an integer");
    expect_error("{\"approval_timeout_ms\": 1.5}", "policy.approval_timeout_ms");
}

/* ---- approvals ---------------------------------------------------------------------- */

typedef struct {
    int calls;
    SbxApprovalOutcome outcome;
    char *answered_by;
    gint64 asked_at_ms, answered_at_ms;
} Seen;

static void on_outcome(SbxApprovalOutcome outcome, const SbxApprovalAnswer *answer, gpointer data)
{
    Seen *s = data;
    s->calls++;
    s->outcome = outcome;
    g_free(s->answered_by);
    s->answered_by = g_strdup(answer->answered_by);
    s->asked_at_ms = answer->asked_at_ms;
    s->answered_at_ms = answer->answered_at_ms;
}

static void spin_until(Seen *s, int ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000ll;
    while (s->calls == 0 && g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, TRUE);
    }
}

static void test_approvals(void **state)
{
    (void)state;
    SbxApprovals *a = sbx_approvals_new();
    Seen yes = {0}, no = {0}, late = {0};

    const char *id1 =
        sbx_approvals_request(a, "p", "t", "{\"x\":1}", "me", 60000, NULL, on_outcome, &yes);
    g_autofree char *keep1 = g_strdup(id1);
    const char *id2 = sbx_approvals_request(a, "p", "u", "{}", NULL, 60000, NULL, on_outcome, &no);
    g_autofree char *keep2 = g_strdup(id2);
    sbx_approvals_request(a, "p", "v", "{}", NULL, 50, NULL, on_outcome, &late);
    assert_string_not_equal(keep1, keep2);
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(a);
    assert_int_equal(pending->len, 3);
    const SbxApproval *first = pending->pdata[0];
    assert_string_equal(first->tool, "t");
    assert_string_equal(first->input_json, "{\"x\":1}");
    assert_string_equal(first->origin, "me");
    assert_int_equal(yes.calls, 0); /* never from inside the request */

    assert_true(sbx_approvals_decide_by(a, keep1, TRUE, "the terminal"));
    assert_false(sbx_approvals_decide(a, keep1, TRUE)); /* answered already */
    assert_true(sbx_approvals_decide(a, keep2, FALSE));
    assert_false(sbx_approvals_decide(a, "nope", TRUE));
    spin_until(&yes, 1000);
    spin_until(&no, 1000);
    spin_until(&late, 2000);
    assert_int_equal(yes.calls, 1);
    assert_int_equal(yes.outcome, SBX_APPROVAL_APPROVED);
    assert_int_equal(no.outcome, SBX_APPROVAL_DENIED);
    assert_int_equal(late.calls, 1);
    assert_int_equal(late.outcome, SBX_APPROVAL_TIMED_OUT);
    /* Who answered and when, for the record; nobody answered the late one. */
    assert_string_equal(yes.answered_by, "the terminal");
    assert_true(yes.asked_at_ms > 0 && yes.answered_at_ms >= yes.asked_at_ms);
    assert_null(no.answered_by);
    assert_true(no.answered_at_ms >= no.asked_at_ms);
    assert_null(late.answered_by);
    assert_int_equal(late.answered_at_ms, 0);
    g_free(yes.answered_by);
    g_autoptr(GPtrArray) none = sbx_approvals_pending(a);
    assert_int_equal(none->len, 0);
    sbx_approvals_free(a);
}

static void test_approval_cancelled(void **state)
{
    (void)state;
    SbxApprovals *a = sbx_approvals_new();
    g_autoptr(GCancellable) cancel = g_cancellable_new();
    Seen s = {0};

    sbx_approvals_request(a, "p", "t", "{}", NULL, 60000, cancel, on_outcome, &s);
    g_cancellable_cancel(cancel);
    spin_until(&s, 1000);
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.outcome, SBX_APPROVAL_CANCELLED);
    /* A pending one is dropped by free without calling back. */
    Seen dropped = {0};
    sbx_approvals_request(a, "p", "t", "{}", NULL, 60000, NULL, on_outcome, &dropped);
    sbx_approvals_free(a);
    assert_int_equal(dropped.calls, 0);
}

static void count_notify(SbxApprovals *approvals, gpointer data)
{
    (void)approvals;
    (*(guint *)data)++;
}

/* Counts, and sees whether @id is still listed when told. */
typedef struct {
    guint n;
    const char *id;
    gboolean listed;
} Told;

static void told(SbxApprovals *approvals, gpointer data)
{
    Told *t = data;
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(approvals);

    t->n++;
    t->listed = FALSE;
    for (guint i = 0; i < pending->len; i++) {
        t->listed |= strcmp(((const SbxApproval *)pending->pdata[i])->id, t->id) == 0;
    }
}

/*
 * The watcher hears of approvals that stop waiting unanswered (the prompt moves on), and of one
 * decided, no longer listed by then (an MCP client's question is withdrawn).
 */
static void test_approvals_notify(void **state)
{
    (void)state;
    SbxApprovals *a = sbx_approvals_new();
    g_autoptr(GCancellable) cancel = g_cancellable_new();
    Seen late = {0}, gone = {0}, decided = {0};
    guint notified = 0;
    Told t = {0};

    t.id = sbx_approvals_request(a, "p", "t", "{}", NULL, 60000, NULL, on_outcome, &decided);
    sbx_approvals_set_notify(a, told, &t);
    assert_true(sbx_approvals_decide_by(a, t.id, TRUE, "me"));
    assert_int_equal(t.n, 1);
    assert_false(t.listed);
    spin_until(&decided, 1000);
    assert_int_equal(decided.outcome, SBX_APPROVAL_APPROVED);
    g_free(decided.answered_by);

    sbx_approvals_set_notify(a, count_notify, &notified);
    sbx_approvals_request(a, "p", "t", "{}", NULL, 50, NULL, on_outcome, &late);
    sbx_approvals_request(a, "p", "t", "{}", NULL, 60000, cancel, on_outcome, &gone);
    assert_int_equal(notified, 2);
    spin_until(&late, 2000);
    assert_int_equal(notified, 3);
    g_cancellable_cancel(cancel);
    spin_until(&gone, 1000);
    assert_int_equal(notified, 4);
    g_autoptr(GPtrArray) none = sbx_approvals_pending(a);
    assert_int_equal(none->len, 0);
    sbx_approvals_free(a);
}

static void test_approvals_bounded(void **state)
{
    (void)state;
    SbxApprovals *a = sbx_approvals_new();
    Seen many[SBX_APPROVALS_PENDING_MAX] = {0}, extra = {0};

    for (int i = 0; i < SBX_APPROVALS_PENDING_MAX; i++) {
        sbx_approvals_request(a, "p", "t", "{}", NULL, 60000, NULL, on_outcome, &many[i]);
    }
    sbx_approvals_request(a, "p", "t", "{}", NULL, 60000, NULL, on_outcome, &extra);
    spin_until(&extra, 1000);
    assert_int_equal(extra.outcome, SBX_APPROVAL_UNAVAILABLE);
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(a);
    assert_int_equal(pending->len, SBX_APPROVALS_PENDING_MAX);
    sbx_approvals_free(a);
}

/* ---- through the dispatcher: the provider is /bin/cat (it echoes the request) -------- */

typedef struct {
    gboolean done;
    char *result;
    char *policy;
    GError *error;
    SbxTools *tools;
    guint in_flight; /* at the callback: it may free the tools, nothing may count on them after */
} Outcome;

static void on_call(GObject *src, GAsyncResult *res, gpointer data)
{
    (void)src;
    Outcome *o = data;
    o->result = sbx_tools_call_finish(NULL, res, &o->error);
    o->policy = sbx_tools_call_policy(res);
    o->in_flight = sbx_tools_in_flight(o->tools);
    o->done = TRUE;
}

static void start(SbxTools *tools, const char *tool, Outcome *o, GCancellable *cancel)
{
    memset(o, 0, sizeof(*o));
    o->tools = tools;
    sbx_tools_call_async(tools, "p", tool, "{\"x\":1}", cancel, on_call, o);
}

static void finish(Outcome *o)
{
    gint64 end = g_get_monotonic_time() + 20 * 1000000;
    while (!o->done && g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, TRUE);
    }
    assert_true(o->done);
    if (o->error != NULL) {
        fprintf(stderr, "the call failed: %s\n", o->error->message); /* expected or not */
    }
}

static void outcome_clear(Outcome *o)
{
    g_free(o->result);
    g_free(o->policy);
    g_clear_error(&o->error);
}

static SbxTools *cat_tools(guint approval_timeout_ms)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *json = g_strdup_printf(
        "{\"providers\": {\"p\": {\"kind\": \"command\", \"command\": [\"/bin/cat\"], "
        "\"tools\": {\"read\": {}, \"drop\": {}, \"ask\": {}, \"rm\": {}}}}, "
        "\"policy\": {\"rules\": [{\"match\": \"p.drop\", \"action\": \"deny\"}, "
        "{\"match\": \"p.ask\", \"action\": \"approve\"}], \"approval_timeout_ms\": %u}}",
        approval_timeout_ms);
    SbxCatalog *cat = sbx_catalog_parse(json, strlen(json), "cat.json", "/", &error);
    assert_non_null(cat);
    cat->providers[0].tools[3].destructive = TRUE; /* "rm", as an MCP annotation would say */
    SbxTools *tools = sbx_tools_new(cat, &error);
    assert_non_null(tools);
    return tools;
}

static void test_dispatch(void **state)
{
    (void)state;
    g_autoptr(SbxTools) tools = cat_tools(60000);
    Outcome o;

    start(tools, "read", &o, NULL);
    finish(&o);
    assert_string_equal(o.result, "{\"tool\":\"read\",\"input\":{\"x\":1}}");
    assert_string_equal(o.policy, "{\"action\":\"allow\",\"rule\":null}");
    outcome_clear(&o);

    start(tools, "drop", &o, NULL);
    finish(&o);
    assert_null(o.result);
    assert_true(g_error_matches(o.error, SBX_TOOL_ERROR, SBX_ERR_POLICY_DENIED));
    assert_string_equal(o.error->message, "tool p.drop: denied by the policy (rule \"p.drop\")");
    assert_string_equal(o.policy, "{\"action\":\"deny\",\"rule\":\"p.drop\"}");
    outcome_clear(&o);

    /* No approvals set (a direct run without a terminal): denied at once, saying how. */
    start(tools, "ask", &o, NULL);
    finish(&o);
    assert_true(g_error_matches(o.error, SBX_TOOL_ERROR, SBX_ERR_POLICY_DENIED));
    assert_non_null(strstr(o.error->message, "sandbox serve"));
    outcome_clear(&o);
    start(tools, "rm", &o, NULL); /* destructive, no rule: approve */
    finish(&o);
    assert_true(g_error_matches(o.error, SBX_TOOL_ERROR, SBX_ERR_POLICY_DENIED));
    assert_string_equal(o.policy, "{\"action\":\"approve\",\"rule\":null,\"destructive\":true}");
    outcome_clear(&o);
    assert_int_equal(sbx_tools_in_flight(tools), 0);
}

static void test_dispatch_approvals(void **state)
{
    (void)state;
    g_autoptr(SbxTools) tools = cat_tools(300);
    SbxApprovals *a = sbx_approvals_new();
    Outcome asked, other, late;

    sbx_tools_set_approvals(tools, a, "test");
    start(tools, "ask", &asked, NULL);
    g_autoptr(GPtrArray) pending = sbx_approvals_pending(a);
    assert_int_equal(pending->len, 1);
    g_autofree char *id = g_strdup(((SbxApproval *)pending->pdata[0])->id);
    assert_int_equal(sbx_tools_in_flight(tools), 1); /* a waiting call is in flight */
    start(tools, "read", &other, NULL);              /* not held up by the waiting one */
    finish(&other);
    assert_non_null(other.result);
    assert_false(asked.done);
    assert_true(sbx_approvals_decide(a, id, TRUE));
    finish(&asked);
    assert_string_equal(asked.result, "{\"tool\":\"ask\",\"input\":{\"x\":1}}");
    assert_non_null(strstr(asked.policy, "\"approval\":\"approved\""));
    outcome_clear(&asked);
    outcome_clear(&other);

    start(tools, "ask", &late, NULL); /* nobody answers: denied after 300 ms */
    finish(&late);
    assert_true(g_error_matches(late.error, SBX_TOOL_ERROR, SBX_ERR_POLICY_DENIED));
    assert_non_null(strstr(late.error->message, "no approval within 300 ms"));
    assert_non_null(strstr(late.policy, "\"approval\":\"timed_out\""));
    assert_int_equal(late.in_flight, 0); /* no longer in flight when answered */
    outcome_clear(&late);

    g_autoptr(GCancellable) cancel = g_cancellable_new();
    start(tools, "ask", &late, cancel); /* the execution ends while it waits */
    g_cancellable_cancel(cancel);
    finish(&late);
    assert_true(g_error_matches(late.error, G_IO_ERROR, G_IO_ERROR_CANCELLED));
    outcome_clear(&late);
    assert_int_equal(sbx_tools_in_flight(tools), 0);
    sbx_approvals_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_glob_is_fast),
        cmocka_unit_test(test_first_match_wins),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_approvals),
        cmocka_unit_test(test_approval_cancelled),
        cmocka_unit_test(test_approvals_notify),
        cmocka_unit_test(test_approvals_bounded),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_dispatch_approvals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
