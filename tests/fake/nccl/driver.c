/*
 * How the double's NCCL reaches the driver, as the real NCCL (which carries
 * a static CUDA runtime) does: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2 alone, and every other entry point through it for
 * CUDA 13000 with the default flags.  A driver-level hook therefore sees
 * every call NCCL makes, the allocation of its internal buffers included.
 * This file must never link against libcuda or libcudart, and never call a
 * pointer that was not resolved: a missing entry point fails the load and
 * names itself.
 */
#include <dlfcn.h>
#include <errno.h>

#include "nccl_fake.h"

struct nf_driver nf_drv;
uint64_t (*nf_pcie_book)(size_t bytes);
void (*nf_device_access)(int on);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_err;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_err;

static __typeof__(&cuGetProcAddress_v2) get_proc;

/* 0, or -ENOSYS after naming the entry point the driver lacks. */
static int resolve(const char *name, void **fn)
{
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult res;

    *fn = NULL;
    res = get_proc(name, fn, NF_CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (res == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *fn)
        return 0;
    *fn = NULL;
    return nf_fail(-ENOSYS, "libcuda.so.1 has no %s for CUDA %d (result %d, status %d)",
                   name, NF_CUDA_VERSION, (int)res, (int)status);
}

static void load(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *sym;
    int err = 0;

    if (!lib) {
        load_err = nf_fail(-ENOSYS, "cannot load libcuda.so.1: %s", dlerror());
        return;
    }
    sym = dlsym(lib, "cuGetProcAddress_v2");
    if (!sym) {
        load_err = nf_fail(-ENOSYS, "libcuda.so.1 has no cuGetProcAddress_v2");
        return;
    }
    get_proc = (__typeof__(get_proc))sym;
    /* The double's shared PCIe link (optional: another driver has none). */
    nf_pcie_book = (uint64_t (*)(size_t))dlsym(lib, "fakegpu_pcie_d2h_book");
    /* Device access in the host functions that run collectives (optional, as above). */
    nf_device_access = (void (*)(int))dlsym(lib, "fakegpu_device_access");

    /* Resolve them all before failing, so one run names every missing one. */
#define NF_RESOLVE(base, suffix)                                               \
    if (resolve(#base, &sym))                                                  \
        err = -ENOSYS;                                                         \
    nf_drv.base##suffix = (__typeof__(nf_drv.base##suffix))sym;
    NF_DRIVER_CALLS(NF_RESOLVE)
#undef NF_RESOLVE

    /* The driver stays loaded for the life of the process, as with NCCL. */
    load_err = err;
}

static void init(void)
{
    CUresult res = nf_drv.cuInit(0);

    if (res != CUDA_SUCCESS)
        init_err = nf_fail(-EIO, "cuInit failed: CUresult %d", (int)res);
}

int nf_drv_enter(void)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    CUresult res;

    pthread_once(&load_once, load);
    if (load_err)
        return load_err;
    pthread_once(&init_once, init);
    if (init_err)
        return init_err;
    res = nf_drv.cuCtxGetCurrent(&ctx);
    if (res == CUDA_SUCCESS && ctx)
        return 0;
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuDeviceGet(&dev, 0);
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuDevicePrimaryCtxRetain(&ctx, dev);
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuCtxSetCurrent(ctx);
    if (res != CUDA_SUCCESS)
        return nf_fail(-EIO, "no CUDA context for this thread: CUresult %d", (int)res);
    return 0;
}
