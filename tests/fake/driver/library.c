/*
 * Libraries of device variables: cuLibraryLoadData takes the double's own
 * image (struct fakegpu_library_image, cuda.h) where CUDA takes a fatbin.
 * As CUDA's, a library is context-independent: its load needs no context
 * and takes no device memory.  The library is loaded into a context when
 * that context first asks for one of its variables (cuLibraryGetGlobal,
 * cuLibraryGetManaged: the lazy loading CUDA does by default): then each
 * variable gets device memory in it (managed memory for a __managed__
 * one), initialised as the image says, and is found there at the same
 * address every time after.  cuLibraryUnload frees every context's, after
 * the work already queued.  A device variable is state the host never
 * allocated: what NVIDIA's runtime finds for a program's __device__
 * variables, in the context that uses them.  (A __managed__ variable gets
 * memory in each context that asks, where CUDA has one per process.)
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* The library loaded into one context. */
struct fg_loaded {
    uint64_t ctx_id;
    CUdeviceptr *addr;
    struct fg_loaded *next;
};

struct fg_library {
    unsigned int nvars;
    struct fakegpu_library_var *vars;
    struct fg_loaded *loaded;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the loaded lists */

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
                           unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
                           unsigned int numLibraryOptions)
{
    const struct fakegpu_library_image *img = (const struct fakegpu_library_image *)code;
    struct fg_library *lib;

    (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
    (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!library || !img)
        return CUDA_ERROR_INVALID_VALUE;
    if (img->magic != FAKEGPU_LIBRARY_MAGIC)
        return CUDA_ERROR_INVALID_IMAGE;
    lib = (struct fg_library *)calloc(1, sizeof(*lib));
    if (!lib || !(lib->vars = (struct fakegpu_library_var *)calloc(img->nvars + 1, sizeof(*lib->vars)))) {
        free(lib);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(lib->vars, img->vars, img->nvars * sizeof(*lib->vars));
    lib->nvars = img->nvars;
    *library = (CUlibrary)lib;
    return CUDA_SUCCESS;
}

static void free_vars(const struct fg_library *lib, const struct fg_loaded *l)
{
    for (unsigned int i = 0; i < lib->nvars; i++)
        if (l->addr[i])
            cuMemFree_v2(l->addr[i]); /* waits for the work queued before */
}

/* The library loaded into the current context: its variables given memory
 * there now if they have none yet.  Library lock held. */
static CUresult load(struct fg_library *lib, struct fg_loaded **out)
{
    struct fg_ctx *ctx;
    struct fg_loaded *l;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    uint64_t id = rc ? 0 : ctx->id;
    fg_unlock();
    if (rc)
        return rc;
    for (l = lib->loaded; l; l = l->next)
        if (l->ctx_id == id) {
            *out = l;
            return CUDA_SUCCESS;
        }
    l = (struct fg_loaded *)calloc(1, sizeof(*l));
    if (!l || !(l->addr = (CUdeviceptr *)calloc(lib->nvars + 1, sizeof(*l->addr)))) {
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned int i = 0; i < lib->nvars && !rc; i++) {
        const struct fakegpu_library_var *v = &lib->vars[i];
        rc = v->managed ? cuMemAllocManaged(&l->addr[i], v->size, CU_MEM_ATTACH_GLOBAL)
                        : cuMemAlloc_v2(&l->addr[i], v->size);
        if (!rc)
            rc = v->init ? cuMemcpyHtoD_v2(l->addr[i], v->init, v->size) : cuMemsetD8_v2(l->addr[i], 0, v->size);
    }
    if (rc) {
        free_vars(lib, l);
        free(l->addr);
        free(l);
        return rc;
    }
    l->ctx_id = id;
    l->next = lib->loaded;
    lib->loaded = l;
    *out = l;
    return CUDA_SUCCESS;
}

static CUresult get(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name, int managed)
{
    struct fg_library *lib = (struct fg_library *)library;
    struct fg_loaded *l;
    unsigned int i;
    CUresult rc;

    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!lib || !name)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < lib->nvars; i++)
        if (strcmp(lib->vars[i].name, name) == 0 && lib->vars[i].managed == managed)
            break;
    if (i == lib->nvars)
        return CUDA_ERROR_NOT_FOUND;
    pthread_mutex_lock(&lock);
    rc = load(lib, &l);
    if (!rc && dptr)
        *dptr = l->addr[i];
    pthread_mutex_unlock(&lock);
    if (!rc && bytes)
        *bytes = lib->vars[i].size;
    return rc;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    return get(dptr, bytes, library, name, 0);
}

CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    return get(dptr, bytes, library, name, 1);
}

CUresult cuLibraryUnload(CUlibrary library)
{
    struct fg_library *lib = (struct fg_library *)library;

    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!lib)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    while (lib->loaded) {
        struct fg_loaded *l = lib->loaded;
        lib->loaded = l->next;
        free_vars(lib, l);
        free(l->addr);
        free(l);
    }
    pthread_mutex_unlock(&lock);
    free(lib->vars);
    free(lib);
    return CUDA_SUCCESS;
}
