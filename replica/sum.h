/*
 * The chunk sums of format.h (XXH3-64), computed as fast as this CPU
 * allows: the receiver of a replica checks every byte it takes, on cores
 * that the transfer itself keeps busy.  The result is always XXH3-64,
 * bit for bit what runtime/image.c computes; only the speed differs.
 */
#ifndef CKPT_REPLICA_SUM_H
#define CKPT_REPLICA_SUM_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of [p, p + n). */
uint64_t ckpt_replica_sum(const void *p, size_t n);

/* The same with AVX2 (sum_avx2.c); only for a CPU that has it. */
uint64_t ckpt_replica_sum_avx2(const void *p, size_t n);

#endif
