/*
 * The session as the warm pool uses it (docs/pool.md): hello ahead of the execution
 * (sbx_session_handshake_async, with warm_up), pings while pooled (sbx_session_ping_async),
 * then a run that sends the execute at once, with the host's clock and fresh entropy again.
 * Against the fake guest (a thread on a socketpair).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "fake-guest.h"
#include "session.h"

typedef struct {
    SbxSession *session;
    FakeGuest *guest;
    int ready_count;
    char *ready_error; /* the handshake's or ping's error, or NULL */
    int done_count;
    SbxStatus status;
} Pool;

static void on_ready(SbxSession *s, const GError *error, gpointer data)
{
    Pool *p = data;
    (void)s;

    p->ready_count++;
    g_free(p->ready_error);
    p->ready_error = error != NULL ? g_strdup(error->message) : NULL;
}

static void on_done(SbxSession *s, const SbxRunResult *r, gpointer data)
{
    Pool *p = data;
    (void)s;

    p->done_count++;
    p->status = r->status;
}

static const SbxSessionCallbacks pooled = {0}; /* no run yet: no on_done */
static const SbxSessionCallbacks running = {.on_done = on_done};

static Pool *pool_new(FakeGuestScript script)
{
    Pool *p = g_new0(Pool, 1);
    g_autoptr(GError) error = NULL;
    int fd = -1;

    p->guest = fake_guest_start(script, NULL, &fd);
    p->session = sbx_session_new(fd, &pooled, p, &error);
    assert_non_null(p->session);
    return p;
}

/* Spin the loop until @count reaches @n; FALSE after @timeout_ms. */
static gboolean wait_for(const int *count, int n, guint timeout_ms)
{
    gint64 end = g_get_monotonic_time() + timeout_ms * 1000ll;

    while (*count < n && g_get_monotonic_time() < end) {
        g_main_context_iteration(NULL, FALSE);
        g_usleep(1000);
    }
    return *count >= n;
}

static void pool_free(Pool *p, gboolean allow_guest_failure)
{
    sbx_session_free(p->session);
    fake_guest_join(p->guest);
    if (!allow_guest_failure && p->guest->failure != NULL) {
        fail_msg("fake guest: %s", p->guest->failure);
    }
    fake_guest_join_free(p->guest);
    g_free(p->ready_error);
    g_free(p);
}

static int answer_hello(FakeGuest *g, const char *token, char **langs)
{
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};

    if (fake_guest_recv(g, &g->hello) < 0 || g->hello.type != SBX_MSG_HELLO) {
        fake_guest_fail(g, "expected hello");
        return -1;
    }
    ok.hello_ok.version = SBX_PROTOCOL_VERSION;
    ok.hello_ok.token = (char *)(token != NULL ? token : g->hello.hello.token);
    ok.hello_ok.agent = "fake-guest 0";
    ok.hello_ok.languages = langs;
    return fake_guest_send(g, &ok);
}

static char *both[] = {"javascript", "python", NULL};

/* hello (warm_up) -> ping -> pong -> execute (no second hello) with clock and entropy. */
static void script_pooled(FakeGuest *g)
{
    SbxMsg ping = {0};

    if (answer_hello(g, NULL, both) < 0) {
        return;
    }
    if (!g->hello.hello.warm_up) {
        fake_guest_fail(g, "the pool's hello does not ask for the warm-up");
    }
    if (fake_guest_recv(g, &ping) < 0 || ping.type != SBX_MSG_PING) {
        fake_guest_fail(g, "expected a ping");
        return;
    }
    ping.type = SBX_MSG_PONG;
    fake_guest_send(g, &ping);
    if (fake_guest_recv(g, &g->execute) < 0 || g->execute.type != SBX_MSG_EXECUTE) {
        fake_guest_fail(g, "expected execute (and no second hello)");
        return;
    }
    const SbxExecute *x = &g->execute.execute;
    gint64 skew = g_get_real_time() - x->time_us;
    if (x->time_us == 0 || skew < 0 || skew > 5 * G_USEC_PER_SEC) {
        fake_guest_fail(g, "the execute's clock is missing or off by %" G_GINT64_FORMAT " us",
                        skew);
    }
    if (x->entropy == NULL || x->entropy_len != SBX_SESSION_ENTROPY_BYTES ||
        (g->hello.hello.entropy_len == x->entropy_len &&
         memcmp(g->hello.hello.entropy, x->entropy, x->entropy_len) == 0)) {
        fake_guest_fail(g, "the execute carries no fresh entropy");
    }
    fake_guest_started(g);
    fake_guest_done(g, SBX_STATUS_OK, "1", 0);
}

