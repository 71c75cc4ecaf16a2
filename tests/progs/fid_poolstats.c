/*
 * fid_poolstats: stream-ordered allocation (cudaMallocAsync from the
 * device's default pool, whose release threshold is raised so that freed
 * memory stays cached, as PyTorch's cudaMallocAsync backend sets it), with
 * the allocator's statistics read from the pool every iteration
 * (cudaMemPoolGetAttribute: reserved and used bytes, their high-water
 * marks), printed, and acted on: when the pool holds more than a budget,
 * the program trims it and resets the high-water marks, as a framework's
 * memory logger and empty_cache() do.  Activation sizes change with the
 * iteration, so what the pool holds does too.
 *
 * A replay must hand the program the statistics the recorded run read: it
 * prints them, and decides by them when to trim.
 */
#include "fid.h"

#define WORDS 4096
#define BUDGET ((cuuint64_t)3 << 20)

KERNEL(fill, (uint32_t *, a), (size_t, n), (const uint32_t *, w), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        a[i] = fid_mix(w[i % WORDS] ^ seed ^ (uint32_t)i);
}

KERNEL(fold, (uint32_t *, w), (const uint32_t *, a), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < WORDS; i += KERNEL_STRIDE) {
        uint32_t h = w[i];
        for (size_t j = i; j < n; j += WORDS)
            h = fid_mix(h + a[j]);
        w[i] = h;
    }
}

static cuuint64_t stat(cudaMemPool_t pool, enum cudaMemPoolAttr attr)
{
    cuuint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
    return v;
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_poolstats");

    cudaStream_t s;
    cudaMemPool_t pool;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    cuuint64_t keep = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    uint32_t *w, *dloss, loss;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    CHECK(cudaStreamSynchronize(s));

    int trims = 0;
    for (int it = 1; it <= o.iters; it++) {
        /* Activations: two buffers whose sizes follow the "sequence length". */
        size_t n1 = (size_t)WORDS * (size_t)(1 + it % 7) * 16, n2 = (size_t)WORDS * (size_t)(1 + it % 5) * 24;
        uint32_t *a1, *a2;
        CHECK(cudaMallocAsync((void **)&a1, n1 * sizeof(uint32_t), s));
        CHECK(fill_launch(DIM3(16), DIM3(256), s, a1, n1, w, (uint32_t)it * 2654435761u));
        CHECK(cudaMallocAsync((void **)&a2, n2 * sizeof(uint32_t), s));
        CHECK(fill_launch(DIM3(16), DIM3(256), s, a2, n2, w, (uint32_t)it * 40503u));
        CHECK(fold_launch(DIM3(16), DIM3(256), s, w, a1, n1));
        CHECK(cudaFreeAsync(a1, s));
        CHECK(fold_launch(DIM3(16), DIM3(256), s, w, a2, n2));
        CHECK(cudaFreeAsync(a2, s));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));

        cuuint64_t reserved = stat(pool, cudaMemPoolAttrReservedMemCurrent);
        cuuint64_t used = stat(pool, cudaMemPoolAttrUsedMemCurrent);
        cuuint64_t reserved_high = stat(pool, cudaMemPoolAttrReservedMemHigh);
        cuuint64_t used_high = stat(pool, cudaMemPoolAttrUsedMemHigh);
        printf("iter %d loss 0x%08x reserved %llu used %llu high %llu/%llu trims %d\n", it, loss,
               (unsigned long long)reserved, (unsigned long long)used, (unsigned long long)reserved_high,
               (unsigned long long)used_high, trims);
        if (reserved > BUDGET) { /* empty_cache(), and the peak statistics reset */
            CHECK(cudaMemPoolTrimTo(pool, 0));
            cuuint64_t zero = 0;
            CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
            CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
            trims++;
        }
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, (uint64_t)trims);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
