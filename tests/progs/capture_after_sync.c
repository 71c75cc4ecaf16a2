/*
 * A CUDA-graph training loop that captures right after a host sync, as
 * PyTorch's graph warm-up does: each iteration updates the weights, syncs
 * (an iteration boundary: libckpt starts a snapshot), then captures a
 * global-mode graph on a second stream while the host spends a while
 * tracing (20 ms), launches it and syncs.  In global mode, CUDA
 * invalidates the capture when any other thread queries or waits for an
 * event meanwhile; libckpt's snapshot in flight must not be that thread.
 * Prints "iter N capture <CUresult>" and "digest <hex>" of the weights.
 *   capture_after_sync [--iters K]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "kernels.h"
#include "pattern.h"

#define WORDS (4u << 20) /* 16 MiB of weights: their copy takes a while */

KERNEL(step, (uint32_t *, w), (size_t, n), (uint64_t, iteration))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = w[i] * 31u + pattern(iteration, 1, i);
}

KERNEL(mix, (uint32_t *, w), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] ^= w[i] >> 7;
}

int main(int argc, char **argv)
{
    int iters = argc > 2 && strcmp(argv[1], "--iters") == 0 ? atoi(argv[2]) : 6;
    uint32_t *w;
    cudaStream_t s, g;
    if (cudaMalloc((void **)&w, WORDS * sizeof(*w)) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
        cudaStreamCreateWithFlags(&g, cudaStreamNonBlocking) != cudaSuccess)
        return 1;
    cudaMemset(w, 0, WORDS * sizeof(*w));
    cudaDeviceSynchronize();

    for (int it = 1; it <= iters; it++) {
        step_launch(DIM3(8), DIM3(256), s, w, WORDS, (uint64_t)it);
        cudaStreamSynchronize(s);

        CUgraph graph = NULL;
        CUgraphExec exec;
        CUresult r = cuStreamBeginCapture_v2((CUstream)g, CU_STREAM_CAPTURE_MODE_GLOBAL);
        if (r == CUDA_SUCCESS) {
            mix_launch(DIM3(8), DIM3(256), g, w, WORDS);
            usleep(20 * 1000);
            r = cuStreamEndCapture((CUstream)g, &graph);
        }
        printf("iter %d capture %d\n", it, (int)r);
        if (r != CUDA_SUCCESS)
            return 2;
        if (cuGraphInstantiateWithFlags(&exec, graph, 0) != CUDA_SUCCESS ||
            cuGraphLaunch(exec, (CUstream)g) != CUDA_SUCCESS)
            return 3;
        cudaStreamSynchronize(g);
        cuGraphExecDestroy(exec);
        cuGraphDestroy(graph);
    }
    uint32_t *host = malloc(WORDS * sizeof(*host));
    if (!host || cudaMemcpy(host, w, WORDS * sizeof(*w), cudaMemcpyDeviceToHost) != cudaSuccess)
        return 1;
    uint64_t digest = 1469598103934665603ULL;
    for (size_t i = 0; i < WORDS; i++)
        digest = (digest ^ host[i]) * 1099511628211ULL;
    printf("digest %016llx\n", (unsigned long long)digest);
    free(host);
    return 0;
}
