/*
 * stdout and stderr of the runner: each read becomes one `output` frame, at once, so the host
 * sees output live. Bytes past the execution's output limit are read (so the program is never
 * blocked by a full pipe) and dropped, and the done says so (output_truncated).
 */
#include <errno.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* How many of @n new bytes still fit under the limit; the rest is dropped. */
static size_t admit(Exec *e, size_t n)
{
    uint64_t room = e->out_limit > e->out_used ? e->out_limit - e->out_used : 0;
    size_t keep = room < n ? (size_t)room : n;

    e->out_used += keep;
    if (keep < n)
        e->truncated = true;
    return keep;
}

int output_read(Agent *a, SbxStream stream)
{
    Exec *e = a->exec;
    uint8_t buf[SBX_OUTPUT_CHUNK_MAX];
    SbxMsg m = {.type = SBX_MSG_OUTPUT};
    ssize_t n;
    size_t keep;

    n = read(e->pipes[stream], buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return -EAGAIN;
    if (n <= 0) {
        e->pipes[stream] = safe_close(e->pipes[stream]);
        return 0;
    }
    if (e->drain_deadline_ms)
        e->drain_deadline_ms = now_ms() + DRAIN_GRACE_MS;
    keep = admit(e, (size_t)n);
    if (keep == 0)
        return (int)n;
    m.output.id = e->id;
    m.output.stream = stream;
    m.output.data = buf;
    m.output.len = keep;
    conn_send(a, &m);
    return (int)n;
}

void output_on_events(Agent *a, SbxStream stream)
{
    /* One read per round: the loop polls again, so a chatty program cannot starve the rest. */
    output_read(a, stream);
}
