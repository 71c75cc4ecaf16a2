/*
 * Graph-owned memory.  A stream-ordered allocation made inside a capture
 * is a memory node of the graph: its address is the graph's for life, but
 * memory backs it only from a launch's allocation until its free (the
 * graph's own free node, or the program's cuMemFreeAsync or cuMemFree
 * after the launch, or an auto-free relaunch), and a GPU faults on any
 * access outside that window.  So such an allocation is never in the
 * registry and never copied.  One the graph frees itself is gone by the
 * next boundary.  One a launch leaves to the program is live until the
 * program frees it, and a boundary where one is live takes no snapshot:
 * replay does not run graph launches, so nothing could bring the
 * allocation back at its address.  The last snapshot stays the restore
 * point, and the log says so.  In replay the launches are suppressed, and
 * so are the program's frees of what they would have allocated.
 *
 * Graphs are followed from the capture's allocations (the graph being
 * captured into, as cuStreamGetCaptureInfo names it) through
 * cuGraphInstantiateWithFlags or cuGraphInstantiateWithParams (the
 * executable graph and its auto-free flag) to cuGraphLaunch.  An
 * executable graph libckpt did not see made (the legacy cuGraphInstantiate)
 * while graphs with memory nodes exist cannot be followed: its launch
 * taints replay.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "interpose.h"
#include "log.h"

#define EXPORT __attribute__((visibility("default")))

enum { FREE_NOW, LIVE_REAL, LIVE_DRY }; /* a node's allocation, as the program sees it */

struct node {
    CUgraph graph;
    CUdeviceptr ptr;
    uint64_t size;
    bool freed_in_graph;
    int state;
};

struct graph {
    CUgraph graph;
    bool ended;       /* its capture ended: a new capture at this handle is another graph */
    bool instantiated;
};

struct exec {
    CUgraphExec exec;
    CUgraph graph;
    bool auto_free;
};

static struct {
    pthread_mutex_t lock;
    struct node *nodes;
    size_t nnodes, capnodes;
    struct graph *graphs;
    size_t ngraphs, capgraphs;
    struct exec *execs;
    size_t nexecs, capexecs;
} G = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct graph *graph_find(CUgraph g)
{
    for (size_t i = 0; i < G.ngraphs; i++)
        if (G.graphs[i].graph == g)
            return &G.graphs[i];
    return NULL;
}

/* A handle the driver handed out again: what the old graph's capture
 * allocated is forgotten (no launch can reach it any more), but for
 * allocations its launches left live, which stay the program's to free. */
static void graph_forget(CUgraph g)
{
    size_t k = 0;
    for (size_t i = 0; i < G.nnodes; i++) {
        if (G.nodes[i].graph != g) {
            G.nodes[k++] = G.nodes[i];
        } else if (G.nodes[i].state != FREE_NOW) {
            G.nodes[i].graph = NULL;
            G.nodes[k++] = G.nodes[i];
        }
    }
    G.nnodes = k;
}

static struct node *node_find(CUdeviceptr p)
{
    for (size_t i = G.nnodes; i-- > 0;)
        if (G.nodes[i].ptr == p)
            return &G.nodes[i];
    return NULL;
}

static struct exec *exec_find(CUgraphExec e)
{
    for (size_t i = 0; i < G.nexecs; i++)
        if (G.execs[i].exec == e)
            return &G.execs[i];
    return NULL;
}

void ckpt_graphmem_alloc(CUstream s, CUdeviceptr p, uint64_t size)
{
    CUstreamCaptureStatus st;
    CUgraph g = NULL;

    if ((!real_cuStreamGetCaptureInfo_v3 && ckpt_resolve("cuStreamGetCaptureInfo_v3") < 0) ||
        real_cuStreamGetCaptureInfo_v3(V(s), &st, NULL, &g, NULL, NULL, NULL) != CUDA_SUCCESS || !g) {
        ckpt_history_taint("libckpt could not tell which CUDA graph an allocation inside a capture belongs to");
        return;
    }
    pthread_mutex_lock(&G.lock);
    struct graph *gr = graph_find(g);
    if (gr && gr->ended) {
        graph_forget(g);
        *gr = (struct graph){.graph = g};
    }
    if (!gr && ckpt_grow((void **)&G.graphs, &G.capgraphs, G.ngraphs, sizeof(*G.graphs)))
        G.graphs[G.ngraphs++] = (struct graph){.graph = g}, gr = &G.graphs[G.ngraphs - 1];
    bool ok = gr && ckpt_grow((void **)&G.nodes, &G.capnodes, G.nnodes, sizeof(*G.nodes));
    if (ok)
        G.nodes[G.nnodes++] = (struct node){.graph = g, .ptr = p, .size = size};
    pthread_mutex_unlock(&G.lock);
    if (!ok)
        ckpt_history_taint("out of host memory for a CUDA graph's memory nodes");
}

void ckpt_graphmem_ended(CUgraph g)
{
    pthread_mutex_lock(&G.lock);
    struct graph *gr = graph_find(g);
    if (gr)
        gr->ended = true;
    pthread_mutex_unlock(&G.lock);
}

