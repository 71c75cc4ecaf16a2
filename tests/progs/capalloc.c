/*
 * Allocation inside stream capture, as CUDA-graph training loops do: each
 * iteration captures (relaxed mode) a graph whose work allocates a
 * scratch buffer, fills it and adds it into the weights, launches the
 * graph and syncs; an allocation attempted during a global-mode capture
 * must fail as CUDA says (and invalidate that capture), with or without
 * libckpt.  Prints "iter N sum S" per iteration, "global-mode alloc:
 * <error>", and "digest <hex>" of the weights.
 *   capalloc [--iters K]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "kernels.h"
#include "pattern.h"

#define WORDS 4096

KERNEL(fill, (uint32_t *, p), (size_t, n), (uint64_t, iteration))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        p[i] = pattern(iteration, 7, i);
}

KERNEL(add, (uint32_t *, w), (const uint32_t *, s), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = w[i] * 31u + s[i];
}

#define CHECK(x)                                                                                                  \
    do {                                                                                                          \
        CUresult r_ = (x);                                                                                        \
        if (r_ != CUDA_SUCCESS) {                                                                                 \
            printf("%s failed: %d\n", #x, (int)r_);                                                               \
            return 1;                                                                                             \
        }                                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    int iters = argc > 2 && strcmp(argv[1], "--iters") == 0 ? atoi(argv[2]) : 8;
    setvbuf(stdout, NULL, _IOLBF, 0); /* a progress log: a killed run's lines are all there */
    uint32_t *w, host[WORDS];
    cudaStream_t s;
    if (cudaMalloc((void **)&w, sizeof(host)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess)
        return 1;
    cudaMemset(w, 0, sizeof(host));
    cudaDeviceSynchronize();

    CUdeviceptr tmp;
    CUgraph g;
    CHECK(cuStreamBeginCapture_v2((CUstream)s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    printf("global-mode alloc: %d\n", (int)cuMemAlloc_v2(&tmp, 64));
    printf("global-mode end: %d\n", (int)cuStreamEndCapture((CUstream)s, &g));

    for (int it = 1; it <= iters; it++) {
        CUgraphExec exec;
        CHECK(cuStreamBeginCapture_v2((CUstream)s, CU_STREAM_CAPTURE_MODE_RELAXED));
        CHECK(cuMemAlloc_v2(&tmp, sizeof(host)));
        fill_launch(DIM3(4), DIM3(256), s, (uint32_t *)tmp, WORDS, (uint64_t)it);
        add_launch(DIM3(4), DIM3(256), s, w, (const uint32_t *)tmp, WORDS);
        CHECK(cuStreamEndCapture((CUstream)s, &g));
        CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
        CHECK(cuGraphLaunch(exec, (CUstream)s));
        cudaStreamSynchronize(s);
        CHECK(cuGraphExecDestroy(exec));
        CHECK(cuGraphDestroy(g));
        CHECK(cuMemFree_v2(tmp));
        cudaMemcpy(host, w, sizeof(host), cudaMemcpyDeviceToHost);
        uint64_t sum = 0;
        for (int i = 0; i < WORDS; i++)
            sum += host[i];
        printf("iter %d sum %llu\n", it, (unsigned long long)sum);
    }
    uint64_t digest = 1469598103934665603ULL;
    for (int i = 0; i < WORDS; i++)
        digest = (digest ^ host[i]) * 1099511628211ULL;
    printf("digest %016llx\n", (unsigned long long)digest);
    return 0;
}
