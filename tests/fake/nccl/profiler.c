/*
 * The NCCL profiler plugin, driven as NCCL 2.28 drives it: the library
 * named by NCCL_PROFILER_PLUGIN (a path, or NAME for
 * libnccl-profiler-NAME.so; libnccl-profiler.so when unset) is opened at
 * the first communicator init and searched for ncclProfiler_v5, then
 * ncclProfiler_v4.  Each comm gets its own context from init; each
 * operation a Coll or P2p event, started and stopped around its enqueue
 * (NCCL's "stopped" means enqueued); and, when the activation mask asks for
 * ncclProfileKernelCh, a child KernelCh event that starts and stops on the
 * stream worker around the actual data movement, carrying GPU-style
 * timestamps.  A plugin's failure is reported and ignored; it must never
 * fail an NCCL call.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nccl_fake.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int version; /* 5, 4, or 0 when there is no plugin */
static const ncclProfiler_v5_t *v5;
static const ncclProfiler_v4_t *v4;
/* The activation mask; the plugin may change it at any time through the
   pointer init received, so it is read anew for every event. */
static int mask;

/*
 * The GPU's %globaltimer: nanoseconds of the wall clock, which is what the
 * real driver keeps it calibrated to and what KernelCh pTimer values carry.
 */
static uint64_t gpu_timer(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void plugin_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    (void)level;
    (void)flags;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    nf_info("profiler plugin (%s:%d): %s", file ? file : "?", line, msg);
}

static void *open_plugin(const char *name)
{
    char lib[256];
    void *h;

    if (!name || !*name)
        return dlopen("libnccl-profiler.so", RTLD_NOW | RTLD_LOCAL);
    if (strchr(name, '/'))
        return dlopen(name, RTLD_NOW | RTLD_LOCAL);
    snprintf(lib, sizeof(lib), "libnccl-profiler-%s.so", name);
    h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    return h ? h : dlopen(name, RTLD_NOW | RTLD_LOCAL);
}

static void load(void)
{
    const char *name = getenv("NCCL_PROFILER_PLUGIN");
    void *lib;

    if (name && !strcasecmp(name, "none"))
        return;
    lib = open_plugin(name);
    if (!lib) {
        if (name)
            nf_fail(0, "NCCL_PROFILER_PLUGIN=%s: cannot load it: %s", name, dlerror());
        return;
    }
    if ((v5 = dlsym(lib, "ncclProfiler_v5")))
        version = 5;
    else if ((v4 = dlsym(lib, "ncclProfiler_v4")))
        version = 4;
    else {
        nf_fail(0, "profiler plugin %s has no ncclProfiler_v5 or ncclProfiler_v4",
                name ? name : "libnccl-profiler.so");
        dlclose(lib);
        return;
    }
    /* Like NCCL, keep the library for as long as the process runs. */
    nf_info("loaded profiler plugin %s (v%d)", version == 5 ? v5->name : v4->name, version);
}

void nf_prof_comm_init(struct nf_comm *c)
{
    const char *name = c->comm_name[0] ? c->comm_name : NULL;
    ncclResult_t res;

    pthread_once(&load_once, load);
    if (!version)
        return;
    if (version == 5)
        res = v5->init(&c->prof_ctx, c->hash, &mask, name, 1, c->nranks, c->rank, plugin_log);
    else
        res = v4->init(&c->prof_ctx, &mask, name, c->hash, 1, c->nranks, c->rank, plugin_log);
    if (res != ncclSuccess) {
        nf_fail(0, "profiler plugin init failed (%d); continuing without it", (int)res);
        return;
    }
    c->prof_on = true;
}

void nf_prof_comm_fini(struct nf_comm *c)
{
    if (!c->prof_on)
        return;
    if (version == 5)
        v5->finalize(c->prof_ctx);
    else
        v4->finalize(c->prof_ctx);
    c->prof_on = false;
}

static int active(void)
{
    return __atomic_load_n(&mask, __ATOMIC_RELAXED);
}

