/*
 * A node's etcd lease, renewed on a thread and a client of its own (see
 * lease.c): the bridge reads what became of it, woken through lease_fd.
 */
#ifndef CKPT_LEASE_H
#define CKPT_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "etcd.h"

struct lease;

/* A node that has not renewed its lease for LEASE_FENCE_AT of the TTL
 * takes it as lapsed and kills its ranks (on its monotonic clock).  The
 * others act without a node only lease_grace_s() after etcd ended its
 * lease: the margin its fence had, once more, and the time the fence
 * takes (a SIGKILL ends the ranks' code at once; LEASE_KILL_S covers the
 * kernel reaping them). */
#define LEASE_FENCE_AT 0.75
#define LEASE_KILL_S 1.0

static inline double lease_grace_s(double ttl_s)
{
    return ttl_s * (1 - LEASE_FENCE_AT) + LEASE_KILL_S;
}

struct lease_state {
    int64_t id;
    bool paused;        /* etcd has no leader: nothing can be renewed, nothing expires */
    bool lapsed;        /* the lease expired, or is too late to renew: fence the node */
    char why[512];      /* why it lapsed */
};

/* Keeps lease @id of @ttl_s seconds, granted by the caller, on a client
 * opened with @o; @fence (or NULL) is called, on a thread of the lease's,
 * the moment the lease lapses.  0, or -errno with why. */
int lease_start(struct lease **out, const struct etcd_opts *o, double ttl_s, int64_t id, void (*fence)(void),
                char *why, size_t whylen);
/* Readable each time the lease's state changes; lease_state drains it. */
int lease_fd(const struct lease *l);
void lease_state(struct lease *l, struct lease_state *s);
/* @key is held under the lease: it proves the lease lives when a
 * keepalive, right after etcd changed leaders, says otherwise. */
void lease_hold(struct lease *l, const char *key);
/* A new lease @id, holding @key, takes the place of a lapsed one. */
void lease_replace(struct lease *l, int64_t id, const char *key);
/* Stops renewing (the lease itself is the caller's to revoke). */
void lease_stop(struct lease *l);

#endif
