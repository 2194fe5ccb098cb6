/*
 * Unit tests of the guest agent's pure parts: tool call bookkeeping (calls.c), the done report
 * (done.c) and the framed endpoint (link.c, over a socketpair).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent.h"
#include "calls.h"
#include "link.h"

/* ---- calls.c ---------------------------------------------------------------------------- */

static void test_calls_ids_increase(void **state)
{
    Calls c = {0};

    (void)state;
    assert_int_equal(calls_begin(&c, 0), -EINVAL);
    assert_int_equal(calls_begin(&c, 1), 0);
    assert_int_equal(calls_begin(&c, 5), 0);
    assert_int_equal(calls_begin(&c, 5), -EINVAL); /* reused */
    assert_int_equal(calls_begin(&c, 3), -EINVAL); /* going back */
    assert_true(calls_end(&c, 1));
    assert_false(calls_end(&c, 1)); /* answered once */
    assert_false(calls_end(&c, 2)); /* never asked */
    assert_true(calls_end(&c, 5));
    assert_int_equal(c.n_pending, 0);
}

static void test_calls_in_flight_cap(void **state)
{
    Calls c = {0};
    uint32_t id = 1;

    (void)state;
    for (; id <= SBX_TOOL_CALLS_IN_FLIGHT_MAX; id++)
        assert_int_equal(calls_begin(&c, id), 0);
    assert_int_equal(calls_begin(&c, id), -EBUSY);
    /* The refused id is used up all the same; once one call is answered there is room. */
    assert_int_equal(calls_begin(&c, id), -EINVAL);
    assert_true(calls_end(&c, 7));
    assert_int_equal(calls_begin(&c, id + 1), 0);
    assert_false(calls_end(&c, id));
}

/* ---- done.c ----------------------------------------------------------------------------- */

static Exec *exec_with(int wstatus)
{
    Exec *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    e->id = (char *)"x1";
    e->wstatus = wstatus;
    e->start_ms = 1000;
    return e;
}

static void test_done_exit_status(void **state)
{
    Exec *e = exec_with(0);
    DoneText text;
    SbxMsg m;

    (void)state;
    done_build(e, 1250, &m, &text);
    assert_int_equal(m.type, SBX_MSG_DONE);
    assert_string_equal(m.done.id, "x1");
    assert_int_equal(m.done.status, SBX_STATUS_OK);
    assert_false(m.done.has_error);
    assert_int_equal(m.done.exit_code, 0);
    assert_int_equal(m.done.duration_ms, 250);

    e->wstatus = 3 << 8; /* exited with 3 */
    e->truncated = true;
    done_build(e, 1000, &m, &text);
    assert_int_equal(m.done.status, SBX_STATUS_ERROR);
    assert_int_equal(m.done.exit_code, 3);
    assert_int_equal(m.done.error.code, SBX_ERR_RUNTIME);
    assert_string_equal(m.done.error.message, "process exited with status 3");
    assert_true(m.done.output_truncated);

    e->wstatus = SIGSEGV; /* killed by a signal */
    done_build(e, 1000, &m, &text);
    assert_int_equal(m.done.status, SBX_STATUS_CRASH);
    assert_int_equal(m.done.exit_code, -1);
    assert_string_equal(m.done.error.type, "SIGSEGV");
    assert_string_equal(m.done.error.message, "process killed by SIGSEGV");
    assert_false(m.done.kept);
    free(e);
}

/* A session's runner kept after the runner's own done (early): its exit code, kept. */
static void test_done_kept(void **state)
{
    Exec *e = exec_with(0);
    DoneText text;
    SbxMsg m;

    (void)state;
    e->have_done = true;
    e->early = true;
    e->done.status = SBX_STATUS_ERROR;
    e->done.exit_code = 1;
    e->keep = e->kept = true;
    done_build(e, 1000, &m, &text);
    assert_int_equal(m.done.status, SBX_STATUS_ERROR);
    assert_int_equal(m.done.exit_code, 1);
    assert_true(m.done.kept);
    free(e);
}

