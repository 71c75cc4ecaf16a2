/*
 * Where replicas live: GEMINI's placements of m copies of each node's
 * snapshot over N nodes (group, ring, mixed), and the probability that a
 * job can still be recovered from host memory when k nodes fail at once.
 * Pure arithmetic for the node agents and tools (libckpt.so leaves it
 * out): no I/O but ckpt_placement_describe's, no allocation, no global
 * state.
 *
 * Every node keeps its own snapshot (holder 0) and m-1 peers keep one each:
 *   group  nodes 0..m-1, m..2m-1, ... each hold each other's (m divides N);
 *   ring   node i's copies are on i, i+1, ..., i+m-1 (mod N);
 *   mixed  floor(N/m)-1 groups of m, and the last m + N mod m nodes a ring.
 * Node i's snapshot is lost when all of its m holders fail.
 */
#ifndef CKPT_PLACEMENT_H
#define CKPT_PLACEMENT_H

#include <stddef.h>
#include <stdio.h>

/* In the order of CKPT_PLACEMENT's choices (config.def). */
enum ckpt_placement { CKPT_PLACE_AUTO, CKPT_PLACE_GROUP, CKPT_PLACE_RING, CKPT_PLACE_MIXED };

const char *ckpt_placement_name(enum ckpt_placement p);

/* AUTO becomes GEMINI's choice: group when m divides n (optimal), else
 * mixed (within (2m-3)/C(n,m) of optimal); the others stay as they are. */
enum ckpt_placement ckpt_placement_choose(enum ckpt_placement p, unsigned n, unsigned m);

/* Whether p can place m replicas on n nodes: 1 <= m <= n, and group needs m
 * to divide n.  Returns 0, or -EINVAL with the reason in why. */
int ckpt_placement_check(enum ckpt_placement p, unsigned n, unsigned m, char *why, size_t whylen);

/* The m nodes that hold node's snapshot, node itself first, into out[m].
 * Returns 0, or -EINVAL when the placement does not fit or node >= n. */
int ckpt_placement_holders(enum ckpt_placement p, unsigned n, unsigned m, unsigned node, unsigned *out);

/* The nodes whose snapshots node holds, itself excluded, into out[m-1]
 * (every placement here puts exactly m-1 peers' replicas on each node).
 * Returns how many, or -EINVAL. */
int ckpt_placement_sources(enum ckpt_placement p, unsigned n, unsigned m, unsigned node, unsigned *out);

/* The exact probability that every node's snapshot survives when k of the
 * n nodes, chosen uniformly, fail at once (closed forms: inclusion-exclusion
 * over groups, a run-length count on the ring).  -1 when p does not fit. */
double ckpt_placement_recovery(enum ckpt_placement p, unsigned n, unsigned m, unsigned k);

/* The same by enumerating all C(n,k) failure sets, for checking the closed
 * forms.  Returns 0 with *pr set, -E2BIG when n > 63 or there are more
 * than 2^24 sets, or -EINVAL. */
int ckpt_placement_enumerate(enum ckpt_placement p, unsigned n, unsigned m, unsigned k, double *pr);

/* GEMINI's bound for group placement: 1 when k < m, else
 * max(0, 1 - n C(n-m, k-m) / (m C(n,k))); exact when k = m. */
double ckpt_placement_bound(unsigned n, unsigned m, unsigned k);

/* What node 0's agent prints at start: the placement, each node's
 * holders, and the recovery probability for k = 1..m+1 failed nodes.
 * The placement must fit (ckpt_placement_check). */
void ckpt_placement_describe(FILE *f, enum ckpt_placement p, unsigned n, unsigned m);

#endif
