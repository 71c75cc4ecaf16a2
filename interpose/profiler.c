/*
 * libckpt as NCCL's profiler plugin: GPU-side start and end of every
 * collective, for the per-rank timeline (runtime/timeline.h).  At load,
 * NCCL_PROFILER_PLUGIN is pointed at libckpt.so unless the user named a
 * plugin there (theirs wins; the NCCL wrappers then record host times
 * instead).  init asks for Coll events and their KernelCh children; a
 * Coll's span is its channels' earliest GPU start to latest GPU end.
 * NCCL calls these from its own threads at every operation: they never
 * lock, never allocate (event handles come from a fixed ring, reused after
 * HANDLES newer operations, long after NCCL is done with them), never fail
 * NCCL's call, and ask for nothing while libckpt is inactive.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_nccl_profiler.h"
#include "interpose.h"
#include "timeline.h"

#define ENV "NCCL_PROFILER_PLUGIN"
#define HANDLES 1024 /* a power of two */

struct handle {
    uint64_t type;
    struct handle *parent; /* a KernelCh's Coll */
    uint32_t func, nch;
    uint64_t count, iteration;
    uint64_t gpu_start, gpu_end; /* Coll: min/max over channels; KernelCh: its own */
    uint32_t done;               /* channels stopped */
};

static struct handle handles[HANDLES];
static uint64_t next_handle;
/* Communicators whose init asked for events: while none did, the NCCL
 * wrappers record collectives from host times. */
int ckpt_prof_comms;
int ckpt_prof_inits;

int ckpt_profiler_setup(char *err, size_t errlen)
{
    char self[PATH_MAX];
    Dl_info info;
    const char *set = getenv(ENV);

    if (set && *set)
        return 0;
    if (!dladdr((void *)ckpt_profiler_setup, &info) || !info.dli_fname || !realpath(info.dli_fname, self)) {
        snprintf(err, errlen, "libckpt.so cannot find its own file to set %s to", ENV);
        return -ENOENT;
    }
    if (setenv(ENV, self, 1) < 0) {
        snprintf(err, errlen, "cannot set %s: %s", ENV, strerror(errno));
        return -errno;
    }
    return 0;
}

static uint32_t func_of(const char *name)
{
    static const char *const names[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                        "Send", "Recv", "AlltoAll", "Gather", "Scatter"};
    for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i]) == 0)
            return (uint32_t)i + CKPT_TL_ALLREDUCE;
    return CKPT_TL_OTHER;
}

/* GPU timer values are nanoseconds of the wall clock; the timeline is in
 * CLOCK_MONOTONIC.  The offset is read at every use: the wall clock may be
 * stepped while the job runs. */
static uint64_t gpu_to_mono(uint64_t t)
{
    struct timespec r, m;
    clock_gettime(CLOCK_REALTIME, &r);
    clock_gettime(CLOCK_MONOTONIC, &m);
    int64_t off = ((int64_t)r.tv_sec - m.tv_sec) * 1000000000LL + (r.tv_nsec - m.tv_nsec);
    return (uint64_t)((int64_t)t - off);
}

static struct handle *claim(void)
{
    return &handles[__atomic_fetch_add(&next_handle, 1, __ATOMIC_RELAXED) & (HANDLES - 1)];
}

static void emit(const struct handle *c, uint64_t start, uint64_t end, uint16_t flags)
{
    struct ckpt_tl_event e = {.start_ns = start, .end_ns = end, .iteration = c->iteration, .arg = c->count,
                              .kind = CKPT_TL_COLL, .flags = flags, .detail = c->func};
    ckpt_tl_add(&e);
}

