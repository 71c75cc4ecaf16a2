/*
 * The device memory the double's NCCL allocates, as NCCL 2.19 and later
 * do with NCCL_CUMEM_ENABLE (on by default): through the driver's virtual
 * memory calls, not cuMemAlloc.  Physical memory is created
 * (cuMemCreate), an address range reserved for it (cuMemAddressReserve,
 * rounded up to the recommended granularity), mapped and made read-write;
 * a free unmaps, releases and gives the range back.  So a hook on
 * cuMemAlloc never sees NCCL's buffers; the reservation is what moves the
 * program's later allocations.  NCCL_CUMEM_ENABLE=0 allocates with
 * cuMemAlloc, as older NCCL and CUDA without virtual memory management do.
 * Both the library's own buffers (FIFO, flags) and ncclMemAlloc take this
 * way, as in the real library.
 */
#include <stdlib.h>
#include <string.h>

#include "nccl_fake.h"

/* A buffer allocated through cuMem: what its free needs. */
struct cumem {
    CUdeviceptr base;
    size_t size;
    CUmemGenericAllocationHandle handle;
    struct cumem *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cumem *buffers;

static bool cumem_enabled(void)
{
    const char *v = getenv("NCCL_CUMEM_ENABLE");
    return !v || strcmp(v, "0") != 0;
}

CUresult nf_mem_alloc(CUdeviceptr *dptr, size_t bytes)
{
    if (!cumem_enabled())
        return nf_drv.cuMemAlloc_v2(dptr, bytes);

    CUdevice dev;
    CUresult res = nf_drv.cuCtxGetDevice_v2(&dev, NULL);
    if (res != CUDA_SUCCESS)
        return res;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t gran = 0;
    res = nf_drv.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (res != CUDA_SUCCESS)
        return res;
    struct cumem *b = calloc(1, sizeof(*b));
    if (!b)
        return CUDA_ERROR_OUT_OF_MEMORY;
    b->size = (bytes + gran - 1) / gran * gran;
    bool created = false, reserved = false;
    res = nf_drv.cuMemCreate(&b->handle, b->size, &prop, 0);
    created = res == CUDA_SUCCESS;
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuMemAddressReserve(&b->base, b->size, gran, 0, 0);
    reserved = created && res == CUDA_SUCCESS;
    if (res == CUDA_SUCCESS)
        res = nf_drv.cuMemMap(b->base, b->size, 0, b->handle, 0);
    if (res == CUDA_SUCCESS) {
        res = nf_drv.cuMemSetAccess(b->base, b->size, &access, 1);
        if (res != CUDA_SUCCESS)
            nf_drv.cuMemUnmap(b->base, b->size);
    }
    if (res != CUDA_SUCCESS) {
        if (reserved)
            nf_drv.cuMemAddressFree(b->base, b->size);
        if (created)
            nf_drv.cuMemRelease(b->handle);
        free(b);
        return res;
    }
    pthread_mutex_lock(&lock);
    b->next = buffers;
    buffers = b;
    pthread_mutex_unlock(&lock);
    *dptr = b->base;
    return CUDA_SUCCESS;
}

CUresult nf_mem_free(CUdeviceptr dptr)
{
    pthread_mutex_lock(&lock);
    struct cumem **at = &buffers;
    while (*at && (*at)->base != dptr)
        at = &(*at)->next;
    struct cumem *b = *at;
    if (b)
        *at = b->next;
    pthread_mutex_unlock(&lock);
    if (!b) /* allocated with NCCL_CUMEM_ENABLE=0 */
        return nf_drv.cuMemFree_v2(dptr);
    CUresult res = nf_drv.cuMemUnmap(b->base, b->size);
    CUresult rel = nf_drv.cuMemRelease(b->handle);
    CUresult fre = nf_drv.cuMemAddressFree(b->base, b->size);
    free(b);
    return res != CUDA_SUCCESS ? res : rel != CUDA_SUCCESS ? rel : fre;
}
