/*
 * Bookkeeping of one execution's tool calls: which call ids are waiting for a result.
 * Pure (no I/O), unit-tested in tests/agent/test-calls.c.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/limits.h"

typedef struct Calls {
    uint32_t last_id; /* highest call id seen: ids must increase, so each is used once */
    size_t n_pending;
    uint32_t pending[SBX_TOOL_CALLS_IN_FLIGHT_MAX];
} Calls;

/**
 * Record the runner's new call @id. Returns 0; -EINVAL if @id is 0 or not above every id seen
 * before (a reused id could be answered twice); -EBUSY if SBX_TOOL_CALLS_IN_FLIGHT_MAX calls
 * are already waiting (the id still counts as used).
 */
int calls_begin(Calls *c, uint32_t id);

/** The host answered @id: true (and forgotten) if it was waiting, false otherwise. */
bool calls_end(Calls *c, uint32_t id);
