/*
 * The file requests of `sandbox serve`'s socket (host-agent/server/unix-files.c), decoded and
 * answered as a client reads them (server/proto.c), against a fake of session-files.h (a
 * workspace in memory, its operations answered when the test says) and of the connection:
 * a put in pieces gathered and handed over whole, its pieces out of order refused; a get's
 * pieces from one copy of the file, held until its last; list and delete; the errors' codes;
 * a busy or unknown session refused before any byte is held; a client gone before the answer;
 * the bytes the connections hold bounded together (SBX_UNIX_TRANSFERS_HELD_MAX), and back to 0.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "server/proto.h"
#include "server/session-files.h"
#include "server/unix-private.h"

#define MIB (1024u * 1024)

/* ---- the connection, played ------------------------------------------------------------------ */

struct UnixConn {
    GPtrArray *sent; /* the frames' JSON */
    UnixOp *op;
    UnixTransfer *transfer;
};

static guint64 held; /* the front's count */

void sbx_unix_conn_send_msg(UnixConn *conn, const SbxServeMsg *msg)
{
    g_ptr_array_add(conn->sent, sbx_serve_proto_msg_encode(msg));
}

void sbx_unix_conn_send_error(UnixConn *conn, const char *code, const char *message)
{
    SbxServeMsg m = {.type = SBX_SERVE_MSG_ERROR, .code = (char *)code, .message = (char *)message};

    sbx_unix_conn_send_msg(conn, &m);
}

void sbx_unix_conn_send_session_error(UnixConn *conn, const GError *error)
{
    sbx_unix_conn_send_error(conn, error->code == SBX_SERVER_SESSION_ERROR_BUSY ? "busy" : "other",
                             error->message);
}

void sbx_unix_conn_op_begin(UnixConn *conn, UnixOp *op)
{
    assert_null(conn->op);
    op->conn = conn;
    conn->op = op;
}

void sbx_unix_conn_op_end(UnixOp *op)
{
    if (op->conn != NULL) {
        op->conn->op = NULL;
        op->conn = NULL;
    }
}

UnixTransfer **sbx_unix_conn_transfer(UnixConn *conn)
{
    return &conn->transfer;
}

guint64 *sbx_unix_conn_transfers_held(UnixConn *conn)
{
    (void)conn;
    return &held;
}

/* The client goes away: as unix.c's conn_free. */
static void conn_gone(UnixConn *conn)
{
    if (conn->op != NULL) {
        conn->op->conn = NULL;
        conn->op = NULL;
    }
    sbx_unix_transfer_free(g_steal_pointer(&conn->transfer));
    g_ptr_array_unref(conn->sent);
    g_free(conn);
}

static UnixConn *conn_new(void)
{
    UnixConn *conn = g_new0(UnixConn, 1);

    conn->sent = g_ptr_array_new_with_free_func(g_free);
    return conn;
}

/* ---- the session and its workspace, played --------------------------------------------------- */

#define SESSION "se_1"

static int the_session; /* its address is the session */
static gboolean busy;
static GHashTable *workspace; /* path -> GBytes */
static GBytes *last_put;      /* what the last put handed over */

/* An operation answered when the test calls answer(). */
typedef struct {
    SbxSessionFileFunc file_func;
    SbxSessionListFunc list_func;
    gpointer data;
    char *path;
    GBytes *bytes;
    gboolean get;
} Pending;

static Pending *pending;

GQuark sbx_server_session_error_quark(void)
{
    return g_quark_from_static_string("test-session-error");
}

SbxServerSession *sbx_unix_session_find(UnixConn *conn, const char *id)
{
    if (strcmp(id, SESSION) != 0) {
        sbx_unix_conn_send_error(conn, "not_found", "no session");
        return NULL;
    }
    return (SbxServerSession *)&the_session;
}

gboolean sbx_server_session_can_run(SbxServerSession *session, GError **error)
{
    assert_ptr_equal(session, &the_session);
    if (busy) {
        g_set_error_literal(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_BUSY,
                            "the session is busy");
        return FALSE;
    }
    return TRUE;
}

