/*
 * A training loop instrumented with NVTX v3, the header-only client of a
 * CUDA toolkit, for CKPT_BOUNDARY=nvtx:NAME.  Each iteration's work sits in
 * one range named train_step, opened as MODE says (push: nvtxRangePushA,
 * wide: nvtxRangePushW, ex / exwide: nvtxRangePushEx with an ASCII / wide
 * message, start / startwide / startex: nvtxRangeStart* and nvtxRangeEnd).
 * Around it: ranges nested inside it, one whose name only starts with
 * train_step, a marker named train_step, a range started in one iteration
 * and ended in the next, and a helper thread that never touches CUDA and
 * holds its own range ("load") open while train_step ends (after one pop
 * too many).  Every iteration launches kernels and synchronises with the
 * host four times, inside and outside train_step, so a boundary found from
 * syncs would fall elsewhere.  When a tool tracks push/pop, the levels it
 * returns are checked: they count per thread.
 * Usage: nvtx_train ITERS MODE.  Prints "levels tracked" or "levels
 * untracked", "iterations N" and "digest X"; exits 1 on any error, 77 when
 * built without the NVTX headers.
 */
#if __has_include(<nvtx3/nvToolsExt.h>)

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#include "kernels.h"

#define WORDS 4096

KERNEL(grad, (float *, g), (const float *, w), (size_t, n), (unsigned, it))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] = w[i] * 0.01f + (float)((i + it) % 7);
}

KERNEL(scale, (float *, g), (size_t, n), (float, by))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] *= by;
}

KERNEL(update, (float *, w), (const float *, g), (size_t, n), (float, lr))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] -= lr * g[i];
}

static const char *const modes[] = {"push", "wide", "ex", "exwide", "start", "startwide", "startex"};
enum mode { PUSH, WIDE, EX, EXWIDE, START, STARTWIDE, STARTEX };

static int iters, failures, tracked;
static pthread_barrier_t meet;

static void fail(const char *what)
{
    fprintf(stderr, "nvtx_train: %s\n", what);
    exit(1);
}

/* Without a tool NVTX returns NVTX_NO_PUSH_POP_TRACKING: nothing to check. */
static void level(int got, int want, const char *what)
{
    if (got == NVTX_NO_PUSH_POP_TRACKING)
        return;
    __atomic_store_n(&tracked, 1, __ATOMIC_RELAXED);
    if (got != want) {
        fprintf(stderr, "nvtx_train: %s at level %d, want %d\n", what, got, want);
        __atomic_fetch_add(&failures, 1, __ATOMIC_RELAXED);
    }
}

static nvtxEventAttributes_t attributes(int wide)
{
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof(a));
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    if (wide) {
        a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
        a.message.unicode = L"train_step";
    } else {
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = "train_step";
    }
    return a;
}

static nvtxRangeId_t open_step(enum mode m)
{
    nvtxEventAttributes_t a = attributes(m == EXWIDE);
    switch (m) {
    case PUSH: level(nvtxRangePushA("train_step"), 0, "train_step"); break;
    case WIDE: level(nvtxRangePushW(L"train_step"), 0, "train_step"); break;
    case EX:
    case EXWIDE: level(nvtxRangePushEx(&a), 0, "train_step"); break;
    case START: return nvtxRangeStartA("train_step");
    case STARTWIDE: return nvtxRangeStartW(L"train_step");
    case STARTEX: return nvtxRangeStartEx(&a);
    }
    return 0;
}

static void close_step(enum mode m, nvtxRangeId_t id)
{
    if (m >= START)
        nvtxRangeEnd(id);
    else
        level(nvtxRangePop(), 0, "the end of train_step");
}

/* Opens its own range after train_step opened and ends it after
 * train_step ended: a stack shared between threads would pop it in
 * train_step's place. */
