/*
 * Replica placement (runtime/placement.c): GEMINI's published numbers
 * (N=16, m=2, k=2: group 93.3%, ring 86.7%; N=128: 99.2%), the closed
 * forms against enumerating every failure set, GEMINI's bound against the
 * exact value, mixed placement within (2m-3)/C(N,m) of optimal, and the
 * holder tables themselves (every node holds exactly m snapshots).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "placement.h"
#include "check.h"

/* Published values, to the precision they were published with (percent,
 * one decimal), and the exact fractions behind the small ones. */
static const struct {
    enum ckpt_placement p;
    unsigned n, m, k;
    double percent; /* rounded to 0.1 */
    double exact;   /* 0: not checked beyond the rounding */
} published[] = {
    {CKPT_PLACE_GROUP, 16, 2, 2, 93.3, 14.0 / 15},
    {CKPT_PLACE_RING, 16, 2, 2, 86.7, 13.0 / 15},
    {CKPT_PLACE_GROUP, 128, 2, 2, 99.2, 1 - 64.0 / 8128},
    {CKPT_PLACE_GROUP, 16, 2, 1, 100.0, 1},
    {CKPT_PLACE_RING, 16, 4, 3, 100.0, 1},
    {CKPT_PLACE_MIXED, 7, 3, 2, 100.0, 1},
    {CKPT_PLACE_GROUP, 16, 1, 1, 0.0, 0},
};

/* (Without libm: unit tests link only runtime/.) */
static double round1(double pr)
{
    return (double)(long long)(pr * 1000 + 0.5) / 10;
}

static double magnitude(double x)
{
    return x < 0 ? -x : x;
}

static double choose(unsigned n, unsigned k)
{
    double c = 1;
    for (unsigned i = 1; i <= k; i++)
        c = c * (n - k + i) / i;
    return c;
}

/* Each node's holders start with itself, are distinct, and every node
 * holds exactly m snapshots; sources are the inverse of holders. */
static void check_table(enum ckpt_placement p, unsigned n, unsigned m)
{
    unsigned holders[16], sources[16], load[64] = {0};
    for (unsigned i = 0; i < n; i++) {
        CHECK(ckpt_placement_holders(p, n, m, i, holders) == 0, "%s n=%u m=%u: no holders for node %u",
              ckpt_placement_name(p), n, m, i);
        CHECK(holders[0] == i, "%s n=%u m=%u: node %u is not its own first holder", ckpt_placement_name(p), n, m, i);
        for (unsigned a = 0; a < m; a++) {
            CHECK(holders[a] < n, "%s n=%u m=%u: holder %u out of range", ckpt_placement_name(p), n, m, holders[a]);
            load[holders[a]]++;
            for (unsigned b = 0; b < a; b++)
                CHECK(holders[a] != holders[b], "%s n=%u m=%u: node %u held twice by %u", ckpt_placement_name(p), n,
                      m, i, holders[a]);
        }
        int ns = ckpt_placement_sources(p, n, m, i, sources);
        CHECK(ns == (int)m - 1, "%s n=%u m=%u: node %u holds %d peers' snapshots, not %u", ckpt_placement_name(p), n,
              m, i, ns, m - 1);
        for (int s = 0; s < ns; s++) {
            unsigned h[16], found = 0;
            ckpt_placement_holders(p, n, m, sources[s], h);
            for (unsigned a = 1; a < m; a++)
                found |= h[a] == i;
            CHECK(found, "%s n=%u m=%u: node %u is listed as holding %u's but is not among its holders",
                  ckpt_placement_name(p), n, m, i, sources[s]);
        }
    }
    for (unsigned i = 0; i < n; i++)
        CHECK(load[i] == m, "%s n=%u m=%u: node %u holds %u snapshots", ckpt_placement_name(p), n, m, i, load[i]);
}

