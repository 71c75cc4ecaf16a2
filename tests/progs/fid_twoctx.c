/*
 * fid_twoctx: two contexts in one process (cuCtxCreate), each with its own
 * stream and its own state, driven in turn by one thread that switches
 * with cuCtxSetCurrent, as programs do that host two independent models
 * or libraries that each make their own context (a trainer beside an
 * inference engine, TensorRT or a JAX/XLA client beside a runtime-API
 * program, old Caffe/Theano multi-context code).  The runtime calls made
 * while a context is current (cudaMalloc, kernel launches, copies) act in
 * that context, as with NVIDIA's runtime.
 *
 * A restore must give each context its own allocations back, at their
 * addresses, with their bytes, and replay the context switches.
 */
#include "fid.h"

#define WORDS 4096
#define NCTX 2

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_twoctx");

    CHECK_CU(cuInit(0));
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, 0));
    struct {
        CUcontext ctx;
        cudaStream_t s;
        uint32_t *w, *dloss, *loss_h;
    } m[NCTX];
    for (int k = 0; k < NCTX; k++) {
        CHECK_CU(cuCtxCreate_v4(&m[k].ctx, NULL, 0, dev));
        CHECK_CU(cuCtxSetCurrent(m[k].ctx));
        CHECK_CU(cuStreamCreate(&m[k].s, CU_STREAM_NON_BLOCKING));
        CHECK(cudaMalloc((void **)&m[k].w, WORDS * sizeof(uint32_t)));
        CHECK(cudaMalloc((void **)&m[k].dloss, sizeof(uint32_t)));
        CHECK(cudaMallocHost((void **)&m[k].loss_h, sizeof(uint32_t)));
        CHECK(cudaMemsetAsync(m[k].w, 0, WORDS * sizeof(uint32_t), m[k].s));
    }

    for (int it = 1; it <= o.iters; it++) {
        uint32_t loss[NCTX];
        for (int k = 0; k < NCTX; k++) {
            CHECK_CU(cuCtxSetCurrent(m[k].ctx));
            uint32_t seed = (uint32_t)it * (k ? 2246822519u : 3266489917u) + (k ? loss[0] : 0);
            CHECK(fid_step_launch(DIM3(16), DIM3(256), m[k].s, m[k].w, WORDS, seed));
            CHECK(fid_loss_launch(DIM3(1), DIM3(1), m[k].s, m[k].w, WORDS, m[k].dloss));
            CHECK(cudaMemcpyAsync(m[k].loss_h, m[k].dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, m[k].s));
            CHECK(cudaStreamSynchronize(m[k].s));
            loss[k] = *m[k].loss_h;
        }
        printf("iter %d loss 0x%08x 0x%08x\n", it, loss[0], loss[1]);
        fid_end_iteration(&o, it);
    }

    uint64_t h = FID_HASH_INIT;
    for (int k = 0; k < NCTX; k++) {
        CHECK_CU(cuCtxSetCurrent(m[k].ctx));
        h = fid_hash_device(h, m[k].w, WORDS * sizeof(uint32_t));
    }
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
