/*
 * Every rule of the decoder, one test each: what a hostile peer sends must be refused with a
 * specific reason, and leave nothing allocated.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/message.h"

static void expect_reject_len(const char *json, size_t len, const char *reason)
{
    static const SbxMsg zero;
    SbxMsg m;
    char *error = NULL;

    assert_int_equal(sbx_msg_decode(json, len, &m, &error), -EBADMSG);
    assert_non_null(error);
    if (reason && !strstr(error, reason))
        fail_msg("error \"%s\" does not contain \"%s\"", error, reason);
    assert_memory_equal(&m, &zero, sizeof(m));
    free(error);
}

static void expect_reject(const char *json, const char *reason)
{
    expect_reject_len(json, strlen(json), reason);
}

static void expect_accept(const char *json, SbxMsg *m)
{
    char *error = NULL;

    if (sbx_msg_decode(json, strlen(json), m, &error) != 0)
        fail_msg("%s refused: %s", json, error);
}

/* Build a tool_call whose input is @input. */
static char *tool_call_with(const char *input)
{
    char *s = NULL;

    assert_true(asprintf(&s,
                         "{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,"
                         "\"provider\":\"p\",\"tool\":\"t\",\"input\":%s}",
                         input) > 0);
    return s;
}

static void test_wrong_type(void **state)
{
    (void)state;
    expect_reject("{\"type\":\"started\",\"id\":5}", "started.id: expected an id");
    expect_reject("{\"type\":\"ping\",\"seq\":\"1\"}", "ping.seq: expected an integer");
    expect_reject("{\"type\":\"done\",\"id\":\"x\",\"status\":\"ok\",\"exit_code\":0,"
                  "\"duration_ms\":1,\"output_truncated\":0}",
                  "done.output_truncated: expected true or false");
    expect_reject("{\"type\":\"hello_ok\",\"version\":1,\"token\":\"t\",\"agent\":\"a\","
                  "\"languages\":\"python\"}",
                  "hello_ok.languages: expected an array");
    expect_reject("{\"type\":\"tool_result\",\"id\":\"x\",\"call_id\":1,\"ok\":false,"
                  "\"error\":\"boom\"}",
                  "tool_result.error: expected an object");
}

static void test_missing_field(void **state)
{
    (void)state;
    expect_reject("{\"type\":\"tool_call\",\"id\":\"x\",\"provider\":\"p\",\"tool\":\"t\","
                  "\"input\":1}",
                  "tool_call.call_id: missing");
    expect_reject("{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,\"provider\":\"p\","
                  "\"tool\":\"t\"}",
                  "tool_call.input: missing");
    expect_reject("{\"type\":\"tool_result\",\"id\":\"x\",\"call_id\":1,\"ok\":true}",
                  "tool_result.result: missing");
    expect_reject("{\"type\":\"tool_result\",\"id\":\"x\",\"call_id\":1,\"ok\":false}",
                  "tool_result.error: missing");
    expect_reject("{\"type\":\"tool_result\",\"id\":\"x\",\"call_id\":1,\"ok\":false,"
                  "\"error\":{\"code\":\"tool_error\"}}",
                  "tool_result.error.message: missing");
    expect_reject("{\"id\":\"x\"}", "message.type: missing");
    expect_reject("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\"}",
                  "execute.tools: missing");
}

