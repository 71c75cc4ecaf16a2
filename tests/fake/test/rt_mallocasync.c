/*
 * Stream-ordered allocation through the runtime: memory freed with
 * cudaFreeAsync goes back to the pool and is reused by the next
 * cudaMallocAsync of the same size on the same stream, work queued before
 * the free still sees the old contents, and allocations from the device's
 * default pool (cudaDeviceGetDefaultMemPool + cudaMallocFromPoolAsync)
 * behave the same.
 */
#include <unistd.h>

#include "rt_test.h"

#define N ((size_t)1 << 20)

static void expect_all(const unsigned char *p, unsigned char v, const char *what)
{
    for (size_t i = 0; i < N; i++)
        EXPECT(p[i] == v, "%s: byte %zu is 0x%02x, expected 0x%02x", what, i, p[i], v);
}

int main(void)
{
    cudaMemPool_t pool = NULL;
    cudaStream_t s;
    unsigned char *host;
    void *a = NULL, *b = NULL, *c = NULL;

    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMallocHost((void **)&host, N));

    CHECK(cudaMallocAsync(&a, N, s));
    EXPECT(a != NULL, "cudaMallocAsync gave NULL");
    CHECK(cudaMemsetAsync(a, 0x3c, N, s));
    CHECK(cudaMemcpyAsync(host, a, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(a, s));
    /*
     * Once the free has run on the stream the block waits in the pool for
     * the next allocation.  (A synchronisation would let the pool release
     * it, so wait by polling, which is not one.)
     */
    for (int i = 0; cudaStreamQuery(s) == cudaErrorNotReady; i++) {
        EXPECT(i < 20000, "the stream did not drain in 20 s");
        usleep(1000);
    }
    CHECK(cudaMallocAsync(&b, N, s));
    EXPECT(b == a, "freed block %p not reused: got %p", a, b);
    CHECK(cudaMemsetAsync(b, 0x4d, N, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(host, 0x3c, "copy before the free");
    CHECK(cudaMemcpy(host, b, N, cudaMemcpyDeviceToHost));
    expect_all(host, 0x4d, "reused block");
    CHECK(cudaFreeAsync(b, s));

    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    EXPECT(pool != NULL, "no default pool");
    CHECK(cudaMallocFromPoolAsync(&c, N, pool, s));
    CHECK(cudaMemsetAsync(c, 0x5e, N, s));
    CHECK(cudaMemcpyAsync(host, c, N, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(c, s));
    CHECK(cudaStreamSynchronize(s));
    expect_all(host, 0x5e, "block from the default pool");

    CHECK_ERR(cudaDeviceGetDefaultMemPool(&pool, 1 << 20), cudaErrorInvalidDevice);
    CHECK_ERR(cudaMallocAsync(NULL, N, s), cudaErrorInvalidValue);
    CHECK_ERR(cudaGetLastError(), cudaErrorInvalidValue);

    CHECK(cudaFreeHost(host));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
