/*
 * The decoders of `sandbox serve`'s client protocol (cli/serve-proto.c): each request kind
 * accepted with its defaults, a run's function call (entry, args, kwargs) kept as sent, each
 * refusal with the text the server answers, frames that are no message at all; and each server
 * message the clients read (status, output, done, error, approvals, approved, denied, another
 * type); the session and file requests and messages (a session opened, listed, shown, ended, a
 * run in one, a file put in pieces, got, listed, deleted), each refusal with its text; the
 * encoders' texts, decoded back the same.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "protocol/base64.h"
#include "server/proto.h"
#include "session/session.h"

/* Decode @json as a client's request; it must be a message. */
static void request(const char *json, SbxServeRequest *req)
{
    if (!sbx_serve_proto_request_decode(json, strlen(json), req)) {
        fail_msg("not a message: %s", json);
    }
}

/* @json is a request of @type refused with @why. */
static void expect_bad(const char *json, SbxServeRequestType type, const char *why)
{
    g_auto(SbxServeRequest) req = {0};

    request(json, &req);
    assert_int_equal(req.type, type);
    if (req.bad == NULL || strcmp(req.bad, why) != 0) {
        fail_msg("%s: expected \"%s\", got \"%s\"", json, why, req.bad ? req.bad : "(accepted)");
    }
    assert_null(req.run.code);
    assert_null(req.run.entry);
    assert_null(req.run.args_json);
    assert_null(req.run.kwargs_json);
    assert_null(req.id);
}

static void test_run_defaults(void **state)
{
    g_auto(SbxServeRequest) req = {0};
    (void)state;

    request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"print(1)\"}", &req);
    assert_int_equal(req.type, SBX_SERVE_REQ_RUN);
    assert_null(req.bad);
    assert_int_equal(req.run.language, SBX_LANG_PYTHON);
    assert_string_equal(req.run.code, "print(1)");
    assert_null(req.run.tools_path);
    assert_int_equal(req.run.timeout_ms, SBX_SESSION_TIMEOUT_DEFAULT_MS);
    assert_int_equal(req.run.output_limit, SBX_SESSION_OUTPUT_LIMIT_DEFAULT);
    assert_false(req.run.collect);
    assert_null(req.run.profile);
    assert_false(req.run.profile_not_name);
}

/* Every field, as `sandbox run` sends them (serve-client.c), and nulls for the defaults. */
static void test_run_fields(void **state)
{
    g_auto(SbxServeRequest) req = {0};
    g_auto(SbxServeRequest) nulls = {0};
    (void)state;

    request("{\"type\":\"run\",\"language\":\"javascript\",\"code\":\"console.log('é')\","
            "\"tools\":\"/abs/tools.json\",\"profile\":\"microvm-serial\",\"timeout_ms\":86400000,"
            "\"output_limit\":1073741824,\"collect\":true,\"live\":true}",
            &req);
    assert_null(req.bad);
    assert_int_equal(req.run.language, SBX_LANG_JAVASCRIPT);
    assert_string_equal(req.run.code, "console.log('é')");
    assert_string_equal(req.run.tools_path, "/abs/tools.json");
    assert_string_equal(req.run.profile, "microvm-serial");
    assert_int_equal(req.run.timeout_ms, SBX_SERVE_TIMEOUT_MAX_MS);
    assert_int_equal(req.run.output_limit, SBX_SERVE_OUTPUT_LIMIT_MAX);
    assert_true(req.run.collect);
    assert_true(req.run.live);

    request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"tools\":null,"
            "\"profile\":null,\"timeout_ms\":null,\"output_limit\":null,\"collect\":1}",
            &nulls);
    assert_null(nulls.bad);
    assert_null(nulls.run.tools_path);
    assert_null(nulls.run.profile);
    assert_false(nulls.run.profile_not_name);
    assert_int_equal(nulls.run.timeout_ms, SBX_SESSION_TIMEOUT_DEFAULT_MS);
    assert_false(nulls.run.collect); /* only true is true */
    assert_false(nulls.run.live);
}

/* Numbers are decided on their literal (sbx_json_int64): 1e3 is 1000, 1.0 is 1, 1.5 is not. */
static void test_run_numbers(void **state)
{
    g_auto(SbxServeRequest) req = {0};
    (void)state;

    request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":1e3,"
            "\"output_limit\":1.0}",
            &req);
    assert_null(req.bad);
    assert_int_equal(req.run.timeout_ms, 1000);
    assert_int_equal(req.run.output_limit, 1);
}

/* TypeScript is a language of its own on the socket (the guest strips its types). */
static void test_run_typescript(void **state)
{
    g_auto(SbxServeRequest) req = {0};
    (void)state;

    request("{\"type\":\"run\",\"language\":\"typescript\",\"code\":\"const x: number = 1\"}",
            &req);
    assert_null(req.bad);
    assert_int_equal(req.run.language, SBX_LANG_TYPESCRIPT);
    assert_string_equal(req.run.code, "const x: number = 1");
}

/* A profile that is not a string is not pooled anywhere: `unavailable`, as a name not pooled. */
static void test_run_profile_not_name(void **state)
{
    g_auto(SbxServeRequest) req = {0};
    (void)state;

    request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"profile\":7}", &req);
    assert_null(req.bad);
    assert_null(req.run.profile);
    assert_true(req.run.profile_not_name);
}

/*
 * A function call: entry, args and kwargs kept as sent, minified, every number's literal
 * unchanged (beyond 2^53, beyond a double, a negative zero); null is absent.
 */
static void test_run_call(void **state)
{
    g_auto(SbxServeRequest) req = {0};
    g_auto(SbxServeRequest) js = {0};
    g_auto(SbxServeRequest) nulls = {0};
    (void)state;

    request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"def f(*a, **k): pass\","
            "\"entry\":\"f\",\"args\": [9007199254740993, 1e400, -0.0, \"\\u00e9 \"],"
            "\"kwargs\":{ \"x\" : 1.50 , \"y\":{}}}",
            &req);
    assert_null(req.bad);
    assert_string_equal(req.run.entry, "f");
    assert_string_equal(req.run.args_json, "[9007199254740993,1e400,-0.0,\"\\u00e9 \"]");
    assert_string_equal(req.run.kwargs_json, "{\"x\":1.50,\"y\":{}}");

    request("{\"type\":\"run\",\"language\":\"typescript\",\"code\":\"1\",\"entry\":\"$f_1\","
            "\"args\":[]}",
            &js);
    assert_null(js.bad);
    assert_string_equal(js.run.entry, "$f_1");
    assert_string_equal(js.run.args_json, "[]");
    assert_null(js.run.kwargs_json);

    request("{\"type\":\"run\",\"language\":\"javascript\",\"code\":\"1\",\"entry\":null,"
            "\"args\":null,\"kwargs\":null}",
            &nulls);
    assert_null(nulls.bad);
    assert_null(nulls.run.entry);
    assert_null(nulls.run.args_json);
    assert_null(nulls.run.kwargs_json);
}

