/*
 * Contexts of the fake driver: the device's primary context and contexts
 * made by cuCtxCreate, each with its own legacy default stream, and the
 * calling thread's current context.  A context never owns memory here
 * (allocations belong to the device), so destroying one only stops its
 * streams; it must never free memory a program may still hold.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

static __thread struct fg_ctx *tls_ctx;
static uint64_t next_ctx_id; /* guarded by drv.lock */

CUresult fg_current_ctx(struct fg_ctx **ctx)
{
    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!tls_ctx || !fg_ptrset_has(&drv.ctxs, tls_ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = tls_ctx;
    return CUDA_SUCCESS;
}

/* FAKEGPU_CONTEXT_LOG: one line per context made, "<pid> <id> primary|created",
 * as nvidia-smi lists the processes that hold a context on a GPU. */
static void log_ctx(const struct fg_ctx *ctx)
{
    const char *path = getenv("FAKEGPU_CONTEXT_LOG");
    char line[64];
    if (!path || !*path)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    int n = snprintf(line, sizeof(line), "%d %llu %s\n", (int)getpid(), (unsigned long long)ctx->id,
                     ctx->primary ? "primary" : "created");
    if (fd >= 0 && write(fd, line, (size_t)n) != n)
        fprintf(stderr, "fakegpu: FAKEGPU_CONTEXT_LOG=%s: cannot write\n", path);
    if (fd >= 0)
        close(fd);
}

/* A context with its legacy stream, registered; NULL when out of memory.  Lock held. */
static struct fg_ctx *ctx_new(int primary)
{
    /* The device's address range, reserved top-down where mmap places it
     * now, at the first context as under unified addressing on a GPU:
     * a mapping made between cuInit and here moves every allocation. */
    if (fg_va_init(drv.total_mem))
        return NULL;
    struct fg_ctx *ctx = calloc(1, sizeof(*ctx));

    if (!ctx)
        return NULL;
    ctx->id = ++next_ctx_id;
    ctx->primary = primary;
    /* An H100's: 1 KiB of stack per thread, a 1 MiB printf FIFO, an
     * 8 MiB malloc heap, device-runtime depth 2 and 2048 pending launches,
     * 64-byte L2 fetches, no persisting L2 lines. */
    static const size_t defaults[] = { 1024, 1 << 20, 8 << 20, 2, 2048, 64, 0 };
    memcpy(ctx->limit, defaults, sizeof(ctx->limit));
    ctx->legacy = fg_stream_new(ctx, FG_STREAM_LEGACY, 0);
    if (!ctx->legacy || fg_ptrset_add(&drv.ctxs, ctx)) {
        if (ctx->legacy)
            fg_stream_retire(ctx->legacy);
        free(ctx);
        return NULL;
    }
    log_ctx(ctx);
    return ctx;
}

/* ctx may be NULL (the current one); checks it names a live context.  Lock held. */
static CUresult resolve_ctx(CUcontext h, struct fg_ctx **ctx)
{
    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!h)
        return fg_current_ctx(ctx);
    if (!fg_ptrset_has(&drv.ctxs, h))
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = (struct fg_ctx *)h;
    return CUDA_SUCCESS;
}

/*
 * The primary context lives as long as the process: when its last
 * retainer releases it, CUDA would reset it, but a double that freed the
 * streams under a program still holding their handles would crash where a
 * GPU reports an error.
 */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = CUDA_SUCCESS;

    fg_lock();
    if (fg_check_init())
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!pctx)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (dev != 0)
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (!drv.primary && !(drv.primary = ctx_new(1)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        drv.primary_refs++;
        *pctx = (CUcontext)drv.primary;
    }
    fg_unlock();
    return rc;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = CUDA_SUCCESS;

    fg_lock();
    if (fg_check_init())
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (dev != 0)
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (drv.primary_refs == 0)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        drv.primary_refs--;
    fg_unlock();
    return rc;
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    struct fg_ctx *ctx;
    CUresult rc = CUDA_SUCCESS;

    fg_lock();
    if (fg_check_init())
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!pctx)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (flags & ~0xffu) /* the CU_CTX_* flags; scheduling and the rest change nothing here */
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (dev != 0)
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (ctxCreateParams && (ctxCreateParams->numExecAffinityParams || ctxCreateParams->cigParams))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else if (!(ctx = ctx_new(0)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    else {
        *pctx = (CUcontext)ctx;
        tls_ctx = ctx;
    }
    fg_unlock();
    return rc;
}

/* Waits for the context's work, then stops its streams; handles to them become invalid. */
CUresult cuCtxDestroy_v2(CUcontext h)
{
    struct fg_ctx *ctx = (struct fg_ctx *)h;
    CUresult rc = CUDA_SUCCESS;

    fg_lock();
    if (fg_check_init())
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!h || !fg_ptrset_has(&drv.ctxs, ctx) || ctx->primary)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else {
        fg_ctx_drain(ctx);
        fg_ptrset_del(&drv.ctxs, ctx);
        while (ctx->streams)
            fg_stream_retire(ctx->streams);
        if (tls_ctx == ctx)
            tls_ctx = NULL;
        fg_code_release(ctx);
        free(ctx);
    }
    fg_unlock();
    return rc;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = CUDA_SUCCESS;

    fg_lock();
    if (fg_check_init())
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!pctx)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *pctx = fg_ptrset_has(&drv.ctxs, tls_ctx) ? (CUcontext)tls_ctx : NULL;
    fg_unlock();
    return rc;
}

CUresult cuCtxSetCurrent(CUcontext h)
{
    CUresult rc = CUDA_SUCCESS;

    fg_lock();
    if (fg_check_init())
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (h && !fg_ptrset_has(&drv.ctxs, h))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        tls_ctx = (struct fg_ctx *)h;
    fg_unlock();
    return rc;
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext h)
{
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = resolve_ctx(h, &ctx);
    if (!rc && !device)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        *device = 0;
    fg_unlock();
    return rc;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

/*
 * Waits for all work enqueued on the context's streams before the call,
 * then lets pools release cached memory, as CUDA does at synchronisation.
 */
CUresult cuCtxSynchronize_v2(CUcontext h)
{
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = resolve_ctx(h, &ctx);
    if (!rc)
        rc = fg_capture_forbid_unsafe();
    if (!rc) {
        fg_ctx_drain(ctx);
        fg_pool_trim_all();
    }
    fg_unlock();
    return rc;
}

CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

/* The current context's limits.  CU_LIMIT_SHMEM_SIZE and the CIG ones (7
 * and up) are of CIG contexts, which the double does not make: refused. */
CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && (unsigned)limit > CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        ctx->limit[limit] = value;
    fg_unlock();
    return rc;
}

CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && (!pvalue || (unsigned)limit > CU_LIMIT_PERSISTING_L2_CACHE_SIZE))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        *pvalue = ctx->limit[limit];
    fg_unlock();
    return rc;
}
