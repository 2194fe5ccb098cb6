/*
 * The replay inputs of `sandbox run` (docs/cli.md; docs/protocol.md, "Replay"): --seed HEX,
 * the seed of the program's random generators (a record's `seed`), --clock-log FILE, the
 * clock reads to return (a record's `clock_log`), --event-log FILE, the order of timers and
 * tool results to keep (a record's `event_log`), and --log-open (a record's `log_open`). What a
 * later `sandbox replay` hands the execution core from a record; here for a person, or a test, to
 * do the same by hand.
 */
#pragma once

#include <glib.h>

#include "protocol/limits.h"

/*
 * Bytes of a --clock-log file: SBX_CLOCK_READS_MAX reads of at most 16 digits and a comma,
 * with room for whitespace; a larger file is refused before it is read. The same for an
 * --event-log file (SBX_EVENT_LOG_MAX small integers take less).
 */
#define SBX_CLI_CLOCK_LOG_FILE_MAX (4u * 1024 * 1024)

/** @hex (64 hex digits) as SBX_SEED_BYTES into @seed. FALSE with a message otherwise. */
gboolean sbx_cli_seed_parse(const char *hex, guint8 seed[SBX_SEED_BYTES], GError **error);

/**
 * The JSON array of integers 0..2^53-1 in the file @path (at most SBX_CLOCK_READS_MAX of them)
 * as *@ret (g_free; non-NULL even when empty) and *@ret_n. FALSE with a message otherwise.
 */
gboolean sbx_cli_clock_log_read(const char *path, guint64 **ret, gsize *ret_n, GError **error);

/** The same for an event log (at most SBX_EVENT_LOG_MAX integers: a record's `event_log`). */
gboolean sbx_cli_event_log_read(const char *path, guint64 **ret, gsize *ret_n, GError **error);
