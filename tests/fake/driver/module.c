/*
 * Module loading (CUDA_MODULE_LOADING).  A kernel's code lives in device
 * memory of the context that runs it.  Under lazy loading, CUDA's default
 * since 12.2, a function is loaded into a context at its first launch (or
 * at cuFuncLoad), and its code takes device memory at that moment, in
 * between the program's allocations: FG_CODE_BYTES, placed as a small
 * allocation is (packed into the 2 MiB pages small allocations share).  A
 * process whose launches are suppressed therefore finds its later
 * allocations elsewhere, as on a GPU, unless it loads what the launches
 * would have.  Under CUDA_MODULE_LOADING=EAGER every module is loaded with
 * the context, the same in every run: that is not modelled.  Code takes
 * addresses, not the memory budget (FAKEGPU_MEM_*), and is freed with its
 * context.
 *
 * cuKernelGetFunction gives a CUkernel's function in the current context,
 * a handle of its own (not the kernel handle): cuFuncIsLoaded and
 * cuFuncLoad take only function handles, as CUDA's do.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

#define FG_CODE_BYTES ((size_t)64 << 10)

/* A function handle from cuKernelGetFunction: a kernel in one context. */
struct fg_func {
    CUfunction kernel; /* the double's host function */
    struct fg_ctx *ctx;
};

struct fg_code {
    CUfunction *loaded; /* host functions loaded in this context */
    uintptr_t *addr;    /* and where each one's code is */
    size_t nloaded, cap;
};

static struct fg_func **funcs; /* every live function handle, few */
static size_t nfuncs, funcs_cap;

static struct fg_func *func_of(CUfunction f)
{
    for (size_t i = 0; i < nfuncs; i++)
        if ((void *)funcs[i] == (void *)f)
            return funcs[i];
    return NULL;
}

static int mode; /* 1: eager, 2: lazy */

static void read_mode(void)
{
    const char *v = getenv("CUDA_MODULE_LOADING");
    mode = v && strcmp(v, "EAGER") == 0 ? 1 : 2;
}

/* As the driver, reads CUDA_MODULE_LOADING once. */
static int lazy(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, read_mode);
    return mode == 2;
}

CUfunction fg_func_host(CUfunction f)
{
    struct fg_func *fn = func_of(f);
    return fn ? fn->kernel : f;
}

static int is_loaded(const struct fg_ctx *ctx, CUfunction host)
{
    if (!lazy())
        return 1;
    for (size_t i = 0; ctx->code && i < ctx->code->nloaded; i++)
        if (ctx->code->loaded[i] == host)
            return 1;
    return 0;
}

