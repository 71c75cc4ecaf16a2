/*
 * The timeline as an SVG, written by hand: for each rank drawn (one, or
 * every rank of a node, stacked over one time axis: their clocks are the
 * node's), one lane per kind of traffic (compute, collectives,
 * device-to-host copies, commits, network sends, disk writes) over a time
 * axis in ms, dashed lines where iterations end, and a legend.  Compute is what the rank did between its collectives.
 * The node agent's lanes (network sends, disk writes) come from its own
 * file; while it has recorded nothing they are drawn empty and say so, so
 * that a reader never takes "not measured" for "idle".  Every string written is
 * one of ours: nothing read from the file reaches the markup unescaped.
 */
#include <stdio.h>

#include "inspect.h"
#include "timeline.h"

#define WIDTH 1200
#define LEFT 190  /* lane labels */
#define RIGHT 30
#define TOP 50
#define LANE 34
#define BAR 22
#define GAP 28    /* between two ranks' lanes: room for the next rank's title */

enum lane { L_COMPUTE, L_COLL, L_COPY, L_COMMIT, L_NET, L_DISK, L_STANDBY, NLANES };

static const struct {
    const char *label, *color;
    uint16_t kind; /* the agent's lanes: recorded once any event of it is in the file */
} lanes[NLANES] = {
    [L_COMPUTE] = {"compute", "#9ecae1", 0},
    [L_COLL] = {"collectives", "#fd8d3c", 0},
    [L_COPY] = {"device-to-host copies", "#74c476", 0},
    [L_COMMIT] = {"commits (checksum)", "#9e9ac8", 0},
    [L_NET] = {"network sends", "#6baed6", CKPT_TL_NET},
    [L_DISK] = {"disk writes", "#969696", CKPT_TL_DISK},
    [L_STANDBY] = {"standby", "#e7298a", CKPT_TL_STANDBY},
};

struct scale {
    uint64_t t0, t1;
};

static double x_of(const struct scale *s, uint64_t t)
{
    if (t < s->t0)
        t = s->t0;
    if (t > s->t1)
        t = s->t1;
    return LEFT + (double)(t - s->t0) * (WIDTH - LEFT - RIGHT) / (double)(s->t1 - s->t0);
}

static void bar(FILE *f, const struct scale *s, int top, enum lane l, uint64_t start, uint64_t end, const char *what,
                uint64_t iteration)
{
    double x = x_of(s, start), w = x_of(s, end) - x;
    fprintf(f,
            "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"#444\" "
            "stroke-width=\"0.3\"><title>%s, iteration %llu: %.3f ms</title></rect>\n",
            x, top + (int)l * LANE + (LANE - BAR) / 2, w < 0.5 ? 0.5 : w, BAR, lanes[l].color, what,
            (unsigned long long)iteration, (end - start) / 1e6);
}

/* A tick every 1, 2 or 5 x 10^k ms, about ten over the width. */
static double tick_ms(double span_ms)
{
    static const double m[] = {1, 2, 5};
    for (double p = 1e-3;; p *= 10)
        for (int i = 0; i < 3; i++)
            if (span_ms / (m[i] * p) <= 12)
                return m[i] * p;
}

static void axis(FILE *f, const struct scale *s, int y)
{
    double span = (s->t1 - s->t0) / 1e6, step = tick_ms(span);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", LEFT, y, WIDTH - RIGHT, y);
    for (double ms = 0; ms <= span + 1e-9; ms += step) {
        double x = x_of(s, s->t0 + (uint64_t)(ms * 1e6));
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#000\"/>\n", x, y, x, y + 5);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", x, y + 18, ms);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">time (ms)</text>\n",
            (LEFT + WIDTH - RIGHT) / 2, y + 34);
}

static void legend(FILE *f, int y)
{
    fprintf(f, "<g id=\"legend\">\n");
    for (int l = 0; l < NLANES; l++) {
        int x = LEFT + l * 160;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#444\"/>\n", x, y,
                lanes[l].color);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n", x + 18, y + 11, lanes[l].label);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" stroke-dasharray=\"4 3\"/>\n",
            LEFT, y + 28, LEFT + 14, y + 28);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">end of an iteration</text>\n</g>\n", LEFT + 18, y + 32);
}

