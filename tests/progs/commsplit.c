/*
 * commsplit: a data-parallel step over communicators made the ways large
 * frameworks make them.  The world communicator is initialised
 * nonblocking (ncclCommInitRankConfig with blocking = 0, then
 * ncclCommGetAsyncError polled until it leaves ncclInProgress, as
 * PyTorch's ProcessGroupNCCL does with nonblocking init); a group of half
 * the ranks is split from it by parity, sharing its resources
 * (ncclCommSplit with splitShare = 1, nonblocking too), as a
 * tensor-parallel group is; the gradient buffer is registered with the
 * world (ncclCommRegister, user-buffer registration); and the weights live
 * in memory from ncclMemAlloc (as NCCL's memory pool holds tensors), a
 * window of the world (ncclCommWindowRegister, symmetric) where NCCL makes
 * its memory with cuMem (NCCL_CUMEM_ENABLE, on by default): windows need
 * it, as symmetric-memory frameworks check before they register one.
 *
 * Each iteration every rank derives a gradient from the weights, its rank
 * and the iteration; the world all-reduces it, each rank's part scaled by
 * a factor the device holds and a kernel sets each iteration, the parity
 * group all-reduces a second buffer scaled by a per-rank constant (both
 * ncclRedOpCreatePreMulSum, device-resident and host-immediate, as
 * PyTorch's PREMUL_SUM and gradient averaging make them); a mix of the
 * weights goes through every other way NCCL moves data (ncclAlltoAll, then
 * ncclGather to rank 0, ncclScatter from it, ncclBcast in place, as
 * expert-parallel and evaluation code does); after the last collective the
 * weights take in all three (the update); rank 0 prints the loss, and at
 * the end every rank's digest of its weights, then the communicators' ends
 * as an elastic framework makes them (the memory NCCL holds, the window's
 * buffer, the parity group revoked before it is destroyed).  Integer
 * sums only: the same on every run, whatever the order of arrival.
 *
 * Ranks from RANK and WORLD_SIZE, rank 0's unique id over TCP at
 * MASTER_ADDR:MASTER_PORT (examples/mlp/rendezvous.h), as torchrun sets
 * them; --iters and --die-at as fid.h says.
 */
#include <nccl.h>

#include "fid.h"
#include "../../examples/mlp/rendezvous.h"

#define WORDS 2048

#define NCHECK(call)                                                                                        \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess && r_ != ncclInProgress)                                                      \
            fid_fail(#call, ncclGetErrorString(r_), __FILE__, __LINE__);                                    \
    } while (0)

/* A nonblocking communicator is usable once it leaves ncclInProgress. */
static void wait_ready(ncclComm_t c)
{
    ncclResult_t state;
    NCHECK(ncclCommGetAsyncError(c, &state));
    while (state == ncclInProgress) {
        fid_sleep_us(200);
        NCHECK(ncclCommGetAsyncError(c, &state));
    }
    if (state != ncclSuccess)
        fid_fail("nonblocking communicator", ncclGetErrorString(state), __FILE__, __LINE__);
}

KERNEL(gradient, (const uint32_t *, w), (uint32_t *, g), (uint32_t *, aux), (size_t, n), (uint32_t, salt))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        g[i] = w[(i * 5 + 1) % n] * 2654435761u + salt;
        aux[i] = w[i] ^ (salt * 40503u);
    }
}

KERNEL(update, (uint32_t *, w), (const uint32_t *, g), (const uint32_t *, aux), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = (w[i] << 3 | w[i] >> 29) + g[i] - aux[i];
}

#define PART 64 /* elements per rank of the exchange buffers */

KERNEL(set_scale, (uint32_t *, d), (uint32_t, v))
{
    if (KERNEL_INDEX == 0)
        *d = v;
}

KERNEL(spread, (const uint32_t *, w), (uint32_t *, x), (size_t, n), (uint32_t, salt))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        x[i] = w[(i * 7 + 3) % WORDS] ^ (salt + (uint32_t)i * 2246822519u);
}

