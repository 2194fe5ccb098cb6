/*
 * The fake guest agent (see fake-guest.h).
 */
#include "fake-guest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void fake_guest_fail(FakeGuest *g, const char *fmt, ...)
{
    va_list ap;
    if (g->failure != NULL) {
        return;
    }
    va_start(ap, fmt);
    g->failure = g_strdup_vprintf(fmt, ap);
    va_end(ap);
}

int fake_guest_send_raw(FakeGuest *g, const void *data, size_t len)
{
    const guint8 *p = data;
    while (len > 0) {
        ssize_t n = send(g->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return -1; /* the host closed: normal once it gave up on us */
        }
        p += n;
        len -= n;
    }
    return 0;
}

int fake_guest_send(FakeGuest *g, const SbxMsg *msg)
{
    uint8_t *frame = NULL, header[SBX_FRAME_HEADER];
    size_t len = 0, n = sbx_msg_data_len(msg);
    int r = sbx_msg_encode(msg, &frame, &len);
    if (r < 0) {
        fake_guest_fail(g, "encode %s: %s", sbx_msg_type_name(msg->type), strerror(-r));
        return -1;
    }
    r = fake_guest_send_raw(g, frame, len);
    free(frame);
    /* the data it announces, in its data frame */
    if (r == 0 && n > 0) {
        const uint8_t *data = msg->type == SBX_MSG_FILE ? msg->file.data : msg->file_result.data;
        r = sbx_frame_data_header(n, header) < 0 ? -1 : fake_guest_send_raw(g, header, 4);
        r = r < 0 ? r : fake_guest_send_raw(g, data, n);
    }
    return r;
}

int fake_guest_send_json(FakeGuest *g, const char *json)
{
    uint8_t *frame = NULL;
    size_t len = 0;
    if (sbx_frame_encode(json, strlen(json), &frame, &len) < 0) {
        fake_guest_fail(g, "frame encode failed");
        return -1;
    }
    int r = fake_guest_send_raw(g, frame, len);
    free(frame);
    return r;
}

/* Next complete frame payload (malloc'd), reading as needed; NULL on EOF or error. */
static char *next_frame(FakeGuest *g, size_t *ret_len)
{
    for (;;) {
        while (g->buf_off < g->buf_len) {
            char *frame = NULL;
            ssize_t used = sbx_frame_reader_feed(&g->reader, g->buf + g->buf_off,
                                                 g->buf_len - g->buf_off, &frame, ret_len);
            if (used < 0) {
                fake_guest_fail(g, "host sent a bad frame: %s", strerror((int)-used));
                return NULL;
            }
            g->buf_off += used;
            if (frame != NULL) {
                return frame;
            }
        }
        ssize_t n = recv(g->fd, g->buf, sizeof(g->buf), 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return NULL;
        }
        g->buf_len = n;
        g->buf_off = 0;
    }
}

int fake_guest_recv(FakeGuest *g, SbxMsg *msg)
{
    size_t len = 0;
    char *why = NULL;
    char *frame = next_frame(g, &len);
    if (frame == NULL) {
        return -1;
    }
    int r = sbx_msg_decode(frame, len, msg, &why);
    if (r < 0) {
        fake_guest_fail(g, "host sent an undecodable message: %s", why);
    }
    free(why);
    free(frame);
    size_t n = r == 0 ? sbx_msg_data_len(msg) : 0;
    if (n == 0) {
        return r < 0 ? -1 : 0;
    }
    /* the data frame it announced, attached (the host may close before it: after a breach) */
    if (sbx_frame_reader_expect_data(&g->reader, (uint32_t)n) < 0) {
        fake_guest_fail(g, "%s announces %zu bytes", sbx_msg_type_name(msg->type), n);
    } else if ((frame = next_frame(g, &len)) != NULL) {
        if (sbx_msg_attach_data(msg, (uint8_t *)frame, len) == 0) {
            return 0;
        }
        fake_guest_fail(g, "a data frame of %zu bytes after %zu announced", len, n);
    }
    sbx_msg_clear(msg);
    return -1;
}

SbxMsg *fake_guest_recv_keep(FakeGuest *g)
{
    SbxMsg *m = g_new0(SbxMsg, 1);
    if (fake_guest_recv(g, m) < 0) {
        g_free(m);
        return NULL;
    }
    g_ptr_array_add(g->received, m);
    return m;
}

