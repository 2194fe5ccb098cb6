/*
 * Round trips of every message type through sbx_msg_encode and sbx_msg_decode, the wire form
 * of a few of them, the name tables, and the encoder's own refusals.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "msg-equal.h"
#include "protocol/frame.h"
#include "protocol/message.h"

/* Encode @m, check the frame header, decode the payload and compare. Returns the JSON text. */
static char *round_trip(const SbxMsg *m)
{
    uint8_t *frame = NULL;
    size_t len = 0;
    char *error = NULL, *json;
    SbxMsg back;

    assert_int_equal(sbx_msg_encode(m, &frame, &len), 0);
    assert_true(len > SBX_FRAME_HEADER);
    assert_int_equal((size_t)frame[0] << 24 | (size_t)frame[1] << 16 | (size_t)frame[2] << 8 |
                         frame[3],
                     len - SBX_FRAME_HEADER);
    json = strndup((char *)frame + SBX_FRAME_HEADER, len - SBX_FRAME_HEADER);
    if (sbx_msg_decode(json, strlen(json), &back, &error) != 0)
        fail_msg("decode of %s: %s", json, error);
    assert_true(test_msg_equal(m, &back));
    sbx_msg_clear(&back);
    free(frame);
    return json;
}

static void check_round_trip(const SbxMsg *m)
{
    free(round_trip(m));
}

static void fill(uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i * 7 + 3);
}

static void test_hello(void **state)
{
    uint8_t entropy[SBX_ENTROPY_MAX];
    SbxMsg m = {.type = SBX_MSG_HELLO,
                .hello = {.version = 1,
                          .token = "tok-123",
                          .entropy = entropy,
                          .entropy_len = 64,
                          .time_us = 1800000000000123}};
    char *json;

    (void)state;
    fill(entropy, sizeof(entropy));
    json = round_trip(&m);
    /* Integers are printed whole, never as 1.8e+15. */
    assert_non_null(strstr(json, "\"time_us\":1800000000000123"));
    free(json);
    m.hello.time_us = 9007199254740991;
    m.hello.entropy_len = SBX_ENTROPY_MIN;
    check_round_trip(&m);
    m.hello.entropy_len = SBX_ENTROPY_MAX - 1;
    m.hello.version = UINT32_MAX;
    m.hello.time_us = 0;
    check_round_trip(&m);
    /* warm_up is sent only when set (an older agent ignores it) and read back. */
    assert_null(strstr(json = round_trip(&m), "warm_up"));
    free(json);
    m.hello.warm_up = true;
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"warm_up\":true"));
    free(json);
    /* warm_wait_ms likewise (the snapshot maker's), within its limit. */
    assert_null(strstr(json = round_trip(&m), "warm_wait_ms"));
    free(json);
    m.hello.warm_wait_ms = SBX_WARM_WAIT_MAX_MS;
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"warm_wait_ms\":600000"));
    free(json);
    m.hello.warm_wait_ms = SBX_WARM_WAIT_MAX_MS + 1;
    assert_int_equal(sbx_msg_encode(&m, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

static void test_hello_ok(void **state)
{
    char *langs[] = {"javascript", "python", NULL};
    char *none[] = {NULL};
    SbxMsg m = {
        .type = SBX_MSG_HELLO_OK,
        .hello_ok = {
            .version = 1, .token = "t", .agent = "sandbox-agent 0.1.0", .languages = langs}};
    char *json;

    (void)state;
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"languages\":[\"javascript\",\"python\"]"));
    free(json);
    m.hello_ok.languages = none;
    check_round_trip(&m);
    m.hello_ok.languages = NULL;
    check_round_trip(&m);
}

