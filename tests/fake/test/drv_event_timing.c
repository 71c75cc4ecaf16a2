/*
 * Events: timing comes from the real time at which each stream's worker
 * reached the record (a kernel that sleeps 50 ms between two records
 * measures 45..200 ms, also across two streams), a pending record is
 * NOT_READY, a never-recorded event is complete, and elapsed time refuses
 * unrecorded, unfinished and timing-disabled events as CUDA does.
 */
#include <time.h>

#include "drv_test.h"

static void sleep_kernel(void **args)
{
    int32_t ms = ARG(args, 0, int32_t);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

int main(void)
{
    CUevent start, stop, notime, never;
    CUstream s, t;
    float ms = -1;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&stop, CU_EVENT_BLOCKING_SYNC));
    CHECK(cuEventCreate(&notime, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&never, CU_EVENT_DEFAULT));

    /* Never recorded: complete, but without a time. */
    CHECK(cuEventQuery(never));
    CHECK(cuEventSynchronize(never));
    CHECK_RES(cuEventElapsedTime_v2(&ms, never, never), CUDA_ERROR_INVALID_HANDLE);

    /* One stream. */
    CHECK(cuEventRecord(start, s));
    CHECK(LAUNCH(s, sleep_kernel, 50));
    CHECK(cuEventRecord(stop, s));
    CHECK_RES(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
    CHECK_RES(cuEventElapsedTime_v2(&ms, start, stop), CUDA_ERROR_NOT_READY);
    CHECK(cuEventSynchronize(stop));
    CHECK(cuEventQuery(stop));
    CHECK(cuEventElapsedTime_v2(&ms, start, stop));
    EXPECT(ms >= 45 && ms <= 200, "elapsed %.3f ms, want 45..200", ms);
    /* The entry point programs built before CUDA 12.8 get. */
    CUresult (*elapsed_v1)(float *, CUevent, CUevent);
    CHECK(cuGetProcAddress_v2("cuEventElapsedTime", (void **)&elapsed_v1, 12000, 0, NULL));
    CHECK(elapsed_v1(&ms, start, stop));
    EXPECT(ms >= 45 && ms <= 200, "elapsed %.3f ms, want 45..200", ms);

    /* Two streams: the second waits for the first, then sleeps. */
    CHECK(cuEventRecord(start, s));
    CHECK(LAUNCH(s, sleep_kernel, 30));
    CHECK(cuEventRecord(notime, s));
    CHECK(cuStreamWaitEvent(t, notime, 0));
    CHECK(LAUNCH(t, sleep_kernel, 30));
    CHECK(cuEventRecordWithFlags(stop, t, CU_EVENT_RECORD_DEFAULT));
    CHECK(cuEventSynchronize(stop));
    CHECK(cuEventElapsedTime_v2(&ms, start, stop));
    EXPECT(ms >= 55 && ms <= 250, "elapsed %.3f ms across streams, want 55..250", ms);

    /* Timing disabled, or a bad argument. */
    CHECK_RES(cuEventElapsedTime_v2(&ms, start, notime), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuEventElapsedTime_v2(NULL, start, stop), CUDA_ERROR_INVALID_VALUE);

    /* Re-recording: the event now stands for the new record only. */
    CHECK(LAUNCH(s, sleep_kernel, 40));
    CHECK(cuEventRecord(stop, s));
    CHECK_RES(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventQuery(stop));

    /* Recorded on the legacy stream. */
    CHECK(cuEventRecord(start, NULL));
    CHECK(LAUNCH(NULL, sleep_kernel, 50));
    CHECK(cuEventRecord(stop, NULL));
    CHECK(cuEventSynchronize(stop));
    CHECK(cuEventElapsedTime_v2(&ms, start, stop));
    EXPECT(ms >= 45 && ms <= 200, "legacy-stream elapsed %.3f ms, want 45..200", ms);

    /* Destroying an event with a pending record is allowed; the record still completes. */
    CHECK(LAUNCH(s, sleep_kernel, 20));
    CHECK(cuEventRecord(never, s));
    CHECK(cuEventDestroy_v2(never));
    CHECK_RES(cuEventQuery(never), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuStreamSynchronize(s));

    CHECK(cuEventDestroy_v2(start));
    CHECK(cuEventDestroy_v2(stop));
    CHECK(cuEventDestroy_v2(notime));
    CHECK(cuStreamDestroy_v2(s));
    CHECK(cuStreamDestroy_v2(t));
    return 0;
}
