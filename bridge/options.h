/* Command line of sandbox-bridge. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "seccomp-filter.h"

/*
 * Default connection limit per VM: a sandbox runs one agent stream plus a few tool streams;
 * 64 leaves headroom and caps what a guest can make us buffer at 64 * 2 * conn_buf (32 MiB).
 */
#define OPT_DEFAULT_MAX_CONNS 64
/* Upper bound for --max-conns: beyond this the worst-case buffering (2 GiB) is unreasonable. */
#define OPT_MAX_MAX_CONNS 4096

/*
 * Default buffer per connection and direction (also the credit we give the guest): Linux's
 * own default vsock buffer (256 KiB), so the guest never stalls on us before it would on
 * itself.
 */
#define OPT_DEFAULT_CONN_BUF (256u * 1024)
/* A page at least (less makes every write a credit round trip); 64 MiB at most (memory). */
#define OPT_MIN_CONN_BUF 4096u
#define OPT_MAX_CONN_BUF (64u * 1024 * 1024)

struct options {
    const char *vhost_user_path;
    const char *uds_path;
    uint64_t guest_cid;
    int ready_fd; /* -1 = none */
    unsigned max_conns;
    uint32_t conn_buf;
    bool verbose;
    enum bridge_seccomp_mode seccomp; /* action for a system call outside the allow-list */
};

/**
 * options_parse: fill @o from argv. Returns 0, 1 when --help was asked (usage printed to
 * stdout), or -EINVAL with a message in @err (@errlen bytes).
 */
int options_parse(int argc, char **argv, struct options *o, char *err, size_t errlen);

/** options_usage: the usage text. */
const char *options_usage(void);
