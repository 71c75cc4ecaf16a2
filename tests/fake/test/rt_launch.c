/*
 * Kernels written with examples/common/kernels.h and launched through
 * cudaLaunchKernel run in stream order with their arguments as given at
 * launch: the caller's argument storage is reused at once, so a launch that
 * read the arguments late would compute with the wrong ones.  A NULL kernel
 * is refused.
 */
#include "kernels.h"
#include "rt_test.h"

#define N 100000

KERNEL(fill, (int, n), (float, v), (float *, y))
{
    for (size_t i = KERNEL_INDEX; i < (size_t)n; i += KERNEL_STRIDE)
        y[i] = v;
}

KERNEL(axpy, (int, n), (float, a), (const float *, x), (float *, y))
{
    for (size_t i = KERNEL_INDEX; i < (size_t)n; i += KERNEL_STRIDE)
        y[i] += a * x[i];
}

int main(void)
{
    static float host[N];
    cudaStream_t s;
    float *x, *y;

    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMalloc((void **)&x, N * sizeof(float)));
    CHECK(cudaMalloc((void **)&y, N * sizeof(float)));

    /* y = 1; then y += k * 2 for k = 1..10: 1 + 2 * 55 = 111 everywhere. */
    CHECK(fill_launch(DIM3(64), DIM3(256), s, N, 2.0f, x));
    CHECK(fill_launch(DIM3(64), DIM3(256), s, N, 1.0f, y));
    for (int k = 1; k <= 10; k++)
        CHECK(axpy_launch(DIM3(64), DIM3(256), s, N, (float)k, x, y));
    CHECK(cudaMemcpyAsync(host, y, sizeof(host), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == 111.0f, "y[%d] = %g, expected 111", i, host[i]);

    /* On the legacy default stream, ordered with synchronous copies. */
    CHECK(fill_launch(DIM3(1), DIM3(1), 0, N / 2, -3.0f, y));
    CHECK(cudaMemcpy(host, y, sizeof(host), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == (i < N / 2 ? -3.0f : 111.0f), "y[%d] = %g after a half fill", i, host[i]);

    CHECK_ERR(cudaLaunchKernel(NULL, DIM3(1), DIM3(1), NULL, 0, s), cudaErrorInvalidDeviceFunction);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidDeviceFunction);

    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
