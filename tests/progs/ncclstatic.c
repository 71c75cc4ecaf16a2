/*
 * ncclstatic: a training loop in a program that carries its own copy of
 * NCCL, linked in statically, as a framework's library or a C++ trainer
 * built against libnccl_static.a does.  The double cannot link a real NCCL
 * in, so the program carries what marks one: NCCL's banner, "NCCL version
 * 2.x", in its read-only data, where ncclGetVersion's string lives.  Its
 * training is fid.h's: a step per iteration, the loss read back, a digest
 * at the end; --iters and --die-at as fid.h says.
 */
#include "fid.h"

#define WORDS 4096

/* Referenced, so that it stays in the program's read-only data. */
static const char nccl_banner[] = "NCCL version 2.28.9+cuda13.0";

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "ncclstatic");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("NCCLSTATIC_BANNER"))
        puts(nccl_banner);
    uint32_t *w, *dloss, loss;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(8), DIM3(256), s, w, WORDS, (uint32_t)it));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
    }
    printf("digest %016llx\n", (unsigned long long)fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t)));
    return 0;
}
