/*
 * Point-to-point operations of the double's NCCL, for 1, 2, 3, 4 and 8
 * ranks: a ring (send right, receive from the left) in nested groups,
 * with messages larger than a sender's area of the segment, which can only
 * complete if the outermost ncclGroupEnd issues both halves together; an
 * all-to-all with every peer, self included; a group mixing an AllReduce
 * with sends and receives; and the usage errors of groups.
 */
#include "nccl_test.h"

#define SMALL 1000
#define BIG ((size_t)3 << 20) /* bytes: several chunks of a sender's area */
#define A2A 200000            /* int32 per peer */

static uint8_t ring_byte(int src, size_t i)
{
    return (uint8_t)(src * 31 + i * 13 + (i >> 11));
}

static int32_t a2a_value(int src, int dst, size_t i)
{
    return src * 1000003 + dst * 7919 + (int32_t)i;
}

static void *dev_alloc(size_t bytes)
{
    void *p;

    CCHECK(cudaMalloc(&p, bytes));
    CCHECK(cudaMemset(p, 0, bytes));
    return p;
}

static void ring(ncclComm_t comm, cudaStream_t s, int rank, int n, size_t bytes)
{
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    uint8_t *host = malloc(bytes), *dsend = dev_alloc(bytes), *drecv = dev_alloc(bytes);

    EXPECT(host, "out of memory");
    for (size_t i = 0; i < bytes; i++)
        host[i] = ring_byte(rank, i);
    CCHECK(cudaMemcpy(dsend, host, bytes, cudaMemcpyHostToDevice));

    NCHECK(ncclGroupStart());
    NCHECK(ncclGroupStart());
    NCHECK(ncclSend(dsend, bytes, ncclUint8, right, comm, s));
    NCHECK(ncclGroupEnd()); /* inner: nothing may be issued yet */
    NCHECK(ncclRecv(drecv, bytes, ncclUint8, left, comm, s));
    NCHECK(ncclGroupEnd());
    CCHECK(cudaStreamSynchronize(s));

    CCHECK(cudaMemcpy(host, drecv, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; i++)
        EXPECT(host[i] == ring_byte(left, i), "rank %d/%d ring of %zu bytes: byte %zu is %u, "
               "expected %u", rank, n, bytes, i, host[i], ring_byte(left, i));
    CCHECK(cudaFree(dsend));
    CCHECK(cudaFree(drecv));
    free(host);
}

static void all_to_all(ncclComm_t comm, cudaStream_t s, int rank, int n)
{
    size_t total = (size_t)n * A2A;
    int32_t *host = malloc(total * sizeof(int32_t));
    int32_t *dsend = dev_alloc(total * sizeof(int32_t)), *drecv = dev_alloc(total * sizeof(int32_t));

    EXPECT(host, "out of memory");
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < A2A; i++)
            host[(size_t)q * A2A + i] = a2a_value(rank, q, i);
    CCHECK(cudaMemcpy(dsend, host, total * sizeof(int32_t), cudaMemcpyHostToDevice));

    NCHECK(ncclGroupStart());
    for (int q = 0; q < n; q++)
        NCHECK(ncclSend(dsend + (size_t)q * A2A, A2A, ncclInt32, q, comm, s));
    for (int q = 0; q < n; q++)
        NCHECK(ncclRecv(drecv + (size_t)q * A2A, A2A, ncclInt32, q, comm, s));
    NCHECK(ncclGroupEnd());
    CCHECK(cudaStreamSynchronize(s));

    CCHECK(cudaMemcpy(host, drecv, total * sizeof(int32_t), cudaMemcpyDeviceToHost));
    for (int q = 0; q < n; q++)
        for (size_t i = 0; i < A2A; i++)
            EXPECT(host[(size_t)q * A2A + i] == a2a_value(q, rank, i),
                   "rank %d/%d all-to-all: from %d element %zu is %d", rank, n, q, i,
                   host[(size_t)q * A2A + i]);
    CCHECK(cudaFree(dsend));
    CCHECK(cudaFree(drecv));
    free(host);
}

