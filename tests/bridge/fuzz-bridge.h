/* The libFuzzer entry point; fuzz-replay.c calls it on each seed in the normal build. */
#pragma once

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
