/*
 * The cost of a hooked call that is not a snapshot trigger, timed in a
 * tight loop: cuLaunchKernel, the most frequent call a training step
 * makes, made invalid on purpose (no function) so that the driver returns
 * at once and what is left is the call path itself; or, with "query",
 * cuEventQuery of a completed event, as an allocator or a poller asks it
 * (libckpt records each answer for replay); or, with "free", cuMemFree of
 * an address no allocation has, which the driver refuses at once, and
 * what is left is the free path libckpt adds (is it graph memory, the
 * registry's removal); or, with "pinned", a launch of a kernel taking a
 * device pointer and a size while the program holds pinned host memory,
 * whose parameters libckpt then looks at for pointers into it (on the
 * CPU double the kernel runs, so the plain figure is the double's).
 * bench/run runs this with and
 * without LD_PRELOAD=libckpt.so and reports the difference.  The calling
 * thread ends iterations under CKPT_BOUNDARY=every:1 (its syncs), and does
 * not under every:1000000 (a thread beside the training loop).
 * Prints: "<ns per call>".
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The double's kernel convention: a host function over 16-byte slots. */
static void nothing(void **args)
{
    (void)args;
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUstream s;
    CUevent ev;
    int query = argc > 1 && argv[1][0] == 'q', free_ = argc > 1 && argv[1][0] == 'f';
    int pinned = argc > 1 && argv[1][0] == 'p';
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuStreamCreate(&s, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "hookcost: cannot initialise the driver\n");
        return 1;
    }
    if (query && (cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
                  cuEventRecord(ev, s) != CUDA_SUCCESS || cuEventSynchronize(ev) != CUDA_SUCCESS)) {
        fprintf(stderr, "hookcost: cannot make an event\n");
        return 1;
    }
    /* A few host syncs first: under CKPT_BOUNDARY=every:1 they end
     * iterations, and this becomes the thread that ends them, as a
     * training loop's is (libckpt counts device work only on others). */
    for (int i = 0; i < 3; i++)
        if (cuStreamSynchronize(s) != CUDA_SUCCESS)
            return 1;
    void *host = NULL;
    CUdeviceptr dev = 0;
    _Alignas(16) unsigned char slots[2][16] = {{0}};
    void *params[] = {slots[0], slots[1], NULL};
    if (pinned) {
        size_t words = 4096;
        if (cuMemAllocHost_v2(&host, 1 << 20) != CUDA_SUCCESS || cuMemAlloc_v2(&dev, 1 << 20) != CUDA_SUCCESS) {
            fprintf(stderr, "hookcost: cannot allocate\n");
            return 1;
        }
        memcpy(slots[0], &dev, sizeof(dev));
        memcpy(slots[1], &words, sizeof(words));
    }
    const int n = pinned ? 200000 : 2000000;
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            if (pinned) {
                if (cuLaunchKernel((CUfunction)(void *)nothing, 1, 1, 1, 1, 1, 1, 0, s, params, NULL) != CUDA_SUCCESS ||
                    (i % 1000 == 999 && cuStreamSynchronize(s) != CUDA_SUCCESS))
                    return 1;
                continue;
            }
            if (query ? cuEventQuery(ev) != CUDA_SUCCESS
                : free_ ? cuMemFree(0x1000) == CUDA_SUCCESS
                        : cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) == CUDA_SUCCESS)
                return 1; /* a launch of nothing, a free of nothing must fail; the event is done */
        }
        double per = (now_ns() - t0) / n;
        if (per < best)
            best = per;
    }
    printf("%.1f\n", best);
    return 0;
}
