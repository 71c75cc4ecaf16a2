/*
 * Events belong to the context they were created in: cuEventRecord on a
 * stream of another context (a created stream, or the legacy stream of
 * another current context) fails with CUDA_ERROR_INVALID_HANDLE, as cuda.h
 * says, and records nothing; a stream may wait on an event of another
 * context, and that wait orders its work.
 */
#include <time.h>

#include "drv_test.h"

static void slow_fill(void **args)
{
    int32_t *p = ARG(args, 0, int32_t *);
    struct timespec t = {0, 50 * 1000000};

    nanosleep(&t, NULL);
    for (int i = 0; i < 256; i++)
        p[i] = i + 1;
}

static void copy_words(void **args)
{
    int32_t *dst = ARG(args, 0, int32_t *), *src = ARG(args, 1, int32_t *);

    for (int i = 0; i < 256; i++)
        dst[i] = src[i];
}

int main(void)
{
    CUcontext primary, other;
    CUstream s1, s2;
    CUevent e1, e2;
    CUdeviceptr a, b;
    int32_t host[256];

    DRV_SETUP();
    CHECK(cuCtxGetCurrent(&primary));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e1, 0));
    CHECK(cuMemAlloc_v2(&a, sizeof(host)));
    CHECK(cuMemAlloc_v2(&b, sizeof(host)));

    CHECK(cuCtxCreate_v4(&other, NULL, 0, 0)); /* now current */
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e2, 0));

    /* From the other context: e1 may not be recorded on its streams. */
    CHECK_RES(cuEventRecord(e1, s2), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuEventRecord(e1, NULL), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuEventRecord(e1, CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuEventRecordWithFlags(e1, s2, 0), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuEventRecord(e2, s2));
    /* ... but on a stream of its own context, whatever is current. */
    CHECK(cuEventRecord(e1, s1));
    CHECK_RES(cuEventRecord(e2, s1), CUDA_ERROR_INVALID_HANDLE);

    /* A wait may cross contexts, and orders the work. */
    CHECK(cuCtxSetCurrent(primary));
    CHECK_RES(cuEventRecord(e2, NULL), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuEventRecord(e1, NULL));
    CHECK(LAUNCH(s1, slow_fill, PTR(a)));
    CHECK(cuEventRecord(e1, s1));
    CHECK(cuStreamWaitEvent(s2, e1, 0));
    CHECK(LAUNCH(s2, copy_words, PTR(b), PTR(a)));
    CHECK(cuStreamSynchronize(s2));
    CHECK(cuMemcpyDtoH_v2(host, b, sizeof(host)));
    for (int i = 0; i < 256; i++)
        EXPECT(host[i] == i + 1, "b[%d] = %d: the cross-context wait did not order the work", i, host[i]);

    CHECK(cuEventDestroy_v2(e1));
    CHECK(cuEventDestroy_v2(e2));
    CHECK(cuStreamDestroy_v2(s1));
    CHECK(cuStreamDestroy_v2(s2));
    CHECK(cuCtxDestroy_v2(other));
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    return 0;
}
