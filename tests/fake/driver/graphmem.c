/*
 * Graph-owned memory: stream-ordered allocation inside a capture.  As in
 * CUDA, cuMemAllocAsync on a capturing stream adds an allocation node and
 * returns an address fixed for the life of the graph, the same for every
 * launch, but memory backs it only from the node's run at a launch until
 * a free runs: the graph's own free node (cuMemFreeAsync in the same
 * capture), or, for an allocation the graph leaves unfreed, cuMemFreeAsync
 * or cuMemFree after the launch, or the next launch of a graph instantiated
 * with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.  Launching a graph
 * again while an allocation of its last launch is unfreed fails with
 * CUDA_ERROR_INVALID_VALUE.  An allocation freed in its graph cannot be
 * freed outside it.  Outside the window that backs it the range is
 * PROT_NONE: a kernel, a copy or the host touching it faults, as an access
 * to unmapped memory faults on a GPU.
 *
 * Not modelled: freeing in one graph what another allocated (refused, and
 * the capture invalidated), explicit memory nodes (cuGraphAddMemAllocNode),
 * launching such a graph inside another capture (refused), and CUDA's
 * rule that a graph with memory nodes has one instantiation at a time.
 */
#include <stdlib.h>

#include "driver.h"

struct fg_gmem {
    uintptr_t ptr;
    size_t size, cap;       /* as asked; as reserved (a multiple of 2 MiB) */
    struct fg_graph *graph; /* the capture's graph that allocated it (a key, never dereferenced) */
    int refs;               /* ops naming it, plus one while memory backs it */
    int freed_in_graph;     /* its graph has a free node for it */
    int allocated;          /* a launch allocated it and no free has been asked since */
    int backed, accounted;  /* pages mapped (in stream order); counted as device memory */
};

static void gmem_unref(struct fg_gmem *g)
{
    if (--g->refs > 0)
        return;
    fg_alloc_remove(g->ptr);
    fg_va_unreserve(g->ptr, g->cap);
    free(g);
}

/* An op of kind on g, holding its reference, or NULL.  Lock held. */
static struct fg_op *gmem_op(enum fg_op_kind kind, struct fg_gmem *g)
{
    struct fg_op *op = fg_op_new(kind, 0);

    if (op) {
        op->u.gmem = g;
        g->refs++;
    }
    return op;
}

void fg_gmem_ref(struct fg_gmem *g)
{
    g->refs++;
}

void fg_gmem_unref(struct fg_gmem *g)
{
    gmem_unref(g);
}

/* The allocation node's run: memory backs the range (fresh, zeroed). */
static void gmem_back(struct fg_gmem *g)
{
    if (g->backed)
        return;
    g->backed = fg_va_back(g->ptr, g->cap) == 0;
    if (!g->backed)
        return; /* the range stays PROT_NONE: what uses it faults, loudly */
    g->accounted = fg_mem_reserve(g->cap) == 0;
    g->refs++;
}

static void gmem_unback(struct fg_gmem *g)
{
    if (!g->backed)
        return;
    fg_va_unback(g->ptr, g->cap);
    if (g->accounted)
        fg_mem_unreserve(g->cap);
    g->backed = g->accounted = 0;
    gmem_unref(g);
}

void fg_gmem_run(struct fg_op *op)
{
    if (op->kind == FG_OP_GRAPH_ALLOC)
        gmem_back(op->u.gmem);
    else
        gmem_unback(op->u.gmem);
}

CUresult fg_gmem_alloc(struct fg_capture *cap, size_t bytes, CUdeviceptr *dptr)
{
    size_t want = (bytes + FG_GRANULARITY - 1) & ~(size_t)(FG_GRANULARITY - 1);
    struct fg_gmem *g = calloc(1, sizeof(*g));
    struct fg_op *op;
    uintptr_t p;

    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fg_va_reserve(want, FG_GRANULARITY, 0, &p)) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *g = (struct fg_gmem){ .ptr = p, .size = bytes, .cap = want, .graph = cap->graph };
    if (fg_alloc_insert(p, bytes, FG_MEM_GRAPH, g)) {
        fg_va_unreserve(p, want);
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->refs = 1; /* until the op below holds it */
    op = gmem_op(FG_OP_GRAPH_ALLOC, g);
    gmem_unref(g);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fg_capture_add(cap, op);
    if (!rc)
        *dptr = (CUdeviceptr)p;
    return rc;
}

CUresult fg_gmem_free_captured(struct fg_capture *cap, struct fg_alloc *a)
{
    struct fg_gmem *g = a->owner;
    struct fg_op *op;

    if (g->graph != cap->graph) {
        fg_capture_invalidate(cap);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (g->freed_in_graph)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = gmem_op(FG_OP_GRAPH_FREE, g)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->freed_in_graph = 1;
    return fg_capture_add(cap, op);
}

CUresult fg_gmem_free(struct fg_alloc *a, struct fg_stream *s)
{
    struct fg_gmem *g = a->owner;
    struct fg_op *op;

    if (!g->allocated)
        return CUDA_ERROR_INVALID_VALUE; /* never launched, freed already, or its graph frees it */
    if (!s) {
        g->allocated = 0;
        gmem_unback(g); /* cuMemFree: the caller drained the device */
        return CUDA_SUCCESS;
    }
    if (!(op = gmem_op(FG_OP_GRAPH_FREE, g)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->allocated = 0;
    return fg_submit(s, op);
}

CUresult fg_gmem_launch(struct fg_graph *exec, struct fg_stream *s)
{
    struct fg_op *op, *f;
    CUresult rc = CUDA_SUCCESS;
    int has = 0;

    for (op = exec->head; op; op = op->next) {
        if (op->kind != FG_OP_GRAPH_ALLOC)
            continue;
        has = 1;
        if (op->u.gmem->allocated && !(exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
            return CUDA_ERROR_INVALID_VALUE;
    }
    if (has && s->capture) {
        fg_capture_invalidate(s->capture);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    /* Auto-free: what the last launch left unfreed is freed first, in stream order. */
    for (op = exec->head; op && !rc; op = op->next) {
        if (op->kind != FG_OP_GRAPH_ALLOC || !op->u.gmem->allocated)
            continue;
        if (!(f = gmem_op(FG_OP_GRAPH_FREE, op->u.gmem)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        op->u.gmem->allocated = 0;
        rc = fg_submit(s, f);
    }
    return rc;
}

void fg_gmem_launched(struct fg_graph *exec)
{
    for (struct fg_op *op = exec->head; op; op = op->next)
        if (op->kind == FG_OP_GRAPH_ALLOC && !op->u.gmem->freed_in_graph)
            op->u.gmem->allocated = 1;
}
