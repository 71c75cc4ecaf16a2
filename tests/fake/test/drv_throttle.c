/*
 * FAKEGPU_COPY_GBPS models one PCIe link per direction: with 1 GB/s a
 * 64 MiB device-to-host copy takes at least ~67 ms, two copies in the same
 * direction on different streams share the link, copies in opposite
 * directions do not, and device-to-device copies and memsets are not
 * throttled at all.
 */
#include <time.h>

#include "drv_test.h"

#define MiB ((size_t)1 << 20)

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void)
{
    CUdeviceptr a, b;
    CUstream s1, s2;
    void *host, *host2;
    double t, ms;

    if (setenv("FAKEGPU_COPY_GBPS", "1", 1))
        return 77;
    DRV_SETUP();
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&a, 64 * MiB));
    CHECK(cuMemAlloc_v2(&b, 64 * MiB));
    CHECK(cuMemAllocHost_v2(&host, 64 * MiB));
    CHECK(cuMemAllocHost_v2(&host2, 64 * MiB));
    /* Touch every page first, so that page faults do not pass for bandwidth. */
    memset(host, 1, 64 * MiB);
    memset(host2, 2, 64 * MiB);
    CHECK(cuMemsetD8_v2(a, 3, 64 * MiB));
    CHECK(cuMemsetD8_v2(b, 4, 64 * MiB));

    t = now_ms();
    CHECK(cuMemcpyDtoH_v2(host, a, 64 * MiB));
    ms = now_ms() - t;
    EXPECT(ms >= 60, "64 MiB at 1 GB/s took %.1f ms", ms);
    EXPECT(((unsigned char *)host)[64 * MiB - 1] == 3, "the copy did not happen");

    /* Same direction, two streams: the link is shared. */
    t = now_ms();
    CHECK(cuMemcpyDtoHAsync_v2(host, a, 32 * MiB, s1));
    CHECK(cuMemcpyDtoHAsync_v2(host2, b, 32 * MiB, s2));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuStreamSynchronize(s2));
    ms = now_ms() - t;
    EXPECT(ms >= 60, "2 x 32 MiB on one direction took %.1f ms", ms);

    /* Opposite directions overlap. */
    t = now_ms();
    CHECK(cuMemcpyHtoDAsync_v2(a, host, 64 * MiB, s1));
    CHECK(cuMemcpyDtoHAsync_v2(host2, b, 64 * MiB, s2));
    CHECK(cuStreamSynchronize(s1));
    CHECK(cuStreamSynchronize(s2));
    ms = now_ms() - t;
    EXPECT(ms >= 60 && ms < 125, "64 MiB each way took %.1f ms, want 60..125", ms);

    /* The unified copy classifies by address: host to device is throttled. */
    t = now_ms();
    CHECK(cuMemcpy(a, (CUdeviceptr)(uintptr_t)host, 64 * MiB));
    ms = now_ms() - t;
    EXPECT(ms >= 60, "a unified 64 MiB host-to-device copy took %.1f ms", ms);

    /* Within the device: not throttled, as fast as a plain memcpy of the
     * same bytes here (the bound a throttle of this rate would break by
     * far).  The best of three runs, so that a busy machine or a sanitizer
     * build cannot make an unthrottled copy look throttled. */
    double best_copy = 1e9, best_set = 1e9, best_plain = 1e9;
    for (int i = 0; i < 3; i++) {
        t = now_ms();
        memcpy(host2, host, 64 * MiB);
        ms = now_ms() - t;
        best_plain = ms < best_plain ? ms : best_plain;
        t = now_ms();
        CHECK(cuMemcpyDtoD_v2(b, a, 64 * MiB));
        ms = now_ms() - t;
        best_copy = ms < best_copy ? ms : best_copy;
        t = now_ms();
        CHECK(cuMemsetD8_v2(a, 0, 64 * MiB));
        ms = now_ms() - t;
        best_set = ms < best_set ? ms : best_set;
    }
    EXPECT(best_copy < 4 * best_plain + 10, "a 64 MiB device-to-device copy took %.1f ms, a plain memcpy %.1f ms",
           best_copy, best_plain);
    EXPECT(best_set < 4 * best_plain + 10, "a 64 MiB memset took %.1f ms, a plain memcpy %.1f ms", best_set,
           best_plain);

    CHECK(cuMemFreeHost(host));
    CHECK(cuMemFreeHost(host2));
    CHECK(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(b));
    CHECK(cuStreamDestroy_v2(s1));
    CHECK(cuStreamDestroy_v2(s2));
    return 0;
}
