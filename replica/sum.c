/*
 * ckpt_replica_sum and its streaming form: XXH3-64 with AVX2 where the
 * CPU has it (about 1.5 times the SSE2 baseline the rest of the build is
 * compiled for), else the baseline.  It must never run an instruction the
 * CPU lacks: the AVX2 code lives in its own file and is called only after
 * the CPU said yes.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "sum.h"

#if defined(__x86_64__) && !defined(__AVX2__)
#define AVX2 __builtin_cpu_supports("avx2")
#else
#define AVX2 0
#endif

uint64_t ckpt_replica_sum(const void *p, size_t n)
{
    return AVX2 ? ckpt_replica_sum_avx2(p, n) : XXH3_64bits(p, n);
}

struct ckpt_sum *ckpt_replica_sum_new(void)
{
    return (struct ckpt_sum *)XXH3_createState();
}

void ckpt_replica_sum_free(struct ckpt_sum *s)
{
    XXH3_freeState((XXH3_state_t *)s);
}

void ckpt_replica_sum_reset(struct ckpt_sum *s)
{
    XXH3_64bits_reset((XXH3_state_t *)s);
}

void ckpt_replica_sum_update(struct ckpt_sum *s, const void *p, size_t n)
{
    if (AVX2)
        ckpt_replica_sum_update_avx2(s, p, n);
    else
        XXH3_64bits_update((XXH3_state_t *)s, p, n);
}

uint64_t ckpt_replica_sum_digest(const struct ckpt_sum *s)
{
    return AVX2 ? ckpt_replica_sum_digest_avx2(s) : XXH3_64bits_digest((const XXH3_state_t *)s);
}
