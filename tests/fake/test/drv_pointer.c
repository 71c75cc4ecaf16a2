/*
 * cuPointerGetAttribute tells device memory from host memory as CUDA does:
 * device, stream-ordered and managed allocations say device (managed may
 * say either on a GPU), pinned and registered host memory says host, and
 * host memory the driver never pinned, or a freed device address, is
 * CUDA_ERROR_INVALID_VALUE.  libckpt asks it before it touches a unified
 * copy's destination from the CPU.
 */
#include "drv_test.h"

static unsigned int type_of(CUdeviceptr p)
{
    unsigned int t = 0;
    CHECK(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    return t;
}

int main(void)
{
    CUdeviceptr d, m, pooled;
    CUstream s;
    void *pinned;
    static char pageable[4096], registered[8192] __attribute__((aligned(4096)));
    unsigned int t = 0, managed = 9;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&d, 4096));
    CHECK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    CHECK(cuMemAllocAsync(&pooled, 4096, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemHostAlloc(&pinned, 4096, 0));
    CHECK(cuMemHostRegister_v2(registered, sizeof(registered), 0));

    EXPECT(type_of(d) == CU_MEMORYTYPE_DEVICE && type_of(d + 100) == CU_MEMORYTYPE_DEVICE, "cuMemAlloc memory");
    EXPECT(type_of(pooled) == CU_MEMORYTYPE_DEVICE, "stream-ordered memory");
    EXPECT(type_of(m) == CU_MEMORYTYPE_DEVICE, "managed memory");
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
    EXPECT(managed == 1, "managed memory is not said to be managed");
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    EXPECT(managed == 0, "device memory is said to be managed");
    EXPECT(type_of((CUdeviceptr)(uintptr_t)pinned) == CU_MEMORYTYPE_HOST, "pinned host memory");
    EXPECT(type_of((CUdeviceptr)(uintptr_t)registered + 10) == CU_MEMORYTYPE_HOST, "registered host memory");
    CHECK_RES(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pageable),
              CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree_v2(d));
    CHECK_RES(cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuMemHostUnregister(registered));
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree_v2(m));
    CHECK(cuMemFreeAsync(pooled, s));
    CHECK(cuStreamDestroy_v2(s));
    return 0;
}
