/*
 * Asynchronous work through the runtime runs in stream order and is
 * ordered across streams only by events: a host function holds stream s1
 * back while a pattern is copied in, a non-blocking stream s2 waits on an
 * event recorded after that copy and copies the data out.  Had the wait
 * not held, s2 would read zeros.  Also: cudaStreamQuery/cudaEventQuery
 * report cudaErrorNotReady without making it the last error, event timings
 * cover the delay, the legacy default stream waits for blocking streams,
 * and cudaStreamLegacy/cudaStreamPerThread are usable handles.
 */
#include <string.h>
#include <unistd.h>

#include "rt_test.h"

#define N ((size_t)256 << 10)
#define DELAY_MS 100

static void delay(void *arg)
{
    (void)arg;
    usleep(DELAY_MS * 1000);
}

/* Host functions append their tag here, in the order the stream runs them. */
static int order[8], norder;
static void note(void *arg)
{
    order[norder++] = (int)(intptr_t)arg;
}

static void expect_bytes(const unsigned char *p, size_t n, unsigned char (*want)(size_t),
                         const char *what)
{
    for (size_t i = 0; i < n; i++)
        EXPECT(p[i] == want(i), "%s: byte %zu is 0x%02x, expected 0x%02x", what, i, p[i], want(i));
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 29 + 5); }
static unsigned char sevens(size_t i) { (void)i; return 0x77; }
static unsigned char fives(size_t i) { (void)i; return 0x55; }

static void events_order_streams(void)
{
    cudaStream_t s1, s2;
    cudaEvent_t start, stop, ready, done;
    unsigned char *hin, *hout, *da, *db;
    float ms = 0;

    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&done, cudaEventBlockingSync));
    CHECK(cudaMallocHost((void **)&hin, N));
    CHECK(cudaMallocHost((void **)&hout, N));
    CHECK(cudaMalloc((void **)&da, N));
    CHECK(cudaMalloc((void **)&db, N));
    CHECK(cudaMemset(da, 0, N));
    CHECK(cudaMemset(db, 0, N));
    memset(hout, 0, N);
    for (size_t i = 0; i < N; i++)
        hin[i] = pattern(i);

    CHECK(cudaEventRecord(start, s1));
    CHECK(cudaLaunchHostFunc(s1, delay, NULL));
    CHECK(cudaMemcpyAsync(da, hin, N, cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(ready, s1));
    CHECK(cudaEventRecord(stop, s1));

    /* s1 is asleep: not ready is an answer, not an error to remember. */
    CHECK_ERR(cudaStreamQuery(s1), cudaErrorNotReady);
    CHECK_ERR(cudaEventQuery(ready), cudaErrorNotReady);
    CHECK_ERR(cudaPeekAtLastError(), cudaSuccess);

    CHECK(cudaStreamWaitEvent(s2, ready, 0));
    CHECK(cudaMemcpyAsync(db, da, N, cudaMemcpyDeviceToDevice, s2));
    CHECK(cudaMemcpyAsync(hout, db, N, cudaMemcpyDeviceToHost, s2));
    CHECK(cudaEventRecord(done, s2));
    CHECK(cudaEventSynchronize(done));
    expect_bytes(hout, N, pattern, "data copied on s2 after waiting for s1");
    CHECK(cudaEventQuery(done));
    CHECK(cudaStreamQuery(s2));

    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= DELAY_MS * 0.9f && ms < 60000, "elapsed %.3f ms around a %d ms delay", ms, DELAY_MS);
    CHECK_ERR(cudaEventElapsedTime(&ms, start, ready), cudaErrorInvalidResourceHandle);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidResourceHandle);

    /* Host functions and copies interleave in the order they were issued. */
    norder = 0;
    CHECK(cudaLaunchHostFunc(s1, note, (void *)1));
    CHECK(cudaLaunchHostFunc(s1, delay, NULL));
    CHECK(cudaLaunchHostFunc(s1, note, (void *)2));
    CHECK(cudaMemsetAsync(da, 0x55, N, s1));
    CHECK(cudaLaunchHostFunc(s1, note, (void *)3));
    CHECK(cudaMemcpyAsync(hout, da, N, cudaMemcpyDeviceToHost, s1));
    CHECK(cudaStreamSynchronize(s1));
    EXPECT(norder == 3 && order[0] == 1 && order[1] == 2 && order[2] == 3,
           "host functions ran %d times, in order %d %d %d", norder, order[0], order[1], order[2]);
    expect_bytes(hout, N, fives, "memset then copy on one stream");

    /* A synchronous copy (legacy stream) waits for work on blocking streams. */
    CHECK(cudaLaunchHostFunc(s1, delay, NULL));
    CHECK(cudaMemsetAsync(da, 0x77, N, s1));
    CHECK(cudaMemcpy(hout, da, N, cudaMemcpyDeviceToHost));
    expect_bytes(hout, N, sevens, "legacy-stream copy after s1's memset");

    /* The special handles pass through to the driver's. */
    CHECK(cudaMemsetAsync(db, 0x55, N, cudaStreamPerThread));
    CHECK(cudaMemcpyAsync(hout, db, N, cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    expect_bytes(hout, N, fives, "cudaStreamPerThread");
    CHECK(cudaMemsetAsync(db, 0x77, N, cudaStreamLegacy));
    CHECK(cudaMemcpyAsync(hout, db, N, cudaMemcpyDeviceToHost, cudaStreamLegacy));
    CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    expect_bytes(hout, N, sevens, "cudaStreamLegacy");
    CHECK(cudaMemsetAsync(db, 0x55, N, 0));
    CHECK(cudaMemcpyAsync(hout, db, N, cudaMemcpyDeviceToHost, 0));
    CHECK(cudaStreamSynchronize(0));
    expect_bytes(hout, N, fives, "stream 0");

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFreeHost(hin));
    CHECK(cudaFreeHost(hout));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    CHECK(cudaEventDestroy(ready));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
}

int main(void)
{
    events_order_streams();
    return 0;
}
