/*
 * A training-shaped program for the capture tests.  Each iteration it
 * (1) lets scratch kernels scribble over scratch buffers on a side stream,
 * (2) with --churn, frees some state allocations and makes new ones through
 * every allocation path (cudaMalloc, cudaMallocAsync, cuMemCreate+cuMemMap),
 * (3) writes pattern(iteration, ordinal, word) into every live state
 * allocation, (4) synchronises with the host.  At the end it prints one
 * line per live state allocation: "live <ordinal> <bytes> <iteration>".
 * Ordinals count the program's allocations in order, as libckpt does.
 * --mib M adds one state allocation of M MiB (benchmarks).  --nccl MS
 * makes the iteration training-shaped for the scheduler: before the writes
 * (the "update"), MS ms of compute, an AllReduce of a scratch buffer, MS ms
 * more, another AllReduce; compute is a sleep, so the pattern stays put on
 * a loaded machine.  --streams makes each iteration's writes on a stream
 * of their own, created for it, as programs that make a side stream per
 * step do; they are destroyed at the end (the double's cuStreamDestroy
 * waits for the stream's work, CUDA's does not).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include <cuda.h>
#include <nccl.h>

#include "kernels.h"
#include "pattern.h"

KERNEL(fill, (uint32_t *, p), (size_t, words), (uint64_t, iteration), (uint64_t, ordinal))
{
    for (size_t i = KERNEL_INDEX; i < words; i += KERNEL_STRIDE)
        p[i] = pattern(iteration, ordinal, i);
}

KERNEL(scribble, (uint32_t *, p), (size_t, words), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < words; i += KERNEL_STRIDE)
        p[i] = seed * 2654435761u + (uint32_t)i;
}

KERNEL(nap, (int, ms))
{
    if (KERNEL_INDEX == 0) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

enum path { PLAIN, ASYNC, VMM };
struct buf {
    uint32_t *p;
    size_t bytes;
    uint64_t ordinal;
    enum path path;
    CUmemGenericAllocationHandle handle;
    int live;
};

#define MAX_BUFS 256
static struct buf bufs[MAX_BUFS];
static int nbufs;
static uint64_t next_ordinal;
static cudaStream_t stream, side;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "statewriter: %s failed\n", what);
        exit(1);
    }
}

static void make(size_t bytes, enum path path)
{
    struct buf *b = &bufs[nbufs++];
    check(nbufs <= MAX_BUFS, "too many buffers");
    memset(b, 0, sizeof(*b));
    b->bytes = bytes;
    b->path = path;
    b->live = 1;
    if (path == PLAIN) {
        check(cudaMalloc((void **)&b->p, bytes) == cudaSuccess, "cudaMalloc");
    } else if (path == ASYNC) {
        check(cudaMallocAsync((void **)&b->p, bytes, stream) == cudaSuccess, "cudaMallocAsync");
    } else {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        size_t gran = 0;
        check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS, "granularity");
        b->bytes = (bytes + gran - 1) / gran * gran;
        CUdeviceptr va;
        check(cuMemCreate(&b->handle, b->bytes, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
        check(cuMemAddressReserve(&va, b->bytes, 0, 0, 0) == CUDA_SUCCESS, "cuMemAddressReserve");
        check(cuMemMap(va, b->bytes, 0, b->handle, 0) == CUDA_SUCCESS, "cuMemMap");
        CUmemAccessDesc access;
        memset(&access, 0, sizeof(access));
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        check(cuMemSetAccess(va, b->bytes, &access, 1) == CUDA_SUCCESS, "cuMemSetAccess");
        b->p = (uint32_t *)(uintptr_t)va;
    }
    b->ordinal = next_ordinal++;
}

static void drop(struct buf *b)
{
    b->live = 0;
    if (b->path == PLAIN) {
        check(cudaFree(b->p) == cudaSuccess, "cudaFree");
    } else if (b->path == ASYNC) {
        check(cudaFreeAsync(b->p, stream) == cudaSuccess, "cudaFreeAsync");
    } else {
        CUdeviceptr va = (CUdeviceptr)(uintptr_t)b->p;
        check(cuMemUnmap(va, b->bytes) == CUDA_SUCCESS, "cuMemUnmap");
        check(cuMemAddressFree(va, b->bytes) == CUDA_SUCCESS, "cuMemAddressFree");
        check(cuMemRelease(b->handle) == CUDA_SUCCESS, "cuMemRelease");
    }
}

int main(int argc, char **argv)
{
    int iters = 10, churn = 0, mib = 0, nccl_ms = -1, fresh_streams = 0;
    ncclComm_t comm = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (strcmp(argv[i], "--churn") == 0)
            churn = 1;
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = atoi(argv[++i]);
        else if (strcmp(argv[i], "--nccl") == 0 && i + 1 < argc)
            nccl_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--streams") == 0)
            fresh_streams = 1;
        else {
            fprintf(stderr, "usage: statewriter [--iters N] [--churn] [--mib M] [--nccl MS] [--streams]\n");
            return 2;
        }
    }
    check(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
    check(cudaStreamCreate(&side) == cudaSuccess, "cudaStreamCreate");
    cudaEvent_t scribbled;
    check(cudaEventCreateWithFlags(&scribbled, cudaEventDisableTiming) == cudaSuccess, "cudaEventCreate");

    /* Scratch buffers: allocated like state, never holding a pattern. */
    uint32_t *scratch[2];
    size_t scratch_words = 1 << 16;
    for (int s = 0; s < 2; s++)
        check(cudaMalloc((void **)&scratch[s], scratch_words * 4) == cudaSuccess, "cudaMalloc scratch");
    next_ordinal = 2;
    static const size_t sizes[] = {4096, 12345 * 4, 1 << 18, 777 * 4, 3 << 16};
    for (int k = 0; k < 5; k++)
        make(sizes[k], PLAIN);
    if (mib > 0) /* one large state tensor, for throughput benchmarks */
        make((size_t)mib << 20, PLAIN);
    if (nccl_ms >= 0) {
        ncclUniqueId id;
        check(ncclGetUniqueId(&id) == ncclSuccess && ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess,
              "ncclCommInitRank");
    }

    cudaStream_t *made = calloc((size_t)iters, sizeof(*made));
    check(made != NULL, "calloc");
    for (int it = 0; it < iters; it++) {
        for (int s = 0; s < 2; s++)
            check(scribble_launch(DIM3(64), DIM3(256), side, scratch[s], scratch_words, (uint32_t)it) == cudaSuccess,
                  "scribble");
        check(cudaEventRecord(scribbled, side) == cudaSuccess, "cudaEventRecord");
        cudaStream_t update = stream;
        if (fresh_streams)
            check(cudaStreamCreateWithFlags(&update, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreate");
        /* (A fresh stream's writes depend on nothing of the program's: only
         * libckpt may order them after a snapshot's copies.) */
        if (!fresh_streams)
            check(cudaStreamWaitEvent(update, scribbled, 0) == cudaSuccess, "cudaStreamWaitEvent");
        if (churn) {
            int victim = 0;
            for (int i = 0; i < nbufs; i++) /* free every third live buffer, rotating */
                if (bufs[i].live && (victim++ + it) % 3 == 0)
                    drop(&bufs[i]);
            make(4096 + 4096 * (size_t)(it % 5), (enum path)(it % 3));
            make(8192, (enum path)((it + 1) % 3));
        }
        for (int s = 0; comm && s < 2; s++) {
            check(nap_launch(DIM3(1), DIM3(1), stream, nccl_ms) == cudaSuccess, "nap");
            check(ncclAllReduce(scratch[s], scratch[s], scratch_words, ncclFloat, ncclSum, comm, stream) == ncclSuccess,
                  "ncclAllReduce");
        }
        for (int i = 0; i < nbufs; i++)
            if (bufs[i].live)
                check(fill_launch(DIM3(64), DIM3(256), update, bufs[i].p, bufs[i].bytes / 4, (uint64_t)it,
                                  bufs[i].ordinal) == cudaSuccess,
                      "fill");
        check(cudaStreamSynchronize(update) == cudaSuccess, "cudaStreamSynchronize");
        if (fresh_streams)
            made[it] = update;
    }
    for (int it = 0; fresh_streams && it < iters; it++)
        check(cudaStreamDestroy(made[it]) == cudaSuccess, "cudaStreamDestroy");
    free(made);
    for (int i = 0; i < nbufs; i++)
        if (bufs[i].live)
            printf("live %llu %zu %d\n", (unsigned long long)bufs[i].ordinal, bufs[i].bytes, iters - 1);
    if (comm)
        ncclCommDestroy(comm);
    return 0;
}
