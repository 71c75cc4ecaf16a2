/*
 * The snapshot engine.  At an iteration boundary it copies every live
 * program allocation device-to-host into the free slot of the rank's arena,
 * on libckpt's own stream, ordered after the work the program had queued on
 * every stream it uses; a committer thread waits for the copies, checksums
 * them and writes the header last.  The program is not held (unless
 * CKPT_CONSISTENCY=strict): its streams wait on the GPU for the copies
 * before the next update can run.  A fault in here (no arena, no memory,
 * a failed copy) costs a snapshot, is reported, and never reaches the
 * program: every CUDA call libckpt makes for itself goes to the real
 * function and its error stays here.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "arena.h"
#include "blocks.h"
#include "boundary.h"
#include "config.h"
#include "follow.h"
#include "image.h"
#include "interpose.h"
#include "log.h"
#include "pins.h"
#include "registry.h"
#include "schedule.h"
#include "timeline.h"
#include "util.h"

#define MAX_STREAMS 1024

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready, broken;
    CUcontext ctx;
    CUstream stream;
    CUevent start, done, mark;

    struct ckpt_arena arena;
    bool arena_ok;
    int last_slot; /* holds the newest committed snapshot, -1 before one */
    uint64_t last_iter; /* its iteration */
    bool slot_used[2];  /* a slot has held a committed snapshot */
    uint64_t slot_iter[2]; /* the iteration each slot holds */
    int slot;      /* being written */
    uint64_t generation;

    bool in_flight, wait_pending, stop;
    struct ckpt_header hdr;
    struct ckpt_alloc *live;   /* the registry at the boundary */
    size_t live_cap;
    struct ckpt_part *parts;   /* one allocation's live parts */
    size_t parts_cap;
    struct ckpt_alloc *allocs; /* per record: the allocation it is of */
    struct ckpt_rec *recs;
    size_t cap;
    uint64_t allocated, nlive; /* bytes and count of the allocations live at the boundary */
    pthread_t committer;
    pid_t pid; /* of the process that owns this state; a fork child does not */
    double held_ms_last; /* of the snapshot in flight */

    /* statistics */
    uint64_t taken, skipped, bytes;
    uint64_t kind_bytes[CKPT_KINDS]; /* the last committed snapshot's, by allocation kind */
    uint64_t allocated_last, nlive_last; /* and the bytes and count of the allocations it copied from */
    uint64_t skipped_at_commit; /* S.skipped when the last snapshot committed */
    uint64_t no_room;   /* snapshots skipped in a row for want of room in the arena */
    bool room_checked;  /* at the first snapshot (check_room) */
    double copy_ms_sum, copy_ms_max, held_ms;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .last_slot = -1};

/* Streams the program queued work on and has not destroyed.  Changed
 * under streams_lock (appended; a destroyed one swapped with the last);
 * ckpt_stream_seen's fast path reads without it, and a stale read only
 * sends it to the locked path.  gen counts removals, for the per-thread
 * cache: a destroyed stream's handle may come back for a new one. */
static CUstream streams[MAX_STREAMS];
static CUcontext stream_ctx[MAX_STREAMS]; /* current when it was first seen: a stream's own */
static int nstreams;
static unsigned streams_gen;
static bool streams_full;
static pthread_mutex_t streams_lock = PTHREAD_MUTEX_INITIALIZER;

/* The event that orders the snapshot after a stream of context ctx: CUDA
 * refuses to record an event of one context on another's stream.  Made on
 * first need, in ctx.  streams_lock held. */
