/*
 * Wrappers of the CUDA driver API: the source of truth for device
 * allocations, whichever way the program reached the driver.  Each wrapper
 * calls the real function first and records only what succeeded; it must
 * never change what the program sees, and a failure inside libckpt only
 * costs the registry an entry, reported once.
 */
#include <dlfcn.h>
#include <string.h>

#include "interpose.h"
#include "log.h"
#include "registry.h"

__thread int ckpt_rt_depth;
__thread int ckpt_nccl_depth;
__thread int ckpt_self_depth;

/* True when code inside libnccl made the call: NCCL's own threads (a
 * nonblocking init, the proxy) allocate outside any wrapped NCCL call. */
static bool called_from_nccl(const void *caller)
{
    Dl_info info;
    return dladdr(caller, &info) && info.dli_fname && strstr(info.dli_fname, "libnccl");
}

void ckpt_track(const void *caller, uint64_t p, uint64_t size, enum ckpt_alloc_kind kind, CUstream stream)
{
    if (!ckpt_active || ckpt_self_depth)
        return;
    bool internal = ckpt_nccl_depth > 0 || called_from_nccl(caller);
    uint64_t ordinal;
    int rc = ckpt_reg_add(p, size, kind, (uint64_t)(uintptr_t)stream, internal, &ordinal);
    if (rc == 0 && !internal)
        ckpt_history_alloc(ordinal, size);
    if (rc == 0) {
        ckpt_hookstat(CKPT_HS_ALLOC, caller, internal);
        if (kind == CKPT_ALLOC_VMM)
            ckpt_hookstat_vmm(size, internal);
    }
    if (rc < 0 && rc != -EEXIST)
        ckpt_log_once(CKPT_WARN, "cannot track a device allocation (%s); checkpoints are incomplete",
                      rc == -ENOMEM ? "out of host memory" : "registry error");
}

#define track(...) ckpt_track(__builtin_return_address(0), __VA_ARGS__)

static void untrack(CUdeviceptr p)
{
    if (ckpt_active)
        ckpt_reg_remove(p);
}

__attribute__((visibility("default"))) CUresult cuInit(unsigned int Flags)
{
    NEED_REAL(cuInit, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuInit(Flags);
    if (r == CUDA_SUCCESS)
        ckpt_wake();
    return r;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                                                    cuuint64_t flags,
                                                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    NEED_REAL(cuGetProcAddress_v2, CUDA_ERROR_NOT_FOUND);
    CUresult r = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = ckpt_hook_substitute(*pfn);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    NEED_REAL(cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemAlloc_v2(dptr, bytesize);
    if (r == CUDA_SUCCESS)
        track(*dptr, bytesize, CKPT_ALLOC_PLAIN, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                                                   size_t Height, unsigned int ElementSizeBytes)
{
    NEED_REAL(cuMemAllocPitch_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r == CUDA_SUCCESS)
        track(*dptr, *pPitch * Height, CKPT_ALLOC_PLAIN, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    NEED_REAL(cuMemAllocManaged, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemAllocManaged(dptr, bytesize, flags);
    if (r == CUDA_SUCCESS)
        track(*dptr, bytesize, CKPT_ALLOC_MANAGED, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED_REAL(cuMemFree_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_active)
        ckpt_before_free(NULL, false);
    CUresult r = real_cuMemFree_v2(dptr);
    if (r == CUDA_SUCCESS)
        untrack(dptr);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    NEED_REAL(cuMemAllocAsync, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemAllocAsync(dptr, bytesize, hStream);
    if (r == CUDA_SUCCESS)
        track(*dptr, bytesize, CKPT_ALLOC_ASYNC, hStream);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                                                        CUmemoryPool pool, CUstream hStream)
{
    NEED_REAL(cuMemAllocFromPoolAsync, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
    if (r == CUDA_SUCCESS)
        track(*dptr, bytesize, CKPT_ALLOC_ASYNC, hStream);
    return r;
}

/* The block stays valid for work already queued before the free, but no
 * snapshot taken after this call may read it: it is dead for the program. */
__attribute__((visibility("default"))) CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    NEED_REAL(cuMemFreeAsync, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_active)
        ckpt_before_free(hStream, true);
    CUresult r = real_cuMemFreeAsync(dptr, hStream);
    if (r == CUDA_SUCCESS)
        untrack(dptr);
    return r;
}

/* Virtual memory: what the program can read is a mapped range, so the
 * mapping (not cuMemCreate's physical handle) is the allocation. */
__attribute__((visibility("default"))) CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    NEED_REAL(cuMemMap, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuMemMap(ptr, size, offset, handle, flags);
    if (r == CUDA_SUCCESS)
        track(ptr, size, CKPT_ALLOC_VMM, NULL);
    return r;
}

__attribute__((visibility("default"))) CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_REAL(cuMemUnmap, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_active)
        ckpt_before_free(NULL, false);
    CUresult r = real_cuMemUnmap(ptr, size);
    if (r == CUDA_SUCCESS)
        untrack(ptr);
    return r;
}
