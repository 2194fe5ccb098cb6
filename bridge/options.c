/* Command-line parsing: pure, so every rejection is unit-tested. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

/* Room needed after the --uds path for "_<port>" (guest connections to host ports). */
#define PORT_SUFFIX_LEN (sizeof("_4294967295") - 1)

const char *options_usage(void)
{
    return "usage: sandbox-bridge --vhost-user PATH --uds PATH --guest-cid N [--ready-fd FD]\n"
           "                      [--max-conns N] [--conn-buf BYTES] [--seccomp=kill|log]\n"
           "                      [--verbose]\n"
           "  --vhost-user PATH  listen here for QEMU's vhost-user-vsock connection\n"
           "  --uds PATH         listen here for host clients (\"CONNECT <port>\\n\");\n"
           "                     guest connections to host port P go to PATH_P\n"
           "  --guest-cid N      the guest's vsock CID (3 .. 4294967294)\n"
           "  --ready-fd FD      write \"READY\\n\" here once both sockets listen and seccomp is\n"
           "                     on, then close it\n"
           "  --max-conns N      connections per VM (default 64, max 4096)\n"
           "  --conn-buf BYTES   buffer per connection and direction (default 262144)\n"
           "  --seccomp=kill     a system call outside the bridge's allow-list kills it (default)\n"
           "  --seccomp=log      let it through and have the kernel log it (development only)\n"
           "  --verbose          log the vhost-user conversation and statistics to stderr\n";
}

/* Parse a whole decimal number in [min, max]. */
static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -EINVAL;
    *ret = v;
    return 0;
}

static int fail(char *err, size_t errlen, const char *fmt, const char *arg)
{
    snprintf(err, errlen, fmt, arg ? arg : "");
    return -EINVAL;
}

static int check_path(const char *p, size_t extra, const char *what, char *err, size_t errlen)
{
    if (!p || !*p)
        return fail(err, errlen, "missing %s PATH", what);
    if (strlen(p) + extra >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return fail(err, errlen, "%s path is too long for a unix socket", what);
    return 0;
}

static int set_number(int opt, const char *arg, struct options *o, char *err, size_t errlen)
{
    uint64_t v;
    switch (opt) {
    case 'c':
        if (parse_u64(arg, 3, 0xfffffffeu, &v) < 0)
            return fail(err, errlen, "--guest-cid: '%s' is not a CID in 3..4294967294", arg);
        o->guest_cid = v;
        return 0;
    case 'r':
        if (parse_u64(arg, 0, 0x7fffffff, &v) < 0)
            return fail(err, errlen, "--ready-fd: '%s' is not a file descriptor", arg);
        o->ready_fd = (int)v;
        return 0;
    case 'm':
        if (parse_u64(arg, 1, OPT_MAX_MAX_CONNS, &v) < 0)
            return fail(err, errlen, "--max-conns: '%s' is not in 1..4096", arg);
        o->max_conns = (unsigned)v;
        return 0;
    case 'b':
        if (parse_u64(arg, OPT_MIN_CONN_BUF, OPT_MAX_CONN_BUF, &v) < 0)
            return fail(err, errlen, "--conn-buf: '%s' is not in 4096..67108864", arg);
        o->conn_buf = (uint32_t)v;
        return 0;
    }
    return fail(err, errlen, "internal: unknown option", NULL);
}

static int set_seccomp(const char *arg, struct options *o, char *err, size_t errlen)
{
    if (strcmp(arg, "kill") == 0)
        o->seccomp = BRIDGE_SECCOMP_KILL;
    else if (strcmp(arg, "log") == 0)
        o->seccomp = BRIDGE_SECCOMP_LOG;
    else
        return fail(err, errlen, "--seccomp: '%s' is neither kill nor log", arg);
    return 0;
}

int options_parse(int argc, char **argv, struct options *o, char *err, size_t errlen)
{
    static const struct option longopts[] = {
        {"vhost-user", required_argument, NULL, 'v'},
        {"uds", required_argument, NULL, 'u'},
        {"guest-cid", required_argument, NULL, 'c'},
        {"ready-fd", required_argument, NULL, 'r'},
        {"max-conns", required_argument, NULL, 'm'},
        {"conn-buf", required_argument, NULL, 'b'},
        {"seccomp", required_argument, NULL, 's'},
        {"verbose", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct options){
        .ready_fd = -1, .max_conns = OPT_DEFAULT_MAX_CONNS, .conn_buf = OPT_DEFAULT_CONN_BUF};
    bool have_cid = false;
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int r = 0;
        if (opt == 'v')
            o->vhost_user_path = optarg;
        else if (opt == 'u')
            o->uds_path = optarg;
        else if (opt == 's')
            r = set_seccomp(optarg, o, err, errlen);
        else if (opt == 'V')
            o->verbose = true;
        else if (opt == 'h')
            return 1;
        else if (opt == '?')
            return fail(err, errlen, "unknown option or missing value: %s", argv[optind - 1]);
        else
            r = set_number(opt, optarg, o, err, errlen);
        if (r < 0)
            return r;
        have_cid = have_cid || opt == 'c';
    }
    if (optind < argc)
        return fail(err, errlen, "unexpected argument: %s", argv[optind]);
    if (check_path(o->vhost_user_path, 0, "--vhost-user", err, errlen) < 0 ||
        check_path(o->uds_path, PORT_SUFFIX_LEN, "--uds", err, errlen) < 0)
        return -EINVAL;
    if (!have_cid)
        return fail(err, errlen, "missing --guest-cid N", NULL);
    if (strcmp(o->vhost_user_path, o->uds_path) == 0)
        return fail(err, errlen, "--vhost-user and --uds must differ", NULL);
    return 0;
}
