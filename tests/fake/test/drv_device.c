/*
 * The device and contexts: one device named "fakegpu" with compute
 * capability 9.0, 132 SMs, VMM and memory pools, total memory from
 * FAKEGPU_MEM_GB; the primary context is one context however often it is
 * retained; created contexts become current, have their own streams, and
 * the current context is per thread.  A child forked after cuInit cannot
 * use the driver (as with CUDA), while the parent carries on.
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drv_test.h"

static const struct {
    CUdevice_attribute attr;
    int want;
} attrs[] = {
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
};

static CUcontext seen_in_thread = (CUcontext)1;

static void noop(void *arg)
{
    (void)arg;
}

static void *other_thread(void *arg)
{
    (void)arg;
    if (cuCtxGetCurrent(&seen_in_thread) != CUDA_SUCCESS)
        seen_in_thread = (CUcontext)2;
    return NULL;
}

int main(void)
{
    CUcontext primary, again, mine, cur;
    CUdevice dev = -1;
    CUstream s;
    char name[64];
    size_t total;
    int n = 0, v;
    pthread_t th;

    if (setenv("FAKEGPU_MEM_GB", "3", 1))
        return 77;
    CHECK(cuInit(0));
    CHECK(cuInit(0)); /* idempotent */
    CHECK(cuDriverGetVersion(&v));
    EXPECT(v == 13000, "driver version %d", v);
    CHECK(cuDeviceGetCount(&n));
    EXPECT(n == 1, "%d devices", n);
    CHECK(cuDeviceGet(&dev, 0));
    EXPECT(dev == 0, "device %d", dev);
    CHECK(cuDeviceGetName(name, sizeof(name), dev));
    EXPECT(!strcmp(name, "fakegpu"), "name \"%s\"", name);
    CHECK(cuDeviceGetName(name, 5, dev));
    EXPECT(!strcmp(name, "fake"), "truncated name \"%s\"", name);
    CHECK(cuDeviceTotalMem_v2(&total, dev));
    EXPECT(total == (size_t)3 << 30, "total memory %zu with FAKEGPU_MEM_GB=3", total);
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        CHECK(cuDeviceGetAttribute(&v, attrs[i].attr, dev));
        EXPECT(v == attrs[i].want, "attribute %d = %d, want %d", attrs[i].attr, v, attrs[i].want);
    }

    /* The primary context: one, however often retained. */
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(cur == NULL, "a context is current before any was set");
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuDevicePrimaryCtxRetain(&again, dev));
    EXPECT(primary == again, "two primary contexts");
    CHECK(cuCtxSetCurrent(primary));
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(cur == primary, "current %p, want %p", (void *)cur, (void *)primary);
    CHECK(cuCtxGetDevice(&dev));
    CHECK(cuCtxGetDevice_v2(&dev, primary));
    CHECK(cuCtxSynchronize_v2(NULL));
    CHECK_RES(cuCtxDestroy_v2(primary), CUDA_ERROR_INVALID_CONTEXT);

    /* The current context is per thread. */
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, NULL);
    EXPECT(seen_in_thread == NULL, "another thread sees context %p", (void *)seen_in_thread);

    /* A created context becomes current and owns its streams. */
    CHECK(cuCtxCreate_v4(&mine, NULL, 0, dev));
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(cur == mine && mine != primary, "cuCtxCreate did not make a new current context");
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuLaunchHostFunc(s, noop, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy_v2(mine));
    CHECK(cuCtxGetCurrent(&cur));
    EXPECT(cur == NULL, "the destroyed context is still current");
    CHECK_RES(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuCtxSetCurrent(mine), CUDA_ERROR_INVALID_CONTEXT);

    /* fork: the child's driver is unusable, the parent's unaffected. */
    CHECK(cuCtxSetCurrent(primary));
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuLaunchHostFunc(s, noop, NULL));
    pid_t pid = fork();
    if (pid == 0)
        _exit(cuInit(0) == CUDA_ERROR_NOT_INITIALIZED && cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED &&
                      cuStreamSynchronize(s) == CUDA_ERROR_NOT_INITIALIZED
                  ? 0
                  : 1);
    int status = -1;
    EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid, "fork failed");
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child could use the driver");
    CHECK(cuLaunchHostFunc(s, noop, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamDestroy_v2(s));

    CHECK(cuDevicePrimaryCtxRelease_v2(dev));
    CHECK(cuDevicePrimaryCtxRelease_v2(dev));
    CHECK_RES(cuDevicePrimaryCtxRelease_v2(dev), CUDA_ERROR_INVALID_CONTEXT);
    return 0;
}
