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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "interpose.h"
#include "log.h"

#define EXPORT __attribute__((visibility("default")))

/* Token identities of the synchronising calls. */
enum { TOK_STREAM_SYNC = 1, TOK_CTX_SYNC, TOK_EVENT_SYNC, TOK_MEMCPY, TOK_DTOH, TOK_HTOD };

/* A call the program made (ckpt_observed) has its answer in the replay
 * log, and replay suppresses its device work.  Not a call a library makes
 * on a thread of its own (NCCL's init and proxy threads zero their
 * buffers and wait for it): that work is the library's, made as it is in
 * every run. */
static inline bool suppressed(void)
{
    return __builtin_expect(ckpt_is_replaying(), 0) && ckpt_observed();
}

/* Copy before write (pacer.c): work the program queues on s waits for the
 * snapshot copies of the allocations it may write.  A kernel may write
 * through any pointer its parameters carry. */
struct touched {
    CUstream s;
    size_t n;
    uint64_t w[64];
};

static bool touched_word(uint64_t w, void *arg)
{
    struct touched *t = arg;
    t->w[t->n++] = w;
    if (t->n == sizeof(t->w) / sizeof(t->w[0])) {
        ckpt_pace_touch(t->s, t->w, t->n);
        t->n = 0;
    }
    return false;
}

static void touch_launch(CUstream s, CUfunction f, void **params, void **extra)
{
    if (!ckpt_pace_pending())
        return;
    struct touched t = {.s = s};
    CUresult asked[2];
    if (ckpt_launch_scan(f, params, extra, touched_word, &t, asked) < 0)
        ckpt_pace_touch_all(s, false); /* where it writes cannot be told */
    else if (t.n)
        ckpt_pace_touch(s, t.w, t.n);
}

static void touch_dst(CUstream s, CUdeviceptr dst)
{
    uint64_t w = dst;
    ckpt_pace_touch(s, &w, 1);
}

/* A host-visible call of the program returned r (the real call made):
 * recorded, or answered from the log in replay (the real call still made:
 * the device is idle then, and host functions queued before it have run
 * when it returns).  A success feeds the boundary learner token.  A
 * synchronous copy into host memory at dst (else NULL) has its bytes
 * recorded with the observation, as one (ckpt_history_observed_d2h). */
static CUresult after_copy(enum ckpt_obs what, uint64_t token, CUresult r, CUstream stream, void *dst, size_t size)
{
    if (!ckpt_observed())
        return r;
    CUresult a;
    if (ckpt_is_replaying() && ckpt_history_answer(what, &a))
        r = a;
    else if (dst)
        ckpt_history_observed_d2h(what, r, dst, size);
    else
        ckpt_history_observed(what, r, stream);
    if (r == CUDA_SUCCESS && token)
        ckpt_on_sync(token);
    return r;
}

#define after_on(what, token, r, stream) after_copy(what, token, r, stream, NULL, 0)
#define after(what, token, r) after_copy(what, token, r, NULL, NULL, 0)
#define after_d2h(what, token, r, dst, size) after_copy(what, token, r, NULL, dst, size)

/* Replaying a call that is not made: the recorded answer, true; false
 * when this thread has gone live (make the call, then after()). */
static bool answered(enum ckpt_obs what, uint64_t token, CUresult *r)
{
    if (!suppressed() || !ckpt_history_answer(what, r))
        return false;
    if (*r == CUDA_SUCCESS && token)
        ckpt_on_sync(token);
    return true;
}

/* True when s is being captured into a graph: work queued on it is
 * recorded, not run, so replay lets it through. */
bool ckpt_stream_capturing(CUstream s)
{
    CUstreamCaptureStatus st;
    if (__atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) <= 0)
        return false;
    if (!real_cuStreamIsCapturing && ckpt_resolve("cuStreamIsCapturing") < 0)
        return true; /* unknown: never suppress what may be a capture */
    return real_cuStreamIsCapturing(V(s), &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

#define capturing ckpt_stream_capturing

/* Syncs are made for real in replay too: the host functions replay runs
 * in stream order have run when they return.  A thread whose log runs dry
 * at one waits there for the restore to go live, which may queue work of
 * its own (the copies pending at the snapshot, made again): the sync is
 * then made again, live, so that its answer and the copies it settles
 * include that work. */
/* A standby whose objects are virtual (virtual.c) makes no real call: its
 * engine runs the host functions the sync waits for (on, what of
 * CKPT_V_WAIT_*, the handle). */
#define SYNC_BODY(what, token, stream, wait_what, on, call)                    \
    do {                                                                       \
        bool in_replay = suppressed(), virtual = in_replay && ckpt_v_on();     \
        CUresult r = CUDA_SUCCESS, a;                                          \
        if (virtual && ckpt_v_wait(&r, wait_what, on) && r != CUDA_SUCCESS)    \
            return r;                                                          \
        if (!virtual)                                                          \
            r = (call);                                                        \
        if (in_replay && answered(what, token, &a))                            \
            return a;                                                          \
        if (in_replay)                                                         \
            r = (call);                                                        \
        return after_on(what, token, r, stream);                               \
    } while (0)

EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    NEED_REAL(cuStreamSynchronize, CUDA_ERROR_NOT_INITIALIZED);
    SYNC_BODY(CKPT_OBS_STREAM_SYNC, TOK_STREAM_SYNC, hStream, CKPT_V_WAIT_STREAM, hStream,
              real_cuStreamSynchronize(V(hStream)));
}

EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    NEED_REAL(cuStreamSynchronize_ptsz, CUDA_ERROR_NOT_INITIALIZED);
    SYNC_BODY(CKPT_OBS_STREAM_SYNC, TOK_STREAM_SYNC, ckpt_stream_or(hStream, CU_STREAM_PER_THREAD),
              CKPT_V_WAIT_STREAM, hStream, real_cuStreamSynchronize_ptsz(V(hStream)));
}

EXPORT CUresult cuCtxSynchronize(void)
{
    NEED_REAL(cuCtxSynchronize, CUDA_ERROR_NOT_INITIALIZED);
    SYNC_BODY(CKPT_OBS_CTX_SYNC, TOK_CTX_SYNC, NULL, CKPT_V_WAIT_CTX, NULL, real_cuCtxSynchronize());
}

EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    NEED_REAL(cuCtxSynchronize_v2, CUDA_ERROR_NOT_INITIALIZED);
    SYNC_BODY(CKPT_OBS_CTX_SYNC, TOK_CTX_SYNC, NULL, CKPT_V_WAIT_CTX, NULL, real_cuCtxSynchronize_v2(V(ctx)));
}

EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    NEED_REAL(cuEventSynchronize, CUDA_ERROR_NOT_INITIALIZED);
    SYNC_BODY(CKPT_OBS_EVENT_SYNC, TOK_EVENT_SYNC, NULL, CKPT_V_WAIT_EVENT, hEvent, real_cuEventSynchronize(V(hEvent)));
}

/* Queries: an allocator reuses a block, a poller reads a copy's bytes,
 * when the answer is CUDA_SUCCESS.  In replay the recorded answer is
 * given, and a success waits for the (idle) device, so that host
 * functions queued before have run as they had.  Not tokens: how often a
 * program polls is not part of its iteration's shape. */
EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    NEED_REAL(cuEventQuery, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r, w;
    if (answered(CKPT_OBS_EVENT_QUERY, 0, &r)) {
        if (r == CUDA_SUCCESS && ckpt_v_wait(&w, CKPT_V_WAIT_EVENT, hEvent))
            return r;
        if (r == CUDA_SUCCESS && !__atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) &&
            (real_cuEventSynchronize || ckpt_resolve("cuEventSynchronize") == 0))
            real_cuEventSynchronize(V(hEvent));
        return r;
    }
    return after(CKPT_OBS_EVENT_QUERY, 0, real_cuEventQuery(V(hEvent)));
}

static CUresult stream_query(__typeof__(&cuStreamQuery) real, CUstream null_means, CUstream hStream)
{
    CUresult r, w;
    if (answered(CKPT_OBS_STREAM_QUERY, 0, &r)) {
        if (r == CUDA_SUCCESS && ckpt_v_wait(&w, CKPT_V_WAIT_STREAM, hStream))
            return r;
        const char *sync = null_means ? "cuStreamSynchronize_ptsz" : "cuStreamSynchronize";
        __typeof__(&cuStreamSynchronize) *fn = null_means ? &real_cuStreamSynchronize_ptsz : &real_cuStreamSynchronize;
        if (r == CUDA_SUCCESS && !__atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) &&
            (*fn || ckpt_resolve(sync) == 0))
            (*fn)(V(hStream));
        return r;
    }
    return after_on(CKPT_OBS_STREAM_QUERY, 0, real(V(hStream)), ckpt_stream_or(hStream, null_means));
}

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

PT_PAIR(cuStreamQuery, _ptsz, stream_query, (CUstream hStream), (hStream))

/* Free memory, as the host reads it (an allocator's retry after an out of
 * memory): recorded, or served. */
EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    NEED_REAL(cuMemGetInfo_v2, CUDA_ERROR_NOT_INITIALIZED);
    /* A standby with no context is served, whatever the driver would say. */
    CUresult r = suppressed() && ckpt_v_on() ? CUDA_SUCCESS : real_cuMemGetInfo_v2(free, total);
    if (ckpt_observed() && free && total) {
        uint64_t f = r == CUDA_SUCCESS ? *free : UINT64_MAX, t = *total;
        ckpt_history_value(CKPT_VALUE_MEMINFO_FREE, &f);
        ckpt_history_value(CKPT_VALUE_MEMINFO_TOTAL, &t);
        r = f == UINT64_MAX ? r : CUDA_SUCCESS;
        if (r == CUDA_SUCCESS) {
            *free = (size_t)f;
            *total = (size_t)t;
        }
    }
    return r;
}

/* A pool's statistics (reserved and used bytes, their high-water marks),
 * as an allocator reads them for its own statistics or to decide when to
 * trim: recorded, with the call's result, or served.  The reuse policies
 * are ints, the rest cuuint64_t. */
EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_REAL(cuMemPoolGetAttribute, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = suppressed() && ckpt_v_on() ? CUDA_SUCCESS : real_cuMemPoolGetAttribute(pool, attr, value);
    if (attr >= CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT && attr <= CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        ckpt_standby_mem_pool_stats();
    if (ckpt_observed() && value) {
        bool wide = attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        uint64_t v = 0, rc = (uint64_t)r;
        if (r == CUDA_SUCCESS)
            v = wide ? *(const cuuint64_t *)value : (uint64_t)(uint32_t) * (const int *)value;
        ckpt_history_value(CKPT_VALUE_POOL_ATTR + (uint64_t)attr, &rc);
        ckpt_history_value(CKPT_VALUE_POOL_ATTR + (uint64_t)attr, &v);
        r = (CUresult)rc;
        if (r == CUDA_SUCCESS && wide)
            *(cuuint64_t *)value = v;
        else if (r == CUDA_SUCCESS)
            *(int *)value = (int)(uint32_t)v;
    }
    return r;
}

/* Synchronous copies run on the entry point's default stream (legacy or
 * per-thread), which the driver picks. */
static CUresult dtoh(__typeof__(&cuMemcpyDtoH_v2) real, void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    CUresult r;
    if (suppressed() && ckpt_history_d2h(dstHost, ByteCount) && answered(CKPT_OBS_DTOH, TOK_DTOH, &r))
        return r;
    return after_d2h(CKPT_OBS_DTOH, TOK_DTOH, real(dstHost, srcDevice, ByteCount), dstHost, ByteCount);
}
PT_SAME(cuMemcpyDtoH_v2, _ptds, dtoh, (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
        (dstHost, srcDevice, ByteCount))

static CUresult htod(__typeof__(&cuMemcpyHtoD_v2) real, CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    CUresult r;
    if (answered(CKPT_OBS_HTOD, TOK_HTOD, &r))
        return r;
    if (ckpt_observed() && !ckpt_is_replaying())
        touch_dst(CU_STREAM_LEGACY, dstDevice);
    return after(CKPT_OBS_HTOD, TOK_HTOD, real(dstDevice, srcHost, ByteCount));
}
PT_SAME(cuMemcpyHtoD_v2, _ptds, htod, (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
        (dstDevice, srcHost, ByteCount))

/* Unified addressing: the call does not say which side dst is on.  A copy
 * into no allocation libckpt tracks is one the host reads, if the driver
 * says dst is host memory; device memory libckpt does not track is never
 * read or written from the CPU.  Graph-owned memory is live only where no
 * snapshot is taken (graphmem.c); what a copy puts in other untracked
 * device memory (IPC-imported, or from an entry point libckpt does not
 * follow) no snapshot holds: replay past it is refused. */
static bool to_host_memory(CUdeviceptr dst)
{
    if (ckpt_reg_contains(dst) || ckpt_graphmem_owns(dst))
        return false; /* graph memory: live only while no snapshot can be taken (graphmem.c) */
    if (ckpt_v_on())
        return true; /* a standby with no context: all the device memory it has is tracked */
    unsigned int type = 0;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    if (real_cuPointerGetAttribute || ckpt_resolve("cuPointerGetAttribute") == 0)
        r = real_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dst);
    if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && type == CU_MEMORYTYPE_HOST))
        return true; /* pageable (CUDA does not know it), or pinned */
    ckpt_history_taint(r == CUDA_SUCCESS ? "the program copies into device memory libckpt does not track "
                                           "(IPC-imported, or allocated through an entry point libckpt does "
                                           "not follow): no snapshot holds it"
                                         : "libckpt cannot tell whether a copy's destination is host memory");
    return false;
}

