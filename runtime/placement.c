/*
 * The placements and recovery probabilities of placement.h.  Counting is
 * done in long double: C(n,k) overflows 64 bits long before the
 * probabilities stop being interesting, and the alternating sums below are
 * only ever evaluated for the small k (failures at once) that matter.  It
 * must stay free of I/O (but describe's) and of allocation.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "placement.h"

const char *ckpt_placement_name(enum ckpt_placement p)
{
    static const char *const names[] = {"auto", "group", "ring", "mixed"};
    return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}

enum ckpt_placement ckpt_placement_choose(enum ckpt_placement p, unsigned n, unsigned m)
{
    if (p != CKPT_PLACE_AUTO)
        return p;
    return m && n % m == 0 ? CKPT_PLACE_GROUP : CKPT_PLACE_MIXED;
}

int ckpt_placement_check(enum ckpt_placement p, unsigned n, unsigned m, char *why, size_t whylen)
{
    p = ckpt_placement_choose(p, n, m);
    if (p < CKPT_PLACE_GROUP || p > CKPT_PLACE_MIXED) {
        snprintf(why, whylen, "unknown placement %d", (int)p);
        return -EINVAL;
    }
    if (m < 1 || m > n) {
        snprintf(why, whylen, "%u replicas cannot be placed on %u nodes: 1 <= replicas <= nodes", m, n);
        return -EINVAL;
    }
    if (p == CKPT_PLACE_GROUP && n % m) {
        snprintf(why, whylen, "group placement needs the replicas (%u) to divide the nodes (%u); ring or mixed do not",
                 m, n);
        return -EINVAL;
    }
    return 0;
}

int ckpt_placement_holders(enum ckpt_placement p, unsigned n, unsigned m, unsigned node, unsigned *out)
{
    char why[160];
    if (ckpt_placement_check(p, n, m, why, sizeof(why)) < 0 || node >= n)
        return -EINVAL;
    p = ckpt_placement_choose(p, n, m);

    /* Mixed: the first floor(n/m)-1 groups, then a ring of what is left. */
    unsigned ring_first = 0, ring_len = n;
    if (p == CKPT_PLACE_MIXED) {
        ring_first = (n / m - 1) * m;
        ring_len = n - ring_first;
    }
    if (p == CKPT_PLACE_GROUP || (p == CKPT_PLACE_MIXED && node < ring_first)) {
        unsigned base = node / m * m, j = 1;
        out[0] = node;
        for (unsigned i = base; i < base + m; i++)
            if (i != node)
                out[j++] = i;
        return 0;
    }
    for (unsigned i = 0; i < m; i++)
        out[i] = ring_first + (node - ring_first + i) % ring_len;
    return 0;
}

int ckpt_placement_sources(enum ckpt_placement p, unsigned n, unsigned m, unsigned node, unsigned *out)
{
    unsigned holders[m ? m : 1];
    int count = 0;

    if (node >= n)
        return -EINVAL;
    for (unsigned j = 0; j < n; j++) {
        if (ckpt_placement_holders(p, n, m, j, holders) < 0)
            return -EINVAL;
        for (unsigned i = 1; i < m; i++)
            if (holders[i] == node)
                out[count++] = j;
    }
    return count;
}

static long double binom(unsigned n, unsigned k)
{
    if (k > n)
        return 0;
    if (k > n - k)
        k = n - k;
    long double c = 1;
    for (unsigned i = 1; i <= k; i++)
        c = c * (n - k + i) / i;
    return c;
}

/* Ways to fail j nodes of `groups` groups of m without failing a whole
 * group: inclusion-exclusion over the groups that fail entirely. */
static long double group_good(unsigned groups, unsigned m, unsigned j)
{
    long double sum = 0;
    for (unsigned i = 0; i <= groups && (unsigned long long)i * m <= j; i++) {
        long double t = binom(groups, i) * binom((groups - i) * m, j - i * m);
        sum += i % 2 ? -t : t;
    }
    return sum;
}

/* Ways to write s as an ordered sum of g parts, each 0..c. */
static long double bounded_parts(unsigned g, unsigned s, unsigned c)
{
    if (g == 0)
        return s == 0;
    long double sum = 0;
    for (unsigned i = 0; i <= g && (unsigned long long)i * (c + 1) <= s; i++) {
        long double t = binom(g, i) * binom(s - i * (c + 1) + g - 1, g - 1);
        sum += i % 2 ? -t : t;
    }
    return sum;
}

