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

/* The capture status of s, or IMPLICIT for the legacy stream while a
 * blocking stream captures (asking would be an implicit dependency on that
 * capture).  Lock held. */
static CUresult capture_status(const struct fg_stream *s, CUstreamCaptureStatus *status)
{
    const struct fg_stream *b;

    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (s->capture) {
        *status = s->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    } else if (s->kind == FG_STREAM_LEGACY) {
        for (b = s->ctx->streams; b; b = b->ctx_next)
            if (b->capture && !(b->flags & CU_STREAM_NON_BLOCKING))
                return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    struct fg_stream *s;
    CUresult rc;

    fg_lock();
    rc = fg_stream_get(hStream, &s);
    if (!rc && !captureStatus)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = capture_status(s, captureStatus);
    fg_unlock();
    return rc;
}

/*
 * cuStreamGetCaptureInfo in its three forms.  The id is unique over the
 * life of the process.  A graph here is linear (its ops replay in capture
 * order), so the node the next captured op depends on is the last one
 * captured: the dependency set is that node, or empty, with zeroed edge
 * data; its array lives in the capture until the next query.  Everything
 * but the status is valid only while the capture is active.  Lock held.
 */
static CUresult capture_info(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    static const CUgraphEdgeData no_edge_data[1];
    struct fg_capture *cap;
    struct fg_stream *s;
    CUresult rc = fg_stream_get(hStream, &s);

    if (!rc && (!status || (edges && !deps)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        rc = capture_status(s, status);
    if (rc || *status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return rc;
    cap = s->capture;
    if (id)
        *id = cap->id;
    if (graph)
        *graph = (CUgraph)cap->graph;
    cap->deps[0] = (CUgraphNode)cap->graph->tail;
    if (deps)
        *deps = cap->graph->tail ? cap->deps : NULL;
    if (edges)
        *edges = cap->graph->tail ? no_edge_data : NULL;
    if (ndeps)
        *ndeps = cap->graph->tail ? 1 : 0;
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    CUresult rc;

    fg_lock();
    rc = capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                      numDependencies_out);
    fg_unlock();
    return rc;
}

/* No edge in the double carries data, so this form never has a lossy answer. */
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out)
{
    return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                                     numDependencies_out);
}

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
    return cuStreamGetCaptureInfo_v3(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL);
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
            exec->flags = flags;
            *phGraphExec = (CUgraphExec)exec;
        }
    }
    fg_unlock();
    return rc;
}

/* The CUDA 12 form: the flags in a struct, and what failed in it.  No
 * upload stream: the double's graphs need no upload. */
CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    if (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD && params->hUploadStream) {
        struct fg_stream *s;
        fg_lock();
        CUresult rc = fg_stream_get(params->hUploadStream, &s);
        fg_unlock();
        if (rc)
            return rc;
    }
    CUresult rc = cuGraphInstantiateWithFlags(phGraphExec, hGraph, params->flags);
    params->hErrNode_out = NULL;
    params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
    return rc;
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    return cuGraphInstantiateWithParams(phGraphExec, hGraph, params); /* the upload stream is only checked */
}

/* Enqueues a copy of every recorded op, in order; on a capturing stream they
 * are captured.  Graph-owned memory has its own rules (graphmem.c). */
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
    if (!rc)
        rc = fg_gmem_launch(exec, s);
    for (op = rc ? NULL : exec->head; op && !rc; op = op->next) {
        if (!(c = fg_op_clone(op)))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            rc = fg_submit(s, c);
    }
    if (!rc)
        fg_gmem_launched(exec);
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

/* ---- updating an instantiated graph --------------------------------- */

/* Whether p is in device memory, as a copy node's operand.  Lock held. */
static int on_device(const void *p)
{
    const struct fg_alloc *a = fg_alloc_find((uintptr_t)p);

    return a && fg_mem_is_device(a->kind);
}

/*
 * Why the ops of exec cannot take the parameters of the ops of g, in
 * CUDA's terms, with the op of g to blame; SUCCESS when they can.  The
 * rules are CUDA's as far as the double's ops have them: the same number
 * of nodes in the same order (the graphs are linear), the same kind of
 * node at each place; a copy may not change the memory type (device or
 * host) of either side, a memset its element size.  Kernels may change
 * function and arguments, host functions their function and data, event
 * records their event.  Lock held.
 */