static CUevent mark_of(CUcontext ctx)
{
    static struct {
        CUcontext ctx;
        CUevent ev;
    } marks[16];
    static int nmarks;
    if (!ctx || ctx == S.ctx)
        return S.mark;
    for (int i = 0; i < nmarks; i++)
        if (marks[i].ctx == ctx)
            return marks[i].ev;
    CUcontext cur = NULL;
    CUevent ev = NULL;
    if (nmarks == 16 || real_cuCtxGetCurrent(&cur) != CUDA_SUCCESS || real_cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return NULL;
    if (real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
        ev = NULL;
    real_cuCtxSetCurrent(cur);
    if (ev)
        marks[nmarks++].ctx = ctx, marks[nmarks - 1].ev = ev;
    return ev;
}

/* The snapshot's copies wait for what stream s of context ctx holds now;
 * cur is the thread's current context, current again on return.  A NULL
 * or legacy stream is its context's: ctx is made current to record on it.
 * Returns CUDA_SUCCESS or the error.  streams_lock held. */
static CUresult order_after(CUcontext ctx, CUstream s, CUcontext cur)
{
    CUevent mark = mark_of(ctx);
    if (!mark)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = ctx == cur ? CUDA_SUCCESS : real_cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS)
        r = real_cuEventRecord(mark, s);
    if (ctx != cur)
        real_cuCtxSetCurrent(cur);
    return r == CUDA_SUCCESS ? real_cuStreamWaitEvent(S.stream, mark, 0) : r;
}

/* A stream first seen while a snapshot's copies run, after the program's
 * streams were made to wait for them: it waits too, or the next update
 * could run on it beside the copies. */
static void late_stream(CUstream s)
{
    pthread_mutex_lock(&S.lock);
    if (S.in_flight && !S.wait_pending) {
        ckpt_self_depth++;
        real_cuStreamWaitEvent(s, S.done, 0);
        ckpt_self_depth--;
    }
    pthread_mutex_unlock(&S.lock);
}

void ckpt_stream_seen(CUstream s)
{
    static __thread CUstream last = (CUstream)-1;
    static __thread unsigned last_gen;
    unsigned gen = __atomic_load_n(&streams_gen, __ATOMIC_ACQUIRE);
    if (s == last && gen == last_gen)
        return;
    int n = __atomic_load_n(&nstreams, __ATOMIC_ACQUIRE);
    bool known = false;
    for (int i = 0; i < n && !known; i++)
        known = __atomic_load_n(&streams[i], __ATOMIC_RELAXED) == s;
    bool added = false;
    if (!known) {
        pthread_mutex_lock(&streams_lock);
        gen = streams_gen;
        n = nstreams;
        for (int i = 0; i < n && !known; i++)
            known = streams[i] == s;
        if (!known && n < MAX_STREAMS) {
            if ((!real_cuCtxGetCurrent && ckpt_resolve("cuCtxGetCurrent") < 0) ||
                real_cuCtxGetCurrent(&stream_ctx[n]) != CUDA_SUCCESS)
                stream_ctx[n] = NULL;
            __atomic_store_n(&streams[n], s, __ATOMIC_RELAXED);
            __atomic_store_n(&nstreams, n + 1, __ATOMIC_RELEASE);
            added = true;
        } else if (!known && !streams_full) {
            streams_full = true;
            ckpt_log(CKPT_WARN, "more than %d streams: snapshots order after the legacy stream only for the rest",
                     MAX_STREAMS);
        }
        pthread_mutex_unlock(&streams_lock);
    }
    last = s;
    last_gen = gen;
    if (added)
        late_stream(s);
}

void ckpt_stream_gone(CUstream s)
{
    pthread_mutex_lock(&streams_lock);
    for (int i = 0; i < nstreams; i++) {
        if (streams[i] == s) {
            stream_ctx[i] = stream_ctx[nstreams - 1];
            __atomic_store_n(&streams[i], streams[nstreams - 1], __ATOMIC_RELAXED);
            __atomic_store_n(&nstreams, nstreams - 1, __ATOMIC_RELEASE);
            __atomic_add_fetch(&streams_gen, 1, __ATOMIC_RELEASE);
            break;
        }
    }
    pthread_mutex_unlock(&streams_lock);
}

/* Makes the program's streams wait (on the GPU) for the copies in flight. */
static void streams_wait_done(void)
{
    pthread_mutex_lock(&streams_lock);
    for (int i = 0; i < nstreams; i++)
        real_cuStreamWaitEvent(streams[i], S.done, 0);
    pthread_mutex_unlock(&streams_lock);
    ckpt_pace_settled();
}

/* One JSON line per committed snapshot; sched holds the pacer's members
 * (how the copies were placed), skipped says how many boundaries since the
 * previous commit had no snapshot (the frequency dropped); with a standby
 * (its follow file beside the slots), the iteration it has replayed to. */
static void stats_line(double copy_ms, double held_ms, const char *sched, uint64_t skipped)
{
    const char *path = ckpt_cfg_str(CFG_STATS_FILE);
    if (!path)
        return;
    char line[1024], standby[64] = "";
    struct ckpt_follow f;
    if (ckpt_follow_read(S.arena.dir, &f) == 0 && !f.live_at && f.pid)
        snprintf(standby, sizeof(standby), ",\"standby_iteration\":%llu", (unsigned long long)f.at);
    int n = snprintf(line, sizeof(line),
                     "{\"rank\":%u,\"generation\":%llu,\"iteration\":%llu,\"allocations\":%llu,\"bytes\":%llu,"
                     "\"allocated_bytes\":%llu,"
                     "\"bytes_by_kind\":{\"plain\":%llu,\"async\":%llu,\"vmm\":%llu,\"managed\":%llu,\"pitch\":%llu,"
                     "\"global\":%llu},"
                     "\"copy_ms\":%.3f,\"held_ms\":%.3f,\"slot\":%d,\"skipped_before\":%llu%s,%s}\n",
                     S.hdr.rank, (unsigned long long)S.hdr.generation, (unsigned long long)S.hdr.iteration,
                     (unsigned long long)S.nlive_last, (unsigned long long)S.hdr.data_bytes,
                     (unsigned long long)S.allocated_last, (unsigned long long)S.kind_bytes[CKPT_ALLOC_PLAIN], (unsigned long long)S.kind_bytes[CKPT_ALLOC_ASYNC],
                     (unsigned long long)S.kind_bytes[CKPT_ALLOC_VMM], (unsigned long long)S.kind_bytes[CKPT_ALLOC_MANAGED],
                     (unsigned long long)S.kind_bytes[CKPT_ALLOC_PITCH], (unsigned long long)S.kind_bytes[CKPT_ALLOC_GLOBAL],
                     copy_ms, held_ms, S.slot, (unsigned long long)skipped, standby, sched);
    if (n >= (int)sizeof(line))
        return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        ckpt_log_once(CKPT_WARN, "cannot write CKPT_STATS_FILE=%s: %s", path, strerror(errno));
        return;
    }
    if (write(fd, line, n) != n)
        ckpt_log_once(CKPT_WARN, "short write to CKPT_STATS_FILE=%s", path);
    close(fd);
}

/* The snapshot's commit on the timeline, in the iteration it overlaps (the
 * one after the snapshot's); the pacer puts its copies there. */
static void timeline_commit(uint64_t copied_at)
{
    ckpt_tl_add(&(struct ckpt_tl_event){.start_ns = copied_at,
                                        .end_ns = ckpt_now_ns(),
                                        .iteration = S.hdr.iteration + 1,
                                        .arg = S.hdr.data_bytes,
                                        .kind = CKPT_TL_COMMIT,
                                        .detail = (uint32_t)S.hdr.iteration});
}