/* Files: what a hostile guest answers, and what a host may ask. */
static void test_file_rules(void **state)
{
    (void)state;
    expect_reject("{\"type\":\"file\",\"seq\":1,\"op\":\"read\",\"path\":\"../x\","
                  "\"offset\":0,\"length\":1}",
                  "file.path: expected a workspace path");
    expect_reject("{\"type\":\"file\",\"seq\":1,\"op\":\"delete\",\"path\":\"/etc\"}",
                  "file.path: expected a workspace path");
    expect_reject("{\"type\":\"file\",\"seq\":1,\"op\":\"delete\"}", "file.path: missing");
    expect_reject("{\"type\":\"file\",\"seq\":1,\"op\":\"chmod\",\"path\":\"a\"}",
                  "file.op: expected");
    expect_reject("{\"type\":\"file\",\"seq\":1,\"op\":\"read\",\"path\":\"a\","
                  "\"offset\":0,\"length\":1048577}",
                  "file.length: expected an integer 1..1048576");
    expect_reject("{\"type\":\"file\",\"seq\":1,\"op\":\"write\",\"path\":\"a\","
                  "\"offset\":0}",
                  "file.last: missing");
    expect_reject("{\"type\":\"file_result\",\"seq\":1,\"ok\":true,"
                  "\"entries\":[{\"path\":\"a/../../b\",\"type\":\"file\",\"size\":1,"
                  "\"mtime_us\":1}]}",
                  "file_result.entries[0].path: expected a workspace path");
    expect_reject("{\"type\":\"file_result\",\"seq\":1,\"ok\":true,"
                  "\"entries\":[{\"path\":\"a\",\"type\":\"socket\",\"size\":1,\"mtime_us\":1}]}",
                  "file_result.entries[0].type: expected");
    expect_reject("{\"type\":\"file_result\",\"seq\":1,\"ok\":true,\"size\":-1}",
                  "file_result.size: expected an integer");
    expect_reject("{\"type\":\"file_result\",\"seq\":1,\"ok\":false}",
                  "file_result.error: missing");
    expect_reject("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\","
                  "\"kwargs\":[1],\"tools\":[]}",
                  "execute.kwargs: expected an object");
    /* a list answer of more entries than the limit is refused before any is copied */
    size_t cap = 64 + (SBX_FILE_LIST_MAX + 1) * 64, n;
    char *many = malloc(cap);

    assert_non_null(many);
    n = (size_t)snprintf(many, cap,
                         "{\"type\":\"file_result\",\"seq\":1,\"ok\":true,\"entries\":[");
    for (int i = 0; i <= SBX_FILE_LIST_MAX; i++)
        n += (size_t)snprintf(many + n, cap - n,
                              "%s{\"path\":\"f%d\",\"type\":\"file\",\"size\":0,\"mtime_us\":0}",
                              i ? "," : "", i);
    snprintf(many + n, cap - n, "]}");
    expect_reject(many, "file_result.entries: expected an array of at most 1024 entries");
    free(many);
}

/* data_len announces a data frame of 1..SBX_FILE_CHUNK_MAX bytes, on a write or an ok answer. */
static void test_data_len(void **state)
{
    static const char *const bad[] = {"0", "-1", "1.5", "1048577", "4294967297", "\"1\"", "true"};
    char json[256];
    SbxMsg m;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(json, sizeof(json),
                 "{\"type\":\"file\",\"seq\":1,\"op\":\"write\",\"path\":\"a\",\"offset\":0,"
                 "\"data_len\":%s,\"last\":true}",
                 bad[i]);
        expect_reject(json, "file.data_len: expected an integer 1..1048576");
        snprintf(json, sizeof(json),
                 "{\"type\":\"file_result\",\"seq\":1,\"ok\":true,\"data_len\":%s}", bad[i]);
        expect_reject(json, "file_result.data_len: expected an integer 1..1048576");
    }
    expect_accept("{\"type\":\"file_result\",\"seq\":1,\"ok\":true,\"data_len\":1048576}", &m);
    assert_int_equal(sbx_msg_data_len(&m), SBX_FILE_CHUNK_MAX);
    sbx_msg_clear(&m);
    /* null is absent: no data frame follows */
    expect_accept("{\"type\":\"file_result\",\"seq\":1,\"ok\":true,\"data_len\":null}", &m);
    assert_int_equal(sbx_msg_data_len(&m), 0);
    sbx_msg_clear(&m);
    /* the other branch's member, and a member of another operation, announce nothing */
    expect_accept("{\"type\":\"file_result\",\"seq\":1,\"ok\":false,\"data_len\":5,"
                  "\"error\":{\"code\":\"internal_error\",\"message\":\"x\"}}",
                  &m);
    assert_int_equal(sbx_msg_data_len(&m), 0);
    sbx_msg_clear(&m);
    expect_accept("{\"type\":\"file\",\"seq\":1,\"op\":\"read\",\"path\":\"a\",\"offset\":0,"
                  "\"length\":1,\"data_len\":0}",
                  &m);
    assert_int_equal(sbx_msg_data_len(&m), 0);
    sbx_msg_clear(&m);
    /* base64 data is no file chunk any more: an unknown member, ignored */
    expect_accept("{\"type\":\"file\",\"seq\":1,\"op\":\"write\",\"path\":\"a\",\"offset\":0,"
                  "\"data\":\"AAEC\",\"last\":true}",
                  &m);
    assert_int_equal(m.file.len, 0);
    assert_null(m.file.data);
    sbx_msg_clear(&m);
}

