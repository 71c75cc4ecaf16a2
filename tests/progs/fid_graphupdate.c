/*
 * fid_graphupdate: a graph captured again every iteration, with kernel
 * arguments that change (a learning-rate schedule passed by value, a
 * shape bucket), and applied to the one executable graph with
 * cuGraphExecUpdate, as JAX/XLA's and TensorRT's graph caches and
 * PyTorch's CUDA-graph trees do; when the update is refused (or the driver
 * has none), the executable graph is destroyed and the new capture
 * instantiated instead, CUDA's documented fallback.  The program reaches
 * cuGraphExecUpdate (the CUDA 12 form, with a result-info structure)
 * through cudaGetDriverEntryPointByVersion, as PyTorch reaches driver
 * functions, so it builds and runs on a double without it too; the line
 * says which way each iteration's graph was made.
 *
 * Each capture's arguments are taken at capture time, so the work a launch
 * does is that iteration's: a replay must capture what the recorded run
 * captured and update the executable graph as it did, or the graphs
 * launched after a restore train with other arguments, or not at all.
 */
#include "fid.h"

#define WORDS 4096

KERNEL(sgd, (uint32_t *, w), (size_t, n), (uint32_t, lr), (uint32_t, width))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = fid_mix(w[i] + lr * (uint32_t)(i % width + 1));
}

/* CUgraphExecUpdateResultInfo (cuda.h, CUDA 12): its layout, under a name of
 * our own. */
struct fid_update_info {
    int result; /* CUgraphExecUpdateResult */
    void *error_node, *error_from_node;
};
typedef CUresult (*exec_update_fn)(cudaGraphExec_t, cudaGraph_t, struct fid_update_info *);

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_graphupdate");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));

    exec_update_fn exec_update = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuGraphExecUpdate", (void **)&exec_update, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        exec_update = NULL;
    }
    cudaGraphExec_t exec = NULL;
    int updated = 0, reinstantiated = 0;
    for (int it = 1; it <= o.iters; it++) {
        uint32_t lr = 1000u - (uint32_t)it * 17u; /* the schedule */
        uint32_t width = 1u << (3 + it % 4);       /* the shape bucket */
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CHECK(sgd_launch(DIM3(16), DIM3(256), s, w, WORDS, lr, width));
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaStreamEndCapture(s, &g));
        const char *how = "instantiated";
        struct fid_update_info info;
        if (exec && exec_update && exec_update(exec, g, &info) == CUDA_SUCCESS) {
            how = "updated";
            updated++;
        } else if (exec) { /* no update: the fallback */
            CHECK(cudaGraphExecDestroy(exec));
            exec = NULL;
            reinstantiated++;
        }
        if (!exec)
            CHECK(cudaGraphInstantiate(&exec, g, 0));
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x lr %u width %u %s\n", it, *loss_h, lr, width, how);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    h = fid_hash_u64(fid_hash_u64(h, (uint64_t)updated), (uint64_t)reinstantiated);
    printf("digest %016llx\n", (unsigned long long)h);
    CHECK(cudaGraphExecDestroy(exec));
    return 0;
}
