/*
 * A rank that dies makes its peers fail instead of hang.  Three ranks run
 * AllReduces; rank 2 is killed (SIGKILL) while a large AllReduce is moving
 * data, and stays a zombie until the others are done.  The survivors'
 * stream moves on within a few seconds, far below NCCL_FAKE_TIMEOUT (so it
 * was the liveness probe, not the timeout), ncclCommGetAsyncError reports
 * ncclRemoteError, a later collective on the comm fails at once, and
 * ncclCommAbort cleans up.  Then a peer that stays alive but never joins
 * the collective: its partner fails with ncclSystemError after
 * NCCL_FAKE_TIMEOUT, not before, and not much later.  The killed rank's
 * collective is throttled (FAKEGPU_NET_GBPS) so that it cannot end before
 * the kill, however late a loaded machine wakes the rank.  Last, with
 * NCCL_FAKE_DEAD_PEER=hang, as real NCCL over P2P/SHM: the survivors of a
 * killed rank do not notice, their collective spins (no error, no timeout)
 * until each aborts its communicator, which ends it at once.
 */
#include <sys/time.h>

#include "nccl_test.h"

#define BIG ((size_t)8 << 20) /* floats: many chunks, so the kill lands mid-way */
#define DETECT_S 5.0          /* the survivors must notice within this */
#define SILENT_TIMEOUT_S 2.0
#define SLOW_GBPS "0.05"      /* BIG takes ~0.9 s: a late wake-up still kills mid-way */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void expect_async(ncclComm_t comm, ncclResult_t want, const char *when)
{
    ncclResult_t res = ncclSuccess;

    NCHECK(ncclCommGetAsyncError(comm, &res));
    EXPECT(res == want, "%s: async error %d, expected %d", when, (int)res, (int)want);
}

static int death_rank(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclComm_t comm;
    cudaStream_t s;
    float *buf;
    double t0, waited;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaMalloc((void **)&buf, BIG * sizeof(float)));
    CCHECK(cudaMemset(buf, 0, BIG * sizeof(float)));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));

    for (int i = 0; i < 3; i++)
        NCHECK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));
    expect_async(comm, ncclSuccess, "before the death");

    NCHECK(ncclAllReduce(buf, buf, BIG, ncclFloat32, ncclSum, comm, s));
    if (rank == 2) {
        usleep(30 * 1000); /* let the collective get going, then die in it */
        raise(SIGKILL);
    }
    t0 = now_s();
    CCHECK(cudaStreamSynchronize(s));
    waited = now_s() - t0;
    EXPECT(waited < DETECT_S, "rank %d: the stream took %.1f s to move on", rank, waited);
    expect_async(comm, ncclRemoteError, "after the death");

    /* Later work fails fast, and the comm can still be aborted. */
    t0 = now_s();
    NCHECK_RES(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, s), ncclRemoteError);
    EXPECT(now_s() - t0 < 1.0, "a collective on a failed comm took %.1f s", now_s() - t0);
    NCHECK(ncclCommAbort(comm));
    CCHECK(cudaFree(buf));
    CCHECK(cudaStreamDestroy(s));
    return 0;
}

static int silent_rank(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclComm_t comm;
    cudaStream_t s;
    float *buf;
    double t0, waited;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaMalloc((void **)&buf, 1024 * sizeof(float)));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    if (rank == 1) { /* alive, but never joins the collective */
        sleep((unsigned)SILENT_TIMEOUT_S + 3);
        NCHECK(ncclCommAbort(comm));
        return 0;
    }
    t0 = now_s();
    NCHECK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));
    waited = now_s() - t0;
    EXPECT(waited >= SILENT_TIMEOUT_S - 0.1 && waited < SILENT_TIMEOUT_S + 2,
           "the lone collective ended after %.1f s, with NCCL_FAKE_TIMEOUT=%.0f", waited,
           SILENT_TIMEOUT_S);
    expect_async(comm, ncclSystemError, "after the timeout");
    NCHECK(ncclCommAbort(comm));
    CCHECK(cudaStreamDestroy(s));
    return 0;
}

#define HANG_WATCH_S 3.0 /* the survivors' collective must still spin after this */

static int hang_rank(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclComm_t comm;
    cudaStream_t s;
    float *buf;
    double t0;
    cudaError_t q;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaMalloc((void **)&buf, BIG * sizeof(float)));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    NCHECK(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));

    NCHECK(ncclAllReduce(buf, buf, BIG, ncclFloat32, ncclSum, comm, s));
    if (rank == 2) {
        usleep(30 * 1000);
        raise(SIGKILL);
    }
    /* A watchdog's view: the work never completes, and no error shows. */
    t0 = now_s();
    while ((q = cudaStreamQuery(s)) == cudaErrorNotReady && now_s() - t0 < HANG_WATCH_S)
        usleep(50 * 1000);
    EXPECT(q == cudaErrorNotReady, "rank %d: the collective ended (%d) with a dead peer", rank, (int)q);
    expect_async(comm, ncclSuccess, "while hanging");
    /* Aborting the communicator ends the spinning collective. */
    t0 = now_s();
    NCHECK(ncclCommAbort(comm));
    CCHECK(cudaStreamSynchronize(s));
    EXPECT(now_s() - t0 < 2.0, "rank %d: the abort took %.1f s to end the collective", rank, now_s() - t0);
    CCHECK(cudaFree(buf));
    CCHECK(cudaStreamDestroy(s));
    return 0;
}

int main(void)
{
    char timeout[16];

    setenv("NCCL_FAKE_TIMEOUT", "30", 1);
    setenv("FAKEGPU_NET_GBPS", SLOW_GBPS, 1);
    if (nccl_test_run(3, death_rank, NULL, 60, 2)) {
        fprintf(stderr, "a dead rank was not handled\n");
        return 1;
    }
    unsetenv("FAKEGPU_NET_GBPS");
    snprintf(timeout, sizeof(timeout), "%.0f", SILENT_TIMEOUT_S);
    setenv("NCCL_FAKE_TIMEOUT", timeout, 1);
    if (nccl_test_run(2, silent_rank, NULL, 30, -1)) {
        fprintf(stderr, "a silent rank was not handled\n");
        return 1;
    }
    unsetenv("NCCL_FAKE_TIMEOUT");
    setenv("NCCL_FAKE_DEAD_PEER", "hang", 1);
    setenv("FAKEGPU_NET_GBPS", SLOW_GBPS, 1);
    if (nccl_test_run(3, hang_rank, NULL, 60, 2)) {
        fprintf(stderr, "with NCCL_FAKE_DEAD_PEER=hang a dead rank was noticed\n");
        return 1;
    }
    return 0;
}
