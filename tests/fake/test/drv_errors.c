/*
 * Error codes: before cuInit every call but the few that CUDA allows says
 * NOT_INITIALIZED; without a current context, context-bound calls say
 * INVALID_CONTEXT; NULL out-pointers, made-up and destroyed handles give
 * the codes CUDA gives instead of crashing; and every CUresult the project
 * declares has a name and a description.
 */
#include "drv_test.h"

struct result {
    const char *what;
    CUresult got, want;
};

#define CASE(call, want) {#call, (call), (want)}

static int check_all(const struct result *r, size_t n)
{
    int bad = 0;

    for (size_t i = 0; i < n; i++) {
        if (r[i].got != r[i].want) {
            fprintf(stderr, "%s: %s, want %s\n", r[i].what, DRV_ERRNAME(r[i].got), DRV_ERRNAME(r[i].want));
            bad = 1;
        }
    }
    return bad;
}

#define CHECK_ALL(table) EXPECT(!check_all(table, sizeof(table) / sizeof(table[0])), "see above")

static const CUresult all_results[] = {
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_INITIALIZED,
    CUDA_ERROR_DEINITIALIZED, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_CONTEXT,
    CUDA_ERROR_ALREADY_MAPPED, CUDA_ERROR_NOT_MAPPED, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_OPERATING_SYSTEM, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_READY, CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, CUDA_ERROR_LAUNCH_FAILED, CUDA_ERROR_NOT_PERMITTED,
    CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
    CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, CUDA_ERROR_STREAM_CAPTURE_UNJOINED, CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, CUDA_ERROR_CAPTURED_EVENT, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
    CUDA_ERROR_INVALID_RESOURCE_TYPE, CUDA_ERROR_UNKNOWN,
    CUDA_ERROR_LOSSY_QUERY, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, /* the double's cuda.h */
};

static void noop(void *arg)
{
    (void)arg;
}

