/*
 * Guest memory table: translates guest-physical addresses (from descriptors) and front-end
 * virtual addresses (from SET_VRING_ADDR) into pointers into our mapping of guest RAM.
 * Pure: the mapping itself is made by vhost-user.c, tests point regions at malloc'd buffers.
 */
#pragma once

#include <stdint.h>

/*
 * SET_MEM_TABLE carries at most 8 regions (VHOST_MEMORY_BASELINE_NREGIONS in the vhost-user
 * spec); we do not offer CONFIGURE_MEM_SLOTS, so a front-end never needs more.
 */
#define VMEM_MAX_REGIONS 8

struct vmem_region {
    uint64_t gpa;  /* guest-physical address of the first byte */
    uint64_t size; /* bytes, > 0 */
    uint64_t uva;  /* front-end (QEMU) virtual address of the first byte */
    uint8_t *host; /* our pointer to the first byte */
};

struct vmem {
    unsigned n;
    struct vmem_region r[VMEM_MAX_REGIONS];
};

/**
 * vmem_add: append a region. Returns -E2BIG when the table is full, -EINVAL for an empty
 * region or one whose guest or user range wraps around 2^64.
 */
int vmem_add(struct vmem *m, uint64_t gpa, uint64_t size, uint64_t uva, uint8_t *host);

/**
 * vmem_gpa: translate guest-physical @gpa. On success stores the host pointer and the number
 * of bytes, at most @len, that are contiguous from there inside one region (a buffer may
 * straddle two adjacent regions: call again for the rest). Returns 0 or -EFAULT when @gpa is
 * in no region; the outputs are untouched on failure.
 */
int vmem_gpa(const struct vmem *m, uint64_t gpa, uint64_t len, uint8_t **ret_host,
             uint64_t *ret_len);

/**
 * vmem_uva: translate the front-end range [@uva, @uva + @len) that must lie inside a single
 * region (used for the rings). Returns NULL when it does not.
 */
void *vmem_uva(const struct vmem *m, uint64_t uva, uint64_t len);
