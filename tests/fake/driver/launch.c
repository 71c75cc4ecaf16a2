/*
 * Kernel launches.  In the double a CUfunction is a host function
 * `void k(void **kernelParams)` and kernelParams a NULL-terminated array of
 * pointers to 16-byte argument slots (examples/common/kernels.h).  The
 * launch copies the slots, as CUDA copies argument values at launch, so the
 * caller may reuse its storage at once; the kernel runs once, in stream
 * order, on the stream's worker.  The grid shape is checked but never
 * changes what runs: kernels are grid-stride loops over the whole range.
 * A host function's parameter count is unknown to the driver unless the
 * program declared it (fakegpu_func_set_param_count): then a launch with
 * fewer arguments, and a query of a parameter past the count, are refused.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define FG_ARG_SLOT_BYTES 16

/* ---- the optional registry of parameter counts (lock held) --------- */

static struct param_count {
    CUfunction f;
    int count;   /* -1: not declared */
    bool kernel; /* a library kernel handle (CUkernel), as the runtime launches */
} *counts;
static size_t ncounts, counts_cap;

static struct param_count *entry_of(CUfunction f)
{
    for (size_t i = 0; i < ncounts; i++)
        if (counts[i].f == f)
            return &counts[i];
    return NULL;
}

/* The declared parameter count of f, or -1. */
static int param_count(CUfunction f)
{
    struct param_count *e = entry_of(f);
    return e ? e->count : -1;
}

static bool is_kernel(CUfunction f)
{
    struct param_count *e = entry_of(f);
    return e && e->kernel;
}

int fg_func_is_kernel(CUfunction f)
{
    return is_kernel(f);
}

/*
 * Not CUDA: declares how many parameters the double's kernel f takes
 * (a later declaration replaces an earlier one).  Works before cuInit, so
 * that a program may declare its kernels at start-up.
 */
/* The entry of f, made when missing (lock held); NULL without memory. */
static struct param_count *entry_make(CUfunction f)
{
    struct param_count *e = entry_of(f);
    if (e)
        return e;
    if (ncounts == counts_cap) {
        size_t cap = counts_cap ? 2 * counts_cap : 16;
        struct param_count *c = realloc(counts, cap * sizeof(*c));
        if (!c)
            return NULL;
        counts = c;
        counts_cap = cap;
    }
    counts[ncounts] = (struct param_count){f, -1, false};
    return &counts[ncounts++];
}

__attribute__((visibility("default"))) CUresult fakegpu_func_set_param_count(CUfunction f, unsigned int count)
{
    if (!f || count > FG_MAX_KERNEL_ARGS)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct param_count *e = entry_make(f);
    if (e)
        e->count = (int)count;
    fg_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/*
 * Not CUDA: marks f as a library kernel handle, what NVIDIA's runtime
 * launches since CUDA 12 (a CUkernel from cuLibraryGetKernel, handed to
 * cuLaunchKernel as a CUfunction).  The double's runtime marks each
 * function it launches.  As on a GPU (seen on an H200 with CUDA 13),
 * cuFuncGetParamInfo does not describe such a handle and
 * cuKernelGetParamInfo does.
 */
__attribute__((visibility("default"))) CUresult fakegpu_kernel_handle(CUfunction f)
{
    if (!f)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct param_count *e = entry_make(f);
    if (e)
        e->kernel = true;
    fg_unlock();
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Parameter @paramIndex of f in the double's convention (lock held). */
static CUresult param_info(CUfunction f, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    int n = param_count(fg_func_host(f));
    if (paramIndex >= (n < 0 ? FG_MAX_KERNEL_ARGS : (size_t)n))
        return CUDA_ERROR_INVALID_VALUE;
    *paramOffset = FG_ARG_SLOT_BYTES * paramIndex;
    if (paramSize)
        *paramSize = FG_ARG_SLOT_BYTES;
    return CUDA_SUCCESS;
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    CUfunction f = (CUfunction)(void *)kernel;
    fg_lock();
    CUresult rc = fg_check_init();
    if (!rc && (!f || !paramOffset))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && !is_kernel(f))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc)
        rc = param_info(f, paramIndex, paramOffset, paramSize);
    fg_unlock();
    return rc;
}

/*
 * In the double's convention every parameter is one 16-byte slot, so
 * parameter i lies at 16 * i.  Past a declared count, or past the 64
 * parameters the double takes, the index is refused as CUDA refuses one
 * past the function's parameters.
 */
CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!func || !paramOffset))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && is_kernel(func))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc)
        rc = param_info(func, paramIndex, paramOffset, paramSize);
    fg_unlock();
    return rc;
}

/* ---- launches ------------------------------------------------------ */

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                       unsigned bz, unsigned shared, CUstream hStream, void **params, void **extra)
{
    struct fg_stream *s;
    struct fg_op *op;
    unsigned n = 0, i;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (rc)
        goto out;
    if (!f) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    f = fg_func_host(f); /* a function handle from cuKernelGetFunction */
    if (!gx || !gy || !gz || !bx || !by || !bz || gy > 65535 || gz > 65535 || bz > 64 ||
        (unsigned long long)bx * by * bz > 1024 || shared > FG_MAX_SHARED_MEM || (params && extra)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (extra) {
        rc = CUDA_ERROR_NOT_SUPPORTED; /* a packed argument buffer has no slots to copy */
        goto out;
    }
    while (params && params[n])
        if (++n > FG_MAX_KERNEL_ARGS) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    /* Fewer arguments than the kernel takes: CUDA would read past them. */
    if ((int)n < param_count(f)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (shared > fg_func_max_shared(s->ctx, f)) { /* past 48 KiB only once the function allows it */
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if ((rc = fg_code_load(s->ctx, f))) /* a first launch loads the function */
        goto out;
    if (!(op = fg_op_new(FG_OP_KERNEL, n))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    op->u.kernel.f = f;
    op->u.kernel.nargs = n;
    for (i = 0; i < n; i++)
        memcpy(op->slots[i].bytes, params[i], sizeof(op->slots[i].bytes));
    rc = fg_submit(s, op);
out:
    fg_unlock();
    return rc;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                  kernelParams, extra);
}

/* Launch attributes (priority, cooperative, ...) change nothing in the double. */
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    if (!config || (config->numAttrs && !config->attrs))
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->sharedMemBytes, config->hStream, kernelParams, extra);
}

/* The per-thread default stream variants: NULL is CU_STREAM_PER_THREAD. */
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                             unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                             unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  fg_per_thread(hStream), kernelParams, extra);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    if (!config || (config->numAttrs && !config->attrs))
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->sharedMemBytes, fg_per_thread(config->hStream), kernelParams, extra);
}
