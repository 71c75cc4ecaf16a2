/*
 * The pacer: when a snapshot's device-to-host copies run (CKPT_SCHED).  It
 * keeps the rank's gap profile (runtime/schedule.h) up to date from the
 * timeline and publishes it for the node agent.  Under gap the copies are
 * gated on the GPU, not timed by the host (which runs ahead of it): the
 * pieces that fit before the first collective are queued at the boundary,
 * and as the program queues its k-th collective, the copy stream is made to
 * wait for that collective's end and given the pieces that fit in the idle
 * gap before collective k+1.  What is left when the program queues the
 * iteration's last collective is queued after it (a spill: the update
 * waits for it on the GPU, exactly as it waits for eager copies), so
 * consistency is the snapshot engine's, unchanged.  It never places a copy
 * inside a profiled collective span, and never fails the program: its CUDA
 * errors go back to the snapshot engine.
 *
 * Copy before write.  Until the program's streams wait for the copies (at
 * the iteration's last collective, or at once without collectives or under
 * strict), the program runs on beside them, and may write an allocation
 * before its copy has read it: an optimizer sharded as ZeRO shards it
 * steps between collectives, a logging all-reduce may come after the step.
 * So every write the program queues meanwhile (a kernel, through any
 * pointer its parameters carry: it may write through each; a copy's or a
 * memset's destination; a collective's receive buffer) first waits on the
 * GPU for the copies of the allocations it reaches: those the pacer had not
 * queued yet are queued at once on a stream of their own (the side stream,
 * ordered after the boundary), those it had are waited for where they
 * are.  A write it cannot see into (a graph launch, a kernel the driver
 * cannot describe) waits for every copy.  A kernel that only reads an
 * allocation waits for it too: the copies then run ahead of the program's
 * first use of each allocation instead of in the gaps (touch_bytes).
 *
 * Through device memory (CKPT_SHADOW_MB): with a shadow, taken at the
 * program's first device allocation, every allocation that fits is copied
 * into it at the boundary, device to device (at the device's memory
 * bandwidth, on a stream of its own); a write waits only for that, and the
 * shadow goes to the host in the gaps as the allocations would have
 * (shadow_bytes).  What does not fit is copied before a write as above.
 * The shadow moves the program's later allocations by its size, the same
 * way in every run; the log says where it is (an ASIDE record), so a
 * standby holds its place.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "format.h"
#include "interpose.h"
#include "log.h"
#include "schedule.h"
#include "timeline.h"
#include "util.h"

#define PIECE (64ULL << 20)    /* a piece never holds the copy engine longer (snapshot.c) */
#define MIN_PIECE (1ULL << 20) /* a gap that carries less is left idle: per-copy overhead */
#define BATCHES 64             /* timed batches per snapshot; later ones go untimed */
#define RATE_SAFETY 0.8        /* place at this share of the measured rate */
#define FIRST_GAP_SHARE 0.8    /* the gap before the first collective is timed by the host from the
                                  boundary, not gated on the GPU: only this share of it is used */

