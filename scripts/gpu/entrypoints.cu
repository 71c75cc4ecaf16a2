/*
 * entrypoints: one kind of CUDA runtime call, made REPS times, so that
 * libckpt's CKPT_LOG=debug exit statistics of a run, less those of the
 * "none" run, say which driver entry points that call reached (the runtime
 * resolves them through cuGetProcAddress and documents no choice).  The
 * premise part of scripts/gpu-check runs every case under
 * LD_PRELOAD=libckpt.so (scripts/gpu/premise_entrypoints.py).
 *
 *     entrypoints CASE      one case; "entrypoints list" names them all
 *
 * Every case first does the same set-up (two device buffers, pinned and
 * pageable host buffers, a stream, two events, one kernel, a device
 * synchronisation) and the same tear-down, so only the case's calls differ
 * from "none"; a case synchronises once after its REPS calls, so a count
 * that grew by exactly REPS is the call under test.  It prints "case NAME
 * reps N ok" when the bytes it copied are right, and exits 1 otherwise.
 * One source for nvcc and for the CPU test double (examples/common/kernels.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include "kernels.h"

#define REPS 7
#define N (1u << 20)

KERNEL(fill, (unsigned char *, p), (size_t, n), (unsigned, v))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        p[i] = (unsigned char)v;
}

static const char *cases[] = {
    "none",
    "memcpy-h2d-pageable", "memcpy-d2h-pageable", "memcpy-h2d-pinned", "memcpy-d2h-pinned",
    "memcpy-d2d", "memcpy-default-d2h",
    "memcpyasync-h2d-pinned", "memcpyasync-d2h-pinned", "memcpyasync-d2h-pageable", "memcpyasync-d2d",
    "memcpyasync-d2h-pinned-null-stream",
    "elapsed",
};

static void check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return;
    fprintf(stderr, "entrypoints: %s: %s\n", what, cudaGetErrorString(err));
    exit(1);
}
#define CHECK(call) check((call), #call)

int main(int argc, char **argv)
{
    size_t ncases = sizeof(cases) / sizeof(cases[0]), c;
    if (argc == 2 && strcmp(argv[1], "list") == 0) {
        for (c = 0; c < ncases; c++)
            printf("%s\n", cases[c]);
        return 0;
    }
    for (c = 0; argc == 2 && c < ncases; c++)
        if (strcmp(argv[1], cases[c]) == 0)
            break;
    if (argc != 2 || c == ncases) {
        fprintf(stderr, "usage: entrypoints CASE (entrypoints list names them)\n");
        return 2;
    }
    const char *name = cases[c];

    unsigned char *d, *d2, *pinned, *pageable = (unsigned char *)malloc(N);
    cudaStream_t s;
    cudaEvent_t e0, e1;
    if (!pageable)
        return 1;
    memset(pageable, 3, N);
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc((void **)&d, N));
    CHECK(cudaMalloc((void **)&d2, N));
    CHECK(cudaMallocHost((void **)&pinned, N));
    memset(pinned, 0, N);
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(fill_launch(DIM3(64), DIM3(256), s, d, (size_t)N, 5u));
    CHECK(cudaDeviceSynchronize());

    /* What a d2h case must find in the host buffer: the device's 5. */
    unsigned char *want_host = NULL;
    float ms = -1;
    for (int r = 0; r < REPS; r++) {
        if (!strcmp(name, "memcpy-h2d-pageable"))
            CHECK(cudaMemcpy(d2, pageable, N, cudaMemcpyHostToDevice));
        else if (!strcmp(name, "memcpy-d2h-pageable"))
            CHECK(cudaMemcpy(pageable, d, N, cudaMemcpyDeviceToHost)), want_host = pageable;
        else if (!strcmp(name, "memcpy-h2d-pinned"))
            CHECK(cudaMemcpy(d2, pinned, N, cudaMemcpyHostToDevice));
        else if (!strcmp(name, "memcpy-d2h-pinned"))
            CHECK(cudaMemcpy(pinned, d, N, cudaMemcpyDeviceToHost)), want_host = pinned;
        else if (!strcmp(name, "memcpy-d2d"))
            CHECK(cudaMemcpy(d2, d, N, cudaMemcpyDeviceToDevice));
        else if (!strcmp(name, "memcpy-default-d2h"))
            CHECK(cudaMemcpy(pinned, d, N, cudaMemcpyDefault)), want_host = pinned;
        else if (!strcmp(name, "memcpyasync-h2d-pinned"))
            CHECK(cudaMemcpyAsync(d2, pinned, N, cudaMemcpyHostToDevice, s));
        else if (!strcmp(name, "memcpyasync-d2h-pinned"))
            CHECK(cudaMemcpyAsync(pinned, d, N, cudaMemcpyDeviceToHost, s)), want_host = pinned;
        else if (!strcmp(name, "memcpyasync-d2h-pageable"))
            CHECK(cudaMemcpyAsync(pageable, d, N, cudaMemcpyDeviceToHost, s)), want_host = pageable;
        else if (!strcmp(name, "memcpyasync-d2d"))
            CHECK(cudaMemcpyAsync(d2, d, N, cudaMemcpyDeviceToDevice, s));
        else if (!strcmp(name, "memcpyasync-d2h-pinned-null-stream"))
            CHECK(cudaMemcpyAsync(pinned, d, N, cudaMemcpyDeviceToHost, 0)), want_host = pinned;
        else if (!strcmp(name, "elapsed")) {
            if (r == 0) { /* timed once, read REPS times */
                CHECK(cudaEventRecord(e0, s));
                CHECK(fill_launch(DIM3(64), DIM3(256), s, d2, (size_t)N, 6u));
                CHECK(cudaEventRecord(e1, s));
                CHECK(cudaEventSynchronize(e1));
            }
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
        }
    }
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaDeviceSynchronize());
    if (want_host)
        for (size_t i = 0; i < N; i += 4093)
            if (want_host[i] != 5) {
                fprintf(stderr, "entrypoints: %s: byte %zu is %u, not 5\n", name, i, want_host[i]);
                return 1;
            }
    if (!strcmp(name, "elapsed") && ms < 0) {
        fprintf(stderr, "entrypoints: elapsed: %f ms\n", ms);
        return 1;
    }
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(d));
    free(pageable);
    printf("case %s reps %d ok\n", name, REPS);
    return 0;
}
