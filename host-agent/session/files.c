/*
 * Workspace file operations on a session (see files.h): puts in chunks, gets under a cap,
 * lists and deletes, each a series of requests that session.c sends (a put's and a get's up to
 * SBX_SESSION_FILE_WINDOW ahead of their answers) and whose answers it hands back here, in
 * order; the checks of each answer against its request; the guest's errors as GErrors.
 */
#include "files.h"

#include <string.h>

#include "session-private.h"

typedef enum { KIND_REQUEST, KIND_PUT, KIND_GET, KIND_LIST, KIND_DELETE } Kind;

static const char *const kind_names[] = {
    [KIND_REQUEST] = "file request", [KIND_PUT] = "put", [KIND_GET] = "get", [KIND_LIST] = "list",
    [KIND_DELETE] = "delete",
};

/* A request in flight: what its answer must match. */
typedef struct {
    guint64 offset;
    gsize len;      /* write: the chunk's bytes */
    guint32 length; /* read: bytes asked */
    gboolean last;  /* write: the chunk is the last */
    gboolean stale; /* read: asked before a short answer moved the reading back: not used */
} Req;

/* An operation in progress: attached to its session until it ends or is cancelled. */
typedef struct {
    SbxSession *session;
    Kind kind;
    char *path;   /* NULL: the workspace's root (a list) */
    SbxFileOp op; /* its requests' operation */
    /* the requests in flight, oldest first (a ring): answers come in this order */
    Req reqs[SBX_SESSION_FILE_WINDOW];
    guint head, n_reqs;
    /* Over (put, get): the outcome waits for the answers still owed, which are read, checked
     * and dropped, so that the session is idle again when the caller hears of it. */
    gboolean ending;
    GError *end_error; /* what it ended with; NULL: it succeeded */
    /* put */
    GBytes *contents;
    SbxFilePullFunc pull;
    guint64 sent;       /* bytes sent so far */
    gboolean sent_last; /* the last chunk is sent */
    /* get */
    guint64 max_bytes;
    SbxFileChunkFunc on_chunk;
    gboolean keep; /* without on_chunk: the file is kept here */
    guint8 *data;  /* what came so far: bytes of it, room for alloc (both <= max_bytes) */
    gsize alloc;
    GBytes *result;
    guint64 next;      /* the offset to ask for next */
    guint64 told_size; /* the file's size as the latest answer said (0 before the first) */
    /* put, get */
    GChecksum *sha;
    guint64 bytes; /* put: bytes the guest acknowledged; get: bytes received */
    /* the caller */
    SbxFileDoneFunc done;
    SbxFileAnswerFunc answer;
    gpointer user_data;
    /* Inside a function that may run the owner's code (pull, on_chunk, or a send, whose
     * failure runs on_broken): a cancel from there leaves the freeing to us. */
    int guarded;
    gboolean cancelled; /* cancelled while guarded: freed once that returns */
} Op;

static void op_free(gpointer p)
{
    Op *op = p;

    g_free(op->path);
    g_clear_pointer(&op->contents, g_bytes_unref);
    g_clear_error(&op->end_error);
    g_free(op->data);
    g_clear_pointer(&op->result, g_bytes_unref);
    g_clear_pointer(&op->sha, g_checksum_free);
    g_free(op);
}

/* "get \"a/b\"", "list of the workspace's root": for messages. */
static char *describe(const Op *op)
{
    const char *what = op->kind == KIND_REQUEST ? sbx_file_op_name(op->op) : kind_names[op->kind];

    if (op->path == NULL) {
        return g_strdup_printf("%s of the workspace's root", what);
    }
    return g_strdup_printf("%s \"%s\"", what, op->path);
}

/* ---- the guest's errors ------------------------------------------------------------------ */

