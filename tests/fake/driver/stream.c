/*
 * Streams of the fake driver: each runs its ops strictly in order on its
 * own worker thread, so work on different streams really overlaps and a
 * missing dependency shows up as wrong data.  The legacy default stream
 * synchronises with the blocking streams of its context as CUDA's does,
 * by inserting wait ops at enqueue time.  A stream must never run an op
 * before everything enqueued ahead of it has completed.
 */
#include <signal.h>
#include <stdlib.h>

#include "driver.h"

static __thread int tls_worker;

int fg_in_worker(void)
{
    return tls_worker;
}

static void ctx_link(struct fg_ctx *ctx, struct fg_stream *s)
{
    s->ctx_prev = NULL;
    s->ctx_next = ctx->streams;
    if (ctx->streams)
        ctx->streams->ctx_prev = s;
    ctx->streams = s;
}

static void ctx_unlink(struct fg_ctx *ctx, struct fg_stream *s)
{
    if (s->ctx_prev)
        s->ctx_prev->ctx_next = s->ctx_next;
    else
        ctx->streams = s->ctx_next;
    if (s->ctx_next)
        s->ctx_next->ctx_prev = s->ctx_prev;
    s->ctx_prev = s->ctx_next = NULL;
}

struct fg_stream *fg_stream_new(struct fg_ctx *ctx, enum fg_stream_kind kind, unsigned flags)
{
    struct fg_stream *s = calloc(1, sizeof(*s));

    if (!s)
        return NULL;
    s->ctx = ctx;
    s->kind = kind;
    s->flags = flags;
    s->refs = 1;
    pthread_cond_init(&s->wake, NULL);
    if (kind == FG_STREAM_USER && fg_ptrset_add(&drv.streams, s)) {
        free(s);
        return NULL;
    }
    ctx_link(ctx, s);
    return s;
}

void fg_stream_unref(struct fg_stream *s)
{
    if (--s->refs)
        return;
    pthread_cond_destroy(&s->wake);
    free(s);
}

/* FAKEGPU_OP_US=U: each op the device runs takes U microseconds more
 * (a launch's or a copy's latency on a real GPU, a busy device): an event
 * recorded behind finished work is still pending for that long. */
static uint64_t op_us_knob = UINT64_MAX;

static void *worker(void *arg)
{
    struct fg_stream *s = arg;
    struct fg_op *op;
    uint64_t us = fg_env_knob("FAKEGPU_OP_US", &op_us_knob);

    tls_worker = 1;
    fg_lock();
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->wake, &drv.lock);
        if (!s->head)
            break;
        if (us) { /* the op stays queued meanwhile: the stream is busy */
            fg_unlock();
            fg_sleep_us(us);
            fg_lock();
        }
        op = s->head;
        /* The op stays queued while it runs: the stream is busy until done_seq moves. */
        fg_op_run(op);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done_seq++;
        pthread_cond_broadcast(&drv.progress);
        fg_op_free(op);
    }
    fg_unlock();
    return NULL;
}

/*
 * Starts the stream's worker: 0 or -errno.  Workers block every signal, as
 * a real driver's threads do, so that the program's handlers (and libckpt's)
 * run on the program's own threads.
 */
static int start_worker(struct fg_stream *s)
{
    sigset_t all, old;
    int err;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&s->thread, NULL, worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return -err;
    pthread_setname_np(s->thread, "fakegpu-stream");
    s->running = 1;
    return 0;
}

/* Appends op to the queue, starting the worker on first use: 0 or -errno.  Lock held. */
static int push(struct fg_stream *s, struct fg_op *op)
{
    int err = s->running ? 0 : start_worker(s);

    if (err)
        return err;
    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->enq_seq++;
    pthread_cond_signal(&s->wake);
    return 0;
}

