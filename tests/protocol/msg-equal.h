/*
 * Field-by-field comparison of two decoded messages, for the round-trip tests and fuzzers.
 */
#pragma once

#include <stdbool.h>

#include "protocol/message.h"

/** True if @a and @b carry the same type and the same field values. */
bool test_msg_equal(const SbxMsg *a, const SbxMsg *b);
