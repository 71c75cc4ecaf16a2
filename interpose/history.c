/*
 * What the host saw of the device, per thread and in order: recorded while
 * the program runs, served back while a restarted run replays (replay.c).
 * An observation is anything whose answer the host can act on: a sync
 * returning, a query's answer (an allocator reuses a block when its event
 * is done), an elapsed time, free memory, an allocation's address, and the
 * bytes of device-to-host copies at the moment they became visible: a
 * synchronous copy when it returns (an asynchronous one into pageable
 * memory too), an asynchronous one at the first observation of its thread
 * or of its stream after it completed (libckpt records an event of its
 * own behind each), or inside the host function that follows it on its
 * stream.  A copy whose bytes became visible only after the snapshot's
 * boundary is made again, for real, when the restore goes live.  What cannot be
 * replayed faithfully (the host reading memory a kernel wrote without a
 * copy, a graph that writes host memory) taints the log from that
 * iteration on, with the reason: a restore past it is refused, loudly.
 * Calls libckpt makes for itself never enter the log.
 */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "boundary.h"
#include "config.h"
#include "interpose.h"
#include "log.h"
#include "replay.h"

/* An asynchronous copy to the host whose bytes have not been seen yet. */
struct pending {
    uint64_t issuer, seq; /* the thread that queued it, and its copy number there */
    void *dst;
    CUdeviceptr src;
    size_t size;
    CUstream stream;
    CUevent done; /* recorded behind it (recording only) */
    CUcontext ctx;
};

/* A copy whose bytes the host saw as the call returned (pageable memory,
 * where CUDA's asynchronous copy is synchronous, or a copy that was that
 * fast) is logged at once, its number marked with AT_RETURN. */
#define AT_RETURN (1ULL << 63)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER; /* a copy was queued or served */
static struct pending *pend;
static size_t npend, pend_cap;
static __thread uint64_t copies, hostfns;

/* Spare events, by context: one per copy in flight. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static struct spare {
    CUevent ev;
    CUcontext ctx;
} *spares;
static size_t nspares, spare_cap;

static bool tainted;

/* After the restore went live: the resumed run is checked against what
 * the failed run logged after the same point, until that runs out. */
static bool checking, deterministic;
static uint64_t checked, restored_at;
static void check(int type, uint64_t t, uint64_t a, uint64_t b, uint64_t c, const void *payload, uint32_t len);

/* ---- pollers.  A thread that has only polled (event and stream queries)
 * asks as often as time makes it, not as the program's logic does: PyTorch's
 * NCCL watchdog looks at its work's events every 100 ms.  Replay lets such
 * a thread go (ckpt_history_release_pollers): its queries are answered
 * "done", as everything is while device work is suppressed, and no one
 * waits for it to ask as often as it did.  That is faithful only while what
 * it learns stays in its own hands: when a thread that has only polled
 * then allocates, frees or records an event, the log is tainted. */
static __thread uint64_t polls, acts; /* this thread's queries, and its other records */

static bool is_poll(uint64_t what)
{
    return what == CKPT_OBS_EVENT_QUERY || what == CKPT_OBS_STREAM_QUERY;
}

static bool only_polls(int type, uint64_t a)
{
    return (type == CKPT_RL_OBSERVE && is_poll(a)) || type == CKPT_RL_ASIDE;
}

void ckpt_history_release_pollers(void)
{
    uint64_t answers;
    size_t n = ckpt_rlog_release(only_polls, &answers);
    if (n)
        ckpt_log(CKPT_INFO, "%zu thread%s only polled before the snapshot (%llu queries): replay answers %s "
                 "itself and does not wait for %s", n, n == 1 ? "" : "s", (unsigned long long)answers,
                 n == 1 ? "it" : "them", n == 1 ? "it" : "them");
}

void ckpt_history_count(int type, uint64_t a)
{
    if (type == CKPT_RL_OBSERVE && is_poll(a))
        polls++;
    else if (type != CKPT_RL_TAINT && type != CKPT_RL_ASIDE && type != CKPT_RL_SOCK)
        acts++;
}

