/*
 * ncclCommSplit in the double, with 4 and 8 ranks and 3 (uneven halves):
 * ranks split by parity with a key that reverses their order get the
 * expected size and rank, and an AllReduce in each half sums that half
 * only, while the parent still works; a rank passing NCCL_SPLIT_NOCOLOR
 * gets NULL and the others one comm without it; a nonblocking split
 * returns ncclInProgress and completes; a split of a split works; and a
 * split needs a valid color.
 */
#include "nccl_test.h"

static void *dev_int(int v)
{
    int *p;

    CCHECK(cudaMalloc((void **)&p, sizeof(int)));
    CCHECK(cudaMemcpy(p, &v, sizeof(int), cudaMemcpyHostToDevice));
    return p;
}

/* AllReduce of v over comm; returns the sum. */
static int sum(ncclComm_t comm, cudaStream_t s, int v)
{
    int *d = dev_int(v), out;

    NCHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));
    CCHECK(cudaMemcpy(&out, d, sizeof(int), cudaMemcpyDeviceToHost));
    CCHECK(cudaFree(d));
    return out;
}

static void expect_shape(ncclComm_t comm, int count, int rank, const char *what)
{
    int c, r;

    NCHECK(ncclCommCount(comm, &c));
    NCHECK(ncclCommUserRank(comm, &r));
    EXPECT(c == count && r == rank, "%s: rank %d of %d, expected %d of %d", what, r, c, rank,
           count);
}

static int rank_main(int rank, int n, ncclUniqueId id, void *arg)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclComm_t world, half, most, nb, quarter;
    ncclResult_t state;
    cudaStream_t s;
    int color = rank % 2, members = (n - color + 1) / 2, want = 0, hrank, hcount;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    NCHECK(ncclCommInitRank(&world, n, id, rank));

    /* Parity halves, in reverse order of the parent's ranks. */
    NCHECK(ncclCommSplit(world, color, -rank, &half, NULL));
    EXPECT(half != NULL, "a colored rank gets a comm");
    expect_shape(half, members, (n - 1 - rank) / 2, "parity split");
    for (int r = color; r < n; r += 2)
        want += r;
    EXPECT(sum(half, s, rank) == want, "parity half of rank %d: wrong sum", rank);
    EXPECT(sum(world, s, 1) == n, "the parent after a split");

    /* Rank 0 stays out. */
    NCHECK(ncclCommSplit(world, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, rank, &most, NULL));
    if (rank == 0) {
        EXPECT(most == NULL, "NCCL_SPLIT_NOCOLOR gives NULL");
    } else {
        expect_shape(most, n - 1, rank - 1, "split without rank 0");
        EXPECT(sum(most, s, rank) == n * (n - 1) / 2, "sum without rank 0");
    }

    /* Nonblocking, into one comm of everyone. */
    config.blocking = 0;
    NCHECK_RES(ncclCommSplit(world, 0, rank, &nb, &config), ncclInProgress);
    NCHECK(ncclCommGetAsyncError(nb, &state));
    while (state == ncclInProgress) {
        usleep(1000);
        NCHECK(ncclCommGetAsyncError(nb, &state));
    }
    EXPECT(state == ncclSuccess, "nonblocking split ended with %d", (int)state);
    expect_shape(nb, n, rank, "nonblocking split");
    EXPECT(sum(nb, s, 2) == 2 * n, "nonblocking split sum");

    /* A split of a split: pairs of the parity half, by their rank in it. */
    NCHECK(ncclCommUserRank(half, &hrank));
    NCHECK(ncclCommCount(half, &hcount));
    NCHECK(ncclCommSplit(half, hrank / 2, 0, &quarter, NULL));
    expect_shape(quarter, hrank / 2 < hcount / 2 ? 2 : hcount - hrank / 2 * 2, hrank % 2,
                 "split of a split");

    NCHECK_RES(ncclCommSplit(world, -5, 0, &quarter, NULL), ncclInvalidArgument);
    EXPECT(quarter == NULL, "a failed split leaves NULL");

    NCHECK(ncclCommDestroy(quarter));
    NCHECK(ncclCommDestroy(nb));
    NCHECK(ncclCommDestroy(most));
    NCHECK(ncclCommDestroy(half));
    NCHECK(ncclCommDestroy(world));
    CCHECK(cudaStreamDestroy(s));
    return 0;
}

int main(void)
{
    static const int sizes[] = {3, 4, 8};

    setenv("NCCL_FAKE_TIMEOUT", "10", 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (nccl_test_run(sizes[i], rank_main, NULL, 60, -1)) {
            fprintf(stderr, "split failed with %d ranks\n", sizes[i]);
            return 1;
        }
    return 0;
}
