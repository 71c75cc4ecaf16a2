/*
 * Stream capture and graph replay through the runtime: work issued to a
 * capturing stream is recorded, not run; the instantiated graph then runs
 * it once per cudaGraphLaunch, in order, on whichever stream it is launched.
 * A kernel that increments a counter and a copy of the counter make every
 * replay count, so a capture that ran its work, or a launch that did not,
 * shows in the numbers.
 */
#include "kernels.h"
#include "rt_test.h"

#define N 1000

KERNEL(increment, (int, n), (int *, c))
{
    for (size_t i = KERNEL_INDEX; i < (size_t)n; i += KERNEL_STRIDE)
        c[i] += 1;
}

static void expect_all(const int *dev, int want, const char *what)
{
    static int host[N];

    CHECK(cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == want, "%s: [%d] = %d, expected %d", what, i, host[i], want);
}

static void capture_and_replay(enum cudaStreamCaptureMode mode)
{
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusInvalidated;
    cudaStream_t s, other;
    cudaGraphExec_t exec;
    cudaGraph_t graph;
    int *counter, *copy;

    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CHECK(cudaMalloc((void **)&counter, N * sizeof(int)));
    CHECK(cudaMalloc((void **)&copy, N * sizeof(int)));
    CHECK(cudaMemset(counter, 0, N * sizeof(int)));
    CHECK(cudaMemset(copy, 0, N * sizeof(int)));

    CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "status %d before capture", (int)status);
    CHECK(cudaStreamBeginCapture(s, mode));
    CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusActive, "status %d while capturing", (int)status);
    CHECK(cudaStreamIsCapturing(other, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "status %d of another stream", (int)status);
    unsigned long long id = 0;
    cudaGraph_t capturing = NULL;
    CHECK(cudaStreamGetCaptureInfo(s, &status, &id, &capturing, NULL, NULL, NULL));
    EXPECT(status == cudaStreamCaptureStatusActive && id != 0 && capturing != NULL,
           "capture info: status %d, id %llu, graph %p", (int)status, id, (void *)capturing);
    CHECK(increment_launch(DIM3(4), DIM3(128), s, N, counter));
    CHECK(cudaMemcpyAsync(copy, counter, N * sizeof(int), cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamEndCapture(s, &graph));
    EXPECT(graph != NULL, "no graph");
    CHECK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "status %d after capture", (int)status);
    CHECK(cudaStreamGetCaptureInfo(s, &status, NULL, NULL, NULL, NULL, NULL));
    EXPECT(status == cudaStreamCaptureStatusNone, "capture info: status %d after capture", (int)status);
    CHECK_ERR(cudaStreamGetCaptureInfo(s, NULL, NULL, NULL, NULL, NULL, NULL), cudaErrorInvalidValue);
    CHECK(cudaStreamSynchronize(s));
    expect_all(counter, 0, "after capture, before any launch");

    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; i++)
        CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(counter, 3, "counter after three replays");
    expect_all(copy, 3, "copy after three replays");
    CHECK(cudaGraphLaunch(exec, other));
    CHECK(cudaStreamSynchronize(other));
    expect_all(counter, 4, "counter after a replay on another stream");

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaFree(counter));
    CHECK(cudaFree(copy));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(other));
}

int main(void)
{
    enum cudaStreamCaptureStatus status;

    capture_and_replay(cudaStreamCaptureModeGlobal);
    capture_and_replay(cudaStreamCaptureModeThreadLocal);
    capture_and_replay(cudaStreamCaptureModeRelaxed);
    CHECK_ERR(cudaStreamIsCapturing(NULL, NULL), cudaErrorInvalidValue);
    CHECK(cudaStreamIsCapturing(NULL, &status));
    EXPECT(status == cudaStreamCaptureStatusNone, "legacy stream status %d", (int)status);
    return 0;
}
