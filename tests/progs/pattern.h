/*
 * The known pattern f(iteration, ordinal, word) that tests/progs/statewriter
 * writes into its state allocations and the capture tests look for in
 * snapshots.  Every word differs, so a shifted, stale or mixed-up copy
 * cannot pass.
 */
#ifndef CKPT_TEST_PATTERN_H
#define CKPT_TEST_PATTERN_H

#include <stdint.h>

#ifdef __CUDACC__
#define PATTERN_FN __host__ __device__ static inline
#else
#define PATTERN_FN static inline
#endif

PATTERN_FN uint32_t pattern(uint64_t iteration, uint64_t ordinal, uint64_t word)
{
    uint64_t x = (iteration * 0x9e3779b97f4a7c15ULL) ^ (ordinal * 0xbf58476d1ce4e5b9ULL) ^ (word * 0x94d049bb133111ebULL);
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ULL;
    x ^= x >> 32;
    return (uint32_t)x;
}

#endif
