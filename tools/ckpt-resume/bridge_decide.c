/*
 * The coordinator's decisions, recorded in etcd (coord.h's decide hook,
 * set by the bridge of the agent that leads): each plan's restore point is
 * put by a transaction that holds only while this agent leads, and the
 * same transaction reads the nodes' keys, so that a plan is acted on only
 * when every node is still the agent whose inventory it was made from.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge_int.h"
#include "etcd.h"

/* Is each node in @kv (etcd's node/ keys at @rev) the agent the
 * coordinator heard?  1, or -ESTALE with why. */
static int heard_all(const struct etcd_kv *kv, size_t n, int64_t rev, char *why, size_t whylen)
{
    size_t skip = strlen(B.prefix) + strlen("node/");
    for (unsigned j = 0; j < B.n; j++) {
        int64_t heard = __atomic_load_n(&B.heard[j], __ATOMIC_ACQUIRE), now = 0;
        for (size_t i = 0; i < n; i++)
            if (strlen(kv[i].key) > skip && strtoul(kv[i].key + skip, NULL, 10) == j)
                now = kv[i].lease;
        if (!heard || now != heard) {
            snprintf(why, whylen, "node %u's agent%s left the job after it said what it holds (etcd revision "
                     "%" PRId64 ")", j, heard ? "" : ", or the coordinator's link to it,", rev);
            return -ESTALE;
        }
    }
    return 1;
}

/*
 * A decision of the coordinator (coord.c, on its thread): <job>/decision
 * put by a transaction that holds only while the leader key is the one of
 * @term, the epoch this agent was elected for; its revision is the
 * decision's epoch.  The same transaction reads the node keys: each must
 * be the agent whose JOIN, with what it holds, the plan was made from, or
 * the decision is not acted on (the next, once the coordinator has heard
 * the node's new agent, has a higher revision).  They are read once
 * before, so that a node known to have changed costs no write.  1, 0 when
 * another leads, -errno.
 */
int bridge_decide(int64_t term, uint64_t restore, uint64_t *epoch, char *why, size_t whylen)
{
    char leader[300], key[300], nodes[300], value[64];
    int64_t rev = 0;
    struct etcd_kv *kv = NULL;
    size_t n = 0;
    snprintf(leader, sizeof(leader), "%sleader", B.prefix);
    snprintf(key, sizeof(key), "%sdecision", B.prefix);
    snprintf(nodes, sizeof(nodes), "%snode/", B.prefix);
    snprintf(value, sizeof(value), "%" PRIu64 " %" PRId64, restore, term);
    struct etcd_cmp held = { leader, ETCD_CREATE, term, NULL };
    struct etcd_op put = { key, value, strlen(value), 0 };
    *epoch = 0;
    int rc = etcd_get(B.decider, nodes, true, &kv, &n, &rev, why, whylen);
    if (rc == 0)
        rc = heard_all(kv, n, rev, why, whylen);
    etcd_kvs_free(kv, n);
    if (rc < 0)
        return rc;
    rc = etcd_txn_read(B.decider, &held, 1, &put, 1, nodes, &kv, &n, &rev, why, whylen);
    if (rc == 1)
        rc = heard_all(kv, n, rev, why, whylen);
    if (rc == 1)
        *epoch = (uint64_t)rev;
    etcd_kvs_free(kv, n);
    return rc;
}
