/*
 * Stream-ordered allocation (cuMemAllocAsync and friends) from memory
 * pools.  An allocation's address is known when the call returns; its free
 * runs in stream order.  Until it has run, only an allocation on the same
 * stream may take the block (stream order makes that safe, and CUDA does
 * it without waiting, whatever the device is doing); once it has, the
 * block is cached in its pool for a later allocation of a fitting size on
 * any stream, until a synchronisation (down to
 * the pool's release threshold, CUDA's default 0) or cuMemPoolTrimTo
 * releases it.  cuMemPoolGetAttribute reports the pool's reserved and used
 * bytes and their high-water marks, as an allocator's statistics read them.  A block must never be handed out again before the free
 * has run on its stream.  Blocks come from the device's address range
 * (va.c) like every device allocation, small ones packed into chunks that
 * only pools' blocks share, as CUDA's pools map address space of their own.
 */
#include <stdlib.h>

#include "driver.h"

struct fg_pool {
    int is_default, destroyed;
    size_t reserved; /* bytes backing this pool's blocks */
    size_t live;     /* blocks in use or being freed */
    size_t used;     /* bytes of those blocks */
    struct fg_block *pending; /* blocks whose free is queued and has not run */
    size_t reserved_high, used_high;
    uint64_t threshold; /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: kept at a synchronisation */
    int reuse[3];       /* the three CU_MEMPOOL_ATTR_REUSE_* policies, all on by default */
    struct fg_block *cached;
};

/*
 * A pool registered as a handle, or NULL.  Every pool here is pinned device
 * memory of device 0, the only kind cuMemPoolCreate accepts.  Lock held.
 */
static struct fg_pool *pool_new(void)
{
    struct fg_pool *pool = calloc(1, sizeof(*pool));

    if (!pool)
        return NULL;
    pool->reuse[0] = pool->reuse[1] = pool->reuse[2] = 1;
    if (fg_ptrset_add(&drv.pools, pool)) {
        free(pool);
        return NULL;
    }
    return pool;
}

int fg_pool_init(void)
{
    if (drv.default_pool)
        return 0;
    drv.default_pool = pool_new();
    if (!drv.default_pool)
        return -1;
    drv.default_pool->is_default = 1;
    return 0;
}

static void block_release(struct fg_block *b)
{
    fg_va_free((uintptr_t)b->ptr, b->cap);
    fg_mem_unreserve(b->cap);
    b->pool->reserved -= b->cap;
    if (b->refs)
        b->released = 1;
    else
        free(b);
}

/* Takes b off the pool's list of queued frees.  Lock held. */
static void unpend(struct fg_block *b)
{
    struct fg_block **pp = &b->pool->pending;

    while (*pp && *pp != b)
        pp = &(*pp)->next;
    if (*pp)
        *pp = b->next;
    b->next = NULL;
    b->freeing = NULL;
}

/* Releases cached blocks while the pool holds more than keep bytes.  Lock held. */
static void pool_trim(struct fg_pool *pool, size_t keep)
{
    while (pool->cached && pool->reserved > keep) {
        struct fg_block *b = pool->cached;

        pool->cached = b->next;
        block_release(b);
    }
}

static void pool_maybe_free(struct fg_pool *pool)
{
    if (pool->destroyed && pool->live == 0 && !pool->cached)
        free(pool);
}

void fg_pool_free_queued(struct fg_block *b, uint64_t gen)
{
    b->refs--;
    if (b->released) {
        if (!b->refs)
            free(b);
        return;
    }
    if (b->gen != gen)
        return; /* an allocation on its stream took it before the free ran */
    unpend(b);
    fg_pool_free_block(b);
}

void fg_pool_free_block(struct fg_block *b)
{
    struct fg_pool *pool = b->pool;

    pool->live--;
    pool->used -= b->cap;
    if (pool->destroyed) {
        block_release(b);
        pool_maybe_free(pool);
        return;
    }
    b->next = pool->cached;
    pool->cached = b;
}

static void trim_one(void *p, void *arg)
{
    struct fg_pool *pool = p;

    (void)arg;
    pool_trim(pool, pool->threshold > SIZE_MAX ? SIZE_MAX : (size_t)pool->threshold);
}

void fg_pool_trim_all(void)
{
    fg_ptrset_each(&drv.pools, trim_one, NULL);
}

/*
 * A block of at least bytes from the pool for stream s: the smallest that
 * fits of the cached ones and of those whose free is queued on s, else
 * fresh memory.  Lock held.
 */
