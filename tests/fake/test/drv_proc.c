/*
 * cuGetProcAddress resolves a base name and a CUDA version to the
 * versioned entry point the real driver gives (the runtime reaches the
 * driver only this way): a version older than a _v2 variant gets the
 * legacy v1 function, with its own signature; unknown names and versions
 * older than every variant are answers, not errors (CUDA_SUCCESS, a NULL
 * pointer and the status saying why, as the 13.0 cuda.h says); it works
 * before cuInit.
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
    {"cuMemAlloc", 3010, (void *)cuMemAlloc, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAlloc", 2000, (void *)cuMemAlloc, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemAlloc", 1000, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
    {"cuMemFree", 12000, (void *)cuMemFree_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemFree", 3010, (void *)cuMemFree, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemcpyHtoD", 3010, (void *)cuMemcpyHtoD, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemcpyDtoH", 3010, (void *)cuMemcpyDtoH, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuMemcpyDtoH", 3020, (void *)cuMemcpyDtoH_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamDestroy", 13000, (void *)cuStreamDestroy_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventDestroy", 13000, (void *)cuEventDestroy_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventElapsedTime", 13000, (void *)cuEventElapsedTime_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventElapsedTime", 12080, (void *)cuEventElapsedTime_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuEventElapsedTime", 12000, (void *)cuEventElapsedTime, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxCreate", 13000, (void *)cuCtxCreate_v4, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxSynchronize", 13000, (void *)cuCtxSynchronize_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxSynchronize", 12080, (void *)cuCtxSynchronize, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxGetDevice", 13000, (void *)cuCtxGetDevice_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuCtxGetDevice", 12000, (void *)cuCtxGetDevice, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuDevicePrimaryCtxRelease", 13000, (void *)cuDevicePrimaryCtxRelease_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamBeginCapture", 13000, (void *)cuStreamBeginCapture_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamBeginCapture", 10010, (void *)cuStreamBeginCapture_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamBeginCapture", 10000, (void *)cuStreamBeginCapture, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamBeginCapture", 9020, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
    {"cuStreamGetCaptureInfo", 13000, (void *)cuStreamGetCaptureInfo_v3, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamGetCaptureInfo", 12000, (void *)cuStreamGetCaptureInfo_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamGetCaptureInfo", 10010, (void *)cuStreamGetCaptureInfo, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuGraphExecUpdate", 13000, (void *)cuGraphExecUpdate_v2, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuGraphExecUpdate", 11000, (void *)cuGraphExecUpdate, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuStreamAddCallback", 13000, (void *)cuStreamAddCallback, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuFuncGetParamInfo", 13000, (void *)cuFuncGetParamInfo, CU_GET_PROC_ADDRESS_SUCCESS},
    {"cuFuncGetParamInfo", 12030, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
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
        CHECK(cuGetProcAddress_v2(cases[i].name, &fn, cases[i].version, CU_GET_PROC_ADDRESS_DEFAULT, &status));
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
    CHECK(cuGetProcAddress_v2("cuStreamBeginCapture", &fn, 10000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    EXPECT(fn == (void *)cuStreamBeginCapture_ptsz, "per-thread flag, v1: %p", fn);
    CHECK(cuGetProcAddress_v2("cuMemcpyDtoH", &fn, 3010, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    EXPECT(fn == (void *)cuMemcpyDtoH, "per-thread flag, v1 without a variant: %p", fn);
    CHECK(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 12030, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    EXPECT(fn == (void *)cuStreamGetCaptureInfo_v3_ptsz, "per-thread flag, v3: %p", fn);
    /* Not found is still CUDA_SUCCESS without a status to read. */
    fn = (void *)&fn;
    CHECK(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, NULL));
    EXPECT(fn == NULL, "an unknown name gave %p", fn);

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

    /* The v1 functions take 32-bit pointers and sizes.  No address the
     * double hands out fits one: v1 allocation is out of memory, and a v1
     * copy names no known memory. */
    CUresult (*alloc_v1)(CUdeviceptr_v1 *, unsigned int) = NULL;
    CUresult (*copy_v1)(void *, CUdeviceptr_v1, unsigned int) = NULL;
    CUdeviceptr_v1 small = 0;
    CUcontext ctx;
    char buf[8];
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc_v1, 3010, 0, NULL));
    CHECK_RES(alloc_v1(&small, 64), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RES(alloc_v1(NULL, 64), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGetProcAddress_v2("cuMemcpyDtoH", (void **)&copy_v1, 3010, 0, NULL));
    CHECK_RES(copy_v1(buf, 0x1000, sizeof(buf)), CUDA_ERROR_INVALID_VALUE);
    size_t freemem, total, free_after;
    CHECK(cuMemGetInfo_v2(&freemem, &total));
    CHECK_RES(cuMemAlloc(&small, 1 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemGetInfo_v2(&free_after, &total));
    EXPECT(free_after == freemem, "a failed v1 allocation kept %zu bytes", freemem - free_after);
    return 0;
}
