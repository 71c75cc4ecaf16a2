/*
 * A standby's host functions (cuLaunchHostFunc on its virtual streams):
 * one thread of libckpt's runs them in the order they were queued.  Device
 * work is suppressed while it follows, so a host function waits only for
 * the host functions queued before it, and that order already has every
 * wait between streams (virtual.c records, for each stream and event, the
 * position a sync or a query must wait for).
 */
#include <pthread.h>
#include <stdlib.h>

#include "interpose.h"

struct item {
    struct item *next;
    CUhostFn fn;
    void *data;
};
static pthread_mutex_t elock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t echanged = PTHREAD_COND_INITIALIZER;
static struct item *head, *tail;
static uint64_t queued, ran;
static bool engine_started;

static void *engine(void *unused)
{
    (void)unused;
    ckpt_thread_internal = true;
    pthread_mutex_lock(&elock);
    for (;;) {
        while (!head)
            pthread_cond_wait(&echanged, &elock);
        struct item *it = head;
        pthread_mutex_unlock(&elock);
        it->fn(it->data);
        pthread_mutex_lock(&elock);
        head = it->next;
        if (!head)
            tail = NULL;
        ran++;
        pthread_cond_broadcast(&echanged);
        free(it);
    }
    return NULL;
}

/* Queues fn: its position, or 0 when it cannot be queued. */
uint64_t ckpt_engine_queue(CUhostFn fn, void *data)
{
    struct item *it = malloc(sizeof(*it));
    if (!it)
        return 0;
    *it = (struct item){NULL, fn, data};
    pthread_mutex_lock(&elock);
    if (!engine_started) {
        pthread_t t;
        if (pthread_create(&t, NULL, engine, NULL) != 0) {
            pthread_mutex_unlock(&elock);
            free(it);
            return 0;
        }
        pthread_detach(t);
        engine_started = true;
    }
    if (tail)
        tail->next = it;
    else
        head = it;
    tail = it;
    uint64_t at = ++queued;
    pthread_cond_broadcast(&echanged);
    pthread_mutex_unlock(&elock);
    return at;
}

/* Until the host functions up to position at have run. */
void ckpt_engine_wait(uint64_t at)
{
    pthread_mutex_lock(&elock);
    while (ran < at)
        pthread_cond_wait(&echanged, &elock);
    pthread_mutex_unlock(&elock);
}

uint64_t ckpt_engine_queued(void)
{
    pthread_mutex_lock(&elock);
    uint64_t q = queued;
    pthread_mutex_unlock(&elock);
    return q;
}
