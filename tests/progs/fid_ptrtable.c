/*
 * fid_ptrtable: device memory holding device pointers to other
 * allocations, read by a kernel every iteration, as multi-tensor kernels
 * do (PyTorch's _foreach_* / fused Adam through multi_tensor_apply, Apex's
 * multi_tensor_applier, DeepSpeed's fused optimizers, embedding tables of
 * row pointers, NCCL's device-side work descriptors): a table of {pointer,
 * length} for each parameter tensor lives on the device, the optimizer
 * kernel walks it.  Every seventh iteration one tensor is reallocated
 * (grown, as a resized embedding): a new cudaMalloc, a device-to-device
 * copy, the table entry rewritten by a kernel, the old one freed.
 *
 * The digest names, for each table entry, which of the host's tensors it
 * points at: after a restore that gives the allocations other addresses
 * than the recorded run's, the table's restored bytes point at nothing
 * (the kernel faults) or at the wrong tensor.
 */
#include "fid.h"

#define NT 6

struct entry {
    uint32_t *p;
    uint64_t n;
};

KERNEL(fused_step, (const struct entry *, table), (int, count), (uint32_t, seed))
{
    if (KERNEL_INDEX == 0)
        for (int t = 0; t < count; t++)
            for (uint64_t i = 0; i < table[t].n; i++)
                table[t].p[i] = fid_mix(table[t].p[i] + seed + (uint32_t)t);
}

KERNEL(fused_loss, (const struct entry *, table), (int, count), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t h = 0;
        for (int t = 0; t < count; t++)
            for (uint64_t i = 0; i < table[t].n; i += 3)
                h = fid_mix(h ^ table[t].p[i]);
        *out = h;
    }
}

KERNEL(set_entry, (struct entry *, table), (int, t), (uint32_t *, p), (uint64_t, n))
{
    if (KERNEL_INDEX == 0) {
        table[t].p = p;
        table[t].n = n;
    }
}

KERNEL(grow_fill, (uint32_t *, p), (uint64_t, from), (uint64_t, to), (uint32_t, seed))
{
    for (uint64_t i = from + KERNEL_INDEX; i < to; i += KERNEL_STRIDE)
        p[i] = fid_mix(seed + (uint32_t)i);
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_ptrtable");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    struct entry host[NT], *table;
    uint32_t *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&table, NT * sizeof(struct entry)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    for (int t = 0; t < NT; t++) {
        host[t].n = 1024 + 512 * (uint64_t)t;
        CHECK(cudaMalloc((void **)&host[t].p, host[t].n * sizeof(uint32_t)));
        CHECK(cudaMemsetAsync(host[t].p, 0, host[t].n * sizeof(uint32_t), s));
    }
    CHECK(cudaMemcpyAsync(table, host, sizeof(host), cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s)); /* `host` is pageable and changes below */

    for (int it = 1; it <= o.iters; it++) {
        if (it % 7 == 0) { /* grow one tensor */
            int t = (it / 7) % NT;
            uint64_t n = host[t].n + 256;
            uint32_t *p;
            CHECK(cudaMalloc((void **)&p, n * sizeof(uint32_t)));
            CHECK(cudaMemcpyAsync(p, host[t].p, host[t].n * sizeof(uint32_t), cudaMemcpyDeviceToDevice, s));
            CHECK(grow_fill_launch(DIM3(4), DIM3(256), s, p, host[t].n, n, (uint32_t)it));
            CHECK(set_entry_launch(DIM3(1), DIM3(1), s, table, t, p, n));
            CHECK(cudaFree(host[t].p)); /* waits for the copy, as CUDA's does */
            host[t].p = p;
            host[t].n = n;
        }
        CHECK(fused_step_launch(DIM3(1), DIM3(1), s, table, NT, (uint32_t)it * 69069u));
        CHECK(fused_loss_launch(DIM3(1), DIM3(1), s, table, NT, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x\n", it, *loss_h);
        fid_end_iteration(&o, it);
    }

    struct entry back[NT];
    CHECK(cudaMemcpy(back, table, sizeof(back), cudaMemcpyDeviceToHost));
    uint64_t h = FID_HASH_INIT;
    for (int t = 0; t < NT; t++) {
        int which = -1; /* which of the host's tensors entry t points at */
        for (int u = 0; u < NT; u++)
            if (back[t].p == host[u].p)
                which = u;
        printf("entry %d -> tensor %d, %llu words\n", t, which, (unsigned long long)back[t].n);
        h = fid_hash_u64(fid_hash_u64(h, (uint64_t)which), back[t].n);
        h = fid_hash_device(h, host[t].p, host[t].n * sizeof(uint32_t));
    }
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