static CUresult memcpy_sync(__typeof__(&cuMemcpy) real, CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    bool to_host = ckpt_observed() && to_host_memory(dst);
    CUresult r;
    if (suppressed() && (!to_host || ckpt_history_d2h((void *)(uintptr_t)dst, ByteCount)) &&
        answered(CKPT_OBS_MEMCPY, TOK_MEMCPY, &r))
        return r;
    if (!to_host && ckpt_observed() && !ckpt_is_replaying())
        touch_dst(CU_STREAM_LEGACY, dst);
    r = real(dst, src, ByteCount);
    if (to_host)
        return after_d2h(CKPT_OBS_MEMCPY, TOK_MEMCPY, r, (void *)(uintptr_t)dst, ByteCount);
    return after(CKPT_OBS_MEMCPY, TOK_MEMCPY, r);
}
PT_SAME(cuMemcpy, _ptds, memcpy_sync, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount))

/* Events recorded while replaying stand at replay time, not at the
 * recorded run's: a time measured from one after the restore went live
 * is one no run measured.  Kept until recorded again. */
static pthread_mutex_t replayed_lock = PTHREAD_MUTEX_INITIALIZER;
static CUevent *replayed;
static size_t nreplayed, replayed_cap;

static void event_recorded(CUevent e)
{
    bool replaying = ckpt_is_replaying();
    if (!replaying && !__atomic_load_n(&nreplayed, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&replayed_lock);
    size_t i = 0;
    while (i < nreplayed && replayed[i] != e)
        i++;
    if (!replaying && i < nreplayed) {
        replayed[i] = replayed[nreplayed - 1];
        __atomic_store_n(&nreplayed, nreplayed - 1, __ATOMIC_RELAXED);
    } else if (replaying && i == nreplayed) {
        if (nreplayed == replayed_cap) {
            size_t cap = replayed_cap ? replayed_cap * 2 : 16;
            CUevent *n = realloc(replayed, cap * sizeof(*n));
            if (!n) {
                pthread_mutex_unlock(&replayed_lock);
                ckpt_refuse("out of host memory");
            }
            replayed = n;
            replayed_cap = cap;
        }
        replayed[nreplayed] = e;
        __atomic_store_n(&nreplayed, nreplayed + 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&replayed_lock);
}

static bool was_replayed(CUevent e)
{
    bool found = false;
    pthread_mutex_lock(&replayed_lock);
    for (size_t i = 0; i < nreplayed && !found; i++)
        found = replayed[i] == e;
    pthread_mutex_unlock(&replayed_lock);
    return found;
}

static CUresult record(__typeof__(&cuEventRecord) real, CUevent hEvent, CUstream hStream)
{
    CUresult r;
    if (!(ckpt_observed() && ckpt_v_record(&r, hEvent, hStream)))
        r = real(V(hEvent), V(hStream));
    if (r == CUDA_SUCCESS && ckpt_observed()) {
        event_recorded(hEvent);
        ckpt_history_poller_changes("recorded an event");
    }
    return r;
}
PT_SAME(cuEventRecord, _ptsz, record, (CUevent hEvent, CUstream hStream), (hEvent, hStream))

static CUresult record_flags(__typeof__(&cuEventRecordWithFlags) real, CUevent hEvent, CUstream hStream,
                             unsigned int flags)
{
    CUresult r;
    if (!(ckpt_observed() && ckpt_v_record(&r, hEvent, hStream)))
        r = real(V(hEvent), V(hStream), flags);
    if (r == CUDA_SUCCESS && ckpt_observed()) {
        event_recorded(hEvent);
        ckpt_history_poller_changes("recorded an event");
    }
    return r;
}
PT_SAME(cuEventRecordWithFlags, _ptsz, record_flags, (CUevent hEvent, CUstream hStream, unsigned int flags),
        (hEvent, hStream, flags))

/* Elapsed times, both versions (the runtime asks for v1 and v2): an
 * autotuner picks a kernel by them. */
static CUresult elapsed(__typeof__(&cuEventElapsedTime_v2) real, float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    CUresult r;
    uint64_t v;
    if (!ckpt_is_replaying() && __atomic_load_n(&nreplayed, __ATOMIC_RELAXED) && ckpt_observed() &&
        (was_replayed(hStart) || was_replayed(hEnd))) {
        /* A time measured across the restore: the failed run measured it. */
        if (!ckpt_history_failed_value(CKPT_VALUE_ELAPSED, &v))
            ckpt_refuse("the program measured a time across the restore (from an event recorded before it went "
                        "live) that the failed run never measured");
        r = (CUresult)(v >> 32);
        uint32_t f = (uint32_t)v;
        if (pMilliseconds)
            memcpy(pMilliseconds, &f, sizeof(f));
    } else if (ckpt_v_on() && ckpt_observed()) {
        r = CUDA_SUCCESS; /* served below */
    } else {
        r = real(pMilliseconds, V(hStart), V(hEnd));
    }
    if (ckpt_observed() && pMilliseconds) { /* the answer and the time, in one value */
        uint32_t f = 0;
        memcpy(&f, pMilliseconds, sizeof(f));
        uint64_t v = (uint64_t)r << 32 | f;
        ckpt_history_value(CKPT_VALUE_ELAPSED, &v);
        f = (uint32_t)v;
        memcpy(pMilliseconds, &f, sizeof(f));
        r = (CUresult)(v >> 32);
    }
    return r;
}

EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    NEED_REAL(cuEventElapsedTime_v2, CUDA_ERROR_NOT_INITIALIZED);
    return elapsed(real_cuEventElapsedTime_v2, pMilliseconds, hStart, hEnd);
}

EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    NEED_REAL(cuEventElapsedTime, CUDA_ERROR_NOT_INITIALIZED);
    return elapsed(real_cuEventElapsedTime, pMilliseconds, hStart, hEnd);
}