static void test_run_refused(void **state)
{
    static const char numbers[] =
        "timeout_ms (1..86400000) and output_limit (1..2^30) are integers";
    static const char entry_rule[] =
        "entry: an identifier, the name of the function to call ([A-Za-z_$][A-Za-z0-9_$]*, at "
        "most 128 characters)";
    static const char js_kwargs[] = "kwargs: keyword arguments are for Python only (JavaScript "
                                    "and TypeScript functions take args)";
    static const struct {
        const char *json;
        const char *why;
    } cases[] = {
        {"{\"type\":\"run\"}", "language: javascript, typescript or python"},
        {"{\"type\":\"run\",\"language\":\"cobol\",\"code\":\"1\"}",
         "language: javascript, typescript or python"},
        {"{\"type\":\"run\",\"language\":1,\"code\":\"1\"}",
         "language: javascript, typescript or python"},
        {"{\"type\":\"run\",\"language\":\"python\"}",
         "code: a UTF-8 string, not empty unless an entry is named"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"\"}",
         "code: a UTF-8 string, not empty unless an entry is named"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":[\"1\"]}",
         "code: a UTF-8 string, not empty unless an entry is named"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"tools\":\"rel/path\"}",
         "tools: an absolute path or null"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"tools\":5}",
         "tools: an absolute path or null"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":-1}", numbers},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":0}", numbers},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":86400001}",
         numbers},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":1.5}", numbers},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"timeout_ms\":\"100\"}",
         numbers},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"output_limit\":1073741825}",
         numbers},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\","
         "\"output_limit\":18446744073709551617}",
         numbers},
        /* the function call (exec/call.h) */
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"1f\"}", entry_rule},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"\"}", entry_rule},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"a.b\"}", entry_rule},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":7}", entry_rule},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":[\"f\"]}", entry_rule},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"args\":{}}",
         "args: a JSON array (the function's positional arguments)"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"args\":\"[1]"
         "\"}",
         "args: a JSON array (the function's positional arguments)"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"args\":1}",
         "args: a JSON array (the function's positional arguments)"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":\"f\",\"kwargs\":[]}",
         "kwargs: a JSON object (the function's keyword arguments)"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"args\":[1]}",
         "args: only with an entry (the function to call)"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"entry\":null,\"args\":[]}",
         "args: only with an entry (the function to call)"},
        {"{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"kwargs\":{}}",
         "kwargs: only with an entry (the function to call)"},
        {"{\"type\":\"run\",\"language\":\"javascript\",\"code\":\"1\",\"entry\":\"f\","
         "\"kwargs\":{}}",
         js_kwargs},
        {"{\"type\":\"run\",\"language\":\"typescript\",\"code\":\"1\",\"entry\":\"f\","
         "\"args\":[],\"kwargs\":{\"a\":1}}",
         js_kwargs},
    };
    (void)state;

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        expect_bad(cases[i].json, SBX_SERVE_REQ_RUN, cases[i].why);
    }
}

static void test_other_requests(void **state)
{
    g_autofree char *id64 = g_strnfill(64, '7');
    g_autofree char *ok64 = g_strdup_printf("{\"type\":\"deny\",\"id\":\"%s\"}", id64);
    g_autofree char *bad65 = g_strdup_printf("{\"type\":\"approve\",\"id\":\"%s8\"}", id64);
    static const char bad_id[] = "id: the approval's id (a string)";
    (void)state;

    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"status\"}", &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_STATUS);
        assert_null(req.bad);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"approvals\",\"extra\":1}", &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_APPROVALS);
        assert_null(req.bad);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"approve\",\"id\":\"3\"}", &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_APPROVE);
        assert_null(req.bad);
        assert_string_equal(req.id, "3");
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request(ok64, &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_DENY);
        assert_null(req.bad);
        assert_string_equal(req.id, id64);
    }
    expect_bad("{\"type\":\"approve\"}", SBX_SERVE_REQ_APPROVE, bad_id);
    expect_bad("{\"type\":\"deny\",\"id\":5}", SBX_SERVE_REQ_DENY, bad_id);
    expect_bad(bad65, SBX_SERVE_REQ_APPROVE, bad_id);
    expect_bad("{\"type\":\"nope\"}", SBX_SERVE_REQ_UNKNOWN, "unknown message type");
    expect_bad("{\"type\":\"\"}", SBX_SERVE_REQ_UNKNOWN, "unknown message type");
}

/* Not a JSON object with a string `type`: the server closes the connection. */
static void test_not_messages(void **state)
{
    static const char *const cases[] = {
        "not json",
        "[1,2]",
        "{}",
        "{\"type\":5}",
        "{\"type\":null}",
        "\"run\"",
        "{\"type\":\"run\",\"type\":\"status\"}", /* a name twice */
        "{\"type\":\"status\"} {}",
        "{\"type\":\"st\\u0000atus\"}",
    };
    (void)state;

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        SbxServeRequest req;
        SbxServeMsg msg;
        assert_false(sbx_serve_proto_request_decode(cases[i], strlen(cases[i]), &req));
        assert_false(sbx_serve_proto_msg_decode(cases[i], strlen(cases[i]), &msg));
        sbx_serve_proto_request_clear(&req);
        sbx_serve_proto_msg_clear(&msg);
    }
    SbxServeRequest req;
    assert_false(sbx_serve_proto_request_decode("", 0, &req)); /* an empty payload */
    sbx_serve_proto_request_clear(&req);
}

/* ---- the server's messages ------------------------------------------------------------ */

static void message(const char *json, SbxServeMsg *msg)
{
    if (!sbx_serve_proto_msg_decode(json, strlen(json), msg)) {
        fail_msg("not a message: %s", json);
    }
}

static void test_status(void **state)
{
    g_auto(SbxServeMsg) msg = {0};
    g_auto(SbxServeMsg) old = {0};
    (void)state;

    message("{\"type\":\"status\",\"profile\":\"q35-serial\",\"pool_size\":2,\"ready\":2,"
            "\"ready_pids\":[1,2],\"profiles\":{\"q35-serial\":{\"profile\":\"q35-serial\"},"
            "\"microvm-serial\":{\"ready\":1},\"odd\":3}}",
            &msg);
    assert_int_equal(msg.type, SBX_SERVE_MSG_STATUS);
    assert_string_equal(msg.type_name, "status");
    assert_string_equal(msg.profile, "q35-serial");
    assert_int_equal(g_strv_length(msg.profiles), 2); /* "odd" is no profile's status */
    assert_string_equal(msg.profiles[0], "q35-serial");
    assert_string_equal(msg.profiles[1], "microvm-serial");

    /* A server before per-profile pools: no `profiles`. */
    message("{\"type\":\"status\",\"profile\":7}", &old);
    assert_null(old.profile);
    assert_non_null(old.profiles);
    assert_null(old.profiles[0]);
}

static void test_output(void **state)
{
    (void)state;
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"output\",\"stream\":\"stdout\",\"data\":\"aGVsbG8K\"}", &msg);
        assert_int_equal(msg.type, SBX_SERVE_MSG_OUTPUT);
        assert_int_equal(msg.stream, SBX_STREAM_STDOUT);
        assert_int_equal(msg.data_len, 6);
        assert_memory_equal(msg.data, "hello\n", 6);
    }
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"output\",\"stream\":\"stderr\",\"data\":\"\"}", &msg);
        assert_int_equal(msg.stream, SBX_STREAM_STDERR);
        assert_non_null(msg.data); /* empty, but there */
        assert_int_equal(msg.data_len, 0);
    }
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"output\",\"stream\":\"other\",\"data\":\"AA==\"}", &msg);
        assert_int_equal(msg.stream, SBX_STREAM_STDOUT); /* anything but stderr */
        assert_int_equal(msg.data_len, 1);
    }
    static const char *const ignored[] = {
        "{\"type\":\"output\",\"stream\":\"stdout\",\"data\":\"aGVsbG8\"}", /* not padded */
        "{\"type\":\"output\",\"stream\":\"stdout\",\"data\":\"aGVs bG8K\"}",
        "{\"type\":\"output\",\"stream\":\"stdout\"}",
        "{\"type\":\"output\",\"stream\":1,\"data\":\"AA==\"}",
        "{\"type\":\"output\",\"data\":\"AA==\"}",
    };
    for (gsize i = 0; i < G_N_ELEMENTS(ignored); i++) {
        g_auto(SbxServeMsg) msg = {0};
        message(ignored[i], &msg);
        assert_int_equal(msg.type, SBX_SERVE_MSG_OUTPUT);
        assert_null(msg.data);
    }
}

