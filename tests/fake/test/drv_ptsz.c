/*
 * The per-thread default stream variants (_ptsz/_ptds): each exists,
 * cuGetProcAddress (and the runtime's cudaGetDriverEntryPoint_ptsz by
 * default) hands it out for the per-thread flag, and its NULL stream is the
 * calling thread's per-thread stream, not the legacy one: it is ordered
 * after the thread's own per-thread work but not after another thread's
 * (the legacy stream would wait for that), and it can be captured (the
 * legacy stream cannot).
 */
#include <pthread.h>
#include <time.h>

#include <cuda_runtime.h>

#include "drv_test.h"

static const struct {
    const char *name;
    void *plain, *pt;
} variants[] = {
    {"cuMemAllocAsync", (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
    {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync, (void *)cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync, (void *)cuMemFreeAsync_ptsz},
    {"cuMemcpy", (void *)cuMemcpy, (void *)cuMemcpy_ptds},
    {"cuMemcpyAsync", (void *)cuMemcpyAsync, (void *)cuMemcpyAsync_ptsz},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2, (void *)cuMemcpyHtoD_v2_ptds},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2, (void *)cuMemcpyDtoH_v2_ptds},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2, (void *)cuMemcpyHtoDAsync_v2_ptsz},
    {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2, (void *)cuMemcpyDtoHAsync_v2_ptsz},
    {"cuMemcpyDtoDAsync", (void *)cuMemcpyDtoDAsync_v2, (void *)cuMemcpyDtoDAsync_v2_ptsz},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async, (void *)cuMemsetD8Async_ptsz},
    {"cuMemsetD32Async", (void *)cuMemsetD32Async, (void *)cuMemsetD32Async_ptsz},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize, (void *)cuStreamSynchronize_ptsz},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2, (void *)cuStreamBeginCapture_v2_ptsz},
    {"cuStreamEndCapture", (void *)cuStreamEndCapture, (void *)cuStreamEndCapture_ptsz},
    {"cuLaunchKernel", (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx, (void *)cuLaunchKernelEx_ptsz},
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* Writes value into *buf after ms milliseconds, or once *flag is set. */
static void writer(void **args)
{
    int32_t *buf = ARG(args, 0, int32_t *);
    volatile int *flag = ARG(args, 1, volatile int *);
    int32_t ms = ARG(args, 2, int32_t);
    int32_t value = ARG(args, 3, int32_t);

    for (int i = 0; i < ms && !(flag && __atomic_load_n(flag, __ATOMIC_ACQUIRE)); i++)
        sleep_ms(1);
    *buf = value;
}

/* cuLaunchKernel_ptsz with NULL, the double's argument slots. */
#define LAUNCH_PT(fn, ...) __extension__({                                     \
    uint64_t v_[] = {__VA_ARGS__};                                             \
    enum { n_ = sizeof(v_) / sizeof(v_[0]) };                                  \
    drv_slot sl_[n_];                                                          \
    void *a_[n_ + 1];                                                          \
    for (int i_ = 0; i_ < n_; i_++) {                                          \
        memset(&sl_[i_], 0, sizeof(sl_[i_]));                                  \
        memcpy(&sl_[i_], &v_[i_], sizeof(v_[i_]));                             \
        a_[i_] = &sl_[i_];                                                     \
    }                                                                          \
    a_[n_] = NULL;                                                             \
    cuLaunchKernel_ptsz((CUfunction)(void *)(fn), 1, 1, 1, 1, 1, 1, 0, NULL,   \
                        a_, NULL);                                             \
})

static CUcontext ctx;
static CUdeviceptr gated;
static volatile int gate, queued;

/* Another thread: a write on its own per-thread stream held until gate. */
static void *other_thread(void *unused)
{
    (void)unused;
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(LAUNCH_PT(writer, PTR(gated), PTR(&gate), 5000, 7));
    __atomic_store_n(&queued, 1, __ATOMIC_RELEASE);
    CHECK(cuStreamSynchronize_ptsz(NULL));
    return NULL;
}