static void test_call_id_range(void **state)
{
    static const char *const bad[] = {"1.5", "-1", "0", "4294967296", "1e300", "1e400", "true",
                                      "null", "\"1\"",
                                      /* a double reads this as 1; the literal is no integer */
                                      "1.0000000000000001"};
    const char *want = "tool_call.call_id: expected an integer 1..4294967295";

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *s = NULL;

        assert_true(asprintf(&s,
                             "{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":%s,"
                             "\"provider\":\"p\",\"tool\":\"t\",\"input\":1}",
                             bad[i]) > 0);
        expect_reject(s, want);
        free(s);
    }
}

/* Integral spellings are integers; the 64-bit fields stop at 2^53 - 1. */
static void test_integer_forms(void **state)
{
    SbxMsg m;

    (void)state;
    expect_accept("{\"type\":\"ping\",\"seq\":4.0e3}", &m);
    assert_int_equal(m.ping.seq, 4000);
    sbx_msg_clear(&m);
    expect_accept("{\"type\":\"done\",\"id\":\"x\",\"status\":\"crash\",\"exit_code\":-2147483648,"
                  "\"duration_ms\":9007199254740991,\"output_truncated\":false}",
                  &m);
    assert_int_equal(m.done.exit_code, INT32_MIN);
    assert_int_equal(m.done.duration_ms, 9007199254740991ull);
    sbx_msg_clear(&m);
    expect_reject("{\"type\":\"done\",\"id\":\"x\",\"status\":\"crash\",\"exit_code\":0,"
                  "\"duration_ms\":9007199254740992,\"output_truncated\":false}",
                  "done.duration_ms: expected an integer 0..9007199254740991");
    expect_reject("{\"type\":\"done\",\"id\":\"x\",\"status\":\"crash\",\"exit_code\":2147483648,"
                  "\"duration_ms\":0,\"output_truncated\":false}",
                  "done.exit_code: expected an integer -2147483648..2147483647");
    expect_reject("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"time_us\":-1,\"entropy\":"
                  "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"}",
                  "hello.time_us");
    /* hello.warm_wait_ms: 1 ms to 10 minutes (SBX_WARM_WAIT_MAX_MS). */
    expect_reject("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"time_us\":1,\"entropy\":"
                  "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\",\"warm_wait_ms\":600001}",
                  "hello.warm_wait_ms: expected an integer 1..600000");
    expect_reject("{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"time_us\":1,\"entropy\":"
                  "\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\",\"warm_wait_ms\":0}",
                  "hello.warm_wait_ms: expected an integer 1..600000");
}

