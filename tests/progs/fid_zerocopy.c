/*
 * fid_zerocopy: a loss a kernel writes into host memory allocated with
 * cudaHostAlloc(cudaHostAllocMapped) and passed to it as a pointer
 * (zero-copy), which the host then reads after a stream sync with no copy
 * call, as programs that keep flags and scalars in mapped pinned memory do
 * (CUTLASS/cuDNN-style workspace flags, Numba's mapped arrays, NCCL's
 * host-visible progress counters).  The kernel gets the device pointer the
 * driver's cuMemHostGetDevicePointer gives (through
 * cudaGetDriverEntryPointByVersion: the double's runtime has no
 * cudaHostGetDevicePointer), or, where the driver has none (the double's,
 * today), the host pointer itself, which is the device pointer under
 * unified addressing.
 *
 * libckpt cannot replay this: no call tells it when or what the host
 * reads.  The expected outcome of a restore is a refusal whose reason
 * names mapped (zero-copy) host memory, never a run that ends as if
 * restored with other values than the recorded run's.
 */
#include "fid.h"

#define WORDS 4096

KERNEL(report, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0, x = 0;
        for (size_t i = 0; i < n; i++) {
            h = fid_mix(h ^ w[i]);
            x ^= w[i];
        }
        out[0] = h;
        out[1] = x;
    }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_zerocopy");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *mapped;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    /* FID_ZEROCOPY_PINNED=1: plain pinned memory, not asked to be mapped;
     * under unified addressing a kernel writes it all the same. */
    const char *plain = getenv("FID_ZEROCOPY_PINNED");
    if (plain && *plain == '1')
        CHECK(cudaMallocHost((void **)&mapped, 2 * sizeof(uint32_t)));
    else
        CHECK(cudaHostAlloc((void **)&mapped, 2 * sizeof(uint32_t), cudaHostAllocMapped));
    mapped[0] = mapped[1] = 0;
    uint32_t *dmapped = mapped;
    CUresult (*get_dptr)(CUdeviceptr *, void *, unsigned int) = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuMemHostGetDevicePointer", (void **)&get_dptr, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
        CUdeviceptr d;
        REQUIRE(get_dptr(&d, mapped, 0) == CUDA_SUCCESS); /* not CHECK_CU: cuGetErrorName needs -lcuda */
        dmapped = (uint32_t *)(uintptr_t)d;
    } else {
        (void)cudaGetLastError();
    }
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    uint64_t seen = FID_HASH_INIT;
    uint32_t prev = 0;
    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 104729u + (prev & 0xffff)));
        CHECK(report_launch(DIM3(1), DIM3(1), s, w, WORDS, dmapped)); /* the kernel writes host memory */
        CHECK(cudaStreamSynchronize(s));
        uint32_t loss = mapped[0], parity = mapped[1];
        prev = loss;
        seen = fid_hash_u64(fid_hash_u64(seen, loss), parity);
        printf("iter %d loss 0x%08x parity 0x%08x\n", it, loss, parity);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, seen);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
