/*
 * Device calls and the runtime's lazy initialisation: any thread can use
 * the runtime without setup (the primary context of device 0 becomes
 * current on it, the same context for every thread), the device is chosen
 * per thread, attributes and versions come through, and
 * cudaDeviceSynchronize waits for work on every stream.
 */
#include <cuda.h>
#include <pthread.h>
#include <unistd.h>

#include "rt_test.h"

struct seen {
    CUcontext before, after;
    int device;
    cudaError_t err;
};

/* A fresh thread: no context until its first runtime call makes one current. */
static void *fresh_thread(void *arg)
{
    struct seen *seen = arg;
    void *p = NULL;

    cuCtxGetCurrent(&seen->before);
    seen->err = cudaMalloc(&p, 256);
    if (seen->err == cudaSuccess)
        seen->err = cudaFree(p);
    cuCtxGetCurrent(&seen->after);
    if (seen->err == cudaSuccess)
        seen->err = cudaGetDevice(&seen->device);
    return NULL;
}

static void *set_last_device(void *arg)
{
    struct seen *seen = arg;

    seen->err = cudaSetDevice(seen->device);
    if (seen->err == cudaSuccess)
        seen->err = cudaGetDevice(&seen->device);
    return NULL;
}

static void delay(void *arg)
{
    (void)arg;
    usleep(50 * 1000);
}

static void flag(void *arg)
{
    *(volatile int *)arg = 1;
}

int main(void)
{
    static const enum cudaDeviceAttr positive[] = {
        cudaDevAttrMaxThreadsPerBlock, cudaDevAttrWarpSize, cudaDevAttrMultiProcessorCount,
        cudaDevAttrComputeCapabilityMajor,
    };
    static const enum cudaDeviceAttr any[] = {
        cudaDevAttrPciBusId, cudaDevAttrPciDeviceId, cudaDevAttrPciDomainId,
        cudaDevAttrComputeCapabilityMinor, cudaDevAttrMemoryPoolsSupported,
    };
    struct seen seen = {0};
    volatile int done = 0;
    CUcontext mine = NULL;
    cudaStream_t s;
    pthread_t t;
    int count = 0, device = -1, value, v = 0;

    CHECK(cudaRuntimeGetVersion(&v));
    EXPECT(v == 13000, "runtime version %d", v);
    CHECK(cudaDriverGetVersion(&v));
    EXPECT(v >= 13000, "driver version %d", v);

    CHECK(cudaGetDeviceCount(&count));
    EXPECT(count >= 1, "%d devices", count);
    CHECK(cudaGetDevice(&device));
    EXPECT(device == 0, "default device %d", device);
    CHECK_ERR(cudaSetDevice(count), cudaErrorInvalidDevice);
    CHECK_ERR(cudaSetDevice(-1), cudaErrorInvalidDevice);
    CHECK(cudaSetDevice(0));
    EXPECT(cuCtxGetCurrent(&mine) == CUDA_SUCCESS && mine, "no current context after cudaSetDevice");

    EXPECT(pthread_create(&t, NULL, fresh_thread, &seen) == 0, "pthread_create");
    pthread_join(t, NULL);
    CHECK(seen.err);
    EXPECT(seen.before == NULL, "a new thread starts with a context");
    EXPECT(seen.after == mine, "the runtime gave a thread %p, not the primary context %p",
           (void *)seen.after, (void *)mine);
    EXPECT(seen.device == 0, "device %d in a new thread", seen.device);

    /* The device is per thread: another thread's choice leaves ours alone. */
    seen = (struct seen){.device = count - 1};
    EXPECT(pthread_create(&t, NULL, set_last_device, &seen) == 0, "pthread_create");
    pthread_join(t, NULL);
    CHECK(seen.err);
    EXPECT(seen.device == count - 1, "other thread on device %d", seen.device);
    CHECK(cudaGetDevice(&device));
    EXPECT(device == 0, "device %d here after another thread chose %d", device, count - 1);

    for (size_t i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
        value = -1;
        CHECK(cudaDeviceGetAttribute(&value, positive[i], 0));
        EXPECT(value > 0, "attribute %d is %d", (int)positive[i], value);
    }
    for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++)
        CHECK(cudaDeviceGetAttribute(&value, any[i], 0));
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, 0));
    EXPECT(value == 32, "warp size %d", value);
    CHECK_ERR(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, count), cudaErrorInvalidDevice);
    CHECK_ERR(cudaDeviceGetAttribute(NULL, cudaDevAttrWarpSize, 0), cudaErrorInvalidValue);

    /* Priorities: the device's range, a stream's clamped into it. */
    int least = 1, greatest = 1, prio = 1;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    EXPECT(least == 0 && greatest < 0, "priority range %d..%d", least, greatest);
    CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest - 3));
    CHECK(cudaStreamGetPriority(s, &prio));
    EXPECT(prio == greatest, "a stream made at priority %d has %d", greatest - 3, prio);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamGetPriority(NULL, &prio));
    EXPECT(prio == 0, "the default stream's priority %d", prio);

    /* Limits: a GPU's defaults, set and read back per context; the CIG
     * ones (7 and up) cannot be set, and L2 fetches are 128 bytes at most. */
    size_t limit = 0;
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitStackSize));
    EXPECT(limit == 1024, "default stack size %zu", limit);
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitMallocHeapSize));
    EXPECT(limit == 8 << 20, "default malloc heap %zu", limit);
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    CHECK(cudaDeviceGetLimit(&limit, cudaLimitStackSize));
    EXPECT(limit == 4096, "stack size %zu after setting 4096", limit);
    CHECK_ERR(cudaDeviceSetLimit((enum cudaLimit)7, 1), cudaErrorInvalidValue);
    CHECK_ERR(cudaDeviceSetLimit(cudaLimitMaxL2FetchGranularity, 256), cudaErrorInvalidValue);
    CHECK_ERR(cudaDeviceGetLimit(NULL, cudaLimitStackSize), cudaErrorInvalidValue);

    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaLaunchHostFunc(s, delay, NULL));
    CHECK(cudaLaunchHostFunc(s, flag, (void *)&done));
    CHECK(cudaDeviceSynchronize());
    EXPECT(done, "cudaDeviceSynchronize returned before a stream's work ran");
    CHECK(cudaStreamDestroy(s));

    CHECK_ERR(cudaGetDeviceCount(NULL), cudaErrorInvalidValue);
    CHECK_ERR(cudaRuntimeGetVersion(NULL), cudaErrorInvalidValue);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    return 0;
}
