/*
 * A QMP (QEMU Machine Protocol) client on the GLib main loop.
 *
 * One connected socket to QEMU's monitor. sbx_qmp_handshake_async() waits for the greeting and
 * negotiates capabilities; then commands are sent with sbx_qmp_execute_async(). Every command
 * has a timeout: QEMU blocked on a silent vhost-user peer never answers (shared/FINDINGS.md),
 * and a monitor that stops answering means the VM must be killed. A timeout, EOF, or anything
 * that breaks the protocol (not JSON, an oversize message, a reply to no command) makes the
 * connection *broken*: every pending and later command fails and the broken handler runs once.
 *
 * QEMU is treated as hostile (under TCG its bugs are not security bugs): every message is
 * size-checked and parsed defensively. JSON is parsed here; callers get JSON text.
 */
#pragma once

#include <gio/gio.h>

typedef struct SbxQmp SbxQmp;

/* Default per-command timeout. QEMU answers within milliseconds when healthy; 5 s leaves room
 * for a loaded 2-core host and still notices a frozen VM promptly. */
#define SBX_QMP_TIMEOUT_MS 5000

/*
 * Largest message QEMU may send. The largest reply of QEMU 7.2 is query-qmp-schema (~210 KB);
 * our commands answer in a few hundred bytes. 1 MiB leaves room and bounds what a broken or
 * hostile QEMU can make us buffer (libvirt's limit is 10 MiB for all of QEMU's API).
 */
#define SBX_QMP_MESSAGE_MAX (1024 * 1024)

/** An asynchronous event: its name and its "data" member as compact JSON ("{}" if none). */
typedef void (*SbxQmpEventFunc)(SbxQmp *qmp, const char *event, const char *data_json,
                                gpointer user_data);

/** The connection broke (see above); called at most once. @qmp may be freed in the handler. */
typedef void (*SbxQmpBrokenFunc)(SbxQmp *qmp, const GError *error, gpointer user_data);

/** Wrap @fd (a connected stream socket; taken: closed on free). Starts reading at once. */
SbxQmp *sbx_qmp_new(int fd);

void sbx_qmp_set_handlers(SbxQmp *qmp, SbxQmpEventFunc event, SbxQmpBrokenFunc broken,
                          gpointer user_data);

/** Wait for the greeting and negotiate capabilities, within @timeout_ms (0 = default). */
void sbx_qmp_handshake_async(SbxQmp *qmp, guint timeout_ms, GCancellable *cancellable,
                             GAsyncReadyCallback callback, gpointer user_data);
gboolean sbx_qmp_handshake_finish(SbxQmp *qmp, GAsyncResult *result, GError **error);

/** QEMU's version from the greeting ("7.2.22"); NULL before the greeting. */
const char *sbx_qmp_version(SbxQmp *qmp);

/**
 * Run @command with @args_json (a JSON object text, or NULL) within @timeout_ms (0 = default).
 * Needs a completed handshake.
 */
void sbx_qmp_execute_async(SbxQmp *qmp, const char *command, const char *args_json,
                           guint timeout_ms, GCancellable *cancellable,
                           GAsyncReadyCallback callback, gpointer user_data);

/**
 * The same, passing a copy of @fd with the command (SCM_RIGHTS), as `getfd` wants: QEMU keeps
 * it under the name the arguments give. One such command in flight at a time.
 */
void sbx_qmp_execute_with_fd_async(SbxQmp *qmp, const char *command, const char *args_json, int fd,
                                   guint timeout_ms, GCancellable *cancellable,
                                   GAsyncReadyCallback callback, gpointer user_data);

/**
 * The command's "return" value as compact JSON text (caller frees), or NULL with an error:
 * SBX_VM_ERROR_QMP with QEMU's class and description for an error reply, G_IO_ERROR_TIMED_OUT,
 * G_IO_ERROR_CLOSED, G_IO_ERROR_CANCELLED, or the error that broke the connection.
 */
char *sbx_qmp_execute_finish(SbxQmp *qmp, GAsyncResult *result, GError **error);

/** True once the connection broke or was closed. */
gboolean sbx_qmp_is_broken(SbxQmp *qmp);

/** Close the connection; pending commands fail with G_IO_ERROR_CLOSED. Accepts NULL. */
void sbx_qmp_free(SbxQmp *qmp);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxQmp, sbx_qmp_free)