void ckpt_history_poller_changes(const char *what)
{
    if (!polls || acts || ckpt_is_replaying() || !ckpt_active || ckpt_self_depth || ckpt_nccl_depth ||
        ckpt_thread_internal || !ckpt_history_recording())
        return;
    char why[256];
    snprintf(why, sizeof(why), "a thread that had only polled (%llu queries) %s: replay answers a poller's queries "
             "itself, so it cannot make the same choice", (unsigned long long)polls, what);
    ckpt_history_taint(why);
}

/* ---- device work of the threads that do not end iterations.  A thread's
 * records say what it saw, not what it queued: a thread whose last call
 * before the snapshot queued device work (an averaging kernel on a stream
 * of its own) would, in replay, be past all its records there, and run
 * that work again once the restore went live, over the snapshot that
 * already holds it.  So each thread counts the calls that queue device
 * work or free memory, and the count goes into the log as a WORK record
 * ahead of the thread's next record, or at the boundary for every thread;
 * replay hands them out one call at a time.  The thread that ends the
 * iterations is never past its records before the snapshot (its last one
 * is the boundary's), so from the first boundary on it counts nothing. */
#define MAX_WORKERS 1024
static struct worker {
    uint64_t key, queued;
} workers[MAX_WORKERS];
static unsigned nworkers;
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread struct worker *me;
static uint64_t ender; /* the thread that ends iterations: 0 until the first boundary */
static __thread bool i_end; /* this thread is ender */