static void test_execute_full(void **state)
{
    SbxToolDecl tools[] = {
        {.provider = "github",
         .name = "search_issues",
         .description = "Search issues \xe2\x9c\x93"},
        {.provider = "fs", .name = "$read"},
    };
    SbxMsg m = {.type = SBX_MSG_EXECUTE,
                .execute = {.id = "exec-1.a_B",
                            .language = SBX_LANG_PYTHON,
                            .code = "print('hi')\n\t\"quoted\" \\ \x01",
                            .entry = "main",
                            .args_json = "[1,\"two\",{\"x\":[null,true]}]",
                            .tools = tools,
                            .n_tools = 2,
                            .output_limit = 1u << 20,
                            .timeout_ms = 30000}};
    uint8_t entropy[SBX_ENTROPY_MIN];
    char *json;

    (void)state;
    json = round_trip(&m);
    /* args travel as a JSON value, not as a string. */
    assert_non_null(strstr(json, "\"args\":[1,\"two\",{\"x\":[null,true]}]"));
    free(json);
    /* The clock and entropy of a pooled session, sent with the execute. */
    fill(entropy, sizeof(entropy));
    m.execute.time_us = 1800000000000123;
    m.execute.entropy = entropy;
    m.execute.entropy_len = sizeof(entropy);
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"time_us\":1800000000000123"));
    free(json);
    m.execute.entropy_len = SBX_ENTROPY_MIN - 1;
    assert_int_equal(sbx_msg_encode(&m, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

static void test_execute_minimal(void **state)
{
    SbxMsg m = {.type = SBX_MSG_EXECUTE,
                .execute = {.id = "e", .language = SBX_LANG_JAVASCRIPT, .code = ""}};
    char *json;

    (void)state;
    json = round_trip(&m);
    assert_string_equal(json, "{\"type\":\"execute\",\"id\":\"e\",\"language\":\"javascript\","
                              "\"code\":\"\",\"tools\":[]}");
    free(json);
    /* TypeScript is a language of the wire; the guest runs it in the JavaScript runner. */
    m.execute.language = SBX_LANG_TYPESCRIPT;
    json = round_trip(&m);
    assert_string_equal(json, "{\"type\":\"execute\",\"id\":\"e\",\"language\":\"typescript\","
                              "\"code\":\"\",\"tools\":[]}");
    free(json);
}

/* A session's execute: keyword arguments (an object) and keep. */
static void test_execute_kwargs_keep(void **state)
{
    SbxMsg m = {.type = SBX_MSG_EXECUTE,
                .execute = {.id = "e",
                            .language = SBX_LANG_PYTHON,
                            .code = "",
                            .entry = "f",
                            .args_json = "[1]",
                            .kwargs_json = "{\"b\":2.50}",
                            .keep = true}};
    char *json;

    (void)state;
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"kwargs\":{\"b\":2.50},\"keep\":true"));
    free(json);
    m.execute.kwargs_json = "[1]"; /* not an object */
    assert_int_equal(sbx_msg_encode(&m, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

static void test_file(void **state)
{
    uint8_t chunk[300];
    SbxMsg w = {.type = SBX_MSG_FILE,
                .file = {.seq = 7,
                         .op = SBX_FILE_WRITE,
                         .path = "dir/\xc3\xa9t\xc3\xa9.bin",
                         .offset = 1u << 20,
                         .data = chunk,
                         .len = sizeof(chunk),
                         .last = true}};
    SbxMsg r = {.type = SBX_MSG_FILE,
                .file = {.seq = 8, .op = SBX_FILE_READ, .path = "a", .length = SBX_FILE_CHUNK_MAX}};
    SbxMsg l = {.type = SBX_MSG_FILE, .file = {.seq = 9, .op = SBX_FILE_LIST}};
    SbxMsg d = {.type = SBX_MSG_FILE, .file = {.seq = 10, .op = SBX_FILE_DELETE, .path = "a/b"}};
    char *json;

    (void)state;
    fill(chunk, sizeof(chunk));
    /* the chunk is announced, not carried: its data frame follows (sbx_msg_data_len) */
    json = round_trip(&w);
    assert_non_null(strstr(json, "\"data_len\":300,"));
    assert_null(strstr(json, "\"data\""));
    assert_int_equal(sbx_msg_data_len(&w), 300);
    free(json);
    w.file.len = SBX_FILE_CHUNK_MAX;
    check_round_trip(&w);
    w.file.data = NULL; /* an empty file: no data_len, no data frame */
    w.file.len = 0;
    w.file.offset = 0;
    json = round_trip(&w);
    assert_null(strstr(json, "\"data"));
    assert_int_equal(sbx_msg_data_len(&w), 0);
    free(json);
    w.file.len = SBX_FILE_CHUNK_MAX + 1;
    assert_int_equal(sbx_msg_encode(&w, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    r.file.len = 5; /* only a write has data: a read's len is not its business */
    assert_int_equal(sbx_msg_data_len(&r), 0);
    r.file.len = 0;
    check_round_trip(&r);
    json = round_trip(&l);
    assert_string_equal(json, "{\"type\":\"file\",\"seq\":9,\"op\":\"list\"}");
    free(json);
    check_round_trip(&d);
    /* the encoder refuses what the decoder would */
    r.file.length = SBX_FILE_CHUNK_MAX + 1;
    assert_int_equal(sbx_msg_encode(&r, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    d.file.path = "../x";
    assert_int_equal(sbx_msg_encode(&d, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    d.file.path = NULL; /* only list may name no path */
    assert_int_equal(sbx_msg_encode(&d, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

static void test_file_result(void **state)
{
    uint8_t chunk[100];
    SbxFileEntry entries[] = {
        {.path = "a", .type = SBX_FILE_TYPE_DIR, .mtime_us = 1800000000000001},
        {.path = "a/b.txt", .type = SBX_FILE_TYPE_FILE, .size = 12, .mtime_us = 2},
        {.path = "l", .type = SBX_FILE_TYPE_SYMLINK, .size = 3},
    };
    SbxMsg ok = {.type = SBX_MSG_FILE_RESULT,
                 .file_result = {.seq = 3, .ok = true, .size = 1000, .data = chunk, .len = 100}};
    SbxMsg list = {
        .type = SBX_MSG_FILE_RESULT,
        .file_result = {
            .seq = 4, .ok = true, .entries = entries, .n_entries = 3, .truncated = true}};
    SbxMsg empty = {.type = SBX_MSG_FILE_RESULT,
                    .file_result = {.seq = 5, .ok = true, .entries = entries, .n_entries = 0}};
    SbxMsg bad = {
        .type = SBX_MSG_FILE_RESULT,
        .file_result = {
            .seq = 6,
            .ok = false,
            .error = {.code = SBX_ERR_VALIDATION, .type = "ENOENT", .message = "no such file"}}};
    char *json;

    (void)state;
    fill(chunk, sizeof(chunk));
    json = round_trip(&ok);
    assert_string_equal(json, "{\"type\":\"file_result\",\"seq\":3,\"ok\":true,\"size\":1000,"
                              "\"data_len\":100}");
    assert_int_equal(sbx_msg_data_len(&ok), 100);
    free(json);
    ok.file_result.len = SBX_FILE_CHUNK_MAX + 1;
    assert_int_equal(sbx_msg_encode(&ok, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    check_round_trip(&list);
    bad.file_result.len = 100; /* a refusal has no data */
    assert_int_equal(sbx_msg_data_len(&bad), 0);
    bad.file_result.len = 0;
    json = round_trip(&empty); /* an empty list is a list */
    assert_non_null(strstr(json, "\"entries\":[]"));
    free(json);
    check_round_trip(&bad);
    entries[1].path = "/etc/passwd";
    assert_int_equal(sbx_msg_encode(&list, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

/* The connection's reader attaches a data frame's payload to the message that announced it. */
static void test_attach_data(void **state)
{
    const char *read_ok = "{\"type\":\"file_result\",\"seq\":1,\"ok\":true,\"size\":3,"
                          "\"data_len\":3}",
               *write = "{\"type\":\"file\",\"seq\":1,\"op\":\"write\",\"path\":\"a\","
                        "\"offset\":0,\"data_len\":2,\"last\":true}",
               *ping = "{\"type\":\"ping\",\"seq\":1}";
    SbxMsg m;
    uint8_t *data;

    (void)state;
    assert_int_equal(sbx_msg_decode(read_ok, strlen(read_ok), &m, NULL), 0);
    assert_int_equal(sbx_msg_data_len(&m), 3);
    assert_null(m.file_result.data);
    assert_int_equal(sbx_msg_attach_data(&m, malloc(2), 2), -EINVAL); /* freed: no leak */
    data = malloc(3);
    memcpy(data, "abc", 3);
    assert_int_equal(sbx_msg_attach_data(&m, data, 3), 0);
    assert_memory_equal(m.file_result.data, "abc", 3);
    assert_int_equal(sbx_msg_attach_data(&m, malloc(3), 3), -EINVAL); /* already there */
    sbx_msg_clear(&m);
    assert_int_equal(sbx_msg_decode(write, strlen(write), &m, NULL), 0);
    assert_int_equal(sbx_msg_data_len(&m), 2);
    assert_int_equal(sbx_msg_attach_data(&m, (uint8_t *)strdup("xy"), 2), 0);
    assert_memory_equal(m.file.data, "xy", 2);
    sbx_msg_clear(&m); /* frees the data */
    assert_int_equal(sbx_msg_decode(ping, strlen(ping), &m, NULL), 0);
    assert_int_equal(sbx_msg_data_len(&m), 0);
    assert_int_equal(sbx_msg_attach_data(&m, malloc(1), 1), -EINVAL);
    sbx_msg_clear(&m);
}

static void test_workspace_path(void **state)
{
    char name[SBX_PATH_NAME_MAX + 2], path[SBX_PATH_MAX + 2];

    (void)state;
    assert_true(sbx_workspace_path_valid("a"));
    assert_true(sbx_workspace_path_valid("a/b/c.txt"));
    assert_true(sbx_workspace_path_valid(".hidden/..x/x.."));
    assert_true(sbx_workspace_path_valid("\xc3\xa9 space \\ \""));
    assert_false(sbx_workspace_path_valid(NULL));
    assert_false(sbx_workspace_path_valid(""));
    assert_false(sbx_workspace_path_valid("/a"));
    assert_false(sbx_workspace_path_valid("a/"));
    assert_false(sbx_workspace_path_valid("a//b"));
    assert_false(sbx_workspace_path_valid("."));
    assert_false(sbx_workspace_path_valid(".."));
    assert_false(sbx_workspace_path_valid("a/../b"));
    assert_false(sbx_workspace_path_valid("a/."));
    assert_false(sbx_workspace_path_valid("../a"));
    assert_false(sbx_workspace_path_valid("a\nb"));
    assert_false(sbx_workspace_path_valid("a\x7f"));
    memset(name, 'n', sizeof(name));
    name[SBX_PATH_NAME_MAX] = '\0';
    assert_true(sbx_workspace_path_valid(name));
    name[SBX_PATH_NAME_MAX] = 'n';
    name[SBX_PATH_NAME_MAX + 1] = '\0';
    assert_false(sbx_workspace_path_valid(name));
    memset(path, 'p', sizeof(path));
    for (size_t i = 100; i < SBX_PATH_MAX; i += 101)
        path[i] = '/';
    path[SBX_PATH_MAX] = '\0';
    assert_true(sbx_workspace_path_valid(path));
    path[SBX_PATH_MAX] = 'p';
    path[SBX_PATH_MAX + 1] = '\0';
    assert_false(sbx_workspace_path_valid(path));
}

static void test_started_cancel(void **state)
{
    SbxMsg s = {.type = SBX_MSG_STARTED, .started = {.id = "x"}};
    SbxMsg c = {.type = SBX_MSG_CANCEL, .cancel = {.id = "x"}};

    (void)state;
    check_round_trip(&s);
    check_round_trip(&c);
}

static void test_output(void **state)
{
    uint8_t *data = malloc(SBX_OUTPUT_CHUNK_MAX);
    SbxMsg m = {.type = SBX_MSG_OUTPUT,
                .output = {.id = "x", .stream = SBX_STREAM_STDERR, .data = data, .len = 1}};

    (void)state;
    fill(data, SBX_OUTPUT_CHUNK_MAX);
    for (size_t len = 1; len <= 4; len++) {
        m.output.len = len;
        check_round_trip(&m);
    }
    m.output.len = SBX_OUTPUT_CHUNK_MAX;
    m.output.stream = SBX_STREAM_STDOUT;
    check_round_trip(&m);
    free(data);
}

static void test_tool_call(void **state)
{
    SbxMsg m = {.type = SBX_MSG_TOOL_CALL,
                .tool_call = {.id = "x",
                              .call_id = UINT32_MAX,
                              .provider = "github",
                              .tool = "search_issues",
                              .input_json = "{\"q\":\"bug\",\"n\":5}"}};
    char *json;

    (void)state;
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"input\":{\"q\":\"bug\",\"n\":5}"));
    assert_non_null(strstr(json, "\"call_id\":4294967295"));
    free(json);
    m.tool_call.input_json = "null";
    m.tool_call.call_id = 1;
    check_round_trip(&m);
    /* the replay logs' entries carried by the call (docs/protocol.md, "Replay") */
    uint64_t reads[] = {5, 9007199254740991ull};
    uint64_t events[] = {3};
    m.tool_call.clock = reads;
    m.tool_call.n_clock = 2;
    m.tool_call.events = events;
    m.tool_call.n_events = 1;
    m.tool_call.not_replayable = "a thread was started";
    json = round_trip(&m);
    assert_non_null(strstr(json, "\"clock\":[5,9007199254740991],\"events\":[3],"
                                 "\"not_replayable\":\"a thread was started\""));
    free(json);
    m.tool_call.n_events = SBX_REPLAY_LOG_BATCH_MAX + 1;
    assert_int_equal(sbx_msg_encode(&m, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

static void test_tool_result(void **state)
{
    SbxMsg ok = {.type = SBX_MSG_TOOL_RESULT,
                 .tool_result = {.id = "x", .call_id = 7, .ok = true, .result_json = "[1,2]"}};
    SbxMsg err = {.type = SBX_MSG_TOOL_RESULT,
                  .tool_result = {.id = "x",
                                  .call_id = 8,
                                  .ok = false,
                                  .error = {.code = SBX_ERR_POLICY_DENIED, .message = "denied"}}};

    (void)state;
    check_round_trip(&ok);
    check_round_trip(&err);
    err.tool_result.error.type = "PolicyError";
    err.tool_result.error.stack = "at x\nat y";
    check_round_trip(&err);
}

static void test_done(void **state)
{
    SbxMsg m = {.type = SBX_MSG_DONE,
                .done = {.id = "x",
                         .status = SBX_STATUS_ERROR,
                         .has_error = true,
                         .error = {.code = SBX_ERR_RUNTIME,
                                   .type = "ZeroDivisionError",
                                   .message = "division by zero",
                                   .stack = "Traceback..."},
                         .exit_code = -1,
                         .duration_ms = 9007199254740991,
                         .output_truncated = true,
                         .kept = true}};
    SbxMsg ok = {.type = SBX_MSG_DONE,
                 .done = {.id = "x", .status = SBX_STATUS_OK, .result_json = "null"}};

    (void)state;
    check_round_trip(&m);
    m.done.exit_code = INT32_MIN;
    check_round_trip(&m);
    check_round_trip(&ok);
    ok.done.result_json = NULL;
    for (int s = 0; s < SBX_STATUS__COUNT; s++) {
        ok.done.status = (SbxStatus)s;
        check_round_trip(&ok);
    }
}

/* The replay members (docs/protocol.md, "Replay"): a seed and a clock log out, the log and the
 * verdict back; an empty log is present (a replay in which every read diverges), not absent. */
static void test_replay_members(void **state)
{
    uint8_t seed[SBX_SEED_BYTES];
    uint64_t reads[] = {0, 1800000000000123, 9007199254740991ull, 42};
    uint64_t none[1] = {0};
    SbxMsg x = {.type = SBX_MSG_EXECUTE,
                .execute = {.id = "e", .language = SBX_LANG_PYTHON, .code = "", .seed = seed}};
    SbxMsg d = {.type = SBX_MSG_DONE,
                .done = {.id = "e",
                         .clock_log = reads,
                         .n_clock_log = 4,
                         .has_replayable = true,
                         .replayable = false,
                         .not_replayable = "a thread was started (threading.Thread.start)"}};
    char *json;

    (void)state;
    fill(seed, sizeof(seed));
    json = round_trip(&x);
    assert_non_null(strstr(json, "\"seed\":\""));
    assert_null(strstr(json, "clock_log"));
    free(json);
    x.execute.clock_log = reads;
    x.execute.n_clock_log = 4;
    json = round_trip(&x);
    assert_non_null(strstr(json, "\"clock_log\":[0,1800000000000123,9007199254740991,42]"));
    free(json);
    x.execute.clock_log = none;
    x.execute.n_clock_log = 0;
    json = round_trip(&x);
    assert_non_null(strstr(json, "\"clock_log\":[]"));
    free(json);
    json = round_trip(&d);
    assert_non_null(strstr(json, "\"replayable\":false,\"not_replayable\":\"a thread"));
    free(json);
    d.done.replayable = true;
    d.done.not_replayable = NULL;
    d.done.clock_log = none;
    d.done.n_clock_log = 0;
    check_round_trip(&d);
    /* A read beyond 2^53-1 cannot be sent; nor can more than SBX_CLOCK_READS_MAX reads. */
    reads[1] = 9007199254740992ull;
    d.done.clock_log = reads;
    d.done.n_clock_log = 4;
    assert_int_equal(sbx_msg_encode(&d, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    d.done.n_clock_log = SBX_CLOCK_READS_MAX + 1;
    assert_int_equal(sbx_msg_encode(&d, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

/* replay_log: the next entries of the logs, either array absent or empty, a reason once; an
 * execute's event log and log_open. Bounds: a batch, an event log, integers of 2^53-1. */
static void test_replay_log(void **state)
{
    uint64_t reads[] = {1800000000000123, 9007199254740991ull};
    uint64_t events[] = {2, 3, 7};
    uint64_t none[1] = {0};
    SbxMsg l = {
        .type = SBX_MSG_REPLAY_LOG,
        .replay_log = {.id = "e", .clock = reads, .n_clock = 2, .events = events, .n_events = 3}};
    SbxMsg x = {.type = SBX_MSG_EXECUTE,
                .execute = {.id = "e",
                            .language = SBX_LANG_JAVASCRIPT,
                            .code = "",
                            .event_log = events,
                            .n_event_log = 3,
                            .log_open = true}};
    char *json;

    (void)state;
    json = round_trip(&l);
    assert_non_null(strstr(json, "\"clock\":[1800000000000123,9007199254740991],"
                                 "\"events\":[2,3,7]"));
    free(json);
    l.replay_log.clock = NULL;
    l.replay_log.events = none;
    l.replay_log.n_events = 0;
    l.replay_log.not_replayable = "too many clock reads (more than 100000)";
    json = round_trip(&l);
    assert_null(strstr(json, "\"clock\""));
    assert_non_null(strstr(json, "\"events\":[],\"not_replayable\":\"too many"));
    free(json);
    json = round_trip(&x);
    assert_non_null(strstr(json, "\"event_log\":[2,3,7],\"log_open\":true"));
    free(json);
    x.execute.log_open = false;
    x.execute.event_log = NULL;
    json = round_trip(&x);
    assert_null(strstr(json, "event_log"));
    assert_null(strstr(json, "log_open"));
    free(json);
    l.replay_log.n_events = SBX_REPLAY_LOG_BATCH_MAX + 1;
    assert_int_equal(sbx_msg_encode(&l, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    x.execute.event_log = events;
    x.execute.n_event_log = SBX_EVENT_LOG_MAX + 1;
    assert_int_equal(sbx_msg_encode(&x, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
    events[0] = 9007199254740992ull;
    x.execute.n_event_log = 3;
    assert_int_equal(sbx_msg_encode(&x, &(uint8_t *){NULL}, &(size_t){0}), -EINVAL);
}

static void test_ping_pong_error(void **state)
{
    SbxMsg ping = {.type = SBX_MSG_PING, .ping = {.seq = 0}};
    SbxMsg pong = {.type = SBX_MSG_PONG, .ping = {.seq = UINT32_MAX}};
    SbxMsg error = {.type = SBX_MSG_ERROR,
                    .error = {.code = SBX_ERR_PROTOCOL, .message = "bad frame"}};

    (void)state;
    check_round_trip(&ping);
    check_round_trip(&pong);
    for (int c = 0; c < SBX_ERR__COUNT; c++) {
        error.error.code = (SbxErrorCode)c;
        check_round_trip(&error);
    }
}

/* The encoder cuts error text as the decoder does, on a character boundary. */
static void test_encode_truncates_error_text(void **state)
{
    size_t n = SBX_ERROR_TEXT_MAX + 10;
    char *text = malloc(n + 1);
    uint8_t *frame = NULL;
    size_t len = 0;
    SbxMsg m = {.type = SBX_MSG_ERROR, .error = {.code = SBX_ERR_INTERNAL, .message = text}};
    SbxMsg back;

    (void)state;
    memset(text, 'a', n);
    /* A 3-byte character straddling the limit. */
    memcpy(text + SBX_ERROR_TEXT_MAX - 1, "\xe2\x9c\x93", 3);
    text[n] = '\0';
    assert_int_equal(sbx_msg_encode(&m, &frame, &len), 0);
    assert_int_equal(sbx_msg_decode((char *)frame + 4, len - 4, &back, NULL), 0);
    assert_int_equal(strlen(back.error.message), SBX_ERROR_TEXT_MAX - 1);
    sbx_msg_clear(&back);
    free(frame);
    free(text);
}

static void expect_encode(const SbxMsg *m, int want)
{
    uint8_t *frame = NULL;
    size_t len = 0;

    assert_int_equal(sbx_msg_encode(m, &frame, &len), want);
    assert_null(frame);
}

static void test_encode_refuses(void **state)
{
    uint8_t entropy[SBX_ENTROPY_MAX + 1] = {0};
    SbxToolDecl bad_tool = {.provider = "a-b", .name = "x"};
    SbxMsg m;

    (void)state;
    m = (SbxMsg){.type = SBX_MSG_STARTED, .started = {.id = "no spaces"}};
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){.type = SBX_MSG_STARTED, .started = {.id = NULL}};
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){.type = SBX_MSG__COUNT};
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){
        .type = SBX_MSG_TOOL_CALL,
        .tool_call = {
            .id = "x", .call_id = 1, .provider = "p", .tool = "t", .input_json = "{\"a\":"}};
    expect_encode(&m, -EINVAL);
    m.tool_call.input_json = "{\"a\":1,\"a\":2}";
    expect_encode(&m, -EINVAL);
    m.tool_call.input_json = "1 2";
    expect_encode(&m, -EINVAL);
    m.tool_call.input_json = "\"\\u0000\"";
    expect_encode(&m, -EINVAL);
    m.tool_call.input_json = "1";
    m.tool_call.call_id = 0;
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){.type = SBX_MSG_EXECUTE, .execute = {.id = "x", .code = "", .args_json = "{}"}};
    expect_encode(&m, -EINVAL);
    m.execute.args_json = NULL;
    m.execute.language = SBX_LANG__COUNT;
    expect_encode(&m, -EINVAL);
    m.execute.language = SBX_LANG_PYTHON;
    m.execute.tools = &bad_tool;
    m.execute.n_tools = 1;
    expect_encode(&m, -EINVAL);
    m.execute.n_tools = SBX_TOOLS_MAX + 1;
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){.type = SBX_MSG_HELLO,
                 .hello = {.token = "t", .entropy = entropy, .entropy_len = SBX_ENTROPY_MAX + 1}};
    expect_encode(&m, -EINVAL);
    m.hello.entropy_len = SBX_ENTROPY_MIN;
    m.hello.time_us = -1;
    expect_encode(&m, -EINVAL);
    m.hello.time_us = 9007199254740992;
    expect_encode(&m, -EINVAL);
    m.hello.time_us = 0;
    m.hello.token = "";
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){.type = SBX_MSG_OUTPUT, .output = {.id = "x", .data = entropy, .len = 0}};
    expect_encode(&m, -EINVAL);
    m = (SbxMsg){.type = SBX_MSG_ERROR, .error = {.message = "not UTF-8: \xff"}};
    expect_encode(&m, -EINVAL);
}

/* A message larger than a frame is refused with -EMSGSIZE. */
static void test_encode_too_big(void **state)
{
    char *code = malloc(SBX_FRAME_MAX + 1);
    SbxMsg m = {.type = SBX_MSG_EXECUTE, .execute = {.id = "x", .code = code}};

    (void)state;
    memset(code, 'x', SBX_FRAME_MAX);
    code[SBX_FRAME_MAX] = '\0';
    expect_encode(&m, -EMSGSIZE);
    free(code);
}

static void test_names(void **state)
{
    SbxMsgType t;
    SbxLanguage l;
    SbxStream s;
    SbxStatus st;
    SbxErrorCode c;

    (void)state;
    for (int i = 0; i < SBX_MSG__COUNT; i++) {
        assert_int_equal(sbx_msg_type_from_name(sbx_msg_type_name((SbxMsgType)i), &t), 0);
        assert_int_equal(t, i);
    }
    for (int i = 0; i < SBX_LANG__COUNT; i++) {
        assert_int_equal(sbx_language_from_name(sbx_language_name((SbxLanguage)i), &l), 0);
        assert_int_equal(l, i);
    }
    for (int i = 0; i < SBX_STREAM__COUNT; i++) {
        assert_int_equal(sbx_stream_from_name(sbx_stream_name((SbxStream)i), &s), 0);
        assert_int_equal(s, i);
    }
    for (int i = 0; i < SBX_STATUS__COUNT; i++) {
        assert_int_equal(sbx_status_from_name(sbx_status_name((SbxStatus)i), &st), 0);
        assert_int_equal(st, i);
    }
    for (int i = 0; i < SBX_ERR__COUNT; i++) {
        assert_int_equal(sbx_error_code_from_name(sbx_error_code_name((SbxErrorCode)i), &c), 0);
        assert_int_equal(c, i);
    }
    for (int i = 0; i < SBX_FILE_OP__COUNT; i++) {
        SbxFileOp op;

        assert_int_equal(sbx_file_op_from_name(sbx_file_op_name((SbxFileOp)i), &op), 0);
        assert_int_equal(op, i);
    }
    for (int i = 0; i < SBX_FILE_TYPE__COUNT; i++) {
        SbxFileType ft;

        assert_int_equal(sbx_file_type_from_name(sbx_file_type_name((SbxFileType)i), &ft), 0);
        assert_int_equal(ft, i);
    }
    assert_string_equal(sbx_error_code_name(SBX_ERR_VALIDATION), "validation_error");
    assert_string_equal(sbx_status_name(SBX_STATUS_MEMORY_LIMIT), "memory_limit");
    assert_null(sbx_msg_type_name(SBX_MSG__COUNT));
    assert_null(sbx_status_name((SbxStatus)-1));
    assert_string_equal(sbx_language_name(SBX_LANG_TYPESCRIPT), "typescript");
    assert_int_equal(sbx_language_from_name("ruby", &l), -EINVAL);
    assert_int_equal(sbx_language_from_name("ts", &l), -EINVAL);
    assert_int_equal(sbx_language_from_name(NULL, &l), -EINVAL);
}

static void test_id_and_identifier_syntax(void **state)
{
    char long_id[SBX_ID_MAX + 2], long_name[SBX_NAME_MAX + 2];

    (void)state;
    assert_true(sbx_id_valid("a"));
    assert_true(sbx_id_valid("A-z_0.9"));
    assert_false(sbx_id_valid(""));
    assert_false(sbx_id_valid(NULL));
    assert_false(sbx_id_valid("a b"));
    assert_false(sbx_id_valid("a/b"));
    assert_false(sbx_id_valid("\xc3\xa9"));
    memset(long_id, 'a', sizeof(long_id));
    long_id[SBX_ID_MAX] = '\0';
    assert_true(sbx_id_valid(long_id));
    long_id[SBX_ID_MAX] = 'a';
    long_id[SBX_ID_MAX + 1] = '\0';
    assert_false(sbx_id_valid(long_id));

    assert_true(sbx_identifier_valid("search_issues"));
    assert_true(sbx_identifier_valid("$x9"));
    assert_true(sbx_identifier_valid("_"));
    assert_false(sbx_identifier_valid("9x"));
    assert_false(sbx_identifier_valid("a-b"));
    assert_false(sbx_identifier_valid(""));
    assert_false(sbx_identifier_valid(NULL));
    memset(long_name, 'a', sizeof(long_name));
    long_name[SBX_NAME_MAX] = '\0';
    assert_true(sbx_identifier_valid(long_name));
    long_name[SBX_NAME_MAX] = 'a';
    long_name[SBX_NAME_MAX + 1] = '\0';
    assert_false(sbx_identifier_valid(long_name));
}

/* clear() accepts a zeroed message and zeroes what it frees. */
static void test_clear(void **state)
{
    SbxMsg m = {0};

    (void)state;
    sbx_msg_clear(&m);
    const char *json = "{\"type\":\"started\",\"id\":\"x\"}";

    assert_int_equal(sbx_msg_decode(json, strlen(json), &m, NULL), 0);
    sbx_msg_clear(&m);
    assert_null(m.started.id);
    assert_int_equal(m.type, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_hello_ok),
        cmocka_unit_test(test_execute_full),
        cmocka_unit_test(test_execute_minimal),
        cmocka_unit_test(test_execute_kwargs_keep),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_result),
        cmocka_unit_test(test_attach_data),
        cmocka_unit_test(test_workspace_path),
        cmocka_unit_test(test_started_cancel),
        cmocka_unit_test(test_output),
        cmocka_unit_test(test_tool_call),
        cmocka_unit_test(test_tool_result),
        cmocka_unit_test(test_done),
        cmocka_unit_test(test_replay_members),
        cmocka_unit_test(test_replay_log),
        cmocka_unit_test(test_ping_pong_error),
        cmocka_unit_test(test_encode_truncates_error_text),
        cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_encode_too_big),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_id_and_identifier_syntax),
        cmocka_unit_test(test_clear),
    };

    return cmocka_run_group_tests_name("message", tests, NULL, NULL);
}
