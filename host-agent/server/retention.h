/*
 * Retention of execution records while `sandbox serve` runs (docs/service.md, "Retention"):
 * finished records past an age or a count are deleted at start and every hour (retention.c).
 */
#pragma once

#include "store/records.h"

/* How often a running server prunes: records grow by executions, an hour's worth is small. */
#define SBX_RETENTION_PERIOD_S 3600

typedef struct SbxRetention SbxRetention;

/**
 * Prune @store now (finished records created more than @max_age_s ago, and all but the newest
 * @max_count; 0: no such bound) and every SBX_RETENTION_PERIOD_S from the main loop. A failed
 * prune is logged and tried again next time. NULL if both bounds are 0 (nothing to do).
 */
SbxRetention *sbx_retention_start(SbxStore *store, guint64 max_age_s, guint64 max_count);

/** Stop pruning (NULL: a no-op). */
void sbx_retention_free(SbxRetention *r);
