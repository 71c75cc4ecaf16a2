/*
 * Thin wrappers of the CUDA runtime.  They only attribute: the driver hook
 * underneath records the allocation; a runtime that reached the driver some
 * other way is caught here (the registry refuses a second entry for the
 * same address, so nothing is counted twice).  The entry-point queries hand
 * out wrappers, as cuGetProcAddress does.  A binary with the static runtime
 * never calls these; the driver hooks see it all the same.  The _ptsz
 * variants, which code built with per-thread default streams calls, do the
 * same, their NULL stream being cudaStreamPerThread.
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

#define MALLOC_ASYNC_HOOK(name, null_means)                                    \
    __attribute__((visibility("default"))) cudaError_t name(void **devPtr, size_t size, cudaStream_t hStream) \
    {                                                                          \
        NEED_REAL(name, cudaErrorInitializationError);                         \
        ckpt_rt_depth++;                                                       \
        cudaError_t r = real_##name(devPtr, size, hStream);                    \
        ckpt_rt_depth--;                                                       \
        CUstream s_ = ckpt_stream_or(hStream, null_means);                     \
        uint64_t p_ = r == cudaSuccess ? (uint64_t)(uintptr_t)*devPtr : 0;     \
        if (p_ && ckpt_active && ckpt_stream_capturing(s_)) {                  \
            if (!ckpt_graphmem_owns(p_))                                       \
                ckpt_graphmem_alloc(s_, p_, size);                             \
        } else if (p_) {                                                       \
            track(*devPtr, size, CKPT_ALLOC_ASYNC, s_);                        \
        }                                                                      \
        return r;                                                              \
    }

MALLOC_ASYNC_HOOK(cudaMallocAsync, NULL)
MALLOC_ASYNC_HOOK(cudaMallocAsync_ptsz, cudaStreamPerThread)

static cudaError_t free_async(__typeof__(&cudaFreeAsync) real, cudaStream_t null_means, void *devPtr,
                              cudaStream_t hStream)
{
    if (ckpt_active && devPtr)
        ckpt_before_free(ckpt_stream_or(hStream, null_means), true);
    ckpt_rt_depth++;
    cudaError_t r = real(devPtr, hStream);
    ckpt_rt_depth--;
    if (r == cudaSuccess && devPtr && ckpt_active)
        ckpt_reg_remove((uint64_t)(uintptr_t)devPtr);
    return r;
}

__attribute__((visibility("default"))) cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    NEED_REAL(cudaFreeAsync, cudaErrorInitializationError);
    return free_async(real_cudaFreeAsync, NULL, devPtr, hStream);
}

__attribute__((visibility("default"))) cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    NEED_REAL(cudaFreeAsync_ptsz, cudaErrorInitializationError);
    return free_async(real_cudaFreeAsync_ptsz, cudaStreamPerThread, devPtr, hStream);
}

/* The entry-point queries: whatever the driver answers, its wrapper when
 * libckpt hooks it (the _ptsz forms ask, by default, for the per-thread
 * variants, which cuGetProcAddress substitutes the same way). */
#define ENTRY_HOOK(name, params, args)                                         \
    __attribute__((visibility("default"))) cudaError_t name params             \
    {                                                                          \
        NEED_REAL(name, cudaErrorInitializationError);                         \
        cudaError_t r = real_##name args;                                      \
        if (r == cudaSuccess && funcPtr && *funcPtr)                           \
            *funcPtr = ckpt_hook_substitute(*funcPtr);                         \
        return r;                                                              \
    }

ENTRY_HOOK(cudaGetDriverEntryPoint,
           (const char *symbol, void **funcPtr, unsigned long long flags, enum cudaDriverEntryPointQueryResult *st),
           (symbol, funcPtr, flags, st))
ENTRY_HOOK(cudaGetDriverEntryPoint_ptsz,
           (const char *symbol, void **funcPtr, unsigned long long flags, enum cudaDriverEntryPointQueryResult *st),
           (symbol, funcPtr, flags, st))
ENTRY_HOOK(cudaGetDriverEntryPointByVersion,
           (const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
            enum cudaDriverEntryPointQueryResult *st),
           (symbol, funcPtr, cudaVersion, flags, st))
ENTRY_HOOK(cudaGetDriverEntryPointByVersion_ptsz,
           (const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
            enum cudaDriverEntryPointQueryResult *st),
           (symbol, funcPtr, cudaVersion, flags, st))
