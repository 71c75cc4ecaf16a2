/*
 * Wrappers of the driver calls that queue work or wait for it.  Queuing
 * calls note the stream (so a snapshot knows what to order itself after);
 * waiting calls are the tokens boundaries are found in, reported after the
 * real call returned.  While a restarted rank replays, device work is
 * suppressed here: launches, memsets and copies to the device return at
 * once, and what the host reads back comes from the replay log.  These are
 * the hot hooks: no lock and no allocation on the common path.  Calls made
 * from inside NCCL, or while libckpt is inactive, are only forwarded.  Each
 * call with a per-thread default stream variant (hooks.def's DRV_PT) gets
 * two wrappers with one body: the variant's NULL stream is the calling
 * thread's CU_STREAM_PER_THREAD, never the legacy stream.
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
SYNC_HOOK(cuStreamSynchronize_ptsz, TOK_STREAM_SYNC, (CUstream hStream), (hStream))
SYNC_HOOK(cuCtxSynchronize, TOK_CTX_SYNC, (void), ())
SYNC_HOOK(cuCtxSynchronize_v2, TOK_CTX_SYNC, (CUcontext ctx), (ctx))
SYNC_HOOK(cuEventSynchronize, TOK_EVENT_SYNC, (CUevent hEvent), (hEvent))

/* A plain entry point and its per-thread variant sfx, both calling body
 * with their own real function and (PT_PAIR) the stream a NULL one means;
 * PT_SAME where the body has no stream to read. */
