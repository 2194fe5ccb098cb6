/*
 * The approval messages of `sandbox serve` (host-agent/server/unix-approvals.c), decoded as
 * `sandbox approvals` decodes them (server/proto.c): the list carries a long input as its start
 * only, and `{"type":"approvals","id":ID}` carries that approval alone with its input whole;
 * an id not pending gives an empty list, a malformed one bad_request. A run's teller tells its
 * own approvals as they start and stop waiting, within its bound.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "approvals.h"
#include "server/proto.h"
#include "server/unix-private.h"

/* The frames "sent" to the client: unix.c's sending, played here. */
static GPtrArray *sent;

void sbx_unix_conn_send_msg(UnixConn *conn, const SbxServeMsg *msg)
{
    (void)conn;
    g_ptr_array_add(sent, sbx_serve_proto_msg_encode(msg));
}

void sbx_unix_conn_send_error(UnixConn *conn, const char *code, const char *message)
{
    SbxServeMsg m = {.type = SBX_SERVE_MSG_ERROR, .code = (char *)code, .message = (char *)message};

    sbx_unix_conn_send_msg(conn, &m);
}

GPid sbx_unix_conn_peer_pid(UnixConn *conn)
{
    (void)conn;
    return 4242;
}

static void never(SbxApprovalOutcome outcome, const SbxApprovalAnswer *answer, gpointer data)
{
    (void)outcome;
    (void)answer;
    (void)data;
}

/* Ask @request and decode the one answer into @msg. */
static void ask(SbxApprovals *approvals, const char *request, SbxServeMsg *msg)
{
    g_auto(SbxServeRequest) req = {0};

    g_ptr_array_set_size(sent, 0);
    assert_true(sbx_serve_proto_request_decode(request, strlen(request), &req));
    assert_true(sbx_unix_approval_message(NULL, approvals, &req));
    assert_int_equal(sent->len, 1);
    const char *answer = sent->pdata[0];
    assert_true(sbx_serve_proto_msg_decode(answer, strlen(answer), msg));
}

static void test_whole_input_by_id(void **state)
{
    SbxApprovals *approvals = sbx_approvals_new();
    g_autoptr(GString) big = g_string_new("{\"text\":\"");
    (void)state;

    for (int i = 0; i < 1000; i++) {
        g_string_append_printf(big, "%04d,", i);
    }
    g_string_append(big, "\"}");
    g_autofree char *id_big = g_strdup(sbx_approvals_request(
        approvals, "files", "write", big->str, "sandbox run, pid 1", 60000, NULL, never, NULL));
    g_autofree char *id_small = g_strdup(sbx_approvals_request(
        approvals, "api", "guarded", "{\"p\":1}", NULL, 60000, NULL, never, NULL));
    {
        g_auto(SbxServeMsg) all = {0};
        ask(approvals, "{\"type\":\"approvals\"}", &all);
        assert_int_equal(all.n_pending, 2);
        assert_null(all.pending[0].input_json);
        assert_int_equal(strlen(all.pending[0].input_excerpt), 4096);
        assert_string_equal(all.pending[1].input_json, "{\"p\":1}");
    }
    {
        g_auto(SbxServeMsg) one = {0};
        g_autofree char *req = g_strdup_printf("{\"type\":\"approvals\",\"id\":\"%s\"}", id_big);
        ask(approvals, req, &one);
        assert_int_equal(one.n_pending, 1);
        assert_string_equal(one.pending[0].id, id_big);
        assert_string_equal(one.pending[0].input_json, big->str); /* whole */
        assert_null(one.pending[0].input_excerpt);
        assert_string_equal(one.pending[0].origin, "sandbox run, pid 1");
    }
    {
        g_auto(SbxServeMsg) none = {0};
        ask(approvals, "{\"type\":\"approvals\",\"id\":\"4242\"}", &none);
        assert_int_equal(none.type, SBX_SERVE_MSG_APPROVALS);
        assert_int_equal(none.n_pending, 0);
    }
    {
        g_auto(SbxServeMsg) bad = {0};
        ask(approvals, "{\"type\":\"approvals\",\"id\":5}", &bad);
        assert_int_equal(bad.type, SBX_SERVE_MSG_ERROR);
        assert_string_equal(bad.code, "bad_request");
    }
    assert_true(sbx_approvals_decide(approvals, id_big, FALSE));
    assert_true(sbx_approvals_decide(approvals, id_small, FALSE));
    while (g_main_context_iteration(NULL, FALSE)) {
        /* the decisions call back from the loop */
    }
    sbx_approvals_free(approvals);
}

