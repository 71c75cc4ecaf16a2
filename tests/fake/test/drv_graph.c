/*
 * Stream capture and graphs: captured work does not run, a graph replays
 * it in order each launch with the arguments of capture time, streams
 * joined through events are captured into the same graph, and the calls
 * CUDA forbids during a global-mode capture fail and invalidate it, also
 * from another thread, unless that thread's interaction mode is relaxed.
 */
#include <pthread.h>

#include "drv_test.h"

#define N 64

static int counter;

static void count(void *arg)
{
    (void)arg;
    counter++;
}

/* x[i] += k */
static void add(void **args)
{
    int32_t *x = ARG(args, 0, int32_t *);
    int32_t k = ARG(args, 1, int32_t);

    for (int i = 0; i < N; i++)
        x[i] += k;
}

static void read_back(CUstream s, int32_t *host, CUdeviceptr x)
{
    CHECK(cuMemcpyDtoHAsync_v2(host, x, N * sizeof(int32_t), s));
    CHECK(cuStreamSynchronize(s));
}

/* Another thread of the program queries an event of its own while the
 * main thread captures, in the interaction mode it sets. */
struct query {
    CUcontext ctx;
    CUevent ev;
    CUstreamCaptureMode mode;
    CUresult r;
};

static void *query_body(void *arg)
{
    struct query *q = arg;
    CUstreamCaptureMode m = q->mode;
    cuCtxSetCurrent(q->ctx);
    q->r = cuThreadExchangeStreamCaptureMode(&m);
    if (q->r == CUDA_SUCCESS)
        q->r = cuEventQuery(q->ev);
    return NULL;
}

static CUresult query_from(CUcontext ctx, CUevent ev, CUstreamCaptureMode mode)
{
    struct query q = {ctx, ev, mode, CUDA_SUCCESS};
    pthread_t t;
    if (pthread_create(&t, NULL, query_body, &q) != 0)
        return CUDA_ERROR_UNKNOWN;
    pthread_join(t, NULL);
    return q.r;
}

