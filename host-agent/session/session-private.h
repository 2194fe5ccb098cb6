/*
 * What files.c needs of the session's state machine (private to the session library). The
 * state machine stays the single owner of the channel: files.c hands it `file` requests, up to
 * SBX_SESSION_FILE_WINDOW in flight, and gets their answers in order, or the error that broke
 * the session, back through one hook.
 *
 * File requests in flight are the state FILE (IDLE -> FILE -> IDLE on the acceptable answer of
 * the last one); anything else (a seq other than the oldest request's, an answer the check
 * refuses, no answer in time, the channel lost, the guest's `error`, any message that is not
 * expected, a data frame not announced or not the one announced) closes the session the way an
 * idle session breaks: the hook fails first (once, whatever was in flight), then on_broken tells
 * the owner.
 */
#pragma once

#include "session.h"

/*
 * Judges an answer whose seq matched (@answer->ok only; its data attached): NULL if it is
 * acceptable, else a malloc'd description of the breach, which closes the session.
 */
typedef char *(*SbxSessionFileCheck)(const SbxFileResult *answer, gpointer data);

/*
 * The request's outcome, once, from the main loop: @answer (ok or not; valid during the call)
 * with the session idle again, or @error (a G_IO_ERROR) with the session closed.
 */
typedef void (*SbxSessionFileFunc)(SbxSession *session, const SbxFileResult *answer,
                                   const GError *error, gpointer data);

/**
 * Send @file (its seq is set here; a write's chunk is @data, file->len bytes, sent as its data
 * frame without a copy; NULL when none) on an idle session, or one whose requests in flight
 * are fewer than SBX_SESSION_FILE_WINDOW and have the same @check, @func and @data, with
 * @timeout_ms for its answer (counted from when the answer before it came). Returns FALSE
 * with @error if the session cannot take it (G_IO_ERROR_NOT_INITIALIZED before hello,
 * G_IO_ERROR_BUSY, G_IO_ERROR_CLOSED), if @file does not encode (G_IO_ERROR_INVALID_ARGUMENT),
 * or if sending it broke the session (G_IO_ERROR_CLOSED; on_broken ran); @func never runs then,
 * not even for the requests sent before. Otherwise @check and @func run for each answer, in
 * order; the session is idle again when @func runs for the last one in flight.
 */
gboolean sbx_session_file_send(SbxSession *session, SbxFile *file, GBytes *data, guint timeout_ms,
                               SbxSessionFileCheck check, SbxSessionFileFunc func,
                               gpointer user_data, GError **error);

/** File requests in flight: sent and not answered (0 when the session is closed). */
guint sbx_session_file_in_flight(const SbxSession *session);

/** FALSE with @error (as sbx_session_file_send() words it) unless a request can be sent now. */
gboolean sbx_session_file_can_send(const SbxSession *session, GError **error);

/**
 * Withdraw the hook of the requests in flight, if any: the session is closed then (their
 * answers would be left unread; on_broken runs). Returns TRUE if nothing was in flight.
 */
gboolean sbx_session_file_withdraw(SbxSession *session);

/*
 * files.c's operation in progress (at most one per session; NULL: none). While one is attached
 * the session is not ready (no run, no other operation); sbx_session_free() frees it with
 * @destroy, and no callback runs. Attaching replaces without freeing.
 */
void sbx_session_file_attach(SbxSession *session, gpointer op, GDestroyNotify destroy);
gpointer sbx_session_file_attached(const SbxSession *session);

/* The per-request timeout set by sbx_session_set_file_timeout() (0: the defaults). */
void sbx_session_file_set_timeout(SbxSession *session, guint timeout_ms);
guint sbx_session_file_get_timeout(const SbxSession *session);
