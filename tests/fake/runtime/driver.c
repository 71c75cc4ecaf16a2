/*
 * How the runtime finds the driver: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2 alone, and every other entry point through it, asking
 * for CUDA 13000 with the default flags, exactly as NVIDIA's runtime does.
 * That is what makes a driver-level hook see the runtime's calls.  This file
 * must never link against libcuda nor call a driver pointer that was not
 * resolved: a missing entry point fails initialisation and names itself.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "runtime.h"

struct rt_driver rt_drv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cudaError_t load_status;

/*
 * Resolves one entry point: 0, or -ENOSYS after saying on stderr which one
 * is missing (a program would otherwise only see an opaque init failure).
 */
static int resolve(const char *name, void **fn)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult res;

    *fn = NULL;
    res = rt_drv.cuGetProcAddress_v2(name, fn, RT_CUDA_VERSION,
                                     CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (res == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *fn)
        return 0;
    fprintf(stderr, "fakegpu: libcudart: libcuda.so.1 has no %s for CUDA %d "
            "(result %d, status %d)\n", name, RT_CUDA_VERSION, (int)res, (int)status);
    *fn = NULL;
    return -ENOSYS;
}

CUresult (*rt_kernel_handle)(CUfunction);

static void load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *sym;
    int failed = 0;

    if (!lib) {
        fprintf(stderr, "fakegpu: libcudart: cannot load the driver: %s\n", dlerror());
        load_status = cudaErrorInsufficientDriver;
        return;
    }
    sym = dlsym(lib, "cuGetProcAddress_v2");
    if (!sym) {
        fprintf(stderr, "fakegpu: libcudart: libcuda.so.1 has no cuGetProcAddress_v2\n");
        load_status = cudaErrorInsufficientDriver;
        return;
    }
    rt_drv.cuGetProcAddress_v2 = (__typeof__(rt_drv.cuGetProcAddress_v2))sym;
    /* The double's own: what the runtime launches is a kernel handle. */
    rt_kernel_handle = (CUresult(*)(CUfunction))dlsym(lib, "fakegpu_kernel_handle");

    /* Resolve all before failing so that one run names every missing one. */
#define RT_RESOLVE(base, suffix)                                               \
    failed |= resolve(#base, &sym) != 0;                                       \
    rt_drv.base##suffix = (__typeof__(rt_drv.base##suffix))sym;
    RT_DRIVER_CALLS(RT_RESOLVE)
#undef RT_RESOLVE

    /*
     * The library stays loaded for the life of the process, as with the
     * real runtime; a half-resolved table is never used because every
     * caller checks load_status first.
     */
    load_status = failed ? cudaErrorInsufficientDriver : cudaSuccess;
}

cudaError_t rt_load(void)
{
    pthread_once(&load_once, load);
    return load_status;
}
