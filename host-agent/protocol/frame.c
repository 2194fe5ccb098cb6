/*
 * Frame reader and writer: 4-byte big-endian length, then the payload; bit 31 of the length
 * marks a data frame, taken only by a reader armed for it.
 */
#include "frame.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "limits.h"

void sbx_frame_reader_init(SbxFrameReader *r, uint32_t max_len)
{
    memset(r, 0, sizeof(*r));
    r->max_len = (max_len == 0 || max_len > SBX_FRAME_MAX) ? SBX_FRAME_MAX : max_len;
}

void sbx_frame_reader_clear(SbxFrameReader *r)
{
    free(r->payload);
    r->payload = NULL;
    r->header_got = 0;
    r->length = 0;
    r->payload_got = 0;
    r->data_due = 0;
}

int sbx_frame_reader_pending(const SbxFrameReader *r)
{
    return r->header_got > 0 || r->data_due > 0;
}

int sbx_frame_reader_expect_data(SbxFrameReader *r, uint32_t len)
{
    if (len == 0 || len > SBX_DATA_FRAME_MAX || r->header_got > 0 || r->data_due > 0)
        return -EINVAL;
    r->data_due = len;
    return 0;
}

/*
 * The header is complete: check the announced length, then allocate. The check comes first so
 * that a peer announcing 4 GiB costs nothing. On error the header stays complete and the
 * payload absent, so every later feed fails the same way.
 */
static int start_payload(SbxFrameReader *r)
{
    uint32_t word = (uint32_t)r->header[0] << 24 | (uint32_t)r->header[1] << 16 |
                    (uint32_t)r->header[2] << 8 | (uint32_t)r->header[3];

    /* Armed, exactly the data frame announced; else bit 31 makes the length exceed max_len. */
    if (r->data_due > 0 && word != (SBX_FRAME_DATA | r->data_due))
        return -EPROTO;
    r->length = r->data_due > 0 ? r->data_due : word;
    if (r->length == 0)
        return -EBADMSG;
    if (r->length > r->max_len && r->data_due == 0)
        return -EMSGSIZE;
    r->payload = malloc((size_t)r->length + 1);
    if (!r->payload)
        return -ENOMEM;
    r->payload_got = 0;
    return 0;
}

/* If the payload is all in, hand it over (*@ret_frame) and get ready for the next header. */
static void complete(SbxFrameReader *r, char **ret_frame, size_t *ret_len)
{
    if (r->payload_got < r->length)
        return;
    r->payload[r->length] = '\0';
    *ret_frame = (char *)r->payload;
    *ret_len = r->length;
    r->payload = NULL;
    r->header_got = 0;
    r->length = 0;
    r->payload_got = 0;
    r->data_due = 0;
}

ssize_t sbx_frame_reader_feed(SbxFrameReader *r, const uint8_t *buf, size_t len, char **ret_frame,
                              size_t *ret_len)
{
    size_t used = 0;

    *ret_frame = NULL;
    if (len > SSIZE_MAX)
        len = SSIZE_MAX;
    while (r->header_got < SBX_FRAME_HEADER && used < len)
        r->header[r->header_got++] = buf[used++];
    if (r->header_got < SBX_FRAME_HEADER)
        return (ssize_t)used;
    if (!r->payload) {
        int ret = start_payload(r);

        if (ret < 0)
            return ret;
    }

    size_t n = r->length - r->payload_got;
    if (n > len - used)
        n = len - used;
    memcpy(r->payload + r->payload_got, buf + used, n);
    r->payload_got += n;
    used += n;
    complete(r, ret_frame, ret_len);
    return (ssize_t)used;
}

uint8_t *sbx_frame_reader_room(SbxFrameReader *r, size_t *ret_room)
{
    *ret_room = r->payload ? r->length - r->payload_got : 0;
    return r->payload ? r->payload + r->payload_got : NULL;
}

ssize_t sbx_frame_reader_received(SbxFrameReader *r, size_t n, char **ret_frame, size_t *ret_len)
{
    *ret_frame = NULL;
    if (!r->payload || n > r->length - r->payload_got || n > SSIZE_MAX)
        return -EINVAL;
    r->payload_got += n;
    complete(r, ret_frame, ret_len);
    return (ssize_t)n;
}

int sbx_frame_encode(const char *payload, size_t len, uint8_t **ret_frame, size_t *ret_len)
{
    uint8_t *f;

    if (len == 0 || len > SBX_FRAME_MAX)
        return -EMSGSIZE;
    f = malloc(SBX_FRAME_HEADER + len);
    if (!f)
        return -ENOMEM;
    f[0] = (uint8_t)(len >> 24);
    f[1] = (uint8_t)(len >> 16);
    f[2] = (uint8_t)(len >> 8);
    f[3] = (uint8_t)len;
    memcpy(f + SBX_FRAME_HEADER, payload, len);
    *ret_frame = f;
    *ret_len = SBX_FRAME_HEADER + len;
    return 0;
}

int sbx_frame_data_header(size_t len, uint8_t out[SBX_FRAME_HEADER])
{
    uint32_t word = SBX_FRAME_DATA | (uint32_t)len;

    if (len == 0 || len > SBX_DATA_FRAME_MAX)
        return -EMSGSIZE;
    out[0] = (uint8_t)(word >> 24);
    out[1] = (uint8_t)(word >> 16);
    out[2] = (uint8_t)(word >> 8);
    out[3] = (uint8_t)word;
    return 0;
}
