/*
 * The restart decision of a job on several nodes (runtime/recovery.c):
 * the newest iteration every rank can reach wins, each rank's copy comes
 * from the fastest tier that holds it (own arena, a peer's arena, own
 * disk), another node's disk never serves, a refused iteration and newer
 * ones are passed over, and when nothing serves the reason names the ranks
 * that lost everything.  One row per case.
 */
#include <stdio.h>
#include <string.h>

#include "recovery.h"

#define A CKPT_TIER_ARENA
#define P CKPT_TIER_PEER
#define D CKPT_TIER_DISK
#define MAXH 16

static const struct row {
    const char *name;
    unsigned nranks, nproc;
    uint64_t below;
    struct ckpt_held held[MAXH]; /* rank, tier, iteration, node; ends at iteration 0 */
    uint64_t want;
    const char *sources;         /* per rank: "tier@node,...", when want != 0 */
    const char *why;             /* a part of the reason, when want == 0 */
} rows[] = {
    { "all local", 2, 1, 0,
      { {0, A, 20, 0, 0}, {0, A, 15, 0, 0}, {1, A, 20, 1, 0}, {1, A, 15, 1, 0} },
      20, "arena@0,arena@1", NULL },
    { "lost node from a peer", 4, 1, 0,
      { {0, A, 20, 0, 0}, {1, A, 20, 1, 0}, {3, A, 20, 3, 0}, {2, P, 20, 3, 0}, {3, P, 20, 2, 0} },
      20, "arena@0,arena@1,peer@3,arena@3", NULL },
    { "local arena beats a peer", 2, 1, 0,
      { {0, P, 20, 1, 0}, {0, A, 20, 0, 0}, {1, A, 20, 1, 0} },
      20, "arena@0,arena@1", NULL },
    { "newest common, not newest", 2, 1, 0,
      { {0, A, 25, 0, 0}, {0, A, 20, 0, 0}, {1, A, 20, 1, 0}, {1, A, 15, 1, 0} },
      20, "arena@0,arena@1", NULL },
    { "disk when memory lost", 4, 1, 0,
      { {0, A, 20, 0, 0}, {1, A, 20, 1, 0}, {0, D, 10, 0, 0}, {1, D, 10, 1, 0}, {2, D, 10, 2, 0},
        {3, D, 10, 3, 0} },
      10, "disk@0,disk@1,disk@2,disk@3", NULL },
    { "another node's disk never serves", 2, 1, 0,
      { {0, A, 20, 0, 0}, {1, D, 20, 0, 0} },
      0, NULL, "rank 1 (node 1) has no copy in any tier" },
    { "peer arena of own node counts as peer", 2, 2, 0,
      { {0, A, 20, 0, 0}, {1, P, 20, 0, 0} },
      20, "arena@0,peer@0", NULL },
    { "refused iteration passed over", 2, 1, 20,
      { {0, A, 20, 0, 0}, {0, A, 15, 0, 0}, {1, A, 20, 1, 0}, {1, A, 15, 1, 0} },
      15, "arena@0,arena@1", NULL },
    { "both holders lost", 4, 1, 0,
      { {0, A, 20, 0, 0}, {1, A, 20, 1, 0}, {0, P, 20, 1, 0}, {1, P, 20, 0, 0} },
      0, NULL, "ranks 2 (node 2), 3 (node 3) have no copy in any tier" },
    { "no common iteration", 2, 1, 0,
      { {0, A, 25, 0, 0}, {1, A, 20, 1, 0} },
      0, NULL, "rank 0's newest copy is iteration 25, rank 1's newest copy is iteration 20" },
    { "nothing at all", 2, 1, 0, { {0, 0, 0, 0, 0} }, 0, NULL, "ranks 0 (node 0), 1 (node 1) have no copy" },
};

int main(void)
{
    int failures = 0;

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *t = &rows[i];
        struct ckpt_source src[8];
        char why[512] = "", got[256] = "";
        size_t n = 0, k = 0;

        while (n < MAXH && t->held[n].iteration)
            n++;
        uint64_t it = ckpt_recovery_pick(t->held, n, t->nranks, t->nproc, t->below, src, why, sizeof(why));
        if (it != t->want) {
            printf("FAIL %s: iteration %llu, expected %llu (%s)\n", t->name, (unsigned long long)it,
                   (unsigned long long)t->want, why);
            failures++;
            continue;
        }
        if (it) {
            for (unsigned r = 0; r < t->nranks; r++)
                k += snprintf(got + k, sizeof(got) - k, "%s%s@%u", r ? "," : "", ckpt_tier_name(src[r].tier),
                              src[r].node);
            if (strcmp(got, t->sources) != 0) {
                printf("FAIL %s: sources %s, expected %s\n", t->name, got, t->sources);
                failures++;
                continue;
            }
        } else if (!strstr(why, t->why)) {
            printf("FAIL %s: reason '%s' does not say '%s'\n", t->name, why, t->why);
            failures++;
            continue;
        }
        printf("ok   %s\n", t->name);
    }
    return failures ? 1 : 0;
}