static void *loader(void *arg)
{
    (void)arg;
    /* A stray pop is NVTX's error, and must not unbalance what follows. */
    level(nvtxRangePop(), -1, "a pop with nothing pushed");
    for (int it = 1; it <= iters; it++) {
        pthread_barrier_wait(&meet);
        level(nvtxRangePushA("load"), 0, "load");
        pthread_barrier_wait(&meet);
        pthread_barrier_wait(&meet);
        level(nvtxRangePop(), 0, "the end of load");
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        fail("usage: nvtx_train ITERS push|wide|ex|exwide|start|startwide|startex");
    iters = atoi(argv[1]);
    int m = -1;
    for (int i = 0; i < (int)(sizeof(modes) / sizeof(modes[0])); i++)
        if (strcmp(argv[2], modes[i]) == 0)
            m = i;
    if (iters < 1 || m < 0)
        fail("bad arguments");
    enum mode mode = (enum mode)m;

    float *w, *g, *scratch, host[WORDS];
    cudaStream_t s;
    for (int i = 0; i < WORDS; i++)
        host[i] = (float)(i % 13) * 0.5f;
    level(nvtxRangePushA("setup"), 0, "setup");
    if (cudaStreamCreate(&s) != cudaSuccess || cudaMalloc((void **)&w, sizeof(host)) != cudaSuccess ||
        cudaMalloc((void **)&g, sizeof(host)) != cudaSuccess || cudaMalloc((void **)&scratch, 256) != cudaSuccess ||
        cudaMemcpy(w, host, sizeof(host), cudaMemcpyHostToDevice) != cudaSuccess)
        fail("setup");
    level(nvtxRangePop(), 0, "the end of setup");

    pthread_t helper;
    if (pthread_barrier_init(&meet, NULL, 2) != 0 || pthread_create(&helper, NULL, loader, NULL) != 0)
        fail("helper thread");

    int inner = mode < START; /* the level of ranges nested in train_step */
    nvtxRangeId_t prefetch = 0;
    for (int it = 1; it <= iters; it++) {
        nvtxRangeId_t step = open_step(mode);
        pthread_barrier_wait(&meet); /* the helper opens "load" */
        pthread_barrier_wait(&meet);
        nvtxMarkA("train_step");

        level(nvtxRangePushA("forward"), inner, "forward");
        if (cudaMemsetAsync(scratch, it & 0xff, 256, s) != cudaSuccess)
            fail("memset");
        grad_launch(DIM3(4), DIM3(256), s, g, w, (size_t)WORDS, (unsigned)it);
        if (cudaStreamSynchronize(s) != cudaSuccess)
            fail("sync after forward");
        level(nvtxRangePop(), inner, "the end of forward");

        level(nvtxRangePushA("train_step/backward"), inner, "train_step/backward");
        level(nvtxRangePushA("allreduce"), inner + 1, "allreduce");
        scale_launch(DIM3(4), DIM3(256), s, g, (size_t)WORDS, 0.5f);
        level(nvtxRangePop(), inner + 1, "the end of allreduce");
        if (cudaStreamSynchronize(s) != cudaSuccess)
            fail("sync after backward");
        level(nvtxRangePop(), inner, "the end of train_step/backward");

        if (prefetch)
            nvtxRangeEnd(prefetch);
        prefetch = nvtxRangeStartA("prefetch");

        float loss;
        if (cudaMemcpy(&loss, g, sizeof(loss), cudaMemcpyDeviceToHost) != cudaSuccess)
            fail("loss");
        update_launch(DIM3(4), DIM3(256), s, w, g, (size_t)WORDS, 0.01f);
        close_step(mode, step);
        pthread_barrier_wait(&meet); /* the helper ends "load" */

        level(nvtxRangePushA("log"), 0, "log");
        if (cudaDeviceSynchronize() != cudaSuccess)
            fail("sync for the log");
        level(nvtxRangePop(), 0, "the end of log");
    }
    nvtxRangeEnd(prefetch);
    pthread_join(helper, NULL);

    if (cudaMemcpy(host, w, sizeof(host), cudaMemcpyDeviceToHost) != cudaSuccess)
        fail("read back");
    uint64_t h = 1469598103934665603ULL;
    const unsigned char *b = (const unsigned char *)host;
    for (size_t i = 0; i < sizeof(host); i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    printf("levels %s\n", tracked ? "tracked" : "untracked");
    printf("iterations %d\n", iters);
    printf("digest %016llx\n", (unsigned long long)h);
    return failures ? 1 : 0;
}

#else

#include <stdio.h>

int main(void)
{
    printf("no nvtx\n");
    return 77;
}

#endif