static struct worker *worker(void)
{
    if (me)
        return me;
    pthread_mutex_lock(&work_lock);
    if (nworkers < MAX_WORKERS) {
        me = &workers[nworkers];
        me->key = ckpt_thread_key();
        __atomic_store_n(&nworkers, nworkers + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&work_lock);
    if (!me)
        ckpt_history_taint("more than 1024 threads queue device work");
    return me;
}

/* w's count into the log, ahead of anything w appends next.  Under
 * work_lock, so that a count taken by the boundary lands before the
 * record its thread appends after it. */
static void flush_work(struct worker *w)
{
    if (!__atomic_load_n(&w->queued, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&work_lock);
    uint64_t n = __atomic_exchange_n(&w->queued, 0, __ATOMIC_ACQ_REL);
    if (n)
        ckpt_rlog_append(CKPT_RL_WORK, w->key, n, 0, 0, NULL, 0);
    pthread_mutex_unlock(&work_lock);
}

bool ckpt_history_work(void)
{
    if (i_end)
        return false; /* the common case, first: no other test on the hot path */
    if (!ckpt_active || ckpt_self_depth || ckpt_nccl_depth || ckpt_thread_internal || !ckpt_history_recording())
        return false;
    uint64_t t = ckpt_thread_key();
    if (t == __atomic_load_n(&ender, __ATOMIC_ACQUIRE))
        return false;
    if (!ckpt_is_replaying()) {
        struct worker *w = worker();
        if (w)
            __atomic_add_fetch(&w->queued, 1, __ATOMIC_RELEASE);
        return false;
    }
    struct ckpt_rl_rec rec;
    if (ckpt_rlog_peek(t, &rec) == CKPT_RL_WORK) {
        ckpt_history_next(t, CKPT_RL_WORK, &rec);
        return false; /* queued before the snapshot: suppressed */
    }
    if (!ckpt_history_dry_wait())
        return false;
    /* Past the snapshot: made for real, now that the restore is live, and
     * counted as live work is (the restored run's log may be replayed in turn). */
    struct worker *w = worker();
    if (w)
        __atomic_add_fetch(&w->queued, 1, __ATOMIC_RELEASE);
    return true;
}

void ckpt_history_work_boundary(void)
{
    uint64_t t = ckpt_thread_key();
    uint64_t none = 0;
    if (__atomic_compare_exchange_n(&ender, &none, t, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || none == t)
        i_end = true;
    if (ckpt_is_replaying())
        return;
    unsigned n = __atomic_load_n(&nworkers, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if (workers[i].key != t)
            flush_work(&workers[i]);
}

/* Every record this file appends goes through here. */
static void put(enum ckpt_rl_type type, uint64_t t, uint64_t a, uint64_t b, uint64_t c, const void *payload,
                uint32_t len)
{
    if (me && me->key == t)
        flush_work(me);
    ckpt_history_count(type, a);
    ckpt_rlog_append(type, t, a, b, c, payload, len);
    if (__builtin_expect(__atomic_load_n(&checking, __ATOMIC_ACQUIRE), 0))
        check(type, t, a, b, c, payload, len);
}

void ckpt_history_sock(uint64_t conn, uint64_t what, int64_t result, const void *bytes, uint32_t len)
{
    put(CKPT_RL_SOCK, ckpt_thread_key(), conn, what, (uint64_t)result, bytes, len);
}

void ckpt_history_file(uint64_t size, int flags, const char *path)
{
    put(CKPT_RL_FILE, ckpt_thread_key(), size, (uint64_t)(unsigned)flags, 0, path, (uint32_t)strlen(path));
}

/* Under the lock: an iteration's end never falls between an observation
 * and the copies it settled, which a standby's cut would part. */
void ckpt_history_put(int type, uint64_t a)
{
    pthread_mutex_lock(&lock);
    put((enum ckpt_rl_type)type, ckpt_thread_key(), a, 0, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
}

/* The driver calls libckpt makes here for itself, resolved once. */
static pthread_once_t resolved = PTHREAD_ONCE_INIT;
static const char *missing;
static void resolve(void)
{
    static const char *const needed[] = {"cuCtxGetCurrent",    "cuEventCreate",      "cuEventRecord",
                                         "cuEventQuery",       "cuEventSynchronize", "cuStreamSynchronize",
                                         "cuStreamIsCapturing"};
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++)
        if (ckpt_resolve(needed[i]) < 0)
            missing = needed[i];
    ckpt_resolve("cuThreadExchangeStreamCaptureMode"); /* optional: older drivers */
}

void ckpt_history_taint(const char *why)
{
    if (!ckpt_history_recording() || ckpt_is_replaying() || __atomic_exchange_n(&tainted, true, __ATOMIC_ACQ_REL))
        return;
    uint64_t it = ckpt_bd_iteration() + 1;
    put(CKPT_RL_TAINT, ckpt_thread_key(), it, 0, 0, why, (uint32_t)strlen(why));
    ckpt_log(CKPT_WARN, "snapshots from iteration %llu on cannot be restored by replay: %s",
             (unsigned long long)it, why);
}

/* A spare event of context ctx, or NULL. */
static CUevent take_event(CUcontext ctx)
{
    pthread_mutex_lock(&spare_lock);
    for (size_t i = nspares; i-- > 0;) {
        if (spares[i].ctx == ctx) {
            CUevent ev = spares[i].ev;
            spares[i] = spares[--nspares];
            pthread_mutex_unlock(&spare_lock);
            return ev;
        }
    }
    pthread_mutex_unlock(&spare_lock);
    CUevent ev = NULL;
    if (real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        return NULL;
    return ev;
}

static void give_event(CUevent ev, CUcontext ctx)
{
    pthread_mutex_lock(&spare_lock);
    if (ckpt_grow((void **)&spares, &spare_cap, nspares, sizeof(*spares)))
        spares[nspares++] = (struct spare){ev, ctx};
    pthread_mutex_unlock(&spare_lock);
}

static void log_copy(uint64_t thread, const struct pending *p)
{
    if (p->size > UINT32_MAX)
        ckpt_history_taint("a device-to-host copy larger than 4 GiB (its bytes do not fit the replay log)");
    else
        put(CKPT_RL_D2H, thread, p->size, p->issuer, p->seq, p->dst, (uint32_t)p->size);
}

/* Recording: logs, under thread, every pending copy that has completed
 * and that this observation orders: the thread's own and those on stream.  Another thread's copy that merely happens to be done
 * is left to that thread: in replay the bytes must reach the host before
 * the thread that reads them looks.  Lock held: never waits, since a host
 * function waited for may need the lock. */
static void settle(uint64_t thread, CUstream stream)
{
    if (!npend)
        return;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool relax = __atomic_load_n(&ckpt_capturing, __ATOMIC_RELAXED) > 0 && real_cuThreadExchangeStreamCaptureMode;
    ckpt_self_depth++;
    if (relax) /* our queries must not invalidate another thread's capture */
        real_cuThreadExchangeStreamCaptureMode(&mode);
    for (size_t i = 0; i < npend;) {
        struct pending *p = &pend[i];
        if (p->issuer != thread && (!stream || p->stream != stream)) {
            i++;
            continue;
        }
        CUresult r = real_cuEventQuery(p->done);
        if (r == CUDA_ERROR_NOT_READY) {
            i++;
            continue;
        }
        if (r != CUDA_SUCCESS)
            ckpt_history_taint("libckpt could not tell when a device-to-host copy completed");
        log_copy(thread, p);
        give_event(p->done, p->ctx);
        *p = pend[--npend];
    }
    if (relax)
        real_cuThreadExchangeStreamCaptureMode(&mode);
    ckpt_self_depth--;
}

/* The pending copy (issuer, seq), waiting up to 10 s for another thread
 * of the replaying run to queue it; npend when it never comes.  Lock held. */
static size_t find_copy(uint64_t issuer, uint64_t seq)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    for (;;) {
        for (size_t i = 0; i < npend; i++)
            if (pend[i].issuer == issuer && pend[i].seq == seq)
                return i;
        if (pthread_cond_timedwait(&changed, &lock, &until) != 0)
            return npend;
    }
}

/* The pending copy number @seq of @thread, or npend.  Lock held. */
static size_t own_copy(uint64_t thread, uint64_t seq)
{
    size_t i = 0;
    while (i < npend && !(pend[i].issuer == thread && pend[i].seq == seq))
        i++;
    return i;
}

/* Replaying: the bytes of @rec go into pending copy @i (npend: none, which
 * refuses), which is done.  Lock held; released. */
static void fill(size_t i, const struct ckpt_rl_rec *rec)
{
    if (i == npend || pend[i].size != rec->a || rec->len != rec->a) {
        pthread_mutex_unlock(&lock);
        ckpt_refuse("the recorded run saw the bytes of an asynchronous copy of %llu bytes that the "
                    "replaying program has not made", (unsigned long long)rec->a);
    }
    memcpy(pend[i].dst, rec->payload, rec->len);
    pend[i] = pend[--npend];
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* Replaying: the asynchronous copies' records that follow thread's
 * position go into the copies they belong to. */
static void serve_copies(uint64_t thread)
{
    struct ckpt_rl_rec rec;
    while (ckpt_rlog_peek(thread, &rec) == CKPT_RL_D2H && rec.c && !(rec.c & AT_RETURN)) {
        ckpt_history_next(thread, CKPT_RL_D2H, &rec);
        pthread_mutex_lock(&lock);
        fill(find_copy(rec.b, rec.c), &rec);
    }
}

void ckpt_history_late_copies(uint64_t thread)
{
    struct ckpt_rl_rec rec;
    while (ckpt_rlog_peek(thread, &rec) == CKPT_RL_D2H && (rec.c & AT_RETURN)) {
        uint64_t seq = rec.c & ~AT_RETURN;
        pthread_mutex_lock(&lock);
        bool mine = own_copy(thread, seq) < npend;
        pthread_mutex_unlock(&lock);
        if (!mine)
            return; /* not a copy of this thread's that replay holds pending */
        ckpt_history_next(thread, CKPT_RL_D2H, &rec);
        pthread_mutex_lock(&lock); /* another thread's fill may have moved it */
        fill(own_copy(thread, seq), &rec);
    }
}

void ckpt_history_observed(enum ckpt_obs what, CUresult r, CUstream stream)
{
    if (!ckpt_history_recording())
        return;
    uint64_t t = ckpt_thread_key();
    pthread_mutex_lock(&lock);
    put(CKPT_RL_OBSERVE, t, what, (uint64_t)r, 0, NULL, 0);
    settle(t, stream);
    pthread_mutex_unlock(&lock);
}

bool ckpt_history_answer(enum ckpt_obs what, CUresult *r)
{
    uint64_t t = ckpt_thread_key();
    struct ckpt_rl_rec rec;
    if (is_poll(what) && ckpt_rlog_released(t)) {
        *r = CUDA_SUCCESS;
        return true;
    }
    if (!ckpt_history_next(t, CKPT_RL_OBSERVE, &rec))
        return false; /* this thread has gone live */
    if (rec.a != (uint64_t)what)
        ckpt_refuse("the program made host observation %s where the recorded run made %s", ckpt_obs_name(what),
                    ckpt_obs_name((enum ckpt_obs)rec.a));
    *r = (CUresult)rec.b;
    serve_copies(t);
    return true;
}

/* A synchronous copy's bytes went into the log apart from the observation
 * that returned them (other locks), and a cut could fall between: a
 * restore then served the bytes, found the thread's log dry at the
 * observation, and made the copy again, live, from device memory as the
 * snapshot held it, later than the copy the recorded run made. */
void ckpt_history_observed_d2h(enum ckpt_obs what, CUresult r, void *dst, size_t size)
{
    if (!ckpt_history_recording())
        return;
    uint64_t t = ckpt_thread_key();
    struct pending p = {.issuer = t, .seq = 0, .dst = dst, .size = size};
    pthread_mutex_lock(&lock);
    if (r == CUDA_SUCCESS)
        log_copy(t, &p);
    put(CKPT_RL_OBSERVE, t, what, (uint64_t)r, 0, NULL, 0);
    settle(t, NULL);
    pthread_mutex_unlock(&lock);
}

bool ckpt_history_d2h(void *dst, size_t size)
{
    uint64_t t = ckpt_thread_key();
    struct ckpt_rl_rec rec;
    if (!ckpt_is_replaying())
        return false;
    ckpt_history_late_copies(t);
    if (!ckpt_history_next(t, CKPT_RL_D2H, &rec))
        return false;
    if (rec.a != size || rec.len != size || rec.c)
        ckpt_refuse("a device-to-host copy of %zu bytes, the recorded run copied %llu", size,
                    (unsigned long long)rec.a);
    memcpy(dst, rec.payload, size);
    return true;
}


void ckpt_history_d2h_async(void *dst, CUdeviceptr src, size_t size, CUstream stream)
{
    if (!ckpt_history_recording())
        return;
    uint64_t t = ckpt_thread_key();
    struct pending p = {.issuer = t, .seq = ++copies, .dst = dst, .src = src, .size = size, .stream = stream};
    if (ckpt_is_replaying()) {
        struct ckpt_rl_rec rec;
        ckpt_history_late_copies(t);
        if (ckpt_rlog_peek(t, &rec) == CKPT_RL_D2H && rec.c == (p.seq | AT_RETURN)) {
            ckpt_history_next(t, CKPT_RL_D2H, &rec);
            if (rec.a != size || rec.len != size)
                ckpt_refuse("a device-to-host copy of %zu bytes, the recorded run copied %llu", size,
                            (unsigned long long)rec.a);
            memcpy(dst, rec.payload, size);
            return;
        }
        /* Not there yet (a standby's cut may stop before it): pending,
         * served when it shows (ckpt_history_late_copies). */
    }
    if (!ckpt_is_replaying()) {
        pthread_once(&resolved, resolve);
        if (missing) {
            ckpt_history_taint("the driver lacks an entry point libckpt follows copies with");
            return;
        }
        ckpt_self_depth++;
        CUresult r = CUDA_ERROR_UNKNOWN;
        if (!ckpt_host_pinned(dst, size))
            r = CUDA_SUCCESS; /* pageable: CUDA has finished the copy when the call returns */
        else if (real_cuCtxGetCurrent(&p.ctx) == CUDA_SUCCESS && (p.done = take_event(p.ctx)) &&
                 real_cuEventRecord(p.done, V(stream)) == CUDA_SUCCESS)
            r = real_cuEventQuery(p.done);
        else if (real_cuStreamSynchronize(V(stream)) == CUDA_SUCCESS)
            r = CUDA_SUCCESS; /* no event to follow it by: its bytes are there once the stream is idle */
        ckpt_self_depth--;
        if (r != CUDA_ERROR_NOT_READY) {
            if (r == CUDA_SUCCESS) {
                p.seq |= AT_RETURN;
                log_copy(t, &p);
            } else {
                ckpt_history_taint("libckpt could not follow a device-to-host copy");
            }
            if (p.done)
                give_event(p.done, p.ctx);
            return;
        }
    }
    pthread_mutex_lock(&lock);
    if (!ckpt_grow((void **)&pend, &pend_cap, npend, sizeof(*pend))) {
        pthread_mutex_unlock(&lock);
        if (ckpt_is_replaying())
            ckpt_refuse("out of host memory");
        ckpt_history_taint("out of host memory for the copies the host has not seen yet");
        give_event(p.done, p.ctx);
        return;
    }
    pend[npend++] = p;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

void ckpt_history_aside(uint64_t t, enum ckpt_aside what, uint64_t addr, uint64_t size)
{
    if (ckpt_is_replaying() || !t || ckpt_self_depth || !ckpt_history_recording())
        return;
    pthread_mutex_lock(&lock);
    put(CKPT_RL_ASIDE, t, size, addr, what, NULL, 0);
    pthread_mutex_unlock(&lock);
}

/* A thread whose log runs dry in replay waits there for the restore, and
 * the record it was to be served is then what the live run saw: logged,
 * as the restored run's own log must say it (it may be restored in turn). */
bool ckpt_history_value(uint64_t what, uint64_t *value)
{
    uint64_t t = ckpt_thread_key();
    if (ckpt_is_replaying()) {
        struct ckpt_rl_rec rec;
        if (ckpt_history_next(t, CKPT_RL_VALUE, &rec)) {
            if (rec.a != what)
                ckpt_refuse("the program read value %llu where the recorded run read value %llu",
                            (unsigned long long)what, (unsigned long long)rec.a);
            *value = rec.b;
            return true;
        }
    }
    if (ckpt_history_recording()) /* live: the real value stands */
        put(CKPT_RL_VALUE, t, what, *value, 0, NULL, 0);
    return false;
}

void ckpt_history_alloc(uint64_t ordinal, uint64_t size, uint64_t addr)
{
    uint64_t t = ckpt_thread_key();
    if (ckpt_is_replaying()) {
        struct ckpt_rl_rec rec;
        if (ckpt_history_next(t, CKPT_RL_ALLOC, &rec)) {
            if (rec.a != ordinal || rec.b != size)
                ckpt_refuse("the program diverged from its recorded run: it made allocation %llu of %llu bytes "
                            "where the recorded run made allocation %llu of %llu bytes",
                            (unsigned long long)ordinal, (unsigned long long)size, (unsigned long long)rec.a,
                            (unsigned long long)rec.b);
            ckpt_replay_address(ordinal, addr, rec.c);
            return;
        }
    }
    if (ckpt_history_recording()) { /* live (a dry thread's, once the restore went live: logged, as values are) */
        ckpt_history_poller_changes("allocated device memory");
        put(CKPT_RL_ALLOC, t, ordinal, size, addr, NULL, 0);
    }
}

/* ---- host functions: each runs under a key of its own, derived from the
 * thread that queued it, and sees the copies queued before it. */

struct hostfn {
    CUhostFn fn;
    void *data;
    uint64_t key;
    CUstream stream;
    uint64_t issuer, upto; /* replay: the copies of issuer on stream before it */
};

/* Replaying: true while a copy queued on h's stream before h is unseen. */
static bool copies_before(const struct hostfn *h)
{
    for (size_t i = 0; i < npend; i++)
        if (pend[i].stream == h->stream && pend[i].issuer == h->issuer && pend[i].seq <= h->upto)
            return true;
    return false;
}

static void run_hostfn(void *p)
{
    struct hostfn h = *(struct hostfn *)p;
    free(p);
    if (ckpt_is_replaying()) {
        serve_copies(h.key);
        /* In stream order, after the bytes it may read: served at an
         * observation of another thread, or at the boundary. */
        pthread_mutex_lock(&lock);
        while (ckpt_is_replaying() && copies_before(&h))
            pthread_cond_wait(&changed, &lock);
        pthread_mutex_unlock(&lock);
    } else if (ckpt_history_recording()) {
        pthread_mutex_lock(&lock);
        settle(h.key, h.stream);
        pthread_mutex_unlock(&lock);
    }
    h.fn(h.data);
}

bool ckpt_history_hostfn(CUstream stream, CUhostFn *fn, void **data)
{
    if (!ckpt_history_recording())
        return false;
    struct hostfn *h = malloc(sizeof(*h));
    if (!h) {
        ckpt_history_taint("out of host memory for a host function");
        return false;
    }
    uint64_t t = ckpt_thread_key();
    *h = (struct hostfn){*fn, *data, t * 0x100000001b3ULL + ++hostfns, stream, t, copies};
    *fn = run_hostfn;
    *data = h;
    return true;
}

void ckpt_history_hostfn_failed(void *data)
{
    free(data);
}

/* The restore goes live.  A copy still pending in replay was queued by a
 * thread past its point at the snapshot (its bytes became visible after
 * the cut): it is made now, for real, from the restored state, and
 * followed as any copy of the live run. */
void ckpt_history_forget(void)
{
    pthread_once(&resolved, resolve); /* take_event's; replay resolved none of them */
    pthread_mutex_lock(&lock);
    if (npend && missing) {
        pthread_mutex_unlock(&lock);
        ckpt_refuse("a device-to-host copy queued before the snapshot cannot be made again: the driver lacks %s",
                    missing);
    }
    ckpt_self_depth++;
    for (size_t i = 0; i < npend; i++) {
        struct pending *p = &pend[i];
        if (ckpt_resolve("cuMemcpyDtoHAsync_v2") < 0 ||
            real_cuMemcpyDtoHAsync_v2(p->dst, p->src, p->size, V(p->stream)) != CUDA_SUCCESS ||
            real_cuCtxGetCurrent(&p->ctx) != CUDA_SUCCESS || !(p->done = take_event(p->ctx)) ||
            real_cuEventRecord(p->done, V(p->stream)) != CUDA_SUCCESS) {
            ckpt_self_depth--;
            pthread_mutex_unlock(&lock);
            ckpt_refuse("a device-to-host copy queued before the snapshot could not be made again");
        }
    }
    ckpt_self_depth--;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

/* ---- the resumed run proves itself.  From the moment the restore goes
 * live, each record the resumed run appends is compared with the failed
 * run's next one on the same thread: the shape always (which call, sizes,
 * allocations, iterations), values only under CKPT_DETERMINISTIC (on a GPU
 * atomics, algorithm choices and a rebuilt communicator change low bits
 * legitimately).  Records whose place depends on timing are left out on
 * both sides.  A difference stops the rank (exit 75, said to ckpt-resume,
 * which falls back to an older snapshot): libckpt cannot vouch for it. */

static bool unordered(int type, uint64_t a, uint64_t c)
{
    return (type == CKPT_RL_OBSERVE && (a == CKPT_OBS_EVENT_QUERY || a == CKPT_OBS_STREAM_QUERY)) ||
           (type == CKPT_RL_D2H && c) || type == CKPT_RL_TAINT || type == CKPT_RL_OVERFLOW ||
           type == CKPT_RL_FILE || type == CKPT_RL_WORK || type == CKPT_RL_ASIDE || type == CKPT_RL_SOCK;
}

/* The failed run's next ordered record of thread t (taken when take). */
static int expected(uint64_t t, struct ckpt_rl_rec *r, bool take)
{
    int type;
    while ((type = ckpt_rlog_failed_run(t, r, false)) && unordered(type, r->a, r->c))
        ckpt_rlog_failed_run(t, NULL, true);
    if (type && take)
        ckpt_rlog_failed_run(t, NULL, true);
    return type;
}

static const char *rl_name(int type)
{
    static const char *const names[CKPT_RL_NTYPES] = {
        [CKPT_RL_ALLOC] = "an allocation",  [CKPT_RL_D2H] = "a device-to-host copy", [CKPT_RL_VALUE] = "a read value",
        [CKPT_RL_ITER] = "an iteration end", [CKPT_RL_OBSERVE] = "a host observation",
    };
    return type > 0 && type < CKPT_RL_NTYPES && names[type] ? names[type] : "a record";
}

__attribute__((noreturn)) static void diverged(const char *what)
{
    __atomic_store_n(&checking, false, __ATOMIC_RELEASE);
    ckpt_log(CKPT_ERROR, "the run restored from iteration %llu diverged from the failed run at its observation %llu "
             "after the restore: %s; libckpt cannot vouch for this state", (unsigned long long)restored_at,
             (unsigned long long)__atomic_load_n(&checked, __ATOMIC_RELAXED) + 1, what);
    ckpt_agent_send(CKPT_MSG_REFUSED, restored_at, 0);
    _exit(CKPT_EXIT_RESTORE);
}

static void check(int type, uint64_t t, uint64_t a, uint64_t b, uint64_t c, const void *payload, uint32_t len)
{
    struct ckpt_rl_rec r;
    char what[320] = "";
    if (unordered(type, a, c))
        return;
    int want = expected(t, &r, true);
    if (!want)
        return; /* the failed run died before it got here on this thread */
    if (want != type)
        snprintf(what, sizeof(what), "it made %s where the failed run made %s", rl_name(type), rl_name(want));
    else if (type == CKPT_RL_ALLOC && (a != r.a || b != r.b))
        snprintf(what, sizeof(what), "it made allocation %llu of %llu bytes where the failed run made allocation "
                 "%llu of %llu bytes", (unsigned long long)a, (unsigned long long)b, (unsigned long long)r.a,
                 (unsigned long long)r.b);
    else if ((type == CKPT_RL_ITER || type == CKPT_RL_VALUE) && a != r.a)
        snprintf(what, sizeof(what), "%s %llu where the failed run had %llu", rl_name(type), (unsigned long long)a,
                 (unsigned long long)r.a);
    else if (type == CKPT_RL_OBSERVE && a != r.a)
        snprintf(what, sizeof(what), "%s where the failed run made %s", ckpt_obs_name((enum ckpt_obs)a),
                 ckpt_obs_name((enum ckpt_obs)r.a));
    else if (type == CKPT_RL_OBSERVE && deterministic && b != r.b)
        snprintf(what, sizeof(what), "%s answered %llu where the failed run's answered %llu",
                 ckpt_obs_name((enum ckpt_obs)a), (unsigned long long)b, (unsigned long long)r.b);
    else if (type == CKPT_RL_D2H && a != r.a)
        snprintf(what, sizeof(what), "a device-to-host copy of %llu bytes where the failed run copied %llu",
                 (unsigned long long)a, (unsigned long long)r.a);
    else if (type == CKPT_RL_D2H && deterministic && (len != r.len || memcmp(payload, r.payload, len) != 0))
        snprintf(what, sizeof(what), "the host received other bytes from a device-to-host copy of %llu bytes "
                 "(CKPT_DETERMINISTIC=1)", (unsigned long long)a);
    if (*what)
        diverged(what);
    __atomic_add_fetch(&checked, 1, __ATOMIC_RELAXED);
}

void ckpt_history_check_from(uint64_t iteration)
{
    restored_at = iteration;
    deterministic = ckpt_cfg_int(CFG_DETERMINISTIC);
    __atomic_store_n(&checking, ckpt_rlog_failed_left() > 0, __ATOMIC_RELEASE);
}

void ckpt_history_checked_boundary(void)
{
    struct ckpt_rl_rec r;
    if (!__atomic_load_n(&checking, __ATOMIC_ACQUIRE) || expected(ckpt_thread_key(), &r, false))
        return;
    /* The thread that ends the iterations has done all the failed run did. */
    if (!__atomic_exchange_n(&checking, false, __ATOMIC_ACQ_REL))
        return;
    ckpt_log(CKPT_INFO, "the resume is verified: the run restored from iteration %llu matched the failed run over "
             "the %llu observations it made after that point%s", (unsigned long long)restored_at,
             (unsigned long long)__atomic_load_n(&checked, __ATOMIC_RELAXED), deterministic ? ", values included" : " (their shape; values too with "
             "CKPT_DETERMINISTIC=1)");
}

bool ckpt_history_failed_value(uint64_t what, uint64_t *value)
{
    struct ckpt_rl_rec r;
    if (expected(ckpt_thread_key(), &r, false) != CKPT_RL_VALUE || r.a != what)
        return false;
    *value = r.b;
    return true;
}
