/*
 * Virtual memory management: two mappings of one physical allocation alias
 * each other (bytes written through one are read through the other, by
 * copies as on a GPU), the memory outlives cuMemRelease while mapped, an
 * unmapped range stays reserved and can be mapped again, and the
 * granularity and argument rules are CUDA's.
 */
#include "drv_test.h"

#define MiB ((size_t)1 << 20)

int main(void)
{
    CUmemAllocationProp prop = {
        .type = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
    };
    CUmemAccessDesc rw = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemGenericAllocationHandle h, h2;
    CUdeviceptr va, base;
    size_t gran = 0, size, before, total;
    static unsigned char buf[2 * MiB];

    DRV_SETUP();
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran == 2 * MiB, "granularity %zu", gran);
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    EXPECT(gran == 2 * MiB, "recommended granularity %zu", gran);

    CHECK(cuMemGetInfo_v2(&before, &total));
    CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0));
    CHECK(cuMemGetInfo_v2(&size, &total));
    EXPECT(size == before - 2 * MiB, "cuMemCreate is not accounted");

    /* Two mappings of the same handle, side by side in one reservation. */
    CHECK(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
    EXPECT(va % (2 * MiB) == 0, "reservation %#llx is not aligned", va);
    CHECK(cuMemMap(va, 2 * MiB, 0, h, 0));
    CHECK(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0));
    CHECK(cuMemSetAccess(va, 4 * MiB, &rw, 1));

    CHECK(cuMemsetD8_v2(va, 0x5a, 2 * MiB));
    CHECK(cuMemsetD32_v2(va + 4096, 0x01020304, 16));
    CHECK(cuMemcpyDtoH_v2(buf, va + 2 * MiB, 2 * MiB));
    EXPECT(buf[0] == 0x5a && buf[2 * MiB - 1] == 0x5a, "the second mapping does not alias the first");
    EXPECT(buf[4096] == 0x04 && buf[4099] == 0x01, "the second mapping does not alias the first");

    CHECK(cuMemGetAddressRange_v2(&base, &size, va + 2 * MiB + 100));
    EXPECT(base == va + 2 * MiB && size == 2 * MiB, "range %#llx+%zu", base, size);

    /* Released while mapped: the memory lives on. */
    CHECK(cuMemRelease(h));
    CHECK_RES(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    buf[7] = 0x77;
    CHECK(cuMemcpyHtoD_v2(va, buf, 8));
    CHECK(cuMemcpyDtoH_v2(buf, va + 2 * MiB, 8));
    EXPECT(buf[7] == 0x77, "the memory did not outlive cuMemRelease");

    /* A whole range of mappings may be unmapped at once; a part of one may not. */
    CHECK_RES(cuMemUnmap(va, MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemUnmap(va, 4 * MiB));
    CHECK(cuMemGetInfo_v2(&size, &total));
    EXPECT(size == before, "unmapping a released handle did not free it");
    CHECK_RES(cuMemGetAddressRange_v2(&base, &size, va), CUDA_ERROR_NOT_FOUND);

    /* The range stays reserved: map a new handle into it. */
    CHECK(cuMemCreate(&h2, 4 * MiB, &prop, 0));
    CHECK(cuMemMap(va, 4 * MiB, 0, h2, 0));
    CHECK_RES(cuMemMap(va, 2 * MiB, 0, h2, 0), CUDA_ERROR_INVALID_VALUE); /* already mapped */
    CHECK(cuMemSetAccess(va, 4 * MiB, &rw, 1));
    CHECK(cuMemsetD8_v2(va + 4 * MiB - 1, 0x11, 1));
    CHECK_RES(cuMemAddressFree(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CHECK(cuMemUnmap(va, 4 * MiB));
    CHECK(cuMemRelease(h2));
    CHECK(cuMemAddressFree(va, 4 * MiB));
    CHECK_RES(cuMemAddressFree(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE);

    /* A fixed-address hint is honoured when the range is free. */
    CUdeviceptr again;
    CHECK(cuMemAddressReserve(&again, 2 * MiB, 0, va, 0));
    EXPECT(again == va, "the hint %#llx gave %#llx", va, again);
    CHECK(cuMemAddressFree(again, 2 * MiB));

    /* Argument rules. */
    CHECK_RES(cuMemCreate(&h, MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemCreate(NULL, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemCreate(&h, 2 * MiB, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAddressReserve(&va, MiB, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAddressReserve(&va, 2 * MiB, 3 * MiB, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemMap(va, 2 * MiB, 0, (CUmemGenericAllocationHandle)0x1234, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemSetAccess(va, 2 * MiB, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemGetAllocationGranularity(NULL, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    prop.location.id = 1;
    CHECK_RES(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
    return 0;
}