bool ckpt_graphmem_owns(CUdeviceptr p)
{
    pthread_mutex_lock(&G.lock);
    bool owns = node_find(p) != NULL;
    pthread_mutex_unlock(&G.lock);
    return owns;
}

CUresult ckpt_graphmem_free(CUdeviceptr p, bool in_capture, CUresult (*real_free)(CUdeviceptr, CUstream),
                            CUstream hStream)
{
    pthread_mutex_lock(&G.lock);
    struct node *n = node_find(p);
    bool dry = n && !in_capture && n->state == LIVE_DRY;
    if (dry)
        n->state = FREE_NOW; /* its launch was suppressed: so is its free */
    pthread_mutex_unlock(&G.lock);
    if (dry)
        return CUDA_SUCCESS;
    CUresult r = real_free(p, hStream);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&G.lock);
    if ((n = node_find(p))) {
        if (in_capture)
            n->freed_in_graph = true;
        else
            n->state = FREE_NOW;
    }
    pthread_mutex_unlock(&G.lock);
    return r;
}

/* Whether some graph with memory nodes it leaves unfreed was never instantiated where libckpt sees it. */
static bool unfollowed_graphs(void)
{
    for (size_t i = 0; i < G.nnodes; i++) {
        struct graph *gr = graph_find(G.nodes[i].graph);
        if (!G.nodes[i].freed_in_graph && gr && !gr->instantiated)
            return true;
    }
    return false;
}

void ckpt_graphmem_launched(CUgraphExec e, bool real)
{
    bool unknown = false;
    pthread_mutex_lock(&G.lock);
    struct exec *x = exec_find(e);
    if (!x) {
        unknown = unfollowed_graphs();
    } else {
        for (size_t i = 0; i < G.nnodes; i++) {
            struct node *n = &G.nodes[i];
            if (n->graph != x->graph || n->freed_in_graph)
                continue;
            if (n->state != FREE_NOW && !x->auto_free)
                continue; /* the driver refuses such a launch; the program saw it fail */
            n->state = real ? LIVE_REAL : LIVE_DRY;
        }
    }
    pthread_mutex_unlock(&G.lock);
    if (unknown)
        ckpt_history_taint("a CUDA graph with memory nodes was instantiated through an entry point libckpt does "
                           "not follow (the legacy cuGraphInstantiate)");
}

bool ckpt_graphmem_live(char *why, size_t len)
{
    uint64_t bytes = 0, count = 0;
    CUdeviceptr first = 0;
    pthread_mutex_lock(&G.lock);
    for (size_t i = 0; i < G.nnodes; i++)
        if (G.nodes[i].state == LIVE_REAL) {
            if (!count++)
                first = G.nodes[i].ptr;
            bytes += G.nodes[i].size;
        }
    pthread_mutex_unlock(&G.lock);
    if (count)
        snprintf(why, len, "%" PRIu64 " allocation%s of graph-owned memory (%" PRIu64 " bytes, the first at 0x%llx), "
                 "left by a CUDA graph's launch and not freed yet, %s live",
                 count, count == 1 ? "" : "s", bytes, (unsigned long long)first, count == 1 ? "is" : "are");
    return count > 0;
}

/* An executable graph made: followed only when its graph has memory nodes;
 * one at a handle seen before is a new one. */
static void instantiated(CUgraphExec e, CUgraph g, unsigned long long flags)
{
    pthread_mutex_lock(&G.lock);
    struct graph *gr = graph_find(g);
    struct exec *x = exec_find(e);
    bool lost = false;
    if (x && !gr)
        *x = G.execs[--G.nexecs];
    if (gr) {
        gr->instantiated = true;
        if (!x && ckpt_grow((void **)&G.execs, &G.capexecs, G.nexecs, sizeof(*G.execs)))
            x = &G.execs[G.nexecs++];
        if (x)
            *x = (struct exec){.exec = e, .graph = g, .auto_free = flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH};
        lost = !x;
    }
    pthread_mutex_unlock(&G.lock);
    if (lost)
        ckpt_history_taint("out of host memory for a CUDA graph's memory nodes");
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    NEED_REAL(cuGraphInstantiateWithFlags, CUDA_ERROR_NOT_INITIALIZED);
    CUresult r = real_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
    if (r == CUDA_SUCCESS && ckpt_active)
        instantiated(*phGraphExec, hGraph, flags);
    return r;
}

static CUresult with_params(__typeof__(&cuGraphInstantiateWithParams) real, CUgraphExec *phGraphExec, CUgraph hGraph,
                            CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CUresult r = real(phGraphExec, hGraph, params);
    if (r == CUDA_SUCCESS && ckpt_active && params)
        instantiated(*phGraphExec, hGraph, params->flags);
    return r;
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    NEED_REAL(cuGraphInstantiateWithParams, CUDA_ERROR_NOT_INITIALIZED);
    return with_params(real_cuGraphInstantiateWithParams, phGraphExec, hGraph, instantiateParams);
}

EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    NEED_REAL(cuGraphInstantiateWithParams_ptsz, CUDA_ERROR_NOT_INITIALIZED);
    return with_params(real_cuGraphInstantiateWithParams_ptsz, phGraphExec, hGraph, instantiateParams);
}
