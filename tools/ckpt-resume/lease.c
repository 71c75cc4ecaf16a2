/*
 * A node's etcd lease, renewed on a thread and a client of its own.
 *
 * A node is in the job while its lease lives, so a renewal must never
 * wait behind another request: a message put, or a read that waits the
 * whole request timeout on a member without a leader, once held a
 * renewal long enough for the lease to expire just as etcd regained its
 * quorum, and fenced a healthy node.  The keeper renews every third of
 * the TTL and tells the bridge two things, each change through a pipe
 * the bridge polls:
 *   paused  etcd answers but has no leader: no lease can be renewed, and
 *           none expires until a new leader gives every lease its TTL
 *           again.  Nobody is fenced for it.
 *   lapsed  the lease expired, or was not renewed for three quarters of
 *           the TTL (LEASE_FENCE_AT): the others take the node as lost
 *           only a quarter of the TTL and the kill's time after the
 *           whole TTL (lease_grace_s), so the node has stopped its
 *           ranks, with a margin, before anything goes on without it.
 * A renewal can hang on a member that does not answer, so a second thread
 * keeps the deadline: at three quarters of the TTL since the last renewal
 * it takes the lease as lapsed and calls the owner's fence at once (which
 * kills the ranks, bridge.c), whatever the keeper and the bridge are
 * waiting for.  Its clock is monotonic, as the keeper's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease.h"
#include "log.h"
#include "util.h"

#define RETRY_S 0.05 /* while a renewal is late, or etcd has no leader */
#define PROBE_S 0.25 /* between the deadline's questions to etcd */

struct lease {
    struct etcd *e, *probe;     /* the keeper's client; the deadline's */
    pthread_t thread, watch;
    pthread_mutex_t mu;
    pthread_cond_t cv, watch_cv; /* the keeper's; the deadline's */
    void (*fence)(void);
    int wake[2];            /* a byte each time paused or lapsed changes */
    double ttl_s;
    /* under mu */
    int64_t id;
    char held[300];         /* a key under the lease, "": none yet */
    double renewed, next;   /* the last renewal, the next attempt */
    double leaderless;      /* when etcd was last seen without a leader */
    double paused_since;
    bool paused, lapsed, stop;
    char why[512];
};

static void tell(struct lease *l)
{
    ssize_t rc = write(l->wake[1], "x", 1);
    (void)rc; /* a full pipe has a wake-up in it already */
}

/* The lease is lost to this node: its ranks stop now.  mu held. */
static void lapse(struct lease *l)
{
    l->lapsed = true;
    if (l->fence)
        l->fence();
    tell(l);
}

/* What the lease's time runs from: its last renewal, or the last moment
 * etcd had no leader (a new leader gives every lease its whole TTL). */
static double since(const struct lease *l)
{
    return l->renewed > l->leaderless ? l->renewed : l->leaderless;
}

/* Until @at (monotonic seconds) or a signal to watch_cv.  mu held. */
static void watch_until(struct lease *l, double at)
{
    struct timespec ts = { (time_t)at, (long)((at - (double)(time_t)at) * 1e9) };
    pthread_cond_timedwait(&l->watch_cv, &l->mu, &ts);
}

/* The deadline: once a renewal is late (half the TTL since the last), etcd
 * is asked, on a client of this thread's with short timeouts, whether it
 * has a leader; at three quarters of the TTL the lease lapses unless it
 * has none (then no lease expires, and nobody is fenced for it). */
