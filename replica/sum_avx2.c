/*
 * XXH3-64 compiled for AVX2, whatever the build's baseline: every function
 * in this file carries the avx2 target, so it must be called only on a CPU
 * that has AVX2 (sum.c asks first), and must hold nothing else.
 */
#include <stddef.h>
#include <stdint.h>

#include "sum.h"

#if defined(__x86_64__) && !defined(__AVX2__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif
#include <immintrin.h>
#define XXH_VECTOR 2 /* XXH_AVX2 */
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t ckpt_replica_sum_avx2(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

void ckpt_replica_sum_update_avx2(void *state, const void *p, size_t n)
{
    XXH3_64bits_update(state, p, n);
}

uint64_t ckpt_replica_sum_digest_avx2(const void *state)
{
    return XXH3_64bits_digest(state);
}

#if defined(__x86_64__) && !defined(__AVX2__) && defined(__clang__)
#pragma clang attribute pop
#endif