/* v4 and v5 name these members alike: fill either descriptor. */
#define FILL_TASK(d, op, seq)                                                  \
    do {                                                                       \
        if ((op)->func >= NF_SEND) {                                           \
            (d).p2p.func = nf_func_name((op)->func);                           \
            (d).p2p.buff = (op)->func == NF_SEND ? (void *)(op)->sendbuff      \
                                                 : (op)->recvbuff;             \
            (d).p2p.datatype = nf_type_name((op)->type);                       \
            (d).p2p.count = (op)->count;                                       \
            (d).p2p.peer = (op)->peer;                                         \
            (d).p2p.nChannels = 1;                                             \
        } else {                                                               \
            (d).coll.seqNumber = (seq);                                        \
            (d).coll.func = nf_func_name((op)->func);                          \
            (d).coll.sendBuff = (op)->sendbuff;                                \
            (d).coll.recvBuff = (op)->recvbuff;                                \
            (d).coll.count = (op)->count;                                      \
            (d).coll.root = (op)->peer;                                        \
            (d).coll.datatype = nf_type_name((op)->type);                      \
            (d).coll.nChannels = 1;                                            \
            (d).coll.nWarps = 16;                                              \
            (d).coll.algo = "RING";                                            \
            (d).coll.proto = "SIMPLE";                                         \
        }                                                                      \
    } while (0)

void *nf_prof_task_start(const struct nf_op *op)
{
    struct nf_comm *c = op->comm;
    uint64_t type = op->func >= NF_SEND ? ncclProfileP2p : ncclProfileColl;
    uint64_t seq = c->coll_seq[op->func]++; /* counted with or without a plugin */
    int want = (int)type | ncclProfileProxyOp | ncclProfileProxyStep | ncclProfileKernelCh |
               ncclProfileNetPlugin;
    void *event = NULL;

    if (!c->prof_on || !(active() & want))
        return NULL;
    if (version == 5) {
        ncclProfilerEventDescr_v5_t d = {.type = type, .rank = c->rank};

        FILL_TASK(d, op, seq);
        v5->startEvent(c->prof_ctx, &event, &d);
    } else {
        ncclProfilerEventDescr_v4_t d = {.type = (uint8_t)type, .rank = c->rank};

        FILL_TASK(d, op, seq);
        v4->startEvent(c->prof_ctx, &event, &d);
    }
    return event;
}

static void stop(void *event)
{
    if (version == 5)
        v5->stopEvent(event);
    else
        v4->stopEvent(event);
}

void nf_prof_task_stop(void *event)
{
    if (event)
        stop(event);
}

void *nf_prof_kernel_start(struct nf_comm *c, void *task)
{
    void *event = NULL;

    if (!c->prof_on || !(active() & ncclProfileKernelCh))
        return NULL;
    if (version == 5) {
        ncclProfilerEventDescr_v5_t d = {.type = ncclProfileKernelCh, .parentObj = task,
                                         .rank = c->rank};

        d.kernelCh.channelId = 0;
        d.kernelCh.pTimer = gpu_timer();
        v5->startEvent(c->prof_ctx, &event, &d);
    } else {
        ncclProfilerEventDescr_v4_t d = {.type = ncclProfileKernelCh, .parentObj = task,
                                         .rank = c->rank};

        d.kernelCh.channelId = 0;
        d.kernelCh.pTimer = gpu_timer();
        v4->startEvent(c->prof_ctx, &event, &d);
    }
    return event;
}

void nf_prof_kernel_stop(void *event)
{
    if (!event)
        return;
    if (version == 5) {
        ncclProfilerEventStateArgs_v5_t a = {.kernelCh.pTimer = gpu_timer()};

        v5->recordEventState(event, ncclProfilerKernelChStop, &a);
    } else {
        ncclProfilerEventStateArgs_v4_t a = {.kernelCh.pTimer = gpu_timer()};

        v4->recordEventState(event, ncclProfilerKernelChStop, &a);
    }
    stop(event);
}
