/*
 * The gap profile and the placement of checkpoint traffic in it
 * (schedule.h), for the rank (interpose/sched.c) and the node agent alike.
 * It must never place traffic inside a profiled collective span: every
 * slot it hands out lies in the complement of the widened spans.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "schedule.h"
#include "util.h"

#define MAX_ITERS 64

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int ckpt_sched_build(const struct ckpt_tl_event *ev, size_t n, uint64_t from, uint64_t to,
                     struct ckpt_sched_profile *p)
{
    uint64_t end[MAX_ITERS + 1] = {0}, len[MAX_ITERS], sorted[MAX_ITERS];
    unsigned count[MAX_ITERS] = {0};
    size_t nlen = 0;

    if (to < from || to - from >= MAX_ITERS || from == 0)
        return -EAGAIN;
    /* end[k]: the end of iteration from - 1 + k, i.e. the start of from + k. */
    for (size_t i = 0; i < n; i++)
        if (ev[i].kind == CKPT_TL_BOUNDARY && ev[i].iteration + 1 >= from && ev[i].iteration <= to)
            end[ev[i].iteration + 1 - from] = ev[i].end_ns;
    for (uint64_t it = from; it <= to; it++)
        if (end[it - from] && end[it - from + 1] > end[it - from])
            len[nlen++] = end[it - from + 1] - end[it - from];
    if (nlen < 2)
        return -EAGAIN;
    memcpy(sorted, len, nlen * sizeof(*len));
    qsort(sorted, nlen, sizeof(*sorted), cmp_u64);
    uint64_t period = sorted[nlen / 2], margin = period / 50;
    if (margin < 20000)
        margin = 20000;

    /* The k-th collective of every iteration, in the order they started:
     * its earliest start and latest end over the iterations. */
    memset(p, 0, sizeof(*p));
    uint64_t prev_end[MAX_ITERS] = {0}; /* of the iteration's previous collective, as an offset */
    for (size_t k = 0; k < CKPT_SCHED_SPANS; k++)
        p->gap_ns[k] = UINT64_MAX;
    for (size_t i = 0; i < n; i++) { /* events are oldest first: one iteration's collectives in order */
        uint64_t it = ev[i].iteration;
        if (ev[i].kind != CKPT_TL_COLL || it < from || it > to)
            continue;
        uint64_t s = end[it - from], e = end[it - from + 1];
        if (!s || e <= s || ev[i].end_ns < s)
            continue; /* the iteration is not complete in ev */
        unsigned k = count[it - from]++;
        if (k >= CKPT_SCHED_SPANS)
            continue;
        uint64_t a = ev[i].start_ns > s ? ev[i].start_ns - s : 0, b = ev[i].end_ns - s;
        if (!p->span[k].end_ns || a < p->span[k].start_ns)
            p->span[k].start_ns = a;
        if (b > p->span[k].end_ns)
            p->span[k].end_ns = b;
        uint64_t idle = a > prev_end[it - from] ? a - prev_end[it - from] : 0;
        if (idle < p->gap_ns[k])
            p->gap_ns[k] = idle;
        if (b > prev_end[it - from])
            prev_end[it - from] = b;
    }
    unsigned nc = 0;
    for (uint64_t it = from; it <= to; it++) {
        if (!end[it - from] || end[it - from + 1] <= end[it - from])
            continue;
        if (nc && count[it - from] != nc)
            return -EAGAIN; /* the iterations differ: not a pattern yet */
        nc = count[it - from];
    }
    p->nspans = nc < CKPT_SCHED_SPANS ? nc : CKPT_SCHED_SPANS;
    for (uint32_t k = 0; k < CKPT_SCHED_SPANS; k++)
        p->gap_ns[k] = k < p->nspans && p->gap_ns[k] != UINT64_MAX && p->gap_ns[k] > 2 * margin ?
                           p->gap_ns[k] - 2 * margin : 0;
    for (uint32_t k = 0; k < p->nspans; k++) { /* widened, in [0, period], starts in order */
        p->span[k].start_ns = p->span[k].start_ns > margin ? p->span[k].start_ns - margin : 0;
        if (k && p->span[k].start_ns < p->span[k - 1].start_ns)
            p->span[k].start_ns = p->span[k - 1].start_ns;
        p->span[k].end_ns = p->span[k].end_ns + margin;
        if (p->span[k].end_ns > period)
            p->span[k].end_ns = period;
        if (p->span[k].start_ns > p->span[k].end_ns)
            p->span[k].start_ns = p->span[k].end_ns;
    }
    p->period_ns = period;
    p->margin_ns = margin;
    p->from_iter = from;
    p->to_iter = to;
    return 0;
}

