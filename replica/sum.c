/*
 * ckpt_replica_sum: XXH3-64 with AVX2 where the CPU has it (about 1.5
 * times the SSE2 baseline the rest of the build is compiled for), else
 * the baseline.  It must never run an instruction the CPU lacks: the AVX2
 * code lives in its own file and is called only after the CPU said yes.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "sum.h"

uint64_t ckpt_replica_sum(const void *p, size_t n)
{
#if defined(__x86_64__) && !defined(__AVX2__)
    if (__builtin_cpu_supports("avx2"))
        return ckpt_replica_sum_avx2(p, n);
#endif
    return XXH3_64bits(p, n);
}
