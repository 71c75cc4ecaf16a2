/*
 * Stream capture and graphs.  While a stream captures, the work enqueued
 * on it (and on streams that joined the capture through an event) is
 * recorded, arguments included, into a graph instead of running.  A graph
 * here is the captured ops in enqueue order, which is a valid order for the
 * captured dependencies; launching an instantiated graph enqueues copies of
 * them on the launch stream.  A capture must never let work run, and a
 * replay must never see arguments changed after capture.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "driver.h"

struct fg_capture *fg_capture_find(uint64_t id)
{
    struct fg_capture *cap;

    for (cap = drv.captures; cap; cap = cap->next)
        if (cap->id == id)
            return cap;
    return NULL;
}

static void graph_append(struct fg_graph *g, struct fg_op *op)
{
    op->next = NULL;
    if (g->tail)
        g->tail->next = op;
    else
        g->head = op;
    g->tail = op;
}

CUresult fg_capture_add(struct fg_capture *cap, struct fg_op *op)
{
    if (cap->invalidated) {
        fg_op_free(op);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    graph_append(cap->graph, op);
    return CUDA_SUCCESS;
}

void fg_capture_invalidate(struct fg_capture *cap)
{
    cap->invalidated = 1;
}

/* The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* A thread in global mode may not make unsafe calls while any thread
 * captures in global mode, nor while it captures itself (but relaxed); in
 * thread-local mode only the latter; in relaxed mode it always may. */
CUresult fg_capture_forbid_unsafe(void)
{
    struct fg_capture *cap;
    CUresult rc = CUDA_SUCCESS;

    for (cap = drv.captures; cap && thread_mode != CU_STREAM_CAPTURE_MODE_RELAXED; cap = cap->next) {
        bool own = pthread_equal(cap->thread, pthread_self());
        if ((own && cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!own && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            fg_capture_invalidate(cap);
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

void fg_graph_free(struct fg_graph *g)
{
    struct fg_op *op, *next;

    for (op = g->head; op; op = next) {
        next = op->next;
        fg_op_free(op);
    }
    free(g);
}

/* A copy of g with its own ops, or NULL.  Lock held. */
static struct fg_graph *graph_clone(const struct fg_graph *g)
{
    struct fg_graph *copy = calloc(1, sizeof(*copy));
    const struct fg_op *op;
    struct fg_op *c;

    if (!copy)
        return NULL;
    for (op = g->head; op; op = op->next) {
        if (!(c = fg_op_clone(op))) {
            fg_graph_free(copy);
            return NULL;
        }
        graph_append(copy, c);
    }
    return copy;
}

/* ---- capture ------------------------------------------------------- */

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    struct fg_capture *cap = NULL;
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && s->kind == FG_STREAM_LEGACY)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!rc && s->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (!rc && (!(cap = calloc(1, sizeof(*cap))) || !(cap->graph = calloc(1, sizeof(*cap->graph))))) {
        if (cap)
            free(cap);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!rc) {
        cap->id = ++drv.next_capture_id;
        cap->mode = mode;
        cap->thread = pthread_self();
        cap->origin = s;
        cap->next = drv.captures;
        drv.captures = cap;
        s->capture = cap;
    }
    fg_unlock();
    return rc;
}

/* Takes cap off the active list and every stream of its context out of it.  Lock held. */
static void capture_end(struct fg_capture *cap)
{
    struct fg_capture **pp;
    struct fg_stream *s;

    for (pp = &drv.captures; *pp != cap; pp = &(*pp)->next)
        ;
    *pp = cap->next;
    for (s = cap->origin->ctx->streams; s; s = s->ctx_next)
        if (s->capture == cap)
            s->capture = NULL;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    struct fg_capture *cap;
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && !phGraph)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && !s->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc)
        goto out;
    cap = s->capture;
    if (cap->origin != s) {
        fg_capture_invalidate(cap);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        goto out;
    }
    if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(cap->thread, pthread_self())) {
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        goto out;
    }
    capture_end(cap);
    *phGraph = NULL;
    if (cap->invalidated) {
        fg_graph_free(cap->graph);
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (fg_ptrset_add(&drv.graphs, cap->graph)) {
        fg_graph_free(cap->graph);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        *phGraph = (CUgraph)cap->graph;
    }
    free(cap);
out:
    fg_unlock();
    return rc;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    struct fg_stream *s, *b;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && !captureStatus)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc)
        goto out;
    *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->capture) {
        *captureStatus = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                 : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    } else if (s->kind == FG_STREAM_LEGACY) {
        /* Asking about the legacy stream while a blocking stream captures
         * would be an implicit dependency on that capture. */
        for (b = s->ctx->streams; b; b = b->ctx_next)
            if (b->capture && !(b->flags & CU_STREAM_NON_BLOCKING))
                rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
out:
    fg_unlock();
    return rc;
}

/* ---- graphs -------------------------------------------------------- */

CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !fg_ptrset_del(&drv.graphs, hGraph))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        fg_graph_free((struct fg_graph *)hGraph);
    fg_unlock();
    return rc;
}

/* The instantiate flags CUDA 13 defines; they change nothing in the double. */
#define FG_GRAPH_INSTANTIATE_FLAGS 0xfull

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    struct fg_graph *exec;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && (!phGraphExec || !fg_ptrset_has(&drv.graphs, hGraph) || (flags & ~FG_GRAPH_INSTANTIATE_FLAGS)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        exec = graph_clone((struct fg_graph *)hGraph);
        if (!exec || fg_ptrset_add(&drv.execs, exec)) {
            if (exec)
                fg_graph_free(exec);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            *phGraphExec = (CUgraphExec)exec;
        }
    }
    fg_unlock();
    return rc;
}

/* Enqueues a copy of every recorded op, in order; on a capturing stream they are captured. */
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    struct fg_graph *exec = (struct fg_graph *)hGraphExec;
    struct fg_stream *s;
    struct fg_op *op, *c;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !fg_ptrset_has(&drv.execs, exec))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = fg_stream_get(hStream, &s);
    for (op = rc ? NULL : exec->head; op && !rc; op = op->next) {
        if (!(c = fg_op_clone(op)))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            rc = fg_submit(s, c);
    }
    fg_unlock();
    return rc;
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !fg_ptrset_del(&drv.execs, hGraphExec))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        fg_graph_free((struct fg_graph *)hGraphExec);
    fg_unlock();
    return rc;
}

/* The per-thread default stream variants: NULL is CU_STREAM_PER_THREAD. */
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return cuStreamBeginCapture_v2(fg_per_thread(hStream), mode);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return cuStreamEndCapture(fg_per_thread(hStream), phGraph);
}
