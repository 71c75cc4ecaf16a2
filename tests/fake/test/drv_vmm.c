/*
 * Virtual memory management: two mappings of one physical allocation alias
 * each other (bytes written through one are read through the other, by
 * copies as on a GPU), the memory outlives cuMemRelease while mapped, an
 * unmapped range stays reserved and can be mapped again, and the
 * granularity and argument rules are CUDA's: cuMemUnmap takes the entire
 * range that was mapped (several whole adjacent mappings at once), a range
 * that cuts a mapping or has a hole fails and changes nothing; cuMemMap
 * needs offset 0, granularity-aligned size and address, and reserved,
 * unmapped addresses; an address hint is only a hint.
 */
#include <sys/mman.h>

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

    /* A whole range of mappings may be unmapped at once; a part of one may
     * not, and a refused unmap changes nothing. */
    CHECK_RES(cuMemUnmap(va, MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemUnmap(va + 2 * MiB, 2 * MiB + 4096), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemUnmap(va + MiB, 2 * MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemGetAddressRange_v2(&base, &size, va));
    EXPECT(base == va && size == 2 * MiB, "a refused unmap changed the mapping: %#llx+%zu", base, size);
    buf[7] = 0;
    CHECK(cuMemcpyDtoH_v2(buf, va, 8));
    EXPECT(buf[7] == 0x77, "a refused unmap changed the bytes");
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

    /* A fixed-address hint is honoured when the range is free, and only then. */
    CUdeviceptr again, other;
    CHECK(cuMemAddressReserve(&again, 2 * MiB, 0, va, 0));
    EXPECT(again == va, "the hint %#llx gave %#llx", va, again);
    CHECK(cuMemAddressReserve(&other, 2 * MiB, 0, va, 0));
    EXPECT(other != va, "a taken hint %#llx was given again", va);
    CHECK(cuMemAddressFree(other, 2 * MiB));
    CHECK(cuMemAddressFree(again, 2 * MiB));
    {
        /* An address outside the device's range is not the driver's to give. */
        void *host = mmap(NULL, 4 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CUdeviceptr hint = ((CUdeviceptr)(uintptr_t)host + 2 * MiB - 1) & ~(CUdeviceptr)(2 * MiB - 1);

        EXPECT(host != MAP_FAILED, "mmap");
        munmap(host, 4 * MiB);
        CHECK(cuMemAddressReserve(&other, 2 * MiB, 0, hint, 0));
        EXPECT(other != hint, "a hint outside the device range (%#llx) was honoured", hint);
        CHECK(cuMemAddressFree(other, 2 * MiB));
    }

    /* Several whole adjacent mappings of different handles unmap in one
     * call; a range with a hole, or one that cuts a mapping, does not. */
    CUmemGenericAllocationHandle h3, h4;
    CHECK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(cuMemCreate(&h3, 2 * MiB, &prop, 0));
    CHECK(cuMemCreate(&h4, 4 * MiB, &prop, 0));
    CHECK(cuMemMap(va, 2 * MiB, 0, h3, 0));
    CHECK(cuMemMap(va + 2 * MiB, 4 * MiB, 0, h4, 0));
    CHECK_RES(cuMemUnmap(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE);     /* cuts the second */
    CHECK_RES(cuMemUnmap(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);     /* a hole at the end */
    CHECK_RES(cuMemUnmap(va + 2 * MiB, 2 * MiB), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemGetAddressRange_v2(&base, &size, va + 3 * MiB));
    EXPECT(base == va + 2 * MiB && size == 4 * MiB, "a refused unmap changed the mapping: %#llx+%zu", base, size);
    CHECK(cuMemUnmap(va, 6 * MiB));
    CHECK_RES(cuMemGetAddressRange_v2(&base, &size, va), CUDA_ERROR_NOT_FOUND);
    CHECK_RES(cuMemGetAddressRange_v2(&base, &size, va + 2 * MiB), CUDA_ERROR_NOT_FOUND);
    /* ... and the range can be mapped again, in another layout. */
    CHECK(cuMemMap(va + 4 * MiB, 4 * MiB, 0, h4, 0));
    CHECK(cuMemMap(va, 2 * MiB, 0, h3, 0));
    CHECK(cuMemSetAccess(va + 4 * MiB, 4 * MiB, &rw, 1));
    CHECK(cuMemsetD8_v2(va + 8 * MiB - 1, 0x22, 1));
    CHECK_RES(cuMemUnmap(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);     /* a hole in the middle */
    CHECK(cuMemUnmap(va, 2 * MiB));
    CHECK(cuMemUnmap(va + 4 * MiB, 4 * MiB));
    CHECK(cuMemRelease(h3));
    CHECK(cuMemRelease(h4));
    CHECK(cuMemAddressFree(va, 8 * MiB));

    /* cuMemMap's own rules. */
    CHECK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(cuMemCreate(&h3, 4 * MiB, &prop, 0));
    CHECK_RES(cuMemMap(va, 2 * MiB, 2 * MiB, h3, 0), CUDA_ERROR_INVALID_VALUE); /* offset must be 0 */
    CHECK_RES(cuMemMap(va, MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);           /* not the granularity */
    CHECK_RES(cuMemMap(va + MiB, 2 * MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    CHECK_RES(cuMemMap(va, 8 * MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE);       /* larger than the handle */
    CHECK_RES(cuMemMap(va + 6 * MiB, 4 * MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE); /* past the reservation */
    CHECK_RES(cuMemMap(va, 2 * MiB, 0, h3, 1), CUDA_ERROR_INVALID_VALUE);       /* flags */
    {
        CUdeviceptr plain;

        CHECK(cuMemAlloc_v2(&plain, 2 * MiB));
        CHECK_RES(cuMemMap(plain, 2 * MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE); /* not reserved */
        CHECK(cuMemFree_v2(plain));
    }
    CHECK(cuMemMap(va, 2 * MiB, 0, h3, 0)); /* a part of the handle */
    CHECK_RES(cuMemMap(va, 2 * MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE); /* already mapped */
    CHECK(cuMemUnmap(va, 2 * MiB));
    CHECK(cuMemRelease(h3));
    CHECK(cuMemAddressFree(va, 8 * MiB));

    /* Reservations are multiples of the page size, mappings of the granularity. */
    CHECK(cuMemAddressReserve(&va, MiB, 0, 0, 0));
    CHECK(cuMemCreate(&h3, 2 * MiB, &prop, 0));
    CHECK_RES(cuMemMap(va, 2 * MiB, 0, h3, 0), CUDA_ERROR_INVALID_VALUE); /* past the reservation */
    CHECK(cuMemRelease(h3));
    CHECK_RES(cuMemAddressFree(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE);   /* not its size */
    CHECK(cuMemAddressFree(va, MiB));

    /* Argument rules. */
    CHECK_RES(cuMemCreate(&h, MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemCreate(NULL, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemCreate(&h, 2 * MiB, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAddressReserve(&va, 1000, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAddressReserve(&va, 2 * MiB, 3 * MiB, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAddressReserve(&va, 2 * MiB, 0, 100, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemMap(va, 2 * MiB, 0, (CUmemGenericAllocationHandle)0x1234, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemSetAccess(va, 2 * MiB, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemGetAllocationGranularity(NULL, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    prop.location.id = 1;
    CHECK_RES(cuMemCreate(&h, 2 * MiB, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
    return 0;
}