/* A kernel launch, from whichever library: counted (hookstats.c), and,
 * while the program holds memory a kernel can write and the host read
 * without a copy call, looked at (hostmem.c). */
static void launched(const void *caller, CUfunction f, void **params, void **extra)
{
    ckpt_hookstat(CKPT_HS_LAUNCH, caller, false);
    if (__builtin_expect(__atomic_load_n(&ckpt_host_visible, __ATOMIC_RELAXED) > 0, 0) && ckpt_observed()) {
        char why[400];
        if (ckpt_launch_reaches_host(f, params, extra, why, sizeof(why)))
            ckpt_history_taint(why);
    }
}
#define LAUNCHED launched(__builtin_return_address(0), ckpt_v_peek(f), kernelParams, extra)
#define NOT_A_LAUNCH (void)0

#define TOUCH_LAUNCH touch_launch(s_, ckpt_v_peek(f), kernelParams, extra)
#define TOUCH_DST touch_dst(s_, dstDevice)

/*
 * Under lazy module loading (CUDA's default since 12.2) a function's first
 * launch loads its code into device memory, between the program's
 * allocations.  Replay suppresses the launch, so it loads the function
 * instead (cuFuncLoad, CUDA 12.4), and later allocations land where they
 * did.  NVIDIA's runtime launches a CUkernel: its function in the current
 * context is loaded.  Without cuFuncLoad nothing is loaded, and a restore
 * whose allocations moved is refused, naming the allocation.  The pairs
 * (handle, context) known loaded are kept, so that most suppressed
 * launches cost no driver call.
 */
#define LOADED_SLOTS 4096
static struct loaded {
    CUfunction f;
    CUcontext ctx;
} loaded[LOADED_SLOTS];
static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;
static int loading_mode; /* 0: not asked yet, else the driver's CUmoduleLoadingMode (-1: none to load by) */

static struct loaded *loaded_slot(CUfunction f, CUcontext ctx, bool *found)
{
    size_t h = (size_t)(((uintptr_t)f ^ (uintptr_t)ctx * 31) * 0x9e3779b97f4a7c15ull >> 52);
    for (size_t i = 0; i < 16; i++) {
        struct loaded *l = &loaded[(h + i) % LOADED_SLOTS];
        if ((*found = l->f == f && l->ctx == ctx) || !l->f)
            return l;
    }
    *found = false;
    return NULL; /* a crowded neighbourhood: asked each time */
}

static void load_function(CUfunction f)
{
    CUfunctionLoadingState state;
    if (real_cuFuncIsLoaded(&state, f) == CUDA_SUCCESS) {
        if (state != CU_FUNCTION_LOADING_STATE_LOADED && real_cuFuncLoad(f) != CUDA_SUCCESS)
            ckpt_log_once(CKPT_DEBUG, "cuFuncLoad failed: later allocations may move");
        return;
    }
    CUfunction fn; /* a CUkernel */
    if (real_cuKernelGetFunction && real_cuKernelGetFunction(&fn, (CUkernel)(void *)f) == CUDA_SUCCESS &&
        real_cuFuncIsLoaded(&state, fn) == CUDA_SUCCESS && state != CU_FUNCTION_LOADING_STATE_LOADED &&
        real_cuFuncLoad(fn) != CUDA_SUCCESS)
        ckpt_log_once(CKPT_DEBUG, "cuFuncLoad failed for a kernel: later allocations may move");
}

