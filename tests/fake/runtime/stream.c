/*
 * Streams and events, forwarded to the driver.  cudaStream_t and CUstream
 * are the same handle, so the runtime's special streams pass through
 * unchanged: 0 is the legacy default stream, cudaStreamLegacy and
 * cudaStreamPerThread are the driver's CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD.  The runtime's flag values equal the driver's too.
 * This file keeps no state: ordering and timing belong to the driver.
 */
#include "runtime.h"

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamCreate(pStream, flags));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamCreateWithPriority(pStream, flags, priority));
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamGetPriority(hStream, priority));
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuCtxGetStreamPriorityRange(leastPriority, greatestPriority));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamDestroy_v2(stream));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamSynchronize(stream));
}

/* cudaErrorNotReady is an answer, not an error: it is never recorded. */
cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamQuery(stream));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamWaitEvent(stream, event, flags));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuLaunchHostFunc(stream, fn, userData));
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuEventCreate(event, flags));
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuEventRecord(event, stream));
}

/* As cudaStreamQuery: cudaErrorNotReady is not recorded. */
cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuEventQuery(event));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuEventSynchronize(event));
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuEventElapsedTime_v2(ms, start, end));
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuEventDestroy_v2(event));
}
