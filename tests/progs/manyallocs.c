/*
 * 100,000 small device allocations (as a model with many small parameter
 * tensors, or an allocator that never pools), each word updated every
 * iteration as w = w * 31 + pattern(iteration, ordinal, word), so the end
 * state depends on every iteration (a restore that lost one shows), and
 * the host synced once per iteration.  The kernels reach the allocations
 * through a device table of their pointers, copied from the host before
 * every launch, as frameworks pass pointer arrays: device memory holding
 * device pointers across a restore would hold the old run's addresses
 * (allocations are not restored at their original addresses), so the
 * table is never used across a boundary: with CKPT_BOUNDARY=every:2 each
 * boundary follows an iteration's device sync.  At the end it reads every
 * allocation back and prints "checked <n> allocations" and a digest, or
 * "mismatch at <ordinal>" and exits 1.
 *   manyallocs [--count N] [--iters K]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "pattern.h"

#define WORDS 16 /* 64 bytes each */

KERNEL(fill, (uint32_t **, ptrs), (size_t, n), (uint64_t, iteration))
{
    for (size_t i = KERNEL_INDEX; i < n * WORDS; i += KERNEL_STRIDE)
        ptrs[i / WORDS][i % WORDS] = ptrs[i / WORDS][i % WORDS] * 31u + pattern(iteration, i / WORDS, i % WORDS);
}

KERNEL(zero, (uint32_t **, ptrs), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n * WORDS; i += KERNEL_STRIDE)
        ptrs[i / WORDS][i % WORDS] = 0;
}

/* Every allocation's words, gathered into one buffer: one copy back. */
KERNEL(gather, (uint32_t *, out), (uint32_t **, ptrs), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n * WORDS; i += KERNEL_STRIDE)
        out[i] = ptrs[i / WORDS][i % WORDS];
}

int main(int argc, char **argv)
{
    size_t count = 100000;
    int iters = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--count") == 0)
            count = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--iters") == 0)
            iters = atoi(argv[i + 1]);
    }
    uint32_t **host = malloc(count * sizeof(*host)), **table, *all, *words = malloc(count * WORDS * 4);
    if (!host || !words || cudaMalloc((void **)&table, count * sizeof(*table)) != cudaSuccess ||
        cudaMalloc((void **)&all, count * WORDS * 4) != cudaSuccess)
        return 1;
    for (size_t i = 0; i < count; i++)
        if (cudaMalloc((void **)&host[i], WORDS * sizeof(uint32_t)) != cudaSuccess) {
            printf("allocation %zu failed\n", i);
            return 1;
        }
    cudaMemcpy(table, host, count * sizeof(*table), cudaMemcpyHostToDevice);
    zero_launch(DIM3(64), DIM3(256), 0, table, count);
    cudaDeviceSynchronize(); /* two host syncs here as in each iteration: every:2 boundaries follow this one */
    for (int it = 1; it <= iters; it++) {
        cudaMemcpy(table, host, count * sizeof(*table), cudaMemcpyHostToDevice);
        fill_launch(DIM3(64), DIM3(256), 0, table, count, (uint64_t)it);
        cudaDeviceSynchronize();
        printf("iter %d\n", it);
    }
    cudaMemcpy(table, host, count * sizeof(*table), cudaMemcpyHostToDevice);
    gather_launch(DIM3(64), DIM3(256), 0, all, table, count);
    cudaMemcpy(words, all, count * WORDS * 4, cudaMemcpyDeviceToHost);
    uint64_t digest = 1469598103934665603ULL;
    for (size_t i = 0; i < count; i++) {
        for (int w = 0; w < WORDS; w++) {
            uint32_t x = words[i * WORDS + w], want = 0;
            for (int it = 1; it <= iters; it++)
                want = want * 31u + pattern((uint64_t)it, i, (uint64_t)w);
            if (x != want) {
                printf("mismatch at %zu\n", i);
                return 1;
            }
            digest = (digest ^ x) * 1099511628211ULL;
        }
    }
    printf("checked %zu allocations\ndigest %016llx\n", count, (unsigned long long)digest);
    return 0;
}
