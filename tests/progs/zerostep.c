/*
 * zerostep: a data-parallel step sharded the way ZeRO stages 1 and 2 shard
 * it (DeepSpeed's, and FSDP's SHARD_GRAD_OP): the optimizer's state lives
 * in shards, so the update runs between collectives, not after the last.
 * Each iteration every rank derives a gradient from the full parameters,
 * the world reduce-scatters it, each rank steps its shard (its master
 * weights and its moment, both lasting state, written by a kernel), writes
 * its part of the parameters from the new master weights, and the world
 * all-gathers the parameters in place (lasting state written by a
 * collective).  Then a loss is all-reduced for logging, as training loops
 * do after the step: the iteration's last collective comes after every
 * write of lasting state.  Rank 0 prints the loss; at the end every rank
 * prints a digest of its parameters, master weights and moment.  Integer
 * sums only: the same on every run, whatever the order of arrival.
 *
 *   --shard-kib N   each rank's shard of the parameters (default 64 KiB;
 *                   the master weights and the moment are as large)
 *
 * Ranks from RANK and WORLD_SIZE, rank 0's unique id over TCP at
 * MASTER_ADDR:MASTER_PORT (examples/mlp/rendezvous.h), as torchrun sets
 * them; --iters and --die-at as fid.h says.
 */
#include <nccl.h>

#include "fid.h"
#include "../../examples/mlp/rendezvous.h"

#define NCHECK(call)                                                                                        \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess)                                                                              \
            fid_fail(#call, ncclGetErrorString(r_), __FILE__, __LINE__);                                    \
    } while (0)

KERNEL(gradient, (const uint32_t *, p), (uint32_t *, g), (size_t, n), (uint32_t, salt))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] = p[(i * 5 + 1) % n] * 2654435761u + salt;
}

/* The optimizer's step on this rank's shard: moment, then master weights. */
KERNEL(step, (uint32_t *, m), (uint32_t *, v), (const uint32_t *, gs), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE) {
        v[i] = (v[i] >> 1) + gs[i];
        m[i] = (m[i] << 3 | m[i] >> 29) + v[i];
    }
}

/* The shard's parameters from its master weights (a cast, in mixed precision). */
KERNEL(publish, (uint32_t *, part), (const uint32_t *, m), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        part[i] = m[i] ^ 0x5bd1e995u;
}

/* Consumes --shard-kib N from argv; the rest is fid_parse's. */
static size_t shard_words(int *argc, char **argv)
{
    size_t kib = 64;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--shard-kib") != 0 || i + 1 >= *argc)
            continue;
        kib = strtoul(argv[i + 1], NULL, 10);
        if (!kib)
            fid_usage("zerostep [--shard-kib N]");
        memmove(&argv[i], &argv[i + 2], (size_t)(*argc - i - 1) * sizeof(*argv));
        *argc -= 2;
        break;
    }
    return kib * 1024 / sizeof(uint32_t);
}

int main(int argc, char **argv)
{
    size_t S = shard_words(&argc, argv);
    struct fid_opts o;
    fid_parse(argc, argv, &o, "zerostep");
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *r = getenv("RANK"), *n = getenv("WORLD_SIZE");
    int rank = r ? atoi(r) : 0, world = n ? atoi(n) : 1;
    size_t P = S * (size_t)world;

    cudaStream_t s;
    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    ncclUniqueId id;
    if (rank == 0)
        NCHECK(ncclGetUniqueId(&id));
    rendezvous rv = {getenv("MASTER_ADDR"), getenv("MASTER_PORT"), rank, world};
    rendezvous_share(&rv, &id);
    ncclComm_t comm;
    NCHECK(ncclCommInitRank(&comm, world, id, rank));

    uint32_t *p, *g, *gs, *m, *v, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&p, P * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&g, P * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&gs, S * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&m, S * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&v, S * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(v, 0, S * sizeof(uint32_t), s));
    CHECK(cudaMemsetAsync(m, 0, S * sizeof(uint32_t), s));
    CHECK(fid_step_launch(DIM3(8), DIM3(256), s, m, S, 7u)); /* the same start on every rank */
    CHECK(publish_launch(DIM3(8), DIM3(256), s, p + (size_t)rank * S, m, S));
    NCHECK(ncclAllGather(p + (size_t)rank * S, p, S, ncclUint32, comm, s));

    for (int it = 1; it <= o.iters; it++) {
        CHECK(gradient_launch(DIM3(8), DIM3(256), s, p, g, P, (uint32_t)(it * 31 + rank)));
        NCHECK(ncclReduceScatter(g, gs, S, ncclUint32, ncclSum, comm, s));
        CHECK(step_launch(DIM3(8), DIM3(256), s, m, v, gs, S));
        CHECK(publish_launch(DIM3(8), DIM3(256), s, p + (size_t)rank * S, m, S));
        NCHECK(ncclAllGather(p + (size_t)rank * S, p, S, ncclUint32, comm, s));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, p, P, dloss));
        NCHECK(ncclAllReduce(dloss, dloss, 1, ncclUint32, ncclSum, comm, s)); /* for the log */
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        if (rank == 0)
            printf("iter %d loss 0x%08x\n", it, *loss_h);
        fid_end_iteration(&o, it);
    }
    uint64_t h = fid_hash_device(FID_HASH_INIT, p, P * sizeof(uint32_t));
    h = fid_hash_device(h, m, S * sizeof(uint32_t));
    h = fid_hash_device(h, v, S * sizeof(uint32_t));
    printf("rank %d digest %016llx\n", rank, (unsigned long long)h);
    NCHECK(ncclCommDestroy(comm));
    return 0;
}
