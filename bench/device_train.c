/*
 * A training-shaped program whose compute is device time, as on a GPU
 * node, where the host's cores stay idle while kernels run: the double
 * runs a kernel on a host thread, so the example trainer's arithmetic
 * takes the same cores as libckpt's copies and checksums, which a GPU
 * never does.  Here "compute" is a kernel that sleeps for a set time.
 * Each rank (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as ckpt-resume
 * gives them) holds --mib MiB of state and, each iteration, computes
 * --compute-ms, all-reduces --grad-mib MiB of gradients, computes again,
 * all-reduces again, then adds the gradients into the state (the update)
 * and waits for the stream.  Rank 0 prints "iter N" after each iteration
 * and a digest of its state at the end, so that runs can be compared.
 * Usage: device_train [--iters N] [--mib M] [--grad-mib G] [--compute-ms C]
 * (G a power of two).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels.h"
#include "../examples/mlp/rendezvous.h"

KERNEL(compute, (int, ms))
{
    if (KERNEL_INDEX == 0) {
        struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
    }
}

KERNEL(seed, (uint32_t *, p), (size_t, words), (uint32_t, rank))
{
    for (size_t i = KERNEL_INDEX; i < words; i += KERNEL_STRIDE)
        p[i] = (uint32_t)i * 2654435761u + rank;
}

/* gwords is a power of two. */
KERNEL(update, (uint32_t *, state), (size_t, words), (const uint32_t *, grad), (size_t, gwords))
{
    for (size_t i = KERNEL_INDEX; i < words; i += KERNEL_STRIDE)
        state[i] = state[i] * 31u + grad[i & (gwords - 1)];
}

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "device_train: %s failed\n", what);
        exit(1);
    }
}

static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

int main(int argc, char **argv)
{
    int iters = 40, mib = 32, grad_mib = 4, compute_ms = 20;
    for (int i = 1; i < argc; i++) {
        int *opt = !strcmp(argv[i], "--iters")        ? &iters
                   : !strcmp(argv[i], "--mib")        ? &mib
                   : !strcmp(argv[i], "--grad-mib")   ? &grad_mib
                   : !strcmp(argv[i], "--compute-ms") ? &compute_ms
                                                      : NULL;
        if (!opt || i + 1 >= argc || (*opt = atoi(argv[++i])) <= 0 || (grad_mib & (grad_mib - 1))) {
            fprintf(stderr, "usage: device_train [--iters N] [--mib M] [--grad-mib G] [--compute-ms C]\n");
            return 2;
        }
    }
    rendezvous rv = { getenv("MASTER_ADDR"), getenv("MASTER_PORT"), env_int("RANK", 0), env_int("WORLD_SIZE", 1) };
    ncclUniqueId id;
    if (rv.rank == 0)
        check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    rendezvous_share(&rv, &id);
    ncclComm_t comm;
    check(ncclCommInitRank(&comm, rv.world, id, rv.rank) == ncclSuccess, "ncclCommInitRank");

    size_t words = (size_t)mib << 18, gwords = (size_t)grad_mib << 18;
    uint32_t *state, *grad;
    cudaStream_t stream;
    check(cudaMalloc((void **)&state, words * 4) == cudaSuccess, "cudaMalloc(state)");
    check(cudaMalloc((void **)&grad, gwords * 4) == cudaSuccess, "cudaMalloc(grad)");
    check(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
    check(seed_launch(DIM3(64), DIM3(256), stream, state, words, (uint32_t)rv.rank) == cudaSuccess, "seed");
    check(seed_launch(DIM3(64), DIM3(256), stream, grad, gwords, (uint32_t)rv.rank) == cudaSuccess, "seed");
    check(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize");

    for (int it = 1; it <= iters; it++) {
        for (int k = 0; k < 2; k++) {
            check(compute_launch(DIM3(1), DIM3(1), stream, compute_ms) == cudaSuccess, "compute");
            check(ncclAllReduce(grad, grad, gwords, ncclUint32, ncclSum, comm, stream) == ncclSuccess,
                  "ncclAllReduce");
        }
        check(update_launch(DIM3(64), DIM3(256), stream, state, words, grad, gwords) == cudaSuccess, "update");
        check(cudaStreamSynchronize(stream) == cudaSuccess, "cudaStreamSynchronize");
        if (rv.rank == 0) {
            printf("iter %d\n", it);
            fflush(stdout);
        }
    }
    uint32_t *host = malloc(words * 4);
    check(host && cudaMemcpy(host, state, words * 4, cudaMemcpyDeviceToHost) == cudaSuccess, "cudaMemcpy");
    uint64_t digest = 14695981039346656037ull;
    for (size_t i = 0; i < words; i++)
        digest = (digest ^ host[i]) * 1099511628211ull;
    if (rv.rank == 0)
        printf("digest %016llx\n", (unsigned long long)digest);
    free(host);
    ncclCommDestroy(comm);
    return 0;
}
