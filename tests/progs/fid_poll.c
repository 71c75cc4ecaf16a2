/*
 * fid_poll: an async device-to-host copy into pinned memory whose
 * completion the host finds by polling cudaEventQuery, with no
 * synchronising call, as input pipelines and non-blocking metric readers
 * do (PyTorch: x.to("cpu", non_blocking=True) followed by a loop on
 * torch.cuda.Event.query(); JAX's async dispatch with is_ready()).  The
 * bytes are visible to the host from the moment the query succeeds: the
 * host reads the copied "gradient norm" then, turns it into a clipping
 * factor, and passes that to the kernel it launches next, before the
 * iteration's loss sync.
 *
 * The iteration line prints the norm the host read: a replay that makes
 * the copied bytes visible only at the next synchronising call hands the
 * host stale bytes, and the clipping factors diverge.
 */
#include "fid.h"

#define WORDS 4096

KERNEL(norm, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0) {
        uint32_t s = 0;
        for (size_t i = 0; i < n; i++)
            s += w[i] >> 12;
        *out = s;
    }
}

KERNEL(clip, (uint32_t *, w), (size_t, n), (uint32_t, factor))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = w[i] / (factor + 1) + fid_mix(w[i]) % (factor + 7);
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_poll");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t copied;
    CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
    uint32_t *w, *dnorm, *dloss, *norm_h, *loss_h;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dnorm, sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&norm_h, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    uint64_t seen = FID_HASH_INIT;
    uint32_t factor = 3;
    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 977u + factor));
        CHECK(norm_launch(DIM3(1), DIM3(1), s, w, WORDS, dnorm));
        CHECK(cudaMemcpyAsync(norm_h, dnorm, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaEventRecord(copied, s));
        cudaError_t e;
        while ((e = cudaEventQuery(copied)) == cudaErrorNotReady)
            fid_sleep_us(10);
        CHECK(e);
        uint32_t norm = *norm_h; /* visible: the query said the copy ran */
        factor = norm % 61;
        seen = fid_hash_u64(seen, norm);
        CHECK(clip_launch(DIM3(16), DIM3(256), s, w, WORDS, factor));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x norm 0x%08x clip %u\n", it, *loss_h, norm, factor);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, seen);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
