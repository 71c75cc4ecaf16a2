/*
 * fid_hostfn: host functions (cudaLaunchHostFunc) queued after an async
 * device-to-host copy, which read the copied bytes on the stream's own
 * time and accumulate them in host state, as callback-driven loggers and
 * pipelines do (TensorFlow's stream-executor host callbacks, PyTorch's
 * CUDA-graph-safe metric hooks, cuDF's spill callbacks).  The stream
 * orders the callback after the copy, so the callback sees this
 * iteration's bytes; the host reads the accumulator after the loss sync
 * and feeds it into the next iteration's kernel.
 *
 * The iteration line prints the accumulator: a replay that suppresses the
 * copy but runs the callback at once, or delivers the bytes only at the
 * next synchronising call, accumulates other values.
 */
#include "fid.h"

#define WORDS 4096
#define STAT_WORDS 4

static struct {
    const uint32_t *bytes; /* the pinned buffer the copy fills */
    uint32_t acc;
    uint64_t history;
    int calls;
} host; /* written only by the callbacks, read after a sync */

static void on_stats(void *arg)
{
    (void)arg;
    for (int k = 0; k < STAT_WORDS; k++) {
        host.acc = host.acc * 31u + host.bytes[k];
        host.history = fid_hash_u64(host.history, host.bytes[k]);
    }
    host.calls++;
}

KERNEL(stats, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0)
        for (int k = 0; k < STAT_WORDS; k++) {
            uint32_t h = (uint32_t)k * 0x27d4eb2fu;
            for (size_t i = (size_t)k; i < n; i += STAT_WORDS)
                h = fid_mix(h + w[i]);
            out[k] = h;
        }
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_hostfn");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dstats, *dloss, *stats_h, *loss_h;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dstats, STAT_WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&stats_h, STAT_WORDS * sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    host.bytes = stats_h;
    host.history = FID_HASH_INIT;

    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it + host.acc));
        CHECK(stats_launch(DIM3(1), DIM3(1), s, w, WORDS, dstats));
        CHECK(cudaMemcpyAsync(stats_h, dstats, STAT_WORDS * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaLaunchHostFunc(s, on_stats, NULL));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x acc 0x%08x calls %d\n", it, *loss_h, host.acc, host.calls);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, host.history);
    h = fid_hash_u64(h, host.acc);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
