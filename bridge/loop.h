/* A minimal epoll loop: level-triggered watches on file descriptors and a monotonic clock. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct watch;
typedef void (*watch_cb)(struct watch *w, uint32_t events);

/*
 * Embedded in its owner. fd is -1 while unwatched: an event already fetched for a watch that a
 * callback removed in the same batch is then skipped, so owners must keep a removed watch's
 * memory alive until loop_wait() returns.
 */
struct watch {
    int fd;
    uint32_t events; /* registered interest; 0 = not in the epoll set */
    watch_cb cb;
    void *ctx;
};

struct loop {
    int epfd;
};

/** loop_init: create the epoll instance. Returns 0 or -errno. */
int loop_init(struct loop *l);

/** loop_fini: close the epoll instance. */
void loop_fini(struct loop *l);

/**
 * loop_watch: start watching @fd for @events (EPOLLIN/EPOLLOUT; 0 = keep it quiet for now).
 * Returns 0 or -errno.
 */
int loop_watch(struct loop *l, struct watch *w, int fd, uint32_t events, watch_cb cb, void *ctx);

/**
 * loop_update: change the interest. 0 takes the fd out of the epoll set entirely, so that a
 * hung-up peer (EPOLLHUP is always reported) cannot spin the loop while we want nothing.
 * Returns 0 or -errno.
 */
int loop_update(struct loop *l, struct watch *w, uint32_t events);

/** loop_unwatch: stop watching (does not close the fd). */
void loop_unwatch(struct loop *l, struct watch *w);

/**
 * loop_wait: wait up to @timeout_ms (-1 = forever) and run the callbacks of ready watches.
 * Returns the number of events, 0 on timeout or EINTR, or -errno.
 */
int loop_wait(struct loop *l, int timeout_ms);

/** loop_now_ms: CLOCK_MONOTONIC in milliseconds. */
uint64_t loop_now_ms(void);
