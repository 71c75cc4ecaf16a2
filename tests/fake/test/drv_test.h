/*
 * The few checks and helpers the driver's tests (drv_*.c) share.  A failed
 * check prints where and why and exits 1, the harness's "fail"; a test that
 * cannot run exits 77.  Checks are plain statements, never assert(), so
 * they also run under NDEBUG.  Only macros here, no definitions.
 */
#ifndef DRV_TEST_H
#define DRV_TEST_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#define DRV_ERRNAME(r) __extension__({                                         \
    const char *n_ = NULL;                                                     \
    cuGetErrorName((r), &n_);                                                  \
    n_ ? n_ : "(unknown CUresult)";                                            \
})

/* Fails unless the call returns the result `want`. */
#define CHECK_RES(call, want)                                                  \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != (want)) {                                                    \
            fprintf(stderr, "%s:%d: %s: %s (%d), expected %s\n", __FILE__,     \
                    __LINE__, #call, DRV_ERRNAME(r_), (int)r_,                 \
                    DRV_ERRNAME(want));                                        \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Fails unless the call returns CUDA_SUCCESS. */
#define CHECK(call) CHECK_RES(call, CUDA_SUCCESS)

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

/*
 * For a test that looks at device pages from the host (whether they are
 * mapped): runs the program again with FAKEGPU_HOST_DEREF=allow, which the
 * driver reads when it is loaded (drv_host_deref tests what it forbids).
 */
#define DRV_HOST_DEREF_ALLOW(argv)                                             \
    do {                                                                       \
        const char *a_ = getenv("FAKEGPU_HOST_DEREF");                         \
        if (!a_ || strcmp(a_, "allow") != 0) {                                 \
            setenv("FAKEGPU_HOST_DEREF", "allow", 1);                          \
            execv("/proc/self/exe", (argv));                                   \
            perror("execv /proc/self/exe");                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Whether the calling thread cannot read the byte at p (a pointer or a
 * CUdeviceptr): the kernel, reading it for write(2), is refused (EFAULT)
 * as a load would fault; no signal, so a sanitizer cannot get in the way. */
#define DRV_HOST_READ_FAULTS(p) __extension__({                                \
    int fd_[2];                                                                \
    char c_;                                                                   \
    EXPECT(pipe(fd_) == 0, "pipe");                                            \
    ssize_t n_ = write(fd_[1], (const void *)(uintptr_t)(p), 1);               \
    int faults_ = n_ < 0 && errno == EFAULT;                                   \
    if (n_ == 1)                                                               \
        EXPECT(read(fd_[0], &c_, 1) == 1, "read");                             \
    close(fd_[0]);                                                             \
    close(fd_[1]);                                                             \
    faults_;                                                                   \
})

/* cuInit and the primary context made current: the usual start of a test. */
#define DRV_SETUP()                                                            \
    do {                                                                       \
        CUcontext ctx_;                                                        \
        CHECK(cuInit(0));                                                      \
        CHECK(cuDevicePrimaryCtxRetain(&ctx_, 0));                             \
        CHECK(cuCtxSetCurrent(ctx_));                                          \
    } while (0)

/* The double's kernel argument slot (examples/common/kernels.h). */
typedef struct {
    _Alignas(16) unsigned char bytes[16];
} drv_slot;

/* Kernel argument i of type T, as a kernel of the double reads it. */
#define ARG(args, i, T) (*(T *)(args)[i])
/* A pointer argument for LAUNCH. */
#define PTR(p) ((uint64_t)(uintptr_t)(p))

/*
 * Launches the double's kernel fn(args...) on stream s with cuLaunchKernel,
 * each argument (an integer or PTR(pointer)) copied into its own slot;
 * evaluates to the CUresult.  The slots die with the statement, which is
 * allowed: the driver copies them at launch.
 */
#define LAUNCH(s, fn, ...) __extension__({                                     \
    uint64_t v_[] = {__VA_ARGS__};                                             \
    enum { n_ = sizeof(v_) / sizeof(v_[0]) };                                  \
    drv_slot sl_[n_];                                                          \
    void *a_[n_ + 1];                                                          \
    for (int i_ = 0; i_ < n_; i_++) {                                          \
        memset(&sl_[i_], 0, sizeof(sl_[i_]));                                  \
        memcpy(&sl_[i_], &v_[i_], sizeof(v_[i_]));                             \
        a_[i_] = &sl_[i_];                                                     \
    }                                                                          \
    a_[n_] = NULL;                                                             \
    cuLaunchKernel((CUfunction)(void *)(fn), 1, 1, 1, 1, 1, 1, 0, (s), a_,     \
                   NULL);                                                      \
})

#endif /* DRV_TEST_H */
