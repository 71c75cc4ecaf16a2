/*
 * A standby's contexts, streams and events: virtual until the takeover.
 *
 * A standby replays its rank with device work suppressed; a real context
 * would cost it device memory on the rank's own GPU (hundreds of MiB on
 * NVIDIA's), is refused outright in exclusive-process mode, and dies with
 * that GPU.  So while it follows, the contexts, streams and events the
 * program makes are handles of libckpt's: entries of a table here, which
 * say how each was made.  Their answers come from the entry (which device,
 * which context is current), from the log (what a query or a sync
 * returned, served as for any replay) or from a thread of libckpt's that
 * runs the program's host functions in the order they were queued (engine.c; device
 * work is suppressed, so a host function waits only for those before it).
 * Device memory is answered with the addresses the rank got (standby_mem.c)
 * and nothing is asked of the driver but cuInit and device queries.
 *
 * Every call that makes, ends or places something on the device -- a
 * context, a stream, an event, a kernel's function and what is set on it,
 * an allocation, a library's variable, a function's first load -- goes in
 * a journal, in the order the standby's threads made them.  At the
 * takeover (or earlier: below) the journal is walked against the real
 * driver, in that order, as the rank made them: the first context inside
 * the room held for the driver's ranges
 * (addrspace.c), allocations at the addresses the log says (a different
 * one refuses, naming it), and each entry gets its real object.  Then the
 * table's handles, which the program keeps, are translated on their way
 * into the driver (V(h), and CKPT_V_IN for the generated wrappers), the
 * context the driver reports is given back as the program's handle, and
 * each thread's current context follows its virtual one the first time the
 * thread calls a hook.
 *
 * A call this file cannot answer while standing by stops the standby,
 * naming it (a failure then recovers by the cold path): it would need a
 * context on its rank's GPU.  With CKPT_STANDBY_CONTEXT=1 it promotes the
 * standby instead: the journal is walked at once (memory only reserved, as
 * standby_mem.c does), the call is made for real, and the standby follows
 * on with a real context.  Which call did it is said.
 * A journal entry whose object was made and destroyed while standing by
 * and left nothing on the device (an event) is dropped, so a program that
 * makes events every iteration does not grow it.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "config.h"
#include "interpose.h"
#include "log.h"
#include "replay.h"
#include "util.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_V 65536
#define MAX_CTX 64

enum vkind { V_UNUSED, V_CTX, V_STREAM, V_EVENT, V_FUNC };

struct vobj {
    enum vkind kind;
    unsigned flags;
    int dev;          /* a context's device */
    int prio;         /* a stream's priority; a context: 1 when cuCtxCreate_v4 made it */
    int refs;         /* a primary context's retains */
    bool primary, gone;
    struct vobj *ctx; /* a stream's, an event's or a function's context */
    void *kernel;     /* a function's (CUkernel) */
    uint64_t seq;     /* a stream: its last host function; an event: what its record waits for */
    size_t made;      /* its creation's journal entry */
    void *real;       /* once made real */
    struct vobj *next_free;
};

/* The journal: what was made, in order. */
enum jop { J_CTX, J_CTX_GONE, J_STREAM, J_STREAM_GONE, J_EVENT, J_EVENT_GONE, J_FUNC, J_FSET, J_LIMIT, J_ALLOC, J_FREE,
           J_ASIDE, J_LOAD, J_VAR };

struct jrec {
    enum jop op;
    bool dead;
    struct vobj *o;   /* the object; for memory and loads the context current then */
    struct vobj *s;   /* memory: the stream (NULL: the default one) */
    uint64_t a, b, c; /* J_ALLOC, J_FREE: how, address, size; J_ASIDE: thread; J_LOAD: function;
                         J_VAR: library, address, managed; J_FSET: function, attribute
                         (UINT64_MAX: the cache configuration), value; J_LIMIT: -, limit, value */
    void *pool;
    char *name;       /* J_VAR: the variable's (owned) */
    struct ckpt_rl_rec rec; /* J_ASIDE */
};

int ckpt_v_state;
__thread bool ckpt_v_synced;
static __thread struct vobj *cur; /* this thread's current context */
static __thread bool making;      /* this thread walks the journal, the lock held (a refusal's exit may call hooks) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct vobj *table, *free_list;
static size_t ntable;
static struct vobj *ctxs[MAX_CTX]; /* the contexts, for the way back */
static size_t nctxs;
static struct jrec *journal;
static size_t njournal, journal_cap;

/* ---- the table. */

