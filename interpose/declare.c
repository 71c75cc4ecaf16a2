/*
 * The program's own word on its device memory (include/libckpt.h): blocks
 * it declares free are left out of the snapshots (runtime/blocks.c), as
 * it declares them or in answer to each snapshot.  The iteration's thread
 * never waits for an answer longer than CKPT_DECLARE_WAIT, nor at all when
 * no thread is there to answer or the answering one cannot run: what it
 * does not get in time costs bytes (whole copies), never a stall.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "blocks.h"
#include "config.h"
#include "interpose.h"
#include "libckpt.h"
#include "log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked = PTHREAD_COND_INITIALIZER, answered = PTHREAD_COND_INITIALIZER,
                      ready = PTHREAD_COND_INITIALIZER;
static struct {
    uint64_t request;   /* the newest; 0 before the first */
    bool open;          /* the iteration's thread waits for its answer */
    bool answered;      /* it got one */
    bool answer_ok;     /* and it held */
    int listening;      /* threads in ckpt_declare_wait */
    bool source;        /* one ever listened */
    int (*blocked)(void);
    uint64_t requests, whole; /* snapshots that asked, and that went whole */
} Q;

__attribute__((visibility("default"))) int ckpt_declare_free(const void *device_ptr, size_t bytes)
{
    if (!ckpt_active)
        return 0;
    ckpt_log_once(CKPT_INFO, "the program declares which blocks of its allocations are free "
                  "(ckpt_declare_free): snapshots copy the rest");
    return ckpt_blocks_free((uint64_t)(uintptr_t)device_ptr, bytes);
}

__attribute__((visibility("default"))) int ckpt_declare_live(const void *device_ptr, size_t bytes)
{
    if (!ckpt_active)
        return 0;
    return ckpt_blocks_live((uint64_t)(uintptr_t)device_ptr, bytes);
}

__attribute__((visibility("default"))) int ckpt_declare_wait(uint64_t *request, int (*blocked)(void))
{
    pthread_mutex_lock(&lock);
    Q.source = true;
    Q.blocked = blocked;
    uint64_t seen = Q.request;
    Q.listening++;
    pthread_cond_broadcast(&ready);
    while (Q.request == seen || !Q.open)
        pthread_cond_wait(&asked, &lock);
    Q.listening--;
    *request = Q.request;
    pthread_mutex_unlock(&lock);
    return 0;
}

__attribute__((visibility("default"))) int ckpt_declare_answer(uint64_t request, const uint64_t *ranges, size_t n)
{
    pthread_mutex_lock(&lock);
    int rc = -ESTALE;
    if (Q.open && request == Q.request && !Q.answered) {
        rc = ckpt_blocks_replace(ranges, n);
        Q.answered = true;
        Q.answer_ok = rc == 0;
        pthread_cond_broadcast(&answered);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

bool ckpt_declare_refresh(uint64_t iter, double *waited_ms)
{
    *waited_ms = 0;
    pthread_mutex_lock(&lock);
    if (!Q.source) {
        pthread_mutex_unlock(&lock);
        return true; /* the program's own declarations, if any, hold */
    }
    if (!Q.requests++)
        ckpt_log(CKPT_INFO, "the program answers at each snapshot which blocks of its allocations are free: "
                 "snapshots copy the rest");
    const char *why = Q.blocked && Q.blocked() ? "this thread holds what the answer needs" : NULL;
    struct timespec t0, deadline;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_REALTIME, &deadline); /* the condition variables' clock */
    double wait = ckpt_cfg_seconds(CFG_DECLARE_WAIT);
    long ns = deadline.tv_nsec + (long)((wait - (long)wait) * 1e9);
    deadline = (struct timespec){deadline.tv_sec + (time_t)wait + ns / 1000000000L, ns % 1000000000L};
    /* The answering thread may be on its way back from its last answer. */
    while (!why && !Q.listening && pthread_cond_timedwait(&ready, &lock, &deadline) == 0)
        ;
    if (!why && !Q.listening)
        why = "no thread of the program is waiting to answer";
    if (!why) {
        Q.request++;
        Q.open = true;
        Q.answered = Q.answer_ok = false;
        pthread_cond_broadcast(&asked);
        while (!Q.answered && pthread_cond_timedwait(&answered, &lock, &deadline) == 0)
            ;
        Q.open = false;
        if (!Q.answered)
            why = "no answer came in time (CKPT_DECLARE_WAIT)";
        else if (!Q.answer_ok)
            why = "its answer could not be taken (a bad range, or no memory)";
    }
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *waited_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    int level = why && !Q.whole ? CKPT_INFO : CKPT_DEBUG;
    Q.whole += why != NULL;
    pthread_mutex_unlock(&lock);
    if (why)
        ckpt_log(level, "iteration %llu: the program was asked which blocks are free, but %s; this snapshot "
                 "copies whole allocations", (unsigned long long)iter, why);
    return why == NULL;
}

void ckpt_declare_unused(bool segments)
{
    static bool said;
    if (said || !segments || ckpt_blocks_any())
        return;
    said = true; /* the snapshot lock serialises the callers */
    pthread_mutex_lock(&lock);
    bool source = Q.source;
    pthread_mutex_unlock(&lock);
    void *c10 = source ? NULL : dlopen("libc10_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    if (!c10)
        return;
    dlclose(c10);
    ckpt_log(CKPT_INFO, "PyTorch's caching allocator is in this process and nothing declares its free blocks: "
             "snapshots copy its segments whole, cache and all (ckpt-resume puts a helper on PYTHONPATH that "
             "declares them, unless CKPT_TORCH_HELPER=0)");
}

void ckpt_declare_counts(uint64_t *requests, uint64_t *whole)
{
    pthread_mutex_lock(&lock);
    *requests = Q.requests;
    *whole = Q.whole;
    pthread_mutex_unlock(&lock);
}
