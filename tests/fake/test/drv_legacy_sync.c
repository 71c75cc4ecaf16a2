/*
 * The legacy default stream synchronises with blocking streams as CUDA's
 * does: its work starts after all earlier work of every blocking stream,
 * and later work of a blocking stream (the per-thread stream included)
 * starts after earlier legacy work.  Non-blocking streams do neither, and
 * two blocking streams do not wait for each other.  Each "does not wait"
 * case is built so that waiting would show (the producer is gated on the
 * consumer having run).
 */
#include <time.h>

#include "drv_test.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

static void gated_writer(void **args)
{
    int32_t *buf = ARG(args, 0, int32_t *);
    volatile int *flag = ARG(args, 1, volatile int *);
    int32_t value = ARG(args, 2, int32_t);

    for (int i = 0; i < 5000 && !__atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
        sleep_ms(1);
    *buf = value;
}

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

static CUdeviceptr buf, out;
static volatile int flag;

static int32_t read_out(void)
{
    int32_t v;

    CHECK(cuMemcpyDtoH_v2(&v, out, sizeof(v)));
    return v;
}

/* A producer gated on a consumer on another stream: the consumer must see the old value. */
static void expect_no_wait(CUstream producer, CUstream consumer, const char *what)
{
    CHECK(cuMemsetD32_v2(buf, 0, 1));
    CHECK(cuCtxSynchronize());
    flag = 0;
    CHECK(LAUNCH(producer, gated_writer, PTR(buf), PTR(&flag), 99));
    CHECK(cuMemcpyDtoDAsync_v2(out, buf, sizeof(int32_t), consumer));
    CHECK(cuLaunchHostFunc(consumer, set_flag, (void *)&flag));
    CHECK(cuStreamSynchronize(consumer));
    CHECK(cuStreamSynchronize(producer));
    EXPECT(read_out() == 0, "%s: the consumer waited for the producer", what);
}

/* A slow producer: the consumer must see its value. */
static void expect_wait(CUstream producer, CUstream consumer, int32_t value, const char *what)
{
    CHECK(LAUNCH(producer, slow_writer, PTR(buf), 40, value));
    CHECK(cuMemcpyDtoDAsync_v2(out, buf, sizeof(int32_t), consumer));
    CHECK(cuStreamSynchronize(consumer));
    EXPECT(read_out() == value, "%s: the consumer did not wait for the producer", what);
}

int main(void)
{
    CUstream a, b, nb;
    int32_t got;

    DRV_SETUP();
    CHECK(cuStreamCreate(&a, CU_STREAM_DEFAULT));
    CHECK(cuStreamCreate(&b, CU_STREAM_DEFAULT));
    CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&buf, sizeof(int32_t)));
    CHECK(cuMemAlloc_v2(&out, sizeof(int32_t)));

    expect_wait(a, NULL, 1, "blocking -> legacy (NULL)");
    expect_wait(a, CU_STREAM_LEGACY, 2, "blocking -> legacy (CU_STREAM_LEGACY)");
    expect_wait(NULL, a, 3, "legacy -> blocking");
    expect_wait(NULL, CU_STREAM_PER_THREAD, 4, "legacy -> per-thread");
    expect_wait(CU_STREAM_PER_THREAD, NULL, 5, "per-thread -> legacy");

    /* A synchronous copy is legacy-stream work too. */
    CHECK(LAUNCH(a, slow_writer, PTR(buf), 40, 6));
    CHECK(cuMemcpyDtoH_v2(&got, buf, sizeof(got)));
    EXPECT(got == 6, "a synchronous copy did not wait for a blocking stream (%d)", got);

    expect_no_wait(nb, NULL, "non-blocking -> legacy");
    expect_no_wait(NULL, nb, "legacy -> non-blocking");
    expect_no_wait(a, b, "blocking -> blocking");
    expect_no_wait(b, CU_STREAM_PER_THREAD, "blocking -> per-thread");

    unsigned flags = 99;
    CHECK(cuStreamGetFlags(nb, &flags));
    EXPECT(flags == CU_STREAM_NON_BLOCKING, "flags %u", flags);
    CHECK(cuStreamGetFlags(a, &flags));
    EXPECT(flags == CU_STREAM_DEFAULT, "flags %u", flags);
    CHECK(cuStreamGetFlags(NULL, &flags));
    EXPECT(flags == CU_STREAM_DEFAULT, "flags %u", flags);

    CHECK(cuStreamDestroy_v2(a));
    CHECK(cuStreamDestroy_v2(b));
    CHECK(cuStreamDestroy_v2(nb));
    CHECK(cuMemFree_v2(buf));
    CHECK(cuMemFree_v2(out));
    return 0;
}
