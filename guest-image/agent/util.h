/*
 * Small helpers of the guest agent: clock, logging, file descriptors.
 */
#pragma once

#include <stdint.h>

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/** Milliseconds of CLOCK_MONOTONIC (never jumps when the host sets the wall clock). */
int64_t now_ms(void);

/* The kernel's count of OOM kills since boot (/proc/vmstat oom_kill), or -1. */
int64_t oom_kills(void);

/** Log one line to stderr (the guest console) with the agent's prefix. */
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** Set O_NONBLOCK on @fd. Returns 0 or -errno. */
int fd_set_nonblock(int fd);

/** close() @fd if it is >= 0, keeping errno. Returns -1, for `fd = safe_close(fd);`. */
int safe_close(int fd);
