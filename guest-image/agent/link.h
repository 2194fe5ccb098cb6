/*
 * A framed, non-blocking endpoint: the host connection and the runner channel both speak the
 * protocol of host-agent/protocol over a stream socket. Reading decodes one message at a time;
 * writing appends whole frames to a queue that link_flush() empties as the socket allows. The
 * host connection also takes data frames (link_take_data()): a message that announces one is
 * handed over with its bytes attached, and one sent with its bytes is followed by them.
 *
 * The queue itself has no limit: the caller bounds it by not producing while link_queued() is
 * above its own threshold (see loop.c), which keeps the policy in one place.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/frame.h"
#include "protocol/message.h"

/*
 * Bytes read from the socket at a time. One output chunk (64 KiB, ~87 KiB as a frame) fits in
 * two reads; more would only delay the other file descriptors of the loop.
 */
#define LINK_READ_CHUNK (64 * 1024)

/*
 * A payload with at least this much still to come is read straight into its buffer, not
 * through LINK_READ_CHUNK: a file's chunk (1 MiB) is then not copied once more. Smaller ones
 * come with their neighbours in one read.
 */
#define LINK_DIRECT_MIN (16 * 1024)

typedef struct LinkFrame {
    struct LinkFrame *next;
    uint8_t *data; /* header + payload, from sbx_msg_encode() */
    size_t len;
    size_t off; /* bytes already written */
} LinkFrame;

typedef struct Link {
    int fd; /* non-blocking stream socket or character device (a port), owned; -1 when closed */
    bool device; /* not a socket (a virtio-serial port): read()/write() instead of recv()/send() */
    bool data;   /* data frames are taken (link_take_data()) */
    SbxFrameReader reader;
    SbxMsg pending; /* a message whose data frame is being read (when has_pending) */
    bool has_pending;
    uint8_t in[LINK_READ_CHUNK];
    size_t in_len, in_off; /* bytes in @in, and how many the reader has taken */
    LinkFrame *head, *tail;
    size_t queued; /* bytes waiting in the queue */
} Link;

/** Take ownership of the non-blocking socket @fd; frames above @max_frame are refused. */
void link_init(Link *l, int fd, uint32_t max_frame);

/**
 * Take data frames on @l (docs/protocol.md, "Data frames"): the host connection only. Elsewhere
 * a message that announces data is refused (-EBADMSG), and so is a data frame's header.
 */
void link_take_data(Link *l);

/** Close the socket and drop whatever is queued or half-read. Idempotent. */
void link_close(Link *l);

/** Drop the frames queued for writing (the peer cannot take them); reading goes on. */
void link_drop_queue(Link *l);

/**
 * True if bytes already read from the socket wait to be decoded. poll() cannot see them: a
 * caller that stopped reading (back-pressure) must come back to them by itself.
 */
bool link_buffered(const Link *l);

/** Bytes waiting to be written. */
size_t link_queued(const Link *l);

/**
 * Encode @msg and append it to the queue (nothing is written yet: see link_flush()).
 * Returns 0, or the error of sbx_msg_encode(): -EINVAL (also for a message that announces
 * data: link_send_data()), -EMSGSIZE, -ENOMEM.
 */
int link_send(Link *l, const SbxMsg *msg);

/**
 * link_send() of @msg, which announces sbx_msg_data_len() bytes, then of its data frame:
 * @data (malloc'd, taken in every case; queued as it is, not copied). Returns what link_send()
 * does, or -EINVAL if @l does not take data frames.
 */
int link_send_data(Link *l, const SbxMsg *msg, uint8_t *data);

/**
 * Write queued frames until the queue is empty or the socket would block.
 * Returns 0, or -errno when the socket failed (-EPIPE: the peer is gone).
 */
int link_flush(Link *l);

/**
 * Decode the next message into @msg (caller clears it), with its data attached when it
 * announced a data frame (the frame right after it, of that length, or -EBADMSG). Reads from
 * the socket at most once per LINK_READ_CHUNK consumed. Returns 1 with a message, 0 when no
 * complete message is available yet, -EPIPE at the end of the stream, -EBADMSG for a malformed
 * frame or message (with *@ret_reason set to a malloc'd explanation, or NULL), or another
 * -errno.
 */
int link_recv(Link *l, SbxMsg *msg, char **ret_reason);
