/*
 * Copies and memsets.  Each is an op on a stream; the synchronous forms go
 * on the legacy stream (the _ptds variants: the calling thread's
 * per-thread stream).  When the call returns follows CUDA's "API
 * synchronization behavior" (as documented up to 11.x): a synchronous copy
 * waits for its stream; an asynchronous copy into pageable host memory
 * (neither pinned nor registered), and any copy from host to host memory,
 * returns only once the copy has completed; other asynchronous copies
 * return at once.  A memset returns at once, except a synchronous one into
 * pinned host or managed memory.  A copy between host and device memory
 * is throttled to FAKEGPU_COPY_GBPS on one link per direction, so
 * checkpoint traffic competes with the program's own transfers as over
 * PCIe; copies within the device and memsets are not throttled.  The
 * device side of a copy must lie inside one known allocation: a copy that
 * runs off the end of one fails here instead of corrupting the heap.
 */
#include <time.h>

#include "driver.h"

enum copy_dir { DIR_UNIFIED, DIR_HTOD, DIR_DTOH, DIR_DTOD };

/* Whether [p, p + n) lies inside one allocation the driver knows.  Lock held. */
static int known_range(uintptr_t p, size_t n)
{
    const struct fg_alloc *a = fg_alloc_find(p);

    return a && n <= a->size - (p - a->base);
}

static int on_device(uintptr_t p)
{
    const struct fg_alloc *a = fg_alloc_find(p);

    return a && fg_mem_is_device(a->kind);
}

/* Whether p is host memory the driver has not pinned (pageable).  Lock held. */
static int pageable(uintptr_t p)
{
    const struct fg_alloc *a = fg_alloc_find(p);

    return !a || (a->kind != FG_MEM_HOST && a->kind != FG_MEM_REGISTERED && !fg_mem_is_device(a->kind));
}

/*
 * Whether an asynchronous copy must complete before the call returns: a
 * copy into pageable host memory from the device, or any copy between two
 * host buffers.  Lock held.
 */
static int async_waits(uintptr_t dst, uintptr_t src)
{
    return !on_device(dst) && (pageable(dst) || !on_device(src));
}

/*
 * Whether [p, p + n) may be the host side of a unified copy: inside one
 * known allocation, or ordinary host memory, outside every allocation and
 * the device's address range (where an address that is no live allocation
 * is a freed or unmapped device pointer, which CUDA refuses).  Lock held.
 */
static int host_side_ok(uintptr_t p, size_t n)
{
    return fg_alloc_find(p) ? known_range(p, n) : !fg_alloc_overlap(p, n) && !fg_va_overlaps(p, n);
}

/*
 * Validates a copy of n bytes in direction dir.  Typed directions name the
 * device side, which must be known memory (device, or pinned host memory,
 * which is device-addressable under unified addressing); a unified copy
 * requires that a side inside a known allocation stays inside it.  A host
 * side that is no allocation must not be in the device's range.  Lock held.
 */
static int copy_ok(enum copy_dir dir, uintptr_t dst, uintptr_t src, size_t n)
{
    if (!dst || !src)
        return 0;
    switch (dir) {
    case DIR_HTOD:
        return known_range(dst, n) && host_side_ok(src, n);
    case DIR_DTOH:
        return known_range(src, n) && host_side_ok(dst, n);
    case DIR_DTOD:
        return known_range(dst, n) && known_range(src, n);
    case DIR_UNIFIED:
        return host_side_ok(dst, n) && host_side_ok(src, n);
    }
    return 0;
}

/* Copies on hStream, waiting for it when sync (the synchronous forms pass
 * their default stream: CU_STREAM_LEGACY, or CU_STREAM_PER_THREAD) or when
 * an asynchronous copy must complete before returning (async_waits). */
/* FAKEGPU_D2H_RETURN_US=U: an asynchronous copy to the host returns U
 * microseconds after it is queued, as a driver call held up by its own
 * locks, or a thread preempted inside it, does: other threads run on
 * meanwhile, and the copy is done by the time the call returns. */
static void late_return(void)
{
    static uint64_t knob = UINT64_MAX;

    fg_sleep_us(fg_env_knob("FAKEGPU_D2H_RETURN_US", &knob));
}

