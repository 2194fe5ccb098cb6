/* sandbox-bridge's command line: what is accepted, and that every bad value is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "options.h"

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])) - 1)

static int parse(char **argv, int argc, struct options *o)
{
    char err[256] = "";
    int r = options_parse(argc, argv, o, err, sizeof(err));
    if (r < 0)
        assert_true(strlen(err) > 0); /* every refusal says why */
    return r;
}

static void test_minimal(void **state)
{
    (void)state;
    char *argv[] = {"b", "--vhost-user", "/tmp/v", "--uds", "/tmp/u", "--guest-cid", "3", NULL};
    struct options o;
    assert_int_equal(parse(argv, ARGC(argv), &o), 0);
    assert_string_equal(o.vhost_user_path, "/tmp/v");
    assert_string_equal(o.uds_path, "/tmp/u");
    assert_int_equal(o.guest_cid, 3);
    assert_int_equal(o.ready_fd, -1);
    assert_int_equal(o.max_conns, OPT_DEFAULT_MAX_CONNS);
    assert_int_equal(o.conn_buf, OPT_DEFAULT_CONN_BUF);
    assert_false(o.verbose);
    assert_int_equal(o.seccomp, BRIDGE_SECCOMP_KILL);
}

static void test_all(void **state)
{
    (void)state;
    char *argv[] = {"b",           "--vhost-user", "/v",         "--uds",     "/u",
                    "--guest-cid", "4294967294",   "--ready-fd", "7",         "--max-conns",
                    "10",          "--conn-buf",   "65536",      "--verbose", "--seccomp=log",
                    NULL};
    struct options o;
    assert_int_equal(parse(argv, ARGC(argv), &o), 0);
    assert_int_equal(o.guest_cid, 4294967294u);
    assert_int_equal(o.ready_fd, 7);
    assert_int_equal(o.max_conns, 10);
    assert_int_equal(o.conn_buf, 65536);
    assert_true(o.verbose);
    assert_int_equal(o.seccomp, BRIDGE_SECCOMP_LOG);
}

static void test_seccomp(void **state)
{
    (void)state;
    struct options o;
    char *kill[] = {"b", "--vhost-user", "/v",   "--uds", "/u", "--guest-cid",
                    "3", "--seccomp",    "kill", NULL};
    assert_int_equal(parse(kill, ARGC(kill), &o), 0);
    assert_int_equal(o.seccomp, BRIDGE_SECCOMP_KILL);
    /* The last one wins, like every other option. */
    char *both[] = {"b",
                    "--vhost-user",
                    "/v",
                    "--uds",
                    "/u",
                    "--guest-cid",
                    "3",
                    "--seccomp=log",
                    "--seccomp=kill",
                    NULL};
    assert_int_equal(parse(both, ARGC(both), &o), 0);
    assert_int_equal(o.seccomp, BRIDGE_SECCOMP_KILL);
}

static void test_help(void **state)
{
    (void)state;
    char *argv[] = {"b", "--help", NULL};
    struct options o;
    assert_int_equal(parse(argv, ARGC(argv), &o), 1);
    assert_non_null(strstr(options_usage(), "--vhost-user"));
}

static void expect_bad(const char *opt, const char *val)
{
    char *argv[] = {"b", "--vhost-user", "/v",        "--uds", "/u", "--guest-cid",
                    "3", (char *)opt,    (char *)val, NULL};
    struct options o;
    assert_int_equal(parse(argv, val ? ARGC(argv) : ARGC(argv) - 1, &o), -EINVAL);
}

static void test_bad_values(void **state)
{
    (void)state;
    const char *cids[] = {"0", "1", "2", "4294967295", "-3", "3x", "", "abc", " 3"};
    for (size_t i = 0; i < sizeof(cids) / sizeof(cids[0]); i++)
        expect_bad("--guest-cid", cids[i]);
    expect_bad("--max-conns", "0");
    expect_bad("--max-conns", "4097");
    expect_bad("--conn-buf", "4095");
    expect_bad("--conn-buf", "67108865");
    expect_bad("--conn-buf", "99999999999999999999999");
    expect_bad("--ready-fd", "-1");
    expect_bad("--seccomp", "off");
    expect_bad("--seccomp", "");
    expect_bad("--seccomp", "LOG");
    expect_bad("--seccomp", NULL);
    expect_bad("--bogus", NULL);
    expect_bad("extra-argument", NULL);
}

static void test_missing(void **state)
{
    (void)state;
    struct options o;
    char *no_cid[] = {"b", "--vhost-user", "/v", "--uds", "/u", NULL};
    assert_int_equal(parse(no_cid, ARGC(no_cid), &o), -EINVAL);
    char *no_uds[] = {"b", "--vhost-user", "/v", "--guest-cid", "3", NULL};
    assert_int_equal(parse(no_uds, ARGC(no_uds), &o), -EINVAL);
    char *no_vu[] = {"b", "--uds", "/u", "--guest-cid", "3", NULL};
    assert_int_equal(parse(no_vu, ARGC(no_vu), &o), -EINVAL);
    char *same[] = {"b", "--vhost-user", "/s", "--uds", "/s", "--guest-cid", "3", NULL};
    assert_int_equal(parse(same, ARGC(same), &o), -EINVAL);
    char *novalue[] = {"b", "--vhost-user", "/v", "--uds", "/u", "--guest-cid", NULL};
    assert_int_equal(parse(novalue, ARGC(novalue), &o), -EINVAL);
}

static void test_path_too_long(void **state)
{
    (void)state;
    /* sun_path is 108 bytes; --uds also needs room for "_4294967295". */
    char longp[100];
    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = 0;
    struct options o;
    char *argv[] = {"b", "--vhost-user", "/v", "--uds", longp, "--guest-cid", "3", NULL};
    assert_int_equal(parse(argv, ARGC(argv), &o), -EINVAL);
    char *ok[] = {"b", "--vhost-user", longp, "--uds", "/u", "--guest-cid", "3", NULL};
    assert_int_equal(parse(ok, ARGC(ok), &o), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal), cmocka_unit_test(test_all),
        cmocka_unit_test(test_help),    cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_missing), cmocka_unit_test(test_path_too_long),
        cmocka_unit_test(test_seccomp),
    };
    return cmocka_run_group_tests_name("bridge-options", tests, NULL, NULL);
}