_Static_assert(CKPT_SCHED_SPANS < BATCHES, "a batch per gap, and the spill");

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;

    struct ckpt_sched_profile prof; /* the published one */
    bool have_prof;
    uint64_t last_check;
    double rate_bps; /* measured device-to-host rate, bytes/s */

    /* The snapshot in flight. */
    struct ckpt_pace_job job;
    bool paced, issued; /* gated on collectives; every piece and done queued */
    bool was_paced;
    struct ckpt_sched_slot slot[CKPT_SCHED_SPANS];
    size_t nslots, next; /* the gap before collective `next` comes next */
    long i;              /* cursor: allocation, offset in it */
    uint64_t off, total, queued;
    uint64_t now_bytes, gap_bytes, spill_bytes; /* queued at the boundary, in gaps, before the update */
    unsigned nbatch;
    CUevent ev[BATCHES][2], gate, clock;
    uint64_t bbytes[BATCHES];
    bool bspill[BATCHES];
    bool events_ok;
    CUresult failed; /* the first copy error of the snapshot in flight */

    /* Copy before write: pending until the program's streams wait for
     * done.  Per record: the last main-stream batch holding a piece of it
     * (-1: none; BATCHES: an untimed one) and whether the rest went on the
     * side stream; the records in address order of their allocations. */
    bool pending, indexed;
    uint64_t lo, hi; /* the job's allocations lie in [lo, hi) */
    CUstream side;
    CUevent side_done, tail;
    bool side_ok, side_used;
    int32_t *mb;
    bool *sd;
    long *order;
    long rec_cap;
    uint64_t touch_bytes;
    CUevent sev[BATCHES][2]; /* timed side-stream copies: one pair per write that queued some */
    uint64_t sbytes[BATCHES];
    unsigned nside;

    /* The shadow: records copied into it at the boundary (sh: offset + 1,
     * shfrom: from where in the record), sent to the host from there. */
    CUdeviceptr shadow;
    uint64_t shadow_size, shadow_used, shadow_bytes;
    CUstream dd;
    CUevent dd_done;
    bool dd_ok, dd_unwaited;
    uint64_t *sh, *shfrom;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* Queues up to max bytes of pieces from the cursor, timed as one batch
 * when an event pair is free; records done after the last piece.  With
 * P.lock held. */
static CUresult batch(uint64_t max, bool spill)
{
    const struct ckpt_pace_job *j = &P.job;
    CUresult r = CUDA_SUCCESS;
    uint64_t sent = 0;
    unsigned b = P.nbatch;
    bool timed = P.events_ok && b < BATCHES;

    if (timed)
        real_cuEventRecord(P.ev[b][0], j->stream);
    while (P.i < j->n && sent < max && r == CUDA_SUCCESS) {
        if (P.indexed && P.sd[P.i]) { /* copied before a write, on the side stream */
            P.i++;
            P.off = 0;
            continue;
        }
        uint64_t size = j->recs[P.i].bytes, len = size - P.off;
        CUdeviceptr src = j->allocs[P.i].addr + j->recs[P.i].start + P.off;
        if (P.indexed && P.sh[P.i]) { /* the allocation may be written already: its shadow holds the bytes */
            src = P.shadow + P.sh[P.i] - 1 + (P.off - P.shfrom[P.i]);
            if (P.dd_unwaited && (r = real_cuStreamWaitEvent(j->stream, P.dd_done, 0)) != CUDA_SUCCESS)
                break;
            P.dd_unwaited = false;
        } else if (P.indexed) {
            P.mb[P.i] = timed ? (int32_t)b : BATCHES;
        }
        if (len > PIECE)
            len = PIECE;
        if (len > max - sent)
            len = max - sent;
        if (len)
            r = real_cuMemcpyDtoHAsync_v2(j->dst + j->recs[P.i].offset + P.off, src, len, j->stream);
        sent += len;
        P.off += len;
        if (P.off >= size) {
            P.i++;
            P.off = 0;
        }
    }
    if (timed) {
        real_cuEventRecord(P.ev[b][1], j->stream);
        P.bbytes[b] = sent;
        P.bspill[b] = spill;
        P.nbatch++;
    }
    P.queued += sent;
    if (r != CUDA_SUCCESS && P.failed == CUDA_SUCCESS)
        P.failed = r;
    if (spill)
        P.spill_bytes += sent;
    else if (P.was_paced)
        P.gap_bytes += sent;
    else
        P.now_bytes += sent;
    if (r == CUDA_SUCCESS && P.i >= j->n && !P.issued) {
        if (P.side_used && (r = real_cuEventRecord(P.side_done, P.side)) == CUDA_SUCCESS)
            r = real_cuStreamWaitEvent(j->stream, P.side_done, 0);
        if (r == CUDA_SUCCESS)
            r = real_cuEventRecord(j->done, j->stream);
        P.issued = true;
        __atomic_store_n(&P.paced, false, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&P.cond);
    }
    return r;
}