static const struct {
    const char *name;
    GIOErrorEnum code;
} errno_codes[] = {
    {"ENOENT", G_IO_ERROR_NOT_FOUND},
    {"EISDIR", G_IO_ERROR_IS_DIRECTORY},
    {"ENOTDIR", G_IO_ERROR_NOT_DIRECTORY},
    {"ELOOP", G_IO_ERROR_PERMISSION_DENIED}, /* a symbolic link on the path */
    {"EXDEV", G_IO_ERROR_PERMISSION_DENIED}, /* the path leaves the workspace's file system */
    {"EACCES", G_IO_ERROR_PERMISSION_DENIED},
    {"EPERM", G_IO_ERROR_PERMISSION_DENIED},
    {"ENOSPC", G_IO_ERROR_NO_SPACE},
    {"EDQUOT", G_IO_ERROR_NO_SPACE},
    {"EFBIG", G_IO_ERROR_NO_SPACE},
    {"EEXIST", G_IO_ERROR_EXISTS},
    {"ENOTEMPTY", G_IO_ERROR_NOT_EMPTY},
    {"EROFS", G_IO_ERROR_READ_ONLY},
    {"ENAMETOOLONG", G_IO_ERROR_FILENAME_TOO_LONG},
    {"EINVAL", G_IO_ERROR_INVALID_ARGUMENT},
};

/* An errno name as the guest should send one: 2..32 of [A-Z0-9], starting with E. */
static gboolean errno_name_valid(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;

    if (n < 2 || n > 32 || s[0] != 'E') {
        return FALSE;
    }
    for (size_t i = 0; i < n; i++) {
        if (!g_ascii_isupper(s[i]) && !g_ascii_isdigit(s[i])) {
            return FALSE;
        }
    }
    return TRUE;
}

static GIOErrorEnum errno_code(const char *name)
{
    for (size_t i = 0; name != NULL && i < G_N_ELEMENTS(errno_codes); i++) {
        if (strcmp(name, errno_codes[i].name) == 0) {
            return errno_codes[i].code;
        }
    }
    return G_IO_ERROR_FAILED;
}

/*
 * The guest's text for a message of ours: at most SBX_SESSION_FILE_GUEST_TEXT_MAX bytes, cut at
 * a character boundary (the decoder checked the UTF-8), control characters blanked so that it
 * cannot forge lines of a log.
 */
static char *guest_text(const char *text)
{
    size_t n = text != NULL ? strlen(text) : 0;
    gboolean cut = n > SBX_SESSION_FILE_GUEST_TEXT_MAX;

    if (cut) {
        n = SBX_SESSION_FILE_GUEST_TEXT_MAX;
        while (n > 0 && ((guchar)text[n] & 0xc0) == 0x80) {
            n--;
        }
    }
    GString *out = g_string_sized_new(n + 4);
    for (size_t i = 0; i < n; i++) {
        guchar c = text[i];
        g_string_append_c(out, c < 0x20 || c == 0x7f ? ' ' : (char)c);
    }
    if (cut) {
        g_string_append(out, "...");
    }
    return g_string_free(out, FALSE);
}

static GError *guest_error(const Op *op, const SbxError *e)
{
    const char *name = errno_name_valid(e->type) ? e->type : NULL;
    g_autofree char *what = describe(op);
    g_autofree char *text = guest_text(e->message);

    return g_error_new(G_IO_ERROR, errno_code(name), "%s: the guest refused: %s (%s): %s", what,
                       name != NULL ? name : "no errno name", sbx_error_code_name(e->code), text);
}

/* ---- ending ------------------------------------------------------------------------------- */

/*
 * The operation ended: detach it (its callback may start the next one), tell the caller with
 * @answer (a request's) or @outcome, or @error (prefixed with what the operation was), free.
 */
static void finish(Op *op, const SbxFileResult *answer, const SbxFileOutcome *outcome,
                   const GError *error)
{
    g_autoptr(GError) full = NULL;

    sbx_session_file_attach(op->session, NULL, NULL);
    if (error != NULL) {
        g_autofree char *what = describe(op);
        full = g_error_copy(error);
        if (!g_str_has_prefix(error->message, what)) {
            g_prefix_error(&full, "%s: ", what);
        }
    }
    if (op->kind == KIND_REQUEST) {
        op->answer(op->session, full != NULL ? NULL : answer, full, op->user_data);
    } else {
        op->done(op->session, full != NULL ? NULL : outcome, full, op->user_data);
    }
    op_free(op);
}

/* The size and digest of a put's or a get's bytes. */
static void transfer_outcome(Op *op, SbxFileOutcome *out)
{
    out->size = op->bytes;
    g_strlcpy(out->sha256, g_checksum_get_string(op->sha), sizeof(out->sha256));
}