static void test_done_precedence(void **state)
{
    Exec *e = exec_with(SIGKILL);
    DoneText text;
    SbxMsg m;

    (void)state;
    /* The runner's report wins over how the process ended... */
    e->have_done = true;
    e->done.status = SBX_STATUS_OK;
    e->done.result_json = (char *)"[1]";
    done_build(e, 1000, &m, &text);
    assert_int_equal(m.done.status, SBX_STATUS_OK);
    assert_string_equal(m.done.result_json, "[1]");
    assert_int_equal(m.done.exit_code, -1);
    /* ...what the agent saw go wrong wins over the runner... */
    e->failed = true;
    e->failure.code = SBX_ERR_PROTOCOL;
    e->failure.message = (char *)"runner: second done";
    done_build(e, 1000, &m, &text);
    assert_int_equal(m.done.status, SBX_STATUS_ERROR);
    assert_int_equal(m.done.error.code, SBX_ERR_PROTOCOL);
    assert_null(m.done.result_json);
    /* ...and a cancel wins over everything. */
    e->cancelled = true;
    done_build(e, 1000, &m, &text);
    assert_int_equal(m.done.status, SBX_STATUS_CANCELLED);
    assert_false(m.done.has_error);
    free(e);
}

/* ---- link.c ----------------------------------------------------------------------------- */

typedef struct {
    Link link;
    int peer; /* the other end, blocking */
} LinkPair;

static int pair_setup(void **state)
{
    LinkPair *p = calloc(1, sizeof(*p));
    int sv[2];

    assert_non_null(p);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
    link_init(&p->link, sv[0], 1024);
    p->peer = sv[1];
    *state = p;
    return 0;
}

static int pair_teardown(void **state)
{
    LinkPair *p = *state;

    link_close(&p->link);
    link_close(&p->link); /* idempotent */
    close(p->peer);
    free(p);
    return 0;
}

static void put_frame(int fd, const char *json)
{
    uint32_t n = (uint32_t)strlen(json);
    uint8_t head[4] = {n >> 24, n >> 16, n >> 8, n};

    assert_int_equal(write(fd, head, 4), 4);
    assert_int_equal(write(fd, json, n), (ssize_t)n);
}

static void test_link_send(void **state)
{
    LinkPair *p = *state;
    SbxMsg m = {.type = SBX_MSG_PONG};
    uint8_t buf[256];
    ssize_t n;

    m.ping.seq = 9;
    assert_int_equal(link_send(&p->link, &m), 0);
    assert_true(link_queued(&p->link) > 4);
    assert_int_equal(link_flush(&p->link), 0);
    assert_int_equal(link_queued(&p->link), 0);
    n = read(p->peer, buf, sizeof(buf) - 1);
    assert_true(n > 4);
    buf[n] = '\0';
    assert_int_equal((buf[0] << 24 | buf[1] << 16 | buf[2] << 8 | buf[3]), n - 4);
    assert_non_null(strstr((char *)buf + 4, "\"pong\""));
}

static void test_link_recv(void **state)
{
    LinkPair *p = *state;
    char *why = NULL;
    SbxMsg m;

    assert_int_equal(link_recv(&p->link, &m, &why), 0); /* nothing yet */
    put_frame(p->peer, "{\"type\":\"ping\",\"seq\":1}");
    put_frame(p->peer, "{\"type\":\"ping\",\"seq\":2}");
    assert_int_equal(link_recv(&p->link, &m, &why), 1);
    assert_int_equal(m.ping.seq, 1);
    assert_int_equal(link_recv(&p->link, &m, &why), 1); /* from the same read */
    assert_int_equal(m.ping.seq, 2);
    put_frame(p->peer, "{\"type\":\"ping\"}");
    assert_int_equal(link_recv(&p->link, &m, &why), -EBADMSG);
    assert_non_null(why);
    assert_non_null(strstr(why, "seq"));
    free(why);
}

static void test_link_limits(void **state)
{
    LinkPair *p = *state;
    uint8_t huge[4] = {0, 0, 8, 0}; /* 2048 bytes announced, the link takes 1024 */
    char *why = NULL;
    SbxMsg m;

    assert_int_equal(write(p->peer, huge, 4), 4);
    assert_int_equal(link_recv(&p->link, &m, &why), -EBADMSG);
    assert_non_null(why);
    free(why);
}

static void test_link_eof(void **state)
{
    LinkPair *p = *state;
    char *why = NULL;
    SbxMsg m;

    assert_int_equal(write(p->peer, "\0\0", 2), 2); /* half a header, then the end */
    shutdown(p->peer, SHUT_WR);
    assert_int_equal(link_recv(&p->link, &m, &why), -EPIPE);
    assert_null(why);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calls_ids_increase),
        cmocka_unit_test(test_calls_in_flight_cap),
        cmocka_unit_test(test_done_exit_status),
        cmocka_unit_test(test_done_precedence),
        cmocka_unit_test(test_done_kept),
        cmocka_unit_test_setup_teardown(test_link_send, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_link_recv, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_link_limits, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_link_eof, pair_setup, pair_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
