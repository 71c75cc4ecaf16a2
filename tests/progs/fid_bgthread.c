/*
 * fid_bgthread: a background metrics thread beside the training thread,
 * doing its own device-to-host copies on its own stream, as loggers and
 * EMA/metric trackers do (PyTorch Lightning's async checkpoint/metric
 * threads, torch.distributed.checkpoint's async staging, a C++ trainer's
 * telemetry thread).  The training thread hands each finished iteration to
 * the logger through a queue (mutex and condition variable); the logger
 * waits for the iteration's event on its stream, copies a summary of the
 * weights back, synchronises its stream and folds the bytes into a running
 * statistic.  Summaries are double-buffered, a bounded queue of two:
 * before the training thread overwrites a buffer it waits until the logger
 * is done with the iteration that used it, two iterations back, and
 * prints the statistic as of then, so every run prints the same; but the
 * logger's copy and sync of iteration N may come before or after the
 * training thread's loss sync of iteration N + 1, differently on each run.
 *
 * A replay must serve each thread what that thread read, in that thread's
 * order, and find the training loop's iterations in the training thread's
 * calls: the statistic printed from the logger's reads diverges otherwise.
 */
#include <pthread.h>

#include "fid.h"

#define WORDS 4096
#define SUMMARY 64
#define DEPTH 2 /* summary buffers */

KERNEL(summarise, (const uint32_t *, w), (size_t, n), (uint32_t *, out))
{
    if (KERNEL_INDEX == 0)
        for (int k = 0; k < SUMMARY; k++) {
            uint32_t h = (uint32_t)k;
            for (size_t i = (size_t)k; i < n; i += SUMMARY)
                h = fid_mix(h + w[i]);
            out[k] = h;
        }
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int handed;       /* the newest iteration handed to the logger (0: none) */
static int done;         /* the newest iteration the logger has folded in */
static int stop;
static uint32_t *stat_at; /* the logger's statistic as of each iteration it folded in */
static uint32_t *summary[DEPTH]; /* device */
static cudaEvent_t summarised[DEPTH];

static void *logger(void *arg)
{
    (void)arg;
    cudaStream_t ls;
    uint32_t *buf;
    CHECK(cudaStreamCreateWithFlags(&ls, cudaStreamNonBlocking));
    CHECK(cudaMallocHost((void **)&buf, SUMMARY * sizeof(uint32_t)));
    pthread_mutex_lock(&lock);
    for (;;) {
        while (handed == done && !stop)
            pthread_cond_wait(&changed, &lock);
        if (handed == done && stop)
            break;
        int it = done + 1;
        pthread_mutex_unlock(&lock);
        CHECK(cudaStreamWaitEvent(ls, summarised[it % DEPTH], 0));
        CHECK(cudaMemcpyAsync(buf, summary[it % DEPTH], SUMMARY * sizeof(uint32_t), cudaMemcpyDeviceToHost, ls));
        CHECK(cudaStreamSynchronize(ls));
        uint32_t s = stat_at[it - 1];
        for (int k = 0; k < SUMMARY; k++)
            s = fid_mix(s ^ buf[k]) + (uint32_t)it;
        pthread_mutex_lock(&lock);
        stat_at[it] = s;
        done = it;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    CHECK(cudaFreeHost(buf));
    CHECK(cudaStreamDestroy(ls));
    return NULL;
}

/* Waits until the logger has folded in iteration `it` (it may be further
 * on by then); the statistic as of `it`. */
static uint32_t wait_logged(int it)
{
    pthread_mutex_lock(&lock);
    while (done < it)
        pthread_cond_wait(&changed, &lock);
    uint32_t s = stat_at[it < 0 ? 0 : it];
    pthread_mutex_unlock(&lock);
    return s;
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_bgthread");

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s)); /* blocking: the loss's cudaMemcpy waits for it */
    uint32_t *w, *dloss, loss;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    for (int b = 0; b < DEPTH; b++) {
        CHECK(cudaEventCreateWithFlags(&summarised[b], cudaEventDisableTiming));
        CHECK(cudaMalloc((void **)&summary[b], SUMMARY * sizeof(uint32_t)));
    }
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    CHECK(cudaStreamSynchronize(s));
    stat_at = (uint32_t *)calloc((size_t)o.iters + 1, sizeof(*stat_at));
    REQUIRE(stat_at != NULL);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, logger, NULL) == 0);

    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 2654435761u));
        uint32_t logged = wait_logged(it - DEPTH); /* this iteration's buffer is free again */
        CHECK(summarise_launch(DIM3(1), DIM3(1), s, w, WORDS, summary[it % DEPTH]));
        CHECK(cudaEventRecord(summarised[it % DEPTH], s));
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x logged 0x%08x\n", it, loss, logged);
        pthread_mutex_lock(&lock);
        handed = it;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        fid_end_iteration(&o, it);
    }
    uint32_t final = wait_logged(o.iters);
    pthread_mutex_lock(&lock);
    stop = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    REQUIRE(pthread_join(t, NULL) == 0);

    uint64_t h = fid_hash_u64(FID_HASH_INIT, final);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("logged 0x%08x\ndigest %016llx\n", final, (unsigned long long)h);
    return 0;
}
