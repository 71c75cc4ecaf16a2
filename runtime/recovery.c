/*
 * The restart decision of a job on several nodes (recovery.h): candidates
 * are tried newest first, and the first one every rank can reach wins.
 * The cost is one pass over the holdings per candidate, and a node lists
 * at most a few copies per rank per tier, so this stays small for
 * thousands of ranks.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recovery.h"

const char *ckpt_tier_name(unsigned tier)
{
    static const char *const names[] = { "arena", "peer", "disk", "none" };
    return names[tier < CKPT_TIER_NONE ? tier : CKPT_TIER_NONE];
}

/* The tier a copy counts in for its rank, CKPT_TIER_NONE when it cannot serve it. */
static unsigned effective_tier(const struct ckpt_held *h, unsigned nproc)
{
    unsigned home = h->rank / nproc;
    switch (h->tier) {
    case CKPT_TIER_ARENA:
        return h->node == home ? CKPT_TIER_ARENA : CKPT_TIER_PEER;
    case CKPT_TIER_PEER:
        return CKPT_TIER_PEER;
    case CKPT_TIER_DISK:
        return h->node == home ? CKPT_TIER_DISK : CKPT_TIER_NONE;
    default:
        return CKPT_TIER_NONE;
    }
}

static int newest_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Fills src with the best source of every rank for iteration it; true when every rank has one.  Of
 * two peer copies, the one its own node holds (a spare that took the node's place kept it) travels
 * nowhere. */
static int sources_for(const struct ckpt_held *held, size_t n, unsigned nranks, unsigned nproc, uint64_t it,
                       struct ckpt_source *src)
{
    for (unsigned r = 0; r < nranks; r++)
        src[r] = (struct ckpt_source){ .tier = CKPT_TIER_NONE };
    for (size_t i = 0; i < n; i++) {
        const struct ckpt_held *h = &held[i];
        unsigned t = effective_tier(h, nproc);
        if (h->iteration != it || h->rank >= nranks)
            continue;
        bool home = h->node == h->rank / nproc;
        if (t < src[h->rank].tier ||
            (t == CKPT_TIER_PEER && src[h->rank].tier == CKPT_TIER_PEER && home && src[h->rank].node != h->node))
            src[h->rank] = (struct ckpt_source){ .tier = t, .node = h->node };
    }
    for (unsigned r = 0; r < nranks; r++)
        if (src[r].tier == CKPT_TIER_NONE)
            return 0;
    return 1;
}

/* Says in why what keeps every candidate from serving. */
static void explain(const struct ckpt_held *held, size_t n, unsigned nranks, unsigned nproc, uint64_t below,
                    char *why, size_t whylen)
{
    uint64_t *newest = calloc(nranks, sizeof(*newest));
    size_t k = 0;
    unsigned shown = 0, empty = 0;

    if (!newest) {
        snprintf(why, whylen, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const struct ckpt_held *h = &held[i];
        if (h->rank < nranks && effective_tier(h, nproc) != CKPT_TIER_NONE && (!below || h->iteration < below) &&
            h->iteration > newest[h->rank])
            newest[h->rank] = h->iteration;
    }
    for (unsigned r = 0; r < nranks; r++)
        empty += newest[r] == 0;
    why[0] = '\0';
    for (unsigned r = 0; r < nranks && k < whylen; r++) {
        if (empty ? newest[r] != 0 : 0)
            continue;
        if (shown++ == 8) {
            k += snprintf(why + k, whylen - k, ", ...");
            break;
        }
        if (empty)
            k += snprintf(why + k, whylen - k, "%s%u (node %u)", shown > 1 ? ", " : empty == 1 ? "rank " : "ranks ",
                          r, r / nproc);
        else
            k += snprintf(why + k, whylen - k, "%srank %u's newest copy is iteration %llu", shown > 1 ? ", " : "",
                          r, (unsigned long long)newest[r]);
    }
    if (empty && k < whylen)
        snprintf(why + k, whylen - k, " %s no copy%s in any tier", empty == 1 ? "has" : "have",
                 below ? " older than the one refused" : "");
    else if (k < whylen)
        snprintf(why + k, whylen - k, ", and no iteration is held for every rank");
    free(newest);
}

uint64_t ckpt_recovery_pick(const struct ckpt_held *held, size_t n, unsigned nranks, unsigned nproc,
                            uint64_t below, struct ckpt_source *src, char *why, size_t whylen)
{
    uint64_t *cand = malloc((n ? n : 1) * sizeof(*cand)), found = 0;
    size_t nc = 0;

    if (!cand || !nproc) {
        free(cand);
        snprintf(why, whylen, "%s", nproc ? "out of memory" : "no ranks per node");
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!below || held[i].iteration < below)
            cand[nc++] = held[i].iteration;
    qsort(cand, nc, sizeof(*cand), newest_first);
    for (size_t i = 0; i < nc && !found; i++) {
        if (i && cand[i] == cand[i - 1])
            continue;
        if (sources_for(held, n, nranks, nproc, cand[i], src))
            found = cand[i];
    }
    free(cand);
    if (!found)
        explain(held, n, nranks, nproc, below, why, whylen);
    return found;
}

bool ckpt_decision_add(struct ckpt_decision *d, unsigned *n, unsigned max, struct ckpt_decision x)
{
    unsigned at = 0;
    while (at < *n && d[at].epoch < x.epoch)
        at++;
    if ((at < *n && d[at].epoch == x.epoch) || (*n == max && !at))
        return false;
    if (*n == max) { /* the oldest goes */
        memmove(&d[0], &d[1], (at - 1) * sizeof(d[0]));
        d[at - 1] = x;
        return true;
    }
    memmove(&d[at + 1], &d[at], (*n - at) * sizeof(d[0]));
    d[at] = x;
    (*n)++;
    return true;
}

uint64_t ckpt_decision_of(const struct ckpt_decision *d, size_t n, uint64_t iteration)
{
    uint64_t epoch = 0;
    for (size_t i = 0; i < n; i++)
        if (d[i].restore <= iteration && d[i].epoch > epoch)
            epoch = d[i].epoch;
    return epoch;
}

bool ckpt_decision_replaced(const struct ckpt_decision *d, size_t n, uint64_t epoch, uint64_t iteration,
                            struct ckpt_decision *by)
{
    bool replaced = false;
    for (size_t i = 0; i < n; i++)
        if (d[i].epoch > epoch && d[i].restore < iteration && (!replaced || d[i].epoch < by->epoch)) {
            *by = d[i];
            replaced = true;
        }
    return replaced;
}