#define PT_PAIR(name, sfx, body, params, args)                                 \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        return body(real_##name, NULL, CKPT_ARGS args);                        \
    }                                                                          \
    EXPORT CUresult name##sfx params                                           \
    {                                                                          \
        NEED_REAL(name##sfx, CUDA_ERROR_NOT_INITIALIZED);                      \
        return body(real_##name##sfx, CU_STREAM_PER_THREAD, CKPT_ARGS args);  \
    }
#define PT_SAME(name, sfx, body, params, args)                                 \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        return body(real_##name, CKPT_ARGS args);                              \
    }                                                                          \
    EXPORT CUresult name##sfx params                                           \
    {                                                                          \
        NEED_REAL(name##sfx, CUDA_ERROR_NOT_INITIALIZED);                      \
        return body(real_##name##sfx, CKPT_ARGS args);                         \
    }

/* Synchronous copies run on the entry point's default stream (legacy or
 * per-thread), which the driver picks. */
static CUresult dtoh(__typeof__(&cuMemcpyDtoH_v2) real, void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    if (suppressed()) {
        ckpt_history_d2h(dstHost, ByteCount, false);
        synced(TOK_DTOH);
        return CUDA_SUCCESS;
    }
    CUresult r = real(dstHost, srcDevice, ByteCount);
    if (r == CUDA_SUCCESS && observed()) {
        ckpt_history_d2h(dstHost, ByteCount, true);
        synced(TOK_DTOH);
    }
    return r;
}
PT_SAME(cuMemcpyDtoH_v2, _ptds, dtoh, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
        (dstHost, srcDevice, ByteCount))

static CUresult htod(__typeof__(&cuMemcpyHtoD_v2) real, CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    if (suppressed()) {
        synced(TOK_HTOD);
        return CUDA_SUCCESS;
    }
    CUresult r = real(dstDevice, srcHost, ByteCount);
    if (r == CUDA_SUCCESS && observed())
        synced(TOK_HTOD);
    return r;
}
PT_SAME(cuMemcpyHtoD_v2, _ptds, htod, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
        (dstDevice, srcHost, ByteCount))

/* Unified addressing: the call does not say which side dst is on; a copy
 * into no device allocation is one the host reads. */
static CUresult memcpy_sync(__typeof__(&cuMemcpy) real, CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    bool to_host = observed() && !ckpt_reg_contains(dst);
    if (suppressed()) {
        if (to_host)
            ckpt_history_d2h((void *)(uintptr_t)dst, ByteCount, false);
        synced(TOK_MEMCPY);
        return CUDA_SUCCESS;
    }
    CUresult r = real(dst, src, ByteCount);
    if (r == CUDA_SUCCESS && observed()) {
        if (to_host)
            ckpt_history_d2h((void *)(uintptr_t)dst, ByteCount, true);
        synced(TOK_MEMCPY);
    }
    return r;
}
PT_SAME(cuMemcpy, _ptds, memcpy_sync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount))

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
#define QUEUE_HOOK_(name, stream, null_means, params, args)                    \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        if (IS_LAUNCH(#name))                                                  \
            ckpt_hookstat(CKPT_HS_LAUNCH, __builtin_return_address(0), false); \
        if (observed()) {                                                      \
            if (ckpt_replaying)                                                \
                return CUDA_SUCCESS;                                           \
            ckpt_stream_seen(ckpt_stream_or(stream, null_means));              \
        }                                                                      \
        return real_##name args;                                               \
    }
#define QUEUE_HOOK(name, sfx, stream, params, args)                            \
    QUEUE_HOOK_(name, stream, NULL, params, args)                              \
    QUEUE_HOOK_(name##sfx, stream, CU_STREAM_PER_THREAD, params, args)

QUEUE_HOOK(cuLaunchKernel, _ptsz, hStream,
           (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
            unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
            void **kernelParams, void **extra),
           (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams,
            extra))
QUEUE_HOOK(cuLaunchKernelEx, _ptsz, config ? config->hStream : NULL,
           (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
           (config, f, kernelParams, extra))
QUEUE_HOOK(cuMemcpyHtoDAsync_v2, _ptsz, hStream,
           (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
           (dstDevice, srcHost, ByteCount, hStream))
QUEUE_HOOK(cuMemcpyDtoDAsync_v2, _ptsz, hStream,
           (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           (dstDevice, srcDevice, ByteCount, hStream))
QUEUE_HOOK(cuMemsetD8Async, _ptsz, hStream, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
           (dstDevice, uc, N, hStream))
QUEUE_HOOK(cuMemsetD32Async, _ptsz, hStream, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
           (dstDevice, ui, N, hStream))

/* Copies the host reads after its next sync: their bytes go in the log
 * then (ckpt_history_settle), or come from it in replay. */
static CUresult dtoh_async(__typeof__(&cuMemcpyDtoHAsync_v2) real, CUstream null_means, void *dstHost,
                           CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    if (!observed())
        return real(dstHost, srcDevice, ByteCount, hStream);
    if (ckpt_replaying) {
        ckpt_history_d2h_async(dstHost, ByteCount);
        return CUDA_SUCCESS;
    }
    ckpt_stream_seen(ckpt_stream_or(hStream, null_means));
    CUresult r = real(dstHost, srcDevice, ByteCount, hStream);
    if (r == CUDA_SUCCESS)
        ckpt_history_d2h_async(dstHost, ByteCount);
    return r;
}
PT_PAIR(cuMemcpyDtoHAsync_v2, _ptsz, dtoh_async,
        (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
        (dstHost, srcDevice, ByteCount, hStream))

/* Unified addressing again: a copy into no device allocation is one the
 * host reads. */
static CUresult memcpy_async(__typeof__(&cuMemcpyAsync) real, CUstream null_means, CUdeviceptr dst, CUdeviceptr src,
                             size_t ByteCount, CUstream hStream)
{
    if (!observed())
        return real(dst, src, ByteCount, hStream);
    bool to_host = !ckpt_reg_contains(dst);
    if (ckpt_replaying) {
        if (to_host)
            ckpt_history_d2h_async((void *)(uintptr_t)dst, ByteCount);
        return CUDA_SUCCESS;
    }
    ckpt_stream_seen(ckpt_stream_or(hStream, null_means));
    CUresult r = real(dst, src, ByteCount, hStream);
    if (r == CUDA_SUCCESS && to_host)
        ckpt_history_d2h_async((void *)(uintptr_t)dst, ByteCount);
    return r;
}
PT_PAIR(cuMemcpyAsync, _ptsz, memcpy_async, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
        (dst, src, ByteCount, hStream))

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    NEED_REAL(cuStreamDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_active)
        ckpt_stream_gone(hStream);
    return real_cuStreamDestroy_v2(hStream);
}

int ckpt_capturing;

/* No snapshot is in flight while a stream captures: its copies, the
 * committer's waits and the pacer's events would reach into the capture or
 * invalidate it.  One that is in flight is finished first (the host waits
 * for its copies, once per capture), and none starts until the capture
 * ends. */
static CUresult begin_capture(__typeof__(&cuStreamBeginCapture_v2) real, CUstream hStream, CUstreamCaptureMode mode)
{
    __atomic_add_fetch(&ckpt_capturing, 1, __ATOMIC_SEQ_CST);
    ckpt_before_capture();
    CUresult r = real(hStream, mode);
    if (r != CUDA_SUCCESS)
        __atomic_sub_fetch(&ckpt_capturing, 1, __ATOMIC_SEQ_CST);
    return r;
}
PT_SAME(cuStreamBeginCapture_v2, _ptsz, begin_capture, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))

/* A capture ends (successfully or invalidated) with this call either way. */
static CUresult end_capture(__typeof__(&cuStreamEndCapture) real, CUstream hStream, CUgraph *phGraph)
{
    CUresult r = real(hStream, phGraph);
    if ((r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) &&
        __atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) > 0)
        __atomic_sub_fetch(&ckpt_capturing, 1, __ATOMIC_RELAXED);
    return r;
}
PT_SAME(cuStreamEndCapture, _ptsz, end_capture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))
