/*
 * Unit tests of the frame reader and writer (host-agent/protocol/frame.c).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "protocol/frame.h"
#include "protocol/limits.h"

/* Encode @payload as a frame; the test owns the result. */
static uint8_t *frame_of(const char *payload, size_t *ret_len)
{
    uint8_t *f = NULL;

    assert_int_equal(sbx_frame_encode(payload, strlen(payload), &f, ret_len), 0);
    return f;
}

static void test_encode_header(void **state)
{
    size_t len;
    uint8_t *f = frame_of("{\"a\":1}", &len);

    (void)state;
    assert_int_equal(len, 4 + 7);
    assert_memory_equal(f, "\0\0\0\x07{\"a\":1}", len);
    free(f);
}

static void test_encode_limits(void **state)
{
    static const char byte = '{';
    uint8_t *f = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(sbx_frame_encode(&byte, 0, &f, &len), -EMSGSIZE);
    /* The length is checked before the payload is read, so a 1-byte buffer is enough. */
    assert_int_equal(sbx_frame_encode(&byte, SBX_FRAME_MAX + 1, &f, &len), -EMSGSIZE);
    assert_null(f);
}

static void test_feed_whole(void **state)
{
    size_t len, flen = 0;
    uint8_t *f = frame_of("{\"type\":\"ping\"}", &len);
    char *frame = NULL;
    SbxFrameReader r;

    (void)state;
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(r.max_len, SBX_FRAME_MAX);
    assert_int_equal(sbx_frame_reader_feed(&r, f, len, &frame, &flen), len);
    assert_non_null(frame);
    assert_int_equal(flen, len - 4);
    assert_string_equal(frame, "{\"type\":\"ping\"}");
    assert_false(sbx_frame_reader_pending(&r));
    free(frame);
    free(f);
    sbx_frame_reader_clear(&r);
}

/* Two frames, one byte per call: each completes exactly on its last byte. */
static void test_feed_one_byte_at_a_time(void **state)
{
    size_t l1, l2, got = 0;
    uint8_t *f1 = frame_of("{\"n\":1}", &l1), *f2 = frame_of("{\"n\":22}", &l2);
    uint8_t *both = malloc(l1 + l2);
    const char *want[] = {"{\"n\":1}", "{\"n\":22}"};
    SbxFrameReader r;

    (void)state;
    memcpy(both, f1, l1);
    memcpy(both + l1, f2, l2);
    sbx_frame_reader_init(&r, 0);
    for (size_t i = 0; i < l1 + l2; i++) {
        char *frame = NULL;
        size_t flen = 0;

        assert_int_equal(sbx_frame_reader_feed(&r, both + i, 1, &frame, &flen), 1);
        if (i == l1 - 1 || i == l1 + l2 - 1) {
            assert_non_null(frame);
            assert_string_equal(frame, want[got++]);
            free(frame);
        } else {
            assert_null(frame);
            assert_true(sbx_frame_reader_pending(&r));
        }
    }
    assert_int_equal(got, 2);
    assert_false(sbx_frame_reader_pending(&r));
    sbx_frame_reader_clear(&r);
    free(both);
    free(f1);
    free(f2);
}

/* Two frames in one buffer: the first call stops at the end of the first frame. */
static void test_feed_two_in_one_buffer(void **state)
{
    size_t l1, l2, flen = 0;
    uint8_t *f1 = frame_of("{\"n\":1}", &l1), *f2 = frame_of("{\"n\":22}", &l2);
    uint8_t *both = malloc(l1 + l2);
    char *frame = NULL;
    SbxFrameReader r;

    (void)state;
    memcpy(both, f1, l1);
    memcpy(both + l1, f2, l2);
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(sbx_frame_reader_feed(&r, both, l1 + l2, &frame, &flen), l1);
    assert_string_equal(frame, "{\"n\":1}");
    free(frame);
    assert_int_equal(sbx_frame_reader_feed(&r, both + l1, l2, &frame, &flen), l2);
    assert_string_equal(frame, "{\"n\":22}");
    assert_int_equal(flen, 8);
    free(frame);
    assert_int_equal(sbx_frame_reader_feed(&r, both, 0, &frame, &flen), 0);
    assert_null(frame);
    sbx_frame_reader_clear(&r);
    free(both);
    free(f1);
    free(f2);
}

