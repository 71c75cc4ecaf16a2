/*
 * Portable kernels: one CUDA C source builds with nvcc for a GPU and with a
 * plain C compiler against libckpt's CPU test double of the GPU stack.
 *
 *     KERNEL(axpy, (int, n), (float, a), (const float *, x), (float *, y))
 *     {
 *         for (size_t i = KERNEL_INDEX; i < (size_t)n; i += KERNEL_STRIDE)
 *             y[i] += a * x[i];
 *     }
 *     ...
 *     axpy_launch(DIM3(blocks), DIM3(256), stream, n, 2.0f, x, y);
 *
 * KERNEL(name, (type, param)...) defines the kernel and a typed launcher
 * name##_launch(grid, block, stream, args...) returning cudaError_t, and
 * name##_launch_shared(grid, block, shared, stream, args...) for a launch
 * with dynamic shared memory.
 * Kernels are written as grid-stride loops over KERNEL_INDEX/KERNEL_STRIDE
 * and must not depend on the grid shape for their result.
 *
 * The double's convention: a kernel is a host function `void k(void **args)`
 * that receives the kernelParams array of cuLaunchKernel.  cudaLaunchKernel
 * passes that function as `func`; the double runs it once per launch, in
 * stream order, on the stream's worker thread.  There KERNEL_INDEX is 0 and
 * KERNEL_STRIDE is 1, so the loop covers the whole range in one call.
 * Because the double cannot learn argument sizes from a host function, its
 * kernelParams is a NULL-terminated array of pointers to 16-byte slots
 * (fakegpu_arg_slot); the driver copies the slots at launch time, as CUDA
 * copies arguments, so the caller's storage may be reused at once.
 * At most 12 parameters of at most 16 bytes each.
 */
#ifndef CKPT_EXAMPLES_KERNELS_H
#define CKPT_EXAMPLES_KERNELS_H

#include <stddef.h>
#include <cuda_runtime.h>

#define KNARGS_(_1,_2,_3,_4,_5,_6,_7,_8,_9,_10,_11,_12, N, ...) N
#define KNARGS(...) KNARGS_(__VA_ARGS__, 12,11,10,9,8,7,6,5,4,3,2,1)
#define KMAP1(m, p0) m(0, p0)
#define KMAP2(m, p0,p1) m(0, p0), m(1, p1)
#define KMAP3(m, p0,p1,p2) m(0, p0), m(1, p1), m(2, p2)
#define KMAP4(m, p0,p1,p2,p3) m(0, p0), m(1, p1), m(2, p2), m(3, p3)
#define KMAP5(m, p0,p1,p2,p3,p4) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4)
#define KMAP6(m, p0,p1,p2,p3,p4,p5) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5)
#define KMAP7(m, p0,p1,p2,p3,p4,p5,p6) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5), m(6, p6)
#define KMAP8(m, p0,p1,p2,p3,p4,p5,p6,p7) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5), m(6, p6), m(7, p7)
#define KMAP9(m, p0,p1,p2,p3,p4,p5,p6,p7,p8) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5), m(6, p6), m(7, p7), m(8, p8)
#define KMAP10(m, p0,p1,p2,p3,p4,p5,p6,p7,p8,p9) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5), m(6, p6), m(7, p7), m(8, p8), m(9, p9)
#define KMAP11(m, p0,p1,p2,p3,p4,p5,p6,p7,p8,p9,p10) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5), m(6, p6), m(7, p7), m(8, p8), m(9, p9), m(10, p10)
#define KMAP12(m, p0,p1,p2,p3,p4,p5,p6,p7,p8,p9,p10,p11) m(0, p0), m(1, p1), m(2, p2), m(3, p3), m(4, p4), m(5, p5), m(6, p6), m(7, p7), m(8, p8), m(9, p9), m(10, p10), m(11, p11)

#define KCAT_(a, b) a##b
#define KCAT(a, b) KCAT_(a, b)
#define KMAP(m, ...) KCAT(KMAP, KNARGS(__VA_ARGS__))(m, __VA_ARGS__)

#define KP_TYPE(t, a) t
#define KP_NAME(t, a) a
#define KP_DECL(t, a) t a
#define KDECL(i, p) KP_DECL p
#define KNAME(i, p) KP_NAME p
#define KADDR(i, p) (void *)&KP_NAME p
#define KUNPACK(i, p) *(KP_TYPE p *)args_[i]

/* name##_launch: name##_launch_shared without dynamic shared memory. */
#define KLAUNCH_PLAIN(name, ...)                                               \
    static inline __attribute__((unused)) cudaError_t name##_launch(           \
        dim3 grid_, dim3 block_, cudaStream_t stream_, KMAP(KDECL, __VA_ARGS__)) \
    {                                                                          \
        return name##_launch_shared(grid_, block_, 0, stream_,                 \
                                    KMAP(KNAME, __VA_ARGS__));                 \
    }

#ifdef __CUDACC__

#define DIM3(x) dim3(x)
#define KERNEL_INDEX ((size_t)blockIdx.x * blockDim.x + threadIdx.x)
#define KERNEL_STRIDE ((size_t)gridDim.x * blockDim.x)
#define KERNEL(name, ...)                                                      \
    __global__ void name(KMAP(KDECL, __VA_ARGS__));                            \
    static inline cudaError_t name##_launch_shared(dim3 grid_, dim3 block_,    \
                                                   size_t shared_,             \
                                                   cudaStream_t stream_,       \
                                                   KMAP(KDECL, __VA_ARGS__))   \
    {                                                                          \
        name<<<grid_, block_, shared_, stream_>>>(KMAP(KNAME, __VA_ARGS__));   \
        return cudaGetLastError();                                             \
    }                                                                          \
    KLAUNCH_PLAIN(name, __VA_ARGS__)                                           \
    __global__ void name(KMAP(KDECL, __VA_ARGS__))

#else /* the CPU test double */

#include <string.h>

typedef struct {
    _Alignas(16) unsigned char bytes[16];
} fakegpu_arg_slot;

#define DIM3(x) ((dim3){(unsigned)(x), 1, 1})
#define KERNEL_INDEX ((size_t)0)
#define KERNEL_STRIDE ((size_t)1)
#define KSLOT(i, p)                                                            \
    (memcpy(&slots_[i], &KP_NAME p, sizeof(KP_TYPE p) + KFITS(KP_TYPE p)),      \
     (void *)&slots_[i])
/* 0, or a compile error when an argument does not fit its slot. */
#define KFITS(t) 0 * sizeof(char[sizeof(t) <= sizeof(fakegpu_arg_slot) ? 1 : -1])
#define KERNEL(name, ...)                                                      \
    static void name##_body(KMAP(KDECL, __VA_ARGS__));                         \
    static void name(void **args_) { name##_body(KMAP(KUNPACK, __VA_ARGS__)); } \
    static inline cudaError_t name##_launch_shared(dim3 grid_, dim3 block_,    \
                                                   size_t shared_,             \
                                                   cudaStream_t stream_,       \
                                                   KMAP(KDECL, __VA_ARGS__))   \
    {                                                                          \
        fakegpu_arg_slot slots_[KNARGS(__VA_ARGS__)] = {{{0}}};                 \
        void *args_[] = {KMAP(KSLOT, __VA_ARGS__), NULL};                      \
        return cudaLaunchKernel((const void *)name, grid_, block_, args_,      \
                                shared_, stream_);                             \
    }                                                                          \
    KLAUNCH_PLAIN(name, __VA_ARGS__)                                           \
    static void name##_body(KMAP(KDECL, __VA_ARGS__))

#endif

#endif /* CKPT_EXAMPLES_KERNELS_H */