int main(void)
{
    void *fn;

    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        CHECK(cuGetProcAddress_v2(variants[i].name, &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
        EXPECT(fn == variants[i].pt, "%s, per-thread flag: %p, want %p", variants[i].name, fn, variants[i].pt);
        CHECK(cuGetProcAddress_v2(variants[i].name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
        EXPECT(fn == variants[i].plain, "%s, default flags: %p", variants[i].name, fn);
        CHECK(cuGetProcAddress_v2(variants[i].name, &fn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, NULL));
        EXPECT(fn == variants[i].plain, "%s, legacy flag: %p", variants[i].name, fn);
    }
    /* The runtime's _ptsz entry-point query asks for the per-thread ones by default. */
    EXPECT(cudaGetDriverEntryPoint_ptsz("cuLaunchKernel", &fn, cudaEnableDefault, NULL) == cudaSuccess &&
               fn == (void *)cuLaunchKernel_ptsz,
           "cudaGetDriverEntryPoint_ptsz: %p", fn);
    EXPECT(cudaGetDriverEntryPoint_ptsz("cuLaunchKernel", &fn, cudaEnableLegacyStream, NULL) == cudaSuccess &&
               fn == (void *)cuLaunchKernel,
           "cudaGetDriverEntryPoint_ptsz, legacy: %p", fn);
    EXPECT(cudaGetDriverEntryPointByVersion_ptsz("cuMemcpyDtoH", &fn, 13000, cudaEnableDefault, NULL) == cudaSuccess &&
               fn == (void *)cuMemcpyDtoH_v2_ptds,
           "cudaGetDriverEntryPointByVersion_ptsz: %p", fn);
    EXPECT(cudaGetDriverEntryPoint("cuLaunchKernel", &fn, cudaEnableDefault, NULL) == cudaSuccess &&
               fn == (void *)cuLaunchKernel,
           "cudaGetDriverEntryPoint: %p", fn);

    DRV_SETUP();
    CHECK(cuCtxGetCurrent(&ctx));

    /* Allocation, memset, copies and a launch on this thread's stream, in order. */
    CUdeviceptr a, b;
    int32_t host[4] = {1, 2, 3, 4}, back[4] = {0};
    CHECK(cuMemAllocAsync_ptsz(&a, sizeof(host), NULL));
    CHECK(cuMemAllocAsync_ptsz(&b, sizeof(host), NULL));
    CHECK(cuMemsetD32Async_ptsz(a, 0x5a5a5a5a, 4, NULL));
    CHECK(cuMemsetD8Async_ptsz(b, 0, sizeof(host), NULL));
    CHECK(LAUNCH_PT(writer, PTR(a), PTR(NULL), 100, 42)); /* slow: what follows must wait for it */
    CHECK(cuMemcpyDtoDAsync_v2_ptsz(b, a, sizeof(host), NULL));
    CHECK(cuMemcpyDtoHAsync_v2_ptsz(back, b, sizeof(back), NULL));
    CHECK(cuStreamSynchronize_ptsz(NULL));
    EXPECT(back[0] == 42 && back[1] == 0x5a5a5a5a, "per-thread order: %d %x", back[0], (unsigned)back[1]);
    CHECK(cuMemcpyHtoD_v2_ptds(a, host, sizeof(host)));
    CHECK(cuMemcpy_ptds(b, a, sizeof(host)));
    CHECK(cuMemcpyDtoH_v2_ptds(back, b, sizeof(back)));
    EXPECT(back[3] == 4, "synchronous per-thread copies: %d", back[3]);
    CHECK(LAUNCH_PT(writer, PTR(a), PTR(NULL), 100, 43));
    CHECK(cuMemcpyDtoH_v2_ptds(back, a, sizeof(int32_t)));
    EXPECT(back[0] == 43, "a _ptds copy waits for this thread's per-thread work: %d", back[0]);
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    drv_slot sl[4];
    void *args[5];
    uint64_t vals[4] = {PTR(a), 0, 100, 44};
    for (int i = 0; i < 4; i++) {
        memset(&sl[i], 0, sizeof(sl[i]));
        memcpy(&sl[i], &vals[i], sizeof(vals[i]));
        args[i] = &sl[i];
    }
    args[4] = NULL;
    CHECK(cuLaunchKernelEx_ptsz(&cfg, (CUfunction)(void *)writer, args, NULL));
    CHECK(cuMemcpyAsync_ptsz((CUdeviceptr)(uintptr_t)back, a, sizeof(int32_t), NULL));
    CHECK(cuMemcpyHtoDAsync_v2_ptsz(b, host, sizeof(host), NULL));
    CHECK(cuStreamSynchronize_ptsz(NULL));
    EXPECT(back[0] == 44, "cuLaunchKernelEx_ptsz then cuMemcpyAsync_ptsz: %d", back[0]);

    /* Another thread's per-thread stream is not this one's: a _ptds copy
     * and a _ptsz sync here do not wait for its held write (the legacy
     * stream would). */
    CHECK(cuMemAlloc_v2(&gated, sizeof(int32_t)));
    CHECK(cuMemsetD32_v2(gated, 0, 1));
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, other_thread, NULL) == 0, "pthread_create");
    while (!__atomic_load_n(&queued, __ATOMIC_ACQUIRE))
        sleep_ms(1);
    int32_t seen = -1;
    CHECK(cuMemcpyDtoH_v2_ptds(&seen, gated, sizeof(seen)));
    CHECK(cuStreamSynchronize_ptsz(NULL));
    EXPECT(seen == 0, "a _ptds copy waited for another thread's per-thread stream (saw %d)", seen);
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(cuMemcpyDtoH_v2(&seen, gated, sizeof(seen)));
    EXPECT(seen == 7, "the held write: %d", seen);

    /* The per-thread stream can be captured; the legacy one cannot. */
    CUgraph graph;
    CHECK(cuStreamBeginCapture_v2_ptsz(NULL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK(LAUNCH_PT(writer, PTR(a), PTR(NULL), 0, 45));
    CHECK(cuStreamEndCapture_ptsz(NULL, &graph));
    CHECK(cuGraphDestroy(graph));
    CHECK_RES(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

    /* Frees, and the runtime's variants. */
    CHECK(cuMemFreeAsync_ptsz(a, NULL));
    CHECK(cuMemFreeAsync_ptsz(b, NULL));
    void *r = NULL;
    EXPECT(cudaMallocAsync_ptsz(&r, 64, NULL) == cudaSuccess && r, "cudaMallocAsync_ptsz");
    CHECK(cuMemsetD8Async_ptsz((CUdeviceptr)(uintptr_t)r, 9, 64, NULL));
    unsigned char c = 0;
    CHECK(cuMemcpyDtoH_v2_ptds(&c, (CUdeviceptr)(uintptr_t)r, 1));
    EXPECT(c == 9, "cudaMallocAsync_ptsz memory: %d", c);
    EXPECT(cudaFreeAsync_ptsz(r, NULL) == cudaSuccess, "cudaFreeAsync_ptsz");
    CHECK(cuStreamSynchronize_ptsz(NULL));
    CHECK(cuMemFree_v2(gated));
    return 0;
}