static void test_done(void **state)
{
    g_auto(SbxServeMsg) msg = {0};
    (void)state;

    /* The report is the server's text, minified: 1.50 and the escape stay as they were. */
    message("{\"type\":\"done\",\"exit_code\":3,\"summary\":\"sandbox: error\\n\",\n"
            "  \"report\": {\"start\": \"pool\", \"x\": 1.50, \"s\": \"\\u00e9\"}}",
            &msg);
    assert_int_equal(msg.type, SBX_SERVE_MSG_DONE);
    assert_int_equal(msg.exit_code, 3);
    assert_string_equal(msg.summary, "sandbox: error\n");
    assert_string_equal(msg.report_json, "{\"start\":\"pool\",\"x\":1.50,\"s\":\"\\u00e9\"}");

    static const struct {
        const char *json;
        int code;
    } codes[] = {
        {"{\"type\":\"done\",\"exit_code\":0}", 0},
        {"{\"type\":\"done\",\"exit_code\":255}", 255},
        {"{\"type\":\"done\",\"exit_code\":125.0}", 125},
        {"{\"type\":\"done\",\"exit_code\":256}", -1},
        {"{\"type\":\"done\",\"exit_code\":-1}", -1},
        {"{\"type\":\"done\",\"exit_code\":3.5}", -1},
        {"{\"type\":\"done\",\"exit_code\":\"0\"}", -1},
        {"{\"type\":\"done\",\"exit_code\":4294967296}", -1},
        {"{\"type\":\"done\",\"report\":[1],\"summary\":2}", -1},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(codes); i++) {
        g_auto(SbxServeMsg) m = {0};
        message(codes[i].json, &m);
        assert_int_equal(m.exit_code, codes[i].code);
        assert_null(m.report_json);
        assert_null(m.summary);
    }
}

static void test_error_and_other(void **state)
{
    (void)state;
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"error\",\"code\":\"unavailable\",\"message\":\"this server does not "
                "pool that profile\"}",
                &msg);
        assert_int_equal(msg.type, SBX_SERVE_MSG_ERROR);
        assert_string_equal(msg.code, "unavailable");
        assert_string_equal(msg.message, "this server does not pool that profile");
    }
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"error\"}", &msg);
        assert_null(msg.code);
        assert_null(msg.message);
    }
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"later\",\"message\":\"why\"}", &msg);
        assert_int_equal(msg.type, SBX_SERVE_MSG_OTHER);
        assert_string_equal(msg.type_name, "later");
        assert_string_equal(msg.message, "why");
    }
}

static void test_approvals(void **state)
{
    g_auto(SbxServeMsg) msg = {0};
    (void)state;

    message("{\"type\":\"approvals\",\"pending\":[{\"id\":\"3\",\"provider\":\"github\","
            "\"tool\":\"delete_repo\",\"input\":{\"owner\":\"me\",\"n\":1.0},"
            "\"origin\":\"sandbox run, pid 4242\",\"waiting_ms\":4120,\"timeout_ms\":60000}, "
            "{\"id\":\"4\",\"input_excerpt\":\"{\\\"big\\\":\",\"waiting_ms\":1.5}, 7]}",
            &msg);
    assert_int_equal(msg.type, SBX_SERVE_MSG_APPROVALS);
    assert_string_equal(msg.pending_json,
                        "[{\"id\":\"3\",\"provider\":\"github\",\"tool\":\"delete_repo\","
                        "\"input\":{\"owner\":\"me\",\"n\":1.0},\"origin\":\"sandbox run, pid "
                        "4242\",\"waiting_ms\":4120,\"timeout_ms\":60000},{\"id\":\"4\","
                        "\"input_excerpt\":\"{\\\"big\\\":\",\"waiting_ms\":1.5},7]");
    assert_int_equal(msg.n_pending, 3);
    SbxServePending *a = &msg.pending[0], *b = &msg.pending[1], *c = &msg.pending[2];
    assert_string_equal(a->id, "3");
    assert_string_equal(a->provider, "github");
    assert_string_equal(a->tool, "delete_repo");
    assert_string_equal(a->input_json, "{\"owner\":\"me\",\"n\":1.0}");
    assert_null(a->input_excerpt);
    assert_string_equal(a->origin, "sandbox run, pid 4242");
    assert_int_equal(a->waiting_ms, 4120);
    assert_int_equal(a->timeout_ms, 60000);
    assert_string_equal(b->id, "4");
    assert_null(b->input_json);
    assert_string_equal(b->input_excerpt, "{\"big\":");
    assert_int_equal(b->waiting_ms, 0); /* not an integer */
    assert_null(b->provider);
    assert_null(c->id); /* not an object */

    g_auto(SbxServeMsg) none = {0};
    message("{\"type\":\"approvals\",\"pending\":{}}", &none);
    assert_null(none.pending_json);
    assert_int_equal(none.n_pending, 0);
}

static void test_approved_denied(void **state)
{
    g_auto(SbxServeMsg) yes = {0};
    g_auto(SbxServeMsg) no = {0};
    (void)state;

    message("{\"type\":\"approved\",\"id\":\"3\"}", &yes);
    assert_int_equal(yes.type, SBX_SERVE_MSG_APPROVED);
    assert_string_equal(yes.id, "3");
    message("{\"type\":\"denied\",\"id\":3}", &no);
    assert_int_equal(no.type, SBX_SERVE_MSG_DENIED);
    assert_string_equal(no.type_name, "denied");
    assert_null(no.id);
}

/* A run's approval told on its stream: its entry as in a list; its end: the id alone. */
static void test_approval_events(void **state)
{
    g_auto(SbxServeMsg) waits = {0};
    g_auto(SbxServeMsg) over = {0};
    g_auto(SbxServeMsg) broken = {0};
    (void)state;

    message("{\"type\":\"approval\",\"approval\":{\"id\":\"3\",\"provider\":\"calc\","
            "\"tool\":\"add\",\"input\":{\"a\":1.0},\"origin\":\"sandbox run, pid 9\","
            "\"waiting_ms\":0,\"timeout_ms\":60000}}",
            &waits);
    assert_int_equal(waits.type, SBX_SERVE_MSG_APPROVAL);
    assert_int_equal(waits.n_pending, 1);
    assert_string_equal(waits.pending[0].id, "3");
    assert_string_equal(waits.pending[0].tool, "add");
    assert_string_equal(waits.pending[0].input_json, "{\"a\":1.0}");
    assert_int_equal(waits.pending[0].timeout_ms, 60000);
    message("{\"type\":\"approval_over\",\"id\":\"3\"}", &over);
    assert_int_equal(over.type, SBX_SERVE_MSG_APPROVAL_OVER);
    assert_string_equal(over.id, "3");
    /* no object: no entry (the client ignores it) */
    message("{\"type\":\"approval\",\"approval\":[1]}", &broken);
    assert_int_equal(broken.type, SBX_SERVE_MSG_APPROVAL);
    assert_int_equal(broken.n_pending, 0);
}

/* ---- sessions and their files ---------------------------------------------------------- */