/* The replay members: a seed of exactly SBX_SEED_BYTES, clock logs of bounded integers. */
static void test_replay_members(void **state)
{
#define X "{\"type\":\"execute\",\"id\":\"e\",\"language\":\"python\",\"code\":\"\",\"tools\":[],"
#define D                                                                                          \
    "{\"type\":\"done\",\"id\":\"e\",\"status\":\"ok\",\"exit_code\":0,\"duration_ms\":0,"         \
    "\"output_truncated\":false,"
    SbxMsg m;
    char *big;
    size_t n = 0;

    (void)state;
    expect_reject(X "\"seed\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==\"}",
                  "execute.seed: expected base64 (RFC 4648, padded) of 32..32 bytes");
    expect_reject(X "\"seed\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}",
                  "execute.seed: expected base64 (RFC 4648, padded) of 32..32 bytes");
    expect_reject(X "\"seed\":32}", "execute.seed: expected a base64 string");
    expect_reject(X "\"clock_log\":{}}", "execute.clock_log: expected an array of at most 100000");
    expect_reject(X "\"clock_log\":[1,-1]}", "execute.clock_log: expected integers 0..");
    expect_reject(X "\"clock_log\":[1.5]}", "execute.clock_log: expected integers 0..");
    expect_reject(X "\"clock_log\":[\"1\"]}", "execute.clock_log: expected integers 0..");
    expect_reject(X "\"clock_log\":[null]}", "execute.clock_log: expected integers 0..");
    expect_reject(D "\"clock_log\":[9007199254740992]}", "done.clock_log: expected integers 0..");
    expect_reject(D "\"replayable\":\"no\"}", "done.replayable: expected true or false");
    expect_reject(D "\"not_replayable\":7}", "done.not_replayable: expected a string");
    /* One read more than the limit is refused before anything is allocated for it. */
    big = malloc(sizeof(D) + 3 * (SBX_CLOCK_READS_MAX + 1) + 32);
    assert_non_null(big);
    n = (size_t)sprintf(big, "%s\"clock_log\":[", D);
    for (int i = 0; i <= SBX_CLOCK_READS_MAX; i++)
        n += (size_t)sprintf(big + n, "%s7", i ? "," : "");
    strcpy(big + n, "]}");
    expect_reject(big, "done.clock_log: expected an array of at most 100000 integers");
    /* ... and the limit itself is taken, as is a long reason (cut). */
    big[n - 2] = ']';
    big[n - 1] = '}';
    big[n] = '\0';
    assert_int_equal(sbx_msg_decode(big, strlen(big), &m, NULL), 0);
    assert_int_equal(m.done.n_clock_log, SBX_CLOCK_READS_MAX);
    assert_false(m.done.has_replayable);
    sbx_msg_clear(&m);
    free(big);
#undef X
#undef D
}

/* replay_log: arrays of bounded integers, at most a batch each; a text reason; our id. */
static void test_replay_log(void **state)
{
#define L "{\"type\":\"replay_log\",\"id\":\"e\","
#define X "{\"type\":\"execute\",\"id\":\"e\",\"language\":\"python\",\"code\":\"\",\"tools\":[],"
    SbxMsg m;
    char *big;
    size_t n = 0;

    (void)state;
    expect_reject("{\"type\":\"replay_log\"}", "replay_log.id: missing");
    /* the same entries carried by a tool_call */
    expect_reject("{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,\"provider\":\"p\","
                  "\"tool\":\"t\",\"input\":1,\"events\":[-1]}",
                  "tool_call.events: expected integers");
    expect_reject("{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,\"provider\":\"p\","
                  "\"tool\":\"t\",\"input\":1,\"clock\":{}}",
                  "tool_call.clock: expected an array of at most 4096");
    expect_reject(L "\"clock\":{}}", "replay_log.clock: expected an array of at most 4096");
    expect_reject(L "\"clock\":[1,-1]}", "replay_log.clock: expected integers 0..");
    expect_reject(L "\"events\":[2.5]}", "replay_log.events: expected integers 0..");
    expect_reject(L "\"events\":[9007199254740992]}", "replay_log.events: expected integers 0..");
    expect_reject(L "\"events\":\"1\"}", "replay_log.events: expected an array of at most");
    expect_reject(L "\"not_replayable\":false}", "replay_log.not_replayable: expected a string");
    expect_reject(X "\"event_log\":[-3]}", "execute.event_log: expected integers 0..");
    expect_reject(X "\"log_open\":1}", "execute.log_open: expected true or false");
    big = malloc(sizeof(L) + 2 * (SBX_REPLAY_LOG_BATCH_MAX + 1) + 32);
    assert_non_null(big);
    n = (size_t)sprintf(big, "%s\"events\":[", L);
    for (int i = 0; i <= SBX_REPLAY_LOG_BATCH_MAX; i++)
        n += (size_t)sprintf(big + n, "%s7", i ? "," : "");
    strcpy(big + n, "]}");
    expect_reject(big, "replay_log.events: expected an array of at most 4096 integers");
    big[n - 2] = ']';
    big[n - 1] = '}';
    big[n] = '\0';
    assert_int_equal(sbx_msg_decode(big, strlen(big), &m, NULL), 0);
    assert_int_equal(m.replay_log.n_events, SBX_REPLAY_LOG_BATCH_MAX);
    assert_null(m.replay_log.clock);
    sbx_msg_clear(&m);
    free(big);
#undef L
#undef X
}

static char *hello_with_entropy(const char *b64)
{
    char *s = NULL;

    assert_true(asprintf(&s,
                         "{\"type\":\"hello\",\"version\":1,\"token\":\"t\",\"time_us\":1,"
                         "\"entropy\":\"%s\"}",
                         b64) > 0);
    return s;
}

