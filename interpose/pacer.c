/*
 * The pacer: when a snapshot's device-to-host copies are queued
 * (CKPT_SCHED).  It keeps the rank's gap profile (runtime/sched.h) up to
 * date from the timeline, publishes it for the node agent, and under gap
 * queues each snapshot's pieces from its own thread at the start of each
 * idle gap of the next iteration, as many bytes as the gap carries at the
 * measured copy rate.  What is left when the program reaches the
 * iteration's last collective is queued then (a spill: the update waits for
 * it on the GPU, exactly as it waits for eager copies), so consistency is
 * the snapshot engine's, unchanged.  It never queues a copy inside a
 * profiled collective span, and never fails the program: its CUDA errors
 * go back to the snapshot engine.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "format.h"
#include "interpose.h"
#include "log.h"
#include "schedule.h"
#include "timeline.h"

#define PIECE (64ULL << 20)   /* a piece never holds the copy engine longer (snapshot.c) */
#define MIN_PIECE (1ULL << 20) /* a gap that carries less is left idle: per-copy overhead */
#define BATCHES 64            /* timed batches per snapshot; later gaps go unused */
#define RATE_SAFETY 0.8       /* place at this share of the measured rate */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool started, stop;
    CUcontext ctx;
    pthread_t thread;

    struct ckpt_sched_profile prof; /* the published one */
    bool have_prof;
    uint64_t last_check;
    double rate_bps; /* measured device-to-host rate, bytes/s */

    /* The snapshot in flight. */
    struct ckpt_pace_job job;
    bool paced, issued; /* handed to the thread; every piece and done queued */
    long i;             /* cursor: allocation, offset in it */
    uint64_t off, total, anchor_ns;
    bool was_paced;
    uint64_t now_bytes, gap_bytes, spill_bytes; /* queued at the boundary, in gaps, before the update */
    unsigned nbatch;
    CUevent ev[BATCHES][2];
    uint64_t bbytes[BATCHES];
    bool bspill[BATCHES];
    bool events_ok;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static uint64_t mono_ns(void)
{
    return ckpt_tl_now();
}