static CUgraphExecUpdateResult update_check(const struct fg_graph *exec, const struct fg_graph *g,
                                            const struct fg_op **blame)
{
    const struct fg_op *a = exec->head, *b = g->head;

    *blame = NULL;
    for (; a && b; a = a->next, b = b->next) {
        *blame = b;
        if (a->kind != b->kind)
            return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        if (a->kind == FG_OP_COPY && (on_device(a->u.copy.src) != on_device(b->u.copy.src) ||
                                      on_device(a->u.copy.dst) != on_device(b->u.copy.dst)))
            return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        if (a->kind == FG_OP_MEMSET && a->u.memset.elem != b->u.memset.elem)
            return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        if (a->kind == FG_OP_HOST_FN && !a->u.host.cb != !b->u.host.cb)
            return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        if (a->kind != FG_OP_KERNEL && a->kind != FG_OP_COPY && a->kind != FG_OP_MEMSET &&
            a->kind != FG_OP_HOST_FN && a->kind != FG_OP_RECORD)
            return CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    }
    if (a || b) {
        *blame = NULL;
        return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    *blame = NULL;
    return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

/*
 * Gives the instantiated graph the node parameters of a topologically
 * identical graph, or changes nothing and says why (resultInfo, and
 * CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE).  Launches already enqueued keep
 * the parameters they were launched with.
 */
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
    struct fg_graph *exec = (struct fg_graph *)hGraphExec, *fresh = NULL;
    const struct fg_op *blame = NULL;
    struct fg_op *old;
    CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_ERROR;
    CUresult rc;

    fg_lock();
    rc = fg_check_init();
    if (!rc && !resultInfo)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc && (!fg_ptrset_has(&drv.execs, exec) || !fg_ptrset_has(&drv.graphs, hGraph)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (!rc) {
        why = update_check(exec, (struct fg_graph *)hGraph, &blame);
        if (why != CU_GRAPH_EXEC_UPDATE_SUCCESS)
            rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    if (!rc && !(fresh = graph_clone((struct fg_graph *)hGraph))) {
        why = CU_GRAPH_EXEC_UPDATE_ERROR;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!rc) {
        /* Swap the op lists; the exec handle stays the same. */
        old = exec->head;
        exec->head = fresh->head;
        exec->tail = fresh->tail;
        fresh->head = old;
        fg_graph_free(fresh);
    }
    if (resultInfo && rc != CUDA_ERROR_NOT_INITIALIZED) {
        resultInfo->result = why;
        resultInfo->errorNode = (CUgraphNode)blame;
        resultInfo->errorFromNode = NULL;
    }
    fg_unlock();
    return rc;
}

/* The CUDA 10.2 form, with the error node and result as two out-parameters. */
CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           CUgraphExecUpdateResult *updateResult_out)
{
    CUgraphExecUpdateResultInfo info = {CU_GRAPH_EXEC_UPDATE_ERROR, NULL, NULL};
    CUresult rc;

    if (!hErrorNode_out || !updateResult_out)
        return fg_check_init() ? CUDA_ERROR_NOT_INITIALIZED : CUDA_ERROR_INVALID_VALUE;
    rc = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
    *hErrorNode_out = info.errorNode;
    *updateResult_out = info.result;
    return rc;
}

/* The per-thread default stream variants: NULL is CU_STREAM_PER_THREAD. */
CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
    return cuStreamGetCaptureInfo(fg_per_thread(hStream), captureStatus_out, id_out);
}

CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return cuStreamGetCaptureInfo_v2(fg_per_thread(hStream), captureStatus_out, id_out, graph_out,
                                     dependencies_out, numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out,
                                        size_t *numDependencies_out)
{
    return cuStreamGetCaptureInfo_v3(fg_per_thread(hStream), captureStatus_out, id_out, graph_out,
                                     dependencies_out, edgeData_out, numDependencies_out);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return cuStreamBeginCapture_v2(fg_per_thread(hStream), mode);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return cuStreamEndCapture(fg_per_thread(hStream), phGraph);
}
