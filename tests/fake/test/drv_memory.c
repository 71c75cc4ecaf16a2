/*
 * Device, managed and pinned memory: allocations are accounted against
 * FAKEGPU_MEM_GB and refused beyond it, cuMemGetAddressRange finds the
 * allocation around any inner pointer, pitches are padded to 512 bytes,
 * pinned and registered host memory work as copy endpoints, managed memory
 * is reachable from host and kernels, and freed memory is gone.
 */
#include "drv_test.h"

#define MiB ((size_t)1 << 20)

/* p[i] = p[i] * 2 */
static void twice(void **args)
{
    int32_t *p = ARG(args, 0, int32_t *);
    int32_t n = ARG(args, 1, int32_t);

    for (int32_t i = 0; i < n; i++)
        p[i] *= 2;
}

int main(void)
{
    CUdeviceptr d, big, pitched, managed, base;
    size_t free0, free1, total, size, pitch;
    static int32_t host[1024], reg[1024];
    int32_t *pinned;

    if (setenv("FAKEGPU_MEM_GB", "1", 1))
        return 77;
    DRV_SETUP();
    CHECK(cuMemGetInfo_v2(&free0, &total));
    EXPECT(total == (size_t)1 << 30 && free0 == total, "free %zu of %zu", free0, total);

    /* Accounting, and the address range of an inner pointer. */
    CHECK(cuMemAlloc_v2(&d, 4096));
    CHECK(cuMemGetInfo_v2(&free1, &total));
    EXPECT(free1 == free0 - 4096, "free %zu after 4096 bytes", free1);
    CHECK(cuMemGetAddressRange_v2(&base, &size, d + 4000));
    EXPECT(base == d && size == 4096, "range %#llx+%zu", base, size);
    CHECK(cuMemGetAddressRange_v2(NULL, NULL, d));

    /* Out of memory beyond FAKEGPU_MEM_GB; a large allocation within it is fine. */
    CHECK_RES(cuMemAlloc_v2(&big, (size_t)2 << 30), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAlloc_v2(&big, 768 * MiB));
    CHECK_RES(cuMemAlloc_v2(&pitched, 512 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemFree_v2(big));

    /* Pitch is padded to 512 bytes. */
    CHECK(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 3, 4));
    EXPECT(pitch == 1024, "pitch %zu for 1000 bytes", pitch);
    CHECK(cuMemGetAddressRange_v2(&base, &size, pitched));
    EXPECT(size == 3 * 1024, "pitched size %zu", size);
    CHECK(cuMemFree_v2(pitched));
    CHECK(cuMemAllocPitch_v2(&pitched, &pitch, 512, 1, 16));
    EXPECT(pitch == 512, "pitch %zu for 512 bytes", pitch);
    CHECK(cuMemFree_v2(pitched));
    CHECK_RES(cuMemAllocPitch_v2(&pitched, &pitch, 64, 1, 3), CUDA_ERROR_INVALID_VALUE);

    /* Pinned memory as a copy endpoint; it is not device memory. */
    CHECK(cuMemAllocHost_v2((void **)&pinned, sizeof(host)));
    for (int i = 0; i < 1024; i++)
        pinned[i] = i;
    CHECK(cuMemcpyHtoD_v2(d, pinned, sizeof(host)));
    CHECK(LAUNCH(NULL, twice, PTR(d), 1024));
    CHECK(cuMemcpyDtoH_v2(host, d, sizeof(host)));
    for (int i = 0; i < 1024; i++)
        EXPECT(host[i] == 2 * i, "d[%d] = %d", i, host[i]);
    CHECK_RES(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)pinned), CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemFreeHost(pinned));
    CHECK_RES(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemHostAlloc((void **)&pinned, 64, CU_MEMHOSTALLOC_PORTABLE));
    CHECK(cuMemFreeHost(pinned));

    /* Registered memory. */
    CHECK(cuMemHostRegister_v2(reg, sizeof(reg), CU_MEMHOSTREGISTER_PORTABLE));
    CHECK_RES(cuMemHostRegister_v2(reg + 10, 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK(cuMemcpyDtoH_v2(reg, d, sizeof(reg)));
    EXPECT(reg[1023] == 2046, "reg[1023] = %d", reg[1023]);
    CHECK_RES(cuMemHostUnregister(reg + 1), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    CHECK(cuMemHostUnregister(reg));

    /* Managed memory: host and kernels see the same bytes. */
    CHECK(cuMemAllocManaged(&managed, sizeof(host), CU_MEM_ATTACH_GLOBAL));
    for (int i = 0; i < 1024; i++)
        ((int32_t *)(uintptr_t)managed)[i] = i + 1;
    CHECK(LAUNCH(NULL, twice, PTR(managed), 1024));
    CHECK(cuCtxSynchronize());
    EXPECT(((int32_t *)(uintptr_t)managed)[1023] == 2048, "managed[1023] = %d", ((int32_t *)(uintptr_t)managed)[1023]);
    CHECK(cuMemGetAddressRange_v2(&base, &size, managed + 8));
    EXPECT(base == managed && size == sizeof(host), "managed range %#llx+%zu", base, size);
    CHECK(cuMemFree_v2(managed));
    CHECK_RES(cuMemAllocManaged(&managed, 64, 0), CUDA_ERROR_INVALID_VALUE);

    /* Freed memory is gone. */
    CHECK(cuMemFree_v2(d));
    CHECK_RES(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemcpyDtoH_v2(host, d, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemGetAddressRange_v2(&base, &size, d), CUDA_ERROR_NOT_FOUND);
    CHECK(cuMemGetInfo_v2(&free1, &total));
    EXPECT(free1 == free0, "free %zu after freeing everything, want %zu", free1, free0);
    return 0;
}
