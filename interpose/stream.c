/*
 * Wrappers of the driver calls that queue work or wait for it.  Queuing
 * calls note the stream (so a snapshot knows what to order itself after);
 * waiting calls are the tokens boundaries are found in, reported after the
 * real call returned.  While a restarted rank replays, device work is
 * suppressed here: launches, memsets and copies to the device return at
 * once, and what the host reads back comes from the replay log.  These are
 * the hot hooks: no lock and no allocation on the common path.  Calls made
 * from inside NCCL, or while libckpt is inactive, are only forwarded.
 */
#include <string.h>

#include "interpose.h"

#define EXPORT __attribute__((visibility("default")))

/* Token identities of the synchronising calls. */
enum { TOK_STREAM_SYNC = 1, TOK_CTX_SYNC, TOK_EVENT_SYNC, TOK_MEMCPY, TOK_DTOH, TOK_HTOD };

/* Values the host reads, in the replay log. */
enum { VALUE_ELAPSED = 1 };

static inline bool observed(void)
{
    return ckpt_active && !ckpt_nccl_depth && !ckpt_self_depth;
}

static inline bool suppressed(void)
{
    return __builtin_expect(ckpt_replaying, 0) && observed();
}

/* After a host sync of the program: settle copies, feed the token. */
static void synced(uint64_t token)
{
    ckpt_history_settle();
    ckpt_on_sync(token);
}

#define SYNC_HOOK(name, token, params, args)                                   \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        CUresult r = real_##name args;                                         \
        if (r == CUDA_SUCCESS && observed())                                   \
            synced(token);                                                     \
        return r;                                                              \
    }

SYNC_HOOK(cuStreamSynchronize, TOK_STREAM_SYNC, (CUstream hStream), (hStream))
SYNC_HOOK(cuCtxSynchronize, TOK_CTX_SYNC, (void), ())
SYNC_HOOK(cuCtxSynchronize_v2, TOK_CTX_SYNC, (CUcontext ctx), (ctx))
SYNC_HOOK(cuEventSynchronize, TOK_EVENT_SYNC, (CUevent hEvent), (hEvent))

EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    NEED_REAL(cuMemcpyDtoH_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (suppressed()) {
        ckpt_history_d2h(dstHost, ByteCount, false);
        synced(TOK_DTOH);
        return CUDA_SUCCESS;
    }
    CUresult r = real_cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
    if (r == CUDA_SUCCESS && observed()) {
        ckpt_history_d2h(dstHost, ByteCount, true);
        synced(TOK_DTOH);
    }
    return r;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    NEED_REAL(cuMemcpyHtoD_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (suppressed()) {
        synced(TOK_HTOD);
        return CUDA_SUCCESS;
    }
    CUresult r = real_cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
    if (r == CUDA_SUCCESS && observed())
        synced(TOK_HTOD);
    return r;
}

/* Unified addressing: the call does not say which side dst is on; a copy
 * into no device allocation is one the host reads. */
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    NEED_REAL(cuMemcpy, CUDA_ERROR_NOT_INITIALIZED);
    bool to_host = observed() && !ckpt_reg_contains(dst);
    if (suppressed()) {
        if (to_host)
            ckpt_history_d2h((void *)(uintptr_t)dst, ByteCount, false);
        synced(TOK_MEMCPY);
        return CUDA_SUCCESS;
    }
    CUresult r = real_cuMemcpy(dst, src, ByteCount);
    if (r == CUDA_SUCCESS && observed()) {
        if (to_host)
            ckpt_history_d2h((void *)(uintptr_t)dst, ByteCount, true);
        synced(TOK_MEMCPY);
    }
    return r;
}

EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    NEED_REAL(cuEventElapsedTime_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
    if (observed() && (r == CUDA_SUCCESS || ckpt_replaying) && pMilliseconds) {
        uint64_t bits = 0;
        memcpy(&bits, pMilliseconds, sizeof(float));
        ckpt_history_value(VALUE_ELAPSED, &bits);
        memcpy(pMilliseconds, &bits, sizeof(float));
        r = CUDA_SUCCESS;
    }
    return r;
}

/* Work that only changes the device: noted, or suppressed in replay.
 * Kernel launches, from whichever library, are also counted (hookstats.c). */
#define IS_LAUNCH(name) (__builtin_strncmp(name, "cuLaunchKernel", 14) == 0)
#define QUEUE_HOOK(name, stream, params, args)                                 \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        if (IS_LAUNCH(#name))                                                  \
            ckpt_hookstat(CKPT_HS_LAUNCH, __builtin_return_address(0), false); \
        if (observed()) {                                                      \
            if (ckpt_replaying)                                                \
                return CUDA_SUCCESS;                                           \
            ckpt_stream_seen(stream);                                          \
        }                                                                      \
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
QUEUE_HOOK(cuMemcpyHtoDAsync_v2, hStream,
           (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
           (dstDevice, srcHost, ByteCount, hStream))
QUEUE_HOOK(cuMemcpyDtoDAsync_v2, hStream,
           (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           (dstDevice, srcDevice, ByteCount, hStream))
QUEUE_HOOK(cuMemsetD8Async, hStream, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
           (dstDevice, uc, N, hStream))
QUEUE_HOOK(cuMemsetD32Async, hStream, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
           (dstDevice, ui, N, hStream))

/* Copies the host reads after its next sync: their bytes go in the log
 * then (ckpt_history_settle), or come from it in replay. */
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    NEED_REAL(cuMemcpyDtoHAsync_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (!observed())
        return real_cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
    if (ckpt_replaying) {
        ckpt_history_d2h_async(dstHost, ByteCount);
        return CUDA_SUCCESS;
    }
    ckpt_stream_seen(hStream);
    CUresult r = real_cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
    if (r == CUDA_SUCCESS)
        ckpt_history_d2h_async(dstHost, ByteCount);
    return r;
}

/* Unified addressing again: a copy into no device allocation is one the
 * host reads. */
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    NEED_REAL(cuMemcpyAsync, CUDA_ERROR_NOT_INITIALIZED);
    if (!observed())
        return real_cuMemcpyAsync(dst, src, ByteCount, hStream);
    bool to_host = !ckpt_reg_contains(dst);
    if (ckpt_replaying) {
        if (to_host)
            ckpt_history_d2h_async((void *)(uintptr_t)dst, ByteCount);
        return CUDA_SUCCESS;
    }
    ckpt_stream_seen(hStream);
    CUresult r = real_cuMemcpyAsync(dst, src, ByteCount, hStream);
    if (r == CUDA_SUCCESS && to_host)
        ckpt_history_d2h_async((void *)(uintptr_t)dst, ByteCount);
    return r;
}

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
