/*
 * The coordinator's replication rounds (coord.h): every node says which
 * iterations its ranks keep (HELD); when all keep the same one, every node
 * replicates it (REPLICATE), and once all have (REPLICATED) it is durable
 * (DURABLE, with the next target).  When the nodes kept different
 * iterations, a target is aimed far enough ahead that the word reaches
 * every node before its ranks get there.
 */
#include <stdio.h>

#include "config.h"
#include "coord_int.h"
#include "log.h"
#include "resume.h"

#define LEAD_MAX 65536 /* iterations: the farthest a target is aimed past the nodes' newest commit */

/* The iteration every node keeps, newest first, past what is durable; 0: none. */
static uint64_t common_held(const struct coord *c)
{
    const struct coord_held *h0 = &c->nodes[0].h;
    uint64_t cand[2] = { h0->newest, h0->other }, best = 0;
    for (int k = 0; k < 2; k++) {
        if (!cand[k] || cand[k] <= c->durable || cand[k] <= best)
            continue;
        bool all = true;
        for (unsigned j = 1; j < c->n && all; j++)
            all = c->nodes[j].h.newest == cand[k] || c->nodes[j].h.other == cand[k];
        if (all)
            best = cand[k];
    }
    return best;
}

/* A HELD arrived: when every node has said what it keeps, replicate or aim again. */
void coord_held(struct coord *c)
{
    if (c->replicating)
        return;
    uint64_t top = c->target;
    for (unsigned j = 0; j < c->n; j++) {
        if (!c->nodes[j].held_in)
            return;
        if (c->nodes[j].h.committed >= top)
            top = c->nodes[j].h.committed + 1;
    }
    uint64_t it = common_held(c);
    for (unsigned j = 0; j < c->n; j++)
        c->nodes[j].held_in = c->nodes[j].replicated = false;
    if (it) {
        struct coord_iter m = { .iteration = it };
        c->replicating = it;
        c->replicate_value = 0;
        c->replicate_at = ckpt_now_s();
        c->lead /= 2;
        coord_tell_all(c, COORD_REPLICATE, &m, sizeof(m));
        return;
    }
    /* The nodes kept different iterations: aim past all of them.  The
     * target must reach every node before its ranks get there, and through
     * etcd, or on a loaded machine, that takes as long as many iterations:
     * nodes that learn it late keep later iterations, and never meet.  How
     * late the latest learned it (what it kept, past the target) says how
     * far ahead to aim: twice that.  Doubling instead overshot, and left a
     * busy job's newest durable iteration a thousand iterations behind. */
    uint64_t every = (uint64_t)ckpt_cfg_int(CFG_EVERY), late = 0;
    bool measured = false;
    for (unsigned j = 0; j < c->n; j++)
        if (c->nodes[j].h.newest >= c->target) {
            uint64_t l = c->nodes[j].h.newest - c->target;
            late = l > late ? l : late;
            measured = true;
        }
    /* A lateness many times the last is a stall (etcd without a quorum
     * while the ranks trained on), not message lateness: the last lead is
     * doubled instead, past the newest any node kept. */
    uint64_t bound = c->lead > c->late_seen ? c->lead : c->late_seen;
    bound = bound > every ? bound : every;
    if (measured && late > 8 * bound) {
        c->lead = 2 * bound;
    } else if (measured) {
        c->lead = 2 * late + every;
        c->late_seen = late;
    }
    else
        c->lead = c->lead ? 2 * c->lead : every;
    if (c->lead > LEAD_MAX)
        c->lead = LEAD_MAX;
    c->target = top + c->lead - 1;
    struct coord_iter m = { .iteration = c->durable, .value = c->target };
    ckpt_log(CKPT_DEBUG, "the nodes keep different iterations (the latest learned the target %llu iterations "
             "late); next target %llu", (unsigned long long)late, (unsigned long long)c->target);
    c->durable_at = ckpt_now_s();
    coord_tell_all(c, COORD_DURABLE, &m, sizeof(m));
}

void coord_replicated(struct coord *c, unsigned j, const struct coord_status *st)
{
    if (st->iteration != c->replicating)
        return;
    c->nodes[j].replicated = true;
    c->nodes[j].repl_status = st->status;
    if (st->status < 0 && !c->nodes[j].repl_warned)
        ckpt_log(CKPT_WARN, "node %u could not replicate iteration %llu (%s): replication falls behind; the "
                 "next one is tried", j, (unsigned long long)st->iteration, coord_status_text(st->status));
    c->nodes[j].repl_warned = st->status < 0;
    for (unsigned i = 0; i < c->n; i++)
        if (!c->nodes[i].replicated)
            return;
    bool ok = true;
    for (unsigned i = 0; i < c->n; i++)
        ok &= c->nodes[i].repl_status == 0;
    c->rounds++;
    c->failed_rounds += !ok;
    if (ok) {
        c->durable = c->replicating;
        c->ever_durable = true;
        ckpt_log(CKPT_DEBUG, "iteration %llu is held by every node and its replicas", (unsigned long long)c->durable);
    }
    c->target = c->replicating + 1;
    c->replicating = 0;
    for (unsigned i = 0; i < c->n; i++)
        c->nodes[i].held_in = false;
    struct coord_iter m = { .iteration = c->durable, .value = c->target };
    c->durable_at = ckpt_now_s();
    coord_tell_all(c, COORD_DURABLE, &m, sizeof(m));
}

/* A round's message lost on its way would leave a node pinning what it
 * kept and the round unended: whoever has not answered is told again
 * while nothing moves (both messages are idempotent at a node). */
#define DURABLE_AGAIN_S 2.0
#define REPLICATE_AGAIN_S 10.0
void coord_remind(struct coord *c, double now)
{
    bool round = c->replicating != 0;
    double *at = round ? &c->replicate_at : &c->durable_at;
    if (c->phase != RUN || !*at || now - *at < (round ? REPLICATE_AGAIN_S : DURABLE_AGAIN_S))
        return;
    struct coord_iter m = round ? (struct coord_iter){ .iteration = c->replicating, .value = c->replicate_value }
                                : (struct coord_iter){ .iteration = c->durable, .value = c->target };
    for (unsigned j = 0; j < c->n; j++)
        if (!(round ? c->nodes[j].replicated : c->nodes[j].held_in))
            coord_tell(c, j, round ? COORD_REPLICATE : COORD_DURABLE, &m, sizeof(m), NULL, 0);
    *at = now;
}
