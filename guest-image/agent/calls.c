/*
 * Bookkeeping of one execution's tool calls (see calls.h).
 */
#include "calls.h"

#include <errno.h>

int calls_begin(Calls *c, uint32_t id)
{
    if (id == 0 || id <= c->last_id)
        return -EINVAL;
    c->last_id = id;
    if (c->n_pending >= SBX_TOOL_CALLS_IN_FLIGHT_MAX)
        return -EBUSY;
    c->pending[c->n_pending++] = id;
    return 0;
}

bool calls_end(Calls *c, uint32_t id)
{
    for (size_t i = 0; i < c->n_pending; i++) {
        if (c->pending[i] != id)
            continue;
        c->pending[i] = c->pending[--c->n_pending];
        return true;
    }
    return false;
}