static CUresult copy(enum copy_dir dir, uintptr_t dst, uintptr_t src, size_t n, CUstream hStream, int sync)
{
    struct fg_stream *s;
    struct fg_op *op;
    CUresult rc;
    int late = 0; /* an asynchronous copy to the host: FAKEGPU_D2H_RETURN_US */

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (rc || n == 0)
        goto out;
    if (!copy_ok(dir, dst, src, n)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    /* A capture records the copy: there is nothing to wait for. */
    if (!sync && !s->capture && async_waits(dst, src))
        sync = 1;
    if (sync && fg_in_worker()) {
        rc = CUDA_ERROR_NOT_PERMITTED;
        goto out;
    }
    if (!(op = fg_op_new(FG_OP_COPY, 0))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->u.copy.dst = (void *)dst;
    op->u.copy.src = (const void *)src;
    op->u.copy.n = n;
    if (!on_device(src) && on_device(dst))
        op->u.copy.link = &drv.h2d;
    else if (on_device(src) && !on_device(dst))
        op->u.copy.link = &drv.d2h;
    late = !sync && op->u.copy.link == &drv.d2h;
    rc = fg_submit(s, op);
    if (!rc && sync)
        fg_stream_wait_seq(s, s->enq_seq);
out:
    fg_unlock();
    if (!rc && late)
        late_return();
    return rc;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(DIR_UNIFIED, (uintptr_t)dst, (uintptr_t)src, ByteCount, CU_STREAM_LEGACY, 1);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_UNIFIED, (uintptr_t)dst, (uintptr_t)src, ByteCount, hStream, 0);
}

/* FAKEGPU_FLIP_HTOD=N: the N-th synchronous cuMemcpyHtoD_v2 of the
 * process lands with the low bit of its first byte flipped, as through a
 * failing HBM row. */
static void maybe_flip(CUdeviceptr dst, size_t n)
{
    static uint64_t calls, knob = UINT64_MAX;
    uint64_t at = fg_env_knob("FAKEGPU_FLIP_HTOD", &knob);

    if (at && n && __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) == at) {
        fg_device_access(1); /* the device's fault, not the host's access */
        *(volatile unsigned char *)(uintptr_t)dst ^= 1;
        fg_device_access(0);
    }
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    CUresult r = copy(DIR_HTOD, (uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, CU_STREAM_LEGACY, 1);

    if (r == CUDA_SUCCESS)
        maybe_flip(dstDevice, ByteCount);
    return r;
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(DIR_DTOH, (uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, CU_STREAM_LEGACY, 1);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(DIR_DTOD, (uintptr_t)dstDevice, (uintptr_t)srcDevice, ByteCount, CU_STREAM_LEGACY, 1);
}

/* The per-thread default stream variants: the synchronous ones run on the
 * calling thread's per-thread stream, the others read NULL as that stream. */
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(DIR_UNIFIED, (uintptr_t)dst, (uintptr_t)src, ByteCount, CU_STREAM_PER_THREAD, 1);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(DIR_HTOD, (uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, CU_STREAM_PER_THREAD, 1);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(DIR_DTOH, (uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, CU_STREAM_PER_THREAD, 1);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_UNIFIED, (uintptr_t)dst, (uintptr_t)src, ByteCount, fg_per_thread(hStream), 0);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_HTOD, (uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, fg_per_thread(hStream), 0);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_DTOH, (uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, fg_per_thread(hStream), 0);
}

CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_DTOD, (uintptr_t)dstDevice, (uintptr_t)srcDevice, ByteCount, fg_per_thread(hStream), 0);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_HTOD, (uintptr_t)dstDevice, (uintptr_t)srcHost, ByteCount, hStream, 0);
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_DTOH, (uintptr_t)dstHost, (uintptr_t)srcDevice, ByteCount, hStream, 0);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return copy(DIR_DTOD, (uintptr_t)dstDevice, (uintptr_t)srcDevice, ByteCount, hStream, 0);
}

/*
 * Sets n elements of elem (1 or 4) bytes on hStream; the range must be
 * known memory.  A synchronous memset (sync) waits for its stream only
 * when the target is pinned host or managed memory: into device memory it
 * is asynchronous with respect to the host, as in CUDA.
 */
static CUresult memset_elems(uintptr_t dst, unsigned value, unsigned elem, size_t n, CUstream hStream, int sync)
{
    const struct fg_alloc *a;
    struct fg_stream *s;
    struct fg_op *op;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (rc || n == 0)
        goto out;
    if (dst % elem || n > SIZE_MAX / elem || !known_range(dst, n * elem)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    a = fg_alloc_find(dst);
    if (sync && a->kind != FG_MEM_HOST && a->kind != FG_MEM_REGISTERED && a->kind != FG_MEM_MANAGED)
        sync = 0;
    if (sync && fg_in_worker()) {
        rc = CUDA_ERROR_NOT_PERMITTED;
        goto out;
    }
    if (!(op = fg_op_new(FG_OP_MEMSET, 0))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->u.memset.dst = (void *)dst;
    op->u.memset.value = value;
    op->u.memset.elem = elem;
    op->u.memset.n = n;
    rc = fg_submit(s, op);
    if (!rc && sync)
        fg_stream_wait_seq(s, s->enq_seq);
out:
    fg_unlock();
    return rc;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return memset_elems((uintptr_t)dstDevice, uc, 1, N, CU_STREAM_LEGACY, 1);
}

CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return memset_elems((uintptr_t)dstDevice, ui, 4, N, CU_STREAM_LEGACY, 1);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return memset_elems((uintptr_t)dstDevice, uc, 1, N, hStream, 0);
}

CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return memset_elems((uintptr_t)dstDevice, ui, 4, N, hStream, 0);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return memset_elems((uintptr_t)dstDevice, uc, 1, N, fg_per_thread(hStream), 0);
}

CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return memset_elems((uintptr_t)dstDevice, ui, 4, N, fg_per_thread(hStream), 0);
}
