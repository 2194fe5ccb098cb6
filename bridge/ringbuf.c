/* Byte ring buffer. Pure: no I/O, so the vsock layer built on it can be unit-tested. */
#include "ringbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ringbuf_init(struct ringbuf *rb, size_t cap)
{
    *rb = (struct ringbuf){0};
    /* malloc, not calloc: a large block is mmap'd and its pages stay unbacked until used. */
    rb->data = malloc(cap ? cap : 1);
    if (!rb->data)
        return -ENOMEM;
    rb->cap = cap;
    return 0;
}

void ringbuf_free(struct ringbuf *rb)
{
    free(rb->data);
    *rb = (struct ringbuf){0};
}

unsigned ringbuf_data_iov(const struct ringbuf *rb, struct iovec iov[2])
{
    if (rb->len == 0)
        return 0;
    size_t first = rb->cap - rb->head;
    if (first >= rb->len) {
        iov[0] = (struct iovec){rb->data + rb->head, rb->len};
        return 1;
    }
    iov[0] = (struct iovec){rb->data + rb->head, first};
    iov[1] = (struct iovec){rb->data, rb->len - first};
    return 2;
}

unsigned ringbuf_space_iov(const struct ringbuf *rb, struct iovec iov[2])
{
    size_t space = ringbuf_space(rb);
    if (space == 0)
        return 0;
    size_t tail = (rb->head + rb->len) % rb->cap;
    size_t first = rb->cap - tail;
    if (first >= space) {
        iov[0] = (struct iovec){rb->data + tail, space};
        return 1;
    }
    iov[0] = (struct iovec){rb->data + tail, first};
    iov[1] = (struct iovec){rb->data, space - first};
    return 2;
}

void ringbuf_commit(struct ringbuf *rb, size_t n)
{
    size_t space = ringbuf_space(rb);
    rb->len += n < space ? n : space;
}

void ringbuf_consume(struct ringbuf *rb, size_t n)
{
    if (n >= rb->len) {
        rb->head = 0;
        rb->len = 0;
        return;
    }
    rb->head = (rb->head + n) % rb->cap;
    rb->len -= n;
}

size_t ringbuf_push(struct ringbuf *rb, const void *src, size_t n)
{
    struct iovec iov[2];
    unsigned segs = ringbuf_space_iov(rb, iov);
    size_t done = 0;
    for (unsigned i = 0; i < segs && done < n; i++) {
        size_t k = n - done < iov[i].iov_len ? n - done : iov[i].iov_len;
        memcpy(iov[i].iov_base, (const uint8_t *)src + done, k);
        done += k;
    }
    ringbuf_commit(rb, done);
    return done;
}

void ringbuf_clear(struct ringbuf *rb)
{
    rb->head = 0;
    rb->len = 0;
}
