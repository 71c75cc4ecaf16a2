/*
 * What the hook files of interpose/ share: the typed pointers to the real
 * CUDA/NCCL functions (from hooks.def), their resolution, and the
 * thread-local depths that attribute a call to the layer that made it.
 * Only interpose/ converts between -errno and CUresult/cudaError_t/
 * ncclResult_t; runtime/ never sees a CUDA type it does not need.
 */
#ifndef CKPT_INTERPOSE_H
#define CKPT_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "ckpt_nccl.h"
#include "registry.h"

enum ckpt_lib { LIB_DRV, LIB_RT, LIB_NCCL };

#define DRV(ret, name, params, args) extern __typeof__(&name) real_##name;
#define RT DRV
#define NCCL DRV
#define USE DRV
#define UNFOLLOWED DRV
#define PROMOTE DRV
#define QUERY DRV
#include "hooks.def"

/* One row per hooked symbol (and per USE, with no wrapper; an UNFOLLOWED
 * one is a driver row like DRV's).  real points at real_<name>. */
struct ckpt_hook {
    const char *name;
    void *wrapper;
    void **real;
    enum ckpt_lib lib;
};
extern const struct ckpt_hook ckpt_hooks[];
extern const size_t ckpt_nhooks;

/* Each row's index in ckpt_hooks. */
enum ckpt_hook_index {
#define DRV(ret, name, params, args) CKPT_HOOK_##name,
#define RT DRV
#define NCCL DRV
#define USE DRV
#define UNFOLLOWED DRV
#define PROMOTE DRV
#define QUERY DRV
#include "hooks.def"
    CKPT_NHOOKS
};

/* Calls of each hooked entry point, counted with CKPT_LOG=debug only
 * (hookstats.c says them at exit): which entry points the runtime and the
 * libraries really reach. */
extern uint64_t ckpt_hook_calls[CKPT_NHOOKS];
extern int ckpt_log_level;
/* The hook this thread entered last (kept while a standby follows, to
 * name a call that needs a context), and its name. */
extern __thread enum ckpt_hook_index ckpt_hook_last;
const char *ckpt_hook_now(void);
static inline void ckpt_hook_called(enum ckpt_hook_index i)
{
    if (__builtin_expect(ckpt_log_level >= 3 /* CKPT_DEBUG */, 0))
        __atomic_add_fetch(&ckpt_hook_calls[i], 1, __ATOMIC_RELAXED);
}

/* Resolves real_<name> (row's library, see real.c).  Returns 0, or -ENOENT
 * after logging the missing name once; the caller then fails the call with
 * the API's "not found/not initialised" error, never calls NULL. */
int ckpt_resolve(const char *name);