/* Makes s's later work wait until target has completed its first seq ops.  Lock held. */
static CUresult push_wait(struct fg_stream *s, struct fg_stream *target, uint64_t seq)
{
    struct fg_op *op = fg_op_new(FG_OP_WAIT, 0);

    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.wait.s = target;
    op->u.wait.seq = seq;
    target->refs++;
    if (push(s, op)) {
        fg_op_free(op);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

static int is_blocking(const struct fg_stream *s)
{
    return s->kind != FG_STREAM_LEGACY && !(s->flags & CU_STREAM_NON_BLOCKING);
}

/*
 * Work on the legacy stream waits for everything already enqueued on the
 * blocking streams of its context.  A blocking stream that is capturing
 * cannot be waited for: CUDA refuses the legacy work and invalidates the
 * capture.  Lock held.
 */
static CUresult legacy_waits(struct fg_stream *legacy)
{
    struct fg_stream *b;
    CUresult rc = CUDA_SUCCESS;

    for (b = legacy->ctx->streams; b; b = b->ctx_next) {
        if (is_blocking(b) && b->capture) {
            fg_capture_invalidate(b->capture);
            rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
    }
    for (b = legacy->ctx->streams; b && !rc; b = b->ctx_next)
        if (is_blocking(b) && b->enq_seq > b->done_seq)
            rc = push_wait(legacy, b, b->enq_seq);
    return rc;
}

CUresult fg_submit(struct fg_stream *s, struct fg_op *op)
{
    struct fg_stream *legacy = s->ctx->legacy;
    CUresult rc = CUDA_SUCCESS;

    if (s->capture)
        return fg_capture_add(s->capture, op);
    if (s->kind == FG_STREAM_LEGACY) {
        rc = legacy_waits(s);
    } else if (is_blocking(s) && legacy->enq_seq > legacy->done_seq &&
               legacy->enq_seq > s->legacy_seen) {
        /* Later work on a blocking stream waits for earlier legacy work. */
        rc = push_wait(s, legacy, legacy->enq_seq);
        if (!rc)
            s->legacy_seen = legacy->enq_seq;
    }
    if (!rc && push(s, op))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc)
        fg_op_free(op);
    else if (op->kind == FG_OP_RECORD)
        fg_event_mark(op, s, s->enq_seq); /* the worker cannot run it before we unlock */
    return rc;
}

void fg_stream_wait_seq(struct fg_stream *s, uint64_t seq)
{
    s->refs++;
    while (s->done_seq < seq)
        fg_wait_progress();
    fg_stream_unref(s);
}

void fg_stream_retire(struct fg_stream *s)
{
    fg_ptrset_del(&drv.streams, s);
    if (s->capture) {
        fg_capture_invalidate(s->capture);
        s->capture = NULL;
    }
    fg_stream_wait_seq(s, s->enq_seq);
    s->stopping = 1;
    if (s->running) {
        pthread_cond_signal(&s->wake);
        fg_unlock();
        pthread_join(s->thread, NULL);
        fg_lock();
        s->running = 0;
    }
    ctx_unlink(s->ctx, s);
    fg_stream_unref(s);
}

void fg_ctx_drain(struct fg_ctx *ctx)
{
    struct fg_stream *s, **streams;
    uint64_t *seqs;
    size_t n = 0, i;

    for (s = ctx->streams; s; s = s->ctx_next)
        n++;
    streams = malloc(n * sizeof(*streams));
    seqs = malloc(n * sizeof(*seqs));
    if (!streams || !seqs) {
        /* No room to remember the targets: wait until every stream is idle. */
        free(streams);
        free(seqs);
        for (s = ctx->streams; s;) {
            if (s->done_seq < s->enq_seq) {
                fg_stream_wait_seq(s, s->enq_seq);
                s = ctx->streams;
            } else {
                s = s->ctx_next;
            }
        }
        return;
    }
    for (s = ctx->streams, i = 0; s; s = s->ctx_next, i++) {
        streams[i] = s;
        seqs[i] = s->enq_seq;
        s->refs++;
    }
    for (i = 0; i < n; i++) {
        fg_stream_wait_seq(streams[i], seqs[i]);
        fg_stream_unref(streams[i]);
    }
    free(streams);
    free(seqs);
}

static void count_ctx(void *p, void *arg)
{
    (void)p;
    (*(size_t *)arg)++;
}

struct ctx_list {
    struct fg_ctx **ctxs;
    size_t n;
};

static void collect_ctx(void *p, void *arg)
{
    struct ctx_list *l = arg;

    l->ctxs[l->n++] = p;
}

void fg_drain_all(void)
{
    struct ctx_list l = {0};
    size_t n = 0, i;

    fg_ptrset_each(&drv.ctxs, count_ctx, &n);
    if (!n || !(l.ctxs = malloc(n * sizeof(*l.ctxs))))
        return;
    fg_ptrset_each(&drv.ctxs, collect_ctx, &l);
    for (i = 0; i < l.n; i++)
        if (fg_ptrset_has(&drv.ctxs, l.ctxs[i]))
            fg_ctx_drain(l.ctxs[i]);
    free(l.ctxs);
}

/* ---- the per-thread default stream --------------------------------- */

/* One per (thread, context); the context id guards against a reused address. */
struct per_thread {
    struct fg_ctx *ctx;
    uint64_t ctx_id;
    struct fg_stream *s;
    struct per_thread *next;
};

static pthread_key_t pt_key;
static pthread_once_t pt_once = PTHREAD_ONCE_INIT;

/* At thread exit, the thread's per-thread streams finish their work and stop. */
static void pt_exit(void *arg)
{
    struct per_thread *pt = arg, *next;

    fg_lock();
    for (; pt; pt = next) {
        next = pt->next;
        if (fg_ptrset_has(&drv.ctxs, pt->ctx) && pt->ctx->id == pt->ctx_id)
            fg_stream_retire(pt->s);
        free(pt);
    }
    fg_unlock();
}

static void pt_init(void)
{
    pthread_key_create(&pt_key, pt_exit);
}

static CUresult per_thread_stream(struct fg_ctx *ctx, struct fg_stream **out)
{
    struct per_thread *head, *pt;

    pthread_once(&pt_once, pt_init);
    head = pthread_getspecific(pt_key);
    for (pt = head; pt; pt = pt->next) {
        if (pt->ctx == ctx && pt->ctx_id == ctx->id) {
            *out = pt->s;
            return CUDA_SUCCESS;
        }
    }
    pt = calloc(1, sizeof(*pt));
    if (!pt || !(pt->s = fg_stream_new(ctx, FG_STREAM_PER_THREAD, 0))) {
        free(pt);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pt->ctx = ctx;
    pt->ctx_id = ctx->id;
    pt->next = head;
    pthread_setspecific(pt_key, pt);
    *out = pt->s;
    return CUDA_SUCCESS;
}

CUresult fg_stream_get(CUstream h, struct fg_stream **s)
{
    struct fg_ctx *ctx;
    CUresult rc;

    if (h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD) {
        if (fg_check_init())
            return CUDA_ERROR_NOT_INITIALIZED;
        if (!fg_ptrset_has(&drv.streams, h))
            return CUDA_ERROR_INVALID_HANDLE;
        *s = (struct fg_stream *)h;
        return CUDA_SUCCESS;
    }
    rc = fg_current_ctx(&ctx);
    if (rc)
        return rc;
    if (h == CU_STREAM_PER_THREAD)
        return per_thread_stream(ctx, s);
    *s = ctx->legacy;
    return CUDA_SUCCESS;
}

/* ---- the stream API ------------------------------------------------ */

/* Every stream runs on its own thread, so a priority changes nothing but
 * what cuStreamGetPriority says: the one asked for, clamped to the range,
 * as CUDA does. */
CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    struct fg_ctx *ctx;
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    if (!rc && (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        s = fg_stream_new(ctx, FG_STREAM_USER, flags);
        if (s) {
            s->priority = priority > 0 ? 0 : priority < FG_PRIORITY_GREATEST ? FG_PRIORITY_GREATEST : priority;
            *phStream = (CUstream)s;
        }
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    return rc;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return cuStreamCreateWithPriority(phStream, Flags, 0);
}

/* Waits for the stream's work, then stops its worker; the handle dies at once. */
CUresult cuStreamDestroy_v2(CUstream hStream)
{
    struct fg_stream *s = (struct fg_stream *)hStream;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !fg_ptrset_has(&drv.streams, s))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (!rc && s->running && pthread_equal(s->thread, pthread_self()))
        rc = CUDA_ERROR_NOT_PERMITTED;
    if (!rc)
        fg_stream_retire(s);
    fg_unlock();
    return rc;
}

/*
 * Waits for the work enqueued before the call.  A capturing stream has no
 * work to wait for: CUDA refuses and invalidates the capture.  A host
 * function or kernel may not wait (it would wait for itself).
 */
CUresult cuStreamSynchronize(CUstream hStream)
{
    struct fg_stream *s;
    CUresult rc;

    fg_maybe_crash();
    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && fg_in_worker())
        rc = CUDA_ERROR_NOT_PERMITTED;
    if (!rc && s->capture) {
        fg_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (!rc) {
        fg_stream_wait_seq(s, s->enq_seq);
        fg_pool_trim_all();
    }
    fg_unlock();
    return rc;
}

/* The per-thread default stream variant: NULL is CU_STREAM_PER_THREAD. */
CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return cuStreamSynchronize(fg_per_thread(hStream));
}

CUresult cuStreamQuery(CUstream hStream)
{
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && s->capture) {
        fg_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (!rc && s->done_seq < s->enq_seq)
        rc = CUDA_ERROR_NOT_READY;
    fg_unlock();
    return rc;
}

CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && !flags)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        *flags = s->flags;
    fg_unlock();
    return rc;
}