static void test_handshake_ping_run(void **state)
{
    (void)state;
    Pool *p = pool_new(script_pooled);
    g_autoptr(GError) error = NULL;
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "1", .timeout_ms = 10000};

    assert_false(sbx_session_is_ready(p->session));
    assert_true(sbx_session_handshake_async(p->session, TRUE, on_ready, p, &error));
    assert_true(wait_for(&p->ready_count, 1, 10000));
    assert_null(p->ready_error);
    assert_true(sbx_session_is_ready(p->session));
    assert_true(sbx_session_hello_time(p->session) > 0);
    /* A second handshake is refused. */
    assert_false(sbx_session_handshake_async(p->session, TRUE, on_ready, p, &error));
    g_clear_error(&error);

    assert_true(sbx_session_ping_async(p->session, on_ready, p));
    assert_false(sbx_session_ping_async(p->session, on_ready, p)); /* one at a time */
    assert_true(wait_for(&p->ready_count, 2, 10000));
    assert_null(p->ready_error);

    sbx_session_set_callbacks(p->session, &running, p);
    assert_true(sbx_session_run(p->session, &req, &error));
    assert_true(wait_for(&p->done_count, 1, 10000));
    assert_int_equal(p->status, SBX_STATUS_OK);
    pool_free(p, FALSE);
}

/* hello_ok, then the ping is never answered. */
static void script_silent(FakeGuest *g)
{
    SbxMsg m = {0};

    if (answer_hello(g, NULL, both) < 0) {
        return;
    }
    while (fake_guest_recv(g, &m) == 0) {
        sbx_msg_clear(&m); /* read the ping, say nothing, until the host closes */
    }
}

static void test_ping_timeout(void **state)
{
    (void)state;
    Pool *p = pool_new(script_silent);
    g_autoptr(GError) error = NULL;

    assert_true(sbx_session_handshake_async(p->session, FALSE, on_ready, p, &error));
    assert_true(wait_for(&p->ready_count, 1, 10000));
    assert_null(p->ready_error);
    assert_false(p->guest->hello.hello.warm_up);
    gint64 t0 = g_get_monotonic_time();
    assert_true(sbx_session_ping_async(p->session, on_ready, p));
    assert_true(wait_for(&p->ready_count, 2, SBX_SESSION_PING_TIMEOUT_MS + 5000));
    assert_non_null(p->ready_error);
    assert_non_null(strstr(p->ready_error, "no pong"));
    assert_true(g_get_monotonic_time() - t0 >= SBX_SESSION_PING_TIMEOUT_MS * 1000ll);
    pool_free(p, FALSE);
}

/* A pong nobody asked for breaks the pooled session (on_broken is the pool's "lost"). */
static void script_stray_pong(FakeGuest *g)
{
    SbxMsg pong = {.type = SBX_MSG_PONG, .ping = {.seq = 99}};
    SbxMsg m = {0};

    if (answer_hello(g, NULL, both) < 0) {
        return;
    }
    fake_guest_send(g, &pong);
    while (fake_guest_recv(g, &m) == 0) {
        sbx_msg_clear(&m);
    }
}

static int broken_count;

static void on_broken(SbxSession *s, const char *reason, gpointer data)
{
    (void)s;
    (void)data;
    assert_non_null(strstr(reason, "unexpected pong"));
    broken_count++;
}

