/*
 * Initialisation and the one device of the fake driver: cuInit reads the
 * double's knobs (FAKEGPU_MEM_GB, FAKEGPU_COPY_GBPS), and the device answers
 * as a 132-SM compute capability 9.0 GPU named "fakegpu".  Nothing here may
 * depend on a real GPU or on any other library of the double.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

struct fg_driver drv = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .progress = PTHREAD_COND_INITIALIZER,
};

void fg_lock(void)
{
    pthread_mutex_lock(&drv.lock);
}

void fg_unlock(void)
{
    pthread_mutex_unlock(&drv.lock);
}

void fg_wait_progress(void)
{
    pthread_cond_wait(&drv.progress, &drv.lock);
}

/* Lock-free, so queries of the device need not take the driver lock. */
CUresult fg_check_init(void)
{
    return __atomic_load_n(&drv.initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                               : CUDA_ERROR_NOT_INITIALIZED;
}

/*
 * A child forked after cuInit has none of the parent's stream workers, so
 * (as with CUDA) the driver is unusable there: every call fails as if
 * uninitialised, and cuInit itself fails.  Holding the lock across fork
 * keeps the child from inheriting it mid-update.
 */
static void fork_prepare(void)
{
    fg_lock();
}

static void fork_parent(void)
{
    fg_unlock();
}

static void fork_child(void)
{
    drv.forked = 1;
    __atomic_store_n(&drv.initialized, 0, __ATOMIC_RELEASE);
    fg_unlock();
}

/* Reads the knobs and creates the default memory pool; idempotent, as
 * cuInit is.  The device's address range is reserved with the first
 * context (ctx.c), as the driver does: what the process mapped before
 * then moves where device memory lands. */
CUresult cuInit(unsigned int Flags)
{
    CUresult rc = CUDA_SUCCESS;

    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    if (drv.forked) {
        rc = CUDA_ERROR_NOT_INITIALIZED;
    } else if (!drv.initialized) {
        double gbps = fg_env_double("FAKEGPU_COPY_GBPS", 0);

        drv.total_mem = (size_t)fg_env_u64("FAKEGPU_MEM_GB", 16) << 30;
        if (getenv("FAKEGPU_MEM_MB"))
            drv.total_mem = (size_t)fg_env_u64("FAKEGPU_MEM_MB", drv.total_mem >> 20) << 20;
        fg_share_init();
        fg_link_init(&drv.h2d, gbps);
        fg_link_init(&drv.d2h, gbps);
        if (fg_pool_init() || pthread_atfork(fork_prepare, fork_parent, fork_child))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            __atomic_store_n(&drv.initialized, 1, __ATOMIC_RELEASE);
    }
    fg_unlock();
    return rc;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FG_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- the device ---------------------------------------------------- */

static CUresult check_device(CUdevice dev)
{
    CUresult rc = fg_check_init();

    if (rc)
        return rc;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = check_device(dev);

    if (rc)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "fakegpu", (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = check_device(dev);

    if (rc)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = drv.total_mem;
    return CUDA_SUCCESS;
}

/* An H100-like device; attributes not listed are reported as unsupported values. */
static const struct {
    CUdevice_attribute attr;
    int value;
} attributes[] = {
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
    {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
    {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
    {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
    {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},
    {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
    {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
    {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
    {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
    {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x1b},
    {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
    {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 2619000},
    {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 5120},
    {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 50331648},
    {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
    {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2},
    {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
    {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
    {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
    {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
    {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
    {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
    {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
    {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
    {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
};

/*
 * Attributes the double does not list answer CUDA_ERROR_INVALID_VALUE, as
 * the real driver does for an unknown attribute: a caller that needs one
 * should find out here rather than get an invented number.
 */
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = check_device(dev);
    size_t i;

    if (rc)
        return rc;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < sizeof(attributes) / sizeof(attributes[0]); i++) {
        if (attributes[i].attr == attrib) {
            *pi = attributes[i].value;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/*
 * The device-to-host direction of the PCIe link, for the double's NCCL: a
 * collective's bytes leave the GPU over the same link as the snapshot
 * copies (GPUDirect traffic to the NIC), so with FAKEGPU_COPY_GBPS and
 * FAKEGPU_NET_GBPS both set, libnccl books them here too.  Returns when the
 * booked transfer ends (CLOCK_MONOTONIC ns), or 0 when the link is
 * unthrottled or the driver not initialised.  Not a CUDA entry point:
 * exported under the double's own prefix, never through cuGetProcAddress.
 */
__attribute__((visibility("default"))) uint64_t fakegpu_pcie_d2h_book(size_t bytes)
{
    if (!__atomic_load_n(&drv.initialized, __ATOMIC_ACQUIRE) || drv.d2h.bytes_per_ns <= 0)
        return 0;
    return fg_link_book(&drv.d2h, bytes);
}

/*
 * Device access for the double's own libnccl, whose collectives move device
 * bytes in host functions on the stream's worker (va.c): on (1) or off (0)
 * for the calling thread.  Not a CUDA entry point, as above.
 */
__attribute__((visibility("default"))) void fakegpu_device_access(int on)
{
    fg_device_access(on);
}
