/* Bounded logs: only the last bytes are kept, and what is shown is printable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>
#include <unistd.h>

#include "base/logring.h"
#include "test-util.h"

static void test_keeps_last_bytes(void **state)
{
    g_autoptr(SbxLogRing) r = sbx_log_ring_new(-1, 8, -1, 0);
    g_autofree char *t1 = NULL, *t2 = NULL, *t3 = NULL;

    (void)state;
    sbx_log_ring_append(r, "abc", 3);
    t1 = sbx_log_ring_text(r);
    assert_string_equal(t1, "abc");
    sbx_log_ring_append(r, "defghij", 7);
    t2 = sbx_log_ring_text(r);
    assert_string_equal(t2, "cdefghij");
    sbx_log_ring_append(r, "0123456789ABCDEF", 16);
    t3 = sbx_log_ring_text(r);
    assert_string_equal(t3, "89ABCDEF");
    assert_int_equal(sbx_log_ring_total(r), 26);
}

static void test_sanitize(void **state)
{
    g_autofree char *a = sbx_log_sanitize("ok\n\ttab\r\x1b[2Jx\x7f", 14);
    g_autofree char *b = sbx_log_sanitize("caf\xc3\xa9 \xff!", 8);

    (void)state;
    assert_string_equal(a, "ok\n\ttab\\x1b[2Jx\\x7f");
    assert_string_equal(b, "caf\xc3\xa9 \xef\xbf\xbd!"); /* invalid byte -> U+FFFD */
}

static void test_tail_lines(void **state)
{
    g_autoptr(SbxLogRing) r = sbx_log_ring_new(-1, 1024, -1, 0);
    g_autofree char *t = NULL, *all = NULL;

    (void)state;
    sbx_log_ring_append(r, "1\n2\n3\n4\n", 8);
    t = sbx_log_ring_tail_lines(r, 2);
    assert_string_equal(t, "3\n4");
    all = sbx_log_ring_tail_lines(r, 10);
    assert_string_equal(all, "1\n2\n3\n4");
}

static void test_reads_fd_bounded(void **state)
{
    g_autoptr(SbxLogRing) r = NULL;
    g_autofree char *big = g_strnfill(100000, 'x');
    g_autofree char *text = NULL;
    int fds[2];

    (void)state;
    assert_int_equal(pipe(fds), 0);
    r = sbx_log_ring_new(fds[0], 1000, -1, 0);
    assert_int_equal(write(fds[1], big, 60000), 60000);
    run_for(50);
    assert_int_equal(write(fds[1], "END", 3), 3);
    close(fds[1]);
    run_for(50);
    sbx_log_ring_finish(r);
    text = sbx_log_ring_text(r);
    assert_int_equal(strlen(text), 1000);
    assert_true(g_str_has_suffix(text, "xxEND"));
    assert_int_equal(sbx_log_ring_total(r), 60003);
}

static void test_copy_is_capped(void **state)
{
    g_autoptr(SbxLogRing) r = NULL;
    char buf[256] = "";
    int out[2];
    ssize_t n;

    (void)state;
    assert_int_equal(pipe(out), 0);
    r = sbx_log_ring_new(-1, 64, out[1], 10);
    sbx_log_ring_append(r, "0123456789abcdef", 16);
    sbx_log_ring_append(r, "more", 4);
    close(out[1]);
    n = read(out[0], buf, sizeof buf - 1);
    close(out[0]);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_true(g_str_has_prefix(buf, "0123456789\n[... console copy truncated]"));
    assert_null(strstr(buf, "more"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keeps_last_bytes), cmocka_unit_test(test_sanitize),
        cmocka_unit_test(test_tail_lines),       cmocka_unit_test(test_reads_fd_bounded),
        cmocka_unit_test(test_copy_is_capped),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
