/*
 * What a kernel launch passes: its parameters' layout, asked of the driver
 * at a kernel's first launch that is looked at (cuFuncGetParamInfo, or
 * cuKernelGetParamInfo for the CUkernel handles NVIDIA's runtime launches),
 * and a scan of every aligned 64-bit word of its parameters, where the
 * pointers it was given are, in scalars or inside structures passed by
 * value.  Two questions read it: does a kernel reach host memory the host
 * may read without a copy call (hostmem.c), and which allocations may it
 * write before a snapshot's copies have read them (pacer.c).  A pointer
 * the kernel finds in device memory is not seen.
 */
#include <stdlib.h>
#include <string.h>

#include "interpose.h"

/* A kernel's parameter sizes, as cuFuncGetParamInfo gives them, learnt at
 * its first launch that is looked at and kept for the process: an
 * insert-only table read without a lock.  n < 0: the driver could not say. */
struct layout {
    CUfunction f;
    int n;
    uint32_t size[];
};
#define LAYOUTS 4096 /* kernels; past it the driver is asked at each launch */
#define MAX_PARAMS 4096
static struct layout *layouts[LAYOUTS];

/* The parameter sizes by one of the two calls: f a CUfunction
 * (cuFuncGetParamInfo) or, as NVIDIA's runtime launches since CUDA 12, a
 * CUkernel (cuKernelGetParamInfo).  *e: CUDA_SUCCESS when described
 * (INVALID_VALUE past the last parameter), else the call's error. */
static struct layout *describe(CUfunction f, bool kernel, CUresult *e)
{
    const char *name = kernel ? "cuKernelGetParamInfo" : "cuFuncGetParamInfo";
    if (!(kernel ? (void *)real_cuKernelGetParamInfo : (void *)real_cuFuncGetParamInfo) && ckpt_resolve(name) < 0) {
        *e = CUDA_ERROR_NOT_SUPPORTED;
        return NULL;
    }
    size_t cap = 16, n = 0, off, size;
    struct layout *l = malloc(sizeof(*l) + cap * sizeof(l->size[0]));
    if (!l) {
        *e = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    l->f = f;
    for (*e = CUDA_SUCCESS; n < MAX_PARAMS;) {
        *e = kernel ? real_cuKernelGetParamInfo((CUkernel)(void *)f, n, &off, &size)
                    : real_cuFuncGetParamInfo(f, n, &off, &size);
        if (*e != CUDA_SUCCESS)
            break;
        if (n == cap) {
            struct layout *m = realloc(l, sizeof(*l) + (cap *= 2) * sizeof(l->size[0]));
            if (!m) {
                free(l);
                *e = CUDA_ERROR_OUT_OF_MEMORY;
                return NULL;
            }
            l = m;
        }
        l->size[n++] = (uint32_t)size;
    }
    if (*e == CUDA_ERROR_INVALID_VALUE && n > 0)
        *e = CUDA_SUCCESS; /* past the last parameter */
    l->n = (int)n;
    return l;
}

static struct layout *layout_of(CUfunction f, bool *kept, CUresult why[2])
{
    size_t h = ((uintptr_t)f >> 4) * 0x9e3779b97f4a7c15ull % LAYOUTS;
    for (size_t k = 0; k < LAYOUTS; k++) {
        struct layout *l = __atomic_load_n(&layouts[(h + k) % LAYOUTS], __ATOMIC_ACQUIRE);
        if (!l)
            break;
        if (l->f == f) {
            *kept = true;
            return l;
        }
    }
    *kept = false;
    /* A kernel without parameters answers INVALID_VALUE at index 0; so
     * may the call that does not take this kind of handle, which is why
     * the other is asked first: n = 0 only when neither describes one. */
    struct layout *l = describe(f, false, &why[0]);
    if (!l || why[0] != CUDA_SUCCESS) {
        free(l);
        l = describe(f, true, &why[1]);
        if (l && why[1] != CUDA_SUCCESS) {
            bool none = why[1] == CUDA_ERROR_INVALID_VALUE &&
                        (why[0] == CUDA_ERROR_INVALID_VALUE || why[0] == CUDA_ERROR_INVALID_HANDLE ||
                         why[0] == CUDA_ERROR_NOT_SUPPORTED);
            l->n = none || why[0] == CUDA_ERROR_INVALID_VALUE ? 0 : -1;
        }
    }
    if (!l)
        return NULL;
    for (size_t k = 0; k < LAYOUTS; k++) {
        struct layout *none = NULL;
        if (__atomic_compare_exchange_n(&layouts[(h + k) % LAYOUTS], &none, l, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            *kept = true;
            return l;
        }
        if (none->f == f) { /* another thread learnt it first */
            free(l);
            *kept = true;
            return none;
        }
    }
    return l; /* the table is full: the caller frees it */
}

/* Calls fn on each aligned word of [p, p + bytes) until it returns true. */
static bool words(const void *p, size_t bytes, bool (*fn)(uint64_t, void *), void *arg)
{
    for (size_t o = 0; o + sizeof(uint64_t) <= bytes; o += sizeof(uint64_t)) {
        uint64_t w;
        memcpy(&w, (const char *)p + o, sizeof(w));
        if (fn(w, arg))
            return true;
    }
    return false;
}

int ckpt_launch_scan(CUfunction f, void **params, void **extra, bool (*fn)(uint64_t, void *), void *arg,
                     CUresult asked[2])
{
    bool kept = false, stopped = false, unknown = false;
    struct layout *l = params ? layout_of(f, &kept, asked) : NULL;
    if (params && (!l || l->n < 0)) {
        unknown = true;
    } else if (params) {
        /* kernelParams[i] points at parameter i, l->size[i] bytes.  The
         * CPU double ends the array with NULL and takes no count. */
        for (int i = 0; i < l->n && params[i] && !stopped; i++)
            stopped = words(params[i], l->size[i], fn, arg);
    }
    /* extra: CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, ..., END */
    const void *buf = NULL;
    size_t bufsize = 0;
    for (size_t k = 0; extra && extra[k] != CU_LAUNCH_PARAM_END && k < 16; k += 2) {
        if (extra[k] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[k + 1];
        else if (extra[k] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[k + 1])
            memcpy(&bufsize, extra[k + 1], sizeof(bufsize));
    }
    if (!stopped && buf)
        stopped = words(buf, bufsize, fn, arg);
    if (l && !kept)
        free(l);
    return stopped ? 1 : unknown ? -1 : 0;
}