/*
 * A put or a get is over, with @error or done (NULL): say so once no answer is owed any more
 * (the answers to requests still in flight are drained first: see Op.ending). The first
 * outcome stands.
 */
static void transfer_end(Op *op, const GError *error)
{
    if (!op->ending) {
        op->ending = TRUE;
        op->end_error = error != NULL ? g_error_copy(error) : NULL;
    }
    if (op->n_reqs > 0) {
        return;
    }
    if (op->end_error != NULL) {
        finish(op, NULL, NULL, op->end_error);
        return;
    }
    SbxFileOutcome out = {0};
    transfer_outcome(op, &out);
    if (op->keep) {
        op->result = g_bytes_new_take(g_steal_pointer(&op->data), op->bytes);
        out.data = op->result;
    }
    finish(op, NULL, &out, NULL);
}

static void fail(Op *op, GIOErrorEnum code, const char *fmt, ...) G_GNUC_PRINTF(3, 4);

static void fail(Op *op, GIOErrorEnum code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_autoptr(GError) error = g_error_new_literal(G_IO_ERROR, code, msg);
    transfer_end(op, error);
}

/*
 * The next request could not be sent (@error): the transfer fails, unless the owner cancelled
 * meanwhile (then it is only freed). Requests still in flight are drained first, unless the
 * session closed (the send broke it): then none will be answered.
 */
static void failed_to_go_on(Op *op, const GError *error)
{
    if (op->cancelled) {
        op_free(op);
        return;
    }
    if (sbx_session_file_in_flight(op->session) == 0) {
        op->n_reqs = 0;
    }
    transfer_end(op, error);
}

/* ---- sending and checking ------------------------------------------------------------------ */

static guint op_timeout(const Op *op)
{
    guint ms = sbx_session_file_get_timeout(op->session);

    if (ms != 0) {
        return ms;
    }
    return op->op == SBX_FILE_READ || op->op == SBX_FILE_WRITE ? SBX_SESSION_FILE_TIMEOUT_MS
                                                               : SBX_SESSION_FILE_TREE_TIMEOUT_MS;
}

/* An answer (seq matched: the oldest request's; ok) against its request: NULL, or the breach. */
static char *check_answer(const SbxFileResult *a, gpointer data)
{
    const Op *op = data;
    const Req *req = &op->reqs[op->head];

    if (op->op != SBX_FILE_READ && a->len > 0) {
        return g_strdup_printf("file_result of a %s carries %zu bytes of data",
                               sbx_file_op_name(op->op), a->len);
    }
    if (op->op == SBX_FILE_WRITE && a->size != req->offset + req->len) {
        return g_strdup_printf("file_result of a write of %zu bytes at offset %" G_GUINT64_FORMAT
                               " says %" G_GUINT64_FORMAT " bytes written",
                               req->len, req->offset, a->size);
    }
    if (op->op == SBX_FILE_READ && a->len > req->length) {
        return g_strdup_printf("file_result of a read carries %zu bytes, %u asked", a->len,
                               req->length);
    }
    /* With no data, a size below the offset is the truth about a file that shrank: get
     * judges that; data past the size the answer itself gives is not. */
    if (op->op == SBX_FILE_READ && a->len > 0 &&
        (req->offset > a->size || a->len > a->size - req->offset)) {
        return g_strdup_printf(
            "file_result of a read carries %zu bytes at offset %" G_GUINT64_FORMAT
            " of a file of %" G_GUINT64_FORMAT " bytes",
            a->len, req->offset, a->size);
    }
    return NULL;
}

static void on_answer(SbxSession *session, const SbxFileResult *answer, const GError *error,
                      gpointer data);

/*
 * Send @req for @op (a write's chunk: @data, or NULL), remembering what its answer must match.
 * FALSE (@error set): not sent; if the session closed meanwhile, no request of @op in flight
 * will be answered either (sbx_session_file_in_flight() is 0).
 */
static gboolean op_send(Op *op, SbxFile *req, GBytes *data, GError **error)
{
    g_assert(op->n_reqs < SBX_SESSION_FILE_WINDOW);
    op->op = req->op;
    op->guarded++;
    gboolean sent = sbx_session_file_send(op->session, req, data, op_timeout(op), check_answer,
                                          on_answer, op, error);
    op->guarded--;
    if (sent) {
        op->reqs[(op->head + op->n_reqs) % SBX_SESSION_FILE_WINDOW] =
            (Req){.offset = req->offset, .len = req->len, .length = req->length, .last = req->last};
        op->n_reqs++;
    }
    return sent;
}

