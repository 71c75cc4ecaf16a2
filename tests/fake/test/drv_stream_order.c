/*
 * One stream runs its work strictly in order: a long chain of kernels,
 * device-to-device copies, memsets and host functions, each depending on
 * the one before, leaves exactly the result of running them one by one.
 * Kernel arguments are copied at launch, so the caller's storage may be
 * reused at once.
 */
#include "drv_test.h"

#define N 4096
#define STEPS 300

/* x[i] = x[i] * 3 + k (wrapping) */
static void scale_add(void **args)
{
    uint32_t *x = ARG(args, 0, uint32_t *);
    uint32_t k = ARG(args, 1, uint32_t);

    for (int i = 0; i < N; i++)
        x[i] = x[i] * 3 + k;
}

static int order[STEPS], norder;

static void note(void *arg)
{
    order[norder++] = (int)(intptr_t)arg;
}

int main(void)
{
    static uint32_t init[N], host[N], want[N];
    CUdeviceptr x, y;
    CUstream s;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&x, N * sizeof(uint32_t)));
    CHECK(cuMemAlloc_v2(&y, N * sizeof(uint32_t)));
    for (int i = 0; i < N; i++)
        want[i] = init[i] = i;
    CHECK(cuMemcpyHtoDAsync_v2(x, init, sizeof(init), s)); /* init stays untouched until the end */

    for (int k = 0; k < STEPS; k++) {
        switch (k % 4) {
        case 0: /* a kernel; its argument storage dies at once */
            CHECK(LAUNCH(s, scale_add, PTR(x), k));
            for (int i = 0; i < N; i++)
                want[i] = want[i] * 3 + (uint32_t)k;
            break;
        case 1: /* a round trip through y */
            CHECK(cuMemcpyDtoDAsync_v2(y, x, N * sizeof(uint32_t), s));
            CHECK(cuMemsetD32Async(x, 0xdeadbeef, N, s));
            CHECK(cuMemcpyAsync(x, y, N * sizeof(uint32_t), s));
            break;
        case 2: /* a host function sees the queue's order */
            CHECK(cuLaunchHostFunc(s, note, (void *)(intptr_t)k));
            break;
        case 3: /* a memset of the first element, then the kernel again */
            CHECK(cuMemsetD32Async(x, (unsigned)k, 1, s));
            want[0] = (uint32_t)k;
            CHECK(LAUNCH(s, scale_add, PTR(x), (uint32_t)-k));
            for (int i = 0; i < N; i++)
                want[i] = want[i] * 3 - (uint32_t)k;
            break;
        }
    }
    CHECK(cuMemcpyDtoHAsync_v2(host, x, sizeof(host), s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamQuery(s));

    for (int i = 0; i < N; i++)
        EXPECT(host[i] == want[i], "x[%d] = %u, want %u", i, host[i], want[i]);
    EXPECT(norder == STEPS / 4, "%d host functions ran, want %d", norder, STEPS / 4);
    for (int i = 0; i < norder; i++)
        EXPECT(order[i] == 4 * i + 2, "host function %d ran as number %d", order[i], i);

    CHECK(cuMemFree_v2(x));
    CHECK(cuMemFree_v2(y));
    CHECK(cuStreamDestroy_v2(s));
    return 0;
}
