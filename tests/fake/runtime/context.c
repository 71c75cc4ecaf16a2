/*
 * The runtime's lazy initialisation and its per-thread device: the first
 * call that needs the driver runs cuInit(0) once per process, and every call
 * that needs a context makes the primary context of the thread's device
 * current on the calling thread if the thread has none, which is how the
 * real runtime lets any thread use the device without setup.  A context the
 * program made current itself (through the driver API) is used as it is and
 * never replaced.  Primary contexts are retained once and never released:
 * the runtime keeps them for the life of the process.
 */
#include <pthread.h>
#include <stdlib.h>

#include "runtime.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_status;

/* The driver's devices by ordinal, fixed at initialisation. */
static int device_count;
static CUdevice *devices;

/* Primary contexts retained so far, by ordinal, under primary_lock. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext *primary;

/* The ordinal the thread last chose with cudaSetDevice, 0 by default. */
static __thread int thread_device;

static cudaError_t init(void)
{
    cudaError_t err = rt_load();
    CUresult res;

    if (err != cudaSuccess)
        return err;
    res = rt_drv.cuInit(0);
    if (res == CUDA_SUCCESS)
        res = rt_drv.cuDeviceGetCount(&device_count);
    if (res != CUDA_SUCCESS)
        return rt_from_cu(res);
    if (device_count <= 0)
        return cudaErrorNoDevice;
    devices = calloc((size_t)device_count, sizeof(*devices));
    primary = calloc((size_t)device_count, sizeof(*primary));
    if (!devices || !primary)
        return cudaErrorMemoryAllocation;
    for (int i = 0; i < device_count; i++) {
        res = rt_drv.cuDeviceGet(&devices[i], i);
        if (res != CUDA_SUCCESS)
            return rt_from_cu(res);
    }
    return cudaSuccess;
}

static void init_once_fn(void)
{
    init_status = init();
}

cudaError_t rt_init(void)
{
    pthread_once(&init_once, init_once_fn);
    return init_status;
}

cudaError_t rt_device(int ordinal, CUdevice *dev)
{
    cudaError_t err = rt_init();

    if (err != cudaSuccess)
        return err;
    if (ordinal < 0 || ordinal >= device_count)
        return cudaErrorInvalidDevice;
    *dev = devices[ordinal];
    return cudaSuccess;
}

cudaError_t rt_set_device(int ordinal)
{
    CUcontext ctx;
    CUdevice dev;
    CUresult res = CUDA_SUCCESS;
    cudaError_t err = rt_device(ordinal, &dev);

    if (err != cudaSuccess)
        return err;
    pthread_mutex_lock(&primary_lock);
    if (!primary[ordinal])
        res = rt_drv.cuDevicePrimaryCtxRetain(&primary[ordinal], dev);
    ctx = primary[ordinal];
    pthread_mutex_unlock(&primary_lock);
    if (res == CUDA_SUCCESS)
        res = rt_drv.cuCtxSetCurrent(ctx);
    if (res != CUDA_SUCCESS)
        return rt_from_cu(res);
    thread_device = ordinal;
    return cudaSuccess;
}

cudaError_t rt_enter(void)
{
    CUcontext ctx = NULL;
    cudaError_t err = rt_init();
    CUresult res;

    if (err != cudaSuccess)
        return err;
    res = rt_drv.cuCtxGetCurrent(&ctx);
    if (res != CUDA_SUCCESS)
        return rt_from_cu(res);
    return ctx ? cudaSuccess : rt_set_device(thread_device);
}

cudaError_t rt_current_device(int *ordinal)
{
    CUdevice dev;
    cudaError_t err = rt_enter();
    CUresult res;

    if (err != cudaSuccess)
        return err;
    res = rt_drv.cuCtxGetDevice_v2(&dev, NULL); /* NULL: the current context */
    if (res != CUDA_SUCCESS)
        return rt_from_cu(res);
    for (int i = 0; i < device_count; i++) {
        if (devices[i] == dev) {
            *ordinal = i;
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidDevice;
}
