/*
 * cudaGetDriverEntryPoint and cudaGetDriverEntryPointByVersion hand out
 * the driver's own functions: asking for "cuMemAlloc" at CUDA 13000 gives
 * cuMemAlloc_v2, which then allocates memory the runtime can use; an
 * unknown name is reported through driverStatus with a NULL pointer; flags
 * the runtime does not define are refused.
 */
#include <cuda.h>
#include <string.h>

#include "rt_test.h"

#define N 4096

int main(void)
{
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    __typeof__(&cuMemAlloc_v2) alloc = NULL;
    __typeof__(&cuMemFree_v2) release = NULL;
    __typeof__(&cuDriverGetVersion) version = NULL;
    static unsigned char host[N];
    CUdeviceptr d = 0;
    void *fn = NULL;
    int v = 0;

    CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&alloc, 13000,
                                           cudaEnableDefault, &st));
    EXPECT(st == cudaDriverEntryPointSuccess && alloc, "status %d, pointer %p", (int)st,
           (void *)alloc);
    EXPECT(alloc == cuMemAlloc_v2, "cuMemAlloc at 13000 is not cuMemAlloc_v2");
    CHECK(cudaGetDriverEntryPoint("cuMemFree", (void **)&release, cudaEnableLegacyStream, &st));
    EXPECT(st == cudaDriverEntryPointSuccess && release == cuMemFree_v2, "cuMemFree is not _v2");

    /* The pointer works: memory from it is device memory to the runtime. */
    CHECK(cudaFree(NULL)); /* the runtime's context is current from here */
    EXPECT(alloc(&d, N) == CUDA_SUCCESS && d, "cuMemAlloc_v2 through the entry point");
    CHECK(cudaMemset((void *)(uintptr_t)d, 0x6b, N));
    CHECK(cudaMemcpy(host, (void *)(uintptr_t)d, N, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N; i++)
        EXPECT(host[i] == 0x6b, "byte %zu is 0x%02x", i, host[i]);
    EXPECT(release(d) == CUDA_SUCCESS, "cuMemFree_v2 through the entry point");

    CHECK(cudaGetDriverEntryPoint("cuDriverGetVersion", (void **)&version,
                                  cudaEnablePerThreadDefaultStream, NULL));
    EXPECT(version && version(&v) == CUDA_SUCCESS && v >= 13000, "cuDriverGetVersion: %d", v);

    fn = (void *)1;
    CHECK(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 13000, cudaEnableDefault, &st));
    EXPECT(st == cudaDriverEntryPointSymbolNotFound && fn == NULL, "status %d, pointer %p",
           (int)st, fn);

    CHECK_ERR(cudaGetDriverEntryPoint("cuMemAlloc", &fn, 0x8, &st), cudaErrorInvalidValue);
    CHECK_ERR(cudaGetDriverEntryPoint(NULL, &fn, cudaEnableDefault, &st), cudaErrorInvalidValue);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    return 0;
}
