/*
 * Libraries of device variables: cuLibraryLoadData takes the double's own
 * image (struct fakegpu_library_image, cuda.h) where CUDA takes a fatbin,
 * and gives each variable device memory (managed memory for a __managed__
 * one), initialised as the image says; cuLibraryGetGlobal and
 * cuLibraryGetManaged find one by name, each time at the same address;
 * cuLibraryUnload frees them all, after the work already queued.  A device
 * variable is state the host never allocated: what NVIDIA's runtime does
 * for a program's __device__ variables when it loads its module.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

struct fg_library {
    unsigned int nvars;
    struct fakegpu_library_var *vars;
    CUdeviceptr *addr;
};

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
    if (!lib || !(lib->vars = (struct fakegpu_library_var *)calloc(img->nvars + 1, sizeof(*lib->vars))) ||
        !(lib->addr = (CUdeviceptr *)calloc(img->nvars + 1, sizeof(*lib->addr)))) {
        if (lib)
            free(lib->vars);
        free(lib);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (unsigned int i = 0; i < img->nvars; i++) {
        const struct fakegpu_library_var *v = &img->vars[i];
        CUresult rc = v->managed ? cuMemAllocManaged(&lib->addr[i], v->size, CU_MEM_ATTACH_GLOBAL)
                                 : cuMemAlloc_v2(&lib->addr[i], v->size);
        if (!rc)
            rc = v->init ? cuMemcpyHtoD_v2(lib->addr[i], v->init, v->size) : cuMemsetD8_v2(lib->addr[i], 0, v->size);
        if (rc) {
            lib->nvars = i + (lib->addr[i] != 0);
            cuLibraryUnload((CUlibrary)lib);
            return rc;
        }
        lib->vars[i] = *v;
        lib->nvars = i + 1;
    }
    *library = (CUlibrary)lib;
    return CUDA_SUCCESS;
}

static CUresult get(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name, int managed)
{
    struct fg_library *lib = (struct fg_library *)library;

    if (fg_check_init())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!lib || !name)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < lib->nvars; i++) {
        if (strcmp(lib->vars[i].name, name) != 0 || lib->vars[i].managed != managed)
            continue;
        if (dptr)
            *dptr = lib->addr[i];
        if (bytes)
            *bytes = lib->vars[i].size;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_FOUND;
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
    for (unsigned int i = 0; i < lib->nvars; i++)
        if (lib->addr[i])
            cuMemFree_v2(lib->addr[i]); /* waits for the work queued before */
    free(lib->vars);
    free(lib->addr);
    free(lib);
    return CUDA_SUCCESS;
}