static void test_bad_base64(void **state)
{
    /* 32 bytes are 44 characters with one '='. */
    static const char *const bad[] = {
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",      /* no padding */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==",    /* too much padding */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA*=",     /* bad character */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB=",     /* unused bits set */
        "AAAAAAAAAAAAAAAAAAAA AAAAAAAAAAAAAAAAAAAAAAA=",    /* whitespace */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=AAAAAAA", /* padding inside */
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA-",     /* URL-safe alphabet */
    };
    SbxMsg m;
    char *s = hello_with_entropy("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");

    (void)state;
    expect_accept(s, &m);
    assert_int_equal(m.hello.entropy_len, 32);
    sbx_msg_clear(&m);
    free(s);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        s = hello_with_entropy(bad[i]);
        expect_reject(s, "hello.entropy: expected base64");
        free(s);
    }
}

static void test_entropy_size(void **state)
{
    char b64[400];
    char *s;

    (void)state;
    /* 30 bytes are 40 characters. */
    memset(b64, 'A', 40);
    b64[40] = '\0';
    s = hello_with_entropy(b64);
    expect_reject(s, "hello.entropy: expected base64 (RFC 4648, padded) of 32..256 bytes");
    free(s);
    /* 258 bytes = 344 characters. */
    memset(b64, 'A', 344);
    b64[344] = '\0';
    s = hello_with_entropy(b64);
    expect_reject(s, "hello.entropy");
    free(s);
}

static char *output_with(const char *b64)
{
    char *s = NULL;

    assert_true(asprintf(&s,
                         "{\"type\":\"output\",\"id\":\"x\",\"stream\":\"stdout\","
                         "\"data\":\"%s\"}",
                         b64) > 0);
    return s;
}

static void test_output_size(void **state)
{
    size_t n = (SBX_OUTPUT_CHUNK_MAX + 3) / 3 * 4;
    char *b64 = malloc(n + 1);
    char *s;

    (void)state;
    s = output_with("");
    expect_reject(s, "output.data: expected base64 (RFC 4648, padded) of 1..65536 bytes");
    free(s);
    /* 65538 bytes. */
    memset(b64, 'A', n);
    b64[n] = '\0';
    s = output_with(b64);
    expect_reject(s, "output.data");
    free(s);
    free(b64);
}