static void test_stray_pong(void **state)
{
    (void)state;
    static const SbxSessionCallbacks watch = {.on_broken = on_broken};
    Pool *p = pool_new(script_stray_pong);
    g_autoptr(GError) error = NULL;

    sbx_session_set_callbacks(p->session, &watch, p);
    broken_count = 0;
    assert_true(sbx_session_handshake_async(p->session, TRUE, on_ready, p, &error));
    assert_true(wait_for(&broken_count, 1, 10000));
    assert_false(sbx_session_is_ready(p->session));
    assert_false(sbx_session_ping_async(p->session, on_ready, p));
    pool_free(p, TRUE);
}

/* hello_ok with another token: the handshake fails, the session is closed. */
static void script_bad_token(FakeGuest *g)
{
    SbxMsg m = {0};

    if (answer_hello(g, "not-the-token", both) < 0) {
        return;
    }
    while (fake_guest_recv(g, &m) == 0) {
        sbx_msg_clear(&m);
    }
}

static void test_handshake_bad_token(void **state)
{
    (void)state;
    Pool *p = pool_new(script_bad_token);
    g_autoptr(GError) error = NULL;
    SbxRunRequest req = {.language = SBX_LANG_PYTHON, .code = "1"};

    assert_true(sbx_session_handshake_async(p->session, TRUE, on_ready, p, &error));
    assert_true(wait_for(&p->ready_count, 1, 10000));
    assert_non_null(p->ready_error);
    assert_non_null(strstr(p->ready_error, "token"));
    assert_false(sbx_session_is_ready(p->session));
    sbx_session_set_callbacks(p->session, &running, p);
    assert_false(sbx_session_run(p->session, &req, &error));
    pool_free(p, TRUE);
}

/* The guest hangs up before hello_ok. */
static void script_hang_up(FakeGuest *g)
{
    SbxMsg m = {0};

    if (fake_guest_recv(g, &m) == 0) {
        sbx_msg_clear(&m);
    }
    shutdown(g->fd, SHUT_RDWR);
}

static void test_handshake_hang_up(void **state)
{
    (void)state;
    Pool *p = pool_new(script_hang_up);
    g_autoptr(GError) error = NULL;

    assert_true(sbx_session_handshake_async(p->session, TRUE, on_ready, p, &error));
    assert_true(wait_for(&p->ready_count, 1, 10000));
    assert_non_null(p->ready_error);
    assert_false(sbx_session_is_ready(p->session));
    pool_free(p, TRUE);
}

/* hello_ok offers Python only: a JavaScript run is refused at once, nothing is sent. */
static void script_python_only(FakeGuest *g)
{
    static char *python[] = {"python", NULL};
    SbxMsg m = {0};

    if (answer_hello(g, NULL, python) < 0) {
        return;
    }
    if (fake_guest_recv(g, &m) == 0) {
        fake_guest_fail(g, "got %s for a language not offered", sbx_msg_type_name(m.type));
        sbx_msg_clear(&m);
    }
}

static void test_language_not_offered(void **state)
{
    (void)state;
    Pool *p = pool_new(script_python_only);
    g_autoptr(GError) error = NULL;
    SbxRunRequest req = {.language = SBX_LANG_JAVASCRIPT, .code = "1"};

    assert_true(sbx_session_handshake_async(p->session, TRUE, on_ready, p, &error));
    assert_true(wait_for(&p->ready_count, 1, 10000));
    assert_null(p->ready_error);
    sbx_session_set_callbacks(p->session, &running, p);
    assert_false(sbx_session_run(p->session, &req, &error));
    assert_true(g_error_matches(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED));
    assert_int_equal(p->done_count, 0);
    pool_free(p, FALSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handshake_ping_run), cmocka_unit_test(test_ping_timeout),
        cmocka_unit_test(test_stray_pong),         cmocka_unit_test(test_handshake_bad_token),
        cmocka_unit_test(test_handshake_hang_up),  cmocka_unit_test(test_language_not_offered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