/* The answer to the oldest request came: forget it, return it. */
static Req op_answered(Op *op)
{
    Req req = op->reqs[op->head];

    op->head = (op->head + 1) % SBX_SESSION_FILE_WINDOW;
    op->n_reqs--;
    return req;
}

/* ---- put ----------------------------------------------------------------------------------- */

/*
 * Fill @buf from the pull function: up to a chunk, or less at its end (*@ret_last).
 * FALSE: failed (@error set) or cancelled from the pull function (op->cancelled, no error).
 */
static gboolean pull_chunk(Op *op, guint8 *buf, gsize *ret_len, bool *ret_last, GError **error)
{
    gsize fill = 0;

    *ret_last = false;
    while (fill < SBX_FILE_CHUNK_MAX) {
        GError *local = NULL;
        op->guarded++;
        gssize n = op->pull(buf + fill, SBX_FILE_CHUNK_MAX - fill, op->user_data, &local);
        op->guarded--;
        if (op->cancelled) {
            g_clear_error(&local);
            return FALSE;
        }
        if (n < 0 || (gsize)n > SBX_FILE_CHUNK_MAX - fill) {
            if (local == NULL) {
                local = g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED,
                                    n < 0 ? "the source failed"
                                          : "the source gave more bytes "
                                            "than asked");
            }
            g_propagate_error(error, local);
            return FALSE;
        }
        g_clear_error(&local);
        if (n == 0) {
            *ret_last = true;
            break;
        }
        fill += n;
    }
    *ret_len = fill;
    return TRUE;
}

/* The next chunk (from op->sent on) and whether it is the last; NULL data when it is empty. */
static gboolean put_chunk(Op *op, GBytes **ret_data, SbxFile *req, GError **error)
{
    if (op->contents != NULL) {
        gsize total = g_bytes_get_size(op->contents);
        req->len = MIN((gsize)SBX_FILE_CHUNK_MAX, total - op->sent);
        req->last = op->sent + req->len == total;
        *ret_data = req->len > 0 ? g_bytes_new_from_bytes(op->contents, op->sent, req->len) : NULL;
        return TRUE;
    }
    /* Each chunk its own buffer: it stays queued in the channel after this returns. */
    guint8 *buf = g_malloc(SBX_FILE_CHUNK_MAX);
    bool last = false;
    if (!pull_chunk(op, buf, &req->len, &last, error)) {
        g_free(buf);
        return FALSE;
    }
    req->last = last;
    *ret_data = req->len > 0 ? g_bytes_new_take(g_realloc(buf, req->len), req->len) : NULL;
    if (req->len == 0) {
        g_free(buf);
    }
    return TRUE;
}

/* Send chunks, from op->sent on, until the window is full or the last one is out. */
static gboolean put_fill(Op *op, GError **error)
{
    while (!op->sent_last && op->n_reqs < SBX_SESSION_FILE_WINDOW) {
        SbxFile req = {.op = SBX_FILE_WRITE, .path = op->path, .offset = op->sent};
        g_autoptr(GBytes) data = NULL;

        if (!put_chunk(op, &data, &req, error)) {
            return FALSE;
        }
        if (data != NULL) {
            g_checksum_update(op->sha, g_bytes_get_data(data, NULL), req.len);
        }
        if (!op_send(op, &req, data, error)) {
            return FALSE;
        }
        op->sent += req.len;
        op->sent_last = req.last;
    }
    return TRUE;
}

static void put_answered(Op *op, const Req *req)
{
    g_autoptr(GError) error = NULL;

    op->bytes = req->offset + req->len; /* what the answer said: check_answer */
    if (req->last) {
        transfer_end(op, NULL);
    } else if (!put_fill(op, &error)) {
        failed_to_go_on(op, error);
    }
}

/* ---- get ----------------------------------------------------------------------------------- */

