/*
 * The period learner of boundary.h.  Tokens go into a bounded history;
 * while learning, each new token tries periods 1..MAX_PERIOD (smallest
 * first) over the last three repetitions, which costs O(P^2) per token only
 * until a period is found; once locked, each token is checked against the
 * period in O(1), and a mismatch (the program changed what an iteration
 * does) sends it back to learning.  It must never allocate: hooks call it.
 */
#include <pthread.h>
#include <string.h>

#include "boundary.h"

#define MAX_PERIOD 1024
#define HISTORY (4 * MAX_PERIOD) /* a power of two */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t history[HISTORY]; /* kind in the top bit */
static uint64_t ntok;             /* tokens seen since (re)learning began */
static unsigned every;            /* every:N mode when > 0 */
static bool markers;              /* nvtx:NAME mode */
static uint64_t nsync;            /* host syncs seen, every:N mode */

static unsigned period;  /* 0 while learning */
static unsigned phase;   /* position of the last token in the period */
static unsigned bd_pos;  /* position of the boundary token in the period */
static int coll_pos;     /* position of the last collective, or -1 */
static uint64_t iteration;
static bool seen_collective; /* then a period without one is not training */

#define SYNC_BIT (1ULL << 63)
static uint64_t tok(enum ckpt_tok_kind kind, uint64_t hash)
{
    return (hash & ~SYNC_BIT) | (kind == CKPT_TOK_SYNC ? SYNC_BIT : 0);
}

/* The token i places back from the newest (0 = newest). */
static uint64_t back(uint64_t i)
{
    return history[(ntok - 1 - i) & (HISTORY - 1)];
}

void ckpt_bd_init(unsigned n)
{
    pthread_mutex_lock(&lock);
    every = n;
    markers = false;
    ntok = nsync = iteration = 0;
    period = 0;
    seen_collective = false;
    pthread_mutex_unlock(&lock);
}

void ckpt_bd_init_markers(void)
{
    ckpt_bd_init(0);
    pthread_mutex_lock(&lock);
    markers = true;
    pthread_mutex_unlock(&lock);
}

enum ckpt_bd_event ckpt_bd_marker(void)
{
    enum ckpt_bd_event ev = CKPT_BD_NONE;
    pthread_mutex_lock(&lock);
    if (markers) {
        iteration++;
        ev = CKPT_BD_BOUNDARY;
    }
    pthread_mutex_unlock(&lock);
    return ev;
}

/* Does the newest 3p tokens consist of one period of length p, three times? */
static bool repeats(unsigned p)
{
    for (unsigned i = 0; i < 2 * p; i++)
        if (back(i) != back(i + p))
            return false;
    return true;
}

/* Positions are counted in the period that ends with the newest token, at
 * position p-1.  The boundary is the last host sync before the collectives
 * start again (cyclically after the last one): by then the optimizer's
 * kernels are queued and the host has read back what it reads of this
 * iteration (its loss), so a restart replays those reads from the log and
 * the next iteration overwrites whatever else it scribbles on.  With no
 * collective, the last sync of the period. */
static bool place_boundary(unsigned p)
{
    int last_coll = -1, last_sync = -1;
    for (unsigned pos = 0; pos < p; pos++) {
        uint64_t t = back(p - 1 - pos);
        if (t & SYNC_BIT)
            last_sync = (int)pos;
        else
            last_coll = (int)pos;
    }
    if (last_sync < 0)
        return false; /* collectives only: nothing ends an iteration yet */
    if (last_coll < 0 && seen_collective)
        return false; /* host syncs alone after training with collectives:
                         an evaluation or the program's epilogue */
    coll_pos = last_coll;
    if (last_coll < 0) {
        bd_pos = (unsigned)last_sync;
        return true;
    }
    int found = -1;
    for (unsigned k = 1; k < p; k++) {
        unsigned pos = ((unsigned)last_coll + k) % p;
        if (!(back(p - 1 - pos) & SYNC_BIT))
            break; /* the next iteration's first collective */
        found = (int)pos;
    }
    if (found < 0)
        return false; /* no sync between iterations */
    bd_pos = (unsigned)found;
    return true;
}

/* Counts the boundaries in the history that matches the period, walking
 * back from the newest token, so iterations before the lock are counted
 * (warm-up iterations that differ are not). */
static uint64_t count_back(void)
{
    uint64_t n = 0, avail = ntok < HISTORY ? ntok : HISTORY;
    for (uint64_t i = 0; i < avail; i++) {
        unsigned pos = (unsigned)((phase + period * (i / period + 1) - i) % period);
        if (back(i) != back(i % period))
            break;
        if (pos == bd_pos)
            n++;
    }
    return n;
}

static enum ckpt_bd_event learn(void)
{
    unsigned maxp = (unsigned)(ntok / 3 < MAX_PERIOD ? ntok / 3 : MAX_PERIOD);
    for (unsigned p = 1; p <= maxp; p++) {
        if (!repeats(p) || !place_boundary(p))
            continue;
        period = p;
        phase = p - 1;
        iteration += count_back();
        return phase == bd_pos ? CKPT_BD_BOUNDARY : CKPT_BD_NONE;
    }
    return CKPT_BD_NONE;
}

enum ckpt_bd_event ckpt_bd_feed(enum ckpt_tok_kind kind, uint64_t hash)
{
    enum ckpt_bd_event ev = CKPT_BD_NONE;

    pthread_mutex_lock(&lock);
    if (markers)
        goto out;
    if (every) {
        if (kind == CKPT_TOK_SYNC && ++nsync % every == 0) {
            iteration++;
            ev = CKPT_BD_BOUNDARY;
        }
        goto out;
    }
    uint64_t t = tok(kind, hash);
    if (kind == CKPT_TOK_COLL)
        seen_collective = true;
    history[ntok++ & (HISTORY - 1)] = t;
    if (!period) {
        ev = learn();
        goto out;
    }
    phase = (phase + 1) % period;
    if (t != back(period)) {
        /* The iteration changed shape: learn again from here. */
        period = 0;
        history[0] = t;
        ntok = 1;
        goto out;
    }
    if (phase == bd_pos) {
        iteration++;
        ev = CKPT_BD_BOUNDARY;
    } else if ((int)phase == coll_pos) {
        ev = CKPT_BD_LAST_COLL;
    }
out:
    pthread_mutex_unlock(&lock);
    return ev;
}

uint64_t ckpt_bd_iteration(void)
{
    pthread_mutex_lock(&lock);
    uint64_t it = iteration;
    pthread_mutex_unlock(&lock);
    return it;
}

unsigned ckpt_bd_period(bool *has_collectives)
{
    pthread_mutex_lock(&lock);
    unsigned p = period;
    if (has_collectives)
        *has_collectives = p && coll_pos >= 0;
    pthread_mutex_unlock(&lock);
    return p;
}
