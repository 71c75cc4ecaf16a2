/*
 * With FAKEGPU_COPY_GBPS and FAKEGPU_NET_GBPS both set, a collective and a
 * device-to-host copy share the GPU's PCIe link: an AllReduce queued while
 * a copy of S bytes holds the link ends no earlier than the copy plus its
 * own bytes over the link.  With only the copy throttled the AllReduce does
 * not wait for the copy.
 */
#include "nccl_test.h"

#define BYTES ((size_t)8 << 20)
#define GBPS 0.03 /* 8 MiB: 280 ms over the link, and 280 ms over the network */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg)
{
    double link_s = (double)BYTES / (GBPS * 1e9), t0, t;
    ncclComm_t comm;
    cudaStream_t s, c;
    float *a, *b;
    void *host;

    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaStreamCreate(&c));
    CCHECK(cudaMalloc((void **)&a, BYTES));
    CCHECK(cudaMalloc((void **)&b, BYTES));
    CCHECK(cudaMallocHost(&host, BYTES));
    CCHECK(cudaMemset(a, 0, BYTES));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    NCHECK(ncclAllReduce(a, b, 16, ncclFloat32, ncclSum, comm, s)); /* warm up */
    CCHECK(cudaStreamSynchronize(s));

    t0 = now_s();
    CCHECK(cudaMemcpyAsync(host, b, BYTES, cudaMemcpyDeviceToHost, c));
    struct timespec nap = {0, 10000000}; /* the copy books the link first */
    nanosleep(&nap, NULL);
    NCHECK(ncclAllReduce(a, b, BYTES / sizeof(float), ncclFloat32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));
    t = now_s() - t0;
    if (arg)
        EXPECT(t >= 2 * link_s * 0.95, "rank %d: AllReduce behind a copy took %.3f s, not the copy's %.3f s and its own",
               rank, t, link_s);
    else
        EXPECT(t < link_s * 0.9, "rank %d: with the network unthrottled the AllReduce took %.3f s, waiting for a copy",
               rank, t);
    CCHECK(cudaStreamSynchronize(c));
    NCHECK(ncclCommDestroy(comm));
    return 0;
}

int main(void)
{
    char gbps[32];

    snprintf(gbps, sizeof(gbps), "%g", GBPS);
    setenv("FAKEGPU_COPY_GBPS", gbps, 1);
    unsetenv("FAKEGPU_NET_GBPS");
    if (nccl_test_run(2, rank_main, NULL, 30, -1))
        return 1;
    setenv("FAKEGPU_NET_GBPS", gbps, 1);
    return nccl_test_run(2, rank_main, (void *)1, 30, -1);
}