/*
 * Ask for what the cap leaves (a chunk at most, a byte at least), not for what the last answer
 * said remains: a file that grows while it is read then comes in full chunks, not in slivers,
 * and an answer whose size lies low is caught by its own data. Once an answer told the file's
 * size, the chunks up to it are asked ahead, the window's worth.
 */
static gboolean get_send(Op *op, GError **error)
{
    SbxFile req = {.op = SBX_FILE_READ, .path = op->path, .offset = op->next};

    req.length = (guint32)CLAMP(op->max_bytes - op->next, 1, SBX_FILE_CHUNK_MAX);
    if (!op_send(op, &req, NULL, error)) {
        return FALSE;
    }
    op->next += req.length;
    return TRUE;
}

static gboolean get_fill(Op *op, GError **error)
{
    while (op->next < op->told_size && op->n_reqs < SBX_SESSION_FILE_WINDOW) {
        if (!get_send(op, error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/*
 * Keep the chunk @a (its data ends within its size, which is within the cap: check_answer,
 * get_answered). The room is what the first answer said the file has, grown (doubling, up to
 * the cap) if it grows: never more than the cap, where a GByteArray would round up to a power
 * of two.
 */
static void get_keep(Op *op, const SbxFileResult *a)
{
    gsize need = op->bytes + a->len;

    if (need > op->alloc) {
        gsize grown = op->alloc > 0 ? MIN(MAX(need, 2 * op->alloc), op->max_bytes) : a->size;
        op->alloc = MAX(need, grown);
        op->data = g_realloc(op->data, op->alloc);
    }
    memcpy(op->data + op->bytes, a->data, a->len);
}

/* Hand the chunk over. FALSE: the operation ended (failed or cancelled from on_chunk). */
static gboolean get_deliver(Op *op, const SbxFileResult *a)
{
    g_autoptr(GError) error = NULL;

    if (a->len == 0) {
        return TRUE;
    }
    g_checksum_update(op->sha, a->data, a->len);
    if (op->keep) {
        get_keep(op, a);
        return TRUE;
    }
    op->guarded++;
    gboolean go_on = op->on_chunk(a->data, a->len, op->user_data, &error);
    op->guarded--;
    if (op->cancelled) {
        op_free(op);
        return FALSE;
    }
    if (!go_on) {
        if (error == NULL) {
            error = g_error_new(G_IO_ERROR, G_IO_ERROR_FAILED, "the chunk's consumer failed");
        }
        transfer_end(op, error);
    }
    return go_on;
}

/* The answer @a to @req, in order. A request asked before a short answer is not used. */
static void get_answered(Op *op, const Req *req, const SbxFileResult *a)
{
    g_autoptr(GError) error = NULL;

    if (req->stale) {
        goto more;
    }
    if (a->size > op->max_bytes) {
        fail(op, G_IO_ERROR_MESSAGE_TOO_LARGE,
             op->bytes == 0 ? "the file has %" G_GUINT64_FORMAT " bytes, more than the cap of "
                              "%" G_GUINT64_FORMAT
                            : "the file grew to %" G_GUINT64_FORMAT " bytes while it was read, "
                              "more than the cap of %" G_GUINT64_FORMAT,
             a->size, op->max_bytes);
        return;
    }
    if (a->len == 0 && a->size != op->bytes) {
        fail(op, G_IO_ERROR_FAILED,
             a->size < op->bytes ? "the file shrank to %" G_GUINT64_FORMAT " bytes while it was "
                                   "read (%" G_GUINT64_FORMAT " read)"
                                 : "the file has %" G_GUINT64_FORMAT " bytes, the guest sent "
                                   "none at offset %" G_GUINT64_FORMAT,
             a->size, op->bytes);
        return;
    }
    if (!get_deliver(op, a)) {
        return;
    }
    op->bytes += a->len; /* <= a->size <= max_bytes: check_answer */
    op->told_size = a->size;
    if (op->bytes == a->size) {
        transfer_end(op, NULL);
        return;
    }
    /* Short of what was asked, and of the size (the file changed): the requests after it ask
     * from the wrong offsets. Drop their answers, ask again from here. */
    if (a->len < req->length) {
        for (guint i = 0; i < op->n_reqs; i++) {
            op->reqs[(op->head + i) % SBX_SESSION_FILE_WINDOW].stale = TRUE;
        }
        op->next = op->bytes;
    }
more:
    if (!get_fill(op, &error)) {
        failed_to_go_on(op, error);
    }
}

/* ---- answers ------------------------------------------------------------------------------- */

static void on_answer(SbxSession *session, const SbxFileResult *answer, const GError *error,
                      gpointer data)
{
    Op *op = data;
    (void)session;

    if (error != NULL) {
        finish(op, NULL, NULL, error); /* the session is closed: nothing more will come */
        return;
    }
    Req req = op_answered(op);
    if (op->ending) { /* drained */
        transfer_end(op, NULL);
        return;
    }
    if (!answer->ok) {
        g_autoptr(GError) refused = guest_error(op, &answer->error);
        if (op->kind == KIND_PUT || op->kind == KIND_GET) {
            transfer_end(op, refused);
        } else {
            finish(op, NULL, NULL, refused);
        }
        return;
    }
    SbxFileOutcome out = {0};
    switch (op->kind) {
    case KIND_PUT:
        put_answered(op, &req);
        break;
    case KIND_GET:
        get_answered(op, &req, answer);
        break;
    case KIND_LIST:
        out.entries = answer->entries;
        out.n_entries = answer->n_entries;
        out.truncated = answer->truncated;
        finish(op, NULL, &out, NULL);
        break;
    default: /* a request, a delete */
        finish(op, answer, &out, NULL);
        break;
    }
}

/* ---- starting ------------------------------------------------------------------------------ */

/* A new operation on @session, attached to it; NULL (with @error) if it cannot start. */
static Op *op_new(SbxSession *session, Kind kind, const char *path, gboolean root_ok,
                  GError **error)
{
    if (sbx_session_file_attached(session) != NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_BUSY, "%s: another file operation is in progress",
                    kind_names[kind]);
        return NULL;
    }
    if (!sbx_session_file_can_send(session, error)) {
        g_prefix_error(error, "%s: ", kind_names[kind]);
        return NULL;
    }
    if (path == NULL ? !root_ok : !sbx_workspace_path_valid(path)) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "%s: not a workspace path (relative, components of 1..%d bytes, no . or .., "
                    "no control characters, at most %d bytes: docs/protocol.md, \"Files\")",
                    kind_names[kind], SBX_PATH_NAME_MAX, SBX_PATH_MAX);
        return NULL;
    }
    Op *op = g_new0(Op, 1);
    op->session = session;
    op->kind = kind;
    op->path = g_strdup(path);
    sbx_session_file_attach(session, op, op_free);
    return op;
}

/* The first request could not be sent (or the owner cancelled meanwhile): undo, say why. */
static gboolean op_abandon(Op *op, GError **error)
{
    if (op->cancelled) { /* from the pull function, or from on_broken if the send broke */
        if (error != NULL && *error == NULL) {
            g_set_error(error, G_IO_ERROR, G_IO_ERROR_CANCELLED, "%s: cancelled",
                        kind_names[op->kind]);
        }
    } else {
        g_autofree char *what = describe(op);
        sbx_session_file_attach(op->session, NULL, NULL);
        g_prefix_error(error, "%s: ", what);
    }
    op_free(op);
    return FALSE;
}

gboolean sbx_session_file_request_async(SbxSession *session, const SbxFile *request,
                                        SbxFileAnswerFunc func, gpointer user_data, GError **error)
{
    SbxFile req = *request;

    g_return_val_if_fail(func != NULL, FALSE);
    Op *op = op_new(session, KIND_REQUEST, req.path, req.op == SBX_FILE_LIST, error);
    if (op == NULL) {
        return FALSE;
    }
    op->answer = func;
    op->user_data = user_data;
    g_autoptr(GBytes) data = req.op == SBX_FILE_WRITE && req.len > 0 && req.data != NULL
                                 ? g_bytes_new(req.data, req.len)
                                 : NULL;
    if (req.op == SBX_FILE_WRITE && req.len > 0 && req.data == NULL) {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "a write of %zu bytes without them", req.len);
        return op_abandon(op, error);
    }
    return op_send(op, &req, data, error) || op_abandon(op, error);
}

