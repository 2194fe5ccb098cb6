/*
 * sandbox-agent: the guest agent. Listens on vsock (or a unix socket for tests), speaks the
 * protocol of docs/protocol.md with one host at a time, and runs each execution's code in a
 * language runner. In the guest it is PID 1.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* Unprivileged user that runs guest code when we are init (the image creates it). */
#define DEFAULT_RUN_AS 1000

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: sandbox-agent [OPTION]...\n"
            "  --listen-vsock PORT  listen on AF_VSOCK, any CID (default %d)\n"
            "  --listen-unix PATH   listen on a unix socket instead (tests)\n"
            "  --runners DIR        runner.mjs and runner.py (default /opt/sandbox/runners)\n"
            "  --node PATH          node binary (default /usr/bin/node)\n"
            "  --python PATH        python3 binary (default /usr/bin/python3)\n"
            "  --run-as UID|none    run code as UID (gid the same); default %d as PID 1 and\n"
            "                       root, else none\n"
            "  --no-prestart        start each runner at its execute, not one per language\n"
            "                       ahead (pre-started, warm, waiting)\n"
            "  --workspace DIR      the runners' working directory and the root of file\n"
            "                       operations; created if missing (default /workspace)\n",
            SBX_AGENT_PORT, DEFAULT_RUN_AS);
}

static int parse_number(const char *s, long max, long *ret)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max)
        return -EINVAL;
    *ret = v;
    return 0;
}

static int parse_options(int argc, char **argv, AgentOptions *o)
{
    static const struct option longopts[] = {
        {"listen-vsock", required_argument, NULL, 'v'},
        {"listen-unix", required_argument, NULL, 'u'},
        {"runners", required_argument, NULL, 'r'},
        {"node", required_argument, NULL, 'n'},
        {"python", required_argument, NULL, 'p'},
        {"run-as", required_argument, NULL, 'a'},
        {"no-prestart", no_argument, NULL, 'P'},
        {"workspace", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    long v;
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'v':
            if (parse_number(optarg, UINT32_MAX - 1, &v) < 0)
                return -EINVAL;
            o->vsock_port = (unsigned)v;
            break;
        case 'u':
            o->unix_path = optarg;
            break;
        case 'r':
            o->runners_dir = optarg;
            break;
        case 'n':
            o->node = optarg;
            break;
        case 'p':
            o->python = optarg;
            break;
        case 'a':
            if (strcmp(optarg, "none") == 0)
                o->run_as = -1;
            else if (parse_number(optarg, UINT32_MAX - 1, &o->run_as) < 0)
                return -EINVAL;
            break;
        case 'P':
            o->prestart = false;
            break;
        case 'w':
            o->workspace = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return -EINVAL;
        }
    }
    return optind == argc ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
    Agent a = {
        .opt =
            {
                .vsock_port = SBX_AGENT_PORT,
                .runners_dir = "/opt/sandbox/runners",
                .node = "/usr/bin/node",
                .python = "/usr/bin/python3",
                .prestart = true,
                .workspace = "/workspace",
            },
        .pid1 = getpid() == 1,
        .listen_fd = -1,
        .signal_fd = -1,
        .serial_fd = -1,
        .workspace_fd = -1,
        .upload = {.dir_fd = -1, .fd = -1},
    };
    int r;

    a.opt.run_as = (a.pid1 && geteuid() == 0) ? DEFAULT_RUN_AS : -1;
    if (parse_options(argc, argv, &a.opt) < 0) {
        usage(stderr);
        if (a.pid1)
            pid1_fatal(&a, "bad command line");
        return 2;
    }
    /* Orphans of user code become our children, to be killed and reaped (spawn.c); as PID 1
     * they are ours anyway. */
    if (!a.pid1 && prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        agent_log("cannot become a subreaper: %m");
    a.signal_fd = pid1_signals_init(a.pid1);
    if (a.signal_fd < 0)
        pid1_fatal(&a, "signals: %s", strerror(-a.signal_fd));
    /* The runners start before we listen, so that whoever sees us listening sees them (the
     * tests count our children). As init, under a clock far behind any hello's (agent.h). */
    if (a.pid1 && a.opt.prestart && (r = clock_set_us(PRESTART_CLOCK_US)) < 0)
        agent_log("setting the clock before pre-starting the runners: %s", strerror(-r));
    kept_init(&a);
    /* The runners start in the workspace: it must be there first. */
    files_init(&a);
    prestart_all(&a);
    a.listen_fd = listen_open(&a.opt);
    if (a.listen_fd < 0)
        pid1_fatal(&a, "listen on %s: %s", a.opt.unix_path ? a.opt.unix_path : "vsock",
                   strerror(-a.listen_fd));
    agent_log("listening on %s", a.opt.unix_path ? a.opt.unix_path : "vsock");
    /* In the guest, a virtio-serial port for the host may exist too (the profile chooses). */
    if (!a.opt.unix_path)
        serial_init(&a);
    r = agent_run(&a);
    if (r < 0)
        pid1_fatal(&a, "poll: %s", strerror(-r));
    /* Only reached outside the guest (SIGTERM/SIGINT): leave no process or socket file. */
    prestart_stop(&a);
    if (a.opt.unix_path)
        unlink(a.opt.unix_path);
    close(a.listen_fd);
    close(a.signal_fd);
    return 0;
}