static void timeline_write(void)
{
    const char *rank = getenv("RANK");
    int rc;

    if (S.arena_ok && (rc = ckpt_tl_write(S.arena.dir, rank ? (uint32_t)atoi(rank) : 0)) < 0)
        ckpt_log_once(CKPT_WARN, "cannot write the timeline into %s: %s", S.arena.dir, strerror(-rc));
}

/* Makes this thread's CUDA calls harmless to the program's graph captures:
 * in the default global mode, a thread's event query or synchronisation
 * while another thread captures in global mode invalidates that capture. */
static void relaxed(void)
{
    static __thread bool done;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (!done && real_cuThreadExchangeStreamCaptureMode)
        done = real_cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
}

/* Waits for each snapshot's copies, then checksums and commits it. */
static void *committer(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&S.lock);
    for (;;) {
        while (!S.in_flight && !S.stop)
            pthread_cond_wait(&S.cond, &S.lock);
        if (!S.in_flight)
            break;
        pthread_mutex_unlock(&S.lock);

        ckpt_self_depth = 1; /* this thread is libckpt's own */
        real_cuCtxSetCurrent(S.ctx);
        relaxed();
        CUresult r = ckpt_pace_wait_issued();
        if (r == CUDA_SUCCESS)
            r = real_cuEventSynchronize(S.done);
        char sched[256] = "\"sched\":null";
        uint64_t copied_at = ckpt_now_ns();
        float ms = 0;
        if (r == CUDA_SUCCESS)
            real_cuEventElapsedTime_v2(&ms, S.start, S.done);
        if (r == CUDA_SUCCESS) {
            ckpt_pace_finished(copied_at, S.hdr.iteration, sched, sizeof(sched));
            ckpt_fault_point(CKPT_FAULT_COMMIT, S.hdr.iteration);
            ckpt_image_commit(S.arena.base[S.slot], &S.hdr, S.recs);
            timeline_commit(copied_at);
        }

        pthread_mutex_lock(&S.lock);
        if (r == CUDA_SUCCESS) {
            S.last_slot = S.slot;
            S.last_iter = S.hdr.iteration;
            S.slot_used[S.slot] = true;
            S.slot_iter[S.slot] = S.hdr.iteration;
            S.generation = S.hdr.generation;
            S.taken++;
            S.bytes += S.hdr.data_bytes;
            memset(S.kind_bytes, 0, sizeof(S.kind_bytes));
            for (uint64_t i = 0; i < S.hdr.nallocs; i++)
                if (S.recs[i].kind < CKPT_KINDS)
                    S.kind_bytes[S.recs[i].kind] += S.recs[i].bytes;
            S.allocated_last = S.allocated;
            S.nlive_last = S.nlive;
            S.copy_ms_sum += ms;
            if (ms > S.copy_ms_max)
                S.copy_ms_max = ms;
            stats_line(ms, S.held_ms_last, sched, S.skipped - S.skipped_at_commit);
            S.skipped_at_commit = S.skipped;
            ckpt_agent_report(CKPT_MSG_COMMITTED, S.hdr.iteration, S.hdr.generation, S.hdr.data_bytes, ms, S.held_ms_last);
            ckpt_log(CKPT_DEBUG, "committed generation %llu (iteration %llu, %llu bytes, copy %.2f ms)",
                     (unsigned long long)S.hdr.generation, (unsigned long long)S.hdr.iteration,
                     (unsigned long long)S.hdr.data_bytes, ms);
        } else {
            ckpt_pace_settled();
            S.skipped++;
            ckpt_log(CKPT_WARN, "snapshot of iteration %llu lost: its copies failed (CUDA error %d)",
                     (unsigned long long)S.hdr.iteration, (int)r);
        }
        __atomic_store_n(&S.in_flight, false, __ATOMIC_RELEASE); /* read unlocked by ckpt_before_free */
        pthread_cond_broadcast(&S.cond);
    }
    pthread_mutex_unlock(&S.lock);
    return NULL;
}

/* First snapshot: the stream and events live in the program's context,
 * current on the thread that reached the boundary.  Returns 0 or -errno;
 * on failure checkpointing is off for good, said once. */
