/*
 * Framing of the guest <-> host protocol: a 4-byte big-endian payload length, then the payload
 * (one UTF-8 JSON object). Pure: no I/O, no GLib; used by both agents and by the runners' channel.
 *
 * A header with bit 31 set (SBX_FRAME_DATA | n) is a data frame: n raw bytes that belong to the
 * message just before it, which announced them (docs/protocol.md, "Data frames"). A reader takes
 * one only when armed for it (sbx_frame_reader_expect_data()); any other reader refuses such a
 * header as it refuses every length above its limit.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Bit 31 of a header: the frame is a data frame, its length the other 31 bits. */
#define SBX_FRAME_DATA 0x80000000u

/*
 * Incremental frame decoder. Bytes arrive in any fragmentation; a frame is returned once
 * complete. The payload buffer is allocated only after the length has been checked against
 * max_len, and never exceeds it.
 */
typedef struct SbxFrameReader {
    uint32_t max_len;   /* largest accepted payload (<= SBX_FRAME_MAX) */
    uint32_t data_due;  /* 0, or the length of the data frame that must come next */
    uint8_t header[4];  /* length bytes received so far */
    size_t header_got;  /* 0..4 */
    uint8_t *payload;   /* allocated max(length, 1) + 1 (NUL) once the header is complete */
    uint32_t length;    /* payload length announced by the header */
    size_t payload_got; /* payload bytes received so far */
} SbxFrameReader;

/** Prepare @r to accept payloads of at most @max_len bytes (0 means SBX_FRAME_MAX). */
void sbx_frame_reader_init(SbxFrameReader *r, uint32_t max_len);

/** Free what @r holds (a partial frame). @r may be fed again after sbx_frame_reader_init. */
void sbx_frame_reader_clear(SbxFrameReader *r);

/**
 * Feed @len bytes from @buf. Consumes bytes up to the end of the first frame that completes.
 *
 * Returns the number of bytes consumed (>= 0). When a frame completed, *@ret_frame is set to a
 * malloc'd NUL-terminated copy of the payload (caller frees) and *@ret_len to its length;
 * otherwise *@ret_frame is NULL. Call again with the rest of @buf until it is used up.
 * Errors (the stream is then unusable): -EMSGSIZE if a header announces more than max_len (a
 * data frame's header does, unless the reader is armed for it), -EBADMSG if it announces 0
 * bytes, -EPROTO if the reader is armed for a data frame and the header is not that frame's
 * (a JSON frame, or a data frame of another length), -ENOMEM.
 */
ssize_t sbx_frame_reader_feed(SbxFrameReader *r, const uint8_t *buf, size_t len, char **ret_frame,
                              size_t *ret_len);

/**
 * The part of the frame being received that has not come yet, once its header is in: *@ret_room
 * bytes at the pointer returned (NULL, 0: no payload is being received). A caller may read the
 * stream straight into it, then account for what it read with sbx_frame_reader_received(),
 * which saves a copy of large payloads (a data frame's chunk).
 */
uint8_t *sbx_frame_reader_room(SbxFrameReader *r, size_t *ret_room);

/**
 * @n bytes (at most the room) were written into sbx_frame_reader_room(): sbx_frame_reader_feed()
 * of them without the copy. Returns @n, with *@ret_frame set when the frame completed, or
 * -EINVAL if @n is more than the room.
 */
ssize_t sbx_frame_reader_received(SbxFrameReader *r, size_t n, char **ret_frame, size_t *ret_len);

/**
 * Arm @r for a data frame of exactly @len bytes (1..SBX_DATA_FRAME_MAX) as the next frame: the
 * message @r just returned announced it. That frame is then returned by the next feeds like any
 * other (its payload the raw bytes, NUL-terminated too); any other header fails with -EPROTO
 * before anything is allocated. Returns 0, or -EINVAL if @len is out of range or @r is in the
 * middle of a frame or already armed (the caller's bug).
 */
int sbx_frame_reader_expect_data(SbxFrameReader *r, uint32_t len);

/** True if @r holds part of a frame or waits for an announced data frame (an EOF then is a cut
 * one, not a clean close). */
int sbx_frame_reader_pending(const SbxFrameReader *r);

/**
 * Build a frame around @payload of @len bytes: *@ret_frame (malloc'd) gets header + payload.
 * Returns 0, -EMSGSIZE if @len > SBX_FRAME_MAX or is 0, -ENOMEM.
 */
int sbx_frame_encode(const char *payload, size_t len, uint8_t **ret_frame, size_t *ret_len);

/**
 * Write the header of a data frame of @len bytes into @out (the payload follows it as it is).
 * Returns 0, or -EMSGSIZE if @len is 0 or above SBX_DATA_FRAME_MAX.
 */
int sbx_frame_data_header(size_t len, uint8_t out[4]);
