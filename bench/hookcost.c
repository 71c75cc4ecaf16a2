/*
 * The cost of a hooked call that is not a snapshot trigger: cuLaunchKernel,
 * the most frequent call a training step makes, timed in a tight loop.
 * The call is made invalid on purpose (no function), so the driver returns
 * at once and what is left is the call path itself; bench/run runs this
 * with and without LD_PRELOAD=libckpt.so and reports the difference.
 * Prints: "<ns per call>".
 */
#include <stdio.h>
#include <time.h>

#include <cuda.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void)
{
    CUcontext ctx;
    CUstream s;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&s, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "hookcost: cannot initialise the driver\n");
        return 1;
    }
    const int n = 2000000;
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++)
            if (cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) == CUDA_SUCCESS)
                return 1; /* a launch of nothing must fail */
        double per = (now_ns() - t0) / n;
        if (per < best)
            best = per;
    }
    printf("%.1f\n", best);
    return 0;
}
