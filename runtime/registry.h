/*
 * The allocation registry: every live device allocation of the program,
 * with the order it was made in (the ordinal replay and restore match by),
 * its size, how it was made and on which stream.  Allocations NCCL makes
 * for itself are kept apart as internal: they are never snapshotted or
 * restored.  libckpt's own buffers never enter it.
 */
#ifndef CKPT_REGISTRY_H
#define CKPT_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ckpt_alloc_kind {
    CKPT_ALLOC_PLAIN,   /* cuMemAlloc, cudaMalloc */
    CKPT_ALLOC_ASYNC,   /* stream-ordered, from a pool */
    CKPT_ALLOC_VMM,     /* a cuMemMap'ed range */
    CKPT_ALLOC_MANAGED, /* cuMemAllocManaged, a module's __managed__ variable */
    CKPT_ALLOC_PITCH,   /* cuMemAllocPitch */
    CKPT_ALLOC_GLOBAL,  /* a module's __device__ or __constant__ variable */
    CKPT_KINDS
};

struct ckpt_alloc {
    uint64_t addr;
    uint64_t size;
    uint64_t ordinal; /* the caller's name for it, the same in every run of the program
                       * (interpose: the thread's, then 0, 1, 2... in its allocation
                       * order); program allocations only */
    uint64_t stream;  /* the stream of a stream-ordered allocation, else 0 */
    uint64_t birth;   /* the iteration it was made in */
    uint8_t kind;     /* enum ckpt_alloc_kind */
    bool internal;    /* made by a library (NCCL) for itself */
};

/* Adds a live allocation named ordinal.  Returns 0, -EEXIST when addr is
 * already live (a runtime wrapper seeing what the driver hook underneath
 * recorded), or -ENOMEM. */
int ckpt_reg_add(uint64_t addr, uint64_t size, enum ckpt_alloc_kind kind, uint64_t stream, bool internal,
                 uint64_t ordinal);

/* True when addr lies inside a live allocation (program or internal).
 * A scan: for the rare calls that do not say which side an address is on. */
bool ckpt_reg_contains(uint64_t addr);

/* Removes the allocation starting at addr.  Returns 0 or -ENOENT. */
int ckpt_reg_remove(uint64_t addr);

/* Removes every allocation that starts inside [addr, addr + size): one
 * cuMemUnmap may cover several whole mappings.  Returns how many.  A scan. */
size_t ckpt_reg_remove_range(uint64_t addr, uint64_t size);

/* Copies the allocation starting at addr into *out.  Returns 0 or -ENOENT. */
int ckpt_reg_find(uint64_t addr, struct ckpt_alloc *out);

/* Copies up to max live program allocations (internal ones excluded), in
 * ordinal order, into out; returns how many there are in all.  Holds the
 * registry lock only while copying. */
size_t ckpt_reg_snapshot(struct ckpt_alloc *out, size_t max);

/* Live counts and bytes: program allocations and internal ones. */
void ckpt_reg_stats(size_t *count, uint64_t *bytes, size_t *internal_count, uint64_t *internal_bytes);

/* How many entries the table has room for: it follows the live count. */
size_t ckpt_reg_capacity(void);

/* The iteration new allocations are born in. */
void ckpt_reg_set_iteration(uint64_t iter);

/* Forgets everything (fork child, tests). */
void ckpt_reg_reset(void);

#endif
