/*
 * Internal header of the test double's CUDA runtime (libcudart.so.13): the
 * table of driver entry points it uses, the lazy initialisation and the
 * error helpers every cuda* function goes through.  The runtime reaches the
 * driver only through these pointers, obtained from cuGetProcAddress_v2 as
 * the real runtime does, so that anything hooking the driver's resolver
 * sees every call.  Nothing declared here is exported: the version script
 * exports cuda* and __cuda* only, and these names are hidden besides.
 */
#ifndef FAKEGPU_RUNTIME_H
#define FAKEGPU_RUNTIME_H

#include "ckpt_cuda.h"
#include "ckpt_cudart.h"

#pragma GCC visibility push(hidden)

/* The version the runtime asks the driver for, and reports as its own. */
#define RT_CUDA_VERSION CUDART_VERSION

/*
 * Every driver function the runtime calls, once: X(base, suffix), where
 * base is the name cuGetProcAddress_v2 is asked for and base##suffix the
 * function it answers for CUDA 13000, whose prototype the pointer takes
 * (cudaTypedefs.h names them: cuCtxSynchronize at 13000 is
 * cuCtxSynchronize_v2, which takes a context).
 */
#define RT_DRIVER_CALLS(X)                                                     \
    X(cuInit, )                                                                \
    X(cuDriverGetVersion, )                                                    \
    X(cuDeviceGet, )                                                           \
    X(cuDeviceGetCount, )                                                      \
    X(cuDeviceGetAttribute, )                                                  \
    X(cuDevicePrimaryCtxRetain, )                                              \
    X(cuCtxGetCurrent, )                                                       \
    X(cuCtxSetCurrent, )                                                       \
    X(cuCtxGetDevice, _v2)                                                     \
    X(cuCtxSynchronize, _v2)                                                   \
    X(cuMemGetInfo, _v2)                                                       \
    X(cuMemAlloc, _v2)                                                         \
    X(cuMemFree, _v2)                                                          \
    X(cuMemAllocManaged, )                                                     \
    X(cuMemAllocHost, _v2)                                                     \
    X(cuMemFreeHost, )                                                         \
    X(cuMemHostAlloc, )                                                        \
    X(cuMemHostRegister, _v2)                                                  \
    X(cuMemHostUnregister, )                                                   \
    X(cuMemAllocAsync, )                                                       \
    X(cuMemFreeAsync, )                                                        \
    X(cuMemAllocFromPoolAsync, )                                               \
    X(cuDeviceGetDefaultMemPool, )                                             \
    X(cuMemPoolGetAttribute, )                                                 \
    X(cuMemPoolSetAttribute, )                                                 \
    X(cuMemPoolTrimTo, )                                                       \
    X(cuMemcpy, )                                                              \
    X(cuMemcpyAsync, )                                                         \
    X(cuMemcpyHtoD, _v2)                                                       \
    X(cuMemcpyDtoH, _v2)                                                       \
    X(cuMemcpyDtoD, _v2)                                                       \
    X(cuMemcpyHtoDAsync, _v2)                                                  \
    X(cuMemcpyDtoHAsync, _v2)                                                  \
    X(cuMemcpyDtoDAsync, _v2)                                                  \
    X(cuMemsetD8, _v2)                                                         \
    X(cuMemsetD8Async, )                                                       \
    X(cuStreamCreate, )                                                        \
    X(cuStreamCreateWithPriority, )                                            \
    X(cuStreamGetPriority, )                                                   \
    X(cuCtxGetStreamPriorityRange, )                                           \
    X(cuCtxSetLimit, )                                                         \
    X(cuCtxGetLimit, )                                                         \
    X(cuStreamDestroy, _v2)                                                    \
    X(cuStreamSynchronize, )                                                   \
    X(cuStreamQuery, )                                                         \
    X(cuStreamWaitEvent, )                                                     \
    X(cuLaunchHostFunc, )                                                      \
    X(cuStreamBeginCapture, _v2)                                               \
    X(cuStreamEndCapture, )                                                    \
    X(cuStreamIsCapturing, )                                                   \
    X(cuStreamGetCaptureInfo, _v3)                                             \
    X(cuGraphInstantiateWithFlags, )                                           \
    X(cuGraphLaunch, )                                                         \
    X(cuGraphDestroy, )                                                        \
    X(cuGraphExecDestroy, )                                                    \
    X(cuEventCreate, )                                                         \
    X(cuEventDestroy, _v2)                                                     \
    X(cuEventRecord, )                                                         \
    X(cuEventQuery, )                                                          \
    X(cuEventSynchronize, )                                                    \
    X(cuEventElapsedTime, _v2)                                                 \
    X(cuKernelGetFunction, )                                                   \
    X(cuFuncSetAttribute, )                                                    \
    X(cuLaunchKernel, )

/* Typed pointers to the driver, valid once rt_load() has succeeded. */
struct rt_driver {
    __typeof__(&cuGetProcAddress_v2) cuGetProcAddress_v2;
#define RT_DRIVER_FIELD(base, suffix) __typeof__(&base##suffix) base##suffix;
    RT_DRIVER_CALLS(RT_DRIVER_FIELD)
#undef RT_DRIVER_FIELD
};
extern struct rt_driver rt_drv;
/* The driver's fakegpu_kernel_handle, or NULL (rt_load). */
extern CUresult (*rt_kernel_handle)(CUfunction);

/*
 * The three stages of lazy initialisation, each including the ones before;
 * each returns cudaSuccess or the error the calling API function reports.
 * rt_load: the driver is loaded and every entry point resolved (once).
 * rt_init: cuInit(0) has succeeded (once per process).
 * rt_enter: besides, the calling thread has a current context: the primary
 *   context of its device (0 unless cudaSetDevice chose another) is retained
 *   and made current when the thread has none, as the real runtime does.
 */
cudaError_t rt_load(void);
cudaError_t rt_init(void);
cudaError_t rt_enter(void);

/*
 * The CUdevice of a device ordinal, after rt_init(); cudaErrorInvalidDevice
 * for an ordinal the driver does not have.
 */
cudaError_t rt_device(int ordinal, CUdevice *dev);

/*
 * Makes the primary context of device `ordinal` current on the calling
 * thread (retaining it the first time) and remembers the ordinal as the
 * thread's device.  Needs rt_init().
 */
cudaError_t rt_set_device(int ordinal);

/* The thread's device ordinal: that of its current context. */
cudaError_t rt_current_device(int *ordinal);

/* The cudaError_t the runtime reports for a driver result. */
cudaError_t rt_from_cu(CUresult res);

/*
 * Every API function returns through one of these: they record a failure
 * as the thread's last error (cudaErrorNotReady is a status, not an error,
 * and is not recorded) and return it.
 */
cudaError_t rt_error(cudaError_t err);
static inline cudaError_t rt_result(CUresult res)
{
    return rt_error(rt_from_cu(res));
}

#pragma GCC visibility pop

#endif /* FAKEGPU_RUNTIME_H */