static void test_run_in_session(void **state)
{
    (void)state;
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"x = 1\","
                "\"session\":\"se_0123456789abcdef01234567\"}",
                &req);
        assert_null(req.bad);
        assert_string_equal(req.run.session, "se_0123456789abcdef01234567");
        assert_null(req.run.profile);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"session\":null}", &req);
        assert_null(req.bad);
        assert_null(req.run.session);
    }
    static const char bad_session[] =
        "session: a session's id (1 to 64 letters, digits, `_`, `.` or `-`)";
    g_autofree char *long_id = g_strnfill(65, 'a');
    g_autofree char *too_long = g_strdup_printf(
        "{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"session\":\"%s\"}", long_id);
    expect_bad("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"session\":5}",
               SBX_SERVE_REQ_RUN, bad_session);
    expect_bad("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"session\":\"a b\"}",
               SBX_SERVE_REQ_RUN, bad_session);
    expect_bad("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"session\":\"\"}",
               SBX_SERVE_REQ_RUN, bad_session);
    expect_bad(too_long, SBX_SERVE_REQ_RUN, bad_session);
    expect_bad("{\"type\":\"run\",\"language\":\"python\",\"code\":\"1\",\"session\":\"se_1\","
               "\"profile\":\"q35\"}",
               SBX_SERVE_REQ_RUN,
               "profile: a run in a session runs on the session's VM (name no profile)");
}

static void test_session_requests(void **state)
{
    static const char bad_seconds[] =
        "idle_timeout_s and max_lifetime_s: integers of seconds, 1..86400, or null";
    static const char bad_id[] = "id: a session's id (1 to 64 letters, digits, `_`, `.` or `-`)";
    (void)state;
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"session_new\"}", &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_SESSION_NEW);
        assert_null(req.bad);
        assert_null(req.session_new.profile);
        assert_false(req.session_new.profile_not_name);
        assert_int_equal(req.session_new.idle_timeout_s, 0); /* the server's default */
        assert_int_equal(req.session_new.max_lifetime_s, 0);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"session_new\",\"profile\":\"microvm-serial\",\"idle_timeout_s\":60,"
                "\"max_lifetime_s\":86400}",
                &req);
        assert_null(req.bad);
        assert_string_equal(req.session_new.profile, "microvm-serial");
        assert_int_equal(req.session_new.idle_timeout_s, 60);
        assert_int_equal(req.session_new.max_lifetime_s, SBX_SERVE_SESSION_SECONDS_MAX);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"session_new\",\"profile\":[1],\"idle_timeout_s\":null}", &req);
        assert_null(req.bad);
        assert_true(req.session_new.profile_not_name); /* unavailable, as a run's */
    }
    static const char *const seconds[] = {
        "{\"type\":\"session_new\",\"idle_timeout_s\":0}",
        "{\"type\":\"session_new\",\"idle_timeout_s\":86401}",
        "{\"type\":\"session_new\",\"idle_timeout_s\":\"60\"}",
        "{\"type\":\"session_new\",\"max_lifetime_s\":1.5}",
        "{\"type\":\"session_new\",\"max_lifetime_s\":-1}",
    };
    for (gsize i = 0; i < G_N_ELEMENTS(seconds); i++) {
        expect_bad(seconds[i], SBX_SERVE_REQ_SESSION_NEW, bad_seconds);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"session_list\",\"extra\":1}", &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_SESSION_LIST);
        assert_null(req.bad);
    }
    {
        g_auto(SbxServeRequest) show = {0};
        g_auto(SbxServeRequest) end = {0};
        request("{\"type\":\"session_show\",\"id\":\"se_1\"}", &show);
        request("{\"type\":\"session_end\",\"id\":\"se_2\"}", &end);
        assert_int_equal(show.type, SBX_SERVE_REQ_SESSION_SHOW);
        assert_string_equal(show.id, "se_1");
        assert_int_equal(end.type, SBX_SERVE_REQ_SESSION_END);
        assert_string_equal(end.id, "se_2");
    }
    expect_bad("{\"type\":\"session_show\"}", SBX_SERVE_REQ_SESSION_SHOW, bad_id);
    expect_bad("{\"type\":\"session_end\",\"id\":7}", SBX_SERVE_REQ_SESSION_END, bad_id);
    expect_bad("{\"type\":\"session_end\",\"id\":\"../x\"}", SBX_SERVE_REQ_SESSION_END, bad_id);
}

/* @json is a file request of @type refused with @why, holding nothing. */
static void expect_bad_file(const char *json, SbxServeRequestType type, const char *why)
{
    g_auto(SbxServeRequest) req = {0};

    expect_bad(json, type, why);
    request(json, &req);
    assert_null(req.file.session);
    assert_null(req.file.path);
    assert_null(req.file.data);
}

static void test_file_requests(void **state)
{
    (void)state;
    {
        /* A whole file in one request: offset 0 and last by default; any bytes (NUL, 0xff). */
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"file_put\",\"session\":\"se_1\",\"path\":\"data/in.bin\","
                "\"data\":\"AP8K\"}",
                &req);
        assert_int_equal(req.type, SBX_SERVE_REQ_FILE_PUT);
        assert_null(req.bad);
        assert_string_equal(req.file.session, "se_1");
        assert_string_equal(req.file.path, "data/in.bin");
        assert_int_equal(req.file.offset, 0);
        assert_int_equal(req.file.len, 3);
        assert_memory_equal(req.file.data, "\0\xff\n", 3);
        assert_true(req.file.last);
    }
    {
        g_auto(SbxServeRequest) req = {0};
        request("{\"type\":\"file_put\",\"session\":\"se_1\",\"path\":\"a\",\"offset\":1048576,"
                "\"data\":null,\"last\":false}",
                &req);
        assert_null(req.bad);
        assert_int_equal(req.file.offset, 1048576);
        assert_null(req.file.data);
        assert_int_equal(req.file.len, 0);
        assert_false(req.file.last);
    }
    {
        g_auto(SbxServeRequest) get = {0};
        g_auto(SbxServeRequest) list = {0};
        g_auto(SbxServeRequest) dir = {0};
        g_auto(SbxServeRequest) del = {0};
        request("{\"type\":\"file_get\",\"session\":\"se_1\",\"path\":\"out/é.txt\","
                "\"offset\":3}",
                &get);
        assert_null(get.bad);
        assert_string_equal(get.file.path, "out/é.txt");
        assert_int_equal(get.file.offset, 3);
        request("{\"type\":\"file_list\",\"session\":\"se_1\"}", &list);
        assert_null(list.bad);
        assert_null(list.file.path); /* the workspace */
        request("{\"type\":\"file_list\",\"session\":\"se_1\",\"path\":\"out\"}", &dir);
        assert_string_equal(dir.file.path, "out");
        request("{\"type\":\"file_delete\",\"session\":\"se_1\",\"path\":\"out\"}", &del);
        assert_int_equal(del.type, SBX_SERVE_REQ_FILE_DELETE);
        assert_string_equal(del.file.path, "out");
    }
    static const char bad_path[] =
        "path: a workspace path (relative, components separated by single `/`, none `.` or `..`, "
        "no control characters, at most 1024 bytes)";
    static const char bad_data[] = "data: base64 (padded, no whitespace) of at most 1 MiB";
    static const char bad_session[] =
        "session: a session's id (1 to 64 letters, digits, `_`, `.` or `-`)";
    static const char bad_offset[] = "offset: an integer, 0..33554432 (32 MiB)";
    g_autofree char *long_name = g_strnfill(256, 'n');
    g_autofree char *long_component =
        g_strdup_printf("{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"%s\"}", long_name);
    g_autofree char *chunk = g_strnfill(sbx_base64_encoded_len(SBX_SERVE_FILE_CHUNK_MAX + 1), 'A');
    g_autofree char *big = g_strdup_printf(
        "{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"data\":\"%s\"}", chunk);
    static const struct {
        const char *json;
        SbxServeRequestType type;
        const char *why;
    } cases[] = {
        {"{\"type\":\"file_put\",\"path\":\"a\"}", SBX_SERVE_REQ_FILE_PUT, bad_session},
        {"{\"type\":\"file_get\",\"session\":\"a/b\",\"path\":\"a\"}", SBX_SERVE_REQ_FILE_GET,
         bad_session},
        {"{\"type\":\"file_get\",\"session\":\"s\"}", SBX_SERVE_REQ_FILE_GET, bad_path},
        {"{\"type\":\"file_delete\",\"session\":\"s\",\"path\":null}", SBX_SERVE_REQ_FILE_DELETE,
         bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"../etc/passwd\"}",
         SBX_SERVE_REQ_FILE_GET, bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"/etc/passwd\"}",
         SBX_SERVE_REQ_FILE_GET, bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"a//b\"}", SBX_SERVE_REQ_FILE_GET,
         bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"a/./b\"}", SBX_SERVE_REQ_FILE_GET,
         bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"a/\"}", SBX_SERVE_REQ_FILE_GET,
         bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"\"}", SBX_SERVE_REQ_FILE_GET,
         bad_path},
        {"{\"type\":\"file_list\",\"session\":\"s\",\"path\":\"a\\u001bb\"}",
         SBX_SERVE_REQ_FILE_LIST, bad_path},
        {"{\"type\":\"file_list\",\"session\":\"s\",\"path\":7}", SBX_SERVE_REQ_FILE_LIST,
         bad_path},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"a\",\"offset\":-1}",
         SBX_SERVE_REQ_FILE_GET, bad_offset},
        {"{\"type\":\"file_get\",\"session\":\"s\",\"path\":\"a\",\"offset\":33554433}",
         SBX_SERVE_REQ_FILE_GET, bad_offset},
        {"{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"offset\":0.5}",
         SBX_SERVE_REQ_FILE_PUT, bad_offset},
        {"{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"data\":\"AP8\"}",
         SBX_SERVE_REQ_FILE_PUT, bad_data},
        {"{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"data\":\"AP 8K\"}",
         SBX_SERVE_REQ_FILE_PUT, bad_data},
        {"{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"data\":[1]}",
         SBX_SERVE_REQ_FILE_PUT, bad_data},
        {"{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"offset\":33554432,"
         "\"data\":\"AA==\"}",
         SBX_SERVE_REQ_FILE_PUT, "data: past the largest file (32 MiB)"},
        {"{\"type\":\"file_put\",\"session\":\"s\",\"path\":\"a\",\"last\":\"yes\"}",
         SBX_SERVE_REQ_FILE_PUT, "last: a boolean (absent: true, the file is whole)"},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        expect_bad_file(cases[i].json, cases[i].type, cases[i].why);
    }
    expect_bad_file(long_component, SBX_SERVE_REQ_FILE_GET, bad_path);
    expect_bad_file(big, SBX_SERVE_REQ_FILE_PUT, bad_data);
}

