/*
 * cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion: a program's
 * way to the driver through the runtime, forwarded to cuGetProcAddress_v2
 * with the runtime's version (13000) or the one asked for.  Their _ptsz
 * forms (what code built with per-thread default streams calls) read
 * cudaEnableDefault as cudaEnablePerThreadDefaultStream, as CUDA's do.  They must hand
 * out exactly what the driver's resolver answers, never a pointer of their
 * own, so that whatever hooks the driver also hooks these.
 */
#include <limits.h>
#include <stddef.h>

#include "runtime.h"

/* The runtime's cudaEnable* flags, each with its driver counterpart. */
static const struct {
    unsigned long long rt;
    cuuint64_t cu;
} flag_map[] = {
    {cudaEnableLegacyStream, CU_GET_PROC_ADDRESS_LEGACY_STREAM},
    {cudaEnablePerThreadDefaultStream, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
};

static cudaError_t entry_point(const char *symbol, void **funcPtr, int version,
                               unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *driverStatus, int per_thread)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    cuuint64_t cu_flags = CU_GET_PROC_ADDRESS_DEFAULT; /* = cudaEnableDefault */
    cudaError_t err;
    CUresult res;

    if (per_thread && flags == cudaEnableDefault)
        flags = cudaEnablePerThreadDefaultStream;

    for (size_t i = 0; i < sizeof(flag_map) / sizeof(flag_map[0]); i++) {
        if (flags & flag_map[i].rt) {
            cu_flags |= flag_map[i].cu;
            flags &= ~flag_map[i].rt;
        }
    }
    if (flags || !symbol || !funcPtr)
        return rt_error(cudaErrorInvalidValue);
    err = rt_init();
    if (err != cudaSuccess)
        return rt_error(err);
    res = rt_drv.cuGetProcAddress_v2(symbol, funcPtr, version, cu_flags, &status);
    /*
     * A name the driver lacks, or lacks at this version, is an answer, not
     * an error: CUDA documents cudaSuccess with a NULL pointer, and the
     * status saying which.
     */
    if (res == CUDA_ERROR_NOT_FOUND && status != CU_GET_PROC_ADDRESS_SUCCESS) {
        *funcPtr = NULL;
        res = CUDA_SUCCESS;
    }
    if (driverStatus && res == CUDA_SUCCESS)
        *driverStatus = (enum cudaDriverEntryPointQueryResult)status; /* same values */
    return rt_result(res);
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, RT_CUDA_VERSION, flags, driverStatus, 0);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus)
{
    if (cudaVersion > (unsigned int)INT_MAX)
        return rt_error(cudaErrorInvalidValue);
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus, 0);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return entry_point(symbol, funcPtr, RT_CUDA_VERSION, flags, driverStatus, 1);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                  unsigned int cudaVersion, unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *driverStatus)
{
    if (cudaVersion > (unsigned int)INT_MAX)
        return rt_error(cudaErrorInvalidValue);
    return entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus, 1);
}