static int prepare_engine(void)
{
    static const char *const needed[] = {
        "cuCtxGetCurrent", "cuCtxSetCurrent", "cuStreamCreate", "cuEventCreate", "cuEventRecord",
        "cuEventSynchronize", "cuEventElapsedTime_v2", "cuStreamWaitEvent", "cuMemcpyDtoHAsync_v2",
        "cuMemHostRegister_v2", "cuMemHostUnregister", "cuEventQuery",
    };

    if (S.ready)
        return 0;
    if (S.broken)
        return -EIO;
    S.broken = true;
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
        if (ckpt_resolve(needed[i]) < 0) {
            ckpt_log(CKPT_ERROR, "checkpointing is off for this run: the driver lacks %s", needed[i]);
            return -ENOENT;
        }
    }
    if (real_cuCtxGetCurrent(&S.ctx) != CUDA_SUCCESS || !S.ctx ||
        real_cuStreamCreate(&S.stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        real_cuEventCreate(&S.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        real_cuEventCreate(&S.done, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        ckpt_log(CKPT_ERROR, "cannot create libckpt's stream and events: checkpointing is off for this run");
        return -EIO;
    }
    if (real_cuEventCreate(&S.mark, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        ckpt_log(CKPT_ERROR, "cannot create libckpt's events: checkpointing is off for this run");
        return -EIO;
    }
    if (!S.arena_ok) {
        ckpt_log(CKPT_ERROR, "no arena: checkpointing is off for this run");
        return -ENOENT;
    }
    if (pthread_create(&S.committer, NULL, committer, NULL) != 0) {
        ckpt_log(CKPT_ERROR, "cannot start the commit thread: checkpointing is off for this run");
        return -EAGAIN;
    }
    S.broken = false;
    S.pid = getpid();
    S.ready = true;
    return 0;
}

/* The same; the agent hears once that this rank runs unprotected. */
static int prepare(void)
{
    bool first = !S.ready && !S.broken;
    int rc = prepare_engine();
    if (rc < 0 && first)
        ckpt_agent_send(CKPT_MSG_UNPROTECTED, 0, 0);
    return rc;
}

/* Whether @pid started this process, or started one of its ancestors. */
static bool started_by(pid_t pid)
{
    pid_t p = getppid();
    for (int depth = 0; p > 1 && depth < 64; depth++) {
        if (p == pid)
            return true;
        char path[32], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)p);
        FILE *f = fopen(path, "re");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        const char *end = strrchr(buf, ')'); /* the command name may hold anything */
        int parent;
        if (!end || sscanf(end + 1, " %*c %d", &parent) != 1)
            return false;
        p = parent;
    }
    return false;
}

int ckpt_snapshot_open(bool fresh, char *dir, size_t dirlen)
{
    char why[PATH_MAX + 128];
    const char *rank = getenv("RANK");

    int rc = ckpt_arena_open(&S.arena, ckpt_cfg_str(CFG_ARENA_DIR), ckpt_cfg_str(CFG_JOB), rank ? atoi(rank) : 0,
                             CKPT_ARENA_OWN | (fresh ? CKPT_ARENA_FRESH : 0), why, sizeof(why));
    if (rc == -EBUSY && started_by(S.arena.holder)) {
        ckpt_log(CKPT_INFO, "%s, which started this process: this one does not checkpoint", why);
        return rc;
    }
    if (rc == -EBUSY) {
        ckpt_log(CKPT_WARN, "%s: does another process run as rank %s of job %s? This one does not checkpoint",
                 why, rank ? rank : "0", ckpt_cfg_str(CFG_JOB));
        return rc;
    }
    if (rc < 0 && ckpt_unprotected_refused())
        ckpt_log(CKPT_ERROR, "no arena (%s): the rank stops rather than train unprotected; make CKPT_ARENA_DIR a "
                 "directory this user can write to, or set CKPT_ALLOW_UNPROTECTED=1", why);
    else if (rc < 0)
        ckpt_log(CKPT_ERROR, "no arena (%s): checkpointing is off for this run", why);
    if (rc < 0)
        return rc;
    S.arena_ok = true;
    snprintf(dir, dirlen, "%s", S.arena.dir);
    if (fresh) { /* a new run's timeline starts empty, not with the last run's */
        char path[PATH_MAX + 96];
        snprintf(path, sizeof(path), "%s/%s", S.arena.dir, CKPT_TL_FILE);
        unlink(path);
    }
    return 0;
}

void ckpt_snapshot_resumed(uint64_t generation, uint64_t iteration, int slot)
{
    const char *rank = getenv("RANK");
    uint64_t newer = 0;

    pthread_mutex_lock(&S.lock);
    S.generation = generation;
    S.last_slot = slot;
    S.last_iter = iteration;
    S.slot_used[0] = S.slot_used[1] = true;
    S.slot_iter[slot] = iteration;
    S.slot_iter[1 - slot] = 0; /* an older one, or none: not worth a pin */
    /* A newer snapshot in the other slot is the failed run's: this run
     * writes the replay log again from here (arena.h). */
    int rc = S.arena.fd[1 - slot] < 0 ? 0 : ckpt_slot_retire(S.arena.fd[1 - slot], ckpt_cfg_str(CFG_JOB),
                                                             rank ? atoi(rank) : 0, iteration, &newer);
    pthread_mutex_unlock(&S.lock);
    if (rc > 0)
        ckpt_log(CKPT_INFO, "retired its snapshot of iteration %llu: newer than the restored iteration %llu, it "
                 "belongs to the run this one replaces", (unsigned long long)newer, (unsigned long long)iteration);
    else if (rc < 0)
        ckpt_log(CKPT_WARN, "cannot retire its snapshot of iteration %llu (newer than the restored iteration %llu): "
                 "%s", (unsigned long long)newer, (unsigned long long)iteration, strerror(-rc));
}

/* Room for need entries in S.allocs and S.recs.  Returns 0 or -ENOMEM. */
static int reserve_records(size_t need)
{
    if (need <= S.cap)
        return 0;
    size_t cap = need + need / 2 + 16;
    struct ckpt_alloc *a = realloc(S.allocs, cap * sizeof(*a));
    if (a)
        S.allocs = a;
    struct ckpt_rec *r = a ? realloc(S.recs, cap * sizeof(*r)) : NULL;
    if (!r)
        return -ENOMEM;
    S.recs = r;
    S.cap = cap;
    return 0;
}

/* Lists what the snapshot copies into S.recs: one record per live
 * allocation, or one per live part of an allocation the program declared
 * parts of free (blocks.h); S.allocs[i] is the allocation record i is of.
 * Returns the count or -ENOMEM. */
static long list_allocations(bool declared)
{
    size_t n;
    while ((n = ckpt_reg_snapshot(S.live, S.live_cap)) > S.live_cap) {
        struct ckpt_alloc *a = realloc(S.live, (n + n / 2 + 16) * sizeof(*a));
        if (!a)
            return -ENOMEM;
        S.live = a;
        S.live_cap = n + n / 2 + 16;
    }
    declared = declared && ckpt_blocks_any();
    bool segments = false;
    size_t count = 0;
    S.allocated = 0;
    S.nlive = n;
    for (size_t i = 0; i < n; i++) {
        const struct ckpt_alloc *a = &S.live[i];
        struct ckpt_part whole = {0, a->size}, none = {0, 0}, *parts = &whole;
        size_t k = 1;
        while (declared && (k = ckpt_blocks_parts(a->addr, a->size, S.parts, S.parts_cap)) > S.parts_cap) {
            struct ckpt_part *p = realloc(S.parts, (k + 16) * sizeof(*p));
            if (!p)
                return -ENOMEM;
            S.parts = p;
            S.parts_cap = k + 16;
        }
        if (declared)
            parts = k ? S.parts : &none, k = k ? k : 1; /* all free: one record of 0 bytes */
        if (reserve_records(count + k) < 0)
            return -ENOMEM;
        for (size_t j = 0; j < k; j++, count++) {
            S.allocs[count] = *a;
            S.recs[count] = (struct ckpt_rec){.ordinal = a->ordinal, .size = a->size, .kind = a->kind,
                                              .birth = a->birth, .start = parts[j].start,
                                              .bytes = parts[j].bytes};
        }
        S.allocated += a->size;
        segments = segments || a->kind == CKPT_ALLOC_PLAIN || a->kind == CKPT_ALLOC_VMM;
    }
    ckpt_declare_unused(segments);
    return (long)count;
}

/*
 * May the newest slot be overwritten, keeping the older one (@older)?
 * Only if the node agent does not keep our newest (@pins) and every peer
 * holds the older iteration, and still does once our newest is hidden: a
 * peer that saw our newest just before (and is overwriting its older slot,
 * keeping that newest) shows within the pause, and then our newest is
 * shown again and nothing is overwritten.  Returns true with the newest
 * slot hidden (invalidated).
 */
static bool repair(int older, const struct ckpt_pins *pins)
{
    uint64_t magic;
    void *newest = S.arena.base[S.last_slot];

    if (!S.slot_iter[older] || !ckpt_node_peers_hold(S.slot_iter[older]) || ckpt_pins_hold(pins, S.last_iter))
        return false;
    memcpy(&magic, CKPT_MAGIC, sizeof(magic));
    ckpt_image_invalidate(newest);
    usleep(5000);
    if (ckpt_node_peers_hold(S.slot_iter[older]))
        return true;
    __atomic_store_n((uint64_t *)newest, magic, __ATOMIC_RELEASE);
    return false;
}

/*
 * The slot the snapshot of @iter goes to: the older one, keeping the
 * newest, once every peer on the node holds the newest too; with
 * CKPT_SLOTS=1 the only one, unless the node agent is reading it
 * (@pins: what it keeps).  Returns -1 when the snapshot is skipped (said,
 * counted).
 */
static int choose_slot(uint64_t iter, const struct ckpt_pins *pins)
{
    int older = S.last_slot == 0 ? 1 : 0;

    if (ckpt_cfg_int(CFG_SLOTS) == 1) {
        if (S.slot_used[0] && ckpt_pins_hold(pins, S.slot_iter[0])) {
            S.skipped++;
            ckpt_log(CKPT_DEBUG, "iteration %llu: the node agent is reading iteration %llu from the one slot; "
                     "snapshot skipped", (unsigned long long)iter, (unsigned long long)S.slot_iter[0]);
            return -1;
        }
        return 0;
    }

    if (!S.slot_used[older])
        return older;
    if (ckpt_pins_hold(pins, S.slot_iter[older]) && ckpt_pins_hold(pins, S.last_iter)) {
        S.skipped++;
        ckpt_log(CKPT_DEBUG, "iteration %llu: the node agent keeps iterations %llu and %llu; snapshot skipped",
                 (unsigned long long)iter, (unsigned long long)S.slot_iter[older], (unsigned long long)S.last_iter);
        return -1;
    }
    if (ckpt_pins_hold(pins, S.slot_iter[older])) {
        /* The agent keeps the older iteration (the job's newest replicated
         * or persisted one) until the ranks of every node hold a newer one
         * in common.  Our newest is not what it waits for: nodes that
         * skipped different iterations would wait for each other for ever.
         * It is overwritten, and the older one kept. */
        ckpt_log(CKPT_DEBUG, "iteration %llu: the node agent keeps iteration %llu; this one replaces iteration %llu",
                 (unsigned long long)iter, (unsigned long long)S.slot_iter[older], (unsigned long long)S.last_iter);
        return S.last_slot;
    }
    /* Peers commit a checksum pass after their copies: give a lagging one
     * a moment (the program waits, and the stats say so) before skipping. */
    double wait_from = ckpt_now_s();
    while (!ckpt_node_peers_hold(S.last_iter) && ckpt_now_s() - wait_from < 0.2)
        usleep(500);
    S.held_ms += (ckpt_now_s() - wait_from) * 1e3;
    if (ckpt_node_peers_hold(S.last_iter))
        return older;
    /* A peer that skipped our newest iteration (its older slot was being
     * persisted) never gets it: waiting for it would skip every snapshot
     * from now on, on every rank.  Then our newest is overwritten instead,
     * keeping the older one, which every peer holds, and the ranks meet
     * again at this iteration (repair()). */
    if (repair(older, pins)) {
        ckpt_log(CKPT_DEBUG, "iteration %llu: a peer skipped iteration %llu; it replaces that one, iteration %llu "
                 "is kept", (unsigned long long)iter, (unsigned long long)S.last_iter,
                 (unsigned long long)S.slot_iter[older]);
        return S.last_slot;
    }
    S.skipped++;
    ckpt_log(CKPT_DEBUG, "iteration %llu: a peer has not committed iteration %llu yet; snapshot skipped so "
             "every rank keeps an iteration in common", (unsigned long long)iter, (unsigned long long)S.last_iter);
    return -1;
}

/* Queues one snapshot of iteration iter.  Called with S.lock held, on the
 * program's thread, right after one of its host syncs returned. */
static void take(uint64_t iter, bool has_collectives, bool declared)
{
    /* A snapshot whose last collective never came (the pattern changed):
     * its remaining copies are queued now. */
    if (S.in_flight)
        ckpt_pace_flush();
    /* Copies done but not yet committed: the commit is a checksum pass
     * away, so wait for it rather than lose this iteration's snapshot. */
    while (S.in_flight && real_cuEventQuery(S.done) == CUDA_SUCCESS)
        pthread_cond_wait(&S.cond, &S.lock);
    if (S.in_flight) {
        S.skipped++;
        ckpt_log(CKPT_DEBUG, "iteration %llu: previous snapshot still being copied; skipped",
                 (unsigned long long)iter);
        return;
    }
    if (prepare() < 0)
        return;
    if (ckpt_arena_removed(&S.arena)) {
        /* Snapshots that reach nobody, and peers waiting for slots that
         * are gone: the rank trains on without them, and says so. */
        ckpt_log(CKPT_ERROR, "the arena %s was removed while the job ran (by another process): checkpointing is "
                 "off for the rest of this run, which trains on UNPROTECTED", S.arena.dir);
        S.ready = false;
        S.broken = true;
        S.arena_ok = false;
        ckpt_agent_send(CKPT_MSG_UNPROTECTED, 0, 0);
        return;
    }
    long n = list_allocations(declared);
    if (n < 0) {
        S.skipped++;
        ckpt_log_once(CKPT_WARN, "out of host memory listing allocations; snapshots skipped");
        return;
    }

    const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE");
    struct ckpt_header h = {.rank = rank ? (uint32_t)atoi(rank) : 0,
                            .world = world ? (uint32_t)atoi(world) : 1,
                            .generation = S.generation + 1,
                            .iteration = iter,
                            .chunk_bytes = CKPT_CHUNK_DEFAULT};
    snprintf(h.job, sizeof(h.job), "%s", ckpt_cfg_str(CFG_JOB));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h.time_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
    size_t total = ckpt_image_layout(&h, S.recs, (size_t)n);
    if (!S.room_checked) {
        S.room_checked = true;
        ckpt_node_check_room(S.arena.dir, iter, total);
    }

    /* What the node's agent keeps, read as late as can be, and the plan
     * it acts under: the snapshot carries its epoch. */
    struct ckpt_pins pins;
    ckpt_pins_read(S.arena.dir, &pins);
    h.epoch = pins.epoch;
    int moved = 0, slot = choose_slot(iter, &pins);
    if (slot < 0)
        return;
    void *old = S.arena.base[slot];
    int rc = ckpt_arena_reserve(&S.arena, slot, total, &moved);
    if (rc < 0) {
        /* Said once while it lasts: a full /dev/shm stays full for a while. */
        int level = S.no_room++ ? CKPT_DEBUG : CKPT_WARN;
        uint64_t room = 0, size = 0;
        S.skipped++;
        if (rc == -ENOSPC && ckpt_arena_room(S.arena.dir, &room, &size) == 0)
            ckpt_log(level, "iteration %llu: cannot make room for a snapshot of %.1f MiB in %s: its filesystem "
                     "has %.1f MiB free of %.1f MiB, and every rank of this host needs %lld slot%s of its own "
                     "size (CKPT_SLOTS); " CKPT_ARENA_ROOM_FIX "; snapshot skipped: this rank is not protected "
                     "until there is room", (unsigned long long)iter, total / 1048576.0, S.arena.dir,
                     room / 1048576.0, size / 1048576.0, ckpt_cfg_int(CFG_SLOTS),
                     ckpt_cfg_int(CFG_SLOTS) == 1 ? "" : "s");
        else
            ckpt_log(level, "iteration %llu: cannot make room for %zu bytes in %s (%s); snapshot skipped",
                     (unsigned long long)iter, total, S.arena.dir, strerror(-rc));
        return;
    }
    if (S.no_room) {
        ckpt_log(CKPT_INFO, "iteration %llu: room again in %s, after %llu snapshot%s skipped", (unsigned long long)iter,
                 S.arena.dir, (unsigned long long)S.no_room, S.no_room == 1 ? "" : "s");
        S.no_room = 0;
    }
    if (moved) {
        /* One large registration per mapping, not one per copy. */
        if (old)
            real_cuMemHostUnregister(old);
        if (real_cuMemHostRegister_v2(S.arena.base[slot], S.arena.len[slot], 0) != CUDA_SUCCESS)
            ckpt_log_once(CKPT_WARN, "cannot pin the arena (RLIMIT_MEMLOCK?); copies use pageable memory");
    }
    char *base = S.arena.base[slot];
    ckpt_image_invalidate(base);

    /* Order the copies after everything the program queued so far.  One
     * event per context serves its streams: a wait takes the record before
     * it.  A snapshot that cannot be ordered after every stream is not
     * taken: it could hold bytes of a half-done update. */
    CUcontext cur = NULL;
    real_cuCtxGetCurrent(&cur);
    pthread_mutex_lock(&streams_lock);
    CUresult r = order_after(cur, CU_STREAM_LEGACY, cur);
    for (int i = 0; i < nstreams && r == CUDA_SUCCESS; i++)
        r = order_after(stream_ctx[i] ? stream_ctx[i] : cur, streams[i], cur);
    pthread_mutex_unlock(&streams_lock);
    if (r != CUDA_SUCCESS) {
        S.skipped++;
        ckpt_log(CKPT_WARN, "iteration %llu: the snapshot could not be ordered after the program's streams (CUDA "
                 "error %d); snapshot skipped", (unsigned long long)iter, (int)r);
        return;
    }
    real_cuEventRecord(S.start, S.stream);
    /* The pacer queues the copies (in 64 MiB pieces: a large tensor does
     * not hold the copy engine in one piece), now or in the gaps of the
     * next iteration when the update waits for them at its last
     * collective; done is recorded after the last one. */
    int mode = (int)ckpt_cfg_int(CFG_SCHED);
    bool strict = ckpt_cfg_int(CFG_CONSISTENCY) == 1;
    struct ckpt_pace_job job = {.dst = base + h.data_offset, .allocs = S.allocs, .recs = S.recs, .n = n,
                                .stream = S.stream, .start = S.start, .done = S.done};
    r = ckpt_pace_start(&job, has_collectives && !strict && mode == CKPT_SCHED_GAP);
    if (r != CUDA_SUCCESS) {
        S.skipped++;
        ckpt_log(CKPT_WARN, "iteration %llu: device-to-host copy failed (CUDA error %d); snapshot skipped",
                 (unsigned long long)iter, (int)r);
        return;
    }

    S.slot = slot;
    S.hdr = h;
    __atomic_store_n(&S.in_flight, true, __ATOMIC_RELEASE);
    S.held_ms_last = 0;
    pthread_cond_broadcast(&S.cond);
    ckpt_fault_point(CKPT_FAULT_SNAPSHOT, iter);

    if (ckpt_cfg_int(CFG_CONSISTENCY) == 1) {
        /* strict: hold the program here until the copies are done. */
        double t0 = ckpt_now_s();
        real_cuEventSynchronize(S.done);
        ckpt_pace_settled();
        S.held_ms_last = (ckpt_now_s() - t0) * 1e3;
        S.held_ms += S.held_ms_last;
    } else if (has_collectives && mode != CKPT_SCHED_OFF) {
        /* The next update follows the next iteration's last collective. */
        S.wait_pending = true;
    } else {
        /* No collective tells where the update is, or CKPT_SCHED=off: the
         * next iteration waits for the copies before anything. */
        streams_wait_done();
    }
}

/*
 * A boundary where graph-owned memory is live takes no snapshot
 * (graphmem.c): said at the first of a run of them, and when snapshots
 * resume.  Only the boundary's thread calls this.
 */
static bool graph_memory_live(uint64_t iter)
{
    static uint64_t skipped;
    char why[224];

    if (!ckpt_graphmem_live(why, sizeof(why))) {
        if (skipped)
            ckpt_log(CKPT_INFO, "iteration %llu: snapshots resume (%llu skipped while graph-owned memory was live)",
                     (unsigned long long)iter, (unsigned long long)skipped);
        skipped = 0;
        return false;
    }
    if (!skipped++)
        ckpt_log(CKPT_WARN, "iteration %llu: no snapshot: %s; replay does not run graph launches, so a restore "
                 "could not bring it back: the last snapshot stays the restore point until an iteration ends "
                 "with it freed", (unsigned long long)iter, why);
    return true;
}

/* An iteration ended: snapshot it if it is one of every CKPT_EVERY. */
static void boundary(void)
{
    uint64_t iter = ckpt_bd_iteration();
    ckpt_log(CKPT_DEBUG, "iteration %llu ended", (unsigned long long)iter);
    pthread_mutex_lock(&S.lock);
    uint64_t skipped = S.skipped;
    pthread_mutex_unlock(&S.lock);
    ckpt_agent_send(CKPT_MSG_BOUNDARY, iter, skipped);
    ckpt_fault_point(CKPT_FAULT_BOUNDARY, iter);
    ckpt_fault_point(CKPT_FAULT_PERSIST, iter);
    ckpt_reg_set_iteration(iter);
    uint64_t t = ckpt_now_ns();
    ckpt_tl_add(&(struct ckpt_tl_event){.start_ns = t, .end_ns = t, .iteration = iter, .kind = CKPT_TL_BOUNDARY});
    ckpt_tl_set_iteration(iter + 1);
    timeline_write();
    if (S.arena_ok) {
        const char *rank = getenv("RANK");
        ckpt_pace_boundary(iter, t, S.arena.dir, rank ? (uint32_t)atoi(rank) : 0);
    }
    if (!ckpt_history_boundary(iter))
        return; /* replaying, or the log can no longer restore this */
    if (iter % (uint64_t)ckpt_cfg_int(CFG_EVERY) != 0)
        return;
    bool colls = false;
    ckpt_bd_period(&colls);
    if (graph_memory_live(iter))
        return;
    /* Before the lock: the program answers on a thread of its own. */
    double waited_ms = 0;
    bool declared = __atomic_load_n(&ckpt_capturing, __ATOMIC_SEQ_CST) > 0 || ckpt_declare_refresh(iter, &waited_ms);
    pthread_mutex_lock(&S.lock);
    S.held_ms += waited_ms;
    /* Under the lock, against ckpt_before_capture: either it sees this
     * snapshot in flight, or this sees its capture. */
    if (__atomic_load_n(&ckpt_capturing, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_unlock(&S.lock);
        ckpt_log(CKPT_DEBUG, "iteration %llu: a stream is being captured; no snapshot", (unsigned long long)iter);
        return;
    }
    ckpt_self_depth++;
    take(iter, colls, declared);
    ckpt_self_depth--;
    pthread_mutex_unlock(&S.lock);
}

void ckpt_before_capture(void)
{
    if (!__atomic_load_n(&S.in_flight, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&S.lock);
    ckpt_self_depth++;
    if (S.in_flight)
        ckpt_pace_flush();
    while (S.in_flight)
        pthread_cond_wait(&S.cond, &S.lock);
    ckpt_self_depth--;
    pthread_mutex_unlock(&S.lock);
}

/* The thread whose calls the boundary learner reads: the first of the
 * program's threads that made a token, never one a library started (NCCL
 * joins a nonblocking communicator on a thread of its own, which waits
 * on its streams before the program's first iteration).  Another
 * thread's syncs would interleave with its tokens differently in every
 * run, and a replaying run must end its iterations at the same calls of
 * the same thread as the recorded run. */
static uint64_t token_thread;
static bool tokens_mine(void)
{
    if (ckpt_thread_internal)
        return false;
    uint64_t me = ckpt_thread_key(), none = 0;
    uint64_t owner = __atomic_load_n(&token_thread, __ATOMIC_RELAXED);
    if (!owner && __atomic_compare_exchange_n(&token_thread, &none, me, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return true;
    return (owner ? owner : none) == me;
}

void ckpt_on_sync(uint64_t token)
{
    if (tokens_mine() && ckpt_bd_feed(CKPT_TOK_SYNC, token) == CKPT_BD_BOUNDARY)
        boundary();
}

void ckpt_on_marker(void)
{
    if (ckpt_bd_marker() == CKPT_BD_BOUNDARY)
        boundary();
}

void ckpt_on_collective(uint64_t token, CUstream s)
{
    bool virtual = ckpt_v_on(); /* a standby with no context takes no snapshot */
    if (!virtual)
        ckpt_stream_seen(s = V(s));
    enum ckpt_bd_event what = tokens_mine() ? ckpt_bd_feed(CKPT_TOK_COLL, token) : CKPT_BD_NONE;
    if (virtual)
        return;
    ckpt_self_depth++;
    if (ckpt_pace_collective(s) != CUDA_SUCCESS)
        ckpt_log_once(CKPT_WARN, "a paced snapshot copy could not be queued; the rest goes before the update");
    ckpt_self_depth--;
    if (what != CKPT_BD_LAST_COLL || !S.wait_pending)
        return;
    pthread_mutex_lock(&S.lock);
    ckpt_self_depth++;
    if (S.wait_pending && S.in_flight) {
        ckpt_pace_flush();
        streams_wait_done();
    }
    ckpt_self_depth--;
    S.wait_pending = false;
    pthread_mutex_unlock(&S.lock);
}

void ckpt_before_free(CUstream stream, bool on_stream)
{
    if (!__atomic_load_n(&S.in_flight, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&S.lock);
    ckpt_self_depth++;
    if (S.in_flight) {
        ckpt_pace_flush();
        if (on_stream)
            real_cuStreamWaitEvent(V(stream), S.done, 0);
        else
            real_cuEventSynchronize(S.done);
    }
    ckpt_self_depth--;
    pthread_mutex_unlock(&S.lock);
}

/* One line per rank at exit.  A snapshot still in flight is given a moment
 * to commit; the previous one stays valid either way. */
__attribute__((destructor)) static void ckpt_snapshot_exit(void)
{
    if (!S.ready || S.pid != getpid())
        return; /* a fork child: its copy of this state belongs to the parent */
    pthread_mutex_lock(&S.lock);
    if (S.in_flight)
        ckpt_pace_flush();
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (S.in_flight && pthread_cond_timedwait(&S.cond, &S.lock, &deadline) == 0)
        ;
    S.stop = true;
    pthread_cond_broadcast(&S.cond);
    timeline_write(); /* with the last snapshot's copies */
    uint64_t taken = S.taken;
    ckpt_log(CKPT_INFO,
             "snapshots %llu (skipped %llu), %.1f MiB each (the last: %.1f MiB of allocations; copied plain %.1f, "
             "stream-ordered %.1f, VMM %.1f, managed %.1f, pitched %.1f, device variables %.1f MiB), copy mean "
             "%.2f ms max %.2f ms, program held %.1f ms",
             (unsigned long long)taken, (unsigned long long)S.skipped,
             taken ? S.bytes / (double)taken / (1 << 20) : 0.0, S.allocated_last / 1048576.0, S.kind_bytes[CKPT_ALLOC_PLAIN] / 1048576.0,
             S.kind_bytes[CKPT_ALLOC_ASYNC] / 1048576.0, S.kind_bytes[CKPT_ALLOC_VMM] / 1048576.0,
             S.kind_bytes[CKPT_ALLOC_MANAGED] / 1048576.0, S.kind_bytes[CKPT_ALLOC_PITCH] / 1048576.0,
             S.kind_bytes[CKPT_ALLOC_GLOBAL] / 1048576.0, taken ? S.copy_ms_sum / taken : 0.0, S.copy_ms_max,
             S.held_ms);
    uint64_t asked, whole;
    ckpt_declare_counts(&asked, &whole);
    if (asked)
        ckpt_log(whole ? CKPT_INFO : CKPT_DEBUG, "the program was asked which blocks are free at %llu snapshots; "
                 "%llu of them copied whole allocations for want of an answer", (unsigned long long)asked,
                 (unsigned long long)whole);
    pthread_mutex_unlock(&S.lock);
}
