/*
 * Fuzz target: bytes through the frame reader in fragments of 1..143 bytes (as systemd's
 * fuzz-varlink does), decoding every frame it yields.
 *
 * Input: byte 0 seeds the fragment sizes and picks the reader's limit; the rest is the stream.
 */
#include <errno.h>
#include <stdlib.h>

#include "fuzz.h"
#include "protocol/frame.h"
#include "protocol/message.h"

/* A small limit as well as the real one, so that -EMSGSIZE paths are reached quickly. */
#define SMALL_FRAME_MAX 512

static void decode_frame(char *frame, size_t len)
{
    SbxMsg msg;
    char *error = NULL;
    int r = sbx_msg_decode(frame, len, &msg, &error);

    FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOMEM);
    FUZZ_CHECK(r == 0 || msg.type == 0);
    sbx_msg_clear(&msg);
    free(error);
    free(frame);
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
            size_t len = 0;
            ssize_t n = sbx_frame_reader_feed(&r, data + pos, end - pos, &frame, &len);

            if (n < 0) {
                FUZZ_CHECK(n == -EMSGSIZE || n == -EBADMSG || n == -ENOMEM);
                FUZZ_CHECK(!frame);
                sbx_frame_reader_clear(&r);
                return 0;
            }
            FUZZ_CHECK(n > 0 && (size_t)n <= end - pos);
            pos += (size_t)n;
            if (frame) {
                FUZZ_CHECK(len >= 1 && len <= r.max_len && frame[len] == '\0');
                decode_frame(frame, len);
            }
        }
    }
    sbx_frame_reader_clear(&r);
    return 0;
}