static void test_zero_length(void **state)
{
    static const uint8_t hdr[4] = {0, 0, 0, 0};
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(sbx_frame_reader_feed(&r, hdr, 4, &frame, &flen), -EBADMSG);
    assert_null(frame);
    /* The stream stays broken. */
    assert_int_equal(sbx_frame_reader_feed(&r, hdr, 4, &frame, &flen), -EBADMSG);
    sbx_frame_reader_clear(&r);
}

/* A header announcing 4 GiB fails on its 4th byte, before any payload buffer exists. */
static void test_oversize_before_allocation(void **state)
{
    static const uint8_t hdr[8] = {0xff, 0xff, 0xff, 0xff, '{', '}', 0, 0};
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(sbx_frame_reader_feed(&r, hdr, 3, &frame, &flen), 3);
    assert_int_equal(sbx_frame_reader_feed(&r, hdr + 3, 5, &frame, &flen), -EMSGSIZE);
    assert_null(r.payload);
    assert_null(frame);
    sbx_frame_reader_clear(&r);
}

/* A reader's own limit: max_len is accepted, max_len + 1 is not. */
static void test_custom_limit(void **state)
{
    static const uint8_t at_max[4] = {0, 0, 0, 100}, over[4] = {0, 0, 0, 101};
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 100);
    assert_int_equal(sbx_frame_reader_feed(&r, at_max, 4, &frame, &flen), 4);
    assert_non_null(r.payload);
    sbx_frame_reader_clear(&r);
    sbx_frame_reader_init(&r, 100);
    assert_int_equal(sbx_frame_reader_feed(&r, over, 4, &frame, &flen), -EMSGSIZE);
    sbx_frame_reader_clear(&r);
    sbx_frame_reader_init(&r, UINT32_MAX);
    assert_int_equal(r.max_len, SBX_FRAME_MAX);
}

/* clear() frees a partial frame (LeakSanitizer checks it in the sanitizer build). */
static void test_clear_partial(void **state)
{
    static const uint8_t part[6] = {0, 0, 0, 10, '{', '"'};
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(sbx_frame_reader_feed(&r, part, 6, &frame, &flen), 6);
    assert_true(sbx_frame_reader_pending(&r));
    sbx_frame_reader_clear(&r);
    assert_false(sbx_frame_reader_pending(&r));
    assert_null(r.payload);
}

/* ---- data frames ---------------------------------------------------------------------------- */

static void test_data_header(void **state)
{
    uint8_t h[4] = {0};

    (void)state;
    assert_int_equal(sbx_frame_data_header(1, h), 0);
    assert_memory_equal(h, "\x80\0\0\x01", 4);
    assert_int_equal(sbx_frame_data_header(SBX_DATA_FRAME_MAX, h), 0);
    assert_memory_equal(h, "\x80\x10\0\0", 4); /* 1 MiB */
    memset(h, 0, sizeof(h));
    assert_int_equal(sbx_frame_data_header(0, h), -EMSGSIZE);
    assert_int_equal(sbx_frame_data_header(SBX_DATA_FRAME_MAX + 1, h), -EMSGSIZE);
    assert_int_equal(sbx_frame_data_header((size_t)UINT32_MAX + 2, h), -EMSGSIZE);
    assert_memory_equal(h, "\0\0\0\0", 4);
}

/* A reader that was not armed refuses a data frame's header like any length above its limit,
 * on the header's 4th byte, before any buffer: the runners' channel, serve's socket. */
