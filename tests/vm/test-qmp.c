/*
 * The QMP client against a scripted fake server (fake-qmp.c): handshake, replies, error
 * replies, interleaved events, a server that never answers, garbage, oversize messages, EOF.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fake-qmp.h"
#include "qmp.h"
#include "test-util.h"
#include "vm-error.h"

#define CAPS_OK "{\"return\": {}, \"id\": %ID%}\r\n"

typedef struct {
    int server_fd;
    SbxQmp *qmp;
    FakeQmp *fake;
    gboolean done;
    gboolean ok;
    char *result;
    GError *error;
    guint broken;
    GError *broken_error;
    GPtrArray *events;
    guint events_at_reply; /* events seen when the command's reply arrived */
} Fx;

static void on_event(SbxQmp *qmp, const char *event, const char *data, gpointer user)
{
    Fx *fx = user;

    (void)qmp;
    g_ptr_array_add(fx->events, g_strdup_printf("%s %s", event, data));
}

static void on_broken(SbxQmp *qmp, const GError *error, gpointer user)
{
    Fx *fx = user;

    (void)qmp;
    fx->broken++;
    g_clear_error(&fx->broken_error);
    fx->broken_error = g_error_copy(error);
}

static int setup(void **state)
{
    Fx *fx = g_new0(Fx, 1);
    int sv[2];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fx->qmp = sbx_qmp_new(sv[0]);
    fx->server_fd = sv[1];
    fx->events = g_ptr_array_new_with_free_func(g_free);
    sbx_qmp_set_handlers(fx->qmp, on_event, on_broken, fx);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    Fx *fx = *state;

    sbx_qmp_free(fx->qmp);
    if (fx->fake)
        fake_qmp_free(fx->fake);
    else if (fx->server_fd >= 0)
        close(fx->server_fd);
    g_free(fx->result);
    g_clear_error(&fx->error);
    g_clear_error(&fx->broken_error);
    g_ptr_array_unref(fx->events);
    g_free(fx);
    return 0;
}

static void serve(Fx *fx, const char *greeting, const FakeQmpStep *steps, gsize n)
{
    fx->fake = fake_qmp_new(fx->server_fd, greeting, steps, n);
}

static void reset(Fx *fx)
{
    fx->done = fx->ok = FALSE;
    g_clear_pointer(&fx->result, g_free);
    g_clear_error(&fx->error);
}

static void on_handshake(GObject *src, GAsyncResult *res, gpointer user)
{
    Fx *fx = user;

    (void)src;
    fx->ok = sbx_qmp_handshake_finish(fx->qmp, res, &fx->error);
    fx->done = TRUE;
}

static void on_exec(GObject *src, GAsyncResult *res, gpointer user)
{
    Fx *fx = user;

    (void)src;
    fx->result = sbx_qmp_execute_finish(fx->qmp, res, &fx->error);
    fx->ok = fx->result != NULL;
    fx->events_at_reply = fx->events->len;
    fx->done = TRUE;
}

static void handshake(Fx *fx, guint timeout_ms)
{
    reset(fx);
    sbx_qmp_handshake_async(fx->qmp, timeout_ms, NULL, on_handshake, fx);
    assert_true(run_until(&fx->done, 5000));
}

static void execute(Fx *fx, const char *cmd, const char *args, guint timeout_ms)
{
    reset(fx);
    sbx_qmp_execute_async(fx->qmp, cmd, args, timeout_ms, NULL, on_exec, fx);
    assert_true(run_until(&fx->done, 5000));
}

static void test_handshake_and_reply(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"query-status",
         "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": true}, "
         "\"id\": %ID%}\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    assert_true(fx->ok);
    assert_string_equal(sbx_qmp_version(fx->qmp), "7.2.22");
    execute(fx, "query-status", NULL, 0);
    assert_true(fx->ok);
    assert_string_equal(fx->result,
                        "{\"status\":\"running\",\"singlestep\":false,\"running\":true}");
    assert_null(fake_qmp_error(fx->fake));
    assert_int_equal(fx->broken, 0);
}

static void test_arguments_are_sent(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"migrate-set-parameters", "{\"return\": {}, \"id\": %ID%}\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "migrate-set-parameters", "{\"max-bandwidth\": 1099511627776}", 0);
    assert_true(fx->ok);
    assert_string_equal(fx->result, "{}");
    assert_null(fake_qmp_error(fx->fake));
    assert_string_equal(fake_qmp_last_line(fx->fake),
                        "{\"execute\":\"migrate-set-parameters\",\"arguments\":"
                        "{\"max-bandwidth\":1099511627776},\"id\":2}");
}