int main(void)
{
    CUstream s, s2, reader, blocking;
    CUstreamCaptureStatus st;
    CUgraph g;
    CUgraphExec exec;
    CUevent fork, join;
    CUdeviceptr x, y, tmp;
    int32_t host[N];
    drv_slot slots[2];
    void *args[3] = {&slots[0], &slots[1], NULL};
    int32_t k = 5;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&reader, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemAlloc_v2(&x, N * sizeof(int32_t)));
    CHECK(cuMemAlloc_v2(&y, N * sizeof(int32_t)));
    CHECK(cuMemsetD32_v2(x, 1, N));
    CHECK(cuCtxSynchronize()); /* a memset into device memory returns before it ran */

    /* Capture: memset, a kernel, a host function, a copy, and a forked branch. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamIsCapturing(s, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "status %d", st);
    CHECK(cuMemsetD32Async(y, 0, N, s));
    memcpy(&slots[0], &x, sizeof(x));
    memcpy(&slots[1], &k, sizeof(k));
    CHECK(cuLaunchKernel((CUfunction)(void *)add, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    k = 1000; /* too late: the capture holds its own copy */
    memcpy(&slots[1], &k, sizeof(k));
    CHECK(cuLaunchHostFunc(s, count, NULL));
    CHECK(cuEventRecord(fork, s));
    CHECK_RES(cuEventQuery(fork), CUDA_ERROR_CAPTURED_EVENT);
    CHECK(cuStreamWaitEvent(s2, fork, 0)); /* s2 joins the capture */
    CHECK(cuStreamIsCapturing(s2, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "s2 did not join: status %d", st);
    CHECK(LAUNCH(s2, add, PTR(x), 100));
    CHECK(cuEventRecord(join, s2));
    CHECK(cuStreamWaitEvent(s, join, 0));
    CHECK(cuMemcpyDtoDAsync_v2(y, x, N * sizeof(int32_t), s));

    /* Nothing ran. */
    read_back(reader, host, x);
    EXPECT(host[0] == 1 && counter == 0, "captured work ran: x[0] = %d, counter %d", host[0], counter);
    CHECK_RES(cuStreamEndCapture(s2, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    EXPECT(g == NULL, "an invalidated capture gave a graph");

    /* Again, properly ended this time. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemsetD32Async(y, 0, N, s));
    k = 5;
    memcpy(&slots[1], &k, sizeof(k));
    CHECK(cuLaunchKernel((CUfunction)(void *)add, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    k = 1000;
    memcpy(&slots[1], &k, sizeof(k));
    CHECK(cuLaunchHostFunc(s, count, NULL));
    CHECK(cuEventRecord(fork, s));
    CHECK(cuStreamWaitEvent(s2, fork, 0));
    CHECK(LAUNCH(s2, add, PTR(x), 100));
    CHECK(cuEventRecord(join, s2));
    CHECK(cuStreamWaitEvent(s, join, 0));
    CHECK(cuMemcpyDtoDAsync_v2(y, x, N * sizeof(int32_t), s));
    CHECK(cuStreamEndCapture(s, &g));
    EXPECT(g != NULL, "no graph");
    CHECK(cuStreamIsCapturing(s, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE, "s still capturing: %d", st);
    CHECK(cuStreamIsCapturing(s2, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE, "s2 still capturing: %d", st);
    read_back(reader, host, x);
    EXPECT(host[0] == 1 && counter == 0, "captured work ran: x[0] = %d, counter %d", host[0], counter);

    /* Each launch replays the work in order, with the captured arguments. */
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    CHECK(cuGraphDestroy(g)); /* the executable graph is independent */
    for (int launch = 1; launch <= 3; launch++) {
        CHECK(cuGraphLaunch(exec, s));
        read_back(s, host, y);
        EXPECT(counter == launch, "host function ran %d times after %d launches", counter, launch);
        for (int i = 0; i < N; i++)
            EXPECT(host[i] == 1 + 105 * launch, "launch %d: y[%d] = %d", launch, i, host[i]);
    }
    CHECK(cuGraphLaunch(exec, NULL));
    CHECK(cuCtxSynchronize());
    EXPECT(counter == 4, "launch on the legacy stream: counter %d", counter);
    CHECK(cuGraphExecDestroy(exec));
    CHECK_RES(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);

    /* Synchronising a capturing stream fails and invalidates the capture. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(cuStreamIsCapturing(s, &st));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "status %d", st);
    CHECK_RES(cuMemsetD32Async(y, 0, N, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuStreamSynchronize(s)); /* no longer capturing */

    /* Legacy-stream work while a blocking stream captures. */
    CHECK(cuStreamBeginCapture_v2(blocking, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_RES(cuMemsetD8_v2(x, 0, 4), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK_RES(cuStreamEndCapture(blocking, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* Allocation during a global capture; allowed in relaxed mode. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuMemAlloc_v2(&tmp, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemAlloc_v2(&tmp, 64));
    CHECK(cuMemsetD8Async(tmp, 0, 64, s));
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree_v2(tmp));

    /* Another thread's event query: it invalidates a global-mode capture
     * when that thread is in global mode too, not when it is relaxed. */
    CUcontext ctx;
    CUevent other;
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuEventCreate(&other, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(other, reader));
    CHECK(cuStreamSynchronize(reader));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(query_from(ctx, other, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(query_from(ctx, other, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(query_from(ctx, other, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuEventDestroy_v2(other));

    /* State errors. */
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuStreamEndCapture(s, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamEndCapture(s, &g));
    CHECK_RES(cuGraphInstantiateWithFlags(&exec, g, 1ull << 40), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphDestroy(g));

    CHECK(cuMemFree_v2(x));
    CHECK(cuMemFree_v2(y));
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuStreamDestroy_v2(s2));
    CHECK(cuStreamDestroy_v2(reader));
    CHECK(cuStreamDestroy_v2(blocking));
    return 0;
}
