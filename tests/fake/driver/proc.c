/*
 * cuGetProcAddress: the way the CUDA runtime (and libraries built on it)
 * reach the driver.  One table maps a base name and the CUDA version that
 * introduced a behaviour to the versioned entry point, as the real driver
 * does: "cuMemAlloc" is cuMemAlloc (v1, 32-bit pointers) before 3.2 and
 * cuMemAlloc_v2 from 3.2 on, "cuCtxSynchronize" takes a context from 13.0
 * on.  A version older than every variant the double implements answers
 * VERSION_NOT_SUFFICIENT and a NULL pointer, never a function with the
 * wrong signature.  A call that has a per-thread default stream variant
 * names it too: CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM gets that
 * one (cuLaunchKernel_ptsz, cuMemcpyDtoH_v2_ptds), the default and legacy
 * flags the plain one, as in CUDA.
 */
#include <string.h>

#include "driver.h"

#define P(name, version, fn) {name, version, (void *)fn, (void *)fn}
#define PT(name, version, fn, ptfn) {name, version, (void *)fn, (void *)ptfn}

static const struct {
    const char *name;
    int version; /* the first cudaVersion that gets fn */
    void *fn;
    void *pt; /* what the per-thread flag gets */
} procs[] = {
    P("cuInit", 2000, cuInit),
    P("cuDriverGetVersion", 2020, cuDriverGetVersion),
    P("cuGetErrorString", 6000, cuGetErrorString),
    P("cuGetErrorName", 6000, cuGetErrorName),
    P("cuGetProcAddress", 12000, cuGetProcAddress_v2),

    P("cuDeviceGet", 2000, cuDeviceGet),
    P("cuDeviceGetCount", 2000, cuDeviceGetCount),
    P("cuDeviceGetName", 2000, cuDeviceGetName),
    P("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    P("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    P("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    P("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    P("cuCtxCreate", 12050, cuCtxCreate_v4),
    P("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    P("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    P("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    P("cuCtxGetDevice", 2000, cuCtxGetDevice),
    P("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    P("cuCtxSynchronize", 2000, cuCtxSynchronize),
    P("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    P("cuCtxSetLimit", 3010, cuCtxSetLimit),
    P("cuCtxGetLimit", 3010, cuCtxGetLimit),

    P("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    P("cuMemAlloc", 2000, cuMemAlloc),
    P("cuMemAlloc", 3020, cuMemAlloc_v2),
    P("cuMemFree", 2000, cuMemFree),
    P("cuMemFree", 3020, cuMemFree_v2),
    P("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    P("cuMemAllocManaged", 6000, cuMemAllocManaged),
    P("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    P("cuMemFreeHost", 2000, cuMemFreeHost),
    P("cuMemHostAlloc", 2020, cuMemHostAlloc),
    P("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    P("cuMemHostUnregister", 4000, cuMemHostUnregister),
    P("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    P("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    P("cuLibraryLoadData", 12000, cuLibraryLoadData),
    P("cuLibraryGetGlobal", 12000, cuLibraryGetGlobal),
    P("cuLibraryGetManaged", 12000, cuLibraryGetManaged),
    P("cuLibraryUnload", 12000, cuLibraryUnload),

    PT("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
    PT("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
    PT("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
    P("cuMemPoolCreate", 11020, cuMemPoolCreate),
    P("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    P("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    P("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    P("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    P("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),

    P("cuMemCreate", 10020, cuMemCreate),
    P("cuMemRelease", 10020, cuMemRelease),
    P("cuMemAddressReserve", 10020, cuMemAddressReserve),
    P("cuMemAddressFree", 10020, cuMemAddressFree),
    P("cuMemMap", 10020, cuMemMap),
    P("cuMemUnmap", 10020, cuMemUnmap),
    P("cuMemSetAccess", 10020, cuMemSetAccess),
    P("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),

    PT("cuMemcpy", 4000, cuMemcpy, cuMemcpy_ptds),
    PT("cuMemcpyAsync", 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
    P("cuMemcpyHtoD", 2000, cuMemcpyHtoD),
    PT("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    P("cuMemcpyDtoH", 2000, cuMemcpyDtoH),
    PT("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    P("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    PT("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    PT("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    PT("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    P("cuMemsetD8", 3020, cuMemsetD8_v2),
    P("cuMemsetD32", 3020, cuMemsetD32_v2),
    PT("cuMemsetD8Async", 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
    PT("cuMemsetD32Async", 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz),

    P("cuFuncSetAttribute", 9000, cuFuncSetAttribute),
    P("cuFuncGetAttribute", 2020, cuFuncGetAttribute),

    P("cuStreamCreate", 2000, cuStreamCreate),
    P("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    P("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    PT("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    P("cuStreamQuery", 2000, cuStreamQuery),
    P("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    P("cuStreamGetFlags", 5050, cuStreamGetFlags),
    PT("cuStreamGetPriority", 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz),
    P("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    P("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    PT("cuStreamAddCallback", 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz),
    PT("cuStreamBeginCapture", 10000, cuStreamBeginCapture, cuStreamBeginCapture_ptsz),
    PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
    PT("cuStreamEndCapture", 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    PT("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_ptsz),
    PT("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2, cuStreamGetCaptureInfo_v2_ptsz),
    PT("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3, cuStreamGetCaptureInfo_v3_ptsz),
    P("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    P("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    P("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    PT("cuGraphInstantiateWithParams", 12000, cuGraphInstantiateWithParams, cuGraphInstantiateWithParams_ptsz),
    P("cuGraphLaunch", 10000, cuGraphLaunch),
    P("cuGraphDestroy", 10000, cuGraphDestroy),
    P("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    P("cuGraphExecUpdate", 10020, cuGraphExecUpdate),
    P("cuGraphExecUpdate", 12000, cuGraphExecUpdate_v2),

    P("cuEventCreate", 2000, cuEventCreate),
    P("cuEventDestroy", 4000, cuEventDestroy_v2),
    P("cuEventRecord", 2000, cuEventRecord),
    P("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    P("cuEventQuery", 2000, cuEventQuery),
    P("cuEventSynchronize", 2000, cuEventSynchronize),
    P("cuEventElapsedTime", 2000, cuEventElapsedTime),
    P("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),

    PT("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
    PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
    P("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    P("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    P("cuKernelGetFunction", 12000, cuKernelGetFunction),
    P("cuModuleGetLoadingMode", 11070, cuModuleGetLoadingMode),
    P("cuFuncIsLoaded", 12040, cuFuncIsLoaded),
    P("cuFuncLoad", 12040, cuFuncLoad),
};

/*
 * Works before cuInit, as in CUDA (the runtime finds cuInit this way).  A
 * name the table lacks, or has only for newer versions, is an answer, not
 * an error (13.0 cuda.h): CUDA_SUCCESS with *pfn = NULL and the status
 * saying which, so a caller must check the pointer.
 */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    int best = -1, found = 0, i;

    /* A program built for a newer CUDA than this driver is refused, as in CUDA. */
    if (!symbol || !pfn || cudaVersion <= 0 || cudaVersion > FG_DRIVER_VERSION || (flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < (int)(sizeof(procs) / sizeof(procs[0])); i++) {
        if (strcmp(procs[i].name, symbol))
            continue;
        found = 1;
        if (procs[i].version <= cudaVersion && (best < 0 || procs[i].version > procs[best].version))
            best = i;
    }
    *pfn = best < 0                                              ? NULL
           : flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? procs[best].pt
                                                                   : procs[best].fn;
    if (symbolStatus)
        *symbolStatus = best >= 0 ? CU_GET_PROC_ADDRESS_SUCCESS
                        : found   ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                  : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_SUCCESS;
}