/*
 * The window's first chunks. Failing before any is out, the put does not start; failing after,
 * it fails once their answers are in (done never runs from in here: at least one is owed).
 */
static gboolean put_start(Op *op, GError **error)
{
    GError *local = NULL;

    if (put_fill(op, &local)) {
        return TRUE;
    }
    if (op->n_reqs == 0 || op->cancelled || sbx_session_file_in_flight(op->session) == 0) {
        if (local != NULL) { /* none: cancelled from the pull function */
            g_propagate_error(error, local);
        }
        return op_abandon(op, error);
    }
    transfer_end(op, local);
    g_error_free(local);
    return TRUE;
}

static Op *transfer_new(SbxSession *session, Kind kind, const char *path, SbxFileDoneFunc done,
                        gpointer user_data, GError **error)
{
    g_return_val_if_fail(done != NULL, NULL);
    Op *op = op_new(session, kind, path, FALSE, error);
    if (op != NULL) {
        op->done = done;
        op->user_data = user_data;
        op->sha = g_checksum_new(G_CHECKSUM_SHA256);
    }
    return op;
}

gboolean sbx_session_file_put_async(SbxSession *session, const char *path, GBytes *contents,
                                    SbxFileDoneFunc done, gpointer user_data, GError **error)
{
    g_return_val_if_fail(contents != NULL, FALSE);
    Op *op = transfer_new(session, KIND_PUT, path, done, user_data, error);
    if (op == NULL) {
        return FALSE;
    }
    op->contents = g_bytes_ref(contents);
    return put_start(op, error);
}

