/*
 * fid_graphmem: a CUDA graph captured once after warm-up, whose capture
 * allocates with cudaMallocAsync, as PyTorch's cudaMallocAsync backend
 * does under CUDA graphs: the allocations are the graph's memory nodes.
 * A scratch buffer is allocated and freed inside the graph; the loss is
 * written into an output the graph allocates and leaves unfreed.  The
 * graph is instantiated with cudaGraphInstantiateFlagAutoFreeOnLaunch (as
 * torch.cuda.CUDAGraph does), so each launch frees the last one's output.
 * Every iteration copies the output into a buffer of its own and back (unified
 * cudaMemcpyDefault copies), reads the loss back from the output, and frees
 * it before the iteration's sync, except, with FID_KEEP_OUTPUT=1, in even
 * iterations, where it stays live past the iteration's end for the next
 * launch to free.  FID_INSTANTIATE=params instantiates with the driver's
 * cuGraphInstantiateWithParams instead.
 *
 * Prints "state N bytes" before its digest: what a snapshot must copy.
 *
 * Graph memory is backed only from a launch to its free: copying it
 * outside that window faults, and an iteration whose end has it live
 * cannot be restored by replay, which does not run graph launches.
 */
#include "fid.h"

#define WORDS 4096
#define BATCH 64
#define WARMUP 3

KERNEL(spread, (uint32_t *, scratch), (size_t, n), (const uint32_t *, x))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        scratch[i] = fid_mix(x[i % BATCH] + (uint32_t)i);
}

KERNEL(update, (uint32_t *, w), (size_t, n), (const uint32_t *, scratch))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = fid_mix(w[i] ^ scratch[i]);
}

static cudaStream_t s;
static uint32_t *w, *x, *echo;

/* One iteration's device work, after the batch has been copied into x;
 * the loss goes into *out, which it allocates. */
static void body(uint32_t **out)
{
    uint32_t *scratch;
    CHECK(cudaMallocAsync((void **)&scratch, WORDS * sizeof(uint32_t), s));
    CHECK(cudaMallocAsync((void **)out, sizeof(uint32_t), s));
    CHECK(spread_launch(DIM3(16), DIM3(256), s, scratch, WORDS, x));
    CHECK(update_launch(DIM3(16), DIM3(256), s, w, WORDS, scratch));
    CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, 0x27d4eb2fu));
    CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, *out));
    CHECK(cudaFreeAsync(scratch, s));
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_graphmem");
    const char *keep_env = getenv("FID_KEEP_OUTPUT");
    int keep = keep_env && strcmp(keep_env, "1") == 0;
    const char *inst_env = getenv("FID_INSTANTIATE");
    int with_params = inst_env && strcmp(inst_env, "params") == 0;

    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *x_h, *loss_h, *out = NULL;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&x, BATCH * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&echo, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&x_h, BATCH * sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    cudaGraphExec_t exec = NULL;
    for (int it = 1; it <= o.iters; it++) {
        for (int i = 0; i < BATCH; i++) /* the data loader's batch */
            x_h[i] = fid_mix((uint32_t)(it * BATCH + i));
        CHECK(cudaMemcpyAsync(x, x_h, BATCH * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
        int graphed = it > WARMUP;
        if (!graphed) {
            body(&out);
        } else {
            if (!exec) {
                cudaGraph_t g;
                CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                body(&out);
                CHECK(cudaStreamEndCapture(s, &g));
                if (with_params) { /* the driver's CUDA 12 form */
                    CUDA_GRAPH_INSTANTIATE_PARAMS p = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH};
                    CHECK_CU(cuGraphInstantiateWithParams((CUgraphExec *)&exec, (CUgraph)g, &p));
                    if (p.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS)
                        CHECK_CU(CUDA_ERROR_UNKNOWN);
                } else {
                    CHECK(cudaGraphInstantiate(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
                }
                CHECK(cudaGraphDestroy(g));
            }
            CHECK(cudaGraphLaunch(exec, s));
            /* Unified copies out of the output and back into it: a layer
             * that took graph memory for host memory would read it from
             * the CPU, which faults (the double, as a GPU, forbids it). */
            CHECK(cudaMemcpyAsync(echo, out, sizeof(uint32_t), cudaMemcpyDefault, s));
            CHECK(cudaMemcpyAsync(out, echo, sizeof(uint32_t), cudaMemcpyDefault, s));
        }
        CHECK(cudaMemcpyAsync(loss_h, out, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        int kept = graphed && keep && it % 2 == 0;
        if (!kept)
            CHECK(cudaFreeAsync(out, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x %s%s\n", it, *loss_h, graphed ? "graph" : "eager", kept ? " kept" : "");
        fid_end_iteration(&o, it);
    }

    /* What a snapshot must copy: the weights and the batch; nothing of the graph's. */
    printf("state %zu bytes\n", (WORDS + BATCH + 1) * sizeof(uint32_t));
    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    CHECK(cudaGraphExecDestroy(exec));
    return 0;
}
