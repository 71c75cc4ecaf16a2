/*
 * fid_pageable: a non_blocking device-to-host copy into pageable (malloc'd)
 * memory, read as soon as the call returns.  CUDA documents that an async
 * copy to pageable host memory is synchronous with respect to the host
 * ("API synchronization behavior": for transfers from device memory to
 * pageable host memory, the function returns only once the copy has
 * completed), so code that does tensor.to("cpu", non_blocking=True) on a
 * tensor whose destination is not pinned, or cudaMemcpyAsync into a
 * std::vector, may read the bytes at once, and real programs do.
 *
 * The host reads a device "step count" this way each iteration and feeds
 * it to the next kernel; the iteration line prints it.  A replay that
 * delivers the bytes of async copies only at the next synchronising call
 * hands the host stale bytes.  The program checks the contract it relies
 * on (the two words it reads are each other's complement) and fails
 * loudly where it does not hold.
 */
#include "fid.h"

#define WORDS 4096

KERNEL(count, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t s = 0;
        for (size_t i = 0; i < n; i += 7)
            s ^= fid_mix(w[i] + (uint32_t)i);
        out[0] = s;
        out[1] = ~s;
    }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_pageable");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dcount, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dcount, 2 * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    uint32_t *count_h = (uint32_t *)malloc(2 * sizeof(uint32_t)); /* pageable */
    REQUIRE(count_h != NULL);
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    uint64_t seen = FID_HASH_INIT;
    uint32_t carry = 1;
    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 31u + carry));
        CHECK(count_launch(DIM3(1), DIM3(1), s, w, WORDS, dcount));
        count_h[0] = count_h[1] = 0;
        CHECK(cudaMemcpyAsync(count_h, dcount, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        /* Pageable destination: the copy has completed when the call returns. */
        if (count_h[1] != ~count_h[0])
            fid_fail("cudaMemcpyAsync to pageable memory", "the bytes were not there when it returned",
                     __FILE__, __LINE__);
        carry = count_h[0];
        seen = fid_hash_u64(seen, carry);
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, carry));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x count 0x%08x\n", it, *loss_h, carry);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, seen);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    free(count_h);
    return 0;
}
