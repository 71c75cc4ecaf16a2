/*
 * Virtual memory management: physical allocations are memfds, address
 * reservations are PROT_NONE ranges of the device's address range (va.c),
 * and cuMemMap maps a memfd shared into a reservation, so several mappings
 * of one handle alias each other exactly as on a GPU.  Memory mapped here
 * stays inaccessible until cuMemSetAccess grants access, as CUDA requires;
 * a range must never be left mapped to nothing (it goes back to PROT_NONE,
 * still reserved).  The rules are CUDA's: a reservation's size and address
 * are multiples of the page size, a mapping's of the granularity, at offset
 * 0, into reserved and unmapped addresses; cuMemUnmap takes whole mappings
 * only, and a call that would cut one changes nothing.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"

struct fg_vmm_handle {
    int fd;
    size_t size;
    int refs; /* until cuMemRelease, plus one per mapping */
};

struct fg_reservation {
    uintptr_t base;
    size_t size;
    struct fg_reservation *next;
};

static struct fg_reservation *reservations; /* guarded by drv.lock */

static void handle_unref(struct fg_vmm_handle *h)
{
    if (--h->refs)
        return;
    close(h->fd);
    fg_mem_unreserve(h->size);
    free(h);
}

static int aligned(uintptr_t x)
{
    return x % FG_GRANULARITY == 0;
}

/* Checks an allocation's properties as cuMemCreate does. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    CUresult rc = fg_check_init();

    if (!rc && (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = check_prop(prop);
    if (!rc)
        *granularity = FG_GRANULARITY;
    return rc;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags)
{
    struct fg_vmm_handle *h = NULL;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!handle || size == 0 || !aligned(size) || flags))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = check_prop(prop);
    if (!rc && fg_mem_reserve(size))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc)
        goto out;
    h = calloc(1, sizeof(*h));
    if (!h || (h->fd = memfd_create("fakegpu-vmm", MFD_CLOEXEC)) < 0) {
        free(h);
        fg_mem_unreserve(size);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    h->size = size;
    h->refs = 1;
    if (ftruncate(h->fd, (off_t)size) || fg_ptrset_add(&drv.vmm_handles, h)) {
        handle_unref(h);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
out:
    fg_unlock();
    return rc;
}

/* The memory lives on while mapped, as in CUDA. */
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct fg_vmm_handle *h = (struct fg_vmm_handle *)(uintptr_t)handle;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !fg_ptrset_del(&drv.vmm_handles, h))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        handle_unref(h);
    fg_unlock();
    return rc;
}

/*
 * addr is a hint, as in CUDA: it is honoured when that part of the
 * device's range is free (and aligned), otherwise the range goes
 * elsewhere.  Addresses are chosen first fit, like every device address.
 */
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    size_t page = fg_va_page(), align = alignment ? alignment : FG_GRANULARITY;
    struct fg_reservation *r;
    uintptr_t base;
    CUresult rc;
    int err;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!ptr || size == 0 || size % page || flags || (align & (align - 1)) || addr % page))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc)
        goto out;
    if (align < page)
        align = page;
    r = calloc(1, sizeof(*r));
    err = r ? fg_va_reserve(size, align, (uintptr_t)addr, &base) : -ENOMEM;
    if (err) {
        free(r);
        rc = err == -EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    r->base = base;
    r->size = size;
    r->next = reservations;
    reservations = r;
    *ptr = (CUdeviceptr)base;
out:
    fg_unlock();
    return rc;
}

/* The size must be the reserved one, and nothing may be mapped there any more. */
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct fg_reservation **pp, *r;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    for (pp = &reservations; !rc && *pp; pp = &(*pp)->next)
        if ((*pp)->base == (uintptr_t)ptr && (*pp)->size == size)
            break;
    if (!rc && (!*pp || fg_alloc_overlap((uintptr_t)ptr, size)))
        rc = CUDA_ERROR_INVALID_VALUE; /* not a reservation, or still mapped */
    if (!rc) {
        r = *pp;
        *pp = r->next;
        fg_va_unreserve(r->base, r->size);
        free(r);
    }
    fg_unlock();
    return rc;
}

static int in_reservation(uintptr_t base, size_t size)
{
    const struct fg_reservation *r;

    for (r = reservations; r; r = r->next)
        if (base >= r->base && base - r->base <= r->size && size <= r->size - (base - r->base))
            return 1;
    return 0;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    struct fg_vmm_handle *h = (struct fg_vmm_handle *)(uintptr_t)handle;
    uintptr_t base = (uintptr_t)ptr;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    /* "offset: currently must be zero" (cuda.h). */
    if (!rc && (flags || size == 0 || !aligned(base) || !aligned(size) || offset != 0 ||
                !fg_ptrset_has(&drv.vmm_handles, h) || size > h->size || !in_reservation(base, size) ||
                fg_alloc_overlap(base, size)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && mmap((void *)base, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && fg_alloc_insert(base, size, FG_MEM_VMM, h)) {
        mmap((void *)base, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!rc)
        h->refs++; /* the mapping keeps the memory alive */
    fg_unlock();
    return rc;
}

/* How many whole mappings tile [base, base + size) exactly, or -EINVAL.  Lock held. */
static int count_mappings(uintptr_t base, size_t size)
{
    uintptr_t cur = base, end = base + size;
    int n = 0;

    if (size == 0 || end < base)
        return -EINVAL;
    while (cur < end) {
        const struct fg_alloc *a = fg_alloc_find(cur);

        if (!a || a->kind != FG_MEM_VMM || a->base != cur || a->size > end - cur)
            return -EINVAL;
        cur += a->size;
        n++;
    }
    return n;
}

/* Like CUDA, waits for the device first: work in flight may still use the range. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    uintptr_t cur = (uintptr_t)ptr, end = cur + size;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && count_mappings(cur, size) < 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && fg_in_worker())
        rc = CUDA_ERROR_NOT_PERMITTED;
    if (!rc) {
        fg_drain_all();
        if (count_mappings(cur, size) < 0)
            rc = CUDA_ERROR_INVALID_VALUE; /* another thread unmapped it meanwhile */
    }
    while (!rc && cur < end) {
        struct fg_alloc *a = fg_alloc_find(cur);
        struct fg_vmm_handle *h = a->owner;
        size_t len = a->size;

        mmap((void *)cur, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        fg_alloc_remove(cur);
        handle_unref(h);
        cur += len;
    }
    fg_unlock();
    return rc;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    int prot = PROT_NONE;
    size_t i;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!desc || count == 0 || count_mappings((uintptr_t)ptr, size) < 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    for (i = 0; !rc && i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (desc[i].location.id != 0)
            rc = CUDA_ERROR_INVALID_DEVICE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
            prot = PROT_READ;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (!rc && fg_va_protect((uintptr_t)ptr, size, prot))
        rc = CUDA_ERROR_INVALID_VALUE;
    fg_unlock();
    return rc;
}
