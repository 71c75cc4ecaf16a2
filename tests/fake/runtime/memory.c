/*
 * Device, managed, pooled and pinned host memory, and the copies and sets
 * between them, each forwarded to the one driver call the real runtime
 * would make.  Copies pick the driver call by cudaMemcpyKind; HostToHost and
 * Default go through cuMemcpy/cuMemcpyAsync because addresses are unified.
 * This file never touches memory itself: the driver owns every byte, so
 * that a driver-level hook sees every allocation and every transfer.
 */
#include "runtime.h"

/* Device addresses are host-sized pointers on the runtime's side. */
#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    CUdeviceptr p = 0;
    cudaError_t err;
    CUresult res;

    if (!devPtr)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    /* A zero-byte request succeeds with NULL, as in CUDA. */
    res = size ? rt_drv.cuMemAlloc_v2(&p, size) : CUDA_SUCCESS;
    *devPtr = (void *)(uintptr_t)p;
    return rt_result(res);
}

/* cudaFree(NULL) is the idiom that initialises the runtime: it succeeds. */
cudaError_t cudaFree(void *devPtr)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    if (!devPtr)
        return cudaSuccess;
    return rt_result(rt_drv.cuMemFree_v2(DPTR(devPtr)));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    CUdeviceptr p = 0;
    cudaError_t err;
    CUresult res;

    if (!devPtr)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    res = rt_drv.cuMemAllocAsync(&p, size, hStream);
    *devPtr = (void *)(uintptr_t)p;
    return rt_result(res);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemFreeAsync(DPTR(devPtr), hStream));
}

/* The per-thread default stream variants: NULL is cudaStreamPerThread. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return cudaMallocAsync(devPtr, size, hStream ? hStream : cudaStreamPerThread);
}

cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return cudaFreeAsync(devPtr, hStream ? hStream : cudaStreamPerThread);
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream)
{
    CUdeviceptr p = 0;
    cudaError_t err;
    CUresult res;

    if (!ptr)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    res = rt_drv.cuMemAllocFromPoolAsync(&p, size, memPool, stream);
    *ptr = (void *)(uintptr_t)p;
    return rt_result(res);
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    CUdevice dev;
    cudaError_t err;

    if (!memPool)
        return rt_error(cudaErrorInvalidValue);
    err = rt_device(device, &dev);
    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuDeviceGetDefaultMemPool(memPool, dev));
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemPoolGetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemPoolSetAttribute(memPool, (CUmemPool_attribute)attr, value));
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemPoolTrimTo(memPool, minBytesToKeep));
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    CUdeviceptr p = 0;
    cudaError_t err;
    CUresult res;

    if (!devPtr)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    /* cudaMemAttach* and CU_MEM_ATTACH_* share their values. */
    res = rt_drv.cuMemAllocManaged(&p, size, flags);
    *devPtr = (void *)(uintptr_t)p;
    return rt_result(res);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemAllocHost_v2(ptr, size));
}

cudaError_t cudaFreeHost(void *ptr)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemFreeHost(ptr));
}

/* cudaHostAlloc* and CU_MEMHOSTALLOC_* share their values. */
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemHostAlloc(pHost, size, flags));
}

/* cudaHostRegister* and CU_MEMHOSTREGISTER_* share their values. */
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemHostRegister_v2(ptr, size, flags));
}

cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemHostUnregister(ptr));
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemGetInfo_v2(free, total));
}

/*
 * One copy, synchronous when `async` is false (then `stream` is unused).
 * A zero-byte copy of a known kind succeeds without reaching the driver,
 * as in CUDA.
 */
static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                        int async, cudaStream_t stream)
{
    cudaError_t err;
    CUresult res;

    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return rt_error(cudaErrorInvalidMemcpyDirection);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    if (count == 0)
        return cudaSuccess;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        res = async ? rt_drv.cuMemcpyHtoDAsync_v2(DPTR(dst), src, count, stream)
                    : rt_drv.cuMemcpyHtoD_v2(DPTR(dst), src, count);
        break;
    case cudaMemcpyDeviceToHost:
        res = async ? rt_drv.cuMemcpyDtoHAsync_v2(dst, DPTR(src), count, stream)
                    : rt_drv.cuMemcpyDtoH_v2(dst, DPTR(src), count);
        break;
    case cudaMemcpyDeviceToDevice:
        res = async ? rt_drv.cuMemcpyDtoDAsync_v2(DPTR(dst), DPTR(src), count, stream)
                    : rt_drv.cuMemcpyDtoD_v2(DPTR(dst), DPTR(src), count);
        break;
    default: /* HostToHost, Default: unified addresses, the driver decides */
        res = async ? rt_drv.cuMemcpyAsync(DPTR(dst), DPTR(src), count, stream)
                    : rt_drv.cuMemcpy(DPTR(dst), DPTR(src), count);
        break;
    }
    return rt_result(res);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return copy(dst, src, count, kind, 0, NULL);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return copy(dst, src, count, kind, 1, stream);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemsetD8_v2(DPTR(devPtr), (unsigned char)value, count));
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuMemsetD8Async(DPTR(devPtr), (unsigned char)value, count, stream));
}
