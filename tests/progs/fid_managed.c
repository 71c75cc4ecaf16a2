/*
 * fid_managed: a loss the host reads straight out of cudaMallocManaged
 * memory that a kernel wrote, after a stream sync, with no copy call, as
 * programs using unified memory do (CUDA samples, Numba/CuPy managed
 * arrays, a C++ trainer keeping its scalars in managed memory).  The host
 * feeds what it read into the next iteration's kernel.
 *
 * libckpt cannot replay this: no call tells it when or what the host
 * reads.  The expected outcome of a restore is a refusal whose reason
 * names managed memory, never a run that ends as if restored with other
 * values than the recorded run's.
 */
#include "fid.h"

#define WORDS 4096

KERNEL(report, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0, m = 0;
        for (size_t i = 0; i < n; i++) {
            h = fid_mix(h ^ w[i]);
            m = w[i] > m ? w[i] : m;
        }
        out[0] = h;
        out[1] = m;
    }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_managed");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *stats;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMallocManaged((void **)&stats, 2 * sizeof(uint32_t), cudaMemAttachGlobal));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    uint64_t seen = FID_HASH_INIT;
    uint32_t prev = 0;
    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 7919u + (prev >> 16)));
        CHECK(report_launch(DIM3(1), DIM3(1), s, w, WORDS, stats));
        CHECK(cudaStreamSynchronize(s));
        uint32_t loss = stats[0], peak = stats[1]; /* the host reads managed memory */
        prev = loss;
        seen = fid_hash_u64(fid_hash_u64(seen, loss), peak);
        printf("iter %d loss 0x%08x peak 0x%08x\n", it, loss, peak);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, seen);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
