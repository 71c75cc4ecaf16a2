/*
 * Streams really run concurrently, so a missing dependency shows: without
 * cuStreamWaitEvent a consumer on stream B reads a buffer before a producer
 * on stream A has written it (constructed so that this always happens);
 * with the wait it always reads the produced value; and a wait depends on
 * the event's record as it stood when cuStreamWaitEvent was called, not on
 * a later re-record.
 */
#include <time.h>

#include "drv_test.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* Waits (at most 5 s) until *flag is set, then writes *buf = value. */
static void gated_writer(void **args)
{
    int32_t *buf = ARG(args, 0, int32_t *);
    volatile int *flag = ARG(args, 1, volatile int *);
    int32_t value = ARG(args, 2, int32_t);

    for (int i = 0; i < 5000 && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
        sleep_ms(1);
    *buf = value;
}

/* Sleeps ms, then writes *buf = value: a slow producer. */
static void slow_writer(void **args)
{
    int32_t *buf = ARG(args, 0, int32_t *);
    int32_t ms = ARG(args, 1, int32_t);
    int32_t value = ARG(args, 2, int32_t);

    sleep_ms(ms);
    *buf = value;
}

static void set_flag(void *flag)
{
    __atomic_store_n((int *)flag, 1, __ATOMIC_RELEASE);
}

int main(void)
{
    static volatile int flag;
    CUdeviceptr buf, out;
    CUstream a, b;
    CUevent ev;
    int32_t got;

    DRV_SETUP();
    CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemAlloc_v2(&buf, sizeof(int32_t)));
    CHECK(cuMemAlloc_v2(&out, sizeof(int32_t)));

    /* No dependency: B's copy runs while A's producer is still blocked. */
    CHECK(cuMemsetD32_v2(buf, 0, 1));
    CHECK(LAUNCH(a, gated_writer, PTR(buf), PTR(&flag), 7));
    CHECK_RES(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    CHECK(cuMemcpyDtoDAsync_v2(out, buf, sizeof(int32_t), b));
    CHECK(cuLaunchHostFunc(b, set_flag, (void *)&flag));
    CHECK(cuStreamSynchronize(a));
    CHECK(cuStreamSynchronize(b));
    CHECK(cuMemcpyDtoH_v2(&got, out, sizeof(got)));
    EXPECT(got == 0, "without a wait the consumer saw %d, want the stale 0", got);

    /* With the wait the consumer always sees the produced value. */
    for (int i = 1; i <= 8; i++) {
        CHECK(LAUNCH(a, slow_writer, PTR(buf), 20, 100 + i));
        CHECK(cuEventRecord(ev, a));
        CHECK_RES(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
        CHECK(cuStreamWaitEvent(b, ev, 0));
        CHECK(cuMemcpyDtoDAsync_v2(out, buf, sizeof(int32_t), b));
        CHECK(cuMemcpyDtoHAsync_v2(&got, out, sizeof(got), b));
        CHECK(cuStreamSynchronize(b));
        EXPECT(got == 100 + i, "round %d: the consumer saw %d", i, got);
        CHECK(cuEventQuery(ev));
    }

    /* The wait holds the record of its time: re-recording later changes nothing. */
    flag = 0;
    CHECK(LAUNCH(a, slow_writer, PTR(buf), 30, 1));
    CHECK(cuEventRecord(ev, a));
    CHECK(cuStreamWaitEvent(b, ev, 0));
    CHECK(LAUNCH(a, gated_writer, PTR(buf), PTR(&flag), 2));
    CHECK(cuEventRecord(ev, a)); /* now after the gated writer */
    CHECK(cuMemcpyDtoDAsync_v2(out, buf, sizeof(int32_t), b));
    CHECK(cuLaunchHostFunc(b, set_flag, (void *)&flag));
    CHECK(cuStreamSynchronize(b));
    CHECK(cuStreamSynchronize(a));
    CHECK(cuMemcpyDtoH_v2(&got, out, sizeof(got)));
    EXPECT(got == 1, "the consumer saw %d, want 1 (from the first record)", got);

    /* Waiting on a never-recorded event, or on one's own stream, is a no-op. */
    CUevent fresh;
    CHECK(cuEventCreate(&fresh, 0));
    CHECK(cuStreamWaitEvent(b, fresh, 0));
    CHECK(cuEventRecord(fresh, b));
    CHECK(cuStreamWaitEvent(b, fresh, 0));
    CHECK(cuStreamSynchronize(b));

    CHECK(cuEventDestroy_v2(fresh));
    CHECK(cuEventDestroy_v2(ev));
    CHECK(cuStreamDestroy_v2(a));
    CHECK(cuStreamDestroy_v2(b));
    CHECK(cuMemFree_v2(buf));
    CHECK(cuMemFree_v2(out));
    return 0;
}