/* Queues up to max bytes of pieces from the cursor, timed as one batch
 * when an event pair is free.  With P.lock held. */
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
        uint64_t size = j->recs[P.i].size, len = size - P.off;
        if (len > PIECE)
            len = PIECE;
        if (len > max - sent)
            len = max - sent;
        if (len)
            r = real_cuMemcpyDtoHAsync_v2(j->dst + j->recs[P.i].offset + P.off, j->allocs[P.i].addr + P.off, len,
                                          j->stream);
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
    if (spill)
        P.spill_bytes += sent;
    else if (P.was_paced)
        P.gap_bytes += sent;
    else
        P.now_bytes += sent;
    if (r == CUDA_SUCCESS && P.i >= j->n && !P.issued) {
        r = real_cuEventRecord(j->done, j->stream);
        P.issued = true;
        P.paced = false;
        pthread_cond_broadcast(&P.cond);
    }
    return r;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL), .tv_nsec = (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Paces one snapshot over the gaps before the update; leaves the rest to
 * ckpt_pace_flush.  With P.lock held (released while sleeping). */
static void pace_one(void)
{
    struct ckpt_sched_slot slot[BATCHES];
    double rate = P.rate_bps * RATE_SAFETY;
    uint64_t rel = mono_ns() - P.anchor_ns, placed;
    size_t n = ckpt_sched_place(&P.prof, rel, ckpt_sched_last_busy(&P.prof), P.total, (uint64_t)rate, slot,
                                BATCHES, &placed);

    for (size_t k = 0; k < n && P.paced; k++) {
        pthread_mutex_unlock(&P.lock);
        sleep_until(P.anchor_ns + slot[k].start_ns);
        pthread_mutex_lock(&P.lock);
        if (!P.paced)
            break;
        /* A late wake-up shrinks the batch to what the gap has left. */
        uint64_t now = mono_ns() - P.anchor_ns;
        if (now >= slot[k].end_ns)
            continue;
        uint64_t fits = (uint64_t)((double)(slot[k].end_ns - now) * rate / 1e9);
        if (fits > slot[k].bytes)
            fits = slot[k].bytes;
        if (fits < MIN_PIECE && fits < P.total - P.gap_bytes - P.now_bytes)
            continue;
        if (batch(fits, false) != CUDA_SUCCESS) {
            ckpt_log(CKPT_WARN, "a paced snapshot copy failed; the rest is queued before the update");
            break;
        }
    }
}

static void *pacer(void *arg)
{
    (void)arg;
    ckpt_self_depth = 1;
    real_cuCtxSetCurrent(P.ctx);
    pthread_mutex_lock(&P.lock);
    for (;;) {
        while (!P.paced && !P.stop)
            pthread_cond_wait(&P.cond, &P.lock);
        if (P.stop)
            break;
        pace_one();
        while (P.paced && !P.stop) /* until the flush */
            pthread_cond_wait(&P.cond, &P.lock);
    }
    pthread_mutex_unlock(&P.lock);
    return NULL;
}

/* The batch events, once, in the program's context (current here). */
static void make_events(void)
{
    static bool tried;
    if (tried)
        return;
    tried = true;
    P.events_ok = true;
    for (int b = 0; b < BATCHES && P.events_ok; b++)
        P.events_ok = real_cuEventCreate(&P.ev[b][0], CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
                      real_cuEventCreate(&P.ev[b][1], CU_EVENT_DEFAULT) == CUDA_SUCCESS;
    if (!P.events_ok)
        ckpt_log_once(CKPT_WARN, "cannot create the copy timing events: copies are not timed, nor paced");
}

/* The thread, once.  Returns 0 or -EAGAIN. */
static int start(void)
{
    if (P.started)
        return 0;
    if (real_cuCtxGetCurrent(&P.ctx) != CUDA_SUCCESS || pthread_create(&P.thread, NULL, pacer, NULL) != 0) {
        ckpt_log_once(CKPT_WARN, "cannot start the pacer thread: snapshot copies run eagerly");
        return -EAGAIN;
    }
    pthread_detach(P.thread);
    P.started = true;
    return 0;
}

CUresult ckpt_pace_start(const struct ckpt_pace_job *job, uint64_t boundary_ns, bool paced)
{
    pthread_mutex_lock(&P.lock);
    P.job = *job;
    P.i = 0;
    P.off = 0;
    P.total = 0;
    for (long i = 0; i < job->n; i++)
        P.total += job->recs[i].size;
    P.now_bytes = P.gap_bytes = P.spill_bytes = 0;
    P.nbatch = 0;
    P.issued = false;
    P.anchor_ns = boundary_ns;
    make_events();
    paced = paced && ckpt_cfg_int(CFG_SCHED) == CKPT_SCHED_GAP && P.have_prof && P.rate_bps > 0 && P.events_ok &&
            start() == 0;
    P.was_paced = paced;
    CUresult r = CUDA_SUCCESS;
    if (paced) {
        P.paced = true;
        pthread_cond_broadcast(&P.cond);
    } else {
        r = batch(UINT64_MAX, false);
    }
    pthread_mutex_unlock(&P.lock);
    return r;
}

CUresult ckpt_pace_flush(void)
{
    CUresult r = CUDA_SUCCESS;

    pthread_mutex_lock(&P.lock);
    if (!P.issued) {
        P.paced = false;
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

void ckpt_pace_wait_issued(void)
{
    pthread_mutex_lock(&P.lock);
    while (!P.issued)
        pthread_cond_wait(&P.cond, &P.lock);
    pthread_mutex_unlock(&P.lock);
}

void ckpt_pace_finished(uint64_t copied_at, uint64_t snap_iter, char *stats, size_t statslen)
{
    static const char *const modes[] = {"gap", "eager", "off"};
    float total_ms = 0, a, b;
    double busy_ns = 0;

    pthread_mutex_lock(&P.lock);
    real_cuEventElapsedTime_v2(&total_ms, P.job.start, P.job.done);
    uint64_t start_host = copied_at - (uint64_t)(total_ms * 1e6);
    for (unsigned k = 0; k < P.nbatch; k++) {
        if (real_cuEventElapsedTime_v2(&a, P.job.start, P.ev[k][0]) != CUDA_SUCCESS ||
            real_cuEventElapsedTime_v2(&b, P.job.start, P.ev[k][1]) != CUDA_SUCCESS || !P.bbytes[k])
            continue;
        struct ckpt_tl_event e = {.start_ns = start_host + (uint64_t)(a * 1e6),
                                  .end_ns = start_host + (uint64_t)(b * 1e6),
                                  .iteration = snap_iter + 1,
                                  .arg = P.bbytes[k],
                                  .kind = CKPT_TL_COPY,
                                  .flags = CKPT_TL_GPU_TIME | (P.bspill[k] ? CKPT_TL_SPILL : 0),
                                  .detail = (uint32_t)snap_iter};
        ckpt_tl_add(&e);
        busy_ns += (b - a) * 1e6;
    }
    uint64_t bytes = P.now_bytes + P.gap_bytes + P.spill_bytes;
    if (busy_ns > 0 && bytes >= MIN_PIECE) { /* the rate of the copies themselves, idle gaps left out */
        double r = bytes * 1e9 / busy_ns;
        P.rate_bps = P.rate_bps > 0 ? 0.5 * P.rate_bps + 0.5 * r : r;
    }
    int mode = (int)ckpt_cfg_int(CFG_SCHED);
    snprintf(stats, statslen, "\"sched\":\"%s\",\"paced\":%s,\"boundary_bytes\":%llu,\"gap_bytes\":%llu,"
             "\"spill_bytes\":%llu,\"batches\":%u,\"profile_epoch\":%llu", modes[mode],
             P.was_paced ? "true" : "false", (unsigned long long)P.now_bytes, (unsigned long long)P.gap_bytes,
             (unsigned long long)P.spill_bytes, P.nbatch, (unsigned long long)(P.have_prof ? P.prof.epoch : 0));
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