/* The driver's loading mode, with the calls a lazy one needs resolved;
 * -1 when it is unknown or replay cannot load (said once).  Lock held. */
static int loading_mode_now(void)
{
    CUmoduleLoadingMode mode = CU_MODULE_EAGER_LOADING;
    if (loading_mode)
        return loading_mode;
    if ((!real_cuModuleGetLoadingMode && ckpt_resolve("cuModuleGetLoadingMode") < 0) ||
        real_cuModuleGetLoadingMode(&mode) != CUDA_SUCCESS)
        mode = (CUmoduleLoadingMode)-1;
    if (mode == CU_MODULE_LAZY_LOADING &&
        ((!real_cuCtxGetCurrent && ckpt_resolve("cuCtxGetCurrent") < 0) ||
         (!real_cuFuncIsLoaded && ckpt_resolve("cuFuncIsLoaded") < 0) ||
         (!real_cuFuncLoad && ckpt_resolve("cuFuncLoad") < 0))) {
        ckpt_log(CKPT_WARN, "kernels are loaded lazily and this driver has no cuFuncLoad: replayed allocations "
                            "may move (CUDA_MODULE_LOADING=EAGER keeps them)");
        mode = (CUmoduleLoadingMode)-1;
    }
    if (mode == CU_MODULE_LAZY_LOADING && !real_cuKernelGetFunction)
        ckpt_resolve("cuKernelGetFunction"); /* without it, CUkernel handles are not loaded */
    __atomic_store_n(&loading_mode, (int)mode, __ATOMIC_RELEASE);
    return loading_mode;
}

void ckpt_stream_load(CUfunction f)
{
    pthread_mutex_lock(&loaded_lock);
    if (loading_mode_now() == CU_MODULE_LAZY_LOADING)
        load_function(f);
    pthread_mutex_unlock(&loaded_lock);
}

static void load_suppressed(CUfunction f)
{
    int mode = __atomic_load_n(&loading_mode, __ATOMIC_ACQUIRE);
    CUcontext ctx = NULL;
    bool found;
    if (!f || (mode && mode != CU_MODULE_LAZY_LOADING))
        return; /* eager: nothing to load */
    if (ckpt_v_on()) { /* no context yet: loaded where the journal has it (virtual.c) */
        pthread_mutex_lock(&loaded_lock);
        mode = loading_mode_now();
        pthread_mutex_unlock(&loaded_lock);
        if (mode == CU_MODULE_LAZY_LOADING && ckpt_v_journal_load(f))
            return;
    }
    pthread_mutex_lock(&loaded_lock);
    if (loading_mode_now() == CU_MODULE_LAZY_LOADING && real_cuCtxGetCurrent(&ctx) == CUDA_SUCCESS) {
        struct loaded *l = loaded_slot(f, ctx, &found);
        if (!found) {
            load_function(f);
            if (l)
                *l = (struct loaded){f, ctx};
        }
    }
    pthread_mutex_unlock(&loaded_lock);
}

/* A launch's configuration with the driver's stream in it. */
static const CUlaunchConfig *launch_config(const CUlaunchConfig *c)
{
    static __thread CUlaunchConfig copy;
    if (!c || V(c->hStream) == c->hStream)
        return c;
    copy = *c;
    copy.hStream = V(c->hStream);
    return &copy;
}

#define QUEUE_HOOK_(name, stream, null_means, launch, suppressed, touch, params, args) \
    EXPORT CUresult name params                                                \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        launch;                                                                \
        if (ckpt_observed()) {                                                      \
            CUstream s_ = ckpt_stream_or(stream, null_means);                  \
            bool live_ = capturing(s_) || ckpt_history_work();                 \
            if (ckpt_is_replaying() && !live_) {                                    \
                suppressed;                                                    \
                return CUDA_SUCCESS;                                           \
            }                                                                  \
            if (!ckpt_is_replaying()) {                                             \
                s_ = V(s_);                                                    \
                ckpt_stream_seen(s_);                                          \
                touch;                                                         \
            }                                                                  \
        }                                                                      \
        return real_##name args;                                               \
    }
