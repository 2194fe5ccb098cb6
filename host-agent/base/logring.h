/*
 * Bounded logs of what a child process or the guest writes (the guest console, QEMU's and the
 * bridge's stderr): only the last N bytes are kept, for error reports.
 */
#pragma once

#include <glib.h>

typedef struct SbxLogRing SbxLogRing;

/**
 * Watch @fd (taken: closed by sbx_log_ring_free) on the thread-default main context and keep
 * the last @capacity bytes read from it. If @copy_fd >= 0, also copy what is read there
 * (sanitised, at most @copy_max bytes in total, then one "[... truncated]" note).
 * @fd may be -1: then the ring is only fed by sbx_log_ring_append().
 */
SbxLogRing *sbx_log_ring_new(int fd, gsize capacity, int copy_fd, gsize copy_max);

/** Add bytes as if they had been read from the fd. */
void sbx_log_ring_append(SbxLogRing *ring, const void *data, gsize len);

/** Read what the fd has right now without blocking (before an error report). */
void sbx_log_ring_drain(SbxLogRing *ring);

/** Drain, then stop watching and close the fd (the writer is gone). */
void sbx_log_ring_finish(SbxLogRing *ring);

/**
 * The kept bytes as printable UTF-8: control bytes other than newline and tab become \xNN,
 * invalid UTF-8 becomes U+FFFD (a guest must not be able to drive the operator's terminal).
 * Caller frees.
 */
char *sbx_log_ring_text(const SbxLogRing *ring);

/** The last @max_lines lines of sbx_log_ring_text() (for one-line error messages). */
char *sbx_log_ring_tail_lines(const SbxLogRing *ring, guint max_lines);

/** Bytes seen in total (kept or not). */
guint64 sbx_log_ring_total(const SbxLogRing *ring);

/** Make @data printable (see sbx_log_ring_text). Caller frees. */
char *sbx_log_sanitize(const char *data, gsize len);

void sbx_log_ring_free(SbxLogRing *ring);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxLogRing, sbx_log_ring_free)
