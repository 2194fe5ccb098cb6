/*
 * Fuzz target: bytes through the frame reader in fragments of 1..143 bytes (as systemd's
 * fuzz-varlink does), decoding every frame it yields, as a connection's reader does: a message
 * that announces data arms the reader, and the data frame that comes is attached to it. Some
 * payload bytes go through the reader's room (sbx_frame_reader_room()) instead of a feed.
 *
 * Input: byte 0 seeds the fragment sizes and picks the reader's limit; the rest is the stream.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "protocol/frame.h"
#include "protocol/message.h"

/* A small limit as well as the real one, so that -EMSGSIZE paths are reached quickly. */
#define SMALL_FRAME_MAX 512

/* The message that announced the data frame now due, if waiting. */
static SbxMsg pending;
static bool waiting;

/* A JSON frame: decode it; one that announces data waits for it, the reader armed. */
static void decode_frame(SbxFrameReader *r, char *frame, size_t len)
{
    SbxMsg msg;
    char *error = NULL;
    int ret = sbx_msg_decode(frame, len, &msg, &error);

    FUZZ_CHECK(ret == 0 || ret == -EBADMSG || ret == -ENOMEM);
    FUZZ_CHECK(ret == 0 || msg.type == 0);
    if (ret == 0 && sbx_msg_data_len(&msg) > 0) {
        FUZZ_CHECK(sbx_msg_data_len(&msg) <= SBX_DATA_FRAME_MAX);
        FUZZ_CHECK(sbx_frame_reader_expect_data(r, (uint32_t)sbx_msg_data_len(&msg)) == 0);
        FUZZ_CHECK(sbx_frame_reader_pending(r));
        pending = msg;
        waiting = true;
    } else {
        sbx_msg_clear(&msg);
    }
    free(error);
    free(frame);
}

/* The data frame the pending message announced: exactly its length, attached to it. */
static void attach_data(char *frame, size_t len)
{
    FUZZ_CHECK(len == sbx_msg_data_len(&pending));
    FUZZ_CHECK(sbx_msg_attach_data(&pending, (uint8_t *)frame, len) == 0);
    sbx_msg_clear(&pending);
    waiting = false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    SbxFrameReader r;
    uint32_t seed;
    size_t pos = 1;

    if (size < 1)
        return 0;
    seed = data[0];
    sbx_frame_reader_init(&r, (data[0] & 1) ? SMALL_FRAME_MAX : 0);
    while (pos < size) {
        /* A linear congruential generator is enough to vary the cuts reproducibly. */
        seed = seed * 1103515245u + 12345u;
        size_t frag = 1 + (seed >> 16) % 143, end = pos + frag < size ? pos + frag : size;

        while (pos < end) {
            char *frame = NULL;
            size_t len = 0, room_len = 0;
            uint8_t *room = sbx_frame_reader_room(&r, &room_len);
            ssize_t n;

            /* Half the fragments of a payload are read into its room, as the guest's link does. */
            if (room && (seed & 0x100)) {
                size_t k = room_len < end - pos ? room_len : end - pos;
                memcpy(room, data + pos, k);
                n = sbx_frame_reader_received(&r, k, &frame, &len);
                FUZZ_CHECK(n == (ssize_t)k);
            } else {
                n = sbx_frame_reader_feed(&r, data + pos, end - pos, &frame, &len);
            }

            if (n < 0) {
                /* -EPROTO only when armed: anything but the data frame announced */
                FUZZ_CHECK(n == -EMSGSIZE || n == -EBADMSG || n == -ENOMEM ||
                           (n == -EPROTO && waiting));
                FUZZ_CHECK(!frame);
                goto out;
            }
            FUZZ_CHECK(n > 0 && (size_t)n <= end - pos);
            pos += (size_t)n;
            if (frame && waiting) {
                attach_data(frame, len);
            } else if (frame) {
                FUZZ_CHECK(len >= 1 && len <= r.max_len && frame[len] == '\0');
                decode_frame(&r, frame, len);
            }
        }
    }
    /* the stream may end before an announced data frame: a cut connection */
    FUZZ_CHECK(!waiting || sbx_frame_reader_pending(&r));
out:
    sbx_msg_clear(&pending);
    waiting = false;
    sbx_frame_reader_clear(&r);
    return 0;
}
