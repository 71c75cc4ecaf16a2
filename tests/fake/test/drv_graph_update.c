/*
 * cuGraphExecUpdate (the CUDA 12 form with CUgraphExecUpdateResultInfo,
 * and the 10.2 one): an instantiated graph takes the parameters of a
 * topologically identical graph (kernel arguments and function, copy and
 * memset operands, host function data), and launches after the update use
 * them while a launch already enqueued keeps the old ones; a graph with
 * another number of nodes, another kind of node at some place, a copy
 * whose side changes memory type or a memset whose element size changes
 * is refused with CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, the reason and the
 * node to blame, and leaves the executable graph unchanged.
 */
#include <time.h>

#include "drv_test.h"

#define N 64

static volatile int gate_open;

static void gate(void **args)
{
    struct timespec ms = {0, 1000000};

    (void)args;
    for (int i = 0; i < 5000 && !__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE); i++)
        nanosleep(&ms, NULL);
}

/* x[i] += k */
static void add(void **args)
{
    int32_t *x = ARG(args, 0, int32_t *);
    int32_t k = ARG(args, 1, int32_t);

    for (int i = 0; i < N; i++)
        x[i] += k;
}

/* x[i] *= k */
static void mul(void **args)
{
    int32_t *x = ARG(args, 0, int32_t *);
    int32_t k = ARG(args, 1, int32_t);

    for (int i = 0; i < N; i++)
        x[i] *= k;
}

static int hits[2];

static void hit(void *arg)
{
    (*(int *)arg)++;
}

/* Captures: x[] = v (memset), fn(x, k), a copy of x to out, a host function. */
static CUgraph capture(CUstream s, CUdeviceptr x, unsigned v, void (*fn)(void **), int32_t k, CUdeviceptr out,
                       int *counter)
{
    CUgraph g;

    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemsetD32Async(x, v, N, s));
    CHECK(LAUNCH(s, fn, PTR(x), (uint64_t)k));
    CHECK(cuMemcpyAsync(out, x, N * sizeof(int32_t), s));
    CHECK(cuLaunchHostFunc(s, hit, counter));
    CHECK(cuStreamEndCapture(s, &g));
    return g;
}

static void expect_all(const int32_t *p, int32_t v, const char *what)
{
    for (int i = 0; i < N; i++)
        EXPECT(p[i] == v, "%s: [%d] = %d, want %d", what, i, p[i], v);
}

