/*
 * Host functions run in stream order: cuLaunchHostFunc and
 * cuStreamAddCallback run after everything enqueued before them has
 * completed (they see its bytes), and work enqueued after them starts only
 * once they have returned (it sees what they wrote).  A callback gets its
 * stream (the handle as given) and CUDA_SUCCESS.  cuStreamAddCallback
 * takes no flags and cannot be captured (CUDA refuses it and invalidates
 * the capture); a host function can, and runs at each graph launch.
 */
#include <time.h>

#include "drv_test.h"

#define N 1024

struct step {
    const int32_t *seen; /* pinned: what the work before wrote */
    int32_t *next;       /* pinned: what the work after reads */
    int32_t saw;
    CUstream stream;
    CUresult status;
    int calls;
};

static void pause_ms(long ms)
{
    struct timespec t = {0, ms * 1000000};

    nanosleep(&t, NULL);
}

static void host_fn(void *arg)
{
    struct step *st = arg;

    st->saw = st->seen[N - 1];
    pause_ms(50); /* later work must wait for this */
    for (int i = 0; i < N; i++)
        st->next[i] = st->saw + 1;
    st->calls++;
}

static void callback(CUstream s, CUresult status, void *arg)
{
    struct step *st = arg;

    st->stream = s;
    st->status = status;
    host_fn(arg);
}

/* Device work, a host step, more device work: returns what the last work read. */
static int32_t run(CUstream s, CUdeviceptr d, int32_t *a, int32_t *b, int32_t *c, struct step *st, int cb)
{
    CHECK(cuMemsetD32Async(d, 41, N, s));
    CHECK(cuMemcpyDtoHAsync_v2(a, d, N * sizeof(int32_t), s));
    if (cb)
        CHECK(cuStreamAddCallback(s, callback, st, 0));
    else
        CHECK(cuLaunchHostFunc(s, host_fn, st));
    CHECK(cuMemcpyHtoDAsync_v2(d, b, N * sizeof(int32_t), s));
    CHECK(cuMemcpyDtoHAsync_v2(c, d, N * sizeof(int32_t), s));
    CHECK(cuStreamSynchronize(s));
    return c[0];
}

int main(void)
{
    int32_t *a, *b, *c;
    struct step st;
    CUdeviceptr d;
    CUstream s;
    CUgraph g;
    CUgraphExec exec;
    CUstreamCaptureStatus cs;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&d, N * sizeof(int32_t)));
    CHECK(cuMemAllocHost_v2((void **)&a, N * sizeof(int32_t)));
    CHECK(cuMemAllocHost_v2((void **)&b, N * sizeof(int32_t)));
    CHECK(cuMemAllocHost_v2((void **)&c, N * sizeof(int32_t)));

    memset(&st, 0, sizeof(st));
    st.seen = a;
    st.next = b;
    EXPECT(run(s, d, a, b, c, &st, 0) == 42 && st.saw == 41 && st.calls == 1,
           "cuLaunchHostFunc out of order: it saw %d, the work after it read %d", st.saw, c[0]);

    memset(&st, 0, sizeof(st));
    st.seen = a;
    st.next = b;
    st.status = CUDA_ERROR_UNKNOWN;
    EXPECT(run(s, d, a, b, c, &st, 1) == 42 && st.saw == 41 && st.calls == 1,
           "cuStreamAddCallback out of order: it saw %d, the work after it read %d", st.saw, c[0]);
    EXPECT(st.stream == s && st.status == CUDA_SUCCESS, "the callback got stream %p, status %d", (void *)st.stream,
           st.status);

    /* On the legacy stream the callback gets NULL, as passed; _ptsz too. */
    memset(&st, 0, sizeof(st));
    st.seen = a;
    st.next = b;
    st.stream = s;
    CHECK(cuStreamAddCallback(NULL, callback, &st, 0));
    CHECK(cuStreamSynchronize(NULL));
    EXPECT(st.calls == 1 && st.stream == NULL, "legacy stream callback: %d calls, stream %p", st.calls,
           (void *)st.stream);
    st.stream = s;
    CHECK(cuStreamAddCallback_ptsz(NULL, callback, &st, 0));
    CHECK(cuStreamSynchronize_ptsz(NULL));
    EXPECT(st.calls == 2 && st.stream == NULL, "per-thread callback: %d calls", st.calls);

    /* Arguments. */
    CHECK_RES(cuStreamAddCallback(s, callback, &st, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuStreamAddCallback(s, NULL, &st, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuStreamAddCallback((CUstream)(uintptr_t)0x1234, callback, &st, 0), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuLaunchHostFunc(s, NULL, &st), CUDA_ERROR_INVALID_VALUE);

    /* Capture: a callback is refused and invalidates; a host function is a node. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuStreamAddCallback(s, callback, &st, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(cuStreamIsCapturing(s, &cs));
    EXPECT(cs == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "a callback did not invalidate the capture: %d", cs);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    memset(&st, 0, sizeof(st));
    st.seen = a;
    st.next = b;
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuLaunchHostFunc(s, host_fn, &st));
    CHECK(cuStreamEndCapture(s, &g));
    EXPECT(st.calls == 0, "a captured host function ran");
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(st.calls == 2, "the graph's host function ran %d times", st.calls);
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g));

    CHECK(cuMemFreeHost(a));
    CHECK(cuMemFreeHost(b));
    CHECK(cuMemFreeHost(c));
    CHECK(cuMemFree_v2(d));
    CHECK(cuStreamDestroy_v2(s));
    return 0;
}
