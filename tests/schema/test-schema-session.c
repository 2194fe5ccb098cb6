/*
 * Schemas in tool calls, through the session: a fake guest calls a command tool whose catalog
 * entry has an input_schema (and one with an output_schema). An input that fails its schema is
 * answered with validation_error and the provider never runs; an output that fails its schema
 * becomes validation_error too; both are recorded like any call.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/*
 * The provider appends each request line it receives to calls.log in its working directory
 * (the catalog's directory) and answers {"n":1}.
 */
static const char CATALOG[] =
    "{\"providers\": {\"t\": {\"kind\": \"command\","
    " \"command\": [\"sh\", \"-c\", \"cat >> calls.log; echo '{\\\"n\\\":1}'\"],"
    " \"tools\": {"
    "  \"lookup\": {\"input_schema\": {\"type\": \"object\", \"required\": [\"q\"],"
    "    \"properties\": {\"q\": {\"type\": \"string\"}}, \"additionalProperties\": false}},"
    "  \"bad_out\": {\"output_schema\": {\"type\": \"object\", \"required\": [\"missing\"]}},"
    "  \"good_out\": {\"output_schema\": {\"type\": \"object\", \"required\": [\"n\"]}}"
    "}}}}";

typedef struct {
    char *dir;
} Fixture;

static int setup(void **state)
{
    Fixture *f = g_new0(Fixture, 1);
    f->dir = g_dir_make_tmp("sbx-schema-session-XXXXXX", NULL);
    *state = f;
    return f->dir != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    Fixture *f = *state;
    g_autofree char *log = g_build_filename(f->dir, "calls.log", NULL);
    unlink(log);
    int r = rmdir(f->dir); /* fails if a test left a file behind */
    g_free(f->dir);
    g_free(f);
    return r;
}

static SbxTools *load_tools(const char *dir)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *path = g_build_filename(dir, "tools.json", NULL);

    assert_true(g_file_set_contents(path, CATALOG, -1, &error));
    SbxTools *tools = sbx_tools_load(path, &error);
    unlink(path);
    if (tools == NULL) {
        fail_msg("sbx_tools_load: %s", error->message);
    }
    return tools;
}

/* Four calls, one at a time (so calls.log has a known order). */
static void script_calls(FakeGuest *g)
{
    static const char *const calls[][2] = {
        {"lookup", "{\"q\":5}"},     /* input fails: the provider must not run */
        {"lookup", "{\"q\":\"x\"}"}, /* passes */
        {"bad_out", "{}"},           /* runs, its output fails */
        {"good_out", "{}"},          /* runs, its output passes */
    };
    if (fake_guest_handshake(g, NULL) < 0 || fake_guest_started(g) < 0) {
        return;
    }
    for (guint32 i = 0; i < G_N_ELEMENTS(calls); i++) {
        if (fake_guest_tool_call(g, i + 1, "t", calls[i][0], calls[i][1]) < 0 ||
            fake_guest_recv_keep(g) == NULL) {
            fake_guest_fail(g, "no answer to call %u", i + 1);
            return;
        }
    }
    fake_guest_done(g, SBX_STATUS_OK, NULL, 0);
}

static const SbxToolResult *result_of(Harness *h, guint i)
{
    SbxMsg *m = g_ptr_array_index(h->guest->received, i);
    assert_int_equal(m->type, SBX_MSG_TOOL_RESULT);
    assert_int_equal(m->tool_result.call_id, i + 1);
    return &m->tool_result;
}

static void test_validation_errors(void **state)
{
    Fixture *f = *state;
    Harness *h = harness_new(load_tools(f->dir));

    harness_start(h, script_calls, NULL, NULL);
    harness_wait_done(h, 1, 30000);
    assert_int_equal(h->result->status, SBX_STATUS_OK);

    /* The record: every call answered, the failures with their code and message. */
    GPtrArray *recs = h->result->tool_calls;
    assert_int_equal(recs->len, 4);
    SbxToolRecord *r1 = g_ptr_array_index(recs, 0);
    assert_true(r1->answered);
    assert_false(r1->ok);
    assert_int_equal(r1->error.code, SBX_ERR_VALIDATION);
    assert_string_equal(r1->error.message, "input.q: expected a string, got a number");
    SbxToolRecord *r3 = g_ptr_array_index(recs, 2);
    assert_false(r3->ok);
    assert_int_equal(r3->error.code, SBX_ERR_VALIDATION);
    assert_true(((SbxToolRecord *)g_ptr_array_index(recs, 1))->ok);
    assert_true(((SbxToolRecord *)g_ptr_array_index(recs, 3))->ok);

    sbx_session_free(h->session);
    h->session = NULL;
    fake_guest_join(h->guest);
    /* What the guest got. */
    assert_int_equal(h->guest->received->len, 4);
    const SbxToolResult *t1 = result_of(h, 0);
    assert_false(t1->ok);
    assert_int_equal(t1->error.code, SBX_ERR_VALIDATION);
    assert_string_equal(t1->error.message, "input.q: expected a string, got a number");
    const SbxToolResult *t2 = result_of(h, 1);
    assert_true(t2->ok);
    assert_string_equal(t2->result_json, "{\"n\":1}");
    const SbxToolResult *t3 = result_of(h, 2);
    assert_false(t3->ok);
    assert_int_equal(t3->error.code, SBX_ERR_VALIDATION);
    assert_string_equal(t3->error.message, "output: missing required property \"missing\"");
    assert_true(result_of(h, 3)->ok);

    /* The provider ran for calls 2, 3 and 4 only: the invalid input never reached it. */
    g_autofree char *log_path = g_build_filename(f->dir, "calls.log", NULL);
    g_autofree char *log = NULL;
    assert_true(g_file_get_contents(log_path, &log, NULL, NULL));
    assert_string_equal(log, "{\"tool\":\"lookup\",\"input\":{\"q\":\"x\"}}\n"
                             "{\"tool\":\"bad_out\",\"input\":{}}\n"
                             "{\"tool\":\"good_out\",\"input\":{}}\n");
    harness_free(h, FALSE);
}

/* A catalog whose schema does not compile is a catalog error naming the tool and the place. */
static void test_invalid_schema_in_catalog(void **state)
{
    Fixture *f = *state;
    g_autoptr(GError) error = NULL;
    const char *text = "{\"providers\": {\"t\": {\"kind\": \"command\", \"command\": [\"true\"],"
                       " \"tools\": {\"find\": {\"input_schema\": {\"properties\": {\"q\":"
                       " {\"pattern\": \"([\"}}}}}}}}";

    SbxCatalog *cat = sbx_catalog_parse(text, strlen(text), "tools.json", f->dir, &error);
    assert_null(cat);
    if (!g_str_has_prefix(error->message, "tools.json: providers.t.tools.find.input_schema: "
                                          "properties.q.pattern: invalid regular expression")) {
        fail_msg("unexpected message: %s", error->message);
    }
    g_clear_error(&error);
    text = "{\"providers\": {\"t\": {\"kind\": \"command\", \"command\": [\"true\"],"
           " \"tools\": {\"find\": {\"output_schema\": {\"$ref\": \"#/$defs/nope\"}}}}}}";
    cat = sbx_catalog_parse(text, strlen(text), "tools.json", f->dir, &error);
    assert_null(cat);
    assert_non_null(strstr(error->message, "providers.t.tools.find.output_schema: $ref:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_validation_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_schema_in_catalog, setup, teardown),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