static void test_session_messages(void **state)
{
    (void)state;
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"session\",\"session\":{\"id\":\"se_1\",\"status\":\"ready\","
                "\"profile\":\"q35-serial\",\"created_ms\":1700000000000,"
                "\"last_active_ms\":1700000000500,\"expires_ms\":1700000600500,"
                "\"ended_ms\":null,\"idle_timeout_s\":600,\"max_lifetime_s\":3600,"
                "\"executions\":2,\"memory_mib\":256,\"current_execution\":null,"
                "\"end_status\":null,\"end_reason\":null,\"qemu_pid\":4242}}",
                &msg);
        assert_int_equal(msg.type, SBX_SERVE_MSG_SESSION);
        assert_int_equal(msg.n_sessions, 1);
        SbxServeSession *s = &msg.sessions[0];
        assert_string_equal(s->id, "se_1");
        assert_string_equal(s->status, "ready");
        assert_string_equal(s->profile, "q35-serial");
        assert_int_equal(s->created_ms, 1700000000000);
        assert_int_equal(s->expires_ms, 1700000600500);
        assert_int_equal(s->ended_ms, 0);
        assert_int_equal(s->idle_timeout_s, 600);
        assert_int_equal(s->executions, 2);
        assert_int_equal(s->memory_mib, 256);
        assert_null(s->end_reason);
        assert_int_equal(s->qemu_pid, 4242);
        assert_true(g_str_has_prefix(msg.sessions_json, "{\"id\":\"se_1\",\"status\":"));
    }
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"session\",\"session\":[]}", &msg);
        assert_int_equal(msg.n_sessions, 0);
        assert_null(msg.sessions_json);
    }
    {
        g_auto(SbxServeMsg) msg = {0};
        message("{\"type\":\"sessions\",\"sessions\":[{\"id\":\"se_2\",\"status\":\"ended\","
                "\"end_status\":\"deleted\",\"end_reason\":\"deleted by the client\","
                "\"qemu_pid\":-3},7,{\"id\":\"se_1\"}]}",
                &msg);
        assert_int_equal(msg.type, SBX_SERVE_MSG_SESSIONS);
        assert_int_equal(msg.n_sessions, 2); /* 7 is no session */
        assert_string_equal(msg.sessions[0].end_status, "deleted");
        assert_string_equal(msg.sessions[0].end_reason, "deleted by the client");
        assert_int_equal(msg.sessions[0].qemu_pid, 0); /* not a PID */
        assert_string_equal(msg.sessions[1].id, "se_1");
        assert_null(msg.sessions[1].status);
        assert_true(g_str_has_prefix(msg.sessions_json, "[{\"id\":\"se_2\""));
        assert_true(g_str_has_suffix(msg.sessions_json, ",7,{\"id\":\"se_1\"}]"));
    }
}