static gboolean start(SbxSessionFileFunc f, SbxSessionListFunc l, gpointer data, const char *path,
                      GBytes *bytes, gboolean get, GError **error)
{
    if (!sbx_server_session_can_run((SbxServerSession *)&the_session, error)) {
        return FALSE;
    }
    assert_null(pending);
    pending = g_new0(Pending, 1);
    *pending = (Pending){.file_func = f,
                         .list_func = l,
                         .data = data,
                         .path = g_strdup(path),
                         .bytes = bytes != NULL ? g_bytes_ref(bytes) : NULL,
                         .get = get};
    return TRUE;
}

gboolean sbx_server_session_put_file(SbxServerSession *session, const char *path, GBytes *data,
                                     SbxSessionFileFunc func, gpointer user_data, GError **error)
{
    (void)session;
    return start(func, NULL, user_data, path, data, FALSE, error);
}

gboolean sbx_server_session_get_file(SbxServerSession *session, const char *path,
                                     SbxSessionFileFunc func, gpointer user_data, GError **error)
{
    (void)session;
    return start(func, NULL, user_data, path, NULL, TRUE, error);
}

gboolean sbx_server_session_list_files(SbxServerSession *session, const char *path,
                                       SbxSessionListFunc func, gpointer user_data, GError **error)
{
    (void)session;
    return start(NULL, func, user_data, path, NULL, FALSE, error);
}

gboolean sbx_server_session_delete_file(SbxServerSession *session, const char *path,
                                        SbxSessionFileFunc func, gpointer user_data, GError **error)
{
    (void)session;
    return start(func, NULL, user_data, path, NULL, FALSE, error);
}

static void result_of(GBytes *bytes, const char *path, SbxSessionFileResult *r)
{
    g_autofree char *sha = g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, bytes);

    *r = (SbxSessionFileResult){.path = path, .size = g_bytes_get_size(bytes)};
    g_strlcpy(r->sha256, sha, sizeof(r->sha256));
}

/* The pending operation ends: done by the workspace, or failed with @code. */
static void answer(int code)
{
    Pending *p = g_steal_pointer(&pending);
    g_autoptr(GError) e =
        code >= 0 ? g_error_new(SBX_SERVER_SESSION_ERROR, code, "failed %d", code) : NULL;
    SbxSessionFileResult r = {.path = p->path};

    assert_non_null(p);
    if (p->list_func != NULL) {
        SbxFileEntry entries[] = {{.path = "a", .type = SBX_FILE_TYPE_DIR},
                                  {.path = "a/b", .type = SBX_FILE_TYPE_FILE, .size = 3}};
        p->list_func((SbxServerSession *)&the_session, e != NULL ? NULL : entries,
                     e != NULL ? 0 : 2, e == NULL, e, p->data);
    } else if (e != NULL) {
        p->file_func((SbxServerSession *)&the_session, NULL, e, p->data);
    } else if (p->bytes != NULL) { /* a put */
        g_clear_pointer(&last_put, g_bytes_unref);
        last_put = g_bytes_ref(p->bytes);
        g_hash_table_insert(workspace, g_strdup(p->path), g_bytes_ref(p->bytes));
        result_of(p->bytes, p->path, &r);
        p->file_func((SbxServerSession *)&the_session, &r, NULL, p->data);
    } else if (p->get) {
        GBytes *b = g_hash_table_lookup(workspace, p->path);
        result_of(b, p->path, &r);
        r.data = b;
        p->file_func((SbxServerSession *)&the_session, &r, NULL, p->data);
    } else { /* a delete */
        g_hash_table_remove(workspace, p->path);
        p->file_func((SbxServerSession *)&the_session, &r, NULL, p->data);
    }
    g_free(p->path);
    if (p->bytes != NULL) {
        g_bytes_unref(p->bytes);
    }
    g_free(p);
}

/* ---- requests and answers -------------------------------------------------------------------- */

