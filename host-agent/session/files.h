/*
 * Workspace file operations on a session (docs/protocol.md, "Files"): the host's side of the
 * `file` / `file_result` exchange, on the session's main loop.
 *
 * One operation at a time per session, on a handshaken, idle session: never while an execution
 * runs, never before hello (sbx_session_handshake_async() first), never two operations at
 * once; while an operation is in progress the session is not ready (sbx_session_is_ready()),
 * so no execution starts either. A put or a get keeps up to SBX_SESSION_FILE_WINDOW requests in
 * flight; the guest answers them in order. Every answer is hostile input: its seq must be the
 * oldest request's, a read's data at most the length asked and within the size the answer
 * itself reports, a write's size the bytes written so far, no data in other answers. A breach,
 * no answer within the timeout, the channel lost or any unexpected message closes the session
 * (on_broken runs, the VM must not be reused) and fails the operation with a G_IO_ERROR:
 *   G_IO_ERROR_INVALID_DATA       the guest broke the protocol ("protocol violation: ...")
 *   G_IO_ERROR_TIMED_OUT          no answer in time
 *   G_IO_ERROR_CONNECTION_CLOSED  the channel was lost
 *   G_IO_ERROR_FAILED             the guest sent `error`
 * The guest's refusal (`file_result` with ok false) fails that operation only, the session
 * stays usable: a put's or a get's answers still owed for the requests sent after the refused
 * one are read and checked first (and dropped), so that the session is idle when the operation
 * reports; so are they when a get ends for another reason (the cap, a file that shrank, the
 * chunk consumer's error) and when a put's source fails. Its errno name maps to a G_IO_ERROR
 * code, and the message names the
 * operation, the path, the errno name and the guest's message (cut, control characters
 * blanked):
 *   ENOENT -> G_IO_ERROR_NOT_FOUND          EISDIR -> G_IO_ERROR_IS_DIRECTORY
 *   ENOTDIR -> G_IO_ERROR_NOT_DIRECTORY     ENOSPC, EDQUOT, EFBIG -> G_IO_ERROR_NO_SPACE
 *   ELOOP (a symbolic link on the path), EXDEV (another file system), EACCES, EPERM
 *     -> G_IO_ERROR_PERMISSION_DENIED (a path the guest refuses)
 *   EEXIST -> G_IO_ERROR_EXISTS   ENOTEMPTY -> G_IO_ERROR_NOT_EMPTY   EROFS -> G_IO_ERROR_READ_ONLY
 *   ENAMETOOLONG -> G_IO_ERROR_FILENAME_TOO_LONG   EINVAL -> G_IO_ERROR_INVALID_ARGUMENT
 *   anything else -> G_IO_ERROR_FAILED
 * Refusals before anything is sent: G_IO_ERROR_NOT_INITIALIZED (no hello yet),
 * G_IO_ERROR_BUSY (an execution or another operation), G_IO_ERROR_CLOSED (the session is
 * closed), G_IO_ERROR_INVALID_ARGUMENT (not a workspace path, a bad request).
 *
 * Completion callbacks run once, from the main loop, never from inside the call that started
 * the operation; they may start the next operation, and must not free the session.
 */
#pragma once

#include <gio/gio.h>

#include "protocol/message.h"
#include "session.h"

/*
 * Time the guest has to answer one read or write request (a chunk of up to 1 MiB), counted from
 * the answer before it (the requests of a window are answered one after the other). A chunk
 * costs the guest 1 MiB through the channel and a write to (or a read from) the workspace's
 * disk; under TCG on a loaded host that takes well under a second, so 10 s absorbs a slow
 * moment without letting a guest that stopped answering hold the caller for long.
 */
#define SBX_SESSION_FILE_TIMEOUT_MS 10000

/*
 * Requests a put or a get keeps in flight (chunks of SBX_FILE_CHUNK_MAX). One is a round trip
 * per chunk with the guest idle in between (its answer, our next request, the guest's wake-up);
 * two are enough for the next chunk to be in the guest's socket when it finishes one; 4 absorb
 * the jitter of a loaded host. The bound is also what a transfer costs: a put holds at most 4
 * chunks (4 MiB) in the channel's queue (SBX_SESSION_WRITE_QUEUE_MAX is 16), and the guest,
 * which serves requests one at a time, holds one chunk while the rest wait in the transport's
 * buffers, unread; a get has at most 4 chunks coming, which the cap bounds anyway.
 */
#define SBX_SESSION_FILE_WINDOW 4

/*
 * Time for a list or a delete: one request walks a whole tree in the guest (a delete removes
 * all of it, a list stats up to 1024 entries and walks further to know whether it truncated),
 * and a workspace may hold many thousands of files: a minute under TCG.
 */
#define SBX_SESSION_FILE_TREE_TIMEOUT_MS 60000

/* Bytes of the guest's error message kept in a GError: enough for a reason, no more. */
#define SBX_SESSION_FILE_GUEST_TEXT_MAX 256

/* Room for a SHA-256 in lower-case hex and its NUL. */
#define SBX_SESSION_SHA256_HEX_SIZE 65

/**
 * Outcome of sbx_session_file_request_async(): @answer (valid during the call; ok is TRUE) or
 * @error (answer NULL; the guest refused, or the session closed: see above).
 */
typedef void (*SbxFileAnswerFunc)(SbxSession *session, const SbxFileResult *answer,
                                  const GError *error, gpointer user_data);

/**
 * Low level: send one `file` request (@request's seq is chosen here; its path must be a
 * workspace path, or NULL for a list of the root) and hand over its checked answer. Returns
 * FALSE with @error (and @func never runs) if the session cannot take it now or the request is
 * invalid; otherwise @func runs once. Cancel with sbx_session_file_cancel().
 */