gboolean sbx_session_file_put_stream_async(SbxSession *session, const char *path,
                                           SbxFilePullFunc pull, SbxFileDoneFunc done,
                                           gpointer user_data, GError **error)
{
    g_return_val_if_fail(pull != NULL, FALSE);
    Op *op = transfer_new(session, KIND_PUT, path, done, user_data, error);
    if (op == NULL) {
        return FALSE;
    }
    op->pull = pull;
    return put_start(op, error);
}

gboolean sbx_session_file_get_async(SbxSession *session, const char *path, guint64 max_bytes,
                                    SbxFileChunkFunc on_chunk, SbxFileDoneFunc done,
                                    gpointer user_data, GError **error)
{
    Op *op = transfer_new(session, KIND_GET, path, done, user_data, error);
    if (op == NULL) {
        return FALSE;
    }
    op->max_bytes = max_bytes;
    op->on_chunk = on_chunk;
    op->keep = on_chunk == NULL;
    return get_send(op, error) || op_abandon(op, error);
}

static gboolean one_request(SbxSession *session, Kind kind, SbxFileOp fop, const char *path,
                            SbxFileDoneFunc done, gpointer user_data, GError **error)
{
    g_return_val_if_fail(done != NULL, FALSE);
    Op *op = op_new(session, kind, path, fop == SBX_FILE_LIST, error);
    if (op == NULL) {
        return FALSE;
    }
    op->done = done;
    op->user_data = user_data;
    SbxFile req = {.op = fop, .path = op->path};
    return op_send(op, &req, NULL, error) || op_abandon(op, error);
}

gboolean sbx_session_file_list_async(SbxSession *session, const char *path, SbxFileDoneFunc done,
                                     gpointer user_data, GError **error)
{
    return one_request(session, KIND_LIST, SBX_FILE_LIST, path, done, user_data, error);
}

gboolean sbx_session_file_delete_async(SbxSession *session, const char *path, SbxFileDoneFunc done,
                                       gpointer user_data, GError **error)
{
    return one_request(session, KIND_DELETE, SBX_FILE_DELETE, path, done, user_data, error);
}

/* ---- cancel and settings ------------------------------------------------------------------- */

gboolean sbx_session_file_cancel(SbxSession *session)
{
    Op *op = sbx_session_file_attached(session);

    if (op == NULL) {
        return TRUE;
    }
    sbx_session_file_attach(session, NULL, NULL);
    gboolean usable = sbx_session_file_withdraw(session);
    if (op->guarded > 0) {
        op->cancelled = TRUE; /* freed when what runs returns */
    } else {
        op_free(op);
    }
    return usable;
}

gboolean sbx_session_file_busy(const SbxSession *session)
{
    return sbx_session_file_attached(session) != NULL;
}

void sbx_session_set_file_timeout(SbxSession *session, guint timeout_ms)
{
    sbx_session_file_set_timeout(session, timeout_ms);
}