KERNEL(mix_in, (uint32_t *, w), (const uint32_t *, x), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] += x[i % PART] * 3266489917u;
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "commsplit");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *r = getenv("RANK"), *n = getenv("WORLD_SIZE");
    int rank = r ? atoi(r) : 0, world = n ? atoi(n) : 1;

    cudaStream_t s;
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ncclUniqueId id;
    if (rank == 0)
        NCHECK(ncclGetUniqueId(&id));
    rendezvous rv = {getenv("MASTER_ADDR"), getenv("MASTER_PORT"), rank, world};
    rendezvous_share(&rv, &id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm, half;
    NCHECK(ncclCommInitRankConfig(&comm, world, id, rank, &cfg));
    wait_ready(comm);
    ncclConfig_t split = NCCL_CONFIG_INITIALIZER;
    split.blocking = 0;
    split.splitShare = 1;
    NCHECK(ncclCommSplit(comm, rank % 2, rank, &half, &split));
    wait_ready(half);

    uint32_t *w, *g, *aux, *dloss, *loss_h;
    void *handle;
    NCHECK(ncclMemAlloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&g, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&aux, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    uint32_t *xa, *xb, *xc, *xd; /* the exchange: world parts, world, world (rank 0's), one part */
    size_t xn = (size_t)world * PART;
    CHECK(cudaMalloc((void **)&xa, xn * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&xb, xn * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&xc, xn * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&xd, PART * sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(xc, 0, xn * sizeof(uint32_t), s));
    /* The scalars: the host's is read by NCCL at the call (changing it
     * after does nothing); the device's as each collective runs. */
    uint32_t *dscale, hscale = 3u + 2u * (uint32_t)rank;
    ncclRedOp_t by_device, by_host, once;
    CHECK(cudaMalloc((void **)&dscale, sizeof(uint32_t)));
    /* One made and destroyed first, as a framework's one-off average is:
     * the operator kept is not the communicator's first. */
    NCHECK(ncclRedOpCreatePreMulSum(&once, &hscale, ncclUint32, ncclScalarHostImmediate, comm));
    NCHECK(ncclRedOpCreatePreMulSum(&by_device, dscale, ncclUint32, ncclScalarDevice, comm));
    NCHECK(ncclRedOpDestroy(once, comm));
    NCHECK(ncclRedOpCreatePreMulSum(&by_host, &hscale, ncclUint32, ncclScalarHostImmediate, half));
    hscale = 0;
    NCHECK(ncclCommRegister(comm, g, WORDS * sizeof(uint32_t), &handle));
    const char *cumem = getenv("NCCL_CUMEM_ENABLE");
    ncclWindow_t win = NULL;
    if (!cumem || strcmp(cumem, "0") != 0)
        NCHECK(ncclCommWindowRegister(comm, w, WORDS * sizeof(uint32_t), &win, NCCL_WIN_COLL_SYMMETRIC));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    CHECK(fid_step_launch(DIM3(8), DIM3(256), s, w, WORDS, 7u)); /* the same start on every rank */

    for (int it = 1; it <= o.iters; it++) {
        CHECK(gradient_launch(DIM3(8), DIM3(256), s, w, g, aux, WORDS, (uint32_t)(it * 31 + rank)));
        CHECK(set_scale_launch(DIM3(1), DIM3(1), s, dscale, (uint32_t)(it * 2 + 1 + rank)));
        NCHECK(ncclAllReduce(g, g, WORDS, ncclUint32, by_device, comm, s));
        NCHECK(ncclAllReduce(aux, aux, WORDS, ncclUint32, by_host, half, s));
        CHECK(spread_launch(DIM3(1), DIM3(64), s, w, xa, xn, (uint32_t)(it * 977 + rank)));
        NCHECK(ncclAlltoAll(xa, xb, PART, ncclUint32, comm, s));
        NCHECK(ncclGather(xb + (size_t)rank * PART, xc, PART, ncclUint32, 0, comm, s));
        NCHECK(ncclScatter(xc, xd, PART, ncclUint32, 0, comm, s));
        NCHECK(ncclBcast(xd, PART, ncclUint32, 0, comm, s));
        /* The update, after the iteration's last collective, as an
         * optimizer step is (docs/scheduling.md: state written before it
         * needs CKPT_CONSISTENCY=strict). */
        CHECK(update_launch(DIM3(8), DIM3(256), s, w, g, aux, WORDS));
        CHECK(mix_in_launch(DIM3(8), DIM3(256), s, w, xd, WORDS));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        if (rank == 0)
            printf("iter %d loss 0x%08x\n", it, *loss_h);
        fid_end_iteration(&o, it);
    }
    printf("rank %d digest %016llx\n", rank,
           (unsigned long long)fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t)));
#ifdef NCCL_SUSPEND_MEM
    /* A framework's memory report (NCCL 2.29): the window's buffer, and what
     * the communicator holds on the device. */
    uint64_t held = 0;
    NCHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &held));
    if (win) {
        void *user = NULL;
        NCHECK(ncclWinGetUserPtr(comm, win, &user));
        if (user != w) {
            fprintf(stderr, "rank %d: the window's buffer is %p, not %p\n", rank, user, (void *)w);
            return 1;
        }
    }
#endif
    /* The parity group revoked before it is destroyed (NCCL 2.28.7), as an
     * elastic framework ends a group whose member it lost: no operation of
     * it is in flight once its state leaves ncclInProgress. */
    NCHECK(ncclCommRevoke(half, NCCL_REVOKE_DEFAULT));
    wait_ready(half);
    NCHECK(ncclRedOpDestroy(by_host, half));
    NCHECK(ncclRedOpDestroy(by_device, comm));
    NCHECK(ncclCommDeregister(comm, handle));
    if (win)
        NCHECK(ncclCommWindowDeregister(comm, win));
    NCHECK(ncclMemFree(w));
    NCHECK(ncclCommDestroy(half));
    NCHECK(ncclCommDestroy(comm));
    return 0;
}
