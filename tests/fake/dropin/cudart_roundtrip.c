/*
 * A drop-in proof for the double's runtime: built against NVIDIA's headers
 * and linked against the real libcudart.so.13 (tests/scenarios/
 * double_dropin.bats does that), then run with the double first on the
 * library path.  It pushes a pattern through device memory with cudaMemset
 * and cudaMemcpy and prints what the scenario asserts.  It must stay plain
 * CUDA runtime C: nothing here may know about the double.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define N 4096

static int check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return 0;
    printf("%s: %s\n", what, cudaGetErrorName(err));
    return 1;
}

int main(void)
{
    static unsigned char in[N], out[N];
    unsigned char *dev = NULL;
    Dl_info info;
    int version = 0;

    if (check(cudaRuntimeGetVersion(&version), "cudaRuntimeGetVersion"))
        return 1;
    printf("runtime %d\n", version);
    if (dladdr((void *)cudaMemcpy, &info) && info.dli_fname)
        printf("cudaMemcpy from %s\n", info.dli_fname);

    for (int i = 0; i < N; i++)
        in[i] = (unsigned char)(i * 7 + 3);
    if (check(cudaMalloc((void **)&dev, N), "cudaMalloc") ||
        check(cudaMemset(dev, 0xa5, N), "cudaMemset") ||
        check(cudaMemcpy(out, dev, N, cudaMemcpyDeviceToHost), "cudaMemcpy D2H"))
        return 1;
    for (int i = 0; i < N; i++) {
        if (out[i] != 0xa5) {
            printf("memset: byte %d is 0x%02x\n", i, out[i]);
            return 1;
        }
    }
    if (check(cudaMemcpy(dev + 1, in, N - 1, cudaMemcpyHostToDevice), "cudaMemcpy H2D") ||
        check(cudaMemcpy(out, dev, N, cudaMemcpyDeviceToHost), "cudaMemcpy D2H") ||
        check(cudaFree(dev), "cudaFree"))
        return 1;
    if (out[0] != 0xa5 || memcmp(out + 1, in, N - 1) != 0) {
        printf("round trip: data differs\n");
        return 1;
    }
    printf("round trip ok\n");
    return 0;
}
