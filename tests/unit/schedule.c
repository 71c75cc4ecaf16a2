/*
 * The checkpoint schedule (runtime/schedule.h): a profile built from a
 * synthetic timeline puts each collective's span where it ran (jitter
 * inside, widened by the margin); the placement never hands out a slot
 * longer than the gap it follows in any profiled iteration, nor more bytes
 * than it carries at the rate, over a table of patterns and rates; a moved pattern is seen as a
 * change; the published file reads back and a damaged one is refused; the
 * agent's wait answers at once inside a long gap and refuses what no gap
 * can carry.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "schedule.h"
#include "check.h"
#include "util.h"

#define MS 1000000ULL

/* Iterations 1..iters of period_ms, each with the collectives at
 * [at[k], at[k] + len[k]) ms, every second iteration shifted by jitter_us. */
static size_t synth(struct ckpt_tl_event *ev, int iters, uint64_t period_ms, const double *at, const double *len,
                    int ncoll, unsigned jitter_us)
{
    size_t n = 0;
    uint64_t t = 1000 * MS;
    ev[n++] = (struct ckpt_tl_event){.start_ns = t, .end_ns = t, .iteration = 0, .kind = CKPT_TL_BOUNDARY};
    for (int it = 1; it <= iters; it++) {
        uint64_t j = it % 2 ? jitter_us * 1000ULL : 0;
        for (int k = 0; k < ncoll; k++)
            ev[n++] = (struct ckpt_tl_event){.start_ns = t + (uint64_t)(at[k] * MS) + j,
                                             .end_ns = t + (uint64_t)((at[k] + len[k]) * MS) + j,
                                             .iteration = (uint64_t)it, .kind = CKPT_TL_COLL};
        t += period_ms * MS;
        ev[n++] = (struct ckpt_tl_event){.start_ns = t, .end_ns = t, .iteration = (uint64_t)it,
                                         .kind = CKPT_TL_BOUNDARY};
    }
    return n;
}

static const struct {
    const char *name;
    uint64_t period_ms;
    int ncoll;
    double at[4], len[4];
    unsigned jitter_us;
} patterns[] = {
    {"one collective at the end", 100, 1, {80}, {10}, 0},
    {"three spread, jitter", 100, 3, {20, 45, 80}, {5, 5, 10}, 500},
    {"back to back", 50, 4, {10, 12, 14, 16}, {2, 2, 2, 2}, 100},
    {"first at the start", 40, 2, {0, 30}, {5, 5}, 0},
};

static const uint64_t rates[] = {100000000ULL, 2000000000ULL, 25000000000ULL};

