/*
 * Fuzz target: sbx_msg_decode on arbitrary bytes. Whatever decodes must encode, and decode
 * again to the same message; encoding that must give the same bytes (encoding is canonical).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "msg-equal.h"
#include "protocol/frame.h"
#include "protocol/message.h"

static void check_round_trip(const SbxMsg *msg, size_t size)
{
    uint8_t *frame = NULL, *frame2 = NULL;
    size_t len = 0, len2 = 0;
    SbxMsg again;
    int r = sbx_msg_encode(msg, &frame, &len);

    /* Re-printing may lengthen a message (1e5 -> 100000), so a near-full frame may not fit. */
    if (r == -EMSGSIZE && size > SBX_FRAME_MAX / 4)
        return;
    FUZZ_CHECK(r == 0);
    r = sbx_msg_decode((char *)frame + SBX_FRAME_HEADER, len - SBX_FRAME_HEADER, &again, NULL);
    FUZZ_CHECK(r == 0);
    FUZZ_CHECK(test_msg_equal(msg, &again));
    r = sbx_msg_encode(&again, &frame2, &len2);
    FUZZ_CHECK(r == 0);
    FUZZ_CHECK(len == len2 && memcmp(frame, frame2, len) == 0);
    sbx_msg_clear(&again);
    free(frame);
    free(frame2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    SbxMsg msg;
    char *error = NULL;
    int r = sbx_msg_decode((const char *)data, size, &msg, &error);

    if (r == 0) {
        FUZZ_CHECK(!error);
        check_round_trip(&msg, size);
    } else {
        FUZZ_CHECK(r == -EBADMSG || r == -ENOMEM);
        FUZZ_CHECK(r != -EBADMSG || error);
    }
    sbx_msg_clear(&msg);
    free(error);
    return 0;
}
