/*
 * cuStreamGetCaptureInfo in its three forms (v1: status and id; v2: the
 * graph and dependencies; v3, what "cuStreamGetCaptureInfo" is in CUDA 13:
 * edge data too) and their _ptsz variants: the status of a stream that
 * captures, has stopped or was invalidated, an id unique to each capture,
 * the graph being captured (the one cuStreamEndCapture hands over), the
 * node the next capture depends on, CUDA's argument rules and the
 * legacy-stream IMPLICIT error; cuStreamBeginCapture (v1) captures in
 * global mode.
 */
#include "drv_test.h"

static void nop(void **args)
{
    (void)args;
}

int main(void)
{
    CUstreamCaptureStatus st;
    cuuint64_t id = 0, id2 = 0;
    CUgraph g = NULL, ended;
    const CUgraphNode *deps = (const CUgraphNode *)&deps;
    const CUgraphEdgeData *edges = (const CUgraphEdgeData *)&edges;
    size_t ndeps = 99;
    CUstream s, nb;
    CUdeviceptr d;

    DRV_SETUP();
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc_v2(&d, 64));

    /* Not capturing. */
    CHECK(cuStreamGetCaptureInfo_v3(s, &st, &id, &g, &deps, &edges, &ndeps));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE, "status %d", st);
    CHECK(cuStreamGetCaptureInfo(NULL, &st, NULL));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE, "legacy status %d", st);
    CHECK_RES(cuStreamGetCaptureInfo_v3(s, NULL, &id, NULL, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, NULL, &edges, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuStreamGetCaptureInfo((CUstream)(uintptr_t)0x1234, &st, NULL), CUDA_ERROR_INVALID_HANDLE);

    /* An active capture: id, graph, no dependency before the first node. */
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamGetCaptureInfo_v3(s, &st, &id, &g, &deps, &edges, &ndeps));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && g != NULL, "status %d id %llu graph %p", st,
           (unsigned long long)id, (void *)g);
    EXPECT(ndeps == 0, "%zu dependencies before the first node", ndeps);
    CHECK(LAUNCH(s, nop, PTR(d)));
    CHECK(cuStreamGetCaptureInfo_v3(s, &st, &id2, NULL, &deps, &edges, &ndeps));
    EXPECT(id2 == id, "the id changed within a capture");
    EXPECT(ndeps == 1 && deps && deps[0] && edges, "%zu dependencies after a node", ndeps);
    EXPECT(edges[0].from_port == 0 && edges[0].to_port == 0 && edges[0].type == 0, "edge data is not zero");
    CHECK(cuStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &ndeps));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && ndeps == 1, "v2: status %d, %zu dependencies", st, ndeps);
    CHECK(cuStreamGetCaptureInfo_v3_ptsz(s, &st, &id2, NULL, NULL, NULL, NULL));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id2 == id, "_ptsz on a stream handle");
    /* The legacy stream while a blocking stream captures: IMPLICIT. */
    CHECK_RES(cuStreamGetCaptureInfo(NULL, &st, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK(cuStreamEndCapture(s, &ended));
    EXPECT(ended == g, "the graph of the capture %p is not the one ended %p", (void *)g, (void *)ended);
    CHECK(cuStreamGetCaptureInfo(s, &st, &id2));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_NONE, "status %d after the end", st);
    CHECK(cuGraphDestroy(ended));

    /* A second capture has another id; an invalidated one says so. */
    CHECK(cuStreamBeginCapture_v2(nb, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuStreamGetCaptureInfo_v2(nb, &st, &id2, NULL, NULL, NULL));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id2 != id, "ids %llu and %llu", (unsigned long long)id,
           (unsigned long long)id2);
    CHECK(cuStreamGetCaptureInfo(NULL, &st, NULL)); /* a non-blocking stream's capture is no dependency */
    CHECK_RES(cuStreamSynchronize(nb), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK(cuStreamGetCaptureInfo(nb, &st, NULL));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "status %d after an invalidating call", st);
    CHECK_RES(cuStreamEndCapture(nb, &ended), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

    /* The per-thread stream, through the _ptsz forms; v1 begin is global. */
    CHECK(cuStreamBeginCapture_ptsz(NULL));
    CHECK(cuStreamGetCaptureInfo_ptsz(NULL, &st, &id));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "the per-thread stream does not capture");
    CHECK(cuStreamGetCaptureInfo_v2_ptsz(NULL, &st, NULL, &g, NULL, &ndeps));
    EXPECT(ndeps == 0 && g, "per-thread capture: %zu dependencies", ndeps);
    CHECK_RES(cuMemAlloc_v2(&d, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); /* global mode */
    CHECK(cuStreamGetCaptureInfo_ptsz(NULL, &st, NULL));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "the v1 capture is not global");
    CHECK_RES(cuStreamEndCapture_ptsz(NULL, &ended), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuStreamBeginCapture(s));
    CHECK(cuStreamEndCapture(s, &ended));
    CHECK(cuGraphDestroy(ended));
    return 0;
}
