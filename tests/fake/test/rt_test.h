/*
 * The few checks the runtime's tests (rt_*.c) share.  A failed check
 * prints where and why and exits 1, the harness's "fail"; a test that
 * cannot run exits 77.  Checks are plain statements, never assert(), so
 * they also run under NDEBUG.  No definitions other than these macros.
 */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

/* Fails unless the call returns cudaSuccess. */
#define CHECK(call)                                                            \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, \
                    cudaGetErrorName(e_), cudaGetErrorString(e_));             \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fails unless the call returns the error `want`. */
#define CHECK_ERR(call, want)                                                  \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != (want)) {                                                    \
            fprintf(stderr, "%s:%d: %s: %s, expected %s\n", __FILE__, __LINE__, \
                    #call, cudaGetErrorName(e_), cudaGetErrorName(want));      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fails with a printf-style message unless cond holds. */
#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

#endif /* RT_TEST_H */
