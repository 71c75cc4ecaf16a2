/*
 * Graph-owned memory: cuMemAllocAsync inside a capture returns an address
 * fixed for the graph's life, backed only from a launch's allocation until
 * its free (in the graph, or after the launch by cuMemFreeAsync, cuMemFree
 * or an auto-free relaunch); relaunching over an unfreed allocation fails;
 * memory freed in its graph cannot be freed outside it; touching the range
 * while nothing backs it faults.
 */

#include "drv_test.h"

#define N 64

/* x[i] = k + i */
static void fill(void **args)
{
    int32_t *x = ARG(args, 0, int32_t *);
    int32_t k = ARG(args, 1, int32_t);

    for (int i = 0; i < N; i++)
        x[i] = k + i;
}

/* y[i] += x[i] */
static void accumulate(void **args)
{
    int32_t *y = ARG(args, 0, int32_t *);
    const int32_t *x = ARG(args, 1, const int32_t *);

    for (int i = 0; i < N; i++)
        y[i] += x[i];
}

static CUgraph capture(CUstream s, CUdeviceptr *t, CUdeviceptr y, int free_in_graph)
{
    CUgraph g;

    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(t, N * sizeof(int32_t), s));
    CHECK(LAUNCH(s, fill, PTR(*t), 7));
    CHECK(LAUNCH(s, accumulate, PTR(y), PTR(*t)));
    if (free_in_graph)
        CHECK(cuMemFreeAsync(*t, s));
    CHECK(cuStreamEndCapture(s, &g));
    return g;
}

int main(int argc, char **argv)
{
    (void)argc;
    DRV_HOST_DEREF_ALLOW(argv); /* the probe reads device pages from the host */
    CUstream s;
    CUdeviceptr y, t, o, o2;
    CUgraph g;
    CUgraphExec e;
    int32_t host[N];
    unsigned type;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&y, N * sizeof(int32_t)));
    CHECK(cuMemsetD32_v2(y, 0, N));
    CHECK(cuCtxSynchronize()); /* s does not wait for the legacy stream */

    /* Allocated and freed in the graph: every launch works on it. */
    g = capture(s, &t, y, 1);
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, t));
    EXPECT(type == CU_MEMORYTYPE_DEVICE, "a graph allocation is device memory from its capture on");
    EXPECT(DRV_HOST_READ_FAULTS(t), "nothing backs a graph allocation before a launch");
    CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
    for (int i = 0; i < 3; i++)
        CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH_v2(host, y, sizeof(host)));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == 3 * (7 + i), "y[%d] = %d after 3 launches", i, host[i]);
    EXPECT(DRV_HOST_READ_FAULTS(t), "the graph's free node took the memory back");
    CHECK_RES(cuMemFreeAsync(t, s), CUDA_ERROR_INVALID_VALUE); /* its graph frees it */
    CHECK_RES(cuMemFree_v2(t), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(g));
    CHECK_RES(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, t), CUDA_ERROR_INVALID_VALUE);

    /* Left unfreed by the graph: the program's after the launch, until it frees it. */
    g = capture(s, &o, y, 0);
    CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK_RES(cuMemFreeAsync(o, s), CUDA_ERROR_INVALID_VALUE); /* not allocated yet */
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuMemcpyDtoHAsync_v2(host, o, sizeof(host), s));
    CHECK(cuStreamSynchronize(s));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == 7 + i, "o[%d] = %d after the launch", i, host[i]);
    EXPECT(!DRV_HOST_READ_FAULTS(o), "memory backs an unfreed allocation after its launch");
    CHECK_RES(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE); /* unfreed */
    CHECK(cuMemFreeAsync(o, s));
    CHECK_RES(cuMemFreeAsync(o, s), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSynchronize(s));
    EXPECT(DRV_HOST_READ_FAULTS(o), "freed after the launch: nothing backs it");
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuMemFree_v2(o)); /* synchronous, as for any allocation */
    EXPECT(DRV_HOST_READ_FAULTS(o), "cuMemFree took the memory back");

    /* The address is the graph's for its life, and the allocation outlives it once launched. */
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemcpyDtoHAsync_v2(host, o, sizeof(host), s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(host[N - 1] == 7 + N - 1, "an unfreed allocation stays the program's after its graph is gone");
    CHECK(cuMemFree_v2(o));
    CHECK_RES(cuMemFree_v2(o), CUDA_ERROR_INVALID_VALUE);

    /* Auto-free on launch: each launch frees what the last one left. */
    g = capture(s, &o2, y, 0);
    CHECK(cuGraphInstantiateWithFlags(&e, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    for (int i = 0; i < 3; i++)
        CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    EXPECT(!DRV_HOST_READ_FAULTS(o2), "the last launch's allocation is live");

    /* A graph with memory nodes cannot be launched into another capture. */
    CUgraph g2;
    CHECK(cuMemFreeAsync(o2, s));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuGraphLaunch(e, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RES(cuStreamEndCapture(s, &g2), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuGraphExecDestroy(e));
    CHECK(cuGraphDestroy(g));

    /* Freeing in a capture what the capture did not allocate is refused. */
    CHECK(cuMemAllocAsync(&t, 256, s));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuMemFreeAsync(t, s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RES(cuStreamEndCapture(s, &g2), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuMemFreeAsync(t, s));
    CHECK(cuStreamSynchronize(s));
    puts("graph memory: ok");
    return 0;
}