static void test_oversize_strings(void **state)
{
    char id[SBX_ID_MAX + 2], token[SBX_TOKEN_MAX + 2], *s = NULL;

    (void)state;
    memset(id, 'a', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    assert_true(asprintf(&s, "{\"type\":\"cancel\",\"id\":\"%s\"}", id) > 0);
    expect_reject(s, "cancel.id: expected an id (1..64 of [A-Za-z0-9_.-])");
    free(s);
    memset(token, 't', sizeof(token) - 1);
    token[sizeof(token) - 1] = '\0';
    assert_true(asprintf(&s,
                         "{\"type\":\"hello_ok\",\"version\":1,\"token\":\"%s\","
                         "\"agent\":\"a\",\"languages\":[]}",
                         token) > 0);
    expect_reject(s, "hello_ok.token: longer than 128 bytes");
    free(s);
    expect_reject("{\"type\":\"cancel\",\"id\":\"a b\"}", "cancel.id");
    expect_reject("{\"type\":\"cancel\",\"id\":\"\"}", "cancel.id");
    expect_reject("{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,\"provider\":\"a-b\","
                  "\"tool\":\"t\",\"input\":1}",
                  "tool_call.provider: expected an identifier");
}

static void test_too_many_tools(void **state)
{
    const char *tool = "{\"provider\":\"p\",\"name\":\"n\"},";
    size_t tlen = strlen(tool);
    char *s = malloc(100 + (SBX_TOOLS_MAX + 1) * tlen), *p = s;
    SbxMsg m;

    (void)state;
    p += sprintf(p, "{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\","
                    "\"tools\":[");
    for (int i = 0; i < SBX_TOOLS_MAX; i++)
        p += sprintf(p, "%s", tool);
    strcpy(p - 1, "]}");
    expect_accept(s, &m);
    assert_int_equal(m.execute.n_tools, SBX_TOOLS_MAX);
    sbx_msg_clear(&m);
    strcpy(p - 1, ",");
    strcat(p, tool);
    strcpy(s + strlen(s) - 1, "]}");
    expect_reject(s, "execute.tools: expected an array of at most 1024 tools");
    free(s);
    expect_reject("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\","
                  "\"tools\":[{\"provider\":\"p\",\"name\":\"9\"}]}",
                  "execute.tools[0].name: expected an identifier");
    expect_reject("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\","
                  "\"tools\":[1]}",
                  "execute.tools: expected an array of {provider, name, description?}");
}

static void test_too_many_languages(void **state)
{
    char langs[17 * 4 + 1] = "";
    char *s = NULL;

    (void)state;
    for (int i = 0; i < 17; i++)
        strcat(langs, i ? ",\"x\"" : "\"x\"");
    assert_true(asprintf(&s,
                         "{\"type\":\"hello_ok\",\"version\":1,\"token\":\"t\","
                         "\"agent\":\"a\",\"languages\":[%s]}",
                         langs) > 0);
    expect_reject(s, "hello_ok.languages: expected an array of at most 16 identifiers");
    free(s);
}

static void test_trailing_garbage(void **state)
{
    SbxMsg m;

    (void)state;
    expect_reject("{\"type\":\"ping\",\"seq\":1} x", "byte 24: text after the JSON value");
    expect_reject("{\"type\":\"ping\",\"seq\":1}{\"type\":\"ping\",\"seq\":2}",
                  "byte 23: text after the JSON value");
    expect_reject("{\"type\":\"ping\",\"seq\":1}}", "byte 23: text after the JSON value");
    expect_reject("{\"type\":\"ping\",\"seq\":1", "invalid JSON");
    /* Whitespace around the object is fine. */
    expect_accept(" \r\n\t{\"type\":\"ping\",\"seq\":1}\n ", &m);
    sbx_msg_clear(&m);
}

static void test_top_level_not_object(void **state)
{
    (void)state;
    expect_reject("[{\"type\":\"ping\",\"seq\":1}]", "message: expected a JSON object");
    expect_reject("\"ping\"", "message: expected a JSON object");
    expect_reject("1", "message: expected a JSON object");
    expect_reject("null", "message: expected a JSON object");
}

/* 32 levels in all are accepted, 33 are not (the message object is level 1). */
static char *nested_input(int levels)
{
    char *v = malloc(2 * (size_t)levels + 2), *s;

    memset(v, '[', (size_t)levels);
    v[levels] = '1';
    memset(v + levels + 1, ']', (size_t)levels);
    v[2 * levels + 1] = '\0';
    s = tool_call_with(v);
    free(v);
    return s;
}

static void test_nesting(void **state)
{
    char *s;
    SbxMsg m;

    (void)state;
    s = nested_input(SBX_JSON_DEPTH_MAX - 1);
    expect_accept(s, &m);
    sbx_msg_clear(&m);
    free(s);
    s = nested_input(SBX_JSON_DEPTH_MAX);
    expect_reject(s, "nested deeper than 32 levels");
    free(s);
    /* A megabyte of '[' costs nothing: the scan refuses it before cJSON recurses. */
    s = malloc(1 << 20);
    memset(s, '[', 1 << 20);
    expect_reject_len(s, 1 << 20, "nested deeper");
    free(s);
}

static void test_nul_and_control_characters(void **state)
{
    static const char raw_nul[] = "{\"type\":\"cancel\",\"id\":\"x\0y\"}";

    (void)state;
    expect_reject("{\"type\":\"cancel\",\"id\":\"x\\u0000y\"}", "\\u0000 in a string");
    expect_reject_len(raw_nul, sizeof(raw_nul) - 1, "control character in a string");
    expect_reject("{\"type\":\"cancel\",\"id\":\"x\ty\"}", "control character in a string");
    expect_reject("{\"type\":\"cancel\",\x01\"id\":\"x\"}", "control character");
    /* An escaped backslash followed by u0000 is plain text, not a NUL. */
    char *s = tool_call_with("\"\\\\u0000\"");
    SbxMsg m;

    expect_accept(s, &m);
    assert_string_equal(m.tool_call.input_json, "\"\\\\u0000\"");
    sbx_msg_clear(&m);
    free(s);
}

static void test_invalid_utf8(void **state)
{
    static const char *const bad[] = {
        "\"\xff\"",             /* not a lead byte */
        "\"\xc0\xaf\"",         /* overlong '/' */
        "\"\xe0\x80\xaf\"",     /* overlong '/' */
        "\"\xed\xa0\x80\"",     /* a surrogate encoded as UTF-8 */
        "\"\xf4\x90\x80\x80\"", /* above U+10FFFF */
        "\"\xe2\x9c\"",         /* cut sequence */
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *s = tool_call_with(bad[i]);

        expect_reject(s, "invalid UTF-8");
        free(s);
    }
    /* A lone surrogate as an escape is refused by cJSON. */
    char *s = tool_call_with("\"\\ud800\"");

    expect_reject(s, "invalid JSON");
    free(s);
}

static void test_duplicate_names(void **state)
{
    char *s = tool_call_with("{\"b\":1,\"a\":2,\"b\":3}");

    (void)state;
    expect_reject(s, "duplicate member name");
    free(s);
    expect_reject("{\"type\":\"cancel\",\"id\":\"x\",\"id\":\"y\"}", "duplicate member name");
}

static void test_unknown_type_and_enums(void **state)
{
    (void)state;
    expect_reject("{\"type\":\"file_put\"}", "message.type: unknown message type");
    expect_reject("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"ruby\",\"code\":\"\","
                  "\"tools\":[]}",
                  "execute.language: expected \"javascript\" or \"python\"");
    expect_reject("{\"type\":\"output\",\"id\":\"x\",\"stream\":\"stdin\",\"data\":\"AA==\"}",
                  "output.stream");
    expect_reject("{\"type\":\"done\",\"id\":\"x\",\"status\":\"fine\",\"exit_code\":0,"
                  "\"duration_ms\":0,\"output_truncated\":false}",
                  "done.status");
    expect_reject("{\"type\":\"error\",\"code\":\"oops\",\"message\":\"m\"}", "error.code");
}

static void test_args_must_be_array(void **state)
{
    SbxMsg m;

    (void)state;
    expect_reject("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\","
                  "\"tools\":[],\"args\":{\"a\":1}}",
                  "execute.args: expected an array");
    /* null means absent for optional fields. */
    expect_accept("{\"type\":\"execute\",\"id\":\"x\",\"language\":\"python\",\"code\":\"\","
                  "\"tools\":[],\"args\":null,\"entry\":null}",
                  &m);
    assert_null(m.execute.args_json);
    assert_null(m.execute.entry);
    sbx_msg_clear(&m);
}

/* Unknown fields are ignored; *_json fields come back compact. */
static void test_unknown_fields_and_compact_json(void **state)
{
    SbxMsg m;

    (void)state;
    expect_accept("{\"type\":\"done\",\"future\":[1,2],\"id\":\"x\",\"status\":\"ok\","
                  "\"result\":{ \"a\" : [ 1 , 2.5e1 ] },\"exit_code\":0,\"duration_ms\":3,"
                  "\"output_truncated\":false}",
                  &m);
    /* The sender's text less its whitespace: never a re-print (2.5e1 stays 2.5e1). */
    assert_string_equal(m.done.result_json, "{\"a\":[1,2.5e1]}");
    assert_false(m.done.has_error);
    sbx_msg_clear(&m);
}

/* Numbers must be RFC 8259 literals: what the host forwards, the reader's own parser takes. */
static void test_number_grammar(void **state)
{
    static const char *const bad[] = {
        "01",   "-01", "1.",    "-.5",   ".5", "+1",  "1e",       "1e+", "1.e5",
        "0x10", "1-2", "1e5e5", "1.2.3", "-",  "--1", "Infinity", "NaN", "1e1234567890123456789"};
    static const char *const good[] = {"0",
                                       "-0",
                                       "0.0",
                                       "-0.0",
                                       "1e400",
                                       "-1e400",
                                       "1E+2",
                                       "1e-400",
                                       "123456789012345678901234567890",
                                       "1e000000000000000000000000000001"};
    SbxMsg m;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *s = NULL;

        assert_true(asprintf(&s,
                             "{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,"
                             "\"provider\":\"p\",\"tool\":\"t\",\"input\":[%s]}",
                             bad[i]) > 0);
        expect_reject(s, "message: ");
        free(s);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        char *s = NULL, *want = NULL;

        assert_true(asprintf(&s,
                             "{\"type\":\"tool_call\",\"id\":\"x\",\"call_id\":1,"
                             "\"provider\":\"p\",\"tool\":\"t\",\"input\":[ %s ]}",
                             good[i]) > 0);
        assert_true(asprintf(&want, "[%s]", good[i]) > 0);
        expect_accept(s, &m);
        assert_string_equal(m.tool_call.input_json, want);
        sbx_msg_clear(&m);
        free(want);
        free(s);
    }
}