static CUresult stream_priority(CUstream hStream, int *priority, CUstream null_means)
{
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream ? hStream : null_means, &s);
    if (!rc && !priority)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        *priority = s->priority;
    fg_unlock();
    return rc;
}

CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    return stream_priority(hStream, priority, NULL);
}

CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
    return stream_priority(hStream, priority, CU_STREAM_PER_THREAD);
}

/* The range of the current context's device: least (0), greatest. */
CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct fg_ctx *ctx;
    CUresult rc;

    fg_lock();
    rc = fg_current_ctx(&ctx);
    fg_unlock();
    if (rc)
        return rc;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = FG_PRIORITY_GREATEST;
    return CUDA_SUCCESS;
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    struct fg_stream *s;
    struct fg_op *op;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && !fn)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && !(op = fg_op_new(FG_OP_HOST_FN, 0)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        op->u.host.fn = fn;
        op->u.host.data = userData;
        rc = fg_submit(s, op);
    }
    fg_unlock();
    return rc;
}

/*
 * The older form of cuLaunchHostFunc: the callback also gets the stream
 * (the handle as given) and a status, here always CUDA_SUCCESS (the double
 * has no device errors).  Unlike cuLaunchHostFunc it cannot be captured:
 * CUDA refuses it in a capture, which is invalidated.
 */
static CUresult add_callback(CUstream hStream, CUstream handle, CUstreamCallback cb, void *userData,
                             unsigned int flags)
{
    struct fg_stream *s;
    struct fg_op *op;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && (!cb || flags))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && s->capture) {
        fg_capture_invalidate(s->capture);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (!rc && !(op = fg_op_new(FG_OP_HOST_FN, 0)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        op->u.host.cb = cb;
        op->u.host.stream = handle;
        op->u.host.data = userData;
        rc = fg_submit(s, op);
    }
    fg_unlock();
    return rc;
}

CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
    return add_callback(hStream, hStream, callback, userData, flags);
}

/* The per-thread default stream variant: NULL is CU_STREAM_PER_THREAD. */
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
    return add_callback(fg_per_thread(hStream), hStream, callback, userData, flags);
}
