/*
 * The double's device-to-host copy bandwidth: cudaMemcpyAsync of one large
 * device buffer into pinned host memory (cudaMallocHost) on a stream, the
 * way libckpt copies a snapshot out.  Run unthrottled (FAKEGPU_COPY_GBPS
 * unset), it shows what the double itself costs over a plain memcpy; on a
 * GPU it measures PCIe.  The best of several runs counts, after one warm-up
 * copy; the data is checked, so a copy that did nothing cannot look fast.
 * Usage: d2h_bw [MiB] [runs]   Prints: "<GB/s>" (decimal, 10^9 bytes/s).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return 0;
    fprintf(stderr, "d2h_bw: %s: %s\n", what, cudaGetErrorString(err));
    return -1;
}

/* Copies n bytes device -> host on stream s and waits; seconds taken, < 0 on error. */
static double timed_copy(char *host, const void *dev, size_t n, cudaStream_t s)
{
    double t0 = now_s();
    if (check(cudaMemcpyAsync(host, dev, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync") ||
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize"))
        return -1;
    return now_s() - t0;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int runs = argc > 2 ? atoi(argv[2]) : 8;
    if (mib == 0 || runs <= 0) {
        fprintf(stderr, "usage: d2h_bw [MiB > 0] [runs > 0]\n");
        return 2;
    }
    size_t n = mib << 20;
    void *dev;
    char *host;
    cudaStream_t s;

    if (check(cudaMalloc(&dev, n), "cudaMalloc") || check(cudaMallocHost((void **)&host, n), "cudaMallocHost") ||
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
        check(cudaMemsetAsync(dev, 0x5a, n, s), "cudaMemsetAsync"))
        return 1;
    memset(host, 0, n);
    if (timed_copy(host, dev, n, s) < 0)
        return 1;

    double best = 0;
    for (int i = 0; i < runs; i++) {
        double t = timed_copy(host, dev, n, s);
        if (t < 0)
            return 1;
        if (t > 0 && n / t > best)
            best = n / t;
    }
    if (host[0] != 0x5a || host[n / 2] != 0x5a || host[n - 1] != 0x5a) {
        fprintf(stderr, "d2h_bw: the copied data is wrong\n");
        return 1;
    }
    printf("%.2f\n", best / 1e9);
    cudaStreamDestroy(s);
    cudaFreeHost(host);
    cudaFree(dev);
    return 0;
}