/* The batch events, once, in the program's context (current here). */
static void make_events(void)
{
    static bool tried;
    if (tried)
        return;
    tried = true;
    P.events_ok = real_cuEventCreate(&P.gate, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                  real_cuEventCreate(&P.clock, CU_EVENT_DEFAULT) == CUDA_SUCCESS;
    for (int b = 0; b < BATCHES && P.events_ok; b++)
        P.events_ok = real_cuEventCreate(&P.ev[b][0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
                      real_cuEventCreate(&P.ev[b][1], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
                      real_cuEventCreate(&P.sev[b][0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
                      real_cuEventCreate(&P.sev[b][1], CU_EVENT_DEFAULT) == CUDA_SUCCESS;
    if (!P.events_ok)
        ckpt_log_once(CKPT_WARN, "cannot create the copy timing events: copies are neither timed nor paced");
    P.side_ok = real_cuStreamCreate(&P.side, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                real_cuEventCreate(&P.side_done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                real_cuEventCreate(&P.tail, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
    if (!P.side_ok)
        ckpt_log_once(CKPT_WARN, "cannot create the side stream: a write before its allocation's copy waits "
                                 "for every copy of the snapshot");
    P.dd_ok = P.shadow && P.side_ok && ckpt_resolve("cuMemcpyDtoDAsync_v2") == 0 &&
              real_cuStreamCreate(&P.dd, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
              real_cuEventCreate(&P.dd_done, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
    if (P.shadow && !P.dd_ok)
        ckpt_log_once(CKPT_WARN, "cannot create the shadow's stream: writes wait for their copies to the host");
}

static int by_address(const void *a, const void *b, void *job)
{
    const struct ckpt_alloc *allocs = ((const struct ckpt_pace_job *)job)->allocs;
    long i = *(const long *)a, k = *(const long *)b;
    uint64_t x = allocs[i].addr, y = allocs[k].addr;
    return x != y ? (x < y ? -1 : 1) : (i > k) - (i < k);
}

/* The per-record state of copy before write, for P.job; false when there
 * is no memory for it (every write then waits for every copy).  With
 * P.lock held. */
static bool index_records(void)
{
    const struct ckpt_pace_job *j = &P.job;
    if (j->n > P.rec_cap) {
        long cap = j->n + j->n / 2 + 16;
        int32_t *mb = realloc(P.mb, cap * sizeof(*mb));
        P.mb = mb ? mb : P.mb;
        bool *sd = mb ? realloc(P.sd, cap * sizeof(*sd)) : NULL;
        P.sd = sd ? sd : P.sd;
        long *order = sd ? realloc(P.order, cap * sizeof(*order)) : NULL;
        P.order = order ? order : P.order;
        uint64_t *sh = order ? realloc(P.sh, cap * sizeof(*sh)) : NULL;
        P.sh = sh ? sh : P.sh;
        uint64_t *shfrom = sh ? realloc(P.shfrom, cap * sizeof(*shfrom)) : NULL;
        P.shfrom = shfrom ? shfrom : P.shfrom;
        if (!shfrom)
            return false;
        P.rec_cap = cap;
    }
    uint64_t lo = UINT64_MAX, hi = 0;
    for (long i = 0; i < j->n; i++) {
        P.mb[i] = -1;
        P.sd[i] = false;
        P.sh[i] = 0;
        P.order[i] = i;
        lo = j->allocs[i].addr < lo ? j->allocs[i].addr : lo;
        hi = j->allocs[i].addr + j->allocs[i].size > hi ? j->allocs[i].addr + j->allocs[i].size : hi;
    }
    __atomic_store_n(&P.lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&P.hi, hi, __ATOMIC_RELAXED);
    qsort_r(P.order, j->n, sizeof(*P.order), by_address, (void *)j);
    return true;
}

/* The next gap's share; a gap that carries less than a piece's worth of
 * overhead stays idle.  With P.lock held. */
static CUresult next_gap(void)
{
    uint64_t b = P.next < P.nslots ? P.slot[P.next].bytes : 0;
    P.next++;
    return b >= MIN_PIECE || (b && b >= P.total - P.queued) ? batch(b, false) : CUDA_SUCCESS;
}

/* With a shadow: every record that fits is copied into it at once, device
 * to device; the host's copies read them there, and a write waits only for
 * the copies into it.  With P.lock held, indexed. */
static CUresult shadow_fill(void)
{
    const struct ckpt_pace_job *j = &P.job;
    CUresult r = CUDA_SUCCESS;
    for (long i = 0; i < j->n && r == CUDA_SUCCESS; i++) {
        uint64_t len = j->recs[i].bytes, room = P.shadow_size - P.shadow_used;
        if (!len || len > room)
            continue;
        r = real_cuMemcpyDtoDAsync_v2(P.shadow + P.shadow_used, j->allocs[i].addr + j->recs[i].start, len, P.dd);
        P.sh[i] = P.shadow_used + 1;
        P.shfrom[i] = 0;
        P.shadow_used += len + 255 < room ? (len + 255) & ~(uint64_t)255 : room;
        P.shadow_bytes += len;
    }
    if (r == CUDA_SUCCESS && P.shadow_bytes && (r = real_cuEventRecord(P.dd_done, P.dd)) == CUDA_SUCCESS)
        P.dd_unwaited = true; /* the main stream waits for it before it reads the shadow */
    return r;
}

CUresult ckpt_pace_start(const struct ckpt_pace_job *job, bool paced)
{
    pthread_mutex_lock(&P.lock);
    P.job = *job;
    P.i = 0;
    P.off = 0;
    P.total = P.queued = 0;
    for (long i = 0; i < job->n; i++)
        P.total += job->recs[i].bytes;
    P.now_bytes = P.gap_bytes = P.spill_bytes = 0;
    P.nbatch = 0;
    P.issued = false;
    P.failed = CUDA_SUCCESS;
    make_events();
    P.side_used = false;
    P.touch_bytes = 0;
    P.nside = 0;
    P.shadow_used = P.shadow_bytes = 0; /* the last snapshot's copies from it are done */
    P.dd_unwaited = false;
    /* The side streams start where the main one does: after the boundary. */
    P.indexed = P.side_ok && index_records() && real_cuStreamWaitEvent(P.side, job->start, 0) == CUDA_SUCCESS &&
                (!P.dd_ok || real_cuStreamWaitEvent(P.dd, job->start, 0) == CUDA_SUCCESS);
    CUresult r = P.indexed && P.dd_ok ? shadow_fill() : CUDA_SUCCESS;
    __atomic_store_n(&P.pending, true, __ATOMIC_RELEASE);
    paced = paced && ckpt_cfg_int(CFG_SCHED) == CKPT_SCHED_GAP && P.have_prof && P.rate_bps > 0 && P.events_ok;
    /* A snapshot copied within the profile's margin cannot delay a
     * collective by more than the margin allows: it goes now, and commits
     * an iteration earlier than a paced one would. */
    if (paced && (double)P.total / P.rate_bps * 1e9 < (double)P.prof.margin_ns)
        paced = false;
    P.was_paced = paced;
    if (r == CUDA_SUCCESS && paced) {
        /* The first gap shortened before placing, so that what it cannot
         * carry goes to the later gaps, not to the update. */
        struct ckpt_sched_profile prof = P.prof;
        prof.gap_ns[0] = (uint64_t)(prof.gap_ns[0] * FIRST_GAP_SHARE);
        P.nslots = ckpt_sched_place(&prof, P.total, (uint64_t)(P.rate_bps * RATE_SAFETY), P.slot,
                                    CKPT_SCHED_SPANS, NULL);
        P.next = 0;
        __atomic_store_n(&P.paced, true, __ATOMIC_RELEASE);
        r = next_gap(); /* the GPU is idle at the boundary: the first gap starts now */
    } else if (r == CUDA_SUCCESS) {
        r = batch(UINT64_MAX, false);
    }
    if (r != CUDA_SUCCESS) { /* the snapshot is not taken: nothing to gate, nothing to wait for */
        __atomic_store_n(&P.paced, false, __ATOMIC_RELEASE);
        __atomic_store_n(&P.pending, false, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&P.lock);
    return r;
}

CUresult ckpt_pace_collective(CUstream s)
{
    CUresult r = CUDA_SUCCESS;

    if (!__atomic_load_n(&P.paced, __ATOMIC_ACQUIRE))
        return r;
    pthread_mutex_lock(&P.lock);
    if (P.paced && !P.issued) {
        /* The copy stream waits (on the GPU) for this collective's end. */
        r = real_cuEventRecord(P.gate, s);
        if (r == CUDA_SUCCESS)
            r = real_cuStreamWaitEvent(P.job.stream, P.gate, 0);
        if (r == CUDA_SUCCESS)
            r = next_gap();
    }
    pthread_mutex_unlock(&P.lock);
    return r;
}

CUresult ckpt_pace_flush(void)
{
    CUresult r = CUDA_SUCCESS;

    pthread_mutex_lock(&P.lock);
    if (!P.issued) {
        __atomic_store_n(&P.paced, false, __ATOMIC_RELEASE);
        r = batch(UINT64_MAX, true);
        if (r != CUDA_SUCCESS && !P.issued) { /* done still marks the end of what was queued */
            real_cuEventRecord(P.job.done, P.job.stream);
            P.issued = true;
        }
        pthread_cond_broadcast(&P.cond);
    }
    pthread_mutex_unlock(&P.lock);
    return r;
}

CUresult ckpt_pace_wait_issued(void)
{
    pthread_mutex_lock(&P.lock);
    while (!P.issued)
        pthread_cond_wait(&P.cond, &P.lock);
    CUresult r = P.failed;
    pthread_mutex_unlock(&P.lock);
    return r;
}

/* The allocation holding a: the range [*lo, *hi) of P.order, or false. */
static bool records_at(uint64_t a, long *lo, long *hi)
{
    const struct ckpt_pace_job *j = &P.job;
    long l = 0, h = j->n;
    while (l < h) { /* the first record whose allocation starts past a */
        long mid = (l + h) / 2;
        if (j->allocs[P.order[mid]].addr <= a)
            l = mid + 1;
        else
            h = mid;
    }
    if (l == 0)
        return false;
    const struct ckpt_alloc *al = &j->allocs[P.order[l - 1]];
    if (a >= al->addr + al->size)
        return false;
    *hi = l;
    for (*lo = l - 1; *lo > 0 && j->allocs[P.order[*lo - 1]].addr == al->addr; (*lo)--)
        ;
    return true;
}

/* Every copy queued, and stream s (host: the host) waiting for them all.
 * With P.lock held. */
static CUresult wait_all(CUstream s, bool host)
{
    if (!P.issued) {
        __atomic_store_n(&P.paced, false, __ATOMIC_RELEASE);
        if (batch(UINT64_MAX, true) != CUDA_SUCCESS && !P.issued) { /* P.failed says why */
            real_cuEventRecord(P.job.done, P.job.stream);
            P.issued = true;
        }
        pthread_cond_broadcast(&P.cond);
    }
    if (!host)
        return real_cuStreamWaitEvent(s, P.job.done, 0);
    CUresult r = real_cuEventSynchronize(P.job.done);
    __atomic_store_n(&P.pending, false, __ATOMIC_RELEASE); /* every copy is done */
    return r;
}

CUresult ckpt_pace_touch(CUstream s, const uint64_t *addrs, size_t n)
{
    const struct ckpt_pace_job *j = &P.job;
    CUresult r = CUDA_SUCCESS;
    int32_t main_batch = -1;
    bool side = false;
    uint64_t sent = 0;
    bool timed = false, shadowed = false;

    if (!__atomic_load_n(&P.pending, __ATOMIC_ACQUIRE))
        return r;
    /* Most words of most launches are sizes and strides: no lock for them. */
    uint64_t lo = __atomic_load_n(&P.lo, __ATOMIC_RELAXED), hi = __atomic_load_n(&P.hi, __ATOMIC_RELAXED);
    size_t k = 0;
    while (k < n && (addrs[k] < lo || addrs[k] >= hi))
        k++;
    if (k == n && __atomic_load_n(&P.indexed, __ATOMIC_RELAXED))
        return r;
    pthread_mutex_lock(&P.lock);
    if (!P.pending) {
        pthread_mutex_unlock(&P.lock);
        return r;
    }
    if (!P.indexed) {
        r = wait_all(s, false);
        pthread_mutex_unlock(&P.lock);
        return r;
    }
    for (; k < n && r == CUDA_SUCCESS; k++) {
        long first, end;
        if (!addrs[k] || !records_at(addrs[k], &first, &end))
            continue;
        for (long o = first; o < end && r == CUDA_SUCCESS; o++) {
            long i = P.order[o];
            if (P.mb[i] > main_batch)
                main_batch = P.mb[i];
            side |= P.sd[i];
            shadowed |= P.sh[i] != 0; /* its copy into the shadow may still be reading it */
            if (P.sd[i] || P.sh[i] || i < P.i || !j->recs[i].bytes)
                continue; /* its copy is queued whole, or its shadow made */
            /* Not queued yet, or only its first pieces (at the cursor):
             * the rest goes now, on the side stream. */
            uint64_t from = i == P.i ? P.off : 0, len = j->recs[i].bytes - from;
            CUdeviceptr src = j->allocs[i].addr + j->recs[i].start + from;
            if (!sent && P.events_ok && P.nside < BATCHES)
                timed = real_cuEventRecord(P.sev[P.nside][0], P.side) == CUDA_SUCCESS;
            sent += len;
            r = real_cuMemcpyDtoHAsync_v2(j->dst + j->recs[i].offset + from, src, len, P.side);
            P.sd[i] = side = P.side_used = true;
            P.queued += len;
            P.touch_bytes += len;
            if (i == P.i) {
                P.i++;
                P.off = 0;
            }
        }
    }
    if (timed && real_cuEventRecord(P.sev[P.nside][1], P.side) == CUDA_SUCCESS)
        P.sbytes[P.nside++] = sent;
    if (r == CUDA_SUCCESS && shadowed)
        r = real_cuStreamWaitEvent(s, P.dd_done, 0);
    if (r == CUDA_SUCCESS && side && (r = real_cuEventRecord(P.side_done, P.side)) == CUDA_SUCCESS)
        r = real_cuStreamWaitEvent(s, P.side_done, 0);
    if (r == CUDA_SUCCESS && main_batch >= 0) {
        CUevent ev = main_batch < BATCHES ? P.ev[main_batch][1] : P.tail;
        if (main_batch == BATCHES)
            r = real_cuEventRecord(P.tail, j->stream);
        if (r == CUDA_SUCCESS)
            r = real_cuStreamWaitEvent(s, ev, 0);
    }
    if (r != CUDA_SUCCESS) {
        if (P.failed == CUDA_SUCCESS)
            P.failed = r; /* the snapshot is lost; the write waits for what was queued */
        wait_all(s, false);
    }
    pthread_mutex_unlock(&P.lock);
    return r;
}

void ckpt_pace_shadow_take(void)
{
    static bool taken;
    if (__atomic_load_n(&taken, __ATOMIC_ACQUIRE) || !ckpt_active || ckpt_self_depth)
        return;
    pthread_mutex_lock(&P.lock);
    uint64_t bytes = (uint64_t)ckpt_cfg_int(CFG_SHADOW_MB) << 20;
    /* A standby takes none: the log holds the rank's shadow in its place
     * until the takeover, after which this process writes through PCIe. */
    if (!taken && bytes && !ckpt_standby_mem_on()) {
        CUresult r = ckpt_resolve("cuMemAlloc_v2") < 0 ? CUDA_ERROR_NOT_FOUND : real_cuMemAlloc_v2(&P.shadow, bytes);
        if (r == CUDA_SUCCESS) {
            P.shadow_size = bytes;
            ckpt_history_aside(ckpt_thread_owner(), CKPT_ASIDE_ALLOC, P.shadow, bytes);
            ckpt_log(CKPT_DEBUG, "shadow for copies before writes: %llu MiB at 0x%llx",
                     (unsigned long long)(bytes >> 20), (unsigned long long)P.shadow);
        } else {
            P.shadow = 0;
            ckpt_log(CKPT_WARN, "cannot take CKPT_SHADOW_MB=%llu MiB of device memory (CUDA error %d): a write "
                     "before its allocation's copy waits for the copy to the host", (unsigned long long)(bytes >> 20),
                     (int)r);
        }
    }
    __atomic_store_n(&taken, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&P.lock);
}

CUresult ckpt_pace_touch_all(CUstream s, bool host)
{
    CUresult r = CUDA_SUCCESS;
    if (!__atomic_load_n(&P.pending, __ATOMIC_ACQUIRE))
        return r;
    pthread_mutex_lock(&P.lock);
    if (P.pending)
        r = wait_all(s, host);
    pthread_mutex_unlock(&P.lock);
    return r;
}

bool ckpt_pace_pending(void)
{
    return __atomic_load_n(&P.pending, __ATOMIC_ACQUIRE);
}

void ckpt_pace_settled(void)
{
    __atomic_store_n(&P.pending, false, __ATOMIC_RELEASE);
}

void ckpt_pace_finished(uint64_t copied_at, uint64_t snap_iter, char *stats, size_t statslen)
{
    static const char *const modes[] = {"gap", "eager", "off"};
    float total_ms = 0, a, b;
    double busy_ns = 0;

    pthread_mutex_lock(&P.lock);
    __atomic_store_n(&P.pending, false, __ATOMIC_RELEASE); /* done completed */
    /* Where start lies on the host's clock: an event queued on the idle
     * copy stream completes at once; spinning on it (not sleeping) reads
     * the host clock within microseconds of its GPU time. */
    uint64_t start_host = copied_at - (uint64_t)(total_ms * 1e6), spin_end = ckpt_now_ns() + 20000000;
    if (real_cuEventRecord(P.clock, P.job.stream) == CUDA_SUCCESS) {
        CUresult q;
        while ((q = real_cuEventQuery(P.clock)) == CUDA_ERROR_NOT_READY && ckpt_now_ns() < spin_end)
            ;
        uint64_t at = ckpt_now_ns();
        float ms;
        if (q == CUDA_SUCCESS && real_cuEventElapsedTime_v2(&ms, P.job.start, P.clock) == CUDA_SUCCESS)
            start_host = at - (uint64_t)(ms * 1e6);
    }
    for (unsigned k = 0; k < P.nbatch; k++) {
        if (real_cuEventElapsedTime_v2(&a, P.job.start, P.ev[k][0]) != CUDA_SUCCESS ||
            real_cuEventElapsedTime_v2(&b, P.job.start, P.ev[k][1]) != CUDA_SUCCESS || !P.bbytes[k])
            continue;
        struct ckpt_tl_event e = {.start_ns = start_host + (uint64_t)(a * 1e6),
                                  .end_ns = start_host + (uint64_t)(b * 1e6),
                                  .iteration = snap_iter + 1,
                                  .arg = P.bbytes[k],
                                  .kind = CKPT_TL_COPY,
                                  .flags = CKPT_TL_GPU_TIME | (P.bspill[k] ? CKPT_TL_SPILL : 0) |
                                           (P.was_paced && !P.bspill[k] ? CKPT_TL_PACED : 0),
                                  .detail = (uint32_t)snap_iter};
        ckpt_tl_add(&e);
        busy_ns += (b - a) * 1e6;
    }
    for (unsigned k = 0; k < P.nside; k++) { /* copied before a write: not the link's idle rate */
        if (real_cuEventElapsedTime_v2(&a, P.job.start, P.sev[k][0]) != CUDA_SUCCESS ||
            real_cuEventElapsedTime_v2(&b, P.job.start, P.sev[k][1]) != CUDA_SUCCESS)
            continue;
        ckpt_tl_add(&(struct ckpt_tl_event){.start_ns = start_host + (uint64_t)(a * 1e6),
                                            .end_ns = start_host + (uint64_t)(b * 1e6),
                                            .iteration = snap_iter + 1,
                                            .arg = P.sbytes[k],
                                            .kind = CKPT_TL_COPY,
                                            .flags = CKPT_TL_GPU_TIME | CKPT_TL_TOUCH,
                                            .detail = (uint32_t)snap_iter});
    }
    uint64_t bytes = P.now_bytes + P.gap_bytes + P.spill_bytes;
    if (busy_ns > 0 && bytes >= MIN_PIECE) { /* the rate of the copies themselves, idle gaps left out */
        double r = bytes * 1e9 / busy_ns;
        P.rate_bps = P.rate_bps > 0 ? 0.5 * P.rate_bps + 0.5 * r : r;
    }
    int mode = (int)ckpt_cfg_int(CFG_SCHED);
    snprintf(stats, statslen, "\"sched\":\"%s\",\"paced\":%s,\"boundary_bytes\":%llu,\"gap_bytes\":%llu,"
             "\"spill_bytes\":%llu,\"touch_bytes\":%llu,\"shadow_bytes\":%llu,\"batches\":%u,\"profile_epoch\":%llu",
             modes[mode],
             P.was_paced ? "true" : "false", (unsigned long long)P.now_bytes, (unsigned long long)P.gap_bytes,
             (unsigned long long)P.spill_bytes, (unsigned long long)P.touch_bytes,
             (unsigned long long)P.shadow_bytes, P.nbatch,
             (unsigned long long)(P.have_prof ? P.prof.epoch : 0));
    P.prof.copy_bps = (uint64_t)P.rate_bps;
    pthread_mutex_unlock(&P.lock);
}

void ckpt_pace_boundary(uint64_t iter, uint64_t t_ns, const char *dir, uint32_t rank)
{
    static struct ckpt_tl_event ev[CKPT_TL_CAP];
    static pthread_mutex_t ev_lock = PTHREAD_MUTEX_INITIALIZER;
    struct ckpt_sched_profile fresh;
    uint64_t dropped;

    /* Iteration 1 warms up; re-check every CKPT_SCHED_PROFILE_ITERS. */
    bool due = iter > CKPT_SCHED_PROFILE_ITERS + 1 && iter >= P.last_check + CKPT_SCHED_PROFILE_ITERS;
    if (due) {
        pthread_mutex_lock(&ev_lock);
        uint64_t from = iter - CKPT_SCHED_PROFILE_ITERS + 1;
        size_t n = ckpt_tl_collect(from - 1, ev, &dropped);
        int rc = ckpt_sched_build(ev, n, from, iter, &fresh);
        pthread_mutex_unlock(&ev_lock);
        pthread_mutex_lock(&P.lock);
        P.last_check = iter;
        if (rc == 0 && (!P.have_prof || ckpt_sched_changed(&P.prof, &fresh, CKPT_SCHED_CHANGE_PCT))) {
            fresh.epoch = P.have_prof ? P.prof.epoch + 1 : 1;
            ckpt_log(CKPT_DEBUG, "schedule %llu from iterations %llu..%llu: period %.3f ms, %u collective spans",
                     (unsigned long long)fresh.epoch, (unsigned long long)from, (unsigned long long)iter,
                     fresh.period_ns / 1e6, fresh.nspans);
            P.prof = fresh;
            P.have_prof = true;
        }
        pthread_mutex_unlock(&P.lock);
    }
    pthread_mutex_lock(&P.lock);
    if (P.have_prof && dir) {
        P.prof.rank = rank;
        P.prof.anchor_iter = iter + 1;
        P.prof.anchor_ns = t_ns;
        P.prof.copy_bps = (uint64_t)P.rate_bps;
        int rc = ckpt_sched_write(dir, &P.prof);
        if (rc < 0)
            ckpt_log_once(CKPT_WARN, "cannot publish the schedule into %s: %s", dir, strerror(-rc));
    }
    pthread_mutex_unlock(&P.lock);
}