static void test_error_text_truncated(void **state)
{
    size_t n = SBX_ERROR_TEXT_MAX + 100;
    char *text = malloc(n + 1), *s = NULL;
    SbxMsg m;

    (void)state;
    memset(text, 'e', n);
    /* A 2-byte character starting at the last allowed byte is dropped whole. */
    memcpy(text + SBX_ERROR_TEXT_MAX - 1, "\xc3\xa9", 2);
    text[n] = '\0';
    assert_true(asprintf(&s,
                         "{\"type\":\"done\",\"id\":\"x\",\"status\":\"error\","
                         "\"error\":{\"code\":\"runtime_error\",\"message\":\"%s\","
                         "\"stack\":\"%s\"},\"exit_code\":1,\"duration_ms\":3,"
                         "\"output_truncated\":false}",
                         text, text) > 0);
    expect_accept(s, &m);
    assert_true(m.done.has_error);
    assert_int_equal(strlen(m.done.error.message), SBX_ERROR_TEXT_MAX - 1);
    assert_int_equal(strlen(m.done.error.stack), SBX_ERROR_TEXT_MAX - 1);
    sbx_msg_clear(&m);
    free(s);
    free(text);
}

static void test_length_limits(void **state)
{
    char *big = malloc(SBX_FRAME_MAX + 1);

    (void)state;
    expect_reject_len("", 0, "message: length 0");
    memset(big, ' ', SBX_FRAME_MAX + 1);
    expect_reject_len(big, SBX_FRAME_MAX + 1, "message: length");
    free(big);
}

