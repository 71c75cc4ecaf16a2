/*
 * Wrappers of the driver calls that queue work or wait for it.  Queuing
 * calls only note the stream (so a snapshot knows what to order itself
 * after); waiting calls are the tokens boundaries are found in, reported
 * after the real call returned.  These are the hot hooks: no lock, no
 * allocation, nothing but a compare on the common path.  A call made while
 * libckpt is inactive, or from inside NCCL, is forwarded and nothing else.
 */
#include "interpose.h"

#define EXPORT __attribute__((visibility("default")))

/* Token identities of the synchronising calls. */
enum { TOK_STREAM_SYNC = 1, TOK_CTX_SYNC, TOK_EVENT_SYNC, TOK_MEMCPY, TOK_DTOH, TOK_HTOD };

static inline bool observed(void)
{
    return ckpt_active && !ckpt_nccl_depth;
}

#define SYNC_HOOK(name, token, params, args)                                   \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        CUresult r = real_##name args;                                         \
        if (r == CUDA_SUCCESS && observed())                                   \
            ckpt_on_sync(token);                                               \
        return r;                                                              \
    }

SYNC_HOOK(cuStreamSynchronize, TOK_STREAM_SYNC, (CUstream hStream), (hStream))
SYNC_HOOK(cuCtxSynchronize, TOK_CTX_SYNC, (void), ())
SYNC_HOOK(cuEventSynchronize, TOK_EVENT_SYNC, (CUevent hEvent), (hEvent))
SYNC_HOOK(cuMemcpy, TOK_MEMCPY, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount))
SYNC_HOOK(cuMemcpyDtoH_v2, TOK_DTOH, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
          (dstHost, srcDevice, ByteCount))
SYNC_HOOK(cuMemcpyHtoD_v2, TOK_HTOD, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
          (dstDevice, srcHost, ByteCount))

#define QUEUE_HOOK(name, stream, params, args)                                 \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        if (observed())                                                        \
            ckpt_stream_seen(stream);                                          \
        return real_##name args;                                               \
    }

QUEUE_HOOK(cuLaunchKernel, hStream,
           (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
            unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
            void **kernelParams, void **extra),
           (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,
            extra))
QUEUE_HOOK(cuLaunchKernelEx, config ? config->hStream : NULL,
           (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
           (config, f, kernelParams, extra))
QUEUE_HOOK(cuMemcpyAsync, hStream, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
           (dst, src, ByteCount, hStream))
QUEUE_HOOK(cuMemcpyHtoDAsync_v2, hStream,
           (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
           (dstDevice, srcHost, ByteCount, hStream))
QUEUE_HOOK(cuMemcpyDtoHAsync_v2, hStream, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           (dstHost, srcDevice, ByteCount, hStream))
QUEUE_HOOK(cuMemcpyDtoDAsync_v2, hStream,
           (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           (dstDevice, srcDevice, ByteCount, hStream))
QUEUE_HOOK(cuMemsetD8Async, hStream, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
           (dstDevice, uc, N, hStream))
QUEUE_HOOK(cuMemsetD32Async, hStream, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
           (dstDevice, ui, N, hStream))

int ckpt_capturing;

EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    NEED_REAL(cuStreamBeginCapture_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuStreamBeginCapture_v2(hStream, mode);
    if (r == CUDA_SUCCESS)
        __atomic_add_fetch(&ckpt_capturing, 1, __ATOMIC_RELAXED);
    return r;
}

/* A capture ends (successfully or invalidated) with this call either way. */
EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    NEED_REAL(cuStreamEndCapture, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuStreamEndCapture(hStream, phGraph);
    if ((r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) &&
        __atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) > 0)
        __atomic_sub_fetch(&ckpt_capturing, 1, __ATOMIC_RELAXED);
    return r;
}
