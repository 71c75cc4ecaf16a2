/*
 * Thin wrappers of the CUDA runtime.  They only attribute: the driver hook
 * underneath records the allocation; a runtime that reached the driver some
 * other way is caught here (the registry refuses a second entry for the
 * same address, so nothing is counted twice).  The entry-point queries hand
 * out wrappers, as cuGetProcAddress does.  A binary with the static runtime
 * never calls these; the driver hooks see it all the same.
 */
#include "interpose.h"
#include "registry.h"

#define track(p, size, kind, stream)                                           \
    ckpt_track(__builtin_return_address(0), (uint64_t)(uintptr_t)(p), size, kind, stream)

__attribute__((visibility("default"))) cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    NEED_REAL(cudaMalloc, cudaErrorInitializationError);
    ckpt_rt_depth++;
    cudaError_t r = real_cudaMalloc(devPtr, size);
    ckpt_rt_depth--;
    if (r == cudaSuccess)
        track(*devPtr, size, CKPT_ALLOC_PLAIN, NULL);
    return r;
}

__attribute__((visibility("default"))) cudaError_t cudaFree(void *devPtr)
{
    NEED_REAL(cudaFree, cudaErrorInitializationError);
    if (ckpt_active && devPtr)
        ckpt_before_free(NULL, false);
    ckpt_rt_depth++;
    cudaError_t r = real_cudaFree(devPtr);
    ckpt_rt_depth--;
    if (r == cudaSuccess && devPtr && ckpt_active)
        ckpt_reg_remove((uint64_t)(uintptr_t)devPtr);
    return r;
}

__attribute__((visibility("default"))) cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    NEED_REAL(cudaMallocAsync, cudaErrorInitializationError);
    ckpt_rt_depth++;
    cudaError_t r = real_cudaMallocAsync(devPtr, size, hStream);
    ckpt_rt_depth--;
    if (r == cudaSuccess)
        track(*devPtr, size, CKPT_ALLOC_ASYNC, hStream);
    return r;
}

__attribute__((visibility("default"))) cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    NEED_REAL(cudaFreeAsync, cudaErrorInitializationError);
    if (ckpt_active && devPtr)
        ckpt_before_free(hStream, true);
    ckpt_rt_depth++;
    cudaError_t r = real_cudaFreeAsync(devPtr, hStream);
    ckpt_rt_depth--;
    if (r == cudaSuccess && devPtr && ckpt_active)
        ckpt_reg_remove((uint64_t)(uintptr_t)devPtr);
    return r;
}

__attribute__((visibility("default"))) cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                                                           unsigned long long flags,
                                                                           enum cudaDriverEntryPointQueryResult *st)
{
    NEED_REAL(cudaGetDriverEntryPoint, cudaErrorInitializationError);
    cudaError_t r = real_cudaGetDriverEntryPoint(symbol, funcPtr, flags, st);
    if (r == cudaSuccess && funcPtr && *funcPtr)
        *funcPtr = ckpt_hook_substitute(*funcPtr);
    return r;
}

__attribute__((visibility("default"))) cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *st)
{
    NEED_REAL(cudaGetDriverEntryPointByVersion, cudaErrorInitializationError);
    cudaError_t r = real_cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, st);
    if (r == cudaSuccess && funcPtr && *funcPtr)
        *funcPtr = ckpt_hook_substitute(*funcPtr);
    return r;
}
