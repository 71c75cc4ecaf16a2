/*
 * Device and pinned memory of the fake driver.  "Device memory" is host
 * memory (a device pointer is a host address), so a program is tested by
 * reading it only through copies, as on a GPU.  Device, pitched and
 * managed memory come from the device's address range (va.c), pinned host
 * memory is ordinary host memory.  Every allocation goes into one sorted
 * table, which answers cuMemGetAddressRange and tells copies whether an
 * address is on the device.  Memory is never freed while enqueued work may
 * still touch it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "driver.h"

/* ---- the allocation table ------------------------------------------ */

/* Index of the first entry whose base is above addr. */
static size_t upper_bound(uintptr_t addr)
{
    size_t lo = 0, hi = drv.nallocs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (drv.allocs[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int fg_alloc_insert(uintptr_t base, size_t size, enum fg_mem_kind kind, void *owner)
{
    size_t i;

    if (drv.nallocs == drv.allocs_cap) {
        size_t cap = drv.allocs_cap ? 2 * drv.allocs_cap : 64;
        struct fg_alloc *a = realloc(drv.allocs, cap * sizeof(*a));

        if (!a)
            return -ENOMEM;
        drv.allocs = a;
        drv.allocs_cap = cap;
    }
    i = upper_bound(base);
    memmove(&drv.allocs[i + 1], &drv.allocs[i], (drv.nallocs - i) * sizeof(*drv.allocs));
    drv.allocs[i] = (struct fg_alloc){.base = base, .size = size, .kind = kind, .owner = owner};
    drv.nallocs++;
    return 0;
}

int fg_alloc_remove(uintptr_t base)
{
    size_t i = upper_bound(base);

    if (i == 0 || drv.allocs[i - 1].base != base)
        return -ENOENT;
    i--;
    memmove(&drv.allocs[i], &drv.allocs[i + 1], (drv.nallocs - i - 1) * sizeof(*drv.allocs));
    drv.nallocs--;
    return 0;
}

struct fg_alloc *fg_alloc_find(uintptr_t addr)
{
    size_t i = upper_bound(addr);

    if (i == 0 || addr - drv.allocs[i - 1].base >= drv.allocs[i - 1].size)
        return NULL;
    return &drv.allocs[i - 1];
}

struct fg_alloc *fg_alloc_overlap(uintptr_t base, size_t size)
{
    size_t i = upper_bound(base);

    if (i > 0 && base - drv.allocs[i - 1].base < drv.allocs[i - 1].size)
        return &drv.allocs[i - 1];
    if (i < drv.nallocs && drv.allocs[i].base - base < size)
        return &drv.allocs[i];
    return NULL;
}

int fg_mem_is_device(enum fg_mem_kind kind)
{
    return kind == FG_MEM_DEVICE || kind == FG_MEM_MANAGED || kind == FG_MEM_POOL || kind == FG_MEM_VMM ||
           kind == FG_MEM_GRAPH;
}

/*
 * Fresh pages for every pinned allocation: freed memory is unmapped, so a
 * use after free faults instead of silently reading someone else's data.
 * The pages are populated at once, as pinned host memory is resident from
 * allocation: the first copy into them must not pay for page faults a GPU
 * would not take.
 */
void *fg_pages_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_POPULATE,
                   -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

void fg_pages_free(void *p, size_t bytes)
{
    munmap(p, bytes);
}

/* ---- device memory ------------------------------------------------- */

/* Allocates bytes of device memory of the given kind.  Lock held. */
static CUresult device_alloc(CUdeviceptr *dptr, size_t bytes, enum fg_mem_kind kind)
{
    struct fg_ctx *ctx;
    uintptr_t p;
    CUresult rc = fg_current_ctx(&ctx);

    if (rc)
        return rc;
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fg_capture_forbid_unsafe();
    if (rc)
        return rc;
    if (kind == FG_MEM_DEVICE && fg_mem_reserve(bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fg_va_alloc(bytes, kind == FG_MEM_MANAGED ? FG_VA_HOST : FG_VA_DEVICE, &p)) {
        if (kind == FG_MEM_DEVICE)
            fg_mem_unreserve(bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (fg_alloc_insert(p, bytes, kind, NULL)) {
        fg_va_free(p, bytes);
        if (kind == FG_MEM_DEVICE)
            fg_mem_unreserve(bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc;

    fg_lock();
    rc = device_alloc(dptr, bytesize, FG_MEM_DEVICE);
    fg_unlock();
    return rc;
}

/* Rows are padded to 512 bytes, the pitch alignment of current GPUs. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511;
    CUresult rc;

    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_lock();
    rc = device_alloc(dptr, pitch * Height, FG_MEM_DEVICE);
    if (!rc)
        *pPitch = pitch;
    fg_unlock();
    return rc;
}

/* Managed memory is host memory here too, at an address of the device's
 * range as under UVA; it does not count against the device. */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUresult rc;

    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    rc = device_alloc(dptr, bytesize, FG_MEM_MANAGED);
    fg_unlock();
    return rc;
}

/*
 * Frees cuMemAlloc, cuMemAllocPitch and cuMemAllocManaged memory, and
 * stream-ordered allocations (which go back to their pool) and graph-owned
 * ones a launch left unfreed.  Like CUDA it
 * first waits for the device's work, which may still be using the memory.
 */
CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct fg_ctx *ctx;
    struct fg_alloc *a;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc) {
        a = fg_alloc_find((uintptr_t)dptr);
        if (!a || a->base != (uintptr_t)dptr ||
            (a->kind != FG_MEM_DEVICE && a->kind != FG_MEM_MANAGED && a->kind != FG_MEM_POOL &&
             a->kind != FG_MEM_GRAPH))
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (!rc)
        rc = fg_capture_forbid_unsafe();
    if (!rc && fg_in_worker())
        rc = CUDA_ERROR_NOT_PERMITTED;
    if (rc)
        goto out;
    fg_drain_all();
    /* The table may have changed while draining: look again. */
    a = fg_alloc_find((uintptr_t)dptr);
    if (!a || a->base != (uintptr_t)dptr) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (a->kind == FG_MEM_GRAPH) {
        rc = fg_gmem_free(a, NULL);
    } else if (a->kind == FG_MEM_POOL) {
        struct fg_block *b = a->owner;

        fg_alloc_remove(a->base);
        fg_pool_free_block(b);
    } else {
        size_t size = a->size;

        if (a->kind == FG_MEM_DEVICE)
            fg_mem_unreserve(size);
        fg_alloc_remove(a->base);
        fg_va_free((uintptr_t)dptr, size);
    }
out:
    fg_unlock();
    return rc;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && (!free_bytes || !total))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        *free_bytes = fg_mem_free();
        *total = drv.total_mem;
    }
    fg_unlock();
    return rc;
}

/* Either out-pointer may be NULL, as in CUDA. */
CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct fg_ctx *ctx;
    struct fg_alloc *a;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc) {
        a = fg_alloc_find((uintptr_t)dptr);
        if (!a || !fg_mem_is_device(a->kind)) {
            rc = CUDA_ERROR_NOT_FOUND;
        } else {
            if (pbase)
                *pbase = (CUdeviceptr)a->base;
            if (psize)
                *psize = a->size;
        }
    }
    fg_unlock();
    return rc;
}

/*
 * What the driver knows of an address, as CUDA answers it: host memory it
 * never pinned (and a freed or unmapped device address) is
 * CUDA_ERROR_INVALID_VALUE; managed memory says device.  Attributes the
 * double does not model are CUDA_ERROR_NOT_SUPPORTED.
 */
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct fg_ctx *ctx;
    struct fg_alloc *a;
    CUresult rc;

    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    rc = fg_current_ctx(&ctx);
    a = rc ? NULL : fg_alloc_find((uintptr_t)ptr);
    if (!rc && !a)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        int device = fg_mem_is_device(a->kind);
        switch (attribute) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(unsigned int *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
            break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:
            *(unsigned int *)data = a->kind == FG_MEM_MANAGED;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            *(CUdeviceptr *)data = ptr; /* one address space */
            break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            if (device && a->kind != FG_MEM_MANAGED)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                *(void **)data = (void *)(uintptr_t)ptr;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            *(int *)data = 0;
            break;
        default:
            rc = CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    fg_unlock();
    return rc;
}

/* ---- pinned host memory -------------------------------------------- */

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    const unsigned known = 0x07; /* PORTABLE | DEVICEMAP | WRITECOMBINED */
    struct fg_ctx *ctx;
    void *p;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && (!pp || bytesize == 0 || (Flags & ~known)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        p = fg_pages_alloc(bytesize);
        if (!p || fg_alloc_insert((uintptr_t)p, bytesize, FG_MEM_HOST, NULL)) {
            if (p)
                fg_pages_free(p, bytesize);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *pp = p;
            fg_share_pinned((ptrdiff_t)bytesize);
        }
    }
    fg_unlock();
    return rc;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult cuMemFreeHost(void *p)
{
    struct fg_ctx *ctx;
    struct fg_alloc *a;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc) {
        a = fg_alloc_find((uintptr_t)p);
        if (!a || a->base != (uintptr_t)p || a->kind != FG_MEM_HOST)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (!rc && fg_in_worker())
        rc = CUDA_ERROR_NOT_PERMITTED;
    if (!rc) {
        /* A pending async copy may still read or write it. */
        fg_drain_all();
        a = fg_alloc_find((uintptr_t)p);
        if (a && a->base == (uintptr_t)p && a->kind == FG_MEM_HOST) {
            size_t size = a->size;

            fg_alloc_remove(a->base);
            fg_pages_free(p, size);
            fg_share_pinned(-(ptrdiff_t)size);
        } else {
            rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    fg_unlock();
    return rc;
}

/* The pages a registration of [base, base + bytes) pins. */
static size_t pinned_span(uintptr_t base, size_t bytes)
{
    size_t page = fg_va_page();
    uintptr_t lo = base & ~(uintptr_t)(page - 1), hi = (base + bytes + page - 1) & ~(uintptr_t)(page - 1);

    return hi - lo;
}

/* Whether pinning span more bytes stays within RLIMIT_MEMLOCK, when
 * FAKEGPU_MEMLOCK=1 asks for it.  Lock held. */
static int memlock_allows(size_t span)
{
    struct rlimit rl;

    if (!fg_env_u64("FAKEGPU_MEMLOCK", 0) || getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
        return 1;
    return drv.registered_bytes <= rl.rlim_cur && span <= rl.rlim_cur - drv.registered_bytes;
}

/*
 * Registration records the range (host memory is already "device-visible"
 * here) and, with FAKEGPU_MEMLOCK=1, counts its pages against
 * RLIMIT_MEMLOCK (root is not exempt here): a program's fallback for a
 * failed registration is then tested for real.  Whether a machine's driver
 * refuses past the limit depends on the machine, so by default it does not.  The
 * device's own range cannot be registered.
 */
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    const unsigned known = 0x0f; /* PORTABLE | DEVICEMAP | IOMEMORY | READ_ONLY */
    struct fg_ctx *ctx;
    struct fg_alloc *a;
    uintptr_t base = (uintptr_t)p;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && (!p || bytesize == 0 || (Flags & ~known) || base + bytesize < base || fg_va_overlaps(base, bytesize)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && (a = fg_alloc_overlap(base, bytesize)))
        rc = a->kind == FG_MEM_REGISTERED || a->kind == FG_MEM_HOST ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                                                                   : CUDA_ERROR_INVALID_VALUE;
    if (!rc && !memlock_allows(pinned_span(base, bytesize)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && fg_alloc_insert(base, bytesize, FG_MEM_REGISTERED, NULL))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        drv.registered_bytes += pinned_span(base, bytesize);
        fg_share_pinned((ptrdiff_t)pinned_span(base, bytesize));
    }
    fg_unlock();
    return rc;
}

CUresult cuMemHostUnregister(void *p)
{
    struct fg_ctx *ctx;
    struct fg_alloc *a;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && !p)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        a = fg_alloc_find((uintptr_t)p);
        if (!a || a->base != (uintptr_t)p || a->kind != FG_MEM_REGISTERED) {
            rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        } else {
            drv.registered_bytes -= pinned_span(a->base, a->size);
            fg_share_pinned(-(ptrdiff_t)pinned_span(a->base, a->size));
            fg_alloc_remove(a->base);
        }
    }
    fg_unlock();
    return rc;
}
