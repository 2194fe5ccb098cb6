/*
 * A framed, non-blocking stream channel on the GLib main loop: complete frame payloads in
 * (length checked before anything is allocated), encoded frames out through a bounded queue.
 * No protocol knowledge: the session decodes and judges the payloads, and arms the channel for
 * a data frame when a message announces one (docs/protocol.md, "Data frames").
 */
#pragma once

#include <glib.h>
#include <stdint.h>

typedef struct SbxChannel SbxChannel;

typedef enum {
    SBX_CHANNEL_EOF,       /* the peer closed the stream between frames */
    SBX_CHANNEL_IO,        /* a read or write failed, or the stream ended inside a frame */
    SBX_CHANNEL_BAD_FRAME, /* a header announced an empty or oversized frame, or not the data
                              frame that was due, or one that was not */
} SbxChannelFailure;

typedef struct {
    /*
     * One complete frame payload (NUL-terminated, @len bytes, valid during the call).
     * Return FALSE to stop the channel (no more callbacks).
     */
    gboolean (*on_frame)(const char *payload, gsize len, gpointer user_data);
    /*
     * The data frame sbx_channel_expect_data() armed the channel for: @data (@len bytes,
     * malloc'd) is the callee's to free. Return FALSE to stop the channel.
     */
    gboolean (*on_data)(guint8 *data, gsize len, gpointer user_data);
    /* The channel failed and stopped; @message says how. */
    void (*on_error)(SbxChannelFailure failure, const char *message, gpointer user_data);
} SbxChannelCallbacks;

/**
 * Wrap the connected stream socket @fd (taken; closed by sbx_channel_free, also on failure).
 * Frames larger than @max_frame bytes are refused; at most @max_queue bytes wait to be written.
 * Reading starts with sbx_channel_start(). Sources attach to the thread-default main context.
 */
SbxChannel *sbx_channel_new(int fd, guint32 max_frame, gsize max_queue,
                            const SbxChannelCallbacks *callbacks, gpointer user_data,
                            GError **error);

/** Start reading (idempotent). */
void sbx_channel_start(SbxChannel *ch);

/**
 * Queue the encoded frame @frame (@len bytes, malloc'd; taken in every case) and write what
 * the socket accepts now. Returns 0, -ENOBUFS if the queue would exceed its bound (the peer is
 * not reading), -EPIPE if the channel is stopped.
 */
int sbx_channel_send(SbxChannel *ch, uint8_t *frame, size_t len);

/**
 * Queue @bytes (a reference is taken) to be written as they are, after what is queued: the
 * payload of a data frame whose header ends the frame queued before it. Same returns as
 * sbx_channel_send(); nothing is copied.
 */
int sbx_channel_send_bytes(SbxChannel *ch, GBytes *bytes);

/**
 * From on_frame: the frame just handed over announced a data frame of @len bytes (1..
 * SBX_DATA_FRAME_MAX), which must be the next one (on_data gets it). Anything else fails the
 * channel with SBX_CHANNEL_BAD_FRAME, before it is read. Returns 0 or -EINVAL (@len out of
 * range, or not called between frames: the caller's bug).
 */
int sbx_channel_expect_data(SbxChannel *ch, guint32 len);

/** Stop reading and writing (queued frames are dropped); no callback runs afterwards. */
void sbx_channel_stop(SbxChannel *ch);

/** Bytes queued and not yet written. */
gsize sbx_channel_queued(const SbxChannel *ch);

/** Close the socket and free. Accepts NULL. */
void sbx_channel_free(SbxChannel *ch);