static void *watch(void *arg)
{
    struct lease *l = arg;
    char why[256];
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        double now = ckpt_now_s(), from = since(l);
        double late = from + l->ttl_s / 2, at = from + l->ttl_s * LEASE_FENCE_AT;
        if (l->lapsed) {
            pthread_cond_wait(&l->watch_cv, &l->mu);
            continue;
        }
        if (now < late) {
            watch_until(l, late);
            continue;
        }
        pthread_mutex_unlock(&l->mu);
        int q = etcd_quorum(l->probe, why, sizeof(why));
        pthread_mutex_lock(&l->mu);
        now = ckpt_now_s();
        if (q == 0)
            l->leaderless = now;
        if (l->stop || l->lapsed || since(l) != from)
            continue; /* renewed, replaced, stopped or without a leader meanwhile */
        if (q != 0 && now >= at) {
            snprintf(l->why, sizeof(l->why), "this node has not renewed its etcd lease for %.1f s of its %.0f s (%s)",
                     now - from, l->ttl_s, q == 1 ? "etcd has a leader" : why);
            lapse(l);
        } else {
            watch_until(l, q != 0 && at < now + PROBE_S ? at : now + PROBE_S);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Does etcd still hold @key under lease @id?  Keys go with their lease,
 * so a key proves the lease lives.  1 yes, 0 no, -errno when etcd cannot
 * tell now. */
static int key_held(struct lease *l, const char *key, int64_t id)
{
    char why[512];
    struct etcd_kv *kv;
    size_t n;
    if (!*key)
        return 0;
    int rc = etcd_get(l->e, key, false, &kv, &n, NULL, why, sizeof(why));
    if (rc < 0)
        return rc;
    rc = n == 1 && kv[0].lease == id;
    etcd_kvs_free(kv, n);
    return rc;
}

/* One renewal: 0, 1 when etcd has no leader, or -errno with why. */
static int renew(struct lease *l, int64_t id, const char *key, bool paused, char *why, size_t whylen)
{
    char quorum[256];
    if (paused && etcd_quorum(l->e, quorum, sizeof(quorum)) == 0)
        return 1;
    int rc = etcd_keepalive(l->e, id, NULL, why, whylen);
    /* Right after etcd changed leaders a keepalive can answer that the
     * lease is gone while it lives (seen with etcd 3.4 after one member of
     * three was killed): believed only when the key is gone too. */
    if (rc == -ENOENT && key_held(l, key, id) != 0)
        rc = -EAGAIN;
    if (rc < 0 && rc != -ENOENT) {
        /* The request may have waited for a member that does not answer,
         * or for a quorum that came back meanwhile (with every lease given
         * its TTL again): asked again when etcd has a leader. */
        int q = etcd_quorum(l->e, quorum, sizeof(quorum));
        if (q == 0) {
            snprintf(why, whylen, "%s", quorum);
            return 1;
        }
        if (q == 1)
            rc = etcd_keepalive(l->e, id, NULL, why, whylen);
        if (rc == -ENOENT && key_held(l, key, id) != 0)
            rc = -EAGAIN;
    }
    return rc;
}

static void *keep(void *arg)
{
    struct lease *l = arg;
    char why[400], key[300];
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        double now = ckpt_now_s();
        if (l->lapsed || now < l->next) {
            if (l->lapsed) {
                pthread_cond_wait(&l->cv, &l->mu);
            } else {
                double at = l->next;
                struct timespec ts = { (time_t)at, (long)((at - (double)(time_t)at) * 1e9) };
                pthread_cond_timedwait(&l->cv, &l->mu, &ts);
            }
            continue;
        }
        int64_t id = l->id;
        bool paused = l->paused;
        snprintf(key, sizeof(key), "%s", l->held);
        pthread_mutex_unlock(&l->mu);
        int rc = renew(l, id, key, paused, why, sizeof(why));
        pthread_mutex_lock(&l->mu);
        now = ckpt_now_s();
        if (l->id != id || l->lapsed)
            continue; /* replaced meanwhile */
        if (rc == 1) {
            l->next = now + RETRY_S;
            l->leaderless = now;
            if (!l->paused) {
                l->paused = true;
                l->paused_since = now;
                pthread_cond_signal(&l->watch_cv);
                ckpt_log(CKPT_WARN, "etcd has lost its quorum (%s): replication and restarts pause until it is "
                         "back; the ranks train on", why);
                tell(l);
            }
        } else if (rc == 0) {
            if (l->paused) {
                ckpt_log(CKPT_INFO, "etcd has its quorum again after %.1f s: the job's coordination goes on",
                         now - l->paused_since);
                l->paused = false;
                tell(l);
            }
            l->renewed = now;
            l->next = now + l->ttl_s / 3;
            pthread_cond_signal(&l->watch_cv);
        } else if (rc == -ENOENT || now - since(l) > l->ttl_s * LEASE_FENCE_AT) {
            if (rc == -ENOENT)
                snprintf(l->why, sizeof(l->why), "this node's etcd lease has expired");
            else
                snprintf(l->why, sizeof(l->why), "this node cannot renew its etcd lease (%s)", why);
            lapse(l);
        } else {
            l->next = now + RETRY_S;
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int lease_start(struct lease **out, const struct etcd_opts *o, double ttl_s, int64_t id, void (*fence)(void),
                char *why, size_t whylen)
{
    struct lease *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    /* A renewal that waits longer than half the TTL is given up for the
     * next member: it leaves the time to try one before the lease ends. */
    struct etcd_opts mine = *o;
    mine.timeout_ms = (int)(ttl_s * 500) > 1000 ? (int)(ttl_s * 500) : 1000;
    int rc = etcd_open(&l->e, &mine, why, whylen);
    if (rc < 0) {
        free(l);
        return rc;
    }
    /* The deadline's questions must end well within the margin. */
    mine.timeout_ms = (int)(ttl_s * 1000 / 16) > 100 ? (int)(ttl_s * 1000 / 16) : 100;
    if ((rc = etcd_open(&l->probe, &mine, why, whylen)) < 0) {
        etcd_close(l->e);
        free(l);
        return rc;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_cond_init(&l->watch_cv, &ca);
    pthread_condattr_destroy(&ca);
    l->fence = fence;
    pthread_mutex_init(&l->mu, NULL);
    l->ttl_s = ttl_s;
    l->id = id;
    l->renewed = ckpt_now_s();
    l->next = l->renewed + ttl_s / 3;
    if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        rc = -errno;
        snprintf(why, whylen, "cannot make a pipe: %s", strerror(errno));
        etcd_close(l->e);
        etcd_close(l->probe);
        free(l);
        return rc;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&l->thread, NULL, keep, l);
    if (rc == 0 && (rc = pthread_create(&l->watch, NULL, watch, l)) != 0) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(why, whylen, "cannot start the lease's threads: %s", strerror(rc));
        close(l->wake[0]);
        close(l->wake[1]);
        etcd_close(l->e);
        etcd_close(l->probe);
        free(l);
        return -rc;
    }
    *out = l;
    return 0;
}

int lease_fd(const struct lease *l)
{
    return l ? l->wake[0] : -1;
}

void lease_hold(struct lease *l, const char *key)
{
    pthread_mutex_lock(&l->mu);
    snprintf(l->held, sizeof(l->held), "%s", key);
    pthread_mutex_unlock(&l->mu);
}

void lease_state(struct lease *l, struct lease_state *s)
{
    char drain[64];
    while (read(l->wake[0], drain, sizeof(drain)) > 0)
        ;
    pthread_mutex_lock(&l->mu);
    s->id = l->id;
    s->paused = l->paused;
    s->lapsed = l->lapsed;
    snprintf(s->why, sizeof(s->why), "%s", l->why);
    pthread_mutex_unlock(&l->mu);
}

void lease_replace(struct lease *l, int64_t id, const char *key)
{
    pthread_mutex_lock(&l->mu);
    l->id = id;
    snprintf(l->held, sizeof(l->held), "%s", key);
    l->lapsed = l->paused = false;
    l->renewed = ckpt_now_s();
    l->next = l->renewed + l->ttl_s / 3;
    pthread_cond_signal(&l->cv);
    pthread_cond_signal(&l->watch_cv);
    pthread_mutex_unlock(&l->mu);
}

void lease_stop(struct lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_cond_signal(&l->watch_cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_join(l->watch, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->watch_cv);
    pthread_mutex_destroy(&l->mu);
    close(l->wake[0]);
    close(l->wake[1]);
    etcd_close(l->e);
    etcd_close(l->probe);
    free(l);
}
