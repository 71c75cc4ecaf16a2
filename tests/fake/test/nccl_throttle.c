/*
 * FAKEGPU_NET_GBPS throttles the double's collectives: with two ranks, an
 * AllReduce of S bytes sends S bytes per rank (a ring's 2(n-1)/n) and a
 * Send of S bytes sends S, so at B GB/s each takes at least S/B on its
 * stream, and not much longer; unset, the same work is much faster.
 */
#include "nccl_test.h"

#define BYTES ((size_t)8 << 20)
#define GBPS 0.02     /* 8 MiB: 419 ms per operation */
#define FAST_S 0.3    /* unthrottled, the same work takes less than this */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg)
{
    double floor_s = arg ? (double)BYTES / (GBPS * 1e9) : 0, t0, t;
    ncclComm_t comm;
    cudaStream_t s;
    float *a, *b;

    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaMalloc((void **)&a, BYTES));
    CCHECK(cudaMalloc((void **)&b, BYTES));
    CCHECK(cudaMemset(a, 0, BYTES));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    NCHECK(ncclAllReduce(a, b, 16, ncclFloat32, ncclSum, comm, s)); /* warm up */
    CCHECK(cudaStreamSynchronize(s));

    t0 = now_s();
    NCHECK(ncclAllReduce(a, b, BYTES / sizeof(float), ncclFloat32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));
    t = now_s() - t0;
    EXPECT(arg ? t >= floor_s * 0.95 && t < floor_s + 1.0 : t < FAST_S,
           "rank %d: AllReduce of %zu bytes took %.3f s (floor %.3f s)", rank, BYTES, t, floor_s);

    t0 = now_s();
    NCHECK(ncclGroupStart());
    NCHECK(ncclSend(a, BYTES, ncclUint8, 1 - rank, comm, s));
    NCHECK(ncclRecv(b, BYTES, ncclUint8, 1 - rank, comm, s));
    NCHECK(ncclGroupEnd());
    CCHECK(cudaStreamSynchronize(s));
    t = now_s() - t0;
    EXPECT(arg ? t >= floor_s * 0.95 && t < floor_s + 1.0 : t < FAST_S,
           "rank %d: Send/Recv of %zu bytes took %.3f s (floor %.3f s)", rank, BYTES, t, floor_s);

    NCHECK(ncclCommDestroy(comm));
    return 0;
}

int main(void)
{
    char gbps[32];

    unsetenv("FAKEGPU_NET_GBPS");
    if (nccl_test_run(2, rank_main, NULL, 30, -1))
        return 1;
    snprintf(gbps, sizeof(gbps), "%g", GBPS);
    setenv("FAKEGPU_NET_GBPS", gbps, 1);
    return nccl_test_run(2, rank_main, (void *)1, 30, -1);
}
