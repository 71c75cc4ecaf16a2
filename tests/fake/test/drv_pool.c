/*
 * Stream-ordered allocation: cuMemAllocAsync returns the address at once,
 * cuMemFreeAsync frees in stream order (the block is reused by a later
 * allocation on another stream only after the free has run, on its own
 * stream at once), cached blocks are released at
 * synchronisation (release threshold 0) or by cuMemPoolTrimTo, and
 * explicit pools behave like the default one.
 */
#include <time.h>

#include "drv_test.h"

#define MiB (1u << 20)

static void fill(void **args)
{
    int32_t *p = ARG(args, 0, int32_t *);
    int32_t n = ARG(args, 1, int32_t);

    for (int32_t i = 0; i < n; i++)
        p[i] = i * 7;
}

static void gate(void **args)
{
    volatile int *flag = ARG(args, 0, volatile int *);
    struct timespec ms = {0, 1000000};

    for (int i = 0; i < 5000 && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
        nanosleep(&ms, NULL);
}

static size_t free_mem(void)
{
    size_t f, t;

    CHECK(cuMemGetInfo_v2(&f, &t));
    return f;
}

/* Waits for the stream without synchronising (which would trim the pools). */
static void drain(CUstream s)
{
    CUresult r;

    while ((r = cuStreamQuery(s)) == CUDA_ERROR_NOT_READY) {
        struct timespec ms = {0, 1000000};

        nanosleep(&ms, NULL);
    }
    CHECK(r);
}

int main(void)
{
    static volatile int flag;
    CUdeviceptr p, q, r, base, plain;
    CUmemoryPool pool, mine;
    CUstream s, s2;
    size_t size, before;
    int32_t host[256];

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    EXPECT(pool != NULL, "no default pool");

    /* The address is usable in stream order at once. */
    CHECK(cuMemAllocAsync(&p, 1000, s));
    CHECK(LAUNCH(s, fill, PTR(p), 250));
    CHECK(cuMemcpyDtoHAsync_v2(host, p, 1000, s));
    CHECK(cuMemGetAddressRange_v2(&base, &size, p + 10));
    EXPECT(base == p && size == 1000, "range %#llx+%zu, want %#llx+1000", base, size, p);
    CHECK(cuMemFreeAsync(p, s));
    CHECK_RES(cuMemGetAddressRange_v2(&base, &size, p), CUDA_ERROR_NOT_FOUND);
    CHECK_RES(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    drain(s);
    for (int i = 0; i < 250; i++)
        EXPECT(host[i] == i * 7, "p[%d] = %d", i, host[i]);

    /* Once the free has run, a fitting allocation on any stream reuses the block. */
    CHECK(cuMemAllocAsync(&q, 900, s2));
    EXPECT(q == p, "the freed block was not reused (%#llx vs %#llx)", q, p);

    /* A free that has not run yet keeps its block from other streams; an
     * allocation on its own stream takes it at once (stream order), and
     * the free, when it runs, leaves the new allocation alone. */
    flag = 0;
    CHECK(LAUNCH(s, gate, PTR(&flag)));
    CHECK(cuMemFreeAsync(q, s));
    CHECK(cuMemAllocAsync(&r, 900, s2));
    EXPECT(r != q, "a block was reused on another stream before its free ran");
    CHECK(cuMemAllocAsync(&p, 800, s));
    EXPECT(p == q, "an allocation on the free's stream did not take the block (%#llx vs %#llx)", p, q);
    CHECK(LAUNCH(s, fill, PTR(p), 200));
    flag = 1;
    drain(s);
    CHECK(cuMemGetAddressRange_v2(&base, &size, p));
    EXPECT(base == p && size == 800, "the queued free took the block back from its new allocation");
    CHECK(cuMemcpyDtoH_v2(host, p, 800));
    EXPECT(host[199] == 199 * 7, "p[199] = %d", host[199]);
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuMemFreeAsync(r, s2));
    drain(s);
    drain(s2);

    /* Cached memory counts as used until a synchronisation releases it. */
    CHECK(cuStreamSynchronize(s));
    before = free_mem();
    CHECK(cuMemAllocAsync(&p, 64 * MiB, s));
    EXPECT(free_mem() <= before - 64 * MiB, "the allocation is not accounted");
    CHECK(cuMemFreeAsync(p, s));
    drain(s);
    EXPECT(free_mem() <= before - 64 * MiB, "the cached block is not accounted");
    CHECK(cuStreamSynchronize(s));
    EXPECT(free_mem() == before, "synchronisation did not release the cache");

    /* cuMemPoolTrimTo releases cached blocks too. */
    CHECK(cuMemAllocAsync(&p, 8 * MiB, s));
    CHECK(cuMemFreeAsync(p, s));
    drain(s);
    EXPECT(free_mem() < before, "the cached block is not accounted");
    CHECK(cuMemPoolTrimTo(pool, 0));
    EXPECT(free_mem() == before, "trim did not release the cache");

    /* An explicit pool; destroying it with an allocation outstanding is allowed. */
    CUmemPoolProps props = {
        .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
    };
    CHECK(cuMemPoolCreate(&mine, &props));
    CHECK(cuMemAllocFromPoolAsync(&p, 4096, mine, s));
    CHECK(LAUNCH(s, fill, PTR(p), 1024));
    CHECK(cuMemPoolDestroy(mine));
    CHECK_RES(cuMemAllocFromPoolAsync(&q, 4096, mine, s), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemcpyDtoHAsync_v2(host, p, sizeof(host), s));
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(host[255] == 255 * 7, "p[255] = %d", host[255]);
    EXPECT(free_mem() == before, "the destroyed pool kept memory");

    /* cuMemFree takes a stream-ordered allocation too. */
    CHECK(cuMemAllocAsync(&p, 4096, s));
    CHECK(cuMemFree_v2(p));

    /* Errors. */
    CHECK_RES(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAllocAsync(&p, 0, s), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAllocAsync(NULL, 16, s), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemAlloc_v2(&plain, 64));
    CHECK_RES(cuMemFreeAsync(plain, s), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree_v2(plain));
    props.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
    CHECK_RES(cuMemPoolCreate(&mine, &props), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemPoolCreate(&mine, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuDeviceGetDefaultMemPool(&mine, 1), CUDA_ERROR_INVALID_DEVICE);

    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuStreamDestroy_v2(s2));
    return 0;
}