int main(void)
{
    static struct ckpt_tl_event ev[1024];
    struct ckpt_sched_profile p, q;
    struct ckpt_sched_slot slot[CKPT_SCHED_SPANS];
    char why[256];

    for (size_t c = 0; c < sizeof(patterns) / sizeof(patterns[0]); c++) {
        size_t n = synth(ev, 8, patterns[c].period_ms, patterns[c].at, patterns[c].len, patterns[c].ncoll,
                         patterns[c].jitter_us);
        int rc = ckpt_sched_build(ev, n, 3, 6, &p);
        CHECK(rc == 0, "%s: build %d", patterns[c].name, rc);
        if (rc)
            continue;
        CHECK(p.period_ns == patterns[c].period_ms * MS, "%s: period %llu", patterns[c].name,
              (unsigned long long)p.period_ns);
        CHECK(p.nspans == (uint32_t)patterns[c].ncoll, "%s: %u spans", patterns[c].name, p.nspans);
        for (int k = 0; k < patterns[c].ncoll && k < (int)p.nspans; k++) {
            uint64_t a = (uint64_t)(patterns[c].at[k] * MS), b = (uint64_t)((patterns[c].at[k] + patterns[c].len[k]) * MS);
            CHECK(p.span[k].start_ns <= a && p.span[k].end_ns >= b + patterns[c].jitter_us * 1000ULL,
                  "%s: span %d [%llu, %llu) does not cover the collective", patterns[c].name, k,
                  (unsigned long long)p.span[k].start_ns, (unsigned long long)p.span[k].end_ns);
        }
        for (size_t r = 0; r < sizeof(rates) / sizeof(rates[0]); r++) {
            uint64_t placed = 0, want = 1ULL << 40, sum = 0;
            size_t ns = ckpt_sched_place(&p, want, rates[r], slot, CKPT_SCHED_SPANS, &placed);
            CHECK(ns == p.nspans, "%s: %zu slots", patterns[c].name, ns);
            for (size_t s = 0; s < ns; s++) {
                /* Started where the previous collective ended (or at the
                 * iteration's start), the slot ends before the next one
                 * starts, in both the jittered and the plain iterations. */
                for (unsigned j = 0; j < 2; j++) {
                    double shift = j ? patterns[c].jitter_us / 1000.0 : 0;
                    double from = s ? patterns[c].at[s - 1] + patterns[c].len[s - 1] + shift : 0;
                    double room_ms = patterns[c].at[s] + shift - from;
                    CHECK(slot[s].bytes == 0 || (slot[s].end_ns - slot[s].start_ns) / 1e6 <= room_ms,
                          "%s rate %llu: slot %zu lasts %.3f ms, the gap before collective %zu is %.3f ms",
                          patterns[c].name, (unsigned long long)rates[r], s,
                          (slot[s].end_ns - slot[s].start_ns) / 1e6, s, room_ms);
                }
                double carry = (double)(slot[s].end_ns - slot[s].start_ns) * (double)rates[r] / 1e9;
                CHECK(slot[s].bytes <= carry + 1, "%s: slot %zu holds %llu bytes, room for %.0f", patterns[c].name,
                      s, (unsigned long long)slot[s].bytes, carry);
                sum += slot[s].bytes;
            }
            CHECK(sum == placed && placed < want, "%s: placed %llu, slots %llu", patterns[c].name,
                  (unsigned long long)placed, (unsigned long long)sum);
            /* A small snapshot fits whole into the first gaps. */
            uint64_t small = placed / 2;
            ckpt_sched_place(&p, small, rates[r], slot, CKPT_SCHED_SPANS, &placed);
            CHECK(small == 0 || placed == small, "%s: %llu of %llu placed", patterns[c].name,
                  (unsigned long long)placed, (unsigned long long)small);
        }
        /* The same pattern is no change; a moved one is. */
        CHECK(ckpt_sched_build(ev, n, 5, 8, &q) == 0 && !ckpt_sched_changed(&p, &q, CKPT_SCHED_CHANGE_PCT),
              "%s: the same pattern seen as a change", patterns[c].name);
        double moved[4], most = 0;
        for (int k = 0; k < patterns[c].ncoll; k++) {
            moved[k] = patterns[c].at[k] * 0.5;
            most = patterns[c].at[k] - moved[k] > most ? patterns[c].at[k] - moved[k] : most;
        }
        n = synth(ev, 8, patterns[c].period_ms, moved, patterns[c].len, patterns[c].ncoll, 0);
        bool big = most > patterns[c].period_ms * CKPT_SCHED_CHANGE_PCT / 100.0 + 2;
        CHECK(ckpt_sched_build(ev, n, 3, 6, &q) == 0 && ckpt_sched_changed(&p, &q, CKPT_SCHED_CHANGE_PCT) == big,
              "%s: collectives moved by up to %.0f ms: change %s", patterns[c].name, most, big ? "missed" : "seen");
    }

    /* Too few iterations, or iterations that disagree, are no profile. */
    double at[2] = {10, 20}, len[2] = {1, 1};
    size_t n = synth(ev, 2, 50, at, len, 2, 0);
    CHECK(ckpt_sched_build(ev, n, 3, 6, &p) == -EAGAIN, "a profile from two iterations that are not there");
    n = synth(ev, 8, 50, at, len, 2, 0);
    ev[n - 2].iteration = 5; /* a third collective in iteration 5 */
    CHECK(ckpt_sched_build(ev, n, 3, 8, &p) == -EAGAIN, "iterations with different collectives profiled");

    /* The file: round trip, damage refused. */
    char dir[] = "/tmp/ckpt-sched-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    n = synth(ev, 8, 100, patterns[1].at, patterns[1].len, 3, 0);
    CHECK(ckpt_sched_build(ev, n, 3, 6, &p) == 0, "build");
    CHECK(ckpt_sched_read(dir, &q, why, sizeof(why)) == -ENOENT, "a schedule read where none is");
    p.anchor_ns = 5;
    CHECK(ckpt_sched_write(dir, &p) == 0, "write");
    CHECK(ckpt_sched_read(dir, &q, why, sizeof(why)) == 0 && memcmp(&p, &q, sizeof(p)) == 0, "read back: %s", why);
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_SCHED_FILE);
    FILE *f = fopen(path, "r+");
    if (f) {
        fseek(f, 40, SEEK_SET);
        fputc(0x55, f);
        fclose(f);
    }
    CHECK(ckpt_sched_read(dir, &q, why, sizeof(why)) == -EINVAL && strstr(why, "checksum"), "damage: %s", why);
    unlink(path);

    /* Idle time: inside the gap before the first collective (20 ms in),
     * none inside a collective. */
    CHECK(ckpt_sched_idle_left(&p, p.anchor_ns + 5 * MS) > 10 * MS, "idle at 5 ms: %llu",
          (unsigned long long)ckpt_sched_idle_left(&p, p.anchor_ns + 5 * MS));
    CHECK(ckpt_sched_idle_left(&p, p.anchor_ns + 22 * MS) == 0, "idle inside a collective");

    /* The agent's wait: no schedule published = idle; one no gap can carry = -E2BIG. */
    struct ckpt_sched_reader r;
    CHECK(ckpt_sched_reader_open(&r, dir) == 0, "reader");
    CHECK(ckpt_sched_wait(&r, 1 << 20, 1000000000ULL, 10) == 0, "no schedule must not hold the agent");
    p.anchor_ns = ckpt_now_ns();
    CHECK(ckpt_sched_write(dir, &p) == 0, "write");
    CHECK(ckpt_sched_wait(&r, 10ULL << 30, 1000000000ULL, 10) == -E2BIG, "10 GiB in a 100 ms period accepted");
    uint64_t t0 = ckpt_now_ns();
    int rc = ckpt_sched_wait(&r, 1 << 20, 1000000000ULL, 500);
    uint64_t at_ns = ckpt_now_ns();
    CHECK(rc == 0 && ckpt_sched_idle_left(&p, at_ns) >= 1000000, "wait %d: returned with %llu ns idle", rc,
          (unsigned long long)ckpt_sched_idle_left(&p, at_ns));
    CHECK(at_ns - t0 < 200 * MS, "waited %llu ms for a gap in a 100 ms period", (unsigned long long)(at_ns - t0) / MS);
    unlink(path);
    rmdir(dir);

    printf("%s\n", failures ? "FAIL" : "ok");
    return failures ? 1 : 0;
}