/* Ways to fail j nodes of a ring of r without failing m cyclically
 * consecutive ones.  Some node survives (j < r); say the first surviving
 * one is at position a < m, after a failed ones.  The z = r - j - 1 other
 * survivors cut the rest into z + 1 runs of failed nodes: each of the
 * first z shorter than m, the last (which wraps round onto the first a)
 * shorter than m - a. */
static long double ring_good(unsigned r, unsigned m, unsigned j)
{
    if (j < m)
        return binom(r, j);
    if (j >= r)
        return 0;
    unsigned z = r - j - 1;
    long double sum = 0;
    for (unsigned a = 0; a < m && a <= j; a++)
        for (unsigned t = 0; t < m - a && t <= j - a; t++)
            sum += bounded_parts(z, j - a - t, m - 1);
    return sum;
}

double ckpt_placement_recovery(enum ckpt_placement p, unsigned n, unsigned m, unsigned k)
{
    char why[160];
    if (ckpt_placement_check(p, n, m, why, sizeof(why)) < 0 || k > n)
        return -1;
    long double good;
    switch (ckpt_placement_choose(p, n, m)) {
    case CKPT_PLACE_GROUP:
        good = group_good(n / m, m, k);
        break;
    case CKPT_PLACE_RING:
        good = ring_good(n, m, k);
        break;
    default: {
        /* Independent parts: split the k failures between them. */
        unsigned groups = n / m - 1, r = n - groups * m;
        good = 0;
        for (unsigned j = 0; j <= k; j++)
            good += group_good(groups, m, j) * ring_good(r, m, k - j);
    }
    }
    return (double)(good / binom(n, k));
}

int ckpt_placement_enumerate(enum ckpt_placement p, unsigned n, unsigned m, unsigned k, double *pr)
{
    unsigned holders[m ? m : 1];
    uint64_t lost_if[64];
    char why[160];

    if (ckpt_placement_check(p, n, m, why, sizeof(why)) < 0 || k > n)
        return -EINVAL;
    if (n > 63 || binom(n, k) > (1 << 24))
        return -E2BIG;
    for (unsigned i = 0; i < n; i++) {
        ckpt_placement_holders(p, n, m, i, holders);
        lost_if[i] = 0;
        for (unsigned h = 0; h < m; h++)
            lost_if[i] |= 1ull << holders[h];
    }
    uint64_t sets = 0, good = 0, end = 1ull << n;
    /* Every k-subset of n bits in increasing order (Gosper's hack). */
    for (uint64_t s = (1ull << k) - 1; s < end;) {
        int lost = 0;
        for (unsigned i = 0; i < n && !lost; i++)
            lost = (s & lost_if[i]) == lost_if[i];
        sets++;
        good += !lost;
        if (!s)
            break;
        uint64_t low = s & -s, ripple = s + low;
        s = (((ripple ^ s) >> 2) / low) | ripple;
    }
    *pr = (double)good / (double)sets;
    return 0;
}

double ckpt_placement_bound(unsigned n, unsigned m, unsigned k)
{
    if (k < m)
        return 1;
    long double pr = 1 - n * binom(n - m, k - m) / (m * binom(n, k));
    return pr > 0 ? (double)pr : 0;
}

void ckpt_placement_describe(FILE *f, enum ckpt_placement p, unsigned n, unsigned m)
{
    unsigned holders[m ? m : 1];
    enum ckpt_placement chosen = ckpt_placement_choose(p, n, m);

    fprintf(f, "placement: %s%s, %u nodes, %u replicas (each node's snapshot on itself and %u peer%s)\n",
            ckpt_placement_name(chosen), p == CKPT_PLACE_AUTO ? " (auto)" : "", n, m, m - 1, m == 2 ? "" : "s");
    for (unsigned i = 0; i < n && i < 16; i++) {
        ckpt_placement_holders(chosen, n, m, i, holders);
        fprintf(f, "  node %u ->", i);
        for (unsigned h = 1; h < m; h++)
            fprintf(f, " %u", holders[h]);
        fprintf(f, "%s\n", m == 1 ? " (none)" : "");
    }
    if (n > 16)
        fprintf(f, "  ... (%u more nodes)\n", n - 16);
    for (unsigned k = 1; k <= m + 1 && k <= n; k++) {
        fprintf(f, "  %u node%s failed at once: recovery from memory %.1f%%", k, k == 1 ? "" : "s",
                100 * ckpt_placement_recovery(chosen, n, m, k));
        if (chosen == CKPT_PLACE_GROUP && k >= m)
            fprintf(f, " (GEMINI's bound %.1f%%)", 100 * ckpt_placement_bound(n, m, k));
        fputc('\n', f);
    }
}