static ncclResult_t init_common(void **context, int *mask)
{
    *context = NULL;
    if (!__atomic_load_n(&ckpt_active, __ATOMIC_ACQUIRE)) {
        *mask = 0;
        return ncclSuccess;
    }
    *mask = ncclProfileColl | ncclProfileKernelCh;
    *context = handles; /* any non-NULL: marks a communicator that counts */
    __atomic_fetch_add(&ckpt_prof_comms, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&ckpt_prof_inits, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
}

static ncclResult_t init_v5(void **context, uint64_t commId, int *mask, const char *commName, int nNodes,
                            int nranks, int rank, ncclDebugLogger_t logfn)
{
    (void)commId, (void)commName, (void)nNodes, (void)nranks, (void)rank, (void)logfn;
    return init_common(context, mask);
}

static ncclResult_t init_v4(void **context, int *mask, const char *commName, uint64_t commHash, int nNodes,
                            int nranks, int rank, ncclDebugLogger_t logfn)
{
    (void)commName, (void)commHash, (void)nNodes, (void)nranks, (void)rank, (void)logfn;
    return init_common(context, mask);
}

static ncclResult_t finalize(void *context)
{
    if (context)
        __atomic_fetch_sub(&ckpt_prof_comms, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
}

/* v4 and v5 name the members used here alike. */
#define START(ctx, eHandle, d)                                                 \
    do {                                                                       \
        *(eHandle) = NULL;                                                     \
        if (!(ctx))                                                            \
            return ncclSuccess;                                                \
        if ((d)->type == ncclProfileColl) {                                    \
            struct handle *h = claim();                                        \
            *h = (struct handle){.type = ncclProfileColl,                      \
                                 .func = func_of((d)->coll.func),              \
                                 .nch = (d)->coll.nChannels ? (d)->coll.nChannels : 1, \
                                 .count = (d)->coll.count,                     \
                                 .iteration = ckpt_tl_iteration(),             \
                                 .gpu_start = UINT64_MAX};                     \
            *(eHandle) = h;                                                    \
        } else if ((d)->type == ncclProfileKernelCh && (d)->parentObj) {       \
            struct handle *h = claim();                                        \
            *h = (struct handle){.type = ncclProfileKernelCh,                  \
                                 .parent = (d)->parentObj,                     \
                                 .gpu_start = (d)->kernelCh.pTimer};           \
            *(eHandle) = h;                                                    \
        }                                                                      \
        return ncclSuccess;                                                    \
    } while (0)

static ncclResult_t start_v5(void *context, void **eHandle, ncclProfilerEventDescr_v5_t *d)
{
    START(context, eHandle, d);
}

static ncclResult_t start_v4(void *context, void **eHandle, ncclProfilerEventDescr_v4_t *d)
{
    START(context, eHandle, d);
}

static void atomic_min(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static void atomic_max(uint64_t *p, uint64_t v)
{
    uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > cur && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* A Coll is stopped once enqueued, before its kernel runs, so it is
 * written when its last channel's KernelCh stops, with the GPU's times. */
static ncclResult_t stop(void *eHandle)
{
    struct handle *h = eHandle;

    if (!h || h->type == ncclProfileColl)
        return ncclSuccess;
    struct handle *c = h->parent;
    if (c < handles || c >= handles + HANDLES || !h->gpu_start || !h->gpu_end)
        return ncclSuccess; /* not ours, or no timer values: nothing to place */
    atomic_min(&c->gpu_start, h->gpu_start);
    atomic_max(&c->gpu_end, h->gpu_end);
    if (__atomic_add_fetch(&c->done, 1, __ATOMIC_ACQ_REL) == c->nch)
        emit(c, gpu_to_mono(__atomic_load_n(&c->gpu_start, __ATOMIC_RELAXED)),
             gpu_to_mono(__atomic_load_n(&c->gpu_end, __ATOMIC_RELAXED)), CKPT_TL_GPU_TIME);
    return ncclSuccess;
}

static ncclResult_t record_v5(void *eHandle, ncclProfilerEventState_v5_t s, ncclProfilerEventStateArgs_v5_t *a)
{
    struct handle *h = eHandle;
    if (h && h->type == ncclProfileKernelCh && s == ncclProfilerKernelChStop && a)
        h->gpu_end = a->kernelCh.pTimer;
    return ncclSuccess;
}

static ncclResult_t record_v4(void *eHandle, ncclProfilerEventState_v4_t s, ncclProfilerEventStateArgs_v4_t *a)
{
    struct handle *h = eHandle;
    if (h && h->type == ncclProfileKernelCh && s == ncclProfilerKernelChStop && a)
        h->gpu_end = a->kernelCh.pTimer;
    return ncclSuccess;
}

__attribute__((visibility("default"))) ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "libckpt",
    .init = init_v5,
    .startEvent = start_v5,
    .stopEvent = stop,
    .recordEventState = record_v5,
    .finalize = finalize,
};

__attribute__((visibility("default"))) ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "libckpt",
    .init = init_v4,
    .startEvent = start_v4,
    .stopEvent = stop,
    .recordEventState = record_v4,
    .finalize = finalize,
};
