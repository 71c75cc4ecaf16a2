/*
 * When copies and memsets return, as CUDA documents it (up to 11.x): an
 * asynchronous device-to-host copy into pageable host memory, and any
 * host-to-host copy, returns only once the copy has completed; into pinned
 * or registered memory, and from pageable memory to the device, it returns
 * at once.  Memsets return at once, except the synchronous ones into
 * pinned host or managed memory.  Each case runs behind a gate kernel that
 * holds the stream: a call that returns at once finds the stream still
 * busy, one that waits returns after another thread opened the gate, with
 * its bytes in place.
 */
#include <pthread.h>
#include <time.h>

#include "drv_test.h"

#define N 4096

static volatile int gate_open;

/* Holds its stream until gate_open (5 s at most, so a failure cannot hang). */
static void gate(void **args)
{
    struct timespec ms = {0, 1000000};

    (void)args;
    for (int i = 0; i < 5000 && !__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE); i++)
        nanosleep(&ms, NULL);
}

static void *opener(void *arg)
{
    struct timespec t = {0, 50 * 1000000};

    (void)arg;
    nanosleep(&t, NULL);
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    return NULL;
}

static pthread_t closes_gate(CUstream s)
{
    pthread_t t;

    __atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
    CHECK(LAUNCH(s, gate, 0));
    EXPECT(pthread_create(&t, NULL, opener, NULL) == 0, "pthread_create");
    return t;
}

/* After a call that must return at once: the gate still holds the stream. */
static void returned_at_once(CUstream s, pthread_t t, const char *what)
{
    CUresult r = cuStreamQuery(s);

    EXPECT(r == CUDA_ERROR_NOT_READY && !__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE),
           "%s waited for the stream", what);
    pthread_join(t, NULL);
    CHECK(cuStreamSynchronize(s));
}

/* After a call that must wait: the gate was opened and the stream is done. */
static void waited(CUstream s, pthread_t t, const char *what)
{
    EXPECT(__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE), "%s returned before the copy ran", what);
    CHECK(cuStreamQuery(s));
    pthread_join(t, NULL);
}

static void expect_bytes(const unsigned char *p, unsigned char v, const char *what)
{
    for (size_t i = 0; i < N; i++)
        EXPECT(p[i] == v, "%s: byte %zu is %#x, want %#x", what, i, p[i], v);
}

int main(void)
{
    static unsigned char pageable[N], pageable2[N], registered[N];
    unsigned char *pinned;
    CUdeviceptr d, managed;
    CUstream s;
    pthread_t t;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&d, N));
    CHECK(cuMemAllocHost_v2((void **)&pinned, N));
    CHECK(cuMemHostRegister_v2(registered, N, 0));
    CHECK(cuMemAllocManaged(&managed, N, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemsetD8_v2(d, 0x11, N));
    CHECK(cuCtxSynchronize());

    /* Device to pinned or registered memory: asynchronous. */
    t = closes_gate(s);
    CHECK(cuMemcpyDtoHAsync_v2(pinned, d, N, s));
    returned_at_once(s, t, "cuMemcpyDtoHAsync into pinned memory");
    expect_bytes(pinned, 0x11, "pinned");
    t = closes_gate(s);
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)registered, d, N, s));
    returned_at_once(s, t, "cuMemcpyAsync into registered memory");
    expect_bytes(registered, 0x11, "registered");

    /* Device to pageable memory: done when the call returns. */
    t = closes_gate(s);
    CHECK(cuMemcpyDtoHAsync_v2(pageable, d, N, s));
    waited(s, t, "cuMemcpyDtoHAsync into pageable memory");
    expect_bytes(pageable, 0x11, "pageable, at return");
    CHECK(cuMemsetD8_v2(d, 0x22, N));
    CHECK(cuCtxSynchronize());
    t = closes_gate(s);
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)pageable, d, N, s));
    waited(s, t, "cuMemcpyAsync into pageable memory");
    expect_bytes(pageable, 0x22, "pageable via cuMemcpyAsync, at return");
    t = closes_gate(s);
    CHECK(cuMemcpyDtoHAsync_v2_ptsz(pageable2, d, N, s));
    waited(s, t, "cuMemcpyDtoHAsync_v2_ptsz into pageable memory");
    expect_bytes(pageable2, 0x22, "pageable via the _ptsz copy, at return");

    /* Host to host, pinned or not: synchronous. */
    memset(pageable2, 0x33, N);
    t = closes_gate(s);
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)pinned, (CUdeviceptr)(uintptr_t)pageable2, N, s));
    waited(s, t, "a host-to-host cuMemcpyAsync");
    expect_bytes(pinned, 0x33, "host to host, at return");

    /* Pageable host memory to the device: asynchronous. */
    t = closes_gate(s);
    CHECK(cuMemcpyHtoDAsync_v2(d, pageable2, N, s));
    returned_at_once(s, t, "cuMemcpyHtoDAsync from pageable memory");

    /* Memsets: asynchronous into device memory, even the synchronous form... */
    t = closes_gate(NULL);
    CHECK(cuMemsetD8_v2(d, 0x44, N));
    returned_at_once(NULL, t, "cuMemsetD8 into device memory");
    t = closes_gate(NULL);
    CHECK(cuMemsetD32_v2(d, 0x44444444, N / 4));
    returned_at_once(NULL, t, "cuMemsetD32 into device memory");
    t = closes_gate(s);
    CHECK(cuMemsetD8Async(d, 0x55, N, s));
    returned_at_once(s, t, "cuMemsetD8Async into device memory");
    t = closes_gate(s);
    CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)pinned, 0x55, N, s));
    returned_at_once(s, t, "cuMemsetD8Async into pinned memory");
    expect_bytes(pinned, 0x55, "pinned memset");

    /* ... synchronous into pinned host and managed memory. */
    t = closes_gate(NULL);
    CHECK(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)pinned, 0x66, N));
    waited(NULL, t, "cuMemsetD8 into pinned memory");
    expect_bytes(pinned, 0x66, "pinned memset, at return");
    t = closes_gate(NULL);
    CHECK(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)registered, 0x67, N));
    waited(NULL, t, "cuMemsetD8 into registered memory");
    expect_bytes(registered, 0x67, "registered memset, at return");
    t = closes_gate(NULL);
    CHECK(cuMemsetD32_v2(managed, 0x68686868, N / 4));
    waited(NULL, t, "cuMemsetD32 into managed memory");
    expect_bytes((const unsigned char *)(uintptr_t)managed, 0x68, "managed memset, at return");

    CHECK(cuMemHostUnregister(registered));
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree_v2(managed));
    CHECK(cuMemFree_v2(d));
    CHECK(cuStreamDestroy_v2(s));
    return 0;
}