int main(void)
{
    CUdeviceptr dptr = 0;
    CUcontext ctx = NULL;
    CUstream s = NULL;
    CUevent ev = NULL;
    CUdevice dev;
    size_t sz;
    int n;
    const char *str;

    struct result before_init[] = {
        CASE(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuMemAlloc_v2(&dptr, 16), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuEventCreate(&ev, 0), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuStreamSynchronize(NULL), CUDA_ERROR_NOT_INITIALIZED),
        CASE(cuDriverGetVersion(&n), CUDA_SUCCESS),
        CASE(cuGetErrorName(CUDA_ERROR_UNKNOWN, &str), CUDA_SUCCESS),
        CASE(cuInit(1), CUDA_ERROR_INVALID_VALUE),
    };
    CHECK_ALL(before_init);

    CHECK(cuInit(0));
    struct result no_context[] = {
        CASE(cuMemAlloc_v2(&dptr, 16), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuEventCreate(&ev, 0), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuMemsetD8_v2(0x1000, 0, 1), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuCtxGetCurrent(&ctx), CUDA_SUCCESS),
        CASE(cuDeviceGetCount(&n), CUDA_SUCCESS),
    };
    CHECK_ALL(no_context);
    EXPECT(ctx == NULL, "a context is current before any was made");

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuEventCreate(&ev, 0));
    CHECK(cuMemAlloc_v2(&dptr, 64));
    CUstream dead_stream;
    CUevent dead_event;
    CHECK(cuStreamCreate(&dead_stream, 0));
    CHECK(cuStreamDestroy_v2(dead_stream));
    CHECK(cuEventCreate(&dead_event, 0));
    CHECK(cuEventDestroy_v2(dead_event));
    CUstream bogus_stream = (CUstream)(uintptr_t)0xdead0;
    CUevent bogus_event = (CUevent)(uintptr_t)0xdead0;

    struct result after[] = {
        /* NULL out-pointers */
        CASE(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuDeviceGetName(NULL, 16, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuDeviceTotalMem_v2(NULL, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuCtxGetDevice(NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuCtxCreate_v4(NULL, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemAllocHost_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemGetInfo_v2(NULL, &sz), CUDA_ERROR_INVALID_VALUE),
        CASE(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuStreamGetFlags(s, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuEventElapsedTime_v2(NULL, ev, ev), CUDA_ERROR_INVALID_VALUE),
        CASE(cuGetErrorString(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuStreamIsCapturing(s, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuGraphInstantiateWithFlags(NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE),
        /* bad values */
        CASE(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE),
        CASE(cuDeviceGetName((char[8]){0}, 8, 3), CUDA_ERROR_INVALID_DEVICE),
        CASE(cuDeviceGetAttribute(&n, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemAlloc_v2(&dptr, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemFree_v2(0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemFree_v2(dptr + 8), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemFreeHost((void *)&n), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemHostUnregister((void *)&n), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
        CASE(cuStreamCreate(&dead_stream, 0x10), CUDA_ERROR_INVALID_VALUE),
        CASE(cuEventCreate(&dead_event, 0x80), CUDA_ERROR_INVALID_VALUE),
        CASE(cuEventCreate(&dead_event, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE),
        CASE(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuLaunchKernel((CUfunction)(void *)noop, 0, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuLaunchKernel((CUfunction)(void *)noop, 1, 1, 1, 2048, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuLaunchKernelEx(NULL, (CUfunction)(void *)noop, NULL, NULL), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemcpyHtoD_v2(dptr, &n, 65), CUDA_ERROR_INVALID_VALUE),     /* runs past the allocation */
        CASE(cuMemcpyDtoH_v2(&n, dptr + 62, 4), CUDA_ERROR_INVALID_VALUE), /* likewise */
        CASE(cuMemcpyDtoH_v2(&n, (CUdeviceptr)(uintptr_t)&sz, 4), CUDA_ERROR_INVALID_VALUE), /* not device memory */
        CASE(cuMemcpyHtoD_v2(dptr, NULL, 4), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemsetD32_v2(dptr + 2, 0, 1), CUDA_ERROR_INVALID_VALUE),    /* misaligned */
        CASE(cuMemsetD8_v2(dptr, 0, 65), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemGetAddressRange_v2(NULL, &sz, (CUdeviceptr)(uintptr_t)&n), CUDA_ERROR_NOT_FOUND),
        CASE(cuGetErrorName((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE),
        /* made-up and destroyed handles */
        CASE(cuStreamSynchronize(bogus_stream), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuStreamQuery(dead_stream), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuStreamDestroy_v2(dead_stream), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuStreamWaitEvent(s, bogus_event, 0), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuMemcpyAsync(dptr, dptr, 4, bogus_stream), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuEventRecord(dead_event, s), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuEventRecord(ev, dead_stream), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuEventQuery(bogus_event), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuEventSynchronize(dead_event), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuEventDestroy_v2(dead_event), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuEventElapsedTime_v2(&(float){0}, ev, bogus_event), CUDA_ERROR_INVALID_HANDLE),
        CASE(cuCtxSetCurrent((CUcontext)(uintptr_t)0xdead0), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuCtxDestroy_v2((CUcontext)(uintptr_t)0xdead0), CUDA_ERROR_INVALID_CONTEXT),
        CASE(cuMemPoolTrimTo((CUmemoryPool)(uintptr_t)0xdead0, 0), CUDA_ERROR_INVALID_VALUE),
        CASE(cuGraphLaunch((CUgraphExec)(uintptr_t)0xdead0, s), CUDA_ERROR_INVALID_VALUE),
        CASE(cuMemRelease(0xdead0), CUDA_ERROR_INVALID_VALUE),
    };
    CHECK_ALL(after);

    /* Every CUresult has a name and a description; names are the enumerators. */
    for (size_t i = 0; i < sizeof(all_results) / sizeof(all_results[0]); i++) {
        const char *name = NULL, *text = NULL;

        CHECK(cuGetErrorName(all_results[i], &name));
        CHECK(cuGetErrorString(all_results[i], &text));
        EXPECT(name && !strncmp(name, "CUDA_", 5) && text && *text, "result %d: name %s, text %s",
               (int)all_results[i], name ? name : "(null)", text ? text : "(null)");
    }
    CHECK(cuGetErrorName(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, &str));
    EXPECT(!strcmp(str, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"), "name %s", str);
    CHECK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &str));
    EXPECT(!strcmp(str, "invalid argument"), "text %s", str);
    str = "x";
    CHECK_RES(cuGetErrorString((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);
    EXPECT(str == NULL, "an unknown result has a text");

    CHECK(cuMemFree_v2(dptr));
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuEventDestroy_v2(ev));
    return 0;
}