/* Receive hello, answer hello_ok (echoing the token unless @token is given). */
static int answer_hello(FakeGuest *g, const char *token)
{
    if (fake_guest_recv(g, &g->hello) < 0 || g->hello.type != SBX_MSG_HELLO) {
        fake_guest_fail(g, "expected hello");
        return -1;
    }
    char *langs[] = {"javascript", "python", NULL};
    SbxMsg ok = {.type = SBX_MSG_HELLO_OK};
    ok.hello_ok.version = SBX_PROTOCOL_VERSION;
    ok.hello_ok.token = (char *)(token != NULL ? token : g->hello.hello.token);
    ok.hello_ok.agent = "fake-guest 0";
    ok.hello_ok.languages = langs;
    return fake_guest_send(g, &ok);
}

int fake_guest_hello(FakeGuest *g)
{
    return answer_hello(g, NULL);
}

int fake_guest_handshake(FakeGuest *g, const char *token)
{
    if (answer_hello(g, token) < 0) {
        return -1;
    }
    if (fake_guest_recv(g, &g->execute) < 0 || g->execute.type != SBX_MSG_EXECUTE) {
        fake_guest_fail(g, "expected execute");
        return -1;
    }
    return 0;
}

static char *exec_id(FakeGuest *g)
{
    return g->execute.execute.id != NULL ? g->execute.execute.id : "none";
}

int fake_guest_started(FakeGuest *g)
{
    SbxMsg m = {.type = SBX_MSG_STARTED, .started = {.id = exec_id(g)}};
    return fake_guest_send(g, &m);
}

int fake_guest_output(FakeGuest *g, SbxStream stream, const char *text)
{
    SbxMsg m = {.type = SBX_MSG_OUTPUT};
    m.output.id = exec_id(g);
    m.output.stream = stream;
    m.output.data = (uint8_t *)text;
    m.output.len = strlen(text);
    return fake_guest_send(g, &m);
}

int fake_guest_done(FakeGuest *g, SbxStatus status, const char *result_json, int exit_code)
{
    SbxMsg m = {.type = SBX_MSG_DONE};
    m.done.id = exec_id(g);
    m.done.status = status;
    m.done.result_json = (char *)result_json;
    m.done.exit_code = exit_code;
    m.done.duration_ms = 1;
    return fake_guest_send(g, &m);
}

int fake_guest_done_replay(FakeGuest *g, const char *replay_members)
{
    g_autofree char *json =
        g_strdup_printf("{\"type\":\"done\",\"id\":\"%s\",\"status\":\"ok\",\"exit_code\":0,"
                        "\"duration_ms\":1,\"output_truncated\":false,%s}",
                        exec_id(g), replay_members);
    return fake_guest_send_json(g, json);
}

int fake_guest_tool_call(FakeGuest *g, guint32 call_id, const char *provider, const char *tool,
                         const char *input_json)
{
    SbxMsg m = {.type = SBX_MSG_TOOL_CALL};
    m.tool_call.id = exec_id(g);
    m.tool_call.call_id = call_id;
    m.tool_call.provider = (char *)provider;
    m.tool_call.tool = (char *)tool;
    m.tool_call.input_json = (char *)input_json;
    return fake_guest_send(g, &m);
}

static gpointer guest_main(gpointer data)
{
    FakeGuest *g = data;
    g->script(g);
    shutdown(g->fd, SHUT_WR);
    return NULL;
}

FakeGuest *fake_guest_start(FakeGuestScript script, gpointer data, int *ret_host_fd)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        return NULL;
    }
    FakeGuest *g = g_new0(FakeGuest, 1);
    g->fd = sv[1];
    g->script = script;
    g->data = data;
    g->received = g_ptr_array_new();
    sbx_frame_reader_init(&g->reader, 0);
    *ret_host_fd = sv[0];
    g->thread = g_thread_new("fake-guest", guest_main, g);
    return g;
}

static void msg_free(gpointer p)
{
    sbx_msg_clear(p);
    g_free(p);
}

void fake_guest_join(FakeGuest *g)
{
    if (g->thread != NULL) {
        g_thread_join(g->thread);
        g->thread = NULL;
    }
}

void fake_guest_join_free(FakeGuest *g)
{
    if (g == NULL) {
        return;
    }
    fake_guest_join(g);
    close(g->fd);
    sbx_frame_reader_clear(&g->reader);
    sbx_msg_clear(&g->hello);
    sbx_msg_clear(&g->execute);
    g_ptr_array_set_free_func(g->received, msg_free);
    g_ptr_array_unref(g->received);
    g_free(g->failure);
    g_free(g);
}
