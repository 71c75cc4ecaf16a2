/*
 * cuGetProcAddress resolves a base name and a CUDA version to the
 * versioned entry point the real driver gives (the runtime reaches the
 * driver only this way), reports unknown names and too-old versions, and
 * works before cuInit.
 */
#include "drv_test.h"

static const struct {
    const char *name;
    int version;
    void *want; /* NULL: not found */
    CUdriverProcAddressQueryResult status;
} cases[] = {
    {"cuInit", 13000, (void *)cuInit, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuGetProcAddress", 13000, (void *)cuGetProcAddress_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAlloc", 13000, (void *)cuMemAlloc_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAlloc", 3020, (void *)cuMemAlloc_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAlloc", 3010, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
    {"cuMemFree", 12000, (void *)cuMemFree_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamDestroy", 13000, (void *)cuStreamDestroy_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventDestroy", 13000, (void *)cuEventDestroy_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventElapsedTime", 13000, (void *)cuEventElapsedTime_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventElapsedTime", 12080, (void *)cuEventElapsedTime_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxCreate", 13000, (void *)cuCtxCreate_v4, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxSynchronize", 13000, (void *)cuCtxSynchronize_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxSynchronize", 12080, (void *)cuCtxSynchronize, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxGetDevice", 13000, (void *)cuCtxGetDevice_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxGetDevice", 12000, (void *)cuCtxGetDevice, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuDevicePrimaryCtxRelease", 13000, (void *)cuDevicePrimaryCtxRelease_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamBeginCapture", 13000, (void *)cuStreamBeginCapture_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamBeginCapture", 10000, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
    {"cuGraphInstantiate", 13000, (void *)cuGraphInstantiateWithFlags, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemHostRegister", 13000, (void *)cuMemHostRegister_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemcpyDtoHAsync", 13000, (void *)cuMemcpyDtoHAsync_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemsetD32", 13000, (void *)cuMemsetD32_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAllocAsync", 11020, (void *)cuMemAllocAsync, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAllocAsync", 11010, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
    {"cuLaunchKernel", 13000, (void *)cuLaunchKernel, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuLaunchHostFunc", 13000, (void *)cuLaunchHostFunc, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAlloc_v2", 13000, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND}, /* base names only */
    {"cuNoSuchFunction", 13000, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
    {"", 13000, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
};

int main(void)
{
    CUdriverProcAddressQueryResult status;
    void *fn;
    size_t i;

    /* Before cuInit, as the runtime does it. */
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fn = (void *)&fn;
        status = (CUdriverProcAddressQueryResult)-1;
        CHECK_RES(cuGetProcAddress_v2(cases[i].name, &fn, cases[i].version, CU_GET_PROC_ADDRESS_DEFAULT, &status),
                  cases[i].want ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
        EXPECT(fn == cases[i].want, "%s@%d: got %p, want %p", cases[i].name, cases[i].version, fn, cases[i].want);
        EXPECT(status == cases[i].status, "%s@%d: status %d, want %d", cases[i].name, cases[i].version, status,
               cases[i].status);
    }

    /* The status is optional; the per-thread flag selects the _ptsz/_ptds
     * variant where there is one (tests/fake/test/drv_ptsz.c), the plain
     * function where there is none. */
    CHECK(cuGetProcAddress_v2("cuMemcpyAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    EXPECT(fn == (void *)cuMemcpyAsync_ptsz, "per-thread flag: %p", fn);
    CHECK(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    EXPECT(fn == (void *)cuMemAlloc_v2, "per-thread flag, no variant: %p", fn);
    CHECK(cuGetProcAddress_v2("cuMemcpyAsync", &fn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, NULL));
    EXPECT(fn == (void *)cuMemcpyAsync, "legacy flag: %p", fn);

    /* Bad arguments, and a version newer than the driver. */
    CHECK_RES(cuGetProcAddress_v2(NULL, &fn, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGetProcAddress_v2("cuInit", NULL, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGetProcAddress_v2("cuInit", &fn, 13000, 1u << 7, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGetProcAddress_v2("cuInit", &fn, 13010, 0, NULL), CUDA_ERROR_INVALID_VALUE);

    /* A resolved entry point works. */
    CUresult (*init)(unsigned) = NULL;
    CUresult (*version)(int *) = NULL;
    int v = 0;
    CHECK(cuGetProcAddress_v2("cuInit", (void **)&init, 13000, 0, NULL));
    CHECK(init(0));
    CHECK(cuGetProcAddress_v2("cuDriverGetVersion", (void **)&version, 13000, 0, NULL));
    CHECK(version(&v));
    EXPECT(v == 13000, "driver version %d", v);
    return 0;
}
