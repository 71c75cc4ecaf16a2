/*
 * Device selection, attributes and versions.  The device a thread uses is
 * the one of its current context (context.c keeps that); attributes are the
 * driver's, looked up through one table from cudaDeviceAttr to
 * CUdevice_attribute.  The runtime reports its own version without asking
 * the driver, and the driver's version as 0 when no driver can be loaded,
 * both as the real runtime does.
 */
#include <stddef.h>

#include "runtime.h"

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return rt_error(cudaErrorInvalidValue);
    return rt_error(rt_current_device(device));
}

/* Like CUDA 12 and later, this makes the device's primary context current at once. */
cudaError_t cudaSetDevice(int device)
{
    return rt_error(rt_set_device(device));
}

cudaError_t cudaGetDeviceCount(int *count)
{
    cudaError_t err;

    if (!count)
        return rt_error(cudaErrorInvalidValue);
    *count = 0;
    err = rt_init();
    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuDeviceGetCount(count));
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuCtxSynchronize_v2(NULL)); /* NULL: the current context */
}

/* The current device's limits: its primary context's (the values are the
 * driver's CUlimit's). */
cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuCtxSetLimit((CUlimit)limit, value));
}

cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
    cudaError_t err = rt_enter();

    if (err != cudaSuccess)
        return rt_error(err);
    return rt_result(rt_drv.cuCtxGetLimit(pValue, (CUlimit)limit));
}

/* The attributes the project declares; both enums give each the same value. */
static const struct {
    enum cudaDeviceAttr rt;
    CUdevice_attribute cu;
} attrs[] = {
    {cudaDevAttrMaxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
    {cudaDevAttrWarpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
    {cudaDevAttrMultiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
    {cudaDevAttrPciBusId, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID},
    {cudaDevAttrPciDeviceId, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID},
    {cudaDevAttrPciDomainId, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID},
    {cudaDevAttrComputeCapabilityMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
    {cudaDevAttrComputeCapabilityMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
    {cudaDevAttrMemoryPoolsSupported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED},
};

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    CUdevice dev;
    cudaError_t err;

    if (!value)
        return rt_error(cudaErrorInvalidValue);
    err = rt_device(device, &dev);
    if (err != cudaSuccess)
        return rt_error(err);
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
        if (attrs[i].rt == attr)
            return rt_result(rt_drv.cuDeviceGetAttribute(value, attrs[i].cu, dev));
    return rt_error(cudaErrorInvalidValue);
}

cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return rt_error(cudaErrorInvalidValue);
    if (rt_load() != cudaSuccess) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    return rt_result(rt_drv.cuDriverGetVersion(driverVersion));
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return rt_error(cudaErrorInvalidValue);
    *runtimeVersion = RT_CUDA_VERSION;
    return cudaSuccess;
}