static void test_error_reply(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"device_add",
         "{\"error\": {\"class\": \"GenericError\", \"desc\": \"Bus 'x' not found\"}, "
         "\"id\": %ID%}\r\n"},
        {"query-status", "{\"return\": {\"status\": \"paused\"}, \"id\": %ID%}\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "device_add", "{\"driver\": \"virtio-rng-pci\", \"bus\": \"x\"}", 0);
    assert_false(fx->ok);
    assert_true(g_error_matches(fx->error, SBX_VM_ERROR, SBX_VM_ERROR_QMP));
    assert_non_null(strstr(fx->error->message, "'device_add' failed: GenericError: Bus 'x'"));
    /* An error reply is an answer: the connection stays usable. */
    execute(fx, "query-status", NULL, 0);
    assert_true(fx->ok);
    assert_int_equal(fx->broken, 0);
}

static void test_event_interleaved(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"stop", "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 5}, \"event\": \"STOP\"}\r\n"
                 "{\"return\": {}, \"id\": %ID%}\r\n"
                 "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 9}, \"event\": \"RESUME\", "
                 "\"data\": {\"x\": 1}}\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "stop", NULL, 0);
    assert_true(fx->ok);
    assert_int_equal(fx->events_at_reply, 1);
    run_for(50);
    assert_int_equal(fx->events->len, 2);
    assert_string_equal(g_ptr_array_index(fx->events, 0), "STOP {}");
    assert_string_equal(g_ptr_array_index(fx->events, 1), "RESUME {\"x\":1}");
}

static void test_timeout_breaks(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK}, {"cont", NULL}, /* never answered: QEMU is stuck */
    };
    Fx *fx = *state;
    gint64 t0;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    t0 = g_get_monotonic_time();
    execute(fx, "cont", NULL, 150);
    assert_true(g_get_monotonic_time() - t0 >= 140 * 1000);
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
    assert_non_null(strstr(fx->error->message, "'cont'"));
    assert_int_equal(fx->broken, 1);
    assert_true(g_error_matches(fx->broken_error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
    assert_true(sbx_qmp_is_broken(fx->qmp));
    /* Broken for good: the next command fails at once, the handler is not called again. */
    execute(fx, "query-status", NULL, 0);
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_CLOSED));
    assert_int_equal(fx->broken, 1);
}

static void test_default_timeout_applies(void **state)
{
    /* timeout_ms 0 means SBX_QMP_TIMEOUT_MS: check the command is still pending before it. */
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}, {"cont", NULL}};
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    reset(fx);
    sbx_qmp_execute_async(fx->qmp, "cont", NULL, 0, NULL, on_exec, fx);
    run_for(300);
    assert_false(fx->done);
    assert_true(run_until(&fx->done, SBX_QMP_TIMEOUT_MS + 2000));
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
}

static void test_garbage_breaks(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"query-status", "this is not JSON at all\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "query-status", NULL, 0);
    assert_true(g_error_matches(fx->error, SBX_VM_ERROR, SBX_VM_ERROR_QMP));
    assert_int_equal(fx->broken, 1);
}

static void test_trailing_garbage_breaks(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"query-status", "{\"return\": {}, \"id\": %ID%} tail\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "query-status", NULL, 0);
    assert_true(g_error_matches(fx->error, SBX_VM_ERROR, SBX_VM_ERROR_QMP));
}

static void test_unmatched_reply_breaks(void **state)
{
    static const FakeQmpStep steps[] = {
        {"qmp_capabilities", CAPS_OK},
        {"query-status", "{\"return\": {}, \"id\": 424242}\r\n"},
    };
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "query-status", NULL, 0);
    assert_true(g_error_matches(fx->error, SBX_VM_ERROR, SBX_VM_ERROR_QMP));
    assert_non_null(strstr(fx->error->message, "matches no command"));
}

static void test_second_greeting_breaks(void **state)
{
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}};
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    fake_qmp_send(fx->fake, fake_qmp_greeting, strlen(fake_qmp_greeting));
    run_for(50);
    assert_int_equal(fx->broken, 1);
}

static void test_reply_before_greeting_breaks(void **state)
{
    Fx *fx = *state;

    serve(fx, "{\"return\": {}, \"id\": 1}\r\n", NULL, 0);
    handshake(fx, 0);
    assert_false(fx->ok);
    assert_non_null(strstr(fx->error->message, "greeting"));
}

static void test_no_greeting_times_out(void **state)
{
    Fx *fx = *state;

    serve(fx, NULL, NULL, 0);
    handshake(fx, 100);
    assert_false(fx->ok);
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT));
    assert_non_null(strstr(fx->error->message, "no greeting"));
    assert_int_equal(fx->broken, 1);
}

