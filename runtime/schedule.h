/*
 * The checkpoint schedule: when, inside an iteration, the training's
 * collectives run (the gap profile), and where checkpoint traffic may go
 * so that it never shares the link with one.  A profile is built from the
 * timeline (runtime/timeline.h) of a few iterations: each collective's span
 * as an offset from its iteration's start, merged over the iterations and
 * widened by a margin; the idle gaps are what is left of the period.  The
 * rank publishes its profile as <arena rank dir>/schedule (versioned,
 * checksummed, rewritten at every boundary with the newest iteration start)
 * and the node agent reads it to pace its sends.  Pure logic and small file
 * I/O: no CUDA, no threads, so unit tests drive it directly.
 */
#ifndef CKPT_SCHED_H
#define CKPT_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "timeline.h"

#define CKPT_SCHED_MAGIC "CKPTSCH1"
#define CKPT_SCHED_VERSION 1
#define CKPT_SCHED_FILE "schedule"
#define CKPT_SCHED_SPANS 32       /* collectives per iteration a profile keeps; later ones share the last gap */
#define CKPT_SCHED_PROFILE_ITERS 4 /* iterations a profile is built from */
#define CKPT_SCHED_CHANGE_PCT 20  /* the period or a span moving this much re-profiles */

/* CKPT_SCHED's values, in config.def's order. */
enum ckpt_sched_mode { CKPT_SCHED_GAP, CKPT_SCHED_EAGER, CKPT_SCHED_OFF };

/* A collective's busy span: offsets in ns from the start of an iteration;
 * spans start in order, and may overlap once widened. */
struct ckpt_sched_span {
    uint64_t start_ns, end_ns;
};

struct ckpt_sched_profile {
    char magic[8];       /* CKPT_SCHED_MAGIC */
    uint32_t version;    /* CKPT_SCHED_VERSION */
    uint32_t bytes;      /* sizeof(struct ckpt_sched_profile) */
    uint32_t rank;
    uint32_t nspans;     /* collectives per iteration (at most CKPT_SCHED_SPANS kept) */
    uint64_t period_ns;  /* median iteration length */
    uint64_t margin_ns;  /* each collective's span was widened by this on both sides */
    uint64_t from_iter, to_iter; /* the iterations it was built from */
    uint64_t epoch;      /* profiles built in this run: 1 for the first, +1 per re-profile */
    uint64_t anchor_iter; /* the newest iteration that started ... */
    uint64_t anchor_ns;  /* ... at this CLOCK_MONOTONIC time */
    uint64_t copy_bps;   /* the rank's measured device-to-host rate, bytes/s (0: not yet) */
    struct ckpt_sched_span span[CKPT_SCHED_SPANS];
    /* The shortest idle time seen in one iteration before collective k
     * (k = 0: from the iteration's start; k > 0: from collective k-1's
     * end), less twice the margin.  Copies gated on collective k-1's end
     * fit in it whatever the iteration's jitter moved both. */
    uint64_t gap_ns[CKPT_SCHED_SPANS];
    uint64_t sum;        /* XXH3-64 of the profile with this field 0 */
};

_Static_assert(sizeof(struct ckpt_sched_profile) == 96 + 24 * CKPT_SCHED_SPANS, "schedule layout");

/* One stretch of checkpoint traffic the placement allows. */
struct ckpt_sched_slot {
    uint64_t start_ns, end_ns; /* offsets from the iteration's start */
    uint64_t bytes;            /* what fits in it at the given rate */
};

/* Builds p from the timeline events ev[0..n) (any order) of iterations
 * from..to: each needs its own end and the previous iteration's end
 * (boundary events).  span[k] covers the k-th collective of every such
 * iteration (earliest start to latest end: their jitter is inside), widened
 * by margin_ns: 2% of the period, at least 20 us.  Returns 0, or -EAGAIN when fewer than two iterations
 * are complete in ev or they hold different numbers of collectives. */
int ckpt_sched_build(const struct ckpt_tl_event *ev, size_t n, uint64_t from, uint64_t to,
                     struct ckpt_sched_profile *p);

/* Whether b differs from a enough to re-profile: another number of busy
 * spans, or the period or any span's ends moved by more than pct percent
 * of a's period. */
bool ckpt_sched_changed(const struct ckpt_sched_profile *a, const struct ckpt_sched_profile *b, unsigned pct);

/* The placement: out[k] is the idle stretch before collective k, gap_ns[k]
 * long from the iteration's start (k = 0) or from the end of collective
 * k-1's span, with the bytes it carries at bytes_per_s, first gaps first,
 * until `bytes` are placed.  Started at collective k-1's end, a slot ends
 * before collective k in every profiled iteration.  Returns the number of slots (nspans, at
 * most max); *placed (may be NULL) the bytes they carry, less than `bytes`
 * when the gaps are too short: the rest waits for the update. */
size_t ckpt_sched_place(const struct ckpt_sched_profile *p, uint64_t bytes, uint64_t bytes_per_s,
                        struct ckpt_sched_slot *out, size_t max, uint64_t *placed);

/* The end of the last busy span (the update follows it), or 0. */
uint64_t ckpt_sched_last_busy(const struct ckpt_sched_profile *p);

/* Seals p (magic, version, checksum) and writes it to dir/schedule through
 * a new file renamed over the old.  Returns 0 or -errno. */
int ckpt_sched_write(const char *dir, struct ckpt_sched_profile *p);

/* Reads and checks dir/schedule.  Returns 0, -ENOENT when there is none
 * yet, or -EINVAL with the reason in why (bad magic, version, checksum). */
int ckpt_sched_read(const char *dir, struct ckpt_sched_profile *p, char *why, size_t whylen);

/* ---- the node agent's side ---- */

/* A rank's published schedule as the agent follows it. */
struct ckpt_sched_reader {
    char dir[4096];
    struct ckpt_sched_profile p;
    bool have;
    uint64_t read_ns; /* when p was last read */
};

/* Starts following the schedule in rankdir (the rank's arena directory).
 * Nothing is read yet: a rank that has not published one is idle to the
 * waits below.  Returns 0 or -ENAMETOOLONG. */
int ckpt_sched_reader_open(struct ckpt_sched_reader *r, const char *rankdir);

/* Waits until now is inside an idle gap of the rank's iteration with room
 * for `bytes` at bytes_per_s (and the margin), at most max_ms.  The
 * schedule is re-read at most every millisecond.  Returns 0 when such a
 * gap holds now (or no schedule is published, or the rank has not started
 * an iteration for four periods: nothing to contend with), -E2BIG at once
 * when no gap of the period is that long (send smaller pieces), or
 * -ETIMEDOUT after max_ms. */
int ckpt_sched_wait(struct ckpt_sched_reader *r, uint64_t bytes, uint64_t bytes_per_s, unsigned max_ms);

/* The idle time left at now_ns (CLOCK_MONOTONIC) in p's current gap, in
 * ns; 0 inside a busy span.  now_ns before the anchor counts from it. */
uint64_t ckpt_sched_idle_left(const struct ckpt_sched_profile *p, uint64_t now_ns);

#endif