/* A copy or a memset into dstDevice. */
#define QUEUE_HOOK(name, sfx, stream, params, args) \
    LAUNCH_HOOK(name, sfx, stream, NOT_A_LAUNCH, NOT_A_LAUNCH, TOUCH_DST, params, args)
#define LAUNCH_HOOK(name, sfx, stream, launch, suppressed, touch, params, args)                   \
    QUEUE_HOOK_(name, stream, NULL, launch, suppressed, touch, params, args)                      \
    QUEUE_HOOK_(name##sfx, stream, CU_STREAM_PER_THREAD, launch, suppressed, touch, params, args)
#define LOAD_SUPPRESSED load_suppressed(ckpt_v_peek(f))

LAUNCH_HOOK(cuLaunchKernel, _ptsz, hStream, LAUNCHED, LOAD_SUPPRESSED, TOUCH_LAUNCH,
           (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
            unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
            void **kernelParams, void **extra),
           (V(f), gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, V(hStream),
            kernelParams, extra))
LAUNCH_HOOK(cuLaunchKernelEx, _ptsz, config ? config->hStream : NULL, LAUNCHED, LOAD_SUPPRESSED, TOUCH_LAUNCH,
           (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
           (launch_config(config), V(f), kernelParams, extra))
QUEUE_HOOK(cuMemcpyHtoDAsync_v2, _ptsz, hStream,
           (CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
           (dstDevice, srcHost, ByteCount, V(hStream)))
QUEUE_HOOK(cuMemcpyDtoDAsync_v2, _ptsz, hStream,
           (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
           (dstDevice, srcDevice, ByteCount, V(hStream)))
QUEUE_HOOK(cuMemsetD8Async, _ptsz, hStream, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
           (dstDevice, uc, N, V(hStream)))
QUEUE_HOOK(cuMemsetD32Async, _ptsz, hStream, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
           (dstDevice, ui, N, V(hStream)))
/* Synchronous memsets and device-to-device copies: device work on the
 * entry point's default stream (the host sees nothing of it). */
QUEUE_HOOK(cuMemsetD8_v2, _ptds, NULL, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N))
QUEUE_HOOK(cuMemcpyDtoD_v2, _ptds, NULL, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
           (dstDevice, srcDevice, ByteCount))

/* A graph launch is device work like a kernel's: suppressed in replay,
 * and its stream ordered by snapshots like any other.  What its memory
 * nodes allocate is the program's after it (graphmem.c), or, suppressed,
 * never was. */
static CUresult graph_launch(__typeof__(&cuGraphLaunch) real, CUstream null_means, CUgraphExec hGraphExec,
                             CUstream hStream)
{
    CUresult r;
    if (!ckpt_observed()) {
        if ((r = real(hGraphExec, hStream)) == CUDA_SUCCESS && ckpt_active)
            ckpt_graphmem_launched(hGraphExec, true);
        return r;
    }
    CUstream s = ckpt_stream_or(hStream, null_means);
    bool live = capturing(s) || ckpt_history_work();
    if (ckpt_is_replaying() && !live) {
        ckpt_graphmem_launched(hGraphExec, false);
        return CUDA_SUCCESS;
    }
    if (!ckpt_is_replaying()) {
        s = V(s);
        ckpt_stream_seen(s);
        ckpt_pace_touch_all(s, false); /* its nodes' writes are not looked into */
    }
    if ((r = real(hGraphExec, V(hStream))) == CUDA_SUCCESS)
        ckpt_graphmem_launched(hGraphExec, true);
    return r;
}
PT_PAIR(cuGraphLaunch, _ptsz, graph_launch, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream))

/* Host functions run program code on the stream's behalf: in replay too,
 * in stream order, after the copies before them are served.  One queued
 * into a graph would run at each launch, which replay suppresses. */
static CUresult hostfn(__typeof__(&cuLaunchHostFunc) real, CUstream null_means, CUstream hStream, CUhostFn fn,
                       void *userData)
{
    if (!ckpt_observed())
        return real(V(hStream), fn, userData);
    CUstream s = ckpt_stream_or(hStream, null_means);
    if (capturing(s)) {
        ckpt_history_taint("a CUDA graph calls a host function, which replay cannot run at the graph's launches");
        return real(V(hStream), fn, userData);
    }
    if (!ckpt_is_replaying())
        ckpt_stream_seen(V(s));
    bool wrapped = ckpt_history_hostfn(s, &fn, &userData);
    CUresult r;
    if (!ckpt_v_hostfn(&r, hStream, fn, userData)) /* a standby's engine runs it (virtual.c) */
        r = real(V(hStream), fn, userData);
    if (r != CUDA_SUCCESS && wrapped)
        ckpt_history_hostfn_failed(userData);
    return r;
}
PT_PAIR(cuLaunchHostFunc, _ptsz, hostfn, (CUstream hStream, CUhostFn fn, void *userData), (hStream, fn, userData))

/* Copies the host reads after its next sync: their bytes go in the log
 * then (ckpt_history_settle), or come from it in replay. */
/* An asynchronous copy into host memory on stream s: what to do before
 * the real call.  Captured copies write host memory at every launch of
 * their graph, which replay suppresses. */
enum { ASYNC_CALL, ASYNC_DONE, ASYNC_PLAIN };
static int to_host_before(CUstream s, void *dst, CUdeviceptr src, size_t n)
{
    if (capturing(s)) {
        ckpt_history_taint("a CUDA graph copies device memory to the host, which replay cannot reproduce");
        return ASYNC_PLAIN;
    }
    bool live = ckpt_history_work();
    if (ckpt_is_replaying() && !live) {
        ckpt_history_d2h_async(dst, src, n, s);
        return ASYNC_DONE;
    }
    ckpt_stream_seen(V(s));
    return ASYNC_CALL;
}

static CUresult dtoh_async(__typeof__(&cuMemcpyDtoHAsync_v2) real, CUstream null_means, void *dstHost,
                           CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    if (!ckpt_observed())
        return real(dstHost, srcDevice, ByteCount, V(hStream));
    CUstream s = ckpt_stream_or(hStream, null_means);
    int what = to_host_before(s, dstHost, srcDevice, ByteCount);
    if (what == ASYNC_DONE)
        return CUDA_SUCCESS;
    CUresult r = real(dstHost, srcDevice, ByteCount, V(hStream));
    if (r == CUDA_SUCCESS && what == ASYNC_CALL)
        ckpt_history_d2h_async(dstHost, srcDevice, ByteCount, s);
    return r;
}
PT_PAIR(cuMemcpyDtoHAsync_v2, _ptsz, dtoh_async,
        (void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
        (dstHost, srcDevice, ByteCount, hStream))

/* Unified addressing again (to_host_memory). */
static CUresult memcpy_async(__typeof__(&cuMemcpyAsync) real, CUstream null_means, CUdeviceptr dst, CUdeviceptr src,
                             size_t ByteCount, CUstream hStream)
{
    if (!ckpt_observed())
        return real(dst, src, ByteCount, V(hStream));
    CUstream s = ckpt_stream_or(hStream, null_means);
    if (to_host_memory(dst)) {
        int what = to_host_before(s, (void *)(uintptr_t)dst, src, ByteCount);
        if (what == ASYNC_DONE)
            return CUDA_SUCCESS;
        CUresult r = real(dst, src, ByteCount, V(hStream));
        if (r == CUDA_SUCCESS && what == ASYNC_CALL)
            ckpt_history_d2h_async((void *)(uintptr_t)dst, src, ByteCount, s);
        return r;
    }
    bool live = capturing(s) || ckpt_history_work();
    if (ckpt_is_replaying() && !live)
        return CUDA_SUCCESS;
    if (!ckpt_is_replaying()) {
        s = V(s);
        ckpt_stream_seen(s);
        touch_dst(s, dst);
    }
    return real(dst, src, ByteCount, V(hStream));
}
PT_PAIR(cuMemcpyAsync, _ptsz, memcpy_async, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
        (dst, src, ByteCount, hStream))

EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    NEED_REAL(cuStreamDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    if (ckpt_v_stream_destroy(&r, hStream))
        return r;
    if (ckpt_active)
        ckpt_stream_gone(V(hStream));
    return real_cuStreamDestroy_v2(V(hStream));
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
    CUresult r = real(V(hStream), mode);
    if (r != CUDA_SUCCESS)
        __atomic_sub_fetch(&ckpt_capturing, 1, __ATOMIC_SEQ_CST);
    return r;
}
PT_SAME(cuStreamBeginCapture_v2, _ptsz, begin_capture, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))

/* A capture ends (successfully or invalidated) with this call either way. */
static CUresult end_capture(__typeof__(&cuStreamEndCapture) real, CUstream hStream, CUgraph *phGraph)
{
    CUresult r = real(V(hStream), phGraph);
    if (r == CUDA_SUCCESS && ckpt_active)
        ckpt_graphmem_ended(*phGraph);
    if ((r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) &&
        __atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) > 0)
        __atomic_sub_fetch(&ckpt_capturing, 1, __ATOMIC_RELAXED);
    return r;
}
PT_SAME(cuStreamEndCapture, _ptsz, end_capture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))
