/*
 * A program with both kinds of device state that `ckpt-inspect diff`
 * tells apart: a table written once before training and never again (as
 * an embedding table or a mask is) and weights rewritten every iteration.
 * Each iteration writes pattern(iteration, ordinal, word) into the weights
 * and synchronises with the host.  At the end it prints what each ordinal
 * was: "constant <ordinal>" and "changing <ordinal>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels.h"
#include "pattern.h"

KERNEL(fill, (uint32_t *, p), (size_t, words), (uint64_t, iteration), (uint64_t, ordinal))
{
    for (size_t i = KERNEL_INDEX; i < words; i += KERNEL_STRIDE)
        p[i] = pattern(iteration, ordinal, i);
}

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "frozen: %s failed\n", what);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    enum { TABLE, WEIGHTS, BIAS, N };
    static const size_t words[N] = {3000, 5000, 64};
    uint32_t *buf[N];
    cudaStream_t s;
    int iters = argc == 3 && strcmp(argv[1], "--iters") == 0 ? atoi(argv[2]) : 10;

    if (iters < 1) {
        fprintf(stderr, "usage: frozen [--iters N]\n");
        return 2;
    }
    check(cudaStreamCreate(&s) == cudaSuccess, "cudaStreamCreate");
    for (int b = 0; b < N; b++)
        check(cudaMalloc((void **)&buf[b], words[b] * 4) == cudaSuccess, "cudaMalloc");
    check(fill_launch(DIM3(64), DIM3(256), s, buf[TABLE], words[TABLE], 0, TABLE) == cudaSuccess, "fill");
    for (int it = 1; it <= iters; it++) {
        for (int b = WEIGHTS; b < N; b++)
            check(fill_launch(DIM3(64), DIM3(256), s, buf[b], words[b], (uint64_t)it, (uint64_t)b) == cudaSuccess,
                  "fill");
        check(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
    }
    printf("constant %d\nchanging %d\nchanging %d\n", TABLE, WEIGHTS, BIAS);
    return 0;
}