int main(void)
{
    char why[200];

    for (size_t i = 0; i < sizeof(published) / sizeof(published[0]); i++) {
        double pr = ckpt_placement_recovery(published[i].p, published[i].n, published[i].m, published[i].k);
        CHECK(round1(pr) == published[i].percent, "%s N=%u m=%u k=%u: %.4f%%, published %.1f%%",
              ckpt_placement_name(published[i].p), published[i].n, published[i].m, published[i].k, 100 * pr,
              published[i].percent);
        CHECK(magnitude(pr - published[i].exact) < 1e-12, "%s N=%u m=%u k=%u: %.15f, exactly %.15f",
              ckpt_placement_name(published[i].p), published[i].n, published[i].m, published[i].k, pr,
              published[i].exact);
    }
    CHECK(round1(ckpt_placement_bound(16, 2, 2)) == 93.3, "GEMINI's bound, N=16 m=2 k=2: %.2f%%",
          100 * ckpt_placement_bound(16, 2, 2));
    CHECK(round1(ckpt_placement_bound(128, 2, 2)) == 99.2, "GEMINI's bound, N=128 m=2 k=2: %.2f%%",
          100 * ckpt_placement_bound(128, 2, 2));

    /* The default is GEMINI's: group when m divides N, else mixed. */
    CHECK(ckpt_placement_choose(CKPT_PLACE_AUTO, 16, 2) == CKPT_PLACE_GROUP, "auto for 16/2 is not group");
    CHECK(ckpt_placement_choose(CKPT_PLACE_AUTO, 16, 3) == CKPT_PLACE_MIXED, "auto for 16/3 is not mixed");
    CHECK(ckpt_placement_choose(CKPT_PLACE_RING, 16, 2) == CKPT_PLACE_RING, "an explicit ring was changed");
    CHECK(ckpt_placement_check(CKPT_PLACE_GROUP, 16, 3, why, sizeof(why)) < 0 && strstr(why, "divide"),
          "group of 3 on 16 nodes accepted (%s)", why);
    CHECK(ckpt_placement_check(CKPT_PLACE_RING, 2, 3, why, sizeof(why)) < 0, "3 replicas on 2 nodes accepted");
    CHECK(ckpt_placement_check(CKPT_PLACE_MIXED, 4, 0, why, sizeof(why)) < 0, "0 replicas accepted");
    CHECK(ckpt_placement_recovery(CKPT_PLACE_GROUP, 16, 3, 2) < 0, "a group of 3 on 16 nodes has a probability");

    /* Every placement that fits, N up to 14 (and 16): the closed forms
     * equal enumeration; fewer failures than replicas always recover;
     * GEMINI's bound never exceeds the exact group value and is it at k=m. */
    unsigned checked = 0;
    for (unsigned n = 1; n <= 16; n++) {
        if (n == 15)
            continue;
        for (unsigned m = 1; m <= 5 && m <= n; m++) {
            for (enum ckpt_placement p = CKPT_PLACE_GROUP; p <= CKPT_PLACE_MIXED; p++) {
                if (ckpt_placement_check(p, n, m, why, sizeof(why)) < 0)
                    continue;
                check_table(p, n, m);
                for (unsigned k = 0; k <= n; k++) {
                    double exact = ckpt_placement_recovery(p, n, m, k), enumerated = -1;
                    CHECK(ckpt_placement_enumerate(p, n, m, k, &enumerated) == 0, "enumeration of N=%u k=%u failed", n,
                          k);
                    CHECK(magnitude(exact - enumerated) < 1e-12,
                          "%s N=%u m=%u k=%u: closed form %.15f, enumerated %.15f", ckpt_placement_name(p), n, m, k,
                          exact, enumerated);
                    if (k < m)
                        CHECK(exact == 1, "%s N=%u m=%u k=%u < m: %.15f, not 1", ckpt_placement_name(p), n, m, k,
                              exact);
                    if (p == CKPT_PLACE_GROUP) {
                        double bound = ckpt_placement_bound(n, m, k);
                        CHECK(bound <= exact + 1e-12, "group N=%u m=%u k=%u: bound %.15f above exact %.15f", n, m, k,
                              bound, exact);
                        if (k == m)
                            CHECK(magnitude(bound - exact) < 1e-12, "group N=%u m=k=%u: bound %.15f, exact %.15f", n, m,
                                  bound, exact);
                    }
                    checked++;
                }
            }
            /* Mixed against the best any placement can do when m failures
             * hit: at least ceil(N/m) distinct holder sets can be lost. */
            if (n % m && m >= 2) {
                double lost = 1 - ckpt_placement_recovery(CKPT_PLACE_MIXED, n, m, m);
                double optimal = ((n + m - 1) / m) / choose(n, m);
                CHECK(lost - optimal <= (2.0 * m - 3) / choose(n, m) + 1e-12,
                      "mixed N=%u m=%u loses %.6f at k=m, more than (2m-3)/C(N,m) above %.6f", n, m, lost, optimal);
            }
        }
    }
    CHECK(checked > 500, "only %u cases checked", checked);

    /* Large N: no enumeration, the closed forms still work. */
    double big;
    CHECK(ckpt_placement_enumerate(CKPT_PLACE_GROUP, 128, 2, 2, &big) == -E2BIG, "N=128 enumerated");
    CHECK(ckpt_placement_recovery(CKPT_PLACE_RING, 1024, 3, 4) > 0.99, "ring N=1024 m=3 k=4: %.6f",
          ckpt_placement_recovery(CKPT_PLACE_RING, 1024, 3, 4));

    if (failures)
        printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