int main(void)
{
    CUgraphExecUpdateResultInfo info;
    CUgraphExecUpdateResult result;
    CUgraphNode blame;
    CUgraph g1, g2, g3, other;
    CUgraphExec exec;
    CUdeviceptr x, y;
    int32_t *out1, *out2;
    CUstream s;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&x, N * sizeof(int32_t)));
    CHECK(cuMemAlloc_v2(&y, N * sizeof(int32_t)));
    CHECK(cuMemAllocHost_v2((void **)&out1, N * sizeof(int32_t)));
    CHECK(cuMemAllocHost_v2((void **)&out2, N * sizeof(int32_t)));

    g1 = capture(s, x, 1, add, 1, (CUdeviceptr)(uintptr_t)out1, &hits[0]);
    CHECK(cuGraphInstantiateWithFlags(&exec, g1, 0));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(out1, 2, "the first graph");

    /* Same topology, other parameters (function, argument, operands, data). */
    g2 = capture(s, y, 3, mul, 5, (CUdeviceptr)(uintptr_t)out2, &hits[1]);
    __atomic_store_n(&gate_open, 0, __ATOMIC_RELEASE);
    CHECK(LAUNCH(s, gate, 0));
    CHECK(cuGraphLaunch(exec, s)); /* enqueued before the update: old parameters */
    memset(&info, 0xff, sizeof(info));
    CHECK(cuGraphExecUpdate_v2(exec, g2, &info));
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS && !info.errorNode, "result %d", info.result);
    CHECK(cuGraphLaunch(exec, s));
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    CHECK(cuStreamSynchronize(s));
    expect_all(out1, 2, "a launch enqueued before the update");
    expect_all(out2, 15, "a launch after the update");
    EXPECT(hits[0] == 2 && hits[1] == 1, "host functions ran %d and %d times", hits[0], hits[1]);

    /* Refusals change nothing. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemsetD32Async(x, 7, N, s));
    CHECK(cuStreamEndCapture(s, &other));
    CHECK_RES(cuGraphExecUpdate_v2(exec, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED && !info.errorNode, "node count: result %d",
           info.result);
    CHECK(cuGraphDestroy(other));

    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL)); /* a copy where the memset was */
    CHECK(cuMemcpyAsync(y, x, 4, s));
    CHECK(LAUNCH(s, add, PTR(x), 1));
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)out1, x, N * sizeof(int32_t), s));
    CHECK(cuLaunchHostFunc(s, hit, &hits[0]));
    CHECK(cuStreamEndCapture(s, &other));
    CHECK_RES(cuGraphExecUpdate_v2(exec, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED && info.errorNode, "node type: result %d",
           info.result);
    CHECK(cuGraphDestroy(other));

    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL)); /* device to device, not to host */
    CHECK(cuMemsetD32Async(x, 1, N, s));
    CHECK(LAUNCH(s, add, PTR(x), 1));
    CHECK(cuMemcpyAsync(y, x, N * sizeof(int32_t), s));
    CHECK(cuLaunchHostFunc(s, hit, &hits[0]));
    CHECK(cuStreamEndCapture(s, &other));
    CHECK_RES(cuGraphExecUpdate_v2(exec, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED && info.errorNode,
           "copy memory type: result %d", info.result);
    /* The 10.2 form says the same. */
    CHECK_RES(cuGraphExecUpdate(exec, other, &blame, &result), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(result == CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED && blame == info.errorNode, "v1 result %d",
           result);
    CHECK(cuGraphDestroy(other));

    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL)); /* 1-byte elements, not 4 */
    CHECK(cuMemsetD8Async(x, 1, N * 4, s));
    CHECK(LAUNCH(s, add, PTR(x), 1));
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)out1, x, N * sizeof(int32_t), s));
    CHECK(cuLaunchHostFunc(s, hit, &hits[0]));
    CHECK(cuStreamEndCapture(s, &other));
    CHECK_RES(cuGraphExecUpdate_v2(exec, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, "memset element: result %d", info.result);
    CHECK(cuGraphDestroy(other));

    memset(out2, 0, N * sizeof(int32_t));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(out2, 15, "after refused updates");

    /* Back to the first graph's parameters, with the 10.2 form. */
    CHECK(cuGraphExecUpdate(exec, g1, &blame, &result));
    EXPECT(result == CU_GRAPH_EXEC_UPDATE_SUCCESS && !blame, "v1 result %d", result);
    memset(out1, 0, N * sizeof(int32_t));
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    expect_all(out1, 2, "updated back");

    /* Bad arguments. */
    CHECK_RES(cuGraphExecUpdate_v2(exec, g2, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGraphExecUpdate_v2((CUgraphExec)(uintptr_t)0x1234, g2, &info), CUDA_ERROR_INVALID_VALUE);
    EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_ERROR, "result %d for a bad handle", info.result);
    CHECK_RES(cuGraphExecUpdate_v2(exec, (CUgraph)(uintptr_t)0x1234, &info), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGraphExecUpdate(exec, g2, NULL, &result), CUDA_ERROR_INVALID_VALUE);
    g3 = capture(s, x, 1, add, 1, (CUdeviceptr)(uintptr_t)out1, &hits[0]);
    CHECK(cuGraphDestroy(g3));
    CHECK_RES(cuGraphExecUpdate_v2(exec, g3, &info), CUDA_ERROR_INVALID_VALUE); /* destroyed */

    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(g1));
    CHECK(cuGraphDestroy(g2));
    CHECK(cuMemFreeHost(out1));
    CHECK(cuMemFreeHost(out2));
    CHECK(cuMemFree_v2(x));
    CHECK(cuMemFree_v2(y));
    return 0;
}
