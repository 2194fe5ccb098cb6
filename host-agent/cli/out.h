/*
 * What `sandbox run` prints on our stdout and stderr while its loop runs (run.c, and
 * serve-client.c for a run through `sandbox serve`): the guest's output, the summary at the
 * end, the --json report. Docs: docs/cli.md, "Output: slow readers and terminals".
 *
 * - Nothing blocks the loop: each destination has a writer thread with a bounded queue
 *   (writer.h). stdout and stderr that are one destination (`2>&1`, one terminal) share one
 *   writer, so their bytes keep their order and never interleave inside a chunk.
 * - A slow reader: when a stream's queue is full, the rest of the guest's output on that stream
 *   is dropped, with one note on stderr; what came before stays exact (a prefix). Backpressure
 *   is no option: the session cannot pause the guest, and a client of `sandbox serve` that
 *   stopped reading its socket would not see the end of its run on time either.
 * - A reader that is gone (EPIPE, `| head`): the rest of that stream is dropped, silently; the
 *   program keeps running.
 * - A terminal: guest bytes are escaped (escape.h) across chunks, and so is the host's text that
 *   quotes the guest (the program's error); a JSON report gets JSON escapes, so it stays the same
 *   JSON. Elsewhere (a pipe, a file) every byte passes unchanged.
 * - At the end, sbx_out_free() writes what is queued while the readers read, and gives up
 *   within the writer's bounds (2 s without progress, 10 s in all) so the command exits.
 */
#pragma once

#include <glib.h>

#include "protocol/message.h"

typedef struct SbxOut SbxOut;

/** Output to our stdout and stderr (file descriptors 1 and 2). */
SbxOut *sbx_out_new(void);

/** Output to @out_fd and @err_fd instead (tests). */
SbxOut *sbx_out_new_fds(int out_fd, int err_fd);

/** Whether @stream goes to a terminal (its bytes are escaped). */
gboolean sbx_out_is_tty(const SbxOut *o, SbxStream stream);

/** Bytes of the guest's @stream: queued, or dropped as above. */
void sbx_out_guest(SbxOut *o, SbxStream stream, const guint8 *data, gsize len);

/**
 * The host's @text on @stream (a summary; it may quote the guest): escaped on a terminal, and
 * queued even over the bound (it is short, and must reach a reader that catches up).
 */
void sbx_out_text(SbxOut *o, SbxStream stream, const char *text);

/** The JSON text @json (@len bytes) on @stream, queued like sbx_out_text(). */
void sbx_out_json(SbxOut *o, SbxStream stream, const char *json, gsize len);

/** Guest bytes of @stream dropped so far (slow or gone reader). */
guint64 sbx_out_dropped(const SbxOut *o, SbxStream stream);

/** Bytes waiting for @stream's reader (its destination's, when both streams share one). */
gsize sbx_out_queued(const SbxOut *o, SbxStream stream);

/**
 * Write what is queued, within the bounds above, then free. What could not be written is said
 * on stderr if stderr is another destination that still takes bytes. Accepts NULL.
 */
void sbx_out_free(SbxOut *o);
