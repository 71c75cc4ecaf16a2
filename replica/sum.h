/*
 * The chunk sums of format.h (XXH3-64), computed as fast as this CPU
 * allows: the receiver of a replica checks every byte it takes, on cores
 * that the transfer itself keeps busy.  A chunk can be summed in one call,
 * or piece by piece as its bytes land (while they are still in cache).
 * The result is always XXH3-64, bit for bit what runtime/image.c computes;
 * only the speed differs.
 */
#ifndef CKPT_REPLICA_SUM_H
#define CKPT_REPLICA_SUM_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of [p, p + n). */
uint64_t ckpt_replica_sum(const void *p, size_t n);

/* The same over pieces given in order: reset, update for each piece,
 * digest.  NULL from ckpt_replica_sum_new: out of memory. */
struct ckpt_sum;
struct ckpt_sum *ckpt_replica_sum_new(void);
void ckpt_replica_sum_free(struct ckpt_sum *s);
void ckpt_replica_sum_reset(struct ckpt_sum *s);
void ckpt_replica_sum_update(struct ckpt_sum *s, const void *p, size_t n);
uint64_t ckpt_replica_sum_digest(const struct ckpt_sum *s);

/* The AVX2 builds of the above (sum_avx2.c), only for a CPU that has it;
 * state is an XXH3_state_t. */
uint64_t ckpt_replica_sum_avx2(const void *p, size_t n);
void ckpt_replica_sum_update_avx2(void *state, const void *p, size_t n);
uint64_t ckpt_replica_sum_digest_avx2(const void *state);

#endif