static void mixed(ncclComm_t comm, cudaStream_t s, int rank, int n)
{
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    int32_t host[SMALL], *dsum = dev_alloc(sizeof(host)), *dsend = dev_alloc(sizeof(host));
    int32_t *drecv = dev_alloc(sizeof(host));

    for (int i = 0; i < SMALL; i++)
        host[i] = rank * 100 + i;
    CCHECK(cudaMemcpy(dsum, host, sizeof(host), cudaMemcpyHostToDevice));
    CCHECK(cudaMemcpy(dsend, host, sizeof(host), cudaMemcpyHostToDevice));

    NCHECK(ncclGroupStart());
    NCHECK(ncclSend(dsend, SMALL, ncclInt32, right, comm, s));
    NCHECK(ncclAllReduce(dsum, dsum, SMALL, ncclInt32, ncclSum, comm, s));
    NCHECK(ncclRecv(drecv, SMALL, ncclInt32, left, comm, s));
    NCHECK(ncclGroupEnd());
    CCHECK(cudaStreamSynchronize(s));

    CCHECK(cudaMemcpy(host, dsum, sizeof(host), cudaMemcpyDeviceToHost));
    for (int i = 0; i < SMALL; i++)
        EXPECT(host[i] == 100 * n * (n - 1) / 2 + n * i, "rank %d/%d mixed group: sum[%d] = %d",
               rank, n, i, host[i]);
    CCHECK(cudaMemcpy(host, drecv, sizeof(host), cudaMemcpyDeviceToHost));
    for (int i = 0; i < SMALL; i++)
        EXPECT(host[i] == left * 100 + i, "rank %d/%d mixed group: recv[%d] = %d", rank, n, i,
               host[i]);
    CCHECK(cudaFree(dsum));
    CCHECK(cudaFree(dsend));
    CCHECK(cudaFree(drecv));
}

static void usage_errors(ncclComm_t comm, cudaStream_t s, int n)
{
    int x;

    NCHECK_RES(ncclGroupEnd(), ncclInvalidUsage);
    NCHECK_RES(ncclSend(&x, 1, ncclInt32, n, comm, s), ncclInvalidArgument);
    NCHECK_RES(ncclRecv(&x, 1, ncclNumTypes, 0, comm, s), ncclInvalidArgument);
    /* A bad operation fails its whole group, and nothing of it runs. */
    NCHECK(ncclGroupStart());
    NCHECK_RES(ncclSend(&x, 1, ncclInt32, -1, comm, s), ncclInvalidArgument);
    NCHECK_RES(ncclGroupEnd(), ncclInvalidArgument);
    /* The group state is clean again: an empty group is fine. */
    NCHECK(ncclGroupStart());
    NCHECK(ncclGroupEnd());
}

static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg)
{
    ncclComm_t comm;
    cudaStream_t s;

    (void)arg;
    CCHECK(cudaSetDevice(0));
    CCHECK(cudaStreamCreate(&s));
    NCHECK(ncclCommInitRank(&comm, nranks, id, rank));
    ring(comm, s, rank, nranks, SMALL);
    ring(comm, s, rank, nranks, BIG);
    all_to_all(comm, s, rank, nranks);
    mixed(comm, s, rank, nranks);
    usage_errors(comm, s, nranks);
    ring(comm, s, rank, nranks, BIG); /* still healthy */
    NCHECK(ncclCommDestroy(comm));
    CCHECK(cudaStreamDestroy(s));
    return 0;
}

int main(void)
{
    static const int sizes[] = {1, 2, 3, 4, 8};

    /* A ring issued in two halves would hang until this timeout. */
    setenv("NCCL_FAKE_TIMEOUT", "10", 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (nccl_test_run(sizes[i], rank_main, NULL, 60, -1)) {
            fprintf(stderr, "point-to-point failed with %d ranks\n", sizes[i]);
            return 1;
        }
    return 0;
}
