/*
 * Kernel launches, stream capture and graphs, forwarded to the driver.  In
 * the double a kernel is a host function `void k(void **args)` and the
 * runtime hands it to cuLaunchKernel as the CUfunction, with the argument
 * array untouched (examples/common/kernels.h describes the convention).
 * This file must never run a kernel or keep graph state itself: stream
 * order, capture and replay are the driver's, so one implementation serves
 * programs written against either API.
 */
#include <limits.h>

#include "runtime.h"

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             size_t sharedMem, cudaStream_t stream)
{
    cudaError_t err;

    if (!func)
        return rt_error(cudaErrorInvalidDeviceFunction);
    if (sharedMem > UINT_MAX)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    /* As NVIDIA's runtime launches a CUkernel, not a CUfunction. */
    if (rt_kernel_handle)
        rt_kernel_handle((CUfunction)(uintptr_t)func);
    return rt_result(rt_drv.cuLaunchKernel((CUfunction)(uintptr_t)func,
                                           gridDim.x, gridDim.y, gridDim.z,
                                           blockDim.x, blockDim.y, blockDim.z,
                                           (unsigned int)sharedMem, stream, args, NULL));
}

/* As NVIDIA's runtime: the kernel's function in the current context
 * (cuKernelGetFunction), whose attribute is set (cudaFuncAttribute* and
 * CU_FUNC_ATTRIBUTE_* share their values). */
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    CUfunction fn;
    cudaError_t err;
    CUresult res;

    if (!func)
        return rt_error(cudaErrorInvalidDeviceFunction);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    if (rt_kernel_handle)
        rt_kernel_handle((CUfunction)(uintptr_t)func);
    res = rt_drv.cuKernelGetFunction(&fn, (CUkernel)(uintptr_t)func);
    if (res == CUDA_SUCCESS)
        res = rt_drv.cuFuncSetAttribute(fn, (CUfunction_attribute)attr, value);
    return rt_result(res);
}

/* cudaStreamCaptureMode* and CU_STREAM_CAPTURE_MODE_* share their values. */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamBeginCapture_v2(stream, (CUstreamCaptureMode)mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuStreamEndCapture(stream, pGraph));
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    CUstreamCaptureStatus status;
    cudaError_t err;
    CUresult res;

    if (!pCaptureStatus)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    res = rt_drv.cuStreamIsCapturing(stream, &status);
    if (res == CUDA_SUCCESS)
        *pCaptureStatus = (enum cudaStreamCaptureStatus)status; /* same values */
    return rt_result(res);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                     unsigned long long *id_out, cudaGraph_t *graph_out,
                                     const cudaGraphNode_t **dependencies_out,
                                     const struct cudaGraphEdgeData_st **edgeData_out, size_t *numDependencies_out)
{
    cudaError_t err;

    if (!captureStatus_out)
        return rt_error(cudaErrorInvalidValue);
    err = rt_enter();
    if (err != cudaSuccess)
        return rt_error(err);
    /* cudaStreamCaptureStatus has CUstreamCaptureStatus's values and size */
    return rt_result(rt_drv.cuStreamGetCaptureInfo_v3(stream, (CUstreamCaptureStatus *)captureStatus_out,
                                                      (cuuint64_t *)id_out, graph_out, dependencies_out,
                                                      (const struct CUgraphEdgeData_st **)edgeData_out,
                                                      numDependencies_out));
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuGraphInstantiateWithFlags(pGraphExec, graph, flags));
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuGraphLaunch(graphExec, stream));
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuGraphDestroy(graph));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuGraphExecDestroy(graphExec));
}