CUresult fg_code_load(struct fg_ctx *ctx, CUfunction f)
{
    CUfunction host = fg_func_host(f);
    struct fg_code *c;

    if (is_loaded(ctx, host))
        return CUDA_SUCCESS;
    if (!ctx->code && !(ctx->code = calloc(1, sizeof(*ctx->code))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    c = ctx->code;
    if (c->nloaded == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        CUfunction *l = realloc(c->loaded, cap * sizeof(*l));
        uintptr_t *a = l ? realloc(c->addr, cap * sizeof(*a)) : NULL;

        if (l)
            c->loaded = l;
        if (!a)
            return CUDA_ERROR_OUT_OF_MEMORY;
        c->addr = a;
        c->cap = cap;
    }
    if (fg_va_alloc(FG_CODE_BYTES, FG_VA_DEVICE, &c->addr[c->nloaded]))
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->loaded[c->nloaded++] = host;
    return CUDA_SUCCESS;
}

void fg_code_release(struct fg_ctx *ctx)
{
    struct fg_code *c = ctx->code;
    size_t kept = 0;

    for (size_t i = 0; i < nfuncs; i++) /* the context's function handles die with it */
        if (funcs[i]->ctx == ctx)
            free(funcs[i]);
        else
            funcs[kept++] = funcs[i];
    nfuncs = kept;
    if (!c)
        return;
    for (size_t i = 0; i < c->nloaded; i++)
        fg_va_free(c->addr[i], FG_CODE_BYTES);
    free(c->loaded);
    free(c->addr);
    free(c);
    ctx->code = NULL;
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = lazy() ? CU_MODULE_LAZY_LOADING : CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

/* A function handle of the current context: *ctx and its host function. */
static CUresult function_of(CUfunction f, struct fg_ctx **ctx, CUfunction *host)
{
    CUresult rc = fg_check_init();

    if (!rc && !f)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && fg_func_is_kernel(f))
        rc = CUDA_ERROR_INVALID_HANDLE; /* a CUkernel: cuKernelGetFunction first */
    if (!rc)
        rc = fg_current_ctx(ctx);
    if (!rc && func_of(f) && func_of(f)->ctx != *ctx)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    *host = fg_func_host(f);
    return rc;
}

CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    struct fg_ctx *ctx;
    CUfunction host;
    CUresult rc;

    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    rc = function_of(function, &ctx, &host);
    if (!rc)
        *state = is_loaded(ctx, host) ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
    fg_unlock();
    return rc;
}

CUresult cuFuncLoad(CUfunction function)
{
    struct fg_ctx *ctx;
    CUfunction host;
    CUresult rc;

    fg_lock();
    rc = function_of(function, &ctx, &host);
    if (!rc)
        rc = fg_code_load(ctx, host);
    fg_unlock();
    return rc;
}

/*
 * A function's attributes, per context: the dynamic shared memory a launch
 * may ask for is 48 KiB unless cuFuncSetAttribute raised it (up to what
 * the device has), as on a GPU; the other attributes are fixed.
 */
#define FG_DEFAULT_DYN_SHARED (48 << 10)
static struct fg_attr {
    uint64_t ctx_id;
    CUfunction host;
    int max_dyn_shared;
} *attrs;
static size_t nattrs, attrs_cap;

static struct fg_attr *attr_of(const struct fg_ctx *ctx, CUfunction host)
{
    for (size_t i = 0; i < nattrs; i++)
        if (attrs[i].ctx_id == ctx->id && attrs[i].host == host)
            return &attrs[i];
    return NULL;
}

unsigned fg_func_max_shared(const struct fg_ctx *ctx, CUfunction f)
{
    struct fg_attr *a = attr_of(ctx, fg_func_host(f));
    return a ? (unsigned)a->max_dyn_shared : FG_DEFAULT_DYN_SHARED;
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct fg_ctx *ctx;
    CUfunction host;
    CUresult rc;

    fg_lock();
    rc = function_of(hfunc, &ctx, &host);
    if (!rc && attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        struct fg_attr *a = attr_of(ctx, host);
        if (value < 0 || value > FG_MAX_SHARED_MEM) {
            rc = CUDA_ERROR_INVALID_VALUE;
        } else if (!a && nattrs == attrs_cap) {
            size_t cap = attrs_cap ? 2 * attrs_cap : 16;
            struct fg_attr *n = realloc(attrs, cap * sizeof(*n));
            if (!n)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            else
                attrs = n, attrs_cap = cap;
        }
        if (!rc && !a)
            a = &attrs[nattrs++], *a = (struct fg_attr){ctx->id, host, FG_DEFAULT_DYN_SHARED};
        if (!rc)
            a->max_dyn_shared = value;
    } else if (!rc && attrib != CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        rc = CUDA_ERROR_INVALID_VALUE; /* read-only, or not modelled */
    }
    fg_unlock();
    return rc;
}

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    struct fg_ctx *ctx;
    CUfunction host;
    CUresult rc;

    fg_lock();
    rc = function_of(hfunc, &ctx, &host);
    if (!rc && !pi)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        switch (attrib) {
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
        case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
        case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = (int)fg_func_max_shared(ctx, host); break;
        default: rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    fg_unlock();
    return rc;
}

/* Looks a kernel up in the current context; loads nothing. */
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    CUfunction k = (CUfunction)(void *)kernel;
    struct fg_ctx *ctx = NULL;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!pFunc || !k))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && !fg_func_is_kernel(k))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc)
        rc = fg_current_ctx(&ctx);
    for (size_t i = 0; !rc && i < nfuncs; i++)
        if (funcs[i]->kernel == k && funcs[i]->ctx == ctx) {
            *pFunc = (CUfunction)(void *)funcs[i];
            goto out;
        }
    if (!rc && nfuncs == funcs_cap) {
        size_t cap = funcs_cap ? 2 * funcs_cap : 16;
        struct fg_func **f = realloc(funcs, cap * sizeof(*f));

        if (!f)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            funcs = f, funcs_cap = cap;
    }
    if (!rc) {
        struct fg_func *fn = malloc(sizeof(*fn));

        if (!fn) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *fn = (struct fg_func){k, ctx};
            funcs[nfuncs++] = fn;
            *pFunc = (CUfunction)(void *)fn;
        }
    }
out:
    fg_unlock();
    return rc;
}