static uint64_t diff(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

bool ckpt_sched_changed(const struct ckpt_sched_profile *a, const struct ckpt_sched_profile *b, unsigned pct)
{
    uint64_t tol = a->period_ns / 100 * pct;

    if (a->nspans != b->nspans || diff(a->period_ns, b->period_ns) > tol)
        return true;
    for (uint32_t i = 0; i < a->nspans; i++)
        if (diff(a->span[i].start_ns, b->span[i].start_ns) > tol || diff(a->span[i].end_ns, b->span[i].end_ns) > tol)
            return true;
    return false;
}

size_t ckpt_sched_place(const struct ckpt_sched_profile *p, uint64_t bytes, uint64_t bytes_per_s,
                        struct ckpt_sched_slot *out, size_t max, uint64_t *placed)
{
    uint64_t done = 0;
    size_t k = 0;

    for (; k < p->nspans && k < max; k++) {
        uint64_t fits = (uint64_t)((double)p->gap_ns[k] * (double)bytes_per_s / 1e9);
        if (fits > bytes - done)
            fits = bytes - done;
        uint64_t t = k ? p->span[k - 1].end_ns : 0;
        out[k] = (struct ckpt_sched_slot){.start_ns = t, .end_ns = t + p->gap_ns[k], .bytes = fits};
        done += fits;
    }
    if (placed)
        *placed = done;
    return k;
}

uint64_t ckpt_sched_last_busy(const struct ckpt_sched_profile *p)
{
    return p->nspans ? p->span[p->nspans - 1].end_ns : 0;
}

static uint64_t checksum(const struct ckpt_sched_profile *p)
{
    struct ckpt_sched_profile c = *p;
    c.sum = 0;
    return XXH3_64bits(&c, sizeof(c));
}

int ckpt_sched_write(const char *dir, struct ckpt_sched_profile *p)
{
    char path[4096];

    if (snprintf(path, sizeof(path), "%s/%s", dir, CKPT_SCHED_FILE) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    memcpy(p->magic, CKPT_SCHED_MAGIC, sizeof(p->magic));
    p->version = CKPT_SCHED_VERSION;
    p->bytes = sizeof(*p);
    p->sum = checksum(p);
    return ckpt_write_whole(path, p, sizeof(*p));
}

int ckpt_sched_read(const char *dir, struct ckpt_sched_profile *p, char *why, size_t whylen)
{
    char path[4096];

    if (snprintf(path, sizeof(path), "%s/%s", dir, CKPT_SCHED_FILE) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(why, whylen, "%s: %s", path, strerror(errno));
        return -errno;
    }
    ssize_t n = read(fd, p, sizeof(*p));
    char extra;
    bool longer = n == (ssize_t)sizeof(*p) && read(fd, &extra, 1) == 1;
    close(fd);
    if (n < 8 || memcmp(p->magic, CKPT_SCHED_MAGIC, sizeof(p->magic)) != 0) {
        snprintf(why, whylen, "%s: not a schedule (bad magic)", path);
        return -EINVAL;
    }
    if (n != (ssize_t)sizeof(*p) || longer || p->version != CKPT_SCHED_VERSION || p->bytes != sizeof(*p)) {
        snprintf(why, whylen, "%s: schedule version %u of %zd bytes; this reader knows version %d (%zu bytes)", path,
                 p->version, n, CKPT_SCHED_VERSION, sizeof(*p));
        return -EINVAL;
    }
    if (checksum(p) != p->sum || p->nspans > CKPT_SCHED_SPANS || !p->period_ns) {
        snprintf(why, whylen, "%s: checksum mismatch: the file is damaged", path);
        return -EINVAL;
    }
    return 0;
}

/* ---- the node agent's side ---- */

int ckpt_sched_reader_open(struct ckpt_sched_reader *r, const char *rankdir)
{
    memset(r, 0, sizeof(*r));
    if (snprintf(r->dir, sizeof(r->dir), "%s", rankdir) >= (int)sizeof(r->dir))
        return -ENAMETOOLONG;
    return 0;
}

uint64_t ckpt_sched_idle_left(const struct ckpt_sched_profile *p, uint64_t now_ns)
{
    uint64_t rel = now_ns > p->anchor_ns ? (now_ns - p->anchor_ns) % p->period_ns : 0, t = 0;

    for (uint32_t i = 0; i < p->nspans; i++) { /* starts are in order; t: the busy time so far ends */
        if (rel < p->span[i].start_ns && rel >= t)
            return p->span[i].start_ns - rel;
        if (p->span[i].end_ns > t)
            t = p->span[i].end_ns;
        if (rel < t)
            return 0;
    }
    /* after the last span: idle into the next iteration, to its first span */
    return p->period_ns - rel + (p->nspans ? p->span[0].start_ns : p->period_ns);
}

/* The longest idle stretch of p's period, the one that wraps into the next
 * iteration included. */
static uint64_t longest_gap(const struct ckpt_sched_profile *p)
{
    uint64_t t = 0, best = 0;

    for (uint32_t i = 0; i < p->nspans; i++) {
        if (i && p->span[i].start_ns > t && p->span[i].start_ns - t > best)
            best = p->span[i].start_ns - t;
        if (p->span[i].end_ns > t)
            t = p->span[i].end_ns;
    }
    uint64_t wrap = p->period_ns - t + (p->nspans ? p->span[0].start_ns : 0);
    return wrap > best ? wrap : best;
}

int ckpt_sched_wait(struct ckpt_sched_reader *r, uint64_t bytes, uint64_t bytes_per_s, unsigned max_ms)
{
    uint64_t t0 = ckpt_now_ns(), deadline = t0 + (uint64_t)max_ms * 1000000ULL;
    char why[256];

    for (;;) {
        uint64_t now = ckpt_now_ns();
        if (!r->have || now - r->read_ns > 1000000) {
            r->have = ckpt_sched_read(r->dir, &r->p, why, sizeof(why)) == 0;
            r->read_ns = now;
        }
        if (!r->have || !r->p.nspans || now > r->p.anchor_ns + 4 * r->p.period_ns)
            return 0;
        uint64_t need = bytes_per_s ? (uint64_t)((double)bytes * 1e9 / (double)bytes_per_s) : 0;
        need += r->p.margin_ns;
        uint64_t longest = longest_gap(&r->p);
        if (need > longest)
            return -E2BIG;
        uint64_t left = ckpt_sched_idle_left(&r->p, now);
        if (left >= need)
            return 0;
        if (now >= deadline)
            return -ETIMEDOUT;
        /* Sleep to the end of this busy stretch or short gap, at most to
         * the deadline and at most a millisecond (the schedule moves). */
        uint64_t nap = left ? left : 50000;
        if (nap > 1000000)
            nap = 1000000;
        if (now + nap > deadline)
            nap = deadline - now;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(nap ? nap : 1000)};
        nanosleep(&ts, NULL);
    }
}
