/*
 * The verifier thread of verifier.h: a queue of chunk numbers under one
 * mutex, filled by the receiving thread and emptied by this one.  The
 * slot's bytes are read outside the lock; the first failure stops the
 * thread, since one bad chunk already decides the replica.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verifier.h"

struct ckpt_verifier {
    const struct ckpt_store *st;
    struct ckpt_store_tx *tx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t more;
    uint64_t *queue, n, next;  /* chunks queued, and the next to verify */
    uint8_t *queued;           /* byte c: chunk c was queued */
    int stop, drain, rc;
    double busy_s;
    char why[256];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *work(void *arg)
{
    struct ckpt_verifier *v = arg;
    char why[256];

    pthread_mutex_lock(&v->lock);
    for (;;) {
        while (v->next == v->n && !v->stop)
            pthread_cond_wait(&v->more, &v->lock);
        if (v->rc || v->next == v->n || (v->stop && !v->drain))
            break;
        uint64_t c = v->queue[v->next];
        pthread_mutex_unlock(&v->lock);
        double t0 = now_s();
        int rc = ckpt_store_verify(v->st, v->tx, c, why, sizeof(why));
        double t1 = now_s();
        pthread_mutex_lock(&v->lock);
        v->busy_s += t1 - t0;
        v->next++;
        if (rc < 0) {
            v->rc = rc;
            snprintf(v->why, sizeof(v->why), "%s", why);
        }
    }
    pthread_mutex_unlock(&v->lock);
    return NULL;
}

int ckpt_verifier_start(struct ckpt_verifier **out, const struct ckpt_store *st, struct ckpt_store_tx *tx)
{
    struct ckpt_verifier *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    v->st = st;
    v->tx = tx;
    v->queue = malloc((tx->h.nchunks + 1) * sizeof(*v->queue));
    v->queued = calloc(1, tx->h.nchunks + 1);
    int rc = v->queue && v->queued ? 0 : ENOMEM;
    if (!rc && !(rc = pthread_mutex_init(&v->lock, NULL))) {
        if (!(rc = pthread_cond_init(&v->more, NULL))) {
            if (!(rc = pthread_create(&v->thread, NULL, work, v))) {
                *out = v;
                return 0;
            }
            pthread_cond_destroy(&v->more);
        }
        pthread_mutex_destroy(&v->lock);
    }
    free(v->queue);
    free(v->queued);
    free(v);
    return -rc;
}

void ckpt_verifier_add(struct ckpt_verifier *v, uint64_t c)
{
    if (c >= v->tx->h.nchunks || v->queued[c])
        return;
    v->queued[c] = 1;
    pthread_mutex_lock(&v->lock);
    v->queue[v->n++] = c;
    pthread_cond_signal(&v->more);
    pthread_mutex_unlock(&v->lock);
}

int ckpt_verifier_failed(struct ckpt_verifier *v, char *why, size_t whylen)
{
    pthread_mutex_lock(&v->lock);
    int rc = v->rc;
    if (rc)
        snprintf(why, whylen, "%s", v->why);
    pthread_mutex_unlock(&v->lock);
    return rc;
}

int ckpt_verifier_end(struct ckpt_verifier *v, int drain, double *busy_s, char *why, size_t whylen)
{
    pthread_mutex_lock(&v->lock);
    v->stop = 1;
    v->drain = drain;
    pthread_cond_signal(&v->more);
    pthread_mutex_unlock(&v->lock);
    pthread_join(v->thread, NULL);
    int rc = v->rc;
    if (rc)
        snprintf(why, whylen, "%s", v->why);
    if (busy_s)
        *busy_s = v->busy_s;
    pthread_cond_destroy(&v->more);
    pthread_mutex_destroy(&v->lock);
    free(v->queue);
    free(v->queued);
    free(v);
    return rc;
}
