/* A fixed-capacity byte ring buffer: one per direction of each vsock connection. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct ringbuf {
    uint8_t *data;
    size_t cap;
    size_t head; /* offset of the first stored byte */
    size_t len;  /* stored bytes */
};

/**
 * ringbuf_init: allocate @cap bytes of storage (untouched pages cost no memory until used).
 * Returns 0 or -ENOMEM; @rb is zeroed on failure.
 */
int ringbuf_init(struct ringbuf *rb, size_t cap);

/** ringbuf_free: release the storage; safe on a zeroed or already freed buffer. */
void ringbuf_free(struct ringbuf *rb);

/** ringbuf_len: number of stored bytes. */
static inline size_t ringbuf_len(const struct ringbuf *rb)
{
    return rb->len;
}

/** ringbuf_space: number of bytes that can still be stored. */
static inline size_t ringbuf_space(const struct ringbuf *rb)
{
    return rb->cap - rb->len;
}

/**
 * ringbuf_data_iov: describe the stored bytes as up to two segments (for writev).
 * Returns the number of segments filled in @iov (0 when empty).
 */
unsigned ringbuf_data_iov(const struct ringbuf *rb, struct iovec iov[2]);

/**
 * ringbuf_space_iov: describe the free space as up to two segments (for readv).
 * Returns the number of segments filled in @iov (0 when full).
 */
unsigned ringbuf_space_iov(const struct ringbuf *rb, struct iovec iov[2]);

/** ringbuf_commit: mark @n bytes written through ringbuf_space_iov() as stored. */
void ringbuf_commit(struct ringbuf *rb, size_t n);

/** ringbuf_consume: drop the @n oldest bytes (at most ringbuf_len()). */
void ringbuf_consume(struct ringbuf *rb, size_t n);

/** ringbuf_push: append up to @n bytes of @src; returns how many fit. */
size_t ringbuf_push(struct ringbuf *rb, const void *src, size_t n);

/** ringbuf_clear: drop every stored byte. */
void ringbuf_clear(struct ringbuf *rb);