/* The frames sent since @from, decoded (caller frees the array's messages). */
static SbxServeMsg *sent_since(guint from, guint *ret_n)
{
    SbxServeMsg *msgs = g_new0(SbxServeMsg, sent->len - from + 1);

    for (guint i = from; i < sent->len; i++) {
        const char *text = sent->pdata[i];
        assert_true(sbx_serve_proto_msg_decode(text, strlen(text), &msgs[i - from]));
    }
    *ret_n = sent->len - from;
    return msgs;
}

static void msgs_free(SbxServeMsg *msgs, guint n)
{
    for (guint i = 0; i < n; i++) {
        sbx_serve_proto_msg_clear(&msgs[i]);
    }
    g_free(msgs);
}

/*
 * A run's teller: told once when an approval of its own starts waiting (not another run's),
 * once when it stops (decided here; the other run's decision tells nothing), nothing when
 * nothing of its own changed; at most SBX_UNIX_RUN_APPROVALS_TOLD_MAX told waiting at once.
 */
static void test_teller(void **state)
{
    SbxApprovals *approvals = sbx_approvals_new();
    int mine, other; /* two runs' tools: only their addresses tag the approvals */
    UnixApprovalTeller *t = sbx_unix_approval_teller_new(NULL, &mine);
    guint n;
    (void)state;

    g_ptr_array_set_size(sent, 0);
    g_autofree char *a =
        g_strdup(sbx_approvals_request_of(approvals, &mine, "calc", "add", "{\"a\":1}",
                                          "sandbox run, pid 1", 60000, NULL, never, NULL));
    g_autofree char *b =
        g_strdup(sbx_approvals_request_of(approvals, &other, "calc", "add", "{\"a\":2}",
                                          "sandbox run, pid 1", 60000, NULL, never, NULL));
    sbx_unix_approval_tell(t, approvals);
    SbxServeMsg *m = sent_since(0, &n);
    assert_int_equal(n, 1);
    assert_int_equal(m[0].type, SBX_SERVE_MSG_APPROVAL);
    assert_int_equal(m[0].n_pending, 1);
    assert_string_equal(m[0].pending[0].id, a);
    assert_string_equal(m[0].pending[0].input_json, "{\"a\":1}");
    assert_int_equal(m[0].pending[0].timeout_ms, 60000);
    msgs_free(m, n);

    sbx_unix_approval_tell(t, approvals); /* nothing changed */
    assert_int_equal(sent->len, 1);
    assert_true(sbx_approvals_decide(approvals, b, TRUE));
    sbx_unix_approval_tell(t, approvals); /* another run's */
    assert_int_equal(sent->len, 1);
    assert_true(sbx_approvals_decide(approvals, a, FALSE));
    sbx_unix_approval_tell(t, approvals);
    m = sent_since(1, &n);
    assert_int_equal(n, 1);
    assert_int_equal(m[0].type, SBX_SERVE_MSG_APPROVAL_OVER);
    assert_string_equal(m[0].id, a);
    msgs_free(m, n);

    /* the bound: more waiting than it may tell at once are told as earlier ones end */
    g_autoptr(GPtrArray) ids = g_ptr_array_new_with_free_func(g_free);
    for (guint i = 0; i < SBX_UNIX_RUN_APPROVALS_TOLD_MAX + 2; i++) {
        g_ptr_array_add(ids,
                        g_strdup(sbx_approvals_request_of(approvals, &mine, "calc", "add", "{}",
                                                          NULL, 60000, NULL, never, NULL)));
    }
    g_ptr_array_set_size(sent, 0);
    sbx_unix_approval_tell(t, approvals);
    assert_int_equal(sent->len, SBX_UNIX_RUN_APPROVALS_TOLD_MAX);
    assert_true(sbx_approvals_decide(approvals, ids->pdata[0], FALSE));
    sbx_unix_approval_tell(t, approvals);
    m = sent_since(SBX_UNIX_RUN_APPROVALS_TOLD_MAX, &n);
    assert_int_equal(n, 2); /* the first's end, then one more told */
    assert_int_equal(m[0].type, SBX_SERVE_MSG_APPROVAL_OVER);
    assert_int_equal(m[1].type, SBX_SERVE_MSG_APPROVAL);
    assert_string_equal(m[1].pending[0].id, ids->pdata[SBX_UNIX_RUN_APPROVALS_TOLD_MAX]);
    msgs_free(m, n);
    for (guint i = 1; i < ids->len; i++) {
        assert_true(sbx_approvals_decide(approvals, ids->pdata[i], FALSE));
    }
    sbx_unix_approval_teller_free(t);
    while (g_main_context_iteration(NULL, FALSE)) {
        /* the decisions call back from the loop */
    }
    sbx_approvals_free(approvals);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_input_by_id),
        cmocka_unit_test(test_teller),
    };
    sent = g_ptr_array_new_with_free_func(g_free);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    g_ptr_array_free(sent, TRUE);
    return failed;
}