gboolean sbx_session_file_request_async(SbxSession *session, const SbxFile *request,
                                        SbxFileAnswerFunc func, gpointer user_data, GError **error);

/* What an operation of the high level reports. Owned by the operation: valid during the
 * callback (g_bytes_ref() the data to keep it). */
typedef struct {
    guint64 size;                             /* put: bytes sent; get: bytes received */
    char sha256[SBX_SESSION_SHA256_HEX_SIZE]; /* put, get: SHA-256 of those bytes, hex */
    GBytes *data;                             /* get without on_chunk: the file; else NULL */
    const SbxFileEntry *entries;              /* list */
    gsize n_entries;                          /* list: at most SBX_FILE_LIST_MAX */
    gboolean truncated;                       /* list: the guest had more entries */
} SbxFileOutcome;

/** An operation ended: @outcome, or @error (outcome NULL). See above for the codes. */
typedef void (*SbxFileDoneFunc)(SbxSession *session, const SbxFileOutcome *outcome,
                                const GError *error, gpointer user_data);

/**
 * The next bytes of a file being put: at most @max bytes into @buf. Returns how many, 0 at the
 * end, or -1 with @error set (the put fails with it). Called from the main loop, and once
 * before sbx_session_file_put_stream_async() returns.
 */
typedef gssize (*SbxFilePullFunc)(guint8 *buf, gsize max, gpointer user_data, GError **error);

/**
 * A chunk of a file being got, in order (@len may be 0 only for an empty file: never called
 * then). Return FALSE with @error set to stop: the get fails with it.
 */
typedef gboolean (*SbxFileChunkFunc)(const guint8 *data, gsize len, gpointer user_data,
                                     GError **error);

/**
 * Write @contents to the workspace file @path (missing parent directories are created; the
 * file appears whole or not at all: docs/protocol.md) in chunks of SBX_FILE_CHUNK_MAX, up to
 * SBX_SESSION_FILE_WINDOW in flight (slices of @contents, not copies): a file of N bytes takes
 * max(1, ceil(N / SBX_FILE_CHUNK_MAX)) requests. @done gets the size and the SHA-256 of what
 * was sent. Returns FALSE with @error (and @done never runs) if the operation cannot start.
 */
gboolean sbx_session_file_put_async(SbxSession *session, const char *path, GBytes *contents,
                                    SbxFileDoneFunc done, gpointer user_data, GError **error);

/**
 * sbx_session_file_put_async() with the contents from @pull, a chunk of SBX_FILE_CHUNK_MAX at a
 * time (each in a buffer of its own until the channel wrote it: at most SBX_SESSION_FILE_WINDOW
 * of them). The window's first chunks are pulled before this returns (a source that fails after
 * the first one fails the put through @done). A file whose size is a multiple of the chunk (but
 * not 0) costs one more request: an empty last chunk.
 */
gboolean sbx_session_file_put_stream_async(SbxSession *session, const char *path,
                                           SbxFilePullFunc pull, SbxFileDoneFunc done,
                                           gpointer user_data, GError **error);

/**
 * Read the workspace file @path, at most @max_bytes of it (the host's memory bound): a file
 * larger than that, or one that grows past it while it is read, fails with
 * G_IO_ERROR_MESSAGE_TOO_LARGE and no result; one that shrinks under the read or stalls
 * fails with G_IO_ERROR_FAILED (both leave the session usable). Without @on_chunk @done gets
 * the whole file (outcome->data); with it the chunks go there as they come (nothing is kept:
 * the caller drops what it got when @done reports an error) and only the size and the SHA-256
 * of the bytes received go to @done.
 */
gboolean sbx_session_file_get_async(SbxSession *session, const char *path, guint64 max_bytes,
                                    SbxFileChunkFunc on_chunk, SbxFileDoneFunc done,
                                    gpointer user_data, GError **error);

/**
 * List the entries under the directory @path (NULL: the workspace's root), depth first: one
 * request, at most SBX_FILE_LIST_MAX entries (outcome->truncated when there were more).
 */
gboolean sbx_session_file_list_async(SbxSession *session, const char *path, SbxFileDoneFunc done,
                                     gpointer user_data, GError **error);

/**
 * Delete @path: a file, a symbolic link (not its target) or a directory with all it holds.
 */
gboolean sbx_session_file_delete_async(SbxSession *session, const char *path, SbxFileDoneFunc done,
                                       gpointer user_data, GError **error);

/**
 * Abandon the operation in progress, if any: its callback never runs (also when called from
 * an on_chunk or pull function). A put abandoned mid-way leaves no file (nor the old one
 * changed: the guest's temporary file stays until that path is written again). Returns TRUE
 * if the session stays usable: nothing was in flight (or nothing was in progress). Otherwise the
 * requests in flight would leave answers unread, and a put's chunks may be half written to the
 * channel: the session is closed and on_broken runs before this returns. (A failure drains
 * instead, see above; a cancel is for an owner that is going away and will not wait.)
 */
gboolean sbx_session_file_cancel(SbxSession *session);

/** TRUE while a file operation is in progress on @session. */
gboolean sbx_session_file_busy(const SbxSession *session);

/**
 * Use @timeout_ms for every file request of @session instead of SBX_SESSION_FILE_TIMEOUT_MS
 * and SBX_SESSION_FILE_TREE_TIMEOUT_MS (0: those again). For tests, and hosts known to be slow.
 */
void sbx_session_set_file_timeout(SbxSession *session, guint timeout_ms);
