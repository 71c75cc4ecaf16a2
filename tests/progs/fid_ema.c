/*
 * fid_ema: a background thread keeps an exponential moving average of the
 * weights on the device, on a stream of its own, as EMA and SWA helpers
 * and async staging threads do.  Each iteration the training thread hands
 * the thread its iteration; the thread synchronises its stream (the
 * previous average is done), queues the next update behind the
 * iteration's event and says so; the training thread waits for that
 * before it ends the iteration.  So the thread's last call before a
 * boundary queues device work, with nothing it reads after it until the
 * next iteration: a replay must suppress that update, which the snapshot
 * already holds, and not run it again once the restore goes live.
 */
#include <pthread.h>

#include "fid.h"

#define WORDS 4096

KERNEL(ema_update, (uint32_t *, ema), (const uint32_t *, w), (size_t, n))
{
    for (size_t i = KERNEL_INDEX; i < n; i += KERNEL_STRIDE)
        ema[i] = fid_mix(ema[i] * 7u + w[i]);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int handed, queued, stop;
static uint32_t *w, *ema;
static cudaEvent_t stepped;

static void *averager(void *arg)
{
    (void)arg;
    cudaStream_t es;
    CHECK(cudaStreamCreateWithFlags(&es, cudaStreamNonBlocking));
    pthread_mutex_lock(&lock);
    for (;;) {
        while (handed == queued && !stop)
            pthread_cond_wait(&changed, &lock);
        if (handed == queued)
            break;
        pthread_mutex_unlock(&lock);
        CHECK(cudaStreamSynchronize(es));
        CHECK(cudaStreamWaitEvent(es, stepped, 0));
        CHECK(ema_update_launch(DIM3(8), DIM3(256), es, ema, w, WORDS));
        pthread_mutex_lock(&lock);
        queued++;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    CHECK(cudaStreamSynchronize(es));
    CHECK(cudaStreamDestroy(es));
    return NULL;
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_ema");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *dloss, loss;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&ema, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaEventCreateWithFlags(&stepped, cudaEventDisableTiming));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    CHECK(cudaMemsetAsync(ema, 0, WORDS * sizeof(uint32_t), s));
    CHECK(cudaStreamSynchronize(s));
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, averager, NULL) == 0);

    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(8), DIM3(256), s, w, WORDS, (uint32_t)it * 2654435761u));
        CHECK(cudaEventRecord(stepped, s));
        pthread_mutex_lock(&lock);
        handed = it;
        pthread_cond_broadcast(&changed);
        while (queued < it)
            pthread_cond_wait(&changed, &lock);
        pthread_mutex_unlock(&lock);
        /* The next step writes w: after the average has read it. */
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
        CHECK(cudaDeviceSynchronize());
    }
    pthread_mutex_lock(&lock);
    stop = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    REQUIRE(pthread_join(t, NULL) == 0);

    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    h = fid_hash_device(h, ema, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
