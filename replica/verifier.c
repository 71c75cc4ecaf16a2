/*
 * The verifier thread of verifier.h.  Two kinds of work, under one mutex:
 * chunks filled from held replicas, queued whole; and the chunks the
 * sender writes, summed piece by piece in data-area order as the landed
 * watermark passes them (a streaming XXH3 over the chunk), so that each
 * piece is read while it is still in cache.  The slot's bytes are read
 * outside the lock; the first failure stops the thread, since one bad
 * chunk already decides the replica.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sum.h"
#include "verifier.h"
#include "util.h"

struct ckpt_verifier {
    const struct ckpt_store *st;
    struct ckpt_store_tx *tx;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t more;
    uint64_t *queue, n, next;  /* held chunks queued, and the next to verify */
    uint8_t *queued;           /* byte c: chunk c was queued */
    uint64_t landed;           /* the written chunks' bytes below it are in place */
    uint64_t cur, pos;         /* the written chunk being summed, and its bytes summed */
    struct ckpt_sum *sum;      /* ... so far */
    int stop, drain, rc;
    double busy_s;
    char why[256];
};

static int needed(const struct ckpt_store_tx *tx, uint64_t c)
{
    return tx->need[c / 8] & (1u << (c % 8));
}

/* Bytes of the written chunk cur that landed and are not summed yet (0:
 * none now); moves cur to the next chunk the sender writes. */
static uint64_t landed_bytes(struct ckpt_verifier *v)
{
    const struct ckpt_header *h = &v->tx->h;
    while (v->cur < h->nchunks && !needed(v->tx, v->cur))
        v->cur++;
    if (v->cur >= h->nchunks)
        return 0;
    uint64_t start = v->cur * h->chunk_bytes, len = h->data_bytes - start < h->chunk_bytes ? h->data_bytes - start
                                                                                          : h->chunk_bytes;
    uint64_t in = v->landed > start ? v->landed - start : 0;
    if (in > len)
        in = len;
    return in > v->pos ? in - v->pos : 0;
}

/* Sums n more bytes of chunk cur; checks it when they complete it. */
static int stream(struct ckpt_verifier *v, uint64_t n, char *why, size_t whylen)
{
    size_t len;
    uint64_t sum;
    const char *p = ckpt_store_chunk(v->st, v->tx, v->cur, &len, &sum);

    if (!v->pos)
        ckpt_replica_sum_reset(v->sum);
    ckpt_replica_sum_update(v->sum, p + v->pos, n);
    if ((v->pos += n) < len)
        return 0;
    if (ckpt_replica_sum_digest(v->sum) != sum) {
        snprintf(why, whylen, "chunk %llu (bytes %llu..) checksum mismatch", (unsigned long long)v->cur,
                 (unsigned long long)(v->cur * v->tx->h.chunk_bytes));
        return -EBADMSG;
    }
    v->tx->verified[v->cur++] = 1;
    v->pos = 0;
    return 0;
}

static void *work(void *arg)
{
    struct ckpt_verifier *v = arg;
    char why[256];

    pthread_mutex_lock(&v->lock);
    while (!v->rc && !(v->stop && !v->drain)) {
        int held = v->next < v->n;
        uint64_t n = held ? 0 : landed_bytes(v);
        if (!held && !n) {
            if (v->stop)
                break;
            pthread_cond_wait(&v->more, &v->lock);
            continue;
        }
        uint64_t c = held ? v->queue[v->next] : 0;
        pthread_mutex_unlock(&v->lock);
        double t0 = ckpt_now_s();
        int rc = held ? ckpt_store_verify(v->st, v->tx, c, why, sizeof(why)) : stream(v, n, why, sizeof(why));
        double t1 = ckpt_now_s();
        pthread_mutex_lock(&v->lock);
        v->busy_s += t1 - t0;
        v->next += held;
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
    v->sum = ckpt_replica_sum_new();
    int rc = v->queue && v->queued && v->sum ? 0 : ENOMEM;
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
    ckpt_replica_sum_free(v->sum);
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

void ckpt_verifier_landed(struct ckpt_verifier *v, uint64_t upto)
{
    pthread_mutex_lock(&v->lock);
    if (upto > v->landed) {
        v->landed = upto;
        pthread_cond_signal(&v->more);
    }
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
    ckpt_replica_sum_free(v->sum);
    free(v->queue);
    free(v->queued);
    free(v);
    return rc;
}
