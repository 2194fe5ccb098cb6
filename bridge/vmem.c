/* Guest memory table lookups. Every address here comes from the guest or the front-end. */
#include "vmem.h"

#include <errno.h>
#include <stddef.h>

int vmem_add(struct vmem *m, uint64_t gpa, uint64_t size, uint64_t uva, uint8_t *host)
{
    if (m->n >= VMEM_MAX_REGIONS)
        return -E2BIG;
    if (size == 0 || gpa + size < gpa || uva + size < uva)
        return -EINVAL;
    m->r[m->n++] = (struct vmem_region){.gpa = gpa, .size = size, .uva = uva, .host = host};
    return 0;
}

int vmem_gpa(const struct vmem *m, uint64_t gpa, uint64_t len, uint8_t **ret_host,
             uint64_t *ret_len)
{
    for (unsigned i = 0; i < m->n; i++) {
        const struct vmem_region *r = &m->r[i];
        /* Written as an offset compare so that no sum can overflow. */
        if (gpa < r->gpa || gpa - r->gpa >= r->size)
            continue;
        uint64_t off = gpa - r->gpa;
        uint64_t room = r->size - off;
        *ret_host = r->host + off;
        *ret_len = len < room ? len : room;
        return 0;
    }
    return -EFAULT;
}

void *vmem_uva(const struct vmem *m, uint64_t uva, uint64_t len)
{
    for (unsigned i = 0; i < m->n; i++) {
        const struct vmem_region *r = &m->r[i];
        if (uva < r->uva || uva - r->uva >= r->size)
            continue;
        uint64_t off = uva - r->uva;
        if (len > r->size - off)
            return NULL;
        return r->host + off;
    }
    return NULL;
}
