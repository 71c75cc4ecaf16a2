/*
 * fid_vmm: state in virtual memory mapped chunk by chunk, as PyTorch's
 * expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
 * c10/cuda/CUDACachingAllocator.cpp ExpandableSegment) do: one
 * cuMemAddressReserve range, 2 MiB physical chunks made with cuMemCreate,
 * cuMemMap'ed one after another into it and opened with cuMemSetAccess.
 * The model's tensors live across the chunks.  At iteration 16 of 40 the
 * tail tensor is freed and its memory given back (empty_cache): ONE
 * cuMemUnmap covers the last TWO mappings, and their handles are
 * released; at iteration 28 the segment grows again: new chunks are
 * created and mapped at the same place in the reserved range, the tensor
 * made anew, and training goes on over all chunks.  Snapshots go on
 * through all of it.
 *
 * A restore must give every mapping back at the address it had, with the
 * bytes of the chunks mapped at the snapshot's iteration, whichever of
 * the phases that was.
 */
#include "fid.h"

#define NCHUNK 6   /* mapped */
#define RESERVE 8  /* chunks' worth of address space reserved */
#define TAIL 2     /* the chunks unmapped and mapped again */
#define STRIDE 257 /* words between the words a step touches */

KERNEL(sparse_step, (uint32_t *, w), (size_t, words), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX * STRIDE; i < words; i += KERNEL_STRIDE * STRIDE)
        w[i] = fid_mix(w[i] + seed + (uint32_t)i);
}

KERNEL(sparse_loss, (const uint32_t *, w), (size_t, words), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0;
        for (size_t i = 0; i < words; i += STRIDE)
            h = fid_mix(h ^ w[i]);
        *out = h;
    }
}

KERNEL(init_chunks, (uint32_t *, w), (size_t, words), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < words; i += KERNEL_STRIDE)
        w[i] = seed ^ (uint32_t)i;
}

static CUmemAllocationProp prop;
static size_t gran;
static CUdeviceptr base;
static CUmemGenericAllocationHandle handle[NCHUNK];

/* Creates chunks [first, last) and maps them at their place in the range. */
static void map_chunks(int first, int last)
{
    for (int c = first; c < last; c++) {
        CHECK_CU(cuMemCreate(&handle[c], gran, &prop, 0));
        CHECK_CU(cuMemMap(base + (CUdeviceptr)c * gran, gran, 0, handle[c], 0));
        CUmemAccessDesc access;
        memset(&access, 0, sizeof(access));
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = 0;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CHECK_CU(cuMemSetAccess(base + (CUdeviceptr)c * gran, gran, &access, 1));
    }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_vmm");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CHECK_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK_CU(cuMemAddressReserve(&base, RESERVE * gran, gran, 0, 0));
    map_chunks(0, NCHUNK);

    uint32_t *w = (uint32_t *)(uintptr_t)base;
    size_t all = NCHUNK * gran / sizeof(uint32_t), head = (NCHUNK - TAIL) * gran / sizeof(uint32_t);
    CHECK(init_chunks_launch(DIM3(64), DIM3(256), s, w, all, 7u));
    int shrink_at = o.iters * 2 / 5, grow_at = o.iters * 7 / 10;
    size_t words = all;
    for (int it = 1; it <= o.iters; it++) {
        if (it == shrink_at) { /* the tail tensor is freed; empty_cache() */
            CHECK(cudaStreamSynchronize(s));
            CHECK_CU(cuMemUnmap(base + (CUdeviceptr)(NCHUNK - TAIL) * gran, TAIL * gran));
            for (int c = NCHUNK - TAIL; c < NCHUNK; c++)
                CHECK_CU(cuMemRelease(handle[c]));
            words = head;
        } else if (it == grow_at) { /* the segment grows again */
            map_chunks(NCHUNK - TAIL, NCHUNK);
            CHECK(init_chunks_launch(DIM3(64), DIM3(256), s, w + head, all - head, (uint32_t)it));
            words = all;
        }
        CHECK(sparse_step_launch(DIM3(64), DIM3(256), s, w, words, (uint32_t)it * 1103515245u));
        CHECK(sparse_loss_launch(DIM3(1), DIM3(1), s, w, words, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x mapped %zu MiB\n", it, *loss_h, words * sizeof(uint32_t) >> 20);
        fid_end_iteration(&o, it);
    }

    /* Chunk by chunk: the double refuses a copy that spans two mappings
     * (CUDA does not). */
    uint64_t h = FID_HASH_INIT;
    for (int c = 0; c < NCHUNK; c++)
        h = fid_hash_device(h, (const char *)w + (size_t)c * gran, gran);
    printf("digest %016llx\n", (unsigned long long)h);
    CHECK_CU(cuMemUnmap(base, NCHUNK * gran));
    for (int c = 0; c < NCHUNK; c++)
        CHECK_CU(cuMemRelease(handle[c]));
    CHECK_CU(cuMemAddressFree(base, RESERVE * gran));
    return 0;
}