/* Send @json on @conn; the frames answered so far are cleared first. */
static void ask(UnixConn *conn, const char *json)
{
    g_auto(SbxServeRequest) req = {0};

    g_ptr_array_set_size(conn->sent, 0);
    assert_true(sbx_serve_proto_request_decode(json, strlen(json), &req));
    if (req.bad != NULL) {
        fail_msg("%s: %s", json, req.bad);
    }
    assert_true(sbx_unix_file_message(conn, &req));
}

/* The one answer on @conn, of @type (decoded into @msg). */
static void answered(UnixConn *conn, SbxServeMsgType type, SbxServeMsg *msg)
{
    assert_int_equal(conn->sent->len, 1);
    const char *text = conn->sent->pdata[0];
    assert_true(sbx_serve_proto_msg_decode(text, strlen(text), msg));
    if (msg->type != type) {
        fail_msg("expected another answer than %s", text);
    }
}

/* The one answer on @conn is an error with @code. */
static void refused(UnixConn *conn, const char *code)
{
    g_auto(SbxServeMsg) msg = {0};

    answered(conn, SBX_SERVE_MSG_ERROR, &msg);
    assert_string_equal(msg.code, code);
}

static char *put_json(const char *path, guint64 offset, const guint8 *data, gsize len,
                      gboolean last)
{
    g_autofree char *b64 = g_base64_encode(data, len);

    return g_strdup_printf("{\"type\":\"file_put\",\"session\":\"" SESSION "\",\"path\":\"%s\","
                           "\"offset\":%" G_GUINT64_FORMAT ",\"data\":\"%s\",\"last\":%s}",
                           path, offset, b64, last ? "true" : "false");
}

static char *get_json(const char *path, guint64 offset)
{
    return g_strdup_printf("{\"type\":\"file_get\",\"session\":\"" SESSION "\",\"path\":\"%s\","
                           "\"offset\":%" G_GUINT64_FORMAT "}",
                           path, offset);
}

static GBytes *numbered(gsize len)
{
    guint8 *b = g_malloc(len);

    for (gsize i = 0; i < len; i++) {
        b[i] = (guint8)(i * 7 + i / 251);
    }
    return g_bytes_new_take(b, len);
}

/* Put @bytes at @path in pieces of a MiB on @conn; the last answered by the workspace. */
static void put_all(UnixConn *conn, const char *path, GBytes *bytes)
{
    gsize size, off = 0;
    const guint8 *data = g_bytes_get_data(bytes, &size);

    do {
        gsize n = MIN(size - off, MIB);
        gboolean last = off + n == size;
        g_autofree char *json = put_json(path, off, data + off, n, last);
        ask(conn, json);
        if (!last) {
            g_auto(SbxServeMsg) part = {0};
            answered(conn, SBX_SERVE_MSG_FILE_PART, &part);
            assert_int_equal(part.size, off + n);
            assert_int_equal(held, off + n);
        }
        off += n;
    } while (off < size);
    assert_int_equal(conn->sent->len, 0); /* the last piece's answer waits for the guest */
    assert_non_null(conn->op);
    assert_int_equal(held, 0); /* handed over */
    answer(-1);
}

static void test_put_in_pieces(void **state)
{
    UnixConn *conn = conn_new();
    g_autoptr(GBytes) file = numbered(5 * MIB / 2 + 3);
    g_auto(SbxServeMsg) end = {0};
    g_autofree char *sha = g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, file);
    (void)state;

    put_all(conn, "d/f.bin", file);
    answered(conn, SBX_SERVE_MSG_FILE, &end);
    assert_true(g_bytes_equal(last_put, file));
    assert_string_equal(end.path, "d/f.bin");
    assert_int_equal(end.size, g_bytes_get_size(file));
    assert_string_equal(end.sha256, sha);
    assert_null(end.data);
    assert_null(conn->op);
    assert_null(conn->transfer);

    /* an empty file: one piece, no data */
    ask(conn, "{\"type\":\"file_put\",\"session\":\"" SESSION "\",\"path\":\"e\"}");
    answer(-1);
    g_auto(SbxServeMsg) empty = {0};
    answered(conn, SBX_SERVE_MSG_FILE, &empty);
    assert_int_equal(empty.size, 0);
    assert_int_equal(g_bytes_get_size(last_put), 0);
    conn_gone(conn);
}

