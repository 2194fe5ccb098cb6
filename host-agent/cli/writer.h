/*
 * A bounded queue of bytes for one file descriptor, written by a thread of its own, so that a
 * reader that is slow or does not read at all never blocks the main loop: the run's timeout, a
 * signal, a tool call and the exit all go on while bytes wait here (docs/cli.md, "Output:
 * slow readers and terminals").
 *
 * Why a thread and not non-blocking writes from the loop: the descriptors written are mostly
 * our stdout and stderr, inherited, and O_NONBLOCK belongs to the open file description, which
 * is shared with the shell and every other process writing there (setting it makes their writes
 * fail with EAGAIN). A thread writes with blocking calls and leaves the description alone. A
 * descriptor that is non-blocking already (the prompt's own /dev/tty) works too: the thread
 * waits in poll() on EAGAIN.
 *
 * The queue is bounded by the caller's choice of what to do when it is full (sbx_writer_push());
 * a write that fails (EPIPE: `| head`) makes the writer dead: what is queued and what comes
 * later is dropped. Runs from one thread (the main loop's) besides its own.
 */
#pragma once

#include <glib.h>

/*
 * Bytes queued per writer. Above the default --output-limit (10 MiB, the session's cap on a
 * run's stdout + stderr), so that a run with the default limits never loses output to a slow
 * reader, however slow; small enough that the host memory a run can hold for readers stays
 * modest when the cap is raised (to at most 1 GiB): 16 MiB per destination.
 */
#define SBX_WRITER_QUEUE_MAX (16u * 1024 * 1024)

/*
 * At the end, a writer's queue is flushed while its reader takes bytes, but it is given up on
 * after this long without a byte taken: a reader that does not read (`| sleep 60`, a stopped
 * terminal) must not keep the finished command alive. 2 s is far longer than any reader that
 * reads needs to take the next byte.
 */
#define SBX_WRITER_FLUSH_STALL_MS 2000

/*
 * And at most this long in all, however steadily the reader reads: a full queue (16 MiB) drains
 * within it at 1.6 MiB/s, which any pipe or terminal reader that keeps up at all achieves.
 */
#define SBX_WRITER_FLUSH_MAX_MS 10000

typedef struct SbxWriter SbxWriter;

/**
 * A writer for @fd (not owned: the writer writes to a duplicate of it, so the caller may close
 * @fd at any time). Starts its thread.
 */
SbxWriter *sbx_writer_new(int fd);

/**
 * Queue @len bytes of @data. Returns FALSE and queues nothing when the writer is dead, or when
 * the queue would exceed SBX_WRITER_QUEUE_MAX and @force is FALSE. @force is for the host's own
 * short notes, which must get through a queue that guest bytes filled.
 */
gboolean sbx_writer_push(SbxWriter *w, const void *data, gsize len, gboolean force);

/** sbx_writer_push() without a copy: a reference to @bytes is queued. */
gboolean sbx_writer_push_bytes(SbxWriter *w, GBytes *bytes, gboolean force);

/** A write failed (EPIPE, ...): nothing more will be written. */
gboolean sbx_writer_dead(SbxWriter *w);

/** Bytes queued and not yet written. */
gsize sbx_writer_queued(SbxWriter *w);

/**
 * Wait until everything queued is written, the writer is dead, @stall_ms passed without a byte
 * written, or @max_ms passed. TRUE if nothing is left to write (written, or dropped because the
 * writer is dead). Blocks the caller: for the end of the command, after the loop stopped.
 */
gboolean sbx_writer_flush(SbxWriter *w, guint stall_ms, guint max_ms);

/**
 * Stop the thread and free the writer; what is still queued is dropped. A thread blocked in a
 * write that no reader takes is left to the process exit (it holds what it needs). Accepts NULL.
 */
void sbx_writer_free(SbxWriter *w);