/* Values are capped so a frame cannot make cJSON allocate ~200 MiB. */
static void test_too_many_values(void **state)
{
    size_t n = 300 * 1024;
    char *arr = malloc(2 * n + 2), *s;

    (void)state;
    arr[0] = '[';
    for (size_t i = 0; i < n; i++)
        memcpy(arr + 1 + 2 * i, "0,", 2);
    arr[2 * n] = ']';
    arr[2 * n + 1] = '\0';
    s = tool_call_with(arr);
    expect_reject(s, "JSON values");
    free(s);
    free(arr);
}

static void test_null_error_pointer(void **state)
{
    SbxMsg m;

    (void)state;
    assert_int_equal(sbx_msg_decode("{", 1, &m, NULL), -EBADMSG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrong_type),
        cmocka_unit_test(test_missing_field),
        cmocka_unit_test(test_call_id_range),
        cmocka_unit_test(test_integer_forms),
        cmocka_unit_test(test_bad_base64),
        cmocka_unit_test(test_replay_members),
        cmocka_unit_test(test_replay_log),
        cmocka_unit_test(test_entropy_size),
        cmocka_unit_test(test_output_size),
        cmocka_unit_test(test_oversize_strings),
        cmocka_unit_test(test_too_many_tools),
        cmocka_unit_test(test_too_many_languages),
        cmocka_unit_test(test_trailing_garbage),
        cmocka_unit_test(test_top_level_not_object),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_nul_and_control_characters),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_duplicate_names),
        cmocka_unit_test(test_unknown_type_and_enums),
        cmocka_unit_test(test_args_must_be_array),
        cmocka_unit_test(test_unknown_fields_and_compact_json),
        cmocka_unit_test(test_number_grammar),
        cmocka_unit_test(test_error_text_truncated),
        cmocka_unit_test(test_length_limits),
        cmocka_unit_test(test_too_many_values),
        cmocka_unit_test(test_null_error_pointer),
        cmocka_unit_test(test_file_rules),
        cmocka_unit_test(test_data_len),
    };

    return cmocka_run_group_tests_name("reject", tests, NULL, NULL);
}
