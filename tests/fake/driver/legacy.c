/*
 * The legacy (v1) entry points CUDA still exports for binaries built
 * against older headers, which cuGetProcAddress gives a caller asking for
 * a CUDA version older than the _v2 variant (cuMemAlloc at 3010,
 * cuStreamBeginCapture at 10000).  Each is a thin function with the v1
 * signature over the current one, so such a caller never gets a function
 * whose arguments it would pass wrongly.  v1 device pointers and sizes are
 * 32 bits: an address of the device's range (above 4 GiB, as every address
 * the double hands out) cannot be returned through one, so cuMemAlloc (v1)
 * fails with CUDA_ERROR_OUT_OF_MEMORY rather than truncate it, and a v1
 * copy can only name memory below 4 GiB.
 */
#include "driver.h"

CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    CUdeviceptr p;
    CUresult rc;

    if (!dptr)
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    rc = cuMemAlloc_v2(&p, bytesize);
    if (rc)
        return rc;
    if (p > UINT32_MAX) {
        cuMemFree_v2(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr_v1)p;
    return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    return cuMemFree_v2((CUdeviceptr)dptr);
}

CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{
    return cuMemcpyHtoD_v2((CUdeviceptr)dstDevice, srcHost, ByteCount);
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{
    return cuMemcpyDtoH_v2(dstHost, (CUdeviceptr)srcDevice, ByteCount);
}

/* Before capture modes (CUDA 10.1) a capture behaved as a global one. */
CUresult cuStreamBeginCapture(CUstream hStream)
{
    return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return cuStreamBeginCapture_v2_ptsz(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* cuEventElapsedTime as resolved for cudaVersion < 12080 (same behaviour here). */
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}
