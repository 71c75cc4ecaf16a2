/*
 * The restart decision of a job on several nodes (runtime/recovery.c):
 * the newest iteration every rank can reach wins, each rank's copy comes
 * from the fastest tier that holds it (own arena, a peer's arena, own
 * disk), another node's disk never serves, a refused iteration and newer
 * ones are passed over, and when nothing serves the reason names the ranks
 * that lost everything.  One row per case.  Then the restart decisions
 * that say which copies a later restore replaced.
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
    struct ckpt_held held[MAXH]; /* rank, tier, iteration, node, -, epoch; ends at iteration 0 */
    uint64_t want;
    const char *sources;         /* per rank: "tier@node,...", when want != 0 */
    const char *why;             /* a part of the reason, when want == 0 */
} rows[] = {
    { "all local", 2, 1, 0,
      { {0, A, 20, 0, 0, 0}, {0, A, 15, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {1, A, 15, 1, 0, 0} },
      20, "arena@0,arena@1", NULL },
    { "lost node from a peer", 4, 1, 0,
      { {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {3, A, 20, 3, 0, 0}, {2, P, 20, 3, 0, 0}, {3, P, 20, 2, 0, 0} },
      20, "arena@0,arena@1,peer@3,arena@3", NULL },
    { "local arena beats a peer", 2, 1, 0,
      { {0, P, 20, 1, 0, 0}, {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0} },
      20, "arena@0,arena@1", NULL },
    { "newest common, not newest", 2, 1, 0,
      { {0, A, 25, 0, 0, 0}, {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {1, A, 15, 1, 0, 0} },
      20, "arena@0,arena@1", NULL },
    { "disk when memory lost", 4, 1, 0,
      { {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {0, D, 10, 0, 0, 0}, {1, D, 10, 1, 0, 0}, {2, D, 10, 2, 0, 0},
        {3, D, 10, 3, 0, 0} },
      10, "disk@0,disk@1,disk@2,disk@3", NULL },
    { "another node's disk never serves", 2, 1, 0,
      { {0, A, 20, 0, 0, 0}, {1, D, 20, 0, 0, 0} },
      0, NULL, "rank 1 (node 1) has no copy in any tier" },
    { "peer arena of own node counts as peer", 2, 2, 0,
      { {0, A, 20, 0, 0, 0}, {1, P, 20, 0, 0, 0} },
      20, "arena@0,peer@0", NULL },
    { "of two peer copies, the one the rank's own node holds (a spare in its place)", 3, 1, 0,
      { {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {2, P, 20, 0, 0, 0}, {2, P, 20, 2, 0, 0}, {0, P, 20, 1, 0, 0} },
      20, "arena@0,arena@1,peer@2", NULL },
    { "of two peer copies elsewhere, the first", 3, 1, 0,
      { {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {2, P, 20, 0, 0, 0}, {2, P, 20, 1, 0, 0} },
      20, "arena@0,arena@1,peer@0", NULL },
    { "refused iteration passed over", 2, 1, 20,
      { {0, A, 20, 0, 0, 0}, {0, A, 15, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {1, A, 15, 1, 0, 0} },
      15, "arena@0,arena@1", NULL },
    { "both holders lost", 4, 1, 0,
      { {0, A, 20, 0, 0, 0}, {1, A, 20, 1, 0, 0}, {0, P, 20, 1, 0, 0}, {1, P, 20, 0, 0, 0} },
      0, NULL, "ranks 2 (node 2), 3 (node 3) have no copy in any tier" },
    { "no common iteration", 2, 1, 0,
      { {0, A, 25, 0, 0, 0}, {1, A, 20, 1, 0, 0} },
      0, NULL, "rank 0's newest copy is iteration 25, rank 1's newest copy is iteration 20" },
    { "nothing at all", 2, 1, 0, { {0, 0, 0, 0, 0, 0} }, 0, NULL, "ranks 0 (node 0), 1 (node 1) have no copy" },
};

/*
 * The decisions: a job started (epoch 1), went back to 400 (epoch 2) and
 * to 450 (epoch 3).  A node away since epoch 1 holds 400 and 500 of the
 * first run: 400 is the job's still, 500 was replaced by the restore of
 * 400.  A node that was there holds 450 of epoch 2 (the point epoch 3
 * went back to) and 460 of epoch 3.
 */
static int decisions(void)
{
    int failures = 0;
    const struct ckpt_decision away[] = { {1, 0} }, there[] = { {1, 0}, {2, 400}, {3, 450} };
    struct ckpt_decision all[4] = { {0, 0} }, by = { 0, 0 };
    unsigned n = 0;
#define EXPECT(cond, ...) \
    do { if (!(cond)) { printf("FAIL decisions: " __VA_ARGS__); printf("\n"); failures++; } } while (0)

    /* Merged from the nodes' ledgers in any order, each once, oldest first; full: the oldest goes. */
    EXPECT(ckpt_decision_add(all, &n, 3, there[2]) && ckpt_decision_add(all, &n, 3, away[0]) &&
               ckpt_decision_add(all, &n, 3, there[1]) && !ckpt_decision_add(all, &n, 3, there[0]) && n == 3 &&
               all[0].epoch == 1 && all[1].epoch == 2 && all[2].epoch == 3, "merge: %u", n);
    EXPECT(ckpt_decision_add(all, &n, 3, (struct ckpt_decision){ 4, 470 }) && n == 3 && all[0].epoch == 2 &&
               all[2].epoch == 4 && !ckpt_decision_add(all, &n, 3, (struct ckpt_decision){ 1, 0 }),
           "a full list keeps the newest");
    n = 0;
    for (unsigned i = 0; i < 3; i++)
        ckpt_decision_add(all, &n, 4, there[i]);

    /* Which decision a copy belongs to, by its node's ledger. */
    EXPECT(ckpt_decision_of(away, 1, 500) == 1 && ckpt_decision_of(there, 3, 450) == 3 &&
               ckpt_decision_of(there, 3, 449) == 2 && ckpt_decision_of(there, 3, 460) == 3 &&
               ckpt_decision_of(NULL, 0, 460) == 0, "the decision a copy belongs to");
    /* Replaced: the away node's 500, by epoch 2's restore of 400. */
    EXPECT(ckpt_decision_replaced(all, n, ckpt_decision_of(away, 1, 500), 500, &by) && by.epoch == 2 &&
               by.restore == 400, "500 of the first run: replaced by %llu", (unsigned long long)by.epoch);
    EXPECT(!ckpt_decision_replaced(all, n, ckpt_decision_of(away, 1, 400), 400, &by), "400 of the first run");
    EXPECT(!ckpt_decision_replaced(all, n, 1, 300, &by), "older than every restore point");
    /* 440 of the first run: epoch 2 went back to 400 (its 440 is another one); 450 of epoch 2 is epoch 3's point. */
    EXPECT(ckpt_decision_replaced(all, n, 1, 440, &by) && by.epoch == 2, "440 of the first run");
    EXPECT(!ckpt_decision_replaced(all, n, ckpt_decision_of(there, 3, 450), 450, &by), "the restore point");
    EXPECT(!ckpt_decision_replaced(all, n, ckpt_decision_of(there, 3, 460), 460, &by), "the current run's");
    EXPECT(ckpt_decision_replaced(all, n, 2, 460, &by) && by.epoch == 3, "460 of epoch 2: replaced by epoch 3");
    /* A node that knows no decision: all but what no restore went below is replaced. */
    EXPECT(ckpt_decision_replaced(all, n, 0, 1, &by) && by.epoch == 1, "a copy of no decision");
#undef EXPECT
    if (!failures)
        printf("ok   decisions\n");
    return failures;
}

int main(void)
{
    int failures = decisions();

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