static void test_data_unarmed(void **state)
{
    static const uint8_t one[5] = {0x80, 0, 0, 1, 'x'}, empty[4] = {0x80, 0, 0, 0};
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(sbx_frame_reader_feed(&r, one, 3, &frame, &flen), 3);
    assert_int_equal(sbx_frame_reader_feed(&r, one + 3, 2, &frame, &flen), -EMSGSIZE);
    assert_null(r.payload);
    assert_null(frame);
    assert_int_equal(sbx_frame_reader_feed(&r, one + 4, 1, &frame, &flen), -EMSGSIZE);
    sbx_frame_reader_clear(&r);
    sbx_frame_reader_init(&r, 0);
    assert_int_equal(sbx_frame_reader_feed(&r, empty, 4, &frame, &flen), -EMSGSIZE);
    sbx_frame_reader_clear(&r);
}

/* A JSON frame, its data frame (bytes that are no JSON: NULs, 0xff) and the next JSON frame,
 * @step bytes per feed (0: all at once); the reader is armed once the first frame is out. */
static void feed_message_and_data(size_t step)
{
    size_t l1, l2, total, got = 0, off = 0;
    uint8_t *f1 = frame_of("{\"n\":1}", &l1), *f2 = frame_of("{\"n\":2}", &l2);
    static const uint8_t data[6] = {0, 0xff, '{', 0, 0x80, '\n'};
    uint8_t *all = malloc(l1 + 4 + sizeof(data) + l2);
    SbxFrameReader r;

    memcpy(all, f1, l1);
    assert_int_equal(sbx_frame_data_header(sizeof(data), all + l1), 0);
    memcpy(all + l1 + 4, data, sizeof(data));
    memcpy(all + l1 + 4 + sizeof(data), f2, l2);
    total = l1 + 4 + sizeof(data) + l2;
    sbx_frame_reader_init(&r, 0);
    while (off < total) {
        char *frame = NULL;
        size_t flen = 0, n = step == 0 || step > total - off ? total - off : step;
        ssize_t used = sbx_frame_reader_feed(&r, all + off, n, &frame, &flen);

        assert_true(used > 0);
        off += (size_t)used;
        if (!frame) {
            assert_true(sbx_frame_reader_pending(&r));
            continue;
        }
        if (got == 0) {
            assert_string_equal(frame, "{\"n\":1}");
            assert_int_equal(off, l1);
            assert_false(sbx_frame_reader_pending(&r));
            assert_int_equal(sbx_frame_reader_expect_data(&r, sizeof(data)), 0);
            assert_true(sbx_frame_reader_pending(&r)); /* an EOF now would cut the data */
        } else if (got == 1) {
            assert_int_equal(flen, sizeof(data));
            assert_memory_equal(frame, data, sizeof(data));
            assert_int_equal(frame[flen], '\0');
            assert_int_equal(r.data_due, 0);
        } else {
            assert_string_equal(frame, "{\"n\":2}");
        }
        got++;
        free(frame);
    }
    assert_int_equal(got, 3);
    assert_false(sbx_frame_reader_pending(&r));
    sbx_frame_reader_clear(&r);
    free(all);
    free(f1);
    free(f2);
}

static void test_data_after_message(void **state)
{
    (void)state;
    feed_message_and_data(0);
    feed_message_and_data(1);
    feed_message_and_data(3);
    feed_message_and_data(7);
}

/* Armed, anything but the data frame announced fails on its header's 4th byte, unallocated:
 * a JSON frame, a data frame one byte shorter or longer, an empty one. Armed only once. */
static void test_data_wrong_header(void **state)
{
    static const uint8_t headers[][4] = {
        {0, 0, 0, 10}, {0x80, 0, 0, 9}, {0x80, 0, 0, 11}, {0x80, 0, 0, 0}, {0, 0, 0, 0},
    };
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        sbx_frame_reader_init(&r, 0);
        assert_int_equal(sbx_frame_reader_expect_data(&r, 10), 0);
        assert_int_equal(sbx_frame_reader_feed(&r, headers[i], 4, &frame, &flen), -EPROTO);
        assert_null(r.payload);
        assert_null(frame);
        /* sticky */
        assert_int_equal(sbx_frame_reader_feed(&r, headers[i], 1, &frame, &flen), -EPROTO);
        sbx_frame_reader_clear(&r);
        assert_int_equal(r.data_due, 0);
    }
}

