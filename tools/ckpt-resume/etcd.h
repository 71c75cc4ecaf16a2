/*
 * A client of an etcd cluster (v3 API), for the node agents of a job on
 * several nodes: keys and values, leases, and transactions that compare
 * revisions, which membership, election and agreement are made of.  It
 * speaks etcd's JSON gateway (POST /v3/...) through libcurl, with json-c
 * and nettle's base64 for the encodings, and tries the cluster's members
 * in turn: a member that cannot be reached, or that has lost its quorum,
 * is passed over for the next.  One client per thread.
 *
 * Every function returns 0 (etcd_txn: 1 when the transaction's compares
 * held, 0 when they did not) or -errno with why naming the endpoint and
 * what it answered: -ECONNREFUSED (no member reachable), -EAGAIN (a
 * member answered, but the cluster has no quorum: no leader, or the
 * request timed out inside etcd; a write may or may not have been done),
 * -EACCES (wrong credentials or permissions), -ETIMEDOUT, -EPROTO (an
 * answer we cannot read), -ENOENT (etcd_keepalive: the lease has expired).
 */
#ifndef CKPT_ETCD_H
#define CKPT_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct etcd;

/* How to reach the cluster: endpoints "HOST:PORT,..." (http://, or
 * https:// with the TLS files below); all other fields may be NULL. */
struct etcd_opts {
    const char *endpoints;
    const char *ca, *cert, *key; /* PEM files: the CA that signed the members, this client's certificate */
    const char *user, *password; /* etcd authentication */
    int timeout_ms;              /* per request, 0: 5000 */
};

int etcd_open(struct etcd **out, const struct etcd_opts *o, char *why, size_t whylen);
void etcd_close(struct etcd *e);

struct etcd_kv {
    char *key;
    char *value; /* NUL-terminated, len bytes before it */
    size_t len;
    int64_t create_revision, mod_revision, lease;
};
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/* The key, or with prefix every key that starts with it, in key order;
 * *revision (may be NULL): the store's revision the answer is of. */
int etcd_get(struct etcd *e, const char *key, bool prefix, struct etcd_kv **kvs, size_t *n, int64_t *revision,
             char *why, size_t whylen);
/* lease 0: none. */
int etcd_put(struct etcd *e, const char *key, const void *value, size_t len, int64_t lease, char *why,
             size_t whylen);
int etcd_delete(struct etcd *e, const char *key, bool prefix, char *why, size_t whylen);

/* A compare of a transaction: key's create or mod revision, or its value,
 * equal to what is given (a create revision of 0: the key does not exist). */
struct etcd_cmp {
    const char *key;
    enum { ETCD_CREATE, ETCD_MOD, ETCD_VALUE } what;
    int64_t revision;
    const char *value;
};
/* An operation of a transaction: a put (with lease, 0: none) or a delete. */
struct etcd_op {
    const char *key;
    const void *value; /* NULL: delete the key */
    size_t len;
    int64_t lease;
};
/* Does ops when every compare holds, else nothing.  Returns 1 or 0 as
 * that went, *revision (may be NULL) the store's revision after it. */
int etcd_txn(struct etcd *e, const struct etcd_cmp *cmps, size_t ncmps, const struct etcd_op *ops, size_t nops,
             int64_t *revision, char *why, size_t whylen);
/* The same, and when it went, every key under @prefix as it was at that
 * revision, in *kvs (with etcd_kvs_free).  etcd limits a transaction's
 * compares (128 by default): a read scales with the job, a compare per
 * node would not. */
int etcd_txn_read(struct etcd *e, const struct etcd_cmp *cmps, size_t ncmps, const struct etcd_op *ops, size_t nops,
                  const char *prefix, struct etcd_kv **kvs, size_t *n, int64_t *revision, char *why, size_t whylen);

/* This machine's address on the connection of the last request. */
int etcd_local_ip(struct etcd *e, char *ip, size_t len);

/* A lease of ttl_s seconds; keys put with it go when it expires. */
int etcd_lease_grant(struct etcd *e, int ttl_s, int64_t *id, char *why, size_t whylen);
/* Renews it: *ttl_s (may be NULL) what it has left; -ENOENT when it has
 * expired (its keys are gone). */
int etcd_keepalive(struct etcd *e, int64_t id, int *ttl_s, char *why, size_t whylen);
int etcd_lease_revoke(struct etcd *e, int64_t id, char *why, size_t whylen);

/* Has the cluster a leader?  Asks each member's status (a local answer,
 * at once even without a quorum; each within a second, or the client's
 * timeout when shorter): 1 when one has a leader, 0 when members
 * answer but none has (the quorum is lost: renewals and writes wait for
 * it, and no lease expires meanwhile), -ECONNREFUSED when none answers. */
int etcd_quorum(struct etcd *e, char *why, size_t whylen);

/* A watch on every key under @prefix, on a thread and a client of its own
 * (@o as etcd_open's): *@fd becomes readable each time something under it
 * changes, and when the stream to a member ends (then the next member is
 * watched, so that nothing done meanwhile goes unnoticed).  The caller
 * drains *@fd and reads what it needs; the watch says that, not what.
 * Returns 0, or -errno with why. */
struct etcd_watch;
int etcd_watch_start(struct etcd_watch **out, const struct etcd_opts *o, const char *prefix, int *fd, char *why,
                     size_t whylen);
/* Ends the stream at once and frees the watch (and *fd). */
void etcd_watch_stop(struct etcd_watch *w);

#endif
