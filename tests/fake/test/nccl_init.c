/*
 * Creating communicators with the double's NCCL.  The API answers NCCL's
 * way to bad arguments: unique ids it did not make, ranks out of range,
 * configs not made by NCCL_CONFIG_INITIALIZER or with a bad blocking value.
 * A nonblocking init (config.blocking = 0) returns ncclInProgress, and
 * ncclCommGetAsyncError says so until the last rank arrives; meanwhile
 * queries are invalid usage and collectives are refused.  A comm owns
 * device memory of its own (FIFO and flags) from init to destroy.  An init
 * whose peers never come fails with ncclSystemError after
 * NCCL_FAKE_INIT_TIMEOUT, blocking or not, and leaves nothing behind.
 * Also: ncclMemAlloc/Free and ncclCommRegister/Deregister.  A unique id
 * is good only while the process that made it lives (NCCL's bootstrap
 * root runs there).
 */
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_test.h"

#define LATE_MS 300 /* the last rank of the nonblocking init comes this late */

static void api_basics(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclUniqueId id, bad;
    ncclComm_t comm = (ncclComm_t)&bad;
    int version = 0;

    NCHECK(ncclGetVersion(&version));
    EXPECT(version == NCCL_VERSION_CODE, "version %d", version);
    EXPECT(!strcmp(ncclGetErrorString(ncclRemoteError),
                   "remote process exited or there was a network error"), "error string");
    NCHECK_RES(ncclGetUniqueId(NULL), ncclInvalidArgument);
    NCHECK(ncclGetUniqueId(&id));

    NCHECK_RES(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
    EXPECT(comm == NULL, "a failed init must leave NULL");
    NCHECK_RES(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
    NCHECK_RES(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
    memset(&bad, 0x5a, sizeof(bad));
    NCHECK_RES(ncclCommInitRank(&comm, 1, bad, 0), ncclInvalidArgument);

    config.magic = 0;
    NCHECK_RES(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
    config = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    config.blocking = 2;
    NCHECK_RES(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
    config = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    config.size = 4; /* too short to even hold the magic */
    NCHECK_RES(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);

    NCHECK(ncclCommDestroy(NULL));
    NCHECK_RES(ncclCommCount((ncclComm_t)&bad, &version), ncclInvalidArgument);

    /* An id made by a process that has exited. */
    int fds[2], status = 0;
    EXPECT(pipe(fds) == 0, "pipe");
    pid_t child = fork();
    if (child == 0) {
        ncclUniqueId mine;
        _exit(ncclGetUniqueId(&mine) == ncclSuccess && write(fds[1], &mine, sizeof(mine)) == sizeof(mine) ? 0 : 1);
    }
    EXPECT(child > 0 && read(fds[0], &bad, sizeof(bad)) == sizeof(bad), "an id from a child");
    EXPECT(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child");
    close(fds[0]);
    close(fds[1]);
    NCHECK_RES(ncclCommInitRank(&comm, 1, bad, 0), ncclSystemError);
    EXPECT(comm == NULL, "a failed init must leave NULL");
}

static size_t free_mem(void)
{
    size_t free_bytes, total;

    CCHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
}

static int nonblocking_rank(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t state = ncclSuccess;
    ncclComm_t comm = NULL;
    cudaStream_t s;
    int *buf, value, polls = 0;
    size_t before;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    CCHECK(cudaMalloc((void **)&buf, sizeof(int)));
    CCHECK(cudaMemcpy(buf, &rank, sizeof(int), cudaMemcpyHostToDevice));
    before = free_mem();
    if (rank == nranks - 1)
        usleep(LATE_MS * 1000);

    config.blocking = 0;
    config.commName = "nonblocking";
    NCHECK_RES(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), ncclInProgress);
    EXPECT(comm != NULL, "a nonblocking init returns its comm at once");
    if (rank == 0) { /* the last rank is not there yet */
        NCHECK(ncclCommGetAsyncError(comm, &state));
        EXPECT(state == ncclInProgress, "async state %d before all ranks came", (int)state);
        NCHECK_RES(ncclCommCount(comm, &value), ncclInvalidUsage);
        NCHECK_RES(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, s), ncclInvalidUsage);
    }
    do {
        NCHECK(ncclCommGetAsyncError(comm, &state));
        polls++;
        if (state == ncclInProgress)
            usleep(1000);
    } while (state == ncclInProgress && polls < 20000);
    EXPECT(state == ncclSuccess, "async state %d after init", (int)state);
    EXPECT(rank != 0 || polls > 10, "rank 0 saw the init finish after %d polls", polls);

    NCHECK(ncclCommCount(comm, &value));
    EXPECT(value == nranks, "count %d", value);
    NCHECK(ncclCommUserRank(comm, &value));
    EXPECT(value == rank, "rank %d", value);
    NCHECK(ncclCommCuDevice(comm, &value));
    EXPECT(value == 0, "device %d", value);
    EXPECT(free_mem() + (1 << 20) <= before, "no device memory of its own after init");

    NCHECK(ncclAllReduce(buf, buf, 1, ncclInt32, ncclSum, comm, s));
    CCHECK(cudaStreamSynchronize(s));
    CCHECK(cudaMemcpy(&value, buf, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(value == nranks * (nranks - 1) / 2, "sum %d", value);

    NCHECK(ncclCommFinalize(comm));
    NCHECK(ncclCommDestroy(comm));
    EXPECT(free_mem() == before, "device memory not returned at destroy");
    CCHECK(cudaFree(buf));
    CCHECK(cudaStreamDestroy(s));
    return 0;
}

/* Rank 0 of 2 alone: its peer never comes (arg: nonblocking). */
static int lonely_rank(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    ncclResult_t state = ncclInProgress;
    ncclComm_t comm = NULL;
    struct timespec t0, t1;
    double waited;

    (void)rank;
    (void)nranks;
    CCHECK(cudaSetDevice(0));
    config.blocking = arg ? 0 : 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!arg) {
        NCHECK_RES(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclSystemError);
        EXPECT(comm == NULL, "a failed blocking init must leave NULL");
    } else {
        NCHECK_RES(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInProgress);
        while (state == ncclInProgress) {
            usleep(10000);
            NCHECK(ncclCommGetAsyncError(comm, &state));
        }
        EXPECT(state == ncclSystemError, "async state %d", (int)state);
        NCHECK(ncclCommAbort(comm));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waited = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    EXPECT(waited >= 1.9 && waited < 5, "gave up after %.1f s with a 2 s timeout", waited);
    return 0;
}

static int memory_rank(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclComm_t comm;
    void *p = NULL, *handle = NULL, *other = NULL;
    size_t before;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    before = free_mem();
    NCHECK_RES(ncclMemAlloc(&p, 0), ncclInvalidArgument);
    NCHECK(ncclMemAlloc(&p, 1 << 20));
    EXPECT(p && free_mem() + (1 << 20) <= before, "ncclMemAlloc took no device memory");
    CCHECK(cudaMemset(p, 7, 1 << 20));
    NCHECK(ncclCommRegister(comm, p, 1 << 20, &handle));
    NCHECK(ncclCommRegister(comm, p, 4096, &other));
    EXPECT(handle && other && handle != other, "registration handles");
    NCHECK(ncclCommDeregister(comm, handle));
    NCHECK_RES(ncclCommDeregister(comm, handle), ncclInvalidArgument);
    NCHECK(ncclCommDeregister(comm, other));
    NCHECK(ncclMemFree(p));
    EXPECT(free_mem() == before, "ncclMemFree returned nothing");
    NCHECK(ncclCommDestroy(comm));
    return 0;
}

static int no_litter(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "ls /dev/shm | grep -q '^fakenccl-%u-%d-'", (unsigned)getuid(),
             (int)getpid());
    return system(cmd) != 0;
}

int main(void)
{
    /* The library reads it once: before anything else. */
    setenv("NCCL_FAKE_INIT_TIMEOUT", "2", 1);
    api_basics();
    if (nccl_test_run(4, nonblocking_rank, NULL, 60, -1))
        return 1;
    if (nccl_test_run(2, memory_rank, NULL, 60, -1))
        return 1;
    if (nccl_test_run(1, lonely_rank, NULL, 30, -1) ||
        nccl_test_run(1, lonely_rank, (void *)1, 30, -1))
        return 1;
    EXPECT(no_litter(), "shared memory left in /dev/shm");
    return 0;
}