static struct vobj *as_vobj(const void *h)
{
    struct vobj *v = (struct vobj *)h, *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    return t && v >= t && v < t + MAX_V ? v : NULL;
}

/* A fresh entry of kind.  Lock held. */
static struct vobj *vnew(enum vkind kind)
{
    struct vobj *v = free_list;
    if (v) {
        free_list = v->next_free;
    } else {
        if (!table) {
            void *p = mmap(NULL, MAX_V * sizeof(*table), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                           MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED)
                return NULL;
            __atomic_store_n(&table, p, __ATOMIC_RELEASE);
        }
        if (ntable == MAX_V)
            return NULL;
        v = &table[ntable++];
    }
    *v = (struct vobj){.kind = kind};
    return v;
}

static void vfree(struct vobj *v)
{
    v->kind = V_UNUSED;
    v->next_free = free_list;
    free_list = v;
}

/* Appends a journal entry; its index.  Lock held. */
static size_t jput(struct jrec r)
{
    if (!ckpt_grow((void **)&journal, &journal_cap, njournal, sizeof(*journal))) {
        pthread_mutex_unlock(&lock);
        ckpt_refuse("out of host memory for the standby's journal");
    }
    journal[njournal] = r;
    return njournal++;
}

/* A standby that cannot go on virtually.  Lock held. */
static void __attribute__((noreturn)) full(const char *what)
{
    pthread_mutex_unlock(&lock);
    ckpt_refuse("the standby cannot hold more %s (out of host memory or past %d objects)", what, MAX_V);
}

/* Lock held, state virtual: true (and the lock still held). */
static bool virtual_locked(void)
{
    if (making)
        return false;
    pthread_mutex_lock(&lock);
    if (ckpt_v_state == CKPT_V_VIRTUAL)
        return true;
    pthread_mutex_unlock(&lock);
    return false;
}

void ckpt_v_begin(void)
{
    __atomic_store_n(&ckpt_v_state, CKPT_V_VIRTUAL, __ATOMIC_RELEASE);
}

/* ---- the way in and the way back. */

void *ckpt_v_real_(void *h)
{
    struct vobj *v = as_vobj(h);
    if (!v)
        return h;
    if (__atomic_load_n(&ckpt_v_state, __ATOMIC_ACQUIRE) == CKPT_V_VIRTUAL)
        ckpt_v_promote(ckpt_hook_now());
    return v->real;
}

void *ckpt_v_peek_(void *h)
{
    struct vobj *v = as_vobj(h);
    return v && v->real ? v->real : h;
}

void *ckpt_v_arg(const void *p)
{
    void *h;
    memcpy(&h, p, sizeof(h));
    return ckpt_v_real(h);
}

/* The program's handle for the real context c.  Only once made real (or
 * while making them, on the thread that does), when the contexts no
 * longer change: no lock. */
static CUcontext back(CUcontext c)
{
    for (size_t i = 0; c && i < nctxs; i++)
        if (ctxs[i]->real == (void *)c && !ctxs[i]->gone)
            return (CUcontext)ctxs[i];
    return c;
}

void ckpt_v_back_arg(const void *pp)
{
    CUcontext *p;
    memcpy(&p, pp, sizeof(p));
    if (p && *p)
        *p = back(*p);
}

/* The program's handle for the real event e: a scan, for the rare calls
 * that hand one out (a graph node's). */
void ckpt_v_back_event_arg(const void *pp)
{
    CUevent *p;
    memcpy(&p, pp, sizeof(p));
    for (size_t i = 0; p && *p && i < ntable; i++)
        if (table[i].kind == V_EVENT && table[i].real == (void *)*p) {
            *p = (CUevent)&table[i];
            return;
        }
}

/* The thread's current context follows its virtual one, once. */
void ckpt_v_sync_thread(void)
{
    ckpt_v_synced = true;
    if (cur && cur->real && (real_cuCtxSetCurrent || ckpt_resolve("cuCtxSetCurrent") == 0))
        real_cuCtxSetCurrent(cur->real);
}

/* ---- contexts. */

static struct vobj *ctx_new(CUdevice dev, unsigned flags, bool primary)
{
    struct vobj *v = vnew(V_CTX);
    if (!v || nctxs == MAX_CTX)
        full("contexts");
    v->dev = dev;
    v->flags = flags;
    v->primary = primary;
    ctxs[nctxs++] = v;
    return v;
}

static bool device_ok(CUdevice dev)
{
    int n = 0;
    return (real_cuDeviceGetCount || ckpt_resolve("cuDeviceGetCount") == 0) &&
           real_cuDeviceGetCount(&n) == CUDA_SUCCESS && dev >= 0 && dev < n;
}