/* Data frames have their own limit, not the reader's (a reader of small JSON frames may take a
 * full chunk); arming checks it, and refuses a reader in the middle of a frame. */
static void test_data_limits(void **state)
{
    static const uint8_t part[2] = {0, 0};
    uint8_t h[4];
    SbxFrameReader r;
    char *frame = NULL;
    size_t flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 100);
    assert_int_equal(sbx_frame_reader_expect_data(&r, 0), -EINVAL);
    assert_int_equal(sbx_frame_reader_expect_data(&r, SBX_DATA_FRAME_MAX + 1), -EINVAL);
    assert_int_equal(sbx_frame_reader_expect_data(&r, SBX_DATA_FRAME_MAX), 0);
    assert_int_equal(sbx_frame_reader_expect_data(&r, 1), -EINVAL); /* already armed */
    assert_int_equal(sbx_frame_data_header(SBX_DATA_FRAME_MAX, h), 0);
    assert_int_equal(sbx_frame_reader_feed(&r, h, 4, &frame, &flen), 4);
    assert_non_null(r.payload);
    assert_null(frame);
    sbx_frame_reader_clear(&r); /* frees the partial data frame, disarms */
    assert_false(sbx_frame_reader_pending(&r));
    assert_int_equal(sbx_frame_reader_feed(&r, part, 2, &frame, &flen), 2);
    assert_int_equal(sbx_frame_reader_expect_data(&r, 1), -EINVAL); /* in a header */
    sbx_frame_reader_clear(&r);
}

/* A payload read straight into the reader's room (no copy): the same frame as when fed. */
static void test_room(void **state)
{
    uint8_t h[4], *room;
    SbxFrameReader r;
    char *frame = NULL;
    size_t n = 1, flen = 0;

    (void)state;
    sbx_frame_reader_init(&r, 0);
    assert_null(sbx_frame_reader_room(&r, &n)); /* no header yet */
    assert_int_equal(n, 0);
    assert_int_equal(sbx_frame_reader_received(&r, 1, &frame, &flen), -EINVAL);
    assert_int_equal(sbx_frame_reader_expect_data(&r, 10), 0);
    assert_int_equal(sbx_frame_data_header(10, h), 0);
    assert_int_equal(sbx_frame_reader_feed(&r, h, 4, &frame, &flen), 4);
    assert_int_equal(sbx_frame_reader_feed(&r, (const uint8_t *)"ab", 2, &frame, &flen), 2);
    room = sbx_frame_reader_room(&r, &n);
    assert_non_null(room);
    assert_int_equal(n, 8);
    memcpy(room, "cdef", 4);
    assert_int_equal(sbx_frame_reader_received(&r, 4, &frame, &flen), 4);
    assert_null(frame);
    room = sbx_frame_reader_room(&r, &n);
    assert_int_equal(n, 4);
    assert_int_equal(sbx_frame_reader_received(&r, 5, &frame, &flen), -EINVAL); /* past it */
    memcpy(room, "ghij", 4);
    assert_int_equal(sbx_frame_reader_received(&r, 4, &frame, &flen), 4);
    assert_non_null(frame);
    assert_int_equal(flen, 10);
    assert_string_equal(frame, "abcdefghij");
    assert_false(sbx_frame_reader_pending(&r));
    assert_null(sbx_frame_reader_room(&r, &n));
    free(frame);
    sbx_frame_reader_clear(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_header),
        cmocka_unit_test(test_encode_limits),
        cmocka_unit_test(test_feed_whole),
        cmocka_unit_test(test_feed_one_byte_at_a_time),
        cmocka_unit_test(test_feed_two_in_one_buffer),
        cmocka_unit_test(test_zero_length),
        cmocka_unit_test(test_oversize_before_allocation),
        cmocka_unit_test(test_custom_limit),
        cmocka_unit_test(test_clear_partial),
        cmocka_unit_test(test_data_header),
        cmocka_unit_test(test_data_unarmed),
        cmocka_unit_test(test_data_after_message),
        cmocka_unit_test(test_data_wrong_header),
        cmocka_unit_test(test_data_limits),
        cmocka_unit_test(test_room),
    };

    return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
