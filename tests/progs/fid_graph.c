/*
 * fid_graph: a CUDA graph captured once, after warm-up iterations, and
 * launched every iteration, as torch.cuda.graphs.make_graphed_callables
 * and CUDA-graph training loops (MLPerf, Megatron's --cuda-graph) do: the
 * first iterations run eagerly (warm-up: allocator and cuBLAS settle),
 * then one iteration's kernels are captured with cudaStreamBeginCapture /
 * cudaStreamEndCapture into a graph, instantiated once, and every later
 * iteration copies its batch into the graph's static input buffer and
 * calls cudaGraphLaunch.  The graph also advances a device-resident step
 * counter (as the capturable optimizers' step tensors do), which nothing
 * but graph launches changes.
 *
 * A restore must bring back a graph that does what the recorded one did:
 * a replay that suppresses the kernels queued during the capture makes an
 * empty graph, and every iteration after the restore trains nothing.
 */
#include "fid.h"

#define WORDS 4096
#define BATCH 64
#define WARMUP 3

KERNEL(tick, (uint32_t *, step))
{
    if (KERNEL_INDEX == 0)
        *step += 1;
}

KERNEL(update, (uint32_t *, w), (size_t, n), (const uint32_t *, x), (const uint32_t *, step))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = fid_mix(w[i] + x[i % BATCH] * (*step | 1u));
}

static cudaStream_t s;
static uint32_t *w, *x, *step, *dloss;

/* One iteration's device work, after the batch has been copied into x. */
static void body(void)
{
    CHECK(tick_launch(DIM3(1), DIM3(1), s, step));
    CHECK(update_launch(DIM3(16), DIM3(256), s, w, WORDS, x, step));
    CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, 0x5bd1e995u));
    CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_graph");

    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *x_h, *loss_h;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&x, BATCH * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&step, sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&x_h, BATCH * sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    CHECK(cudaMemsetAsync(step, 0, sizeof(uint32_t), s));

    cudaGraphExec_t exec = NULL;
    for (int it = 1; it <= o.iters; it++) {
        for (int i = 0; i < BATCH; i++) /* the data loader's batch */
            x_h[i] = fid_mix((uint32_t)(it * BATCH + i));
        CHECK(cudaMemcpyAsync(x, x_h, BATCH * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
        if (it <= WARMUP) {
            body();
        } else {
            if (!exec) {
                cudaGraph_t g;
                CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                body();
                CHECK(cudaStreamEndCapture(s, &g));
                CHECK(cudaGraphInstantiate(&exec, g, 0));
                CHECK(cudaGraphDestroy(g));
            }
            CHECK(cudaGraphLaunch(exec, s));
        }
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x %s\n", it, *loss_h, it <= WARMUP ? "eager" : "graph");
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    h = fid_hash_device(h, step, sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    CHECK(cudaGraphExecDestroy(exec));
    return 0;
}