#define NEED_REAL(name, err)                                                   \
    do {                                                                       \
        ckpt_hook_called(CKPT_HOOK_##name);                                    \
        int v_ = __atomic_load_n(&ckpt_v_state, __ATOMIC_RELAXED);             \
        if (__builtin_expect(v_ != 0 /* CKPT_V_NONE: a rank */, 0)) {          \
            ckpt_hook_last = CKPT_HOOK_##name;                                 \
            if (v_ == 2 /* CKPT_V_REAL */ && !ckpt_v_synced)                   \
                ckpt_v_sync_thread();                                          \
        }                                                                      \
        if (__builtin_expect(!__atomic_load_n(&real_##name, __ATOMIC_ACQUIRE), 0) && \
            ckpt_resolve(#name) < 0)                                           \
            return (err);                                                      \
    } while (0)

/* The stream a call queues on: s, or for NULL the default stream of the
 * entry point, null_means (NULL, the legacy stream, for the plain names;
 * CU_STREAM_PER_THREAD for the _ptsz/_ptds variants of hooks.def). */
static inline CUstream ckpt_stream_or(CUstream s, CUstream null_means)
{
    return s ? s : null_means;
}

/* Expands a parenthesised argument list: CKPT_ARGS (a, b) is a, b. */
#define CKPT_ARGS(...) __VA_ARGS__

/* glibc's own dlsym, never ours: libckpt must not look itself up. */
void *ckpt_real_dlsym(void *handle, const char *name);

/* In a hook of a libc function: real_<name>_, the next definition after
 * libckpt's, resolved once. */
#define REAL_LIBC(name)                                                                       \
    static __typeof__(&name) real_##name##_resolved;                                          \
    __typeof__(&name) real_##name##_ = __atomic_load_n(&real_##name##_resolved, __ATOMIC_ACQUIRE); \
    if (!real_##name##_) {                                                                    \
        real_##name##_ = (__typeof__(&name))ckpt_real_dlsym(RTLD_NEXT, #name);                \
        __atomic_store_n(&real_##name##_resolved, real_##name##_, __ATOMIC_RELEASE);          \
    }

/* The wrapper for an exported name, or NULL when libckpt does not hook it. */
void *ckpt_hook_wrapper(const char *name);

/* If fn is the real driver function of a hooked name, the wrapper of that
 * exact versioned name; otherwise fn. */
void *ckpt_hook_substitute(void *fn);

/* Depth of wrappers on this thread: a runtime call (cudaMalloc) runs the
 * driver hook underneath (cuMemAlloc_v2), which must not count it again; a
 * call inside NCCL allocates library-internal state that is never
 * snapshotted or restored. */
extern __thread int ckpt_rt_depth;
extern __thread int ckpt_nccl_depth;

/* Non-zero while libckpt makes CUDA calls of its own on this thread: a
 * library that reaches a hooked export from inside must not be taken for
 * the program. */
extern __thread int ckpt_self_depth;

/* ---- threads (thread.c). */

/* This thread's key: the same in every run of a program that starts its
 * threads in the same order (1: the main thread). */
extern __thread uint64_t ckpt_thread_key_;
uint64_t ckpt_thread_key_slow(void);
static inline uint64_t ckpt_thread_key(void)
{
    return ckpt_thread_key_ ? ckpt_thread_key_ : ckpt_thread_key_slow();
}
/* The name of this thread's next program allocation (take: and use it
 * up), the same in every run. */
uint64_t ckpt_thread_ordinal(bool take);
/* The program thread this thread works for: itself, or for a library's
 * thread the program thread it was started from (0: none known). */
uint64_t ckpt_thread_owner(void);
/* True on a thread a CUDA or NCCL library (or libckpt) started for itself. */
extern __thread bool ckpt_thread_internal;
/* True when caller (a return address) is in the driver, NCCL or libckpt. */
bool ckpt_caller_is_library(const void *caller);
/* A call a library made for itself, not the program: inside a wrapped NCCL
 * call, on a library's thread, or from a library's code (NCCL's own
 * threads allocate outside any wrapped call). */
static inline bool ckpt_internal_call(const void *caller)
{
    return ckpt_nccl_depth > 0 || ckpt_thread_internal || ckpt_caller_is_library(caller);
}

/* True once the program's cuInit succeeded, CKPT_DISABLE is off and this is
 * not a child forked after CUDA initialised. */
extern bool ckpt_active;
/* A call of the program's own that libckpt follows: active, and not made
 * inside NCCL, by libckpt or on a library's thread. */
static inline bool ckpt_observed(void)
{
    return ckpt_active && !ckpt_nccl_depth && !ckpt_self_depth && !ckpt_thread_internal;
}
void ckpt_wake(void);
/* Under ckpt-resume without CKPT_ALLOW_UNPROTECTED=1: a rank that cannot
 * be protected (no arena, no room for it) stops rather than train on. */
bool ckpt_unprotected_refused(void);

/* Registers an allocation the program made (or NCCL made for itself:
 * caller inside libnccl, or a thread inside an NCCL call). */
void ckpt_track(const void *caller, uint64_t addr, uint64_t size, enum ckpt_alloc_kind kind, CUstream stream);

/* Live managed or pinned host allocations of the program (hostmem.c): while
 * there are any, each kernel launch's parameters are looked at. */
extern int ckpt_host_visible;
/* True when [p, p + size) is in pinned host memory the program holds. */
bool ckpt_host_pinned(const void *p, size_t size);
/* A managed allocation made (or freed: allocated false) by @caller. */
void ckpt_host_managed(const void *caller, uint64_t addr, uint64_t size, bool allocated);
/* Whether a launch of @f passes a pointer into the program's managed or
 * pinned host memory, or cannot be told; @why says which. */
bool ckpt_launch_reaches_host(CUfunction f, void **params, void **extra, char *why, size_t whylen);

/* Calls fn(word, arg) on every aligned 64-bit word of a launch's
 * parameters (params as cuLaunchKernel takes them, and extra's buffer)
 * until it returns true (params.c).  Returns 1 when fn stopped it, 0 when
 * every word was seen, -1 when the driver cannot describe f's parameters
 * (asked: the errors of cuFuncGetParamInfo and cuKernelGetParamInfo). */
int ckpt_launch_scan(CUfunction f, void **params, void **extra, bool (*fn)(uint64_t, void *), void *arg,
                     CUresult asked[2]);

/* ---- the snapshot engine (snapshot.c), driven by the hooks. */

/* Records that the program queued work on s (cheap; called per launch). */
void ckpt_stream_seen(CUstream s);

/* A host synchronisation of the program returned; token identifies the
 * kind of call.  May take a snapshot: boundaries are found here. */
void ckpt_on_sync(uint64_t token);

/* The program ended an iteration explicitly (CKPT_BOUNDARY=nvtx:NAME, at
 * the end of that range).  May take a snapshot. */
void ckpt_on_marker(void);

/* The program queued a collective on s; token hashes what it was. */
void ckpt_on_collective(uint64_t token, CUstream s);

/* Before a free takes effect: the device copies of a snapshot in flight may
 * still read that memory.  With a stream the free is ordered on it (a
 * GPU-side wait); without, the host waits for the copies. */
void ckpt_before_free(CUstream stream, bool on_stream);
/* The program destroys stream s: it leaves the list snapshots order after. */
void ckpt_stream_gone(CUstream s);
/* Before a stream capture begins: finishes the snapshot in flight, if any. */
void ckpt_before_capture(void);

/* ---- what the rank's node holds beside it (node.c). */

/* Does every other rank of this node hold a committed snapshot of
 * iteration?  Overwriting our older slot is safe only then: otherwise a
 * rank that dies now could leave the job with no iteration every rank
 * holds (we would keep only the newer one, a slower peer only the older). */
bool ckpt_node_peers_hold(uint64_t iteration);


/* At the rank's first snapshot, of @total bytes: can this host hold the
 * arena, CKPT_SLOTS slots of that size for each of its ranks?  Under
 * ckpt-resume a rank on a host that cannot stops (CKPT_EXIT_ARENA), saying
 * so with the numbers, rather than train unprotected, and ckpt-resume does
 * not restart it. */
void ckpt_node_check_room(const char *rank_dir, uint64_t iter, size_t total);

/* ---- the program's declarations (declare.c, include/libckpt.h). */

/* At a boundary that takes a snapshot: asks the program's answering
 * thread, if it has one, which blocks are free now, and waits for the
 * answer (at most CKPT_DECLARE_WAIT; the time in *waited_ms).  Returns
 * whether the declarations hold for this snapshot (false: no answer, and
 * the snapshot copies whole allocations). */
bool ckpt_declare_refresh(uint64_t iter, double *waited_ms);

/* Said once, at a snapshot that copies plain or VMM allocations
 * (@segments) with nothing declared free, when PyTorch's caching
 * allocator is in the process: its segments go whole. */
void ckpt_declare_unused(bool segments);

/* Snapshots that asked the program, and those that went whole for want of
 * an answer. */
void ckpt_declare_counts(uint64_t *asked, uint64_t *whole);

/* ---- the pacer (pacer.c): when a snapshot's copies are issued (CKPT_SCHED). */

/* What one snapshot copies: n records (recs: which bytes of an allocation,
 * where in the image; allocs: the allocation each is of) into the image at
 * dst, on stream; done is recorded
 * after the last piece.  start was recorded on stream before the first. */
struct ckpt_rec;
struct ckpt_pace_job {
    char *dst;
    const struct ckpt_alloc *allocs;
    const struct ckpt_rec *recs;
    long n;
    CUstream stream;
    CUevent start, done;
};

/* Queues job's copies: all now, or (paced, CKPT_SCHED=gap with a profile)
 * the first gap's now and the others as the program queues collectives.
 * Called with the snapshot lock held.  Returns CUDA_SUCCESS or the error
 * of the first copy that failed (nothing is queued after it). */
CUresult ckpt_pace_start(const struct ckpt_pace_job *job, bool paced);

/* The program queued a collective on s: a paced snapshot's next gap
 * follows it.  Returns CUDA_SUCCESS or a CUDA error. */
CUresult ckpt_pace_collective(CUstream s);

/* Queues what the gaps did not carry, and the done event, now: before the
 * update may run.  Returns CUDA_SUCCESS or the error of a failed copy. */
CUresult ckpt_pace_flush(void);

/* Copy before write (pacer.c): the program is about to queue work on s
 * that may write through each of the n addresses; s is made to wait for
 * the copies of the allocations they point into, queued at once if they
 * were not.  Costs one load while no snapshot's copies are pending.
 * Returns CUDA_SUCCESS or the error (the snapshot is then lost; s waits
 * for every copy). */
CUresult ckpt_pace_touch(CUstream s, const uint64_t *addrs, size_t n);

/* Whether a snapshot's copies are pending: a write must wait for them. */
bool ckpt_pace_pending(void);

/* The same for work that may write anything: s (host: the calling
 * thread, for work whose stream is unknown) waits for every copy. */
CUresult ckpt_pace_touch_all(CUstream s, bool host);

/* The program is about to make its first device allocation: the shadow
 * for copies before writes (CKPT_SHADOW_MB) is taken first, so that it
 * lies in the same place in every run of the program. */
void ckpt_pace_shadow_take(void);

/* Writes need not wait for the copies one by one any more: every stream
 * of the program waits for them, they are done, or the snapshot is lost. */
void ckpt_pace_settled(void);

/* Blocks until every copy of the snapshot in flight and its done event
 * are queued (the committer waits on done only then).  Returns
 * CUDA_SUCCESS, or the error of a copy that failed: the snapshot is lost. */
CUresult ckpt_pace_wait_issued(void);

/* After done completed: puts the snapshot's copies on the timeline (one
 * event per batch, GPU-timed; copied_at is done's host time), learns the
 * copy rate, and fills the stats fragment (JSON members, no braces). */
void ckpt_pace_finished(uint64_t copied_at, uint64_t snap_iter, char *stats, size_t statslen);

/* An iteration ended at t_ns: re-profiles when due, publishes the
 * schedule into dir. */
void ckpt_pace_boundary(uint64_t iter, uint64_t t_ns, const char *dir, uint32_t rank);

/* Streams being captured into graphs right now. */
extern int ckpt_capturing;

/* ---- NVTX (nvtx.c): libckpt as the program's NVTX injection library. */

/* At load, for CKPT_BOUNDARY=nvtx:NAME: keeps NAME and points
 * NVTX_INJECTION64_PATH at libckpt.so (any other boundary: nothing).
 * Returns 0, or -EINVAL with one line in err when that variable names
 * another injection library or libckpt.so cannot find its own file. */
int ckpt_nvtx_setup(const char *boundary, char *err, size_t errlen);

/* ---- NCCL profiler plugin (profiler.c): collectives on the timeline. */

/* At load: points NCCL_PROFILER_PLUGIN at libckpt.so when the user named
 * no plugin there.  Returns 0, or -errno with one line in err (then the
 * NCCL wrappers' host times are all the timeline gets). */
int ckpt_profiler_setup(char *err, size_t errlen);

/* Communicators whose profiler init asked for events: now, and in all. */
extern int ckpt_prof_comms;
extern int ckpt_prof_inits;

/* Opens the rank's arena at wake (fresh: a new run, slots emptied) and
 * gives its directory.  Returns 0 or -errno (then no checkpointing). */
int ckpt_snapshot_open(bool fresh, char *dir, size_t dirlen);

/* After a restore: the snapshot engine goes on from that generation and
 * never overwrites its slot before a newer one is committed. */
void ckpt_snapshot_resumed(uint64_t generation, uint64_t iteration, int slot);

/* ---- history (history.c, replay.c): what the host saw of the device,
 * per thread, recorded in a fresh run and served back while a restarted
 * run replays. */

/* Non-zero while replaying: device work is suppressed. */
extern int ckpt_replaying;
/* ckpt_replaying, read as other threads may be changing it. */
static inline bool ckpt_is_replaying(void)
{
    return __atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE);
}

/* At wake: record (restore == 0) or prepare the restore of iteration
 * restore from the arena dir.  A restore that cannot be done ends the
 * process with CKPT_EXIT_RESTORE and the reason. */
void ckpt_history_init(const char *dir, uint64_t restore);
#define CKPT_EXIT_RESTORE 75
/* The status a rank under ckpt-resume ends with when, at its first
 * snapshot, the host cannot hold the arena (snapshot.c). */
#define CKPT_EXIT_ARENA 78

/* Ends the process with CKPT_EXIT_RESTORE, saying why to the user and to
 * ckpt-resume.  Only while replaying. */
__attribute__((noreturn, format(printf, 1, 2))) void ckpt_refuse(const char *fmt, ...);
/* A standby of a program that carries its own copy of NCCL refuses to
 * stand by, naming the object (static_nccl.c). */
void ckpt_refuse_static_nccl(void);

/* True when this run keeps a replay log (recording or replaying). */
bool ckpt_history_recording(void);

/* Replaying: thread's next record, of type; refuses on a divergence.
 * Returns false when the thread has no record left before the snapshot:
 * it has then waited for the restore, and goes on live. */
struct ckpt_rl_rec;
bool ckpt_history_next(uint64_t thread, int type, struct ckpt_rl_rec *rec);
/* Replaying: serves the asynchronous copies of thread's that replay holds
 * pending and whose bytes the recorded run saw as their call returned,
 * once their records show at the head of the thread's.  A standby's cut
 * may stop before such a record: another thread's iteration end can come
 * between the call and its record, and the copy is held pending until the
 * cut passes it. */
void ckpt_history_late_copies(uint64_t thread);
/* A call of the program that queues device work or frees memory.
 * Recording: counted for the calling thread.  Replaying: false when it was
 * made before the snapshot (suppress it as usual), true when this thread
 * is past the snapshot (it has waited for the restore: make the call). */
bool ckpt_history_work(void);
/* A boundary, on the thread that ends iterations, before its ITER: every
 * other thread's count goes into the log. */
void ckpt_history_work_boundary(void);
/* Replaying: threads that only polled before the snapshot are let go
 * (their queries answered "done", never waited for). */
void ckpt_history_release_pollers(void);
/* Recording: the program's calling thread changes allocator state (what:
 * "freed device memory"); a thread that had only polled taints the log. */
void ckpt_history_poller_changes(const char *what);
/* The calling thread made a record of type (what: a), recorded or, in
 * replay, served: a thread that polled before a restore and acted too is
 * no poller after it. */
void ckpt_history_count(int type, uint64_t a);

/* Replaying: when this thread has had all its records, waits for the
 * restore and returns true (the caller then makes its call for real). */
bool ckpt_history_dry_wait(void);
/* Replaying: the address the recorded run's next allocation on this
 * thread got, when its next record is one (its size checked later, by
 * ckpt_track); 0 when it is not, or the thread went live. */
uint64_t ckpt_history_alloc_at(void);
/* Replaying: when this thread's next record is the result of an exclusive
 * create (CKPT_VALUE_OPEN_EXCL), takes it: *err is the errno the recorded
 * run's open failed with, 0 when it created the file. */
bool ckpt_history_excl(int *err);

/* Room for the driver (addrspace.c): _hold at load holds address space
 * where the driver's ranges are to go.  Between _driver_starts and
 * _driver_started (around cuInit and the calls that make a context), what
 * this thread maps without an address goes there, whatever other threads
 * map meanwhile; _driver_started(true), after the first context is made,
 * lets the rest go. */
void ckpt_addrspace_hold(void);
void ckpt_addrspace_driver_starts(void);
void ckpt_addrspace_driver_started(bool made);

/* A standby's device memory (standby_mem.c): while it stands by, the
 * program's allocations are address reservations at the recorded
 * addresses.  _alloc and _free return true when they answered the call
 * (its result in *r); _back gives every reservation memory at takeover:
 * 0, or -1 with why. */
void ckpt_standby_mem_begin(void);
bool ckpt_standby_mem_on(void);
bool ckpt_standby_mem_alloc(CUresult *r, CUdeviceptr *dptr, size_t size, int how, CUstream s, void *pool);
bool ckpt_standby_mem_free(CUresult *r, CUdeviceptr p, CUstream stream, bool ordered);
int ckpt_standby_mem_back(char *why, size_t whylen);
/* The program read a memory pool's usage (reserved or used bytes): the
 * takeover refuses to hold stream-ordered memory outside the pools. */
void ckpt_standby_mem_pool_stats(void);
/* How an allocation was asked for, to be made the same way at takeover;
 * a free gives its allocation's, with CKPT_SMEM_ORDERED when it was made
 * in stream order. */
enum { CKPT_SMEM_PLAIN, CKPT_SMEM_ASYNC, CKPT_SMEM_POOL, CKPT_SMEM_NCCL, CKPT_SMEM_ORDERED = 16 };
/* The journal's allocations and frees made real (virtual.c walks it). */
void ckpt_standby_mem_make(int how, uint64_t addr, uint64_t size, CUstream s, void *pool);
void ckpt_standby_mem_unmake(int how, uint64_t addr, uint64_t size, CUstream s);

/* ---- a standby's contexts, streams and events (virtual.c): handles of
 * libckpt's while it follows (ckpt_v_state CKPT_V_VIRTUAL), made real at
 * the takeover or when the program makes a call they cannot answer
 * (CKPT_V_REAL; a rank stays CKPT_V_NONE).  The ckpt_v_ functions that
 * return bool answered the call (its result in *r) when true. */
enum { CKPT_V_NONE, CKPT_V_VIRTUAL, CKPT_V_REAL };
extern int ckpt_v_state;
static inline bool ckpt_v_on(void)
{
    return __builtin_expect(__atomic_load_n(&ckpt_v_state, __ATOMIC_ACQUIRE) == CKPT_V_VIRTUAL, 0);
}
void ckpt_v_begin(void);
/* The driver's handle for the program's h (a virtual one made real first). */
void *ckpt_v_real_(void *h);
static inline void *ckpt_v_real(void *h)
{
    return __builtin_expect(__atomic_load_n(&ckpt_v_state, __ATOMIC_RELAXED) != CKPT_V_NONE, 0) ? ckpt_v_real_(h) : h;
}
#define V(h) ((__typeof__(h))ckpt_v_real((void *)(h)))
/* The driver's handle for h if there is one yet, else h: never makes
 * anything real (a standby's suppressed launch names its function so). */
void *ckpt_v_peek_(void *h);
static inline void *ckpt_v_peek(void *h)
{
    return __builtin_expect(__atomic_load_n(&ckpt_v_state, __ATOMIC_RELAXED) != CKPT_V_NONE, 0) ? ckpt_v_peek_(h) : h;
}
/* Made real now (the takeover), or because of call (a promotion). */
void ckpt_v_make_real(const char *why);
void ckpt_v_promote(const char *call);
/* Once made real, each thread's current context follows its virtual one. */
extern __thread bool ckpt_v_synced;
void ckpt_v_sync_thread(void);
bool ckpt_v_primary_retain(CUresult *r, CUcontext *pctx, CUdevice dev);
bool ckpt_v_ctx_create(CUresult *r, CUcontext *pctx, unsigned flags, CUdevice dev, bool v4);
bool ckpt_v_stream_destroy(CUresult *r, CUstream s);
bool ckpt_v_hostfn(CUresult *r, CUstream s, CUhostFn fn, void *data);
bool ckpt_v_record(CUresult *r, CUevent e, CUstream s);
/* The thread that runs a standby's host functions in the order queued
 * (engine.c): _queue gives fn's position (0 when it cannot be queued),
 * _wait returns once everything up to a position has run, _queued is the
 * position of the last one queued. */
uint64_t ckpt_engine_queue(CUhostFn fn, void *data);
void ckpt_engine_wait(uint64_t at);
uint64_t ckpt_engine_queued(void);
/* Waits until the host functions a sync would wait for have run. */
enum { CKPT_V_WAIT_STREAM, CKPT_V_WAIT_EVENT, CKPT_V_WAIT_CTX };
bool ckpt_v_wait(CUresult *r, int what, const void *h);
/* The journal's order for device memory is this lock's: _lock is true
 * (locked) while the objects are virtual; _journal_alloc and _free need it. */
bool ckpt_v_lock(void);
void ckpt_v_unlock(void);
/* _alloc returns the allocation's entry, which its free names (@made). */
size_t ckpt_v_journal_alloc(int how, uint64_t addr, uint64_t size, CUstream s, void *pool);
void ckpt_v_journal_free(int how, uint64_t addr, uint64_t size, CUstream s, size_t made);
bool ckpt_v_journal_aside(uint64_t thread, const struct ckpt_rl_rec *rec);
bool ckpt_v_journal_load(CUfunction f);
/* A library's variable, answered from the log while virtual: made in the
 * real context at its place in the journal (driver.c's _make, which
 * refuses the takeover when the driver puts it anywhere else). */
bool ckpt_v_journal_variable(CUlibrary lib, const char *name, bool managed, uint64_t addr);
void ckpt_variable_make(CUlibrary lib, const char *name, bool managed, uint64_t recorded);
/* A function's first use loaded as a lazily loading driver would (stream.c). */
void ckpt_stream_load(CUfunction f);
/* The generated wrappers' arguments: handles translated on the way in
 * (CKPT_V_IN), a context or an event handed out given back as the
 * program's (CKPT_V_OUT).  Any type compiles; only handles are touched. */
void *ckpt_v_arg(const void *p);
void ckpt_v_back_arg(const void *pp);
void ckpt_v_back_event_arg(const void *pp);
#define CKPT_V_IN(x)                                                           \
    _Generic((x), CUcontext: (CUcontext)ckpt_v_arg(&(x)), CUstream: (CUstream)ckpt_v_arg(&(x)), \
             CUevent: (CUevent)ckpt_v_arg(&(x)), CUfunction: (CUfunction)ckpt_v_arg(&(x)), default: (x))
#define CKPT_V_OUT(x)                                                          \
    _Generic((x), CUcontext *: ckpt_v_back_arg(&(x)), CUevent *: ckpt_v_back_event_arg(&(x)), default: (void)0)
/* f applied to each of up to 16 arguments, as a list or as statements. */
#define CKPT_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, n, ...) n
#define CKPT_NARGS(...) CKPT_NARGS_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define CKPT_CAT_(a, b) a##b
#define CKPT_CAT(a, b) CKPT_CAT_(a, b)
#define CKPT_MAP(f, ...) CKPT_CAT(CKPT_MAP_, CKPT_NARGS(__VA_ARGS__))(f, __VA_ARGS__)
#define CKPT_MAP_1(f, a) f(a)
#define CKPT_MAP_2(f, a, ...) f(a), CKPT_MAP_1(f, __VA_ARGS__)
#define CKPT_MAP_3(f, a, ...) f(a), CKPT_MAP_2(f, __VA_ARGS__)
#define CKPT_MAP_4(f, a, ...) f(a), CKPT_MAP_3(f, __VA_ARGS__)
#define CKPT_MAP_5(f, a, ...) f(a), CKPT_MAP_4(f, __VA_ARGS__)
#define CKPT_MAP_6(f, a, ...) f(a), CKPT_MAP_5(f, __VA_ARGS__)
#define CKPT_MAP_7(f, a, ...) f(a), CKPT_MAP_6(f, __VA_ARGS__)
#define CKPT_MAP_8(f, a, ...) f(a), CKPT_MAP_7(f, __VA_ARGS__)
#define CKPT_MAP_9(f, a, ...) f(a), CKPT_MAP_8(f, __VA_ARGS__)
#define CKPT_MAP_10(f, a, ...) f(a), CKPT_MAP_9(f, __VA_ARGS__)
#define CKPT_MAP_11(f, a, ...) f(a), CKPT_MAP_10(f, __VA_ARGS__)
#define CKPT_MAP_12(f, a, ...) f(a), CKPT_MAP_11(f, __VA_ARGS__)
#define CKPT_MAP_13(f, a, ...) f(a), CKPT_MAP_12(f, __VA_ARGS__)
#define CKPT_MAP_14(f, a, ...) f(a), CKPT_MAP_13(f, __VA_ARGS__)
#define CKPT_MAP_15(f, a, ...) f(a), CKPT_MAP_14(f, __VA_ARGS__)
#define CKPT_MAP_16(f, a, ...) f(a), CKPT_MAP_15(f, __VA_ARGS__)
#define CKPT_MAP_STMT(f, ...) (CKPT_MAP(f, __VA_ARGS__))

/* A communicator the program holds, as NCCL knows it: c itself, or a
 * standby's virtual one made real (comm.c).  NULL with *err set when it
 * cannot be. */
ncclComm_t ckpt_comm_real(ncclComm_t c, ncclResult_t *err);
/* The reduction operator to give NCCL for op on the program's comm: the
 * real one for a standby's operator made at the takeover, else op. */
ncclRedOp_t ckpt_comm_op(ncclComm_t comm, ncclRedOp_t op);
/* The real window behind the program's handle (a standby's virtual one once
 * its communicator is made), NULL when there is none. */
ncclWindow_t ckpt_comm_window(ncclWindow_t win);
/* A standby's pinned host memory (hostmem.c): ordinary memory while it
 * stands by, registered at takeover (0, or -1 with why). */
int ckpt_standby_host_back(char *why, size_t whylen);

/* What the host observed (the answer's meaning, in the log). */
enum ckpt_obs {
    CKPT_OBS_STREAM_SYNC = 1,
    CKPT_OBS_CTX_SYNC,
    CKPT_OBS_EVENT_SYNC,
    CKPT_OBS_EVENT_QUERY,
    CKPT_OBS_STREAM_QUERY,
    CKPT_OBS_DTOH,
    CKPT_OBS_HTOD,
    CKPT_OBS_MEMCPY,
    CKPT_OBS_BOUNDARY,
};
const char *ckpt_obs_name(enum ckpt_obs what);

/* Recording: the program's call what (on stream, or NULL) returned r.
 * Copies it orders (the thread's own, the stream's) that completed become
 * visible here. */
void ckpt_history_observed(enum ckpt_obs what, CUresult r, CUstream stream);
/* The same for a synchronous copy of size bytes into host memory at dst,
 * which returned r: its bytes (when it succeeded) and the observation are
 * logged as one, so that no iteration's end falls between them. */
void ckpt_history_observed_d2h(enum ckpt_obs what, CUresult r, void *dst, size_t size);
/* Replaying: the answer the recorded run got, in *r, with the copies that
 * became visible there served; false when this thread has gone live (make
 * the real call). */
bool ckpt_history_answer(enum ckpt_obs what, CUresult *r);

/* A program allocation: recorded, or checked against the recorded one
 * (an address that differs is kept, see ckpt_replay_address). */
void ckpt_history_alloc(uint64_t ordinal, uint64_t size, uint64_t addr);
/* Replaying: allocation ordinal is at addr, recorded at recorded; a
 * restore with it live at a different address is refused. */
void ckpt_replay_address(uint64_t ordinal, uint64_t addr, uint64_t recorded);
/* Replaying a synchronous device-to-host copy into dst: its bytes served
 * from the log instead of it (true), or false when this thread has gone
 * live (make the copy; it is recorded by ckpt_history_observed_d2h). */
bool ckpt_history_d2h(void *dst, size_t size);
/* An asynchronous one, queued on stream (pinned destination): its bytes
 * are logged where the host can first see them. */
void ckpt_history_d2h_async(void *dst, CUdeviceptr src, size_t size, CUstream stream);
/* Device memory a library took for itself on a program thread's behalf
 * (NCCL's buffers, on its calling thread or on a thread it started):
 * recorded in that thread's log, where a standby holds the same addresses
 * (standby_mem.c) so that the program's next allocations land where they
 * did.  what: one of these (an allocation, an address range reserved, or
 * either given back). */
enum ckpt_aside { CKPT_ASIDE_ALLOC = 1, CKPT_ASIDE_FREE, CKPT_ASIDE_RESERVE };
void ckpt_history_aside(uint64_t thread, enum ckpt_aside what, uint64_t addr, uint64_t size);
/* A standby replaying one of thread's (called as replay steps over it);
 * and, gone live, saying in the log that what it held is given back. */
void ckpt_standby_mem_aside(uint64_t thread, const struct ckpt_rl_rec *rec);
void ckpt_standby_mem_live(void);
/* A value the host read (an elapsed time): recorded, or replaced.  What
 * it is: one of these (the pool attribute or NCCL's answer added). */
enum ckpt_value {
    CKPT_VALUE_ELAPSED = 1,
    CKPT_VALUE_MEMINFO_FREE,
    CKPT_VALUE_MEMINFO_TOTAL,
    CKPT_VALUE_POOL_ATTR = 0x100, /* + the attribute */
    CKPT_VALUE_NCCL = 0x200,      /* + what comm.c asked */
    CKPT_VALUE_OPEN_EXCL = 0x300, /* an O_CREAT | O_EXCL open: 0 or its errno */
    CKPT_VALUE_VARIABLE = 0x400,  /* a device variable's address (all ones: not found) */
    CKPT_VALUE_VARIABLE_SIZE,     /* and its size (or the call's error) */
    CKPT_VALUE_QUERY = 0x100000,  /* + 16 x the hook + the argument (query.c) */
};
bool ckpt_history_value(uint64_t what, uint64_t *value); /* true: replaced (served) */
/* A host function queued on stream: *fn and *data are replaced by a
 * wrapper that sees the copies before it (true), which the caller frees
 * with ckpt_history_hostfn_failed when the real call fails. */
bool ckpt_history_hostfn(CUstream stream, CUhostFn *fn, void **data);
void ckpt_history_hostfn_failed(void *data);
/* From the current iteration on, replay cannot be faithful: why goes in
 * the log (restores past it are refused with it) and is said once. */
void ckpt_history_taint(const char *why);

/* Room for element n of the array *arr of *cap elements of elem bytes, doubling it: false when out of memory. */
static inline bool ckpt_grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, c * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

/* Graph-owned memory (graphmem.c): an allocation inside a capture on s, a
 * capture that ended with graph g, whether p is such an allocation, its
 * free (in a capture or after a launch; real_free with hStream, which
 * replay may suppress), an executable graph's launch (real, or suppressed
 * by replay), and whether any is live now (why: what, for the log). */
void ckpt_graphmem_alloc(CUstream s, CUdeviceptr p, uint64_t size);
void ckpt_graphmem_ended(CUgraph g);
bool ckpt_graphmem_owns(CUdeviceptr p);
CUresult ckpt_graphmem_free(CUdeviceptr p, bool in_capture, CUresult (*real_free)(CUdeviceptr, CUstream),
                            CUstream hStream);
void ckpt_graphmem_launched(CUgraphExec e, bool real);
bool ckpt_graphmem_live(char *why, size_t len);
/* Whether s is being captured into a graph (stream.c). */
bool ckpt_stream_capturing(CUstream s);
/* The restore goes live: copies still pending in replay are made now. */
void ckpt_history_forget(void);
/* An iteration ended.  Returns true when a snapshot may be taken. */
bool ckpt_history_boundary(uint64_t iter);
/* A boundary's record of the length of a file the program writes (open
 * with flags). */
void ckpt_history_file(uint64_t size, int flags, const char *path);
/* Appends a record of type with field a for this thread (replay.c's ITER). */
void ckpt_history_put(int type, uint64_t a);
/* The restore of iteration went live: from here on the run is checked
 * against what the failed run logged after that point. */
void ckpt_history_check_from(uint64_t iteration);
/* A live boundary: says so once the failed run's records ran out. */
void ckpt_history_checked_boundary(void);
/* The value the failed run read at this thread's next read (what), for a
 * read the resumed run cannot make faithfully itself; false when none. */
bool ckpt_history_failed_value(uint64_t what, uint64_t *value);

/* Logs a call on a connection to the job's rendezvous (rendezvous.c). */
void ckpt_history_sock(uint64_t conn, uint64_t what, int64_t result, const void *bytes, uint32_t len);

/* ---- the job's rendezvous (rendezvous.c): served from the log to a
 * standby started alone. */

/* At load: alone is CKPT_FOLLOW_ALONE (with CKPT_FOLLOW). */
void ckpt_rendezvous_init(bool alone);
/* A restore goes live, every thread at the snapshot: a standby alone
 * refuses if the program still holds a connection or listener it was
 * served, and may not reach the rendezvous again until it is live. */
void ckpt_rendezvous_live(void);

/* ---- files (world.c): what a replaying program writes goes aside. */

/* At load: this process replays iteration restore (0: it records). */
void ckpt_world_init(uint64_t restore, bool follow);
/* This process replays: what the program prints goes to the arena until
 * the restore goes live. */
void ckpt_world_quiet(void);
/* That file while it is in use, else NULL. */
const char *ckpt_world_output(void);
/* A boundary: recording, logs the lengths of the files the program writes;
 * replaying, reads them. */
void ckpt_world_boundary(void);
/* The restore goes live: the files the program holds open for writing
 * are the real ones again, as long as they were at the snapshot. */
void ckpt_world_live(void);

/* ---- what came through the hooks (hookstats.c), said at exit with
 * CKPT_LOG=debug; below that level these return at once. */
enum ckpt_hookstat { CKPT_HS_LAUNCH, CKPT_HS_ALLOC };
/* One call of kind which, made from return address caller; internal: an
 * allocation NCCL made for itself. */
void ckpt_hookstat(enum ckpt_hookstat which, const void *caller, bool internal);
/* One tracked cuMemMap'ed range. */
void ckpt_hookstat_vmm(uint64_t size, bool internal);

/* ---- CKPT_FAULT (fault.c) */
void ckpt_fault_init(const char *rank_dir);
/* phase: an enum ckpt_fault_phase (config.h).  Restore, replay and persist
 * fire at the first point whose iteration is at or past CKPT_FAULT's. */
void ckpt_fault_point(int phase, uint64_t iteration);

#endif
