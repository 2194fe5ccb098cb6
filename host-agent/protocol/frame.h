/*
 * Framing of the guest <-> host protocol: a 4-byte big-endian payload length, then the payload
 * (one UTF-8 JSON object). Pure: no I/O, no GLib; used by both agents and by the runners' channel.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Incremental frame decoder. Bytes arrive in any fragmentation; a frame is returned once
 * complete. The payload buffer is allocated only after the length has been checked against
 * max_len, and never exceeds it.
 */
typedef struct SbxFrameReader {
    uint32_t max_len;   /* largest accepted payload (<= SBX_FRAME_MAX) */
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
 * Errors (the stream is then unusable): -EMSGSIZE if a header announces more than max_len,
 * -EBADMSG if it announces 0 bytes, -ENOMEM.
 */
ssize_t sbx_frame_reader_feed(SbxFrameReader *r, const uint8_t *buf, size_t len, char **ret_frame,
                              size_t *ret_len);

/** True if @r holds part of a frame (used to tell a clean EOF from a cut one). */
int sbx_frame_reader_pending(const SbxFrameReader *r);

/**
 * Build a frame around @payload of @len bytes: *@ret_frame (malloc'd) gets header + payload.
 * Returns 0, -EMSGSIZE if @len > SBX_FRAME_MAX or is 0, -ENOMEM.
 */
int sbx_frame_encode(const char *payload, size_t len, uint8_t **ret_frame, size_t *ret_len);