static CUresult pool_alloc(struct fg_pool *pool, size_t bytes, struct fg_stream *s, CUdeviceptr *dptr)
{
    size_t want = (bytes + 511) & ~(size_t)511;
    struct fg_block **pp, **best = NULL, *b;
    int taken = 0; /* a block whose free had not run: still counted as used */

    for (pp = &pool->cached; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= want && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    for (pp = &pool->pending; *pp; pp = &(*pp)->next)
        if ((*pp)->freeing == s && (*pp)->cap >= want && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    if (best) {
        b = *best;
        *best = b->next;
        taken = b->freeing != NULL;
        b->freeing = NULL;
        b->gen++;
    } else {
        if (fg_mem_reserve(want))
            return CUDA_ERROR_OUT_OF_MEMORY;
        uintptr_t p;

        b = calloc(1, sizeof(*b));
        if (!b || fg_va_alloc(want, FG_VA_POOL, &p)) {
            free(b);
            fg_mem_unreserve(want);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        b->ptr = (void *)p;
        b->cap = want;
        b->pool = pool;
        pool->reserved += want;
        if (pool->reserved > pool->reserved_high)
            pool->reserved_high = pool->reserved;
    }
    if (fg_alloc_insert((uintptr_t)b->ptr, bytes, FG_MEM_POOL, b)) {
        if (taken) { /* it stays the pool's, its free to run */
            pool->live--;
            pool->used -= b->cap;
        }
        b->next = pool->cached;
        pool->cached = b;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->size = bytes;
    b->next = NULL;
    if (taken)
        return *dptr = (CUdeviceptr)(uintptr_t)b->ptr, CUDA_SUCCESS;
    pool->live++;
    pool->used += b->cap;
    if (pool->used > pool->used_high)
        pool->used_high = pool->used;
    *dptr = (CUdeviceptr)(uintptr_t)b->ptr;
    return CUDA_SUCCESS;
}

/* Inside a stream capture the allocation is a node of the graph (graphmem.c).  Lock held. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool hPool, CUstream hStream)
{
    struct fg_stream *s;
    CUresult rc = fg_stream_get(hStream, &s);

    if (rc)
        return rc;
    if (!dptr || bytes == 0 || !fg_ptrset_has(&drv.pools, hPool))
        return CUDA_ERROR_INVALID_VALUE;
    if (s->capture)
        return fg_gmem_alloc(s->capture, bytes, dptr);
    return pool_alloc((struct fg_pool *)hPool, bytes, s, dptr);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult rc;

    fg_lock();
    rc = alloc_async(dptr, bytesize, (CUmemoryPool)drv.default_pool, hStream);
    fg_unlock();
    return rc;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    CUresult rc;

    fg_lock();
    rc = alloc_async(dptr, bytesize, pool, hStream);
    fg_unlock();
    return rc;
}

/* The pointer is dead to the program at once; the block is reusable once the stream gets there. */
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    struct fg_stream *s;
    struct fg_alloc *a;
    struct fg_block *b;
    struct fg_op *op;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (rc)
        goto out;
    a = fg_alloc_find((uintptr_t)dptr);
    if (a && a->base == (uintptr_t)dptr && a->kind == FG_MEM_GRAPH) {
        rc = s->capture ? fg_gmem_free_captured(s->capture, a) : fg_gmem_free(a, s);
        goto out;
    }
    if (!a || a->base != (uintptr_t)dptr || a->kind != FG_MEM_POOL) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (s->capture) {
        fg_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto out;
    }
    if (!(op = fg_op_new(FG_OP_POOL_FREE, 0))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    b = a->owner;
    op->u.pool_free.block = b;
    op->u.pool_free.gen = b->gen;
    fg_alloc_remove(a->base);
    b->freeing = s;
    b->next = b->pool->pending;
    b->pool->pending = b;
    b->refs++;
    rc = fg_submit(s, op);
    if (rc) {
        /* Not enqueued: the allocation stays the program's. */
        unpend(b);
        b->refs--;
        if (fg_alloc_insert((uintptr_t)b->ptr, b->size, FG_MEM_POOL, b))
            fg_pool_free_block(b);
    }
out:
    fg_unlock();
    return rc;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    struct fg_pool *p;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
                poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && poolProps->location.id != 0)
        rc = CUDA_ERROR_INVALID_DEVICE;
    if (!rc && (poolProps->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    if (!rc) {
        p = pool_new();
        if (p)
            *pool = (CUmemoryPool)p;
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    return rc;
}

/* Outstanding allocations stay valid; the pool goes away when the last is freed. */
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct fg_pool *p = (struct fg_pool *)pool;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!fg_ptrset_has(&drv.pools, p) || p->is_default))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        fg_ptrset_del(&drv.pools, p);
        p->destroyed = 1;
        pool_trim(p, 0);
        pool_maybe_free(p);
    }
    fg_unlock();
    return rc;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !pool_out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && dev != 0)
        rc = CUDA_ERROR_INVALID_DEVICE;
    if (!rc)
        *pool_out = (CUmemoryPool)drv.default_pool;
    fg_unlock();
    return rc;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !fg_ptrset_has(&drv.pools, pool))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        pool_trim((struct fg_pool *)pool, minBytesToKeep);
    fg_unlock();
    return rc;
}

/* The attribute's value: an int for the reuse policies, a cuuint64_t else. */
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct fg_pool *p = (struct fg_pool *)pool;
    cuuint64_t v = 0;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!fg_ptrset_has(&drv.pools, p) || !value))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
        default: rc = CUDA_ERROR_INVALID_VALUE;
        }
        if (!rc && attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
            *(cuuint64_t *)value = v;
    }
    fg_unlock();
    return rc;
}

/* As CUDA: the reuse policies, the release threshold, and the high-water
 * marks, which may only be reset (to 0: the current value). */
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct fg_pool *p = (struct fg_pool *)pool;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!fg_ptrset_has(&drv.pools, p) || !value))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(const int *)value != 0;
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->threshold = *(const cuuint64_t *)value; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (*(const cuuint64_t *)value != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
            else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
                p->reserved_high = p->reserved;
            else
                p->used_high = p->used;
            break;
        default: rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    fg_unlock();
    return rc;
}

/* The per-thread default stream variants: NULL is CU_STREAM_PER_THREAD. */
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return cuMemAllocAsync(dptr, bytesize, fg_per_thread(hStream));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, fg_per_thread(hStream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return cuMemFreeAsync(dptr, fg_per_thread(hStream));
}