/* The lanes of one rank, their top at @top. */
static void rank_lanes(FILE *f, const struct scale *s, const struct tl_rank *r, uint64_t a, uint64_t b, int top)
{
    for (int l = 0; l < NLANES; l++) {
        int y = top + l * LANE;
        fprintf(f, "<g class=\"lane\" id=\"lane-%u-%d\">\n", r->rank, l);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", LEFT, y,
                WIDTH - LEFT - RIGHT, LANE, l % 2 ? "#f7f7f7" : "#efefef");
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"end\">%s</text>\n", LEFT - 8,
                y + LANE / 2 + 4, lanes[l].label);
        bool recorded = !lanes[l].kind;
        for (size_t i = 0; i < r->n && !recorded; i++)
            recorded = r->ev[i].kind == lanes[l].kind;
        if (!recorded)
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#777\">not recorded yet</text>\n",
                    LEFT + 8, y + LANE / 2 + 4);
        fprintf(f, "</g>\n");
    }

    /* Compute: the spans between one collective's end and the next one's
     * start (events are oldest first, collectives of one rank in order). */
    uint64_t busy_until = s->t0;
    for (size_t i = 0; i < r->n; i++) {
        const struct ckpt_tl_event *e = &r->ev[i];
        if (e->iteration < a || e->iteration > b)
            continue;
        switch (e->kind) {
        case CKPT_TL_COLL:
            if (e->start_ns > busy_until)
                bar(f, s, top, L_COMPUTE, busy_until, e->start_ns, "compute", e->iteration);
            if (e->end_ns > busy_until)
                busy_until = e->end_ns;
            bar(f, s, top, L_COLL, e->start_ns, e->end_ns, ckpt_tl_func_name(e->detail), e->iteration);
            break;
        case CKPT_TL_COPY:
            bar(f, s, top, L_COPY, e->start_ns, e->end_ns,
                e->flags & CKPT_TL_SPILL   ? "snapshot copy, spilled to the update"
                : e->flags & CKPT_TL_TOUCH ? "snapshot copy, before a write"
                                           : "snapshot copy",
                e->iteration);
            break;
        case CKPT_TL_NET:
            bar(f, s, top, L_NET, e->start_ns, e->end_ns, "replica send", e->iteration);
            break;
        case CKPT_TL_DISK:
            bar(f, s, top, L_DISK, e->start_ns, e->end_ns, "persist", e->iteration);
            break;
        case CKPT_TL_STANDBY: {
            char what[96];
            snprintf(what, sizeof(what), "the standby at iteration %llu, %u behind", (unsigned long long)e->arg,
                     e->detail);
            bar(f, s, top, L_STANDBY, e->start_ns, e->end_ns, what, e->iteration);
            break;
        }
        case CKPT_TL_COMMIT:
            bar(f, s, top, L_COMMIT, e->start_ns, e->end_ns, "commit", e->iteration);
            break;
        case CKPT_TL_BOUNDARY: {
            double x = x_of(s, e->start_ns);
            if (e->start_ns > busy_until)
                bar(f, s, top, L_COMPUTE, busy_until, e->start_ns, "compute", e->iteration);
            busy_until = e->start_ns > busy_until ? e->start_ns : busy_until;
            fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#d62728\" "
                       "stroke-dasharray=\"4 3\"/>\n", x, top - 6, x, top + NLANES * LANE);
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"10\" text-anchor=\"end\" fill=\"#d62728\">"
                       "end of %llu</text>\n", x - 2, top - 8, (unsigned long long)e->iteration);
            break;
        }
        default:
            break;
        }
    }
}

void timeline_svg(FILE *f, const struct tl_rank *r, size_t nranks, uint64_t a, uint64_t b)
{
    struct scale s = {UINT64_MAX, 0};
    bool gpu = false;

    for (size_t k = 0; k < nranks; k++)
        for (size_t i = 0; i < r[k].n; i++) {
            const struct ckpt_tl_event *e = &r[k].ev[i];
            if (e->iteration < a || e->iteration > b)
                continue;
            s.t0 = e->start_ns < s.t0 ? e->start_ns : s.t0;
            s.t1 = e->end_ns > s.t1 ? e->end_ns : s.t1;
            gpu |= e->kind == CKPT_TL_COLL && (e->flags & CKPT_TL_GPU_TIME);
        }
    if (s.t1 <= s.t0)
        s.t1 = s.t0 + 1000000;
    int block = NLANES * LANE + GAP, axis_y = TOP + (int)nranks * block - GAP + 8, height = axis_y + 100;

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
               WIDTH, height, WIDTH, height);
    if (nranks == 1)
        fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\">rank %u, iterations %llu..%llu (collectives: %s)</text>\n",
                LEFT, r[0].rank, (unsigned long long)a, (unsigned long long)b,
                gpu ? "GPU timer, NCCL profiler" : "host times around the NCCL calls");
    else
        fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"15\">%zu ranks of this node, iterations %llu..%llu "
                   "(collectives: %s)</text>\n", LEFT, nranks, (unsigned long long)a, (unsigned long long)b,
                gpu ? "GPU timer, NCCL profiler" : "host times around the NCCL calls");
    for (size_t k = 0; k < nranks; k++) {
        int top = TOP + (int)k * block;
        if (nranks > 1)
            fprintf(f, "<text x=\"8\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">rank %u</text>\n",
                    top + 14, r[k].rank);
        rank_lanes(f, &s, &r[k], a, b, top);
    }
    axis(f, &s, axis_y);
    legend(f, axis_y + 48);
    fprintf(f, "</svg>\n");
}
