/*
 * Declared free blocks: the parts of device allocations the program says
 * it will not read before it writes them again, such as the free blocks
 * of a caching allocator's segments.  A snapshot copies the rest.  Memory
 * nobody declared anything about is live, so a declaration that never
 * comes costs bytes, never state: only a "free" shrinks a snapshot, and a
 * "live" (the block holds a tensor again) undoes it.  Declarations are by
 * address, in host order; an allocation's go with it when it is freed.
 */
#ifndef CKPT_BLOCKS_H
#define CKPT_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

/* Free ranges closer together than this are copied through: one copy
 * moves 64 KiB in about the time it takes to issue another. */
#define CKPT_BLOCKS_GAP (64u << 10)

struct ckpt_part {
    uint64_t start; /* from the allocation's base */
    uint64_t bytes;
};

/* [addr, addr + len) holds nothing the program will read (free), or holds
 * state again (live).  Return 0, or -EINVAL for an empty or wrapping
 * range; a free may also fail with -ENOMEM, which only costs bytes (the
 * range stays live).  A live never fails: without memory to split a free
 * range, all of that range becomes live. */
int ckpt_blocks_free(uint64_t addr, uint64_t len);
int ckpt_blocks_live(uint64_t addr, uint64_t len);

/* The allocation [addr, addr + len) is gone (or new): what was declared
 * inside it is forgotten. */
void ckpt_blocks_forget(uint64_t addr, uint64_t len);

/* The parts of the allocation [addr, addr + size) a snapshot copies, in
 * order: live bytes, joined across free ranges shorter than
 * CKPT_BLOCKS_GAP.  Writes up to max of them to out and returns how many
 * there are in all: 1 (the whole allocation) when nothing inside it was
 * declared free, 0 when all of it was. */
size_t ckpt_blocks_parts(uint64_t addr, uint64_t size, struct ckpt_part *out, size_t max);

/* Replaces every declaration with the n free ranges (address, bytes
 * pairs, in any order; overlapping or touching ones are joined).  Returns
 * 0, -EINVAL (an empty or wrapping range: nothing changed) or -ENOMEM. */
int ckpt_blocks_replace(const uint64_t *ranges, size_t n);

/* Whether anything is declared free at all (a snapshot's fast path). */
int ckpt_blocks_any(void);

/* Forgets everything (fork child, tests). */
void ckpt_blocks_reset(void);

#endif
