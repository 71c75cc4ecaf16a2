/*
 * clockseed: a training loop that seeds its random numbers from the clock,
 * as a program without a fixed seed does (torch.manual_seed never called):
 * every run draws other batch sizes, so a replay of its host code makes
 * other allocations than the run it replays.  ckpt-doctor replay-check
 * must say no, naming the divergence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime.h>

int main(int argc, char **argv)
{
    int iters = argc > 2 ? atoi(argv[2]) : 12;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    srand((unsigned)ts.tv_nsec);
    float *w;
    if (cudaMalloc((void **)&w, 4096) != cudaSuccess)
        return 1;
    for (int it = 1; it <= iters; it++) {
        size_t batch = 256 * (size_t)(1 + rand() % 64);
        void *b;
        float loss;
        if (cudaMalloc(&b, batch) != cudaSuccess || cudaMemset(b, it, batch) != cudaSuccess ||
            cudaMemcpy(&loss, w, sizeof(loss), cudaMemcpyDeviceToHost) != cudaSuccess || cudaFree(b) != cudaSuccess)
            return 1;
        printf("iter %d batch %zu\n", it, batch);
    }
    return 0;
}