static void test_put_out_of_order(void **state)
{
    UnixConn *conn = conn_new();
    static const guint8 data[4] = "abcd";
    (void)state;

    g_autofree char *late = put_json("a", 4, data, 4, TRUE);
    ask(conn, late); /* nothing started */
    refused(conn, "bad_request");
    g_autofree char *first = put_json("a", 0, data, 4, FALSE);
    ask(conn, first);
    assert_int_equal(held, 4);
    g_autofree char *gap = put_json("a", 5, data, 4, TRUE);
    ask(conn, gap);
    refused(conn, "bad_request");
    assert_null(conn->transfer); /* dropped: the put starts again at 0 */
    assert_int_equal(held, 0);
    ask(conn, first);
    g_autofree char *other = put_json("b", 4, data, 4, TRUE);
    ask(conn, other); /* another path */
    refused(conn, "bad_request");
    assert_null(pending);
    conn_gone(conn);
}

static void test_refused_sessions(void **state)
{
    UnixConn *conn = conn_new();
    static const guint8 data[1] = "x";
    (void)state;

    ask(conn, "{\"type\":\"file_get\",\"session\":\"se_2\",\"path\":\"a\"}");
    refused(conn, "not_found");
    busy = TRUE;
    g_autofree char *first = put_json("a", 0, data, 1, FALSE);
    ask(conn, first);
    refused(conn, "busy");
    assert_null(conn->transfer); /* nothing held for a session that cannot take it */
    ask(conn, "{\"type\":\"file_list\",\"session\":\"" SESSION "\"}");
    refused(conn, "busy");
    busy = FALSE;
    ask(conn, first);
    busy = TRUE; /* an execution started in it meanwhile */
    g_autofree char *last = put_json("a", 1, data, 1, TRUE);
    ask(conn, last);
    refused(conn, "busy");
    busy = FALSE;
    assert_null(pending);
    assert_int_equal(held, 0);
    conn_gone(conn);
}

static void test_get_in_pieces(void **state)
{
    UnixConn *conn = conn_new();
    GBytes *file = numbered(2 * MIB + 10);
    gsize size;
    const guint8 *bytes = g_bytes_get_data(file, &size);
    g_autofree char *sha = g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, file);
    (void)state;

    g_hash_table_insert(workspace, g_strdup("big"), file);
    g_autofree char *first = get_json("big", 0);
    ask(conn, first);
    assert_int_equal(conn->sent->len, 0);
    answer(-1);
    for (guint64 off = 0; off < size; off += MIB) {
        g_auto(SbxServeMsg) piece = {0};
        if (off > 0) {
            g_autofree char *next = get_json("big", off);
            ask(conn, next);
        }
        answered(conn, SBX_SERVE_MSG_FILE, &piece);
        assert_int_equal(piece.offset, off);
        assert_int_equal(piece.size, size);
        assert_string_equal(piece.sha256, sha);
        assert_int_equal(piece.data_len, MIN(size - off, MIB));
        assert_memory_equal(piece.data, bytes + off, piece.data_len);
        assert_int_equal(held, off + piece.data_len < size ? size : 0);
    }
    assert_null(conn->transfer); /* gone with its last piece */
    g_autofree char *again = get_json("big", MIB);
    ask(conn, again);
    refused(conn, "bad_request");

    /* a small file: one piece, nothing held */
    g_hash_table_insert(workspace, g_strdup("small"), g_bytes_new_static("hi", 2));
    g_autofree char *small = get_json("small", 0);
    ask(conn, small);
    answer(-1);
    g_auto(SbxServeMsg) one = {0};
    answered(conn, SBX_SERVE_MSG_FILE, &one);
    assert_int_equal(one.data_len, 2);
    assert_null(conn->transfer);
    assert_int_equal(held, 0);

    /* past the end of a held file, and a get of another path */
    ask(conn, first);
    answer(-1);
    g_autofree char *past = get_json("big", size);
    ask(conn, past);
    refused(conn, "bad_request");
    g_autofree char *other = get_json("small", 1);
    ask(conn, other);
    refused(conn, "bad_request");
    conn_gone(conn); /* its held copy goes with it */
    assert_int_equal(held, 0);
}

