/*
 * fid_memset: a gradient buffer cleared with a synchronous cudaMemset
 * every iteration (which the runtime makes cuMemsetD8_v2), then filled by
 * the step and folded into the weights, the loss read back, as a trainer
 * that zeroes its gradients that way does.  With --memset-from J the
 * buffer is cleared so only from iteration J on (before, a kernel clears
 * it).  With --callback-from J, from iteration J on a stream callback
 * (cuStreamAddCallback, the older form of a host function) counts the
 * iterations into host state, as a progress hook does.
 *
 * libckpt follows cuMemsetD8_v2, and does not follow cuStreamAddCallback
 * (docs/entry-points.md): a restore of a snapshot from the first callback
 * on must be refused, naming the entry point, and one from before it must
 * come back exactly.  Run by tests/scenarios/entrypoints.bats; the options
 * are fid.h's, --memset-from J (default 1) and --callback-from J (default:
 * never).
 */
#include "fid.h"

#define WORDS 4096

KERNEL(clear, (uint32_t *, g), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] = 0;
}

KERNEL(grad, (const uint32_t *, w), (uint32_t *, g), (size_t, n), (uint32_t, seed))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        g[i] += fid_mix(w[i] ^ seed);
}

KERNEL(apply, (uint32_t *, w), (const uint32_t *, g), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] = fid_mix(w[i] + g[i]);
}

static unsigned callbacks;

static void counted(CUstream s, CUresult status, void *data)
{
    (void)s;
    (void)data;
    if (status == CUDA_SUCCESS)
        callbacks++;
}

int main(int argc, char **argv)
{
    /* --memset-from J and --callback-from J are ours; the rest goes to fid_parse. */
    int memset_from = 1, callback_from = 0, n = 0;
    char **rest = (char **)calloc((size_t)argc + 1, sizeof(*rest));
    REQUIRE(rest != NULL);
    for (int i = 0; i < argc; i++) {
        if (i > 0 && strcmp(argv[i], "--memset-from") == 0 && i + 1 < argc)
            memset_from = atoi(argv[++i]);
        else if (i > 0 && strcmp(argv[i], "--callback-from") == 0 && i + 1 < argc)
            callback_from = atoi(argv[++i]);
        else
            rest[n++] = argv[i];
    }
    struct fid_opts o;
    fid_parse(n, rest, &o, "fid_memset");
    REQUIRE(memset_from >= 1);

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *g, *loss_dev, *loss_host;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&g, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&loss_dev, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_host, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    CHECK(cudaStreamSynchronize(s));

    uint64_t seen = FID_HASH_INIT;
    uint32_t prev = 0;
    for (int it = 1; it <= o.iters; it++) {
        if (it >= memset_from) {
            /* The legacy stream: ordered before s's work by the sync. */
            CHECK(cudaMemset(g, 0, WORDS * sizeof(uint32_t)));
            CHECK(cudaDeviceSynchronize());
        } else {
            CHECK(clear_launch(DIM3(16), DIM3(256), s, g, WORDS));
        }
        CHECK(grad_launch(DIM3(16), DIM3(256), s, w, g, WORDS, (uint32_t)it * 2654435761u + prev));
        CHECK(apply_launch(DIM3(16), DIM3(256), s, w, g, WORDS));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, loss_dev));
        CHECK(cudaMemcpyAsync(loss_host, loss_dev, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        if (callback_from && it >= callback_from)
            CHECK_CU(cuStreamAddCallback((CUstream)s, counted, NULL, 0));
        CHECK(cudaStreamSynchronize(s));
        prev = *loss_host;
        seen = fid_hash_u64(seen, prev + callbacks);
        printf("iter %d loss 0x%08x callbacks %u\n", it, prev, callbacks);
        fid_end_iteration(&o, it);
    }

    uint64_t h = fid_hash_u64(FID_HASH_INIT, seen);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    free(rest);
    return 0;
}
