/*
 * Retention of execution records while `sandbox serve` runs (docs/service.md, "Retention"):
 * finished records past an age, a count or a sum of sizes are deleted at start and every hour,
 * and as soon as a share of the bound on bytes was written (retention.c).
 */
#pragma once

#include "store/records.h"

/* How often a running server prunes: records grow by executions, an hour's worth is small. */
#define SBX_RETENTION_PERIOD_S 3600

/*
 * With a bound on bytes, a server also prunes once the records finished since its last prune
 * hold this share of the bound (a tenth): an hour is too long for it, a fast tenant writes GiB
 * in one. The store then holds at most the bound and a tenth between prunes (and one record), and
 * the prunes stay few and cheap beside the writes: each reads the size index once (some tens of
 * bytes a record: a few MiB for 100000) and deletes about what was written since the last, at
 * most one per tenth of the bound written, whatever the rate of executions.
 */
#define SBX_RETENTION_BYTES_SHARE 10

/*
 * Records a prune by bytes deletes in one transaction; the rest go in later ones, each from the
 * main loop when it is idle. Debian's SQLite overwrites what it deletes (secure_delete), so a
 * transaction writes about the bytes it deletes, the loop stopped meanwhile: 410 MiB took 1.7 s
 * on this project's test machine (docs/measurements.md). A record holds at most ~4 MiB (2 MiB of
 * output, its code and its calls), so 16 keep a transaction within ~64 MiB, some 0.3 s.
 */
#define SBX_RETENTION_BYTES_BATCH 16

typedef struct SbxRetention SbxRetention;

/**
 * Prune @store now (finished records created more than @max_age_s ago, all but the newest
 * @max_count, then the oldest until their sizes sum to at most @max_bytes; 0: no such bound;
 * sbx_records_prune()) and every SBX_RETENTION_PERIOD_S from the main loop; with @max_bytes,
 * also whenever the records finished on @store since the last prune reach @max_bytes /
 * SBX_RETENTION_BYTES_SHARE (sbx_records_set_on_finished(): records are finished in the main
 * loop's thread). A failed prune is logged and tried again next time. NULL if every bound is 0
 * (nothing to do).
 */
SbxRetention *sbx_retention_start(SbxStore *store, guint64 max_age_s, guint64 max_count,
                                  guint64 max_bytes);

/** Stop pruning (NULL: a no-op). */
void sbx_retention_free(SbxRetention *r);