static void test_list_delete_errors(void **state)
{
    UnixConn *conn = conn_new();
    (void)state;

    ask(conn, "{\"type\":\"file_list\",\"session\":\"" SESSION "\",\"path\":\"a\"}");
    answer(-1);
    g_auto(SbxServeMsg) list = {0};
    answered(conn, SBX_SERVE_MSG_FILES, &list);
    assert_string_equal(list.path, "a");
    assert_int_equal(list.n_entries, 2);
    assert_string_equal(list.entries[1].path, "a/b");
    assert_int_equal(list.entries[1].size, 3);
    assert_true(list.truncated);

    g_hash_table_insert(workspace, g_strdup("gone"), g_bytes_new_static("x", 1));
    ask(conn, "{\"type\":\"file_delete\",\"session\":\"" SESSION "\",\"path\":\"gone\"}");
    answer(-1);
    g_auto(SbxServeMsg) del = {0};
    answered(conn, SBX_SERVE_MSG_FILE_DELETED, &del);
    assert_string_equal(del.path, "gone");
    assert_false(g_hash_table_contains(workspace, "gone"));

    ask(conn, "{\"type\":\"file_get\",\"session\":\"" SESSION "\",\"path\":\"nope\"}");
    answer(SBX_SERVER_SESSION_ERROR_FILE_NOT_FOUND);
    refused(conn, "other"); /* the session error's, by sbx_unix_conn_send_session_error() */
    assert_null(conn->op);
    assert_null(conn->transfer);
    conn_gone(conn);
}

/* A client that goes away before its answer: nothing is sent, nothing is left. */
static void test_client_gone(void **state)
{
    static const guint8 data[3] = "abc";
    (void)state;

    UnixConn *conn = conn_new();
    g_autofree char *put = put_json("p", 0, data, 3, TRUE);
    ask(conn, put);
    conn_gone(conn);
    answer(-1);
    conn = conn_new();
    g_autofree char *get = get_json("p", 0);
    ask(conn, get);
    conn_gone(conn);
    answer(-1);
    assert_int_equal(held, 0);
}

/* Two connections may hold 64 MiB together; a third file's piece is refused, then taken. */
static void test_held_bound(void **state)
{
    UnixConn *a = conn_new(), *b = conn_new(), *c = conn_new();
    g_autoptr(GBytes) mib = numbered(MIB);
    const guint8 *piece = g_bytes_get_data(mib, NULL);
    (void)state;

    for (UnixConn **conn = (UnixConn *[]){a, b, NULL}; *conn != NULL; conn++) {
        for (guint64 off = 0; off < SBX_SERVE_FILE_MAX; off += MIB) {
            g_autofree char *json = put_json("big", off, piece, MIB, FALSE);
            ask(*conn, json);
            g_auto(SbxServeMsg) part = {0};
            answered(*conn, SBX_SERVE_MSG_FILE_PART, &part);
        }
    }
    assert_int_equal(held, SBX_UNIX_TRANSFERS_HELD_MAX);
    g_autofree char *more = put_json("c", 0, piece, 1, FALSE);
    ask(c, more);
    refused(c, "unavailable");
    assert_null(c->transfer);
    conn_gone(a);
    ask(c, more);
    g_auto(SbxServeMsg) part = {0};
    answered(c, SBX_SERVE_MSG_FILE_PART, &part);
    conn_gone(b);
    conn_gone(c);
    assert_int_equal(held, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_in_pieces),      cmocka_unit_test(test_put_out_of_order),
        cmocka_unit_test(test_refused_sessions),   cmocka_unit_test(test_get_in_pieces),
        cmocka_unit_test(test_list_delete_errors), cmocka_unit_test(test_client_gone),
        cmocka_unit_test(test_held_bound),
    };
    workspace =
        g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_bytes_unref);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    g_clear_pointer(&last_put, g_bytes_unref);
    g_hash_table_unref(workspace);
    return rc;
}
