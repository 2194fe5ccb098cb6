/*
 * The libFuzzer entry point every fuzz target defines. In the normal build, fuzz-replay.c
 * calls it on each file of a seed corpus; with -Dfuzzing=true, libFuzzer calls it.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#include <stdio.h>
#include <stdlib.h>

/* Like assert(), but also in builds with NDEBUG: a fuzz target's checks are its point. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
