/*
 * fid_lateret: a copy thread whose asynchronous copies to the host return
 * after the training thread has ended the iteration, as a metrics or
 * prefetch thread's do when the driver call is held up (its own locks, a
 * preemption) while the training loop goes on.  Each iteration the
 * training thread hands the iteration's summary to the copier, waits until
 * the copier is about to make its call, does 5 ms of host work (a data
 * loader's) and ends the iteration; the copier copies the summary into a
 * pinned buffer, synchronises its stream and folds the bytes into a
 * statistic.  With the double's FAKEGPU_D2H_RETURN_US past 5 ms, the copy
 * is done when the call returns, and that moment comes after the
 * iteration's end in the recorded run.  A standby replaying the copier's
 * call before its cut has passed that iteration's end must wait for the
 * record of the copy's bytes, not take it as absent: its next sync meets
 * that record otherwise.
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
static int handed;  /* the newest iteration handed to the copier */
static int calling; /* the iteration whose copy the copier is about to make */
static int done;    /* the newest iteration the copier has folded in */
static int stop;
static uint32_t *stat_at; /* the statistic as of each iteration folded in */
static uint32_t *summary[DEPTH]; /* device */
static cudaEvent_t summarised[DEPTH];

static void *copier(void *arg)
{
    (void)arg;
    cudaStream_t cs;
    uint32_t *buf;
    CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    CHECK(cudaMallocHost((void **)&buf, SUMMARY * sizeof(uint32_t)));
    pthread_mutex_lock(&lock);
    for (;;) {
        while (handed == done && !stop)
            pthread_cond_wait(&changed, &lock);
        if (handed == done && stop)
            break;
        int it = done + 1;
        calling = it;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        CHECK(cudaStreamWaitEvent(cs, summarised[it % DEPTH], 0));
        CHECK(cudaMemcpyAsync(buf, summary[it % DEPTH], SUMMARY * sizeof(uint32_t), cudaMemcpyDeviceToHost, cs));
        CHECK(cudaStreamSynchronize(cs));
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
    CHECK(cudaStreamDestroy(cs));
    return NULL;
}

/* The statistic as of iteration `it` (0 before the first), once folded in. */
static uint32_t wait_done(int it)
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
    fid_parse(argc, argv, &o, "fid_lateret");

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
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
    REQUIRE(pthread_create(&t, NULL, copier, NULL) == 0);

    for (int it = 1; it <= o.iters; it++) {
        CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)it * 2654435761u));
        uint32_t folded = wait_done(it - DEPTH); /* this iteration's buffer is free again */
        CHECK(summarise_launch(DIM3(1), DIM3(1), s, w, WORDS, summary[it % DEPTH]));
        CHECK(cudaEventRecord(summarised[it % DEPTH], s));
        pthread_mutex_lock(&lock);
        handed = it;
        pthread_cond_broadcast(&changed);
        while (calling < it)
            pthread_cond_wait(&changed, &lock);
        pthread_mutex_unlock(&lock);
        struct timespec work = {.tv_nsec = 5 * 1000 * 1000}; /* the loader's host work */
        nanosleep(&work, NULL);
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(uint32_t), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x folded 0x%08x\n", it, loss, folded);
        fid_end_iteration(&o, it);
    }
    uint32_t final = wait_done(o.iters);
    pthread_mutex_lock(&lock);
    stop = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    REQUIRE(pthread_join(t, NULL) == 0);

    uint64_t h = fid_hash_u64(FID_HASH_INIT, final);
    h = fid_hash_device(h, w, WORDS * sizeof(uint32_t));
    printf("folded 0x%08x\ndigest %016llx\n", final, (unsigned long long)h);
    return 0;
}
