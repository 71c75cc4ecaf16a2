/*
 * fid_watchdog: a watchdog thread that polls the events of the training
 * thread's work on a timer, as PyTorch's ProcessGroupNCCL watchdog does
 * (every 100 ms it asks cudaEventQuery of each work in flight and retires
 * the ones that are done).  How often it asks depends on the clock, not
 * on the program: a replay, with the device work suppressed, runs far
 * faster than the recorded run, and the watchdog asks a different number
 * of times.  What it learns stays its own (which works it retired, and
 * when), so the training thread's state never depends on it.
 *
 * The training thread queues each iteration's work on its stream, records
 * the work's event (one of a ring of events, reused once the watchdog has
 * retired the work that held it, as the program waits for it) and hands
 * it to the watchdog; at the end it waits until the watchdog has retired
 * every work and prints the count, which is the same on every run.
 *
 * With FID_WATCHDOG_ALLOCS_AT=J the watchdog, having only polled, makes a
 * scratch allocation at iteration J (the training thread waits for it), as
 * a poller that grows a buffer would: from then on a replay could not make
 * the same choice, and the snapshots cannot be restored, for that reason.
 */
#include <pthread.h>

#include "fid.h"

#define WORDS 16384
#define RING 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static cudaEvent_t ring[RING];
static int queued, retired; /* works handed over, works seen done (in order) */
static int polled;          /* the watchdog's loops that asked at least once */
static int alloc_at, allocated, stop;

static void sleep_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void *watchdog(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!stop || retired < queued) {
        /* The newest work stays on the list until the next one comes:
         * asked about on every tick, as often as the clock says. */
        if (retired == queued && queued > 0) {
            cudaEvent_t ev = ring[(queued - 1) % RING];
            pthread_mutex_unlock(&lock);
            CHECK(cudaEventQuery(ev));
            pthread_mutex_lock(&lock);
        }
        /* Ask about the oldest works in flight, as many as are done. */
        while (retired < queued) {
            cudaEvent_t ev = ring[retired % RING];
            pthread_mutex_unlock(&lock);
            cudaError_t e = cudaEventQuery(ev);
            pthread_mutex_lock(&lock);
            polled = 1;
            if (e == cudaErrorNotReady)
                break;
            CHECK(e);
            retired++;
            pthread_cond_broadcast(&changed);
        }
        if (alloc_at && queued >= alloc_at && polled && !allocated) {
            pthread_mutex_unlock(&lock);
            void *p = NULL;
            CHECK(cudaMalloc(&p, 1 << 16));
            CHECK(cudaFree(p));
            pthread_mutex_lock(&lock);
            allocated = 1;
            pthread_cond_broadcast(&changed);
        }
        pthread_mutex_unlock(&lock);
        sleep_ms(1);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv)
{
    struct fid_opts o;
    fid_parse(argc, argv, &o, "fid_watchdog");
    const char *at = getenv("FID_WATCHDOG_ALLOCS_AT");
    alloc_at = at ? atoi(at) : 0;

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *w, *dloss, loss;
    CHECK(cudaMalloc((void **)&w, WORDS * sizeof(uint32_t)));
    CHECK(cudaMalloc((void **)&dloss, sizeof(uint32_t)));
    for (int i = 0; i < RING; i++)
        CHECK(cudaEventCreateWithFlags(&ring[i], cudaEventDisableTiming));
    CHECK(cudaMemsetAsync(w, 0, WORDS * sizeof(uint32_t), s));
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, watchdog, NULL) == 0);

    for (int it = 1; it <= o.iters; it++) {
        /* The event of the work RING back is free once it was retired. */
        pthread_mutex_lock(&lock);
        while (queued - retired >= RING)
            pthread_cond_wait(&changed, &lock);
        pthread_mutex_unlock(&lock);
        for (int k = 0; k < 4; k++)
            CHECK(fid_step_launch(DIM3(16), DIM3(256), s, w, WORDS, (uint32_t)(it * 4 + k) * 2654435761u));
        CHECK(cudaEventRecord(ring[(it - 1) % RING], s));
        pthread_mutex_lock(&lock);
        REQUIRE(queued == it - 1);
        queued = it;
        pthread_cond_broadcast(&changed);
        while (alloc_at == it && !allocated)
            pthread_cond_wait(&changed, &lock);
        pthread_mutex_unlock(&lock);
        CHECK(fid_loss_launch(DIM3(1), DIM3(1), s, w, WORDS, dloss));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaMemcpy(&loss, dloss, sizeof(loss), cudaMemcpyDeviceToHost));
        printf("iter %d loss 0x%08x\n", it, loss);
        fid_end_iteration(&o, it);
    }
    pthread_mutex_lock(&lock);
    stop = 1;
    pthread_mutex_unlock(&lock);
    REQUIRE(pthread_join(t, NULL) == 0);

    printf("retired %d\n", retired);
    uint64_t h = fid_hash_device(FID_HASH_INIT, w, WORDS * sizeof(uint32_t));
    printf("digest %016llx\n", (unsigned long long)h);
    return 0;
}