bool ckpt_v_primary_retain(CUresult *r, CUcontext *pctx, CUdevice dev)
{
    if (!virtual_locked())
        return false;
    struct vobj *v = NULL;
    for (size_t i = 0; i < nctxs && !v; i++)
        if (ctxs[i]->primary && ctxs[i]->dev == dev)
            v = ctxs[i];
    if (!pctx || !device_ok(dev)) {
        *r = !pctx ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_DEVICE;
    } else {
        if (!v)
            v = ctx_new(dev, 0, true);
        if (!v->refs++) { /* made (again) at the first retain */
            v->gone = false;
            v->made = jput((struct jrec){.op = J_CTX, .o = v});
        }
        *pctx = (CUcontext)v;
        *r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

bool ckpt_v_ctx_create(CUresult *r, CUcontext *pctx, unsigned flags, CUdevice dev, bool v4)
{
    if (!virtual_locked())
        return false;
    if (!pctx || !device_ok(dev)) {
        *r = !pctx ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_DEVICE;
    } else {
        struct vobj *v = ctx_new(dev, flags, false);
        v->prio = v4; /* a context has no priority: which entry point made it */
        v->made = jput((struct jrec){.op = J_CTX, .o = v});
        cur = v; /* made current, as cuCtxCreate does */
        *pctx = (CUcontext)v;
        *r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED_REAL(cuDevicePrimaryCtxRelease_v2, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_v_on() && virtual_locked()) {
        CUresult r = CUDA_ERROR_INVALID_CONTEXT;
        for (size_t i = 0; i < nctxs; i++)
            if (ctxs[i]->primary && ctxs[i]->dev == dev && ctxs[i]->refs > 0) {
                if (!--ctxs[i]->refs) {
                    ctxs[i]->gone = true;
                    jput((struct jrec){.op = J_CTX_GONE, .o = ctxs[i]});
                }
                r = CUDA_SUCCESS;
            }
        pthread_mutex_unlock(&lock);
        return r;
    }
    return real_cuDevicePrimaryCtxRelease_v2(dev);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_REAL(cuCtxDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
    struct vobj *v = as_vobj(ctx);
    if (v && ckpt_v_on() && virtual_locked()) {
        CUresult r = CUDA_ERROR_INVALID_CONTEXT;
        if (v->kind == V_CTX && !v->primary && !v->gone) {
            v->gone = true;
            jput((struct jrec){.op = J_CTX_GONE, .o = v});
            if (cur == v)
                cur = NULL;
            r = CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&lock);
        return r;
    }
    return real_cuCtxDestroy_v2(V(ctx));
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    NEED_REAL(cuCtxGetCurrent, CUDA_ERROR_NOT_INITIALIZED);
    if (ckpt_v_on() && virtual_locked()) {
        if (pctx)
            *pctx = cur && !cur->gone ? (CUcontext)cur : NULL;
        pthread_mutex_unlock(&lock);
        return pctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    CUresult r = real_cuCtxGetCurrent(pctx);
    if (r == CUDA_SUCCESS && __atomic_load_n(&ckpt_v_state, __ATOMIC_ACQUIRE) == CKPT_V_REAL)
        *pctx = back(*pctx);
    return r;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_REAL(cuCtxSetCurrent, CUDA_ERROR_NOT_INITIALIZED);
    struct vobj *v = as_vobj(ctx);
    if (ckpt_v_on() && virtual_locked()) {
        CUresult r = CUDA_SUCCESS;
        if (ctx && (!v || v->kind != V_CTX || v->gone))
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            cur = v;
        pthread_mutex_unlock(&lock);
        return r;
    }
    if (v || !ctx)
        cur = v; /* what a thread that syncs later follows */
    return real_cuCtxSetCurrent(V(ctx));
}

/* The current context's device (ctx NULL) or ctx's. */
static bool ctx_device(CUresult *r, CUdevice *device, CUcontext ctx)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct vobj *v = ctx ? as_vobj(ctx) : cur;
    *r = CUDA_SUCCESS;
    if (!device)
        *r = CUDA_ERROR_INVALID_VALUE;
    else if (!v || v->kind != V_CTX || v->gone)
        *r = CUDA_ERROR_INVALID_CONTEXT;
    else
        *device = v->dev;
    pthread_mutex_unlock(&lock);
    return true;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    NEED_REAL(cuCtxGetDevice, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    return ctx_device(&r, device, NULL) ? r : real_cuCtxGetDevice(device);
}

EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    NEED_REAL(cuCtxGetDevice_v2, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    return ctx_device(&r, device, ctx) ? r : real_cuCtxGetDevice_v2(device, V(ctx));
}

/* ---- streams and events. */

/* The current context, or why there is none.  Lock held. */
static CUresult current(struct vobj **ctx)
{
    *ctx = cur;
    return cur && !cur->gone ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static bool stream_create(CUresult *r, CUstream *ph, unsigned flags, int prio)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct vobj *ctx;
    if (!ph)
        *r = CUDA_ERROR_INVALID_VALUE;
    else if ((*r = current(&ctx)) == CUDA_SUCCESS) {
        struct vobj *v = vnew(V_STREAM);
        if (!v)
            full("streams");
        v->ctx = ctx;
        v->flags = flags;
        v->prio = prio;
        v->made = jput((struct jrec){.op = J_STREAM, .o = v});
        *ph = (CUstream)v;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    NEED_REAL(cuStreamCreate, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    return stream_create(&r, phStream, Flags, 0) ? r : real_cuStreamCreate(phStream, Flags);
}

EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    NEED_REAL(cuStreamCreateWithPriority, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    return stream_create(&r, phStream, flags, priority) ? r : real_cuStreamCreateWithPriority(phStream, flags, priority);
}

bool ckpt_v_stream_destroy(CUresult *r, CUstream s)
{
    struct vobj *v = as_vobj(s);
    if (!v || !ckpt_v_on() || !virtual_locked())
        return false;
    *r = CUDA_ERROR_INVALID_HANDLE;
    if (v->kind == V_STREAM) {
        v->gone = true;
        jput((struct jrec){.op = J_STREAM_GONE, .o = v});
        *r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

/* A live stream of the table, a default stream (NULL, legacy, per-thread:
 * its position NULL), or neither.  Lock held. */
static bool stream_ok(CUstream s, struct vobj **v)
{
    *v = as_vobj(s);
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return cur && !cur->gone;
    return *v && (*v)->kind == V_STREAM && !(*v)->gone;
}

EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    NEED_REAL(cuEventCreate, CUDA_ERROR_NOT_INITIALIZED);
    if (!ckpt_v_on() || !virtual_locked())
        return real_cuEventCreate(phEvent, Flags);
    struct vobj *ctx;
    CUresult r = phEvent ? current(&ctx) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        struct vobj *v = vnew(V_EVENT);
        if (!v)
            full("events");
        v->ctx = ctx;
        v->flags = Flags;
        v->made = jput((struct jrec){.op = J_EVENT, .o = v});
        *phEvent = (CUevent)v;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    NEED_REAL(cuEventDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
    struct vobj *v = as_vobj(hEvent);
    if (!v || !ckpt_v_on() || !virtual_locked())
        return real_cuEventDestroy_v2(V(hEvent));
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    if (v->kind == V_EVENT) {
        journal[v->made].dead = true; /* made and gone while standing by: nothing on the device */
        vfree(v);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Device work is suppressed: a wait orders host functions only, and the
 * engine runs those in the order queued, which already has it. */
static CUresult wait_event(__typeof__(&cuStreamWaitEvent) real, CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    if (!ckpt_v_on() || !virtual_locked())
        return real(V(hStream), V(hEvent), Flags);
    struct vobj *s, *e = as_vobj(hEvent);
    CUresult r = stream_ok(hStream, &s) && e && e->kind == V_EVENT ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    NEED_REAL(cuStreamWaitEvent, CUDA_ERROR_NOT_INITIALIZED);
    return wait_event(real_cuStreamWaitEvent, hStream, hEvent, Flags);
}

EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    NEED_REAL(cuStreamWaitEvent_ptsz, CUDA_ERROR_NOT_INITIALIZED);
    return wait_event(real_cuStreamWaitEvent_ptsz, hStream, hEvent, Flags);
}

/* A virtual stream never captures: a capture makes the standby real. */
static bool capture_status(CUresult *r, CUstream hStream, CUstreamCaptureStatus *st)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct vobj *s;
    *r = !st ? CUDA_ERROR_INVALID_VALUE : stream_ok(hStream, &s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (*r == CUDA_SUCCESS)
        *st = CU_STREAM_CAPTURE_STATUS_NONE;
    pthread_mutex_unlock(&lock);
    return true;
}

static CUresult is_capturing(__typeof__(&cuStreamIsCapturing) real, CUstream hStream, CUstreamCaptureStatus *st)
{
    CUresult r;
    return capture_status(&r, hStream, st) ? r : real(V(hStream), st);
}

EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    NEED_REAL(cuStreamIsCapturing, CUDA_ERROR_NOT_INITIALIZED);
    return is_capturing(real_cuStreamIsCapturing, hStream, captureStatus);
}

EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    NEED_REAL(cuStreamIsCapturing_ptsz, CUDA_ERROR_NOT_INITIALIZED);
    return is_capturing(real_cuStreamIsCapturing_ptsz, hStream, captureStatus);
}

/* The same for the capture's details: only the status is valid when a
 * stream is not capturing, and the outputs are left as they are. */
#define CAPTURE_INFO(name, params, args)                                       \
    EXPORT CUresult name params                                                \
    {                                                                          \
        CUresult r;                                                            \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        return capture_status(&r, hStream, captureStatus_out) ? r : real_##name args; \
    }
#define INFO_V1 (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
#define INFO_V2                                                                \
    (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, \
     const CUgraphNode **dependencies_out, size_t *numDependencies_out)
#define INFO_V3                                                                \
    (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out, \
     const CUgraphNode **dependencies_out, const struct CUgraphEdgeData_st **edgeData_out, size_t *numDependencies_out)
#define ARGS_V1 (V(hStream), captureStatus_out, id_out)
#define ARGS_V2 (V(hStream), captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out)
#define ARGS_V3 (V(hStream), captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out)
CAPTURE_INFO(cuStreamGetCaptureInfo, INFO_V1, ARGS_V1)
CAPTURE_INFO(cuStreamGetCaptureInfo_ptsz, INFO_V1, ARGS_V1)
CAPTURE_INFO(cuStreamGetCaptureInfo_v2, INFO_V2, ARGS_V2)
CAPTURE_INFO(cuStreamGetCaptureInfo_v2_ptsz, INFO_V2, ARGS_V2)
CAPTURE_INFO(cuStreamGetCaptureInfo_v3, INFO_V3, ARGS_V3)
CAPTURE_INFO(cuStreamGetCaptureInfo_v3_ptsz, INFO_V3, ARGS_V3)

/* A stream's device: its context's. */
static CUresult stream_device(__typeof__(&cuStreamGetDevice) real, CUstream hStream, CUdevice *device)
{
    if (!ckpt_v_on() || !virtual_locked())
        return real(V(hStream), device);
    struct vobj *s;
    CUresult r = !device ? CUDA_ERROR_INVALID_VALUE : stream_ok(hStream, &s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        *device = (s ? s->ctx : cur)->dev;
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    NEED_REAL(cuStreamGetDevice, CUDA_ERROR_NOT_INITIALIZED);
    return stream_device(real_cuStreamGetDevice, hStream, device);
}

EXPORT CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
    NEED_REAL(cuStreamGetDevice_ptsz, CUDA_ERROR_NOT_INITIALIZED);
    return stream_device(real_cuStreamGetDevice_ptsz, hStream, device);
}

/* ---- a kernel's function in a context, and what is set on it: made,
 * like the context, at the takeover, in the order the program made them. */

EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    NEED_REAL(cuKernelGetFunction, CUDA_ERROR_NOT_INITIALIZED);
    if (!ckpt_v_on() || !virtual_locked())
        return real_cuKernelGetFunction(pFunc, kernel);
    struct vobj *ctx, *f = NULL;
    CUresult r = !pFunc || !kernel ? CUDA_ERROR_INVALID_VALUE : current(&ctx);
    for (size_t i = 0; r == CUDA_SUCCESS && !f && i < ntable; i++) /* one handle per kernel and context */
        if (table[i].kind == V_FUNC && table[i].kernel == (void *)kernel && table[i].ctx == ctx)
            f = &table[i];
    if (r == CUDA_SUCCESS && !f) {
        if (!(f = vnew(V_FUNC)))
            full("functions");
        f->ctx = ctx;
        f->kernel = kernel;
        f->made = jput((struct jrec){.op = J_FUNC, .o = f});
    }
    if (r == CUDA_SUCCESS)
        *pFunc = (CUfunction)f;
    pthread_mutex_unlock(&lock);
    return r;
}

/* A setting, redone at the takeover in its place (a function's that was
 * not one of the table's, a kernel handle, with the context current then). */
static bool function_set(CUresult *r, CUfunction f, uint64_t what, uint64_t value)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    *r = f ? current(&(struct vobj *){NULL}) : CUDA_ERROR_INVALID_HANDLE;
    if (*r == CUDA_SUCCESS)
        jput((struct jrec){.op = J_FSET, .o = cur, .a = (uint64_t)(uintptr_t)f, .b = what, .c = value});
    pthread_mutex_unlock(&lock);
    return true;
}

EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    NEED_REAL(cuFuncSetAttribute, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    return function_set(&r, hfunc, (uint64_t)attrib, (uint64_t)(int64_t)value)
               ? r
               : real_cuFuncSetAttribute(V(hfunc), attrib, value);
}

EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    NEED_REAL(cuFuncSetCacheConfig, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r;
    return function_set(&r, hfunc, UINT64_MAX, (uint64_t)config) ? r : real_cuFuncSetCacheConfig(V(hfunc), config);
}

/* A context's limit (a thread's stack, the malloc heap, the printf FIFO):
 * set again at the takeover in the context that was current, in its
 * place among what was made.  What the program reads back is the log's
 * (cuCtxGetLimit is a QUERY row). */
EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    NEED_REAL(cuCtxSetLimit, CUDA_ERROR_NOT_INITIALIZED);
    if (!ckpt_v_on() || !virtual_locked())
        return real_cuCtxSetLimit(limit, value);
    struct vobj *ctx;
    CUresult r = current(&ctx);
    if (r == CUDA_SUCCESS)
        jput((struct jrec){.op = J_LIMIT, .o = ctx, .b = (uint64_t)limit, .c = value});
    pthread_mutex_unlock(&lock);
    return r;
}

bool ckpt_v_hostfn(CUresult *r, CUstream hStream, CUhostFn fn, void *data)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct vobj *s;
    *r = CUDA_ERROR_INVALID_HANDLE;
    if (stream_ok(hStream, &s)) {
        uint64_t at = ckpt_engine_queue(fn, data);
        *r = at ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        if (s && at)
            s->seq = at;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

bool ckpt_v_record(CUresult *r, CUevent hEvent, CUstream hStream)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct vobj *s, *e = as_vobj(hEvent);
    *r = CUDA_ERROR_INVALID_HANDLE;
    if (e && e->kind == V_EVENT && stream_ok(hStream, &s)) {
        e->seq = s ? s->seq : ckpt_engine_queued(); /* a default stream waits for all */
        *r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return true;
}

bool ckpt_v_wait(CUresult *r, int what, const void *h)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct vobj *v = as_vobj(h);
    uint64_t at = 0;
    *r = CUDA_SUCCESS;
    if (what == CKPT_V_WAIT_EVENT && (!v || v->kind != V_EVENT))
        *r = CUDA_ERROR_INVALID_HANDLE;
    else if (what == CKPT_V_WAIT_EVENT)
        at = v->seq;
    else if (what == CKPT_V_WAIT_STREAM && !stream_ok((CUstream)h, &v))
        *r = CUDA_ERROR_INVALID_HANDLE;
    else if (what == CKPT_V_WAIT_STREAM && v)
        at = v->seq;
    else if (!cur || cur->gone)
        *r = CUDA_ERROR_INVALID_CONTEXT;
    else
        at = UINT64_MAX;
    pthread_mutex_unlock(&lock);
    if (*r == CUDA_SUCCESS)
        ckpt_engine_wait(at == UINT64_MAX ? ckpt_engine_queued() : at);
    return true;
}

/* ---- what places something on the device. */

bool ckpt_v_lock(void)
{
    return virtual_locked();
}

void ckpt_v_unlock(void)
{
    pthread_mutex_unlock(&lock);
}

size_t ckpt_v_journal_alloc(int how, uint64_t addr, uint64_t size, CUstream s, void *pool)
{
    return jput((struct jrec){.op = J_ALLOC, .o = cur, .s = as_vobj(s), .a = (uint64_t)how, .b = addr, .c = size,
                              .pool = pool});
}

#define FOLD_SCAN 1024 /* entries a free looks back over for its allocation */

/* A stream-ordered allocation or free: the standby reserves such memory
 * (standby_mem.c), so an allocation and its free come to nothing. */
static bool ordered_kind(const struct jrec *j)
{
    int how = (int)j->a & ~CKPT_SMEM_ORDERED;
    return (j->op == J_ALLOC || j->op == J_FREE) && (how == CKPT_SMEM_ASYNC || how == CKPT_SMEM_POOL);
}

/* A free, in the journal.  That of a stream-ordered allocation with only
 * stream-ordered allocations and frees after it folds the pair away (and
 * the dead tail), so that a program allocating that way every iteration
 * does not make the journal, or the takeover, grow with the job's age.
 * Anything else between them might have been placed otherwise without
 * the allocation's addresses taken: the pair is kept. */
void ckpt_v_journal_free(int how, uint64_t addr, uint64_t size, CUstream s, size_t made)
{
    bool fold = made < njournal && njournal - made <= FOLD_SCAN && journal[made].op == J_ALLOC &&
                journal[made].b == addr && ordered_kind(&journal[made]);
    for (size_t i = made + 1; fold && i < njournal; i++)
        fold = journal[i].dead || ordered_kind(&journal[i]);
    if (fold)
        journal[made].dead = true;
    else
        jput((struct jrec){.op = J_FREE, .o = cur, .s = as_vobj(s), .a = (uint64_t)how, .b = addr, .c = size});
    while (njournal && journal[njournal - 1].dead)
        njournal--;
}

bool ckpt_v_journal_aside(uint64_t thread, const struct ckpt_rl_rec *rec)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    struct jrec j = {.op = J_ASIDE, .o = cur, .a = thread, .rec = *rec};
    j.rec.payload = NULL;
    jput(j);
    pthread_mutex_unlock(&lock);
    return true;
}

bool ckpt_v_journal_load(CUfunction f)
{
    if (!ckpt_v_on() || !virtual_locked())
        return false;
    jput((struct jrec){.op = J_LOAD, .o = cur, .a = (uint64_t)(uintptr_t)f});
    pthread_mutex_unlock(&lock);
    return true;
}

bool ckpt_v_journal_variable(CUlibrary lib, const char *name, bool managed, uint64_t addr)
{
    char *copy = strdup(name ? name : "");
    if (!copy)
        ckpt_refuse("out of host memory for the standby's journal");
    if (!ckpt_v_on() || !virtual_locked()) {
        free(copy);
        return false;
    }
    jput((struct jrec){.op = J_VAR, .o = cur, .a = (uint64_t)(uintptr_t)lib, .b = addr, .c = managed, .name = copy});
    pthread_mutex_unlock(&lock);
    return true;
}

/* ---- made real. */

static const char *made_why; /* what made the standby real, for its log */

static void need(const char *name)
{
    if (ckpt_resolve(name) < 0)
        ckpt_refuse("the driver lacks %s, which a standby needs to take over", name);
}

/* ctx current on this thread (the real driver's view).  Lock held. */
static void enter(struct vobj *ctx)
{
    if (ctx && ctx->real && real_cuCtxSetCurrent(ctx->real) != CUDA_SUCCESS)
        ckpt_refuse("the standby cannot make its context current while it takes over");
}

static void walk(struct jrec *j)
{
    struct vobj *v = j->o;
    CUresult e = CUDA_SUCCESS;
    switch (j->op) {
    case J_CTX: /* made with the entry point the program used (resolved then) */
        if (v->primary)
            e = real_cuDevicePrimaryCtxRetain((CUcontext *)&v->real, v->dev);
        else if (v->prio) /* made by cuCtxCreate_v4 */
            e = real_cuCtxCreate_v4((CUcontext *)&v->real, NULL, v->flags, v->dev);
        else
            e = real_cuCtxCreate_v2((CUcontext *)&v->real, v->flags, v->dev);
        break;
    case J_CTX_GONE:
        e = v->primary ? real_cuDevicePrimaryCtxRelease_v2(v->dev) : real_cuCtxDestroy_v2(v->real);
        v->real = NULL;
        break;
    case J_STREAM:
        enter(v->ctx);
        e = real_cuStreamCreateWithPriority((CUstream *)&v->real, v->flags, v->prio);
        break;
    case J_STREAM_GONE:
        e = real_cuStreamDestroy_v2(v->real);
        break;
    case J_EVENT:
        enter(v->ctx);
        e = real_cuEventCreate((CUevent *)&v->real, v->flags);
        break;
    case J_EVENT_GONE:
        break;
    case J_FUNC:
        enter(v->ctx);
        e = real_cuKernelGetFunction((CUfunction *)&v->real, (CUkernel)v->kernel);
        break;
    case J_FSET: {
        CUfunction f = ckpt_v_peek_((void *)(uintptr_t)j->a);
        enter(v);
        e = j->b == UINT64_MAX ? real_cuFuncSetCacheConfig(f, (CUfunc_cache)j->c)
                               : real_cuFuncSetAttribute(f, (CUfunction_attribute)j->b, (int)(int64_t)j->c);
        break;
    }
    case J_LIMIT:
        enter(v);
        e = real_cuCtxSetLimit((CUlimit)j->b, (size_t)j->c);
        break;
    case J_ALLOC:
        enter(v);
        ckpt_standby_mem_make((int)j->a, j->b, j->c, j->s ? j->s->real : NULL, j->pool);
        break;
    case J_FREE:
        enter(v);
        ckpt_standby_mem_unmake((int)j->a, j->b, j->c, j->s ? j->s->real : NULL);
        break;
    case J_ASIDE:
        enter(v);
        ckpt_standby_mem_aside(j->a, &j->rec);
        break;
    case J_LOAD:
        enter(v);
        ckpt_stream_load(ckpt_v_peek_((void *)(uintptr_t)j->a));
        break;
    case J_VAR:
        enter(v);
        ckpt_variable_make((CUlibrary)(uintptr_t)j->a, j->name, j->c, j->b);
        free(j->name);
        break;
    }
    static const char *const what[] = {"context", "context", "stream", "stream", "event", "event",
                                       "kernel's function", "function's setting", "context's limit"};
    if (e != CUDA_SUCCESS)
        ckpt_refuse("the standby cannot make its %s real (CUDA error %d)", j->op <= J_LIMIT ? what[j->op] : "memory",
                    (int)e);
}

/* Walks the journal against the real driver.  Lock held. */
static void make_real(void)
{
    static const char *const names[] = {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuCtxDestroy_v2",
                                        "cuCtxSetCurrent", "cuCtxGetCurrent", "cuStreamCreateWithPriority",
                                        "cuStreamDestroy_v2", "cuEventCreate"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        need(names[i]);
    double start = ckpt_now_s();
    size_t walked = 0;
    bool first = true;
    ckpt_self_depth++;
    for (size_t i = 0; i < njournal; i++) {
        if (journal[i].dead)
            continue;
        if (first && journal[i].op == J_CTX) /* the driver's ranges go where the rank's went */
            ckpt_addrspace_driver_starts();
        walk(&journal[i]);
        if (first && journal[i].op == J_CTX) {
            ckpt_addrspace_driver_started(true);
            first = false;
        }
        walked++;
    }
    ckpt_self_depth--;
    free(journal);
    journal = NULL;
    njournal = journal_cap = 0;
    real_cuCtxSetCurrent(cur ? cur->real : NULL);
    ckpt_v_synced = true;
    ckpt_log(CKPT_INFO, "the standby's contexts, streams and events made real (%s): %zu calls in %.3f s", made_why,
             walked, ckpt_now_s() - start);
}

/* Host functions queued while virtual run before what follows on the
 * real streams: the engine is let finish them first.  (Replay serves the
 * copies they wait for as the threads that queued them reach them, as it
 * did on real streams.) */
void ckpt_v_make_real(const char *why)
{
    uint64_t upto = 0;
    if (making)
        return;
    pthread_mutex_lock(&lock);
    if (ckpt_v_state == CKPT_V_VIRTUAL) {
        made_why = why;
        making = true;
        make_real();
        making = false;
        upto = ckpt_engine_queued();
        __atomic_store_n(&ckpt_v_state, CKPT_V_REAL, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    ckpt_engine_wait(upto);
}

void ckpt_v_promote(const char *call)
{
    if (making || __atomic_load_n(&ckpt_v_state, __ATOMIC_ACQUIRE) != CKPT_V_VIRTUAL)
        return; /* made real already, or being made (by this thread, the lock held) */
    if (!ckpt_cfg_int(CFG_STANDBY_CONTEXT))
        ckpt_refuse("the program called %s, which a standby without a CUDA context cannot answer, and a standby "
                    "makes none on its rank's GPU before it takes over unless CKPT_STANDBY_CONTEXT=1",
                    call ? call : "a driver function");
    char why[160];
    snprintf(why, sizeof(why), "the program called %s, which a standby without a context cannot answer",
             call ? call : "a driver function");
    static char kept[160];
    pthread_mutex_lock(&lock);
    memcpy(kept, why, sizeof(kept));
    pthread_mutex_unlock(&lock);
    ckpt_v_make_real(kept);
}

/* ---- entry points that need a real context: the standby is made real
 * first (hooks.def's PROMOTE rows), and handles are translated. */
#define PROMOTE(ret, name, params, args)                                       \
    EXPORT ret name params                                                     \
    {                                                                          \
        NEED_REAL(name, CUDA_ERROR_NOT_INITIALIZED);                           \
        ckpt_v_promote(#name);                                                 \
        ret r = real_##name(CKPT_MAP(CKPT_V_IN, CKPT_ARGS args));              \
        CKPT_MAP_STMT(CKPT_V_OUT, CKPT_ARGS args);                             \
        return r;                                                              \
    }
#include "hooks.def"
