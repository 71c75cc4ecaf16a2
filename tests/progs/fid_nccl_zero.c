/*
 * fid_nccl_zero: a library's own thread doing its own device work beside
 * training, as NCCL's proxy and service threads do (src/proxy.cpp,
 * transport/p2p.cc, net.cc: when a connection is set up, possibly long
 * after the communicator was made, they allocate buffers, zero them with
 * cudaMemsetAsync on a stream of their own and cudaStreamSynchronize it).
 * Here the program starts that thread itself (code inside libnccl cannot be
 * written here): at iteration 3 it begins to set up "connections", one
 * every few milliseconds, each a cudaStreamCreate'd stream (the first
 * time), a cudaMalloc, a cudaMemsetAsync and a cudaStreamSynchronize, with
 * no ordering against the training thread at all.  The training thread
 * allocates a temporary every iteration (stream-ordered, cudaMallocAsync/
 * cudaFreeAsync), so the two threads' allocations interleave differently
 * on each run.
 *
 * Nothing the training thread prints depends on the proxy, which is
 * joined before the digest (its buffers are zero, and counted in it).  A
 * replay must not take the proxy's syncs for iteration boundaries, nor
 * its allocations for the training thread's.
 */
#include <pthread.h>

#include "fid.h"

#define WORDS 4096
#define CONNECTIONS 8
#define CONN_BYTES (64 << 10)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static int started;
static unsigned char *conn[CONNECTIONS];

static void *proxy(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!started)
        pthread_cond_wait(&go, &lock);
    pthread_mutex_unlock(&lock);
    cudaStream_t ps;
    CHECK(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking));
    for (int c = 0; c < CONNECTIONS; c++) {
        size_t bytes = CONN_BYTES * (size_t)(c % 3 + 1);
        CHECK(cudaMalloc((void **)&conn[c], bytes));
        CHECK(cudaMemsetAsync(conn[c], 0, bytes, ps));
        CHECK(cudaStreamSynchronize(ps));
        fid_sleep_us(4000);
    }
    CHECK(cudaStreamDestroy(ps));
    return NULL;
}

KERNEL(nap, (int, us))
{
    if (KERNEL_INDEX == 0)
        fid_sleep_us(us);
}

KERNEL(mix_in, (uint32_t *, w), (const uint32_t *, tmp), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        w[i] ^= tmp[(i * 7) % n];
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_nccl_zero");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dloss, *loss_h;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMallocHost((void **)&loss_h, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, proxy, NULL) == 0);

    for (int it = 1; it <= o.iters; it++) {
        if (it == 3) { /* the first collective with a new peer: connect */
            pthread_mutex_lock(&lock);
            started = 1;
            pthread_cond_signal(&go);
            pthread_mutex_unlock(&lock);
        }
        uint32_t *tmp;
        CHECK(cudaMallocAsync((void **)&tmp, WORDS * sizeof(uint32_t), s));
        CHECK(cudaMemsetAsync(tmp, 0, WORDS * sizeof(uint32_t), s));
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, tmp, WORDS, (uint32_t)it));
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 3u));
        CHECK(mix_in_launch(DIM3(16), DIM3(256), s, w, tmp, WORDS));
        CHECK(cudaFreeAsync(tmp, s));
        CHECK(nap_launch(DIM3(1), DIM3(1), s, 1000)); /* the rest of the step's compute */
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpyAsync(loss_h, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        printf("iter %d loss 0x%08x\n", it, *loss_h);
        fid_end_iteration(&o, it);
    }
    if (o.iters < 3) {
        pthread_mutex_lock(&lock);
        started = 1;
        pthread_cond_signal(&go);
        pthread_mutex_unlock(&lock);
    }
    REQUIRE(pthread_join(t, NULL) == 0);

    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    for (int c = 0; c < CONNECTIONS; c++)
        h = fid_hash_device(h, conn[c], CONN_BYTES * (size_t)(c % 3 + 1));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
