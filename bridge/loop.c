/* epoll wrapper. */
#include "loop.h"

#include <errno.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

/* Events fetched per epoll_wait: more are simply fetched by the next call. */
#define LOOP_BATCH 64

int loop_init(struct loop *l)
{
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    return l->epfd < 0 ? -errno : 0;
}

void loop_fini(struct loop *l)
{
    if (l->epfd >= 0)
        close(l->epfd);
    l->epfd = -1;
}

static int ctl(struct loop *l, int op, struct watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};
    return epoll_ctl(l->epfd, op, w->fd, &ev) < 0 ? -errno : 0;
}

int loop_watch(struct loop *l, struct watch *w, int fd, uint32_t events, watch_cb cb, void *ctx)
{
    *w = (struct watch){.fd = fd, .events = 0, .cb = cb, .ctx = ctx};
    return loop_update(l, w, events);
}

int loop_update(struct loop *l, struct watch *w, uint32_t events)
{
    if (w->fd < 0 || events == w->events)
        return 0;
    int op = w->events == 0 ? EPOLL_CTL_ADD : events == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    int r = ctl(l, op, w, events);
    if (r == 0)
        w->events = events;
    return r;
}

void loop_unwatch(struct loop *l, struct watch *w)
{
    if (w->fd >= 0 && w->events != 0)
        ctl(l, EPOLL_CTL_DEL, w, 0);
    w->fd = -1;
    w->events = 0;
}

int loop_wait(struct loop *l, int timeout_ms)
{
    struct epoll_event evs[LOOP_BATCH];
    int n = epoll_wait(l->epfd, evs, LOOP_BATCH, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) {
        struct watch *w = evs[i].data.ptr;
        if (w->fd >= 0 && w->events != 0)
            w->cb(w, evs[i].events);
    }
    return n;
}

uint64_t loop_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
