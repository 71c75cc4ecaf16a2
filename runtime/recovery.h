/*
 * Where a job on several nodes goes back to after a failure, decided from
 * what every node says it holds: the newest iteration that every rank can
 * get a copy of from some tier, and for each rank the fastest tier that
 * holds it (its own node's arena, then a peer's arena, then its own node's
 * disk).  Pure arithmetic over the holdings: it reads no file and trusts
 * that each node listed only copies it verified.  Agent code, never in
 * libckpt.so.
 */
#ifndef CKPT_RECOVERY_H
#define CKPT_RECOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ckpt_tier {
    CKPT_TIER_ARENA = 0,  /* the rank's own node's host memory */
    CKPT_TIER_PEER = 1,   /* a replica in some node's host memory */
    CKPT_TIER_DISK = 2,   /* a complete generation on the rank's own node's disks */
    CKPT_TIER_NONE = 3,
};

/* One verified copy: node holds rank's snapshot of iteration in tier. */
struct ckpt_held {
    uint32_t rank;
    uint32_t tier;
    uint64_t iteration;
    uint32_t node;        /* the node that holds it */
    uint32_t reserved;
    uint64_t epoch;       /* the plan it was committed under (format.h), 0: unknown */
};
_Static_assert(sizeof(struct ckpt_held) == 32, "held layout changed: bump the coordination protocol version");

/* Where one rank's copy comes from. */
struct ckpt_source {
    uint32_t tier;        /* enum ckpt_tier */
    uint32_t node;        /* the node holding it */
};

/* The tier's name ("arena", "peer", "disk"). */
const char *ckpt_tier_name(unsigned tier);

/*
 * Chooses, among the n copies in held, the newest iteration below below
 * (0: any) that every rank 0..nranks-1 can be brought back to, rank r
 * living on node r / nproc.  A disk copy serves only the ranks of the node
 * that holds it; an arena copy of another node's rank counts only in the
 * peer tier.  src[r] gets the fastest source of each rank.  Returns the
 * iteration, or 0 with why saying what is missing: the ranks that hold
 * nothing at all, or else the newest iteration each of the first ranks
 * lacks.
 */
uint64_t ckpt_recovery_pick(const struct ckpt_held *held, size_t n, unsigned nranks, unsigned nproc,
                            uint64_t below, struct ckpt_source *src, char *why, size_t whylen);

/*
 * The job's restart decisions, for copies that outlived the run they were
 * taken in.  A launch that went back to iteration `restore` under plan
 * `epoch` replaced everything the job had done after it: the nodes in the
 * job retire their newer copies then, but a node that was away (cut off,
 * stopped, rebooted) keeps them, and brings them back when it returns.
 * Each node keeps the decisions it acted under (its ledger); a copy it
 * holds of iteration I belongs to the newest of them at or below I (the
 * launch it was taken in, or the restore that took it as its point), and
 * is replaced when any later decision, known to any node, went back below
 * I.  Each plan's epoch is above every one before it: the etcd revision
 * of its decision (coord.h).
 */
struct ckpt_decision {
    uint64_t epoch;
    uint64_t restore;     /* iteration, 0: from the beginning */
};
_Static_assert(sizeof(struct ckpt_decision) == 16, "decision layout changed: bump the coordination protocol version");

/* Adds @x to d[0..*n), kept in epoch order and at most @max long (the
 * oldest goes); false when @x was there (the same epoch) or is older than
 * all of a full list. */
bool ckpt_decision_add(struct ckpt_decision *d, unsigned *n, unsigned max, struct ckpt_decision x);

/* The epoch of the decision in d[0..n) (a node's ledger) that a copy of
 * @iteration held by that node belongs to: the newest whose restore point
 * is at or below it; 0 when none is. */
uint64_t ckpt_decision_of(const struct ckpt_decision *d, size_t n, uint64_t iteration);

/* Whether a copy of @iteration that belongs to decision @epoch was
 * replaced by one of d[0..n) (every node's ledger together): a later
 * decision that went back below @iteration.  *by gets the earliest such
 * decision when there is one. */
bool ckpt_decision_replaced(const struct ckpt_decision *d, size_t n, uint64_t epoch, uint64_t iteration,
                            struct ckpt_decision *by);

#endif