static void test_greeting_before_handshake_call(void **state)
{
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}};
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    run_for(50); /* the greeting is read and kept before anyone asks */
    handshake(fx, 0);
    assert_true(fx->ok);
}

static void test_fragmented_input(void **state)
{
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}};
    Fx *fx = *state;
    gsize len = strlen(fake_qmp_greeting);

    serve(fx, NULL, steps, G_N_ELEMENTS(steps));
    reset(fx);
    sbx_qmp_handshake_async(fx->qmp, 0, NULL, on_handshake, fx);
    for (gsize i = 0; i < len; i += 7) {
        fake_qmp_send(fx->fake, fake_qmp_greeting + i, MIN(7, len - i));
        run_for(1);
    }
    assert_true(run_until(&fx->done, 2000));
    assert_true(fx->ok);
}

static void test_eof_fails_pending(void **state)
{
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}, {"query-status", NULL}};
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    reset(fx);
    sbx_qmp_execute_async(fx->qmp, "query-status", NULL, 0, NULL, on_exec, fx);
    run_for(20);
    fake_qmp_close(fx->fake);
    assert_true(run_until(&fx->done, 2000));
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_CLOSED));
    assert_int_equal(fx->broken, 1);
    assert_true(g_error_matches(fx->broken_error, G_IO_ERROR, G_IO_ERROR_CLOSED));
}

static void test_free_fails_pending(void **state)
{
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}, {"query-status", NULL}};
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    reset(fx);
    sbx_qmp_execute_async(fx->qmp, "query-status", NULL, 0, NULL, on_exec, fx);
    run_for(20);
    sbx_qmp_free(fx->qmp);
    fx->qmp = NULL;
    assert_true(run_until(&fx->done, 2000));
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_CLOSED));
    assert_int_equal(fx->broken, 0); /* freeing is not breaking: the owner knows */
}

static void test_bad_arguments(void **state)
{
    static const FakeQmpStep steps[] = {{"qmp_capabilities", CAPS_OK}};
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, steps, G_N_ELEMENTS(steps));
    handshake(fx, 0);
    execute(fx, "device_add", "[1, 2]", 0);
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT));
    assert_false(sbx_qmp_is_broken(fx->qmp));
}

static void test_command_before_handshake(void **state)
{
    Fx *fx = *state;

    serve(fx, fake_qmp_greeting, NULL, 0);
    execute(fx, "query-status", NULL, 0);
    assert_true(g_error_matches(fx->error, G_IO_ERROR, G_IO_ERROR_CLOSED));
}

/* A thread writes a greeting, then more than SBX_QMP_MESSAGE_MAX bytes without a newline. */
static gpointer write_oversize(gpointer data)
{
    int fd = GPOINTER_TO_INT(data);
    g_autofree char *junk = g_malloc(64 * 1024);
    gsize total = 0;

    memset(junk, 'a', 64 * 1024);
    if (write(fd, fake_qmp_greeting, strlen(fake_qmp_greeting)) < 0)
        return NULL;
    while (total <= SBX_QMP_MESSAGE_MAX + 64 * 1024) {
        ssize_t n = write(fd, junk, 64 * 1024);
        if (n <= 0)
            break; /* the client closed: it refused the message */
        total += (gsize)n;
    }
    return NULL;
}

static void test_oversize_message_breaks(void **state)
{
    Fx *fx = *state;
    GThread *writer = g_thread_new("oversize", write_oversize, GINT_TO_POINTER(fx->server_fd));

    handshake(fx, 5000);
    assert_false(fx->ok);
    assert_true(g_error_matches(fx->error, SBX_VM_ERROR, SBX_VM_ERROR_QMP));
    assert_non_null(strstr(fx->error->message, "larger than"));
    shutdown(fx->server_fd, SHUT_RDWR);
    g_thread_join(writer);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_handshake_and_reply),
        T(test_arguments_are_sent),
        T(test_error_reply),
        T(test_event_interleaved),
        T(test_timeout_breaks),
        T(test_default_timeout_applies),
        T(test_garbage_breaks),
        T(test_trailing_garbage_breaks),
        T(test_unmatched_reply_breaks),
        T(test_second_greeting_breaks),
        T(test_reply_before_greeting_breaks),
        T(test_no_greeting_times_out),
        T(test_greeting_before_handshake_call),
        T(test_fragmented_input),
        T(test_eof_fails_pending),
        T(test_free_fails_pending),
        T(test_bad_arguments),
        T(test_command_before_handshake),
        T(test_oversize_message_breaks),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
