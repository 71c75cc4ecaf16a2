/*
 * A training loop that reaches the driver as code built with per-thread
 * default streams does: every entry point comes from cuGetProcAddress with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (the _ptsz/_ptds variants)
 * and every stream argument is NULL, the calling thread's own stream.  Each
 * iteration it allocates a gradient (cuMemAllocAsync_ptsz), writes
 * pattern(iteration, 0, word) into its first allocation (tests/progs/
 * pattern.h), updates the weights from the gradient, frees the gradient,
 * reads four weights back asynchronously and waits for them
 * (cuStreamSynchronize_ptsz), then reads the loss back synchronously
 * (cuMemcpyDtoH_v2_ptds): two host synchronisations per iteration, the
 * second one its end (and none before the first iteration).
 * Usage: ptsz_train [--iters N].  Prints "iter N loss X w Y" per iteration
 * and a final "digest X" of the weights; under a launcher, only rank 0
 * (RANK) prints, the other ranks computing the same.  Runs on the CPU test double (its
 * kernels are host functions); exits 1 on any error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "pattern.h"

#define PWORDS 16384 /* the pattern allocation, ordinal 0 */
#define NW 4096      /* weights, ordinal 1 */

static __typeof__(&cuLaunchKernel_ptsz) launch_kernel;
static __typeof__(&cuMemAllocAsync_ptsz) mem_alloc_async;
static __typeof__(&cuMemFreeAsync_ptsz) mem_free_async;
static __typeof__(&cuMemcpyDtoH_v2_ptds) memcpy_dtoh;
static __typeof__(&cuMemcpyDtoHAsync_v2_ptsz) memcpy_dtoh_async;
static __typeof__(&cuStreamSynchronize_ptsz) stream_synchronize;

static const struct {
    const char *name;
    void **fn;
} entries[] = {
    {"cuLaunchKernel", (void **)&launch_kernel},
    {"cuMemAllocAsync", (void **)&mem_alloc_async},
    {"cuMemFreeAsync", (void **)&mem_free_async},
    {"cuMemcpyDtoH", (void **)&memcpy_dtoh},
    {"cuMemcpyDtoHAsync", (void **)&memcpy_dtoh_async},
    {"cuStreamSynchronize", (void **)&stream_synchronize},
};

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "ptsz_train: %s failed (%d)\n", what, (int)r);
        exit(1);
    }
}

/* The double's kernels: host functions reading 16-byte argument slots. */
typedef struct {
    _Alignas(16) unsigned char bytes[16];
} slot;
#define ARG(args, i, T) (*(T *)(args)[i])

static void fill(void **args)
{
    uint32_t *p = ARG(args, 0, uint32_t *);
    uint64_t iteration = ARG(args, 1, uint64_t);
    for (size_t i = 0; i < PWORDS; i++)
        p[i] = pattern(iteration, 0, i);
}

static void init(void **args)
{
    float *w = ARG(args, 0, float *);
    for (size_t i = 0; i < NW; i++)
        w[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
}

static void grad(void **args)
{
    float *g = ARG(args, 0, float *);
    const float *w = ARG(args, 1, const float *);
    uint64_t it = ARG(args, 2, uint64_t);
    for (size_t i = 0; i < NW; i++)
        g[i] = w[i] * 0.01f + (float)((i + it) % 7) - 3.0f;
}

static void update(void **args)
{
    float *w = ARG(args, 0, float *);
    const float *g = ARG(args, 1, const float *);
    for (size_t i = 0; i < NW; i++)
        w[i] -= 0.01f * g[i];
}

static void loss(void **args)
{
    float *out = ARG(args, 0, float *);
    const float *w = ARG(args, 1, const float *);
    double s = 0;
    for (size_t i = 0; i < NW; i++)
        s += (double)w[i] * w[i];
    *out = (float)(s / NW);
}

/* Launches k with up to three pointer or integer arguments on the
 * per-thread stream (NULL). */
static void launch(void (*k)(void **), const char *what, uint64_t a0, uint64_t a1, uint64_t a2)
{
    slot s[3];
    uint64_t v[3] = {a0, a1, a2};
    void *args[4];
    for (int i = 0; i < 3; i++) {
        memset(&s[i], 0, sizeof(s[i]));
        memcpy(&s[i], &v[i], sizeof(v[i]));
        args[i] = &s[i];
    }
    args[3] = NULL;
    check(launch_kernel((CUfunction)(void *)k, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), what);
}

#define U(p) ((uint64_t)(uintptr_t)(p))

int main(int argc, char **argv)
{
    int iters = 20;
    /* A progress log: each line out as it is made, so a killed run's lines
     * are all there (a replay does not print them again). */
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: ptsz_train [--iters N]\n");
            return 2;
        }
    }
    const char *rank = getenv("RANK");
    int quiet = rank && atoi(rank) != 0;
    check(cuInit(0), "cuInit");
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        void *legacy = NULL;
        check(cuGetProcAddress_v2(entries[i].name, entries[i].fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                  NULL),
              entries[i].name);
        check(cuGetProcAddress_v2(entries[i].name, &legacy, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, NULL),
              entries[i].name);
        if (*entries[i].fn == legacy) {
            fprintf(stderr, "ptsz_train: the per-thread %s is the legacy one\n", entries[i].name);
            return 1;
        }
    }
    CUcontext ctx;
    check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

    CUdeviceptr pat, w, l;
    check(cuMemAlloc_v2(&pat, PWORDS * 4), "cuMemAlloc pattern");
    check(cuMemAlloc_v2(&w, NW * 4), "cuMemAlloc weights");
    check(cuMemAlloc_v2(&l, 4), "cuMemAlloc loss");
    launch(init, "init", U(w), 0, 0);

    float probe[4], lv;
    for (int it = 0; it < iters; it++) {
        CUdeviceptr g;
        check(mem_alloc_async(&g, NW * 4, NULL), "cuMemAllocAsync_ptsz");
        launch(fill, "fill", U(pat), (uint64_t)it, 0);
        launch(grad, "grad", U(g), U(w), (uint64_t)it);
        launch(update, "update", U(w), U(g), 0);
        check(mem_free_async(g, NULL), "cuMemFreeAsync_ptsz");
        check(memcpy_dtoh_async(probe, w, sizeof(probe), NULL), "cuMemcpyDtoHAsync_v2_ptsz");
        check(stream_synchronize(NULL), "cuStreamSynchronize_ptsz");
        launch(loss, "loss", U(l), U(w), 0);
        check(memcpy_dtoh(&lv, l, sizeof(lv)), "cuMemcpyDtoH_v2_ptds");
        if (!quiet)
            printf("iter %d loss %.6f w %.6f %.6f\n", it + 1, lv, probe[0], probe[3]);
    }
    static float host[NW];
    check(memcpy_dtoh(host, w, sizeof(host)), "cuMemcpyDtoH_v2_ptds");
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *b = (const unsigned char *)host;
    for (size_t i = 0; i < sizeof(host); i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    if (!quiet)
        printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