static void test_file_messages(void **state)
{
    static const char sha[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    (void)state;
    {
        g_auto(SbxServeMsg) part = {0};
        message("{\"type\":\"file_part\",\"path\":\"a\",\"size\":1048576}", &part);
        assert_int_equal(part.type, SBX_SERVE_MSG_FILE_PART);
        assert_string_equal(part.path, "a");
        assert_int_equal(part.size, 1048576);
    }
    {
        g_autofree char *json = g_strdup_printf(
            "{\"type\":\"file\",\"path\":\"a\",\"size\":4,\"sha256\":\"%s\",\"offset\":0,"
            "\"data\":\"dGVzdA==\"}",
            sha);
        g_auto(SbxServeMsg) got = {0};
        message(json, &got);
        assert_int_equal(got.type, SBX_SERVE_MSG_FILE);
        assert_int_equal(got.size, 4);
        assert_string_equal(got.sha256, sha);
        assert_int_equal(got.offset, 0);
        assert_int_equal(got.data_len, 4);
        assert_memory_equal(got.data, "test", 4);
    }
    {
        g_auto(SbxServeMsg) put = {0};
        message("{\"type\":\"file\",\"path\":\"a\",\"size\":4,\"sha256\":\"XYZ\",\"data\":\"!\"}",
                &put);
        assert_null(put.sha256); /* not 64 hex digits */
        assert_null(put.data);   /* not base64 */
    }
    {
        g_auto(SbxServeMsg) list = {0};
        message("{\"type\":\"files\",\"path\":null,\"entries\":[{\"path\":\"a\",\"type\":\"dir\","
                "\"size\":0,\"mtime_us\":1},{\"path\":\"a/b\",\"type\":\"file\",\"size\":5},"
                "{\"path\":\"l\",\"type\":\"fifo\"},{\"type\":\"file\"},3],\"truncated\":true}",
                &list);
        assert_int_equal(list.type, SBX_SERVE_MSG_FILES);
        assert_null(list.path);
        assert_int_equal(list.n_entries, 3);
        assert_int_equal(list.entries[0].type, SBX_FILE_TYPE_DIR);
        assert_int_equal(list.entries[0].mtime_us, 1);
        assert_string_equal(list.entries[1].path, "a/b");
        assert_int_equal(list.entries[1].size, 5);
        assert_int_equal(list.entries[2].type, SBX_FILE_TYPE_OTHER);
        assert_true(list.truncated);
        assert_true(g_str_has_prefix(list.entries_json, "[{\"path\":\"a\",\"type\":\"dir\""));
    }
    {
        g_auto(SbxServeMsg) del = {0};
        message("{\"type\":\"file_deleted\",\"path\":\"a/b\"}", &del);
        assert_int_equal(del.type, SBX_SERVE_MSG_FILE_DELETED);
        assert_string_equal(del.path, "a/b");
    }
}

/* ---- encoders ------------------------------------------------------------------------- */

/* A run request as `sandbox run` sends it: every field, strings escaped; decoded back whole. */
static void test_encode_run(void **state)
{
    SbxServeRequest req = {
        .type = SBX_SERVE_REQ_RUN,
        .run = {.language = SBX_LANG_TYPESCRIPT,
                .code = "let s: string = \"\\\"\n\x01\";",
                .tools_path = "/tmp/t.json",
                .timeout_ms = 5000,
                .output_limit = 1048576,
                .collect = TRUE},
    };
    g_auto(SbxServeRequest) back = {0};
    (void)state;

    g_autofree char *text = sbx_serve_proto_request_encode(&req);
    assert_string_equal(text,
                        "{\"type\":\"run\",\"language\":\"typescript\",\"code\":"
                        "\"let s: string = \\\"\\\\\\\"\\n\\u0001\\\";\",\"tools\":\"/tmp/t.json\","
                        "\"profile\":null,\"timeout_ms\":5000,\"output_limit\":1048576,"
                        "\"collect\":true}");
    request(text, &back);
    assert_null(back.bad);
    assert_int_equal(back.run.language, SBX_LANG_TYPESCRIPT);
    assert_string_equal(back.run.code, req.run.code);
    assert_string_equal(back.run.tools_path, "/tmp/t.json");
    assert_null(back.run.profile);
    assert_int_equal(back.run.timeout_ms, 5000);
    assert_int_equal(back.run.output_limit, 1048576);
    assert_true(back.run.collect);
    assert_false(back.run.live);
    /* live is said only when asked for */
    req.run.live = TRUE;
    g_autofree char *live = sbx_serve_proto_request_encode(&req);
    assert_true(g_str_has_suffix(live, "\"collect\":true,\"live\":true}"));
    /* approvals too: said only when asked for, and read back */
    req.run.approvals = TRUE;
    g_autofree char *told = sbx_serve_proto_request_encode(&req);
    assert_true(g_str_has_suffix(told, "\"live\":true,\"approvals\":true}"));
    g_auto(SbxServeRequest) back_told = {0};
    request(told, &back_told);
    assert_null(back_told.bad);
    assert_true(back_told.run.approvals);
    assert_false(back.run.approvals);
}

/* A run with a function call: entry as a string, args and kwargs inserted as they are. */
static void test_encode_run_call(void **state)
{
    SbxServeRequest req = {
        .type = SBX_SERVE_REQ_RUN,
        .run = {.language = SBX_LANG_PYTHON,
                .code = "def f(*a, **k): pass",
                .entry = "f",
                .args_json = "[9007199254740993,1e400,-0.0]",
                .kwargs_json = "{\"x\":1.50}",
                .timeout_ms = 5000,
                .output_limit = 1},
    };
    g_auto(SbxServeRequest) back = {0};
    (void)state;

    g_autofree char *text = sbx_serve_proto_request_encode(&req);
    assert_string_equal(text, "{\"type\":\"run\",\"language\":\"python\",\"code\":"
                              "\"def f(*a, **k): pass\",\"entry\":\"f\","
                              "\"args\":[9007199254740993,1e400,-0.0],\"kwargs\":{\"x\":1.50},"
                              "\"tools\":null,\"profile\":null,\"timeout_ms\":5000,"
                              "\"output_limit\":1,\"collect\":false}");
    request(text, &back);
    assert_null(back.bad);
    assert_string_equal(back.run.entry, "f");
    assert_string_equal(back.run.args_json, req.run.args_json);
    assert_string_equal(back.run.kwargs_json, req.run.kwargs_json);
}

/* status, approvals (with and without an id), approve and deny; an id with a quote stays one. */
static void test_encode_other_requests(void **state)
{
    static const struct {
        SbxServeRequest req;
        const char *text;
    } cases[] = {
        {{.type = SBX_SERVE_REQ_STATUS}, "{\"type\":\"status\"}"},
        {{.type = SBX_SERVE_REQ_APPROVALS}, "{\"type\":\"approvals\"}"},
        {{.type = SBX_SERVE_REQ_APPROVALS, .id = "a-1"}, "{\"type\":\"approvals\",\"id\":\"a-1\"}"},
        {{.type = SBX_SERVE_REQ_APPROVE, .id = "a\"1"}, "{\"type\":\"approve\",\"id\":\"a\\\"1\"}"},
        {{.type = SBX_SERVE_REQ_DENY, .id = "a-2"}, "{\"type\":\"deny\",\"id\":\"a-2\"}"},
    };
    (void)state;

    for (gsize i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *text = sbx_serve_proto_request_encode(&cases[i].req);
        g_auto(SbxServeRequest) back = {0};
        assert_string_equal(text, cases[i].text);
        request(text, &back);
        assert_int_equal(back.type, cases[i].req.type);
        assert_null(back.bad);
        assert_true(g_strcmp0(back.id, cases[i].req.id) == 0);
    }
}

/* Encode @msg, check its text if @expect, and decode it into @back. */
static void encode_msg(const SbxServeMsg *msg, const char *expect, SbxServeMsg *back)
{
    g_autofree char *text = sbx_serve_proto_msg_encode(msg);

    if (expect != NULL) {
        assert_string_equal(text, expect);
    }
    assert_true(sbx_serve_proto_msg_decode(text, strlen(text), back));
    assert_int_equal(back->type, msg->type);
}

/* Output bytes of any kind (NUL, invalid UTF-8) cross as base64, unchanged. */
static void test_encode_output(void **state)
{
    static const guint8 bytes[] = {'a', 0, 0xff, '\n'};
    SbxServeMsg msg = {.type = SBX_SERVE_MSG_OUTPUT,
                       .stream = SBX_STREAM_STDERR,
                       .data = (guint8 *)bytes,
                       .data_len = sizeof(bytes)};
    g_auto(SbxServeMsg) back = {0};
    (void)state;

    encode_msg(&msg, "{\"type\":\"output\",\"stream\":\"stderr\",\"data\":\"YQD/Cg==\"}", &back);
    assert_int_equal(back.stream, SBX_STREAM_STDERR);
    assert_int_equal(back.data_len, sizeof(bytes));
    assert_memory_equal(back.data, bytes, sizeof(bytes));
}

/* done: the report inserted as it is (numbers keep their text), the summary escaped. */
static void test_encode_done(void **state)
{
    SbxServeMsg msg = {.type = SBX_SERVE_MSG_DONE,
                       .exit_code = 124,
                       .summary = "sandbox: timeout\n",
                       .report_json = "{\"start\":\"pool\",\"result\":1.10}"};
    g_auto(SbxServeMsg) back = {0};
    (void)state;

    encode_msg(&msg,
               "{\"type\":\"done\",\"exit_code\":124,\"summary\":\"sandbox: timeout\\n\","
               "\"report\":{\"start\":\"pool\",\"result\":1.10}}",
               &back);
    assert_int_equal(back.exit_code, 124);
    assert_string_equal(back.summary, msg.summary);
    assert_string_equal(back.report_json, msg.report_json);
}

/* status: the default profile at the top level and every profile under `profiles`. */
static void test_encode_status(void **state)
{
    GPid pids[] = {41, 42};
    g_autoptr(GArray) ready = g_array_new(FALSE, FALSE, sizeof(GPid));
    g_autoptr(GArray) none = g_array_new(FALSE, FALSE, sizeof(GPid));
    SbxServeProfileStatus st[2] = {
        {.name = "q35-serial",
         .pool_size = 2,
         .ready = 2,
         .claimed_total = 7,
         .ready_pids = ready,
         .running_pids = none,
         .prestarted_pids = none},
        {.name = "microvm-serial",
         .pool_size = 1,
         .running = 1,
         .prestart = 1,
         .ready_pids = none,
         .running_pids = none,
         .prestarted_pids = none},
    };
    SbxServeMsg msg = {.type = SBX_SERVE_MSG_STATUS, .status = st, .n_status = 2};
    g_auto(SbxServeMsg) back = {0};
    (void)state;

    g_array_append_vals(ready, pids, 2);
    st[1].session_pids = ready;
    st[1].sessions = 2;
    encode_msg(&msg, NULL, &back);
    assert_string_equal(back.profile, "q35-serial");
    assert_int_equal(back.n_status, 2);
    assert_string_equal(back.profiles[1], "microvm-serial");
    assert_int_equal(back.status[0].claimed_total, 7);
    assert_int_equal(back.status[0].ready_pids->len, 2);
    assert_int_equal(g_array_index(back.status[0].ready_pids, GPid, 1), 42);
    assert_int_equal(back.status[1].running, 1);
    assert_int_equal(back.status[1].prestart, 1);
    assert_int_equal(back.status[1].sessions, 2); /* a session's QEMUs, decoded by the clients */
    assert_int_equal(back.status[1].session_pids->len, 2);
    assert_int_equal(back.status[0].session_pids->len, 0);
}

/* approvals: an input whole (as it is) or its excerpt (a string); error; approved and denied. */
static void test_encode_approvals_and_answers(void **state)
{
    SbxServePending p[2] = {
        {.id = "a-1",
         .provider = "p",
         .tool = "t",
         .input_json = "{\"n\":1e400}",
         .origin = "sandbox run, pid 7",
         .waiting_ms = 12,
         .timeout_ms = 300000},
        {.id = "a-2",
         .provider = "p",
         .tool = "t",
         .input_excerpt = "{\"long\":\"",
         .timeout_ms = 1},
    };
    SbxServeMsg msg = {.type = SBX_SERVE_MSG_APPROVALS, .pending = p, .n_pending = 2};
    SbxServeMsg err = {.type = SBX_SERVE_MSG_ERROR, .code = "not_found", .message = "no \"x\""};
    SbxServeMsg ok = {.type = SBX_SERVE_MSG_DENIED, .id = "a-2"};
    g_auto(SbxServeMsg) back = {0};
    g_auto(SbxServeMsg) back_err = {0};
    g_auto(SbxServeMsg) back_ok = {0};
    (void)state;

    encode_msg(&msg, NULL, &back);
    assert_int_equal(back.n_pending, 2);
    assert_string_equal(back.pending[0].input_json, "{\"n\":1e400}");
    assert_string_equal(back.pending[0].origin, "sandbox run, pid 7");
    assert_int_equal(back.pending[0].waiting_ms, 12);
    assert_null(back.pending[1].input_json);
    assert_string_equal(back.pending[1].input_excerpt, "{\"long\":\"");
    encode_msg(&err, "{\"type\":\"error\",\"code\":\"not_found\",\"message\":\"no \\\"x\\\"\"}",
               &back_err);
    assert_string_equal(back_err.message, "no \"x\"");
    encode_msg(&ok, "{\"type\":\"denied\",\"id\":\"a-2\"}", &back_ok);
    assert_string_equal(back_ok.id, "a-2");

    /* a run's approval events: one entry, and the id of one that stopped waiting */
    SbxServeMsg one = {.type = SBX_SERVE_MSG_APPROVAL, .pending = &p[1], .n_pending = 1};
    SbxServeMsg over = {.type = SBX_SERVE_MSG_APPROVAL_OVER, .id = "a-1"};
    g_auto(SbxServeMsg) back_one = {0};
    g_auto(SbxServeMsg) back_over = {0};
    encode_msg(&one,
               "{\"type\":\"approval\",\"approval\":{\"id\":\"a-2\",\"provider\":\"p\","
               "\"tool\":\"t\",\"input_excerpt\":\"{\\\"long\\\":\\\"\",\"waiting_ms\":0,"
               "\"timeout_ms\":1}}",
               &back_one);
    assert_int_equal(back_one.n_pending, 1);
    assert_string_equal(back_one.pending[0].id, "a-2");
    assert_string_equal(back_one.pending[0].input_excerpt, "{\"long\":\"");
    encode_msg(&over, "{\"type\":\"approval_over\",\"id\":\"a-1\"}", &back_over);
    assert_string_equal(back_over.id, "a-1");
}

/* The session and file requests as the clients send them (cli/session.c), decoded back whole. */
static void test_encode_session_requests(void **state)
{
    static const guint8 bytes[] = {0, 0xff, '\n'};
    SbxServeRequest reqs[] = {
        {.type = SBX_SERVE_REQ_SESSION_NEW},
        {.type = SBX_SERVE_REQ_SESSION_NEW,
         .session_new = {.profile = "q35", .idle_timeout_s = 5, .max_lifetime_s = 86400}},
        {.type = SBX_SERVE_REQ_SESSION_LIST},
        {.type = SBX_SERVE_REQ_SESSION_SHOW, .id = "se_1"},
        {.type = SBX_SERVE_REQ_SESSION_END, .id = "se_1"},
        {.type = SBX_SERVE_REQ_FILE_PUT,
         .file = {.session = "se_1",
                  .path = "d/f",
                  .offset = 7,
                  .data = (guint8 *)bytes,
                  .len = sizeof(bytes)}},
        {.type = SBX_SERVE_REQ_FILE_PUT, .file = {.session = "se_1", .path = "e", .last = TRUE}},
        {.type = SBX_SERVE_REQ_FILE_GET, .file = {.session = "se_1", .path = "d/f", .offset = 9}},
        {.type = SBX_SERVE_REQ_FILE_LIST, .file = {.session = "se_1"}},
        {.type = SBX_SERVE_REQ_FILE_LIST, .file = {.session = "se_1", .path = "d"}},
        {.type = SBX_SERVE_REQ_FILE_DELETE, .file = {.session = "se_1", .path = "d"}},
        {.type = SBX_SERVE_REQ_RUN,
         .run = {.language = SBX_LANG_PYTHON,
                 .code = "x",
                 .timeout_ms = 1,
                 .output_limit = 1,
                 .session = "se_1"}},
    };
    (void)state;

    for (gsize i = 0; i < G_N_ELEMENTS(reqs); i++) {
        const SbxServeRequest *a = &reqs[i];
        g_autofree char *text = sbx_serve_proto_request_encode(a);
        g_auto(SbxServeRequest) b = {0};
        request(text, &b);
        if (b.bad != NULL) {
            fail_msg("%s: %s", text, b.bad);
        }
        assert_int_equal(b.type, a->type);
        assert_true(g_strcmp0(a->id, b.id) == 0);
        assert_true(g_strcmp0(a->session_new.profile, b.session_new.profile) == 0);
        assert_int_equal(a->session_new.idle_timeout_s, b.session_new.idle_timeout_s);
        assert_int_equal(a->session_new.max_lifetime_s, b.session_new.max_lifetime_s);
        assert_true(g_strcmp0(a->file.session, b.file.session) == 0);
        assert_true(g_strcmp0(a->file.path, b.file.path) == 0);
        assert_int_equal(a->file.offset, b.file.offset);
        assert_int_equal(a->file.len, b.file.len);
        assert_true(a->file.len == 0 || memcmp(a->file.data, b.file.data, a->file.len) == 0);
        assert_true(a->type != SBX_SERVE_REQ_FILE_PUT || a->file.last == b.file.last);
        assert_true(g_strcmp0(a->run.session, b.run.session) == 0);
    }
    g_autofree char *put = sbx_serve_proto_request_encode(&reqs[5]);
    assert_string_equal(put, "{\"type\":\"file_put\",\"session\":\"se_1\",\"path\":\"d/f\","
                             "\"offset\":7,\"data\":\"AP8K\",\"last\":false}");
    g_autofree char *open = sbx_serve_proto_request_encode(&reqs[0]);
    assert_string_equal(open, "{\"type\":\"session_new\",\"profile\":null,\"idle_timeout_s\":null,"
                              "\"max_lifetime_s\":null}");
}

static void test_encode_session_messages(void **state)
{
    static const char sha[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    SbxServeSession ss[2] = {
        {.id = "se_1",
         .status = "busy",
         .profile = "q35-serial",
         .created_ms = 1,
         .last_active_ms = 2,
         .expires_ms = 3,
         .idle_timeout_s = 4,
         .max_lifetime_s = 5,
         .executions = 6,
         .memory_mib = 7,
         .current_execution = "x1",
         .qemu_pid = 8},
        {.id = "se_0",
         .status = "ended",
         .ended_ms = 9,
         .end_status = "crashed",
         .end_reason = "its VM was lost \"x\""},
    };
    SbxServeFileEntry entries[] = {
        {.path = "a", .type = SBX_FILE_TYPE_DIR, .mtime_us = 1},
        {.path = "a/\"b\"", .type = SBX_FILE_TYPE_SYMLINK, .size = 3},
    };
    SbxServeMsg one = {.type = SBX_SERVE_MSG_SESSION, .sessions = ss, .n_sessions = 1};
    SbxServeMsg all = {.type = SBX_SERVE_MSG_SESSIONS, .sessions = ss, .n_sessions = 2};
    SbxServeMsg part = {.type = SBX_SERVE_MSG_FILE_PART, .path = "a", .size = 1048576};
    SbxServeMsg put = {.type = SBX_SERVE_MSG_FILE, .path = "a", .size = 4, .sha256 = (char *)sha};
    SbxServeMsg get = {.type = SBX_SERVE_MSG_FILE,
                       .path = "a",
                       .size = 4,
                       .sha256 = (char *)sha,
                       .offset = 0,
                       .data = (guint8 *)"test",
                       .data_len = 4};
    SbxServeMsg files = {
        .type = SBX_SERVE_MSG_FILES, .entries = entries, .n_entries = 2, .truncated = TRUE};
    SbxServeMsg del = {.type = SBX_SERVE_MSG_FILE_DELETED, .path = "a/b"};
    (void)state;

    {
        g_auto(SbxServeMsg) back = {0};
        encode_msg(&one,
                   "{\"type\":\"session\",\"session\":{\"id\":\"se_1\",\"status\":\"busy\","
                   "\"profile\":\"q35-serial\",\"created_ms\":1,\"last_active_ms\":2,"
                   "\"expires_ms\":3,\"ended_ms\":null,\"idle_timeout_s\":4,\"max_lifetime_s\":5,"
                   "\"executions\":6,\"memory_mib\":7,\"current_execution\":\"x1\","
                   "\"end_status\":null,\"end_reason\":null,\"qemu_pid\":8}}",
                   &back);
        assert_int_equal(back.n_sessions, 1);
        assert_string_equal(back.sessions[0].current_execution, "x1");
        assert_int_equal(back.sessions[0].qemu_pid, 8);
    }
    {
        g_auto(SbxServeMsg) back = {0};
        encode_msg(&all, NULL, &back);
        assert_int_equal(back.n_sessions, 2);
        assert_string_equal(back.sessions[1].end_reason, "its VM was lost \"x\"");
        assert_int_equal(back.sessions[1].ended_ms, 9);
        assert_int_equal(back.sessions[1].qemu_pid, 0);
    }
    {
        g_auto(SbxServeMsg) back = {0};
        encode_msg(&part, "{\"type\":\"file_part\",\"path\":\"a\",\"size\":1048576}", &back);
        assert_int_equal(back.size, 1048576);
    }
    {
        g_auto(SbxServeMsg) back = {0};
        g_autofree char *text =
            g_strdup_printf("{\"type\":\"file\",\"path\":\"a\",\"size\":4,\"sha256\":\"%s\"}", sha);
        encode_msg(&put, text, &back);
        assert_string_equal(back.sha256, sha);
        assert_null(back.data);
    }
    {
        g_auto(SbxServeMsg) back = {0};
        encode_msg(&get, NULL, &back);
        assert_int_equal(back.data_len, 4);
        assert_memory_equal(back.data, "test", 4);
    }
    {
        g_auto(SbxServeMsg) back = {0};
        encode_msg(&files,
                   "{\"type\":\"files\",\"path\":null,\"entries\":[{\"path\":\"a\",\"type\":"
                   "\"dir\",\"size\":0,\"mtime_us\":1},{\"path\":\"a/\\\"b\\\"\",\"type\":"
                   "\"symlink\",\"size\":3,\"mtime_us\":0}],\"truncated\":true}",
                   &back);
        assert_int_equal(back.n_entries, 2);
        assert_string_equal(back.entries[1].path, "a/\"b\"");
        assert_int_equal(back.entries[1].type, SBX_FILE_TYPE_SYMLINK);
        assert_true(back.truncated);
    }
    {
        g_auto(SbxServeMsg) back = {0};
        encode_msg(&del, "{\"type\":\"file_deleted\",\"path\":\"a/b\"}", &back);
        assert_string_equal(back.path, "a/b");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_defaults),
        cmocka_unit_test(test_run_fields),
        cmocka_unit_test(test_run_numbers),
        cmocka_unit_test(test_run_profile_not_name),
        cmocka_unit_test(test_run_typescript),
        cmocka_unit_test(test_run_call),
        cmocka_unit_test(test_run_refused),
        cmocka_unit_test(test_encode_run_call),
        cmocka_unit_test(test_other_requests),
        cmocka_unit_test(test_not_messages),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_output),
        cmocka_unit_test(test_done),
        cmocka_unit_test(test_error_and_other),
        cmocka_unit_test(test_approvals),
        cmocka_unit_test(test_approved_denied),
        cmocka_unit_test(test_approval_events),
        cmocka_unit_test(test_encode_run),
        cmocka_unit_test(test_encode_other_requests),
        cmocka_unit_test(test_encode_output),
        cmocka_unit_test(test_encode_done),
        cmocka_unit_test(test_encode_status),
        cmocka_unit_test(test_encode_approvals_and_answers),
        cmocka_unit_test(test_run_in_session),
        cmocka_unit_test(test_session_requests),
        cmocka_unit_test(test_file_requests),
        cmocka_unit_test(test_session_messages),
        cmocka_unit_test(test_file_messages),
        cmocka_unit_test(test_encode_session_requests),
        cmocka_unit_test(test_encode_session_messages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
