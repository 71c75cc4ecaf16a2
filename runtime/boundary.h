/*
 * Finding iteration boundaries in the stream of calls a program makes.
 * The hooks feed one token per collective (its op, size, type and
 * communicator hashed) and per host synchronisation; this module learns the
 * period of that stream, confirmed over three repetitions, and says which
 * token ends an iteration (the last host sync after the last collective of
 * the period, before the next collective: the optimizer's kernels are
 * queued and the iteration's own reads are done by then) and which one is
 * the last collective (the next update follows it).  Without collectives the period is one of host syncs.
 * CKPT_BOUNDARY=every:N instead makes every N-th host sync a boundary.
 * Pure logic: no CUDA, no I/O, so the unit tests drive it directly.
 */
#ifndef CKPT_BOUNDARY_H
#define CKPT_BOUNDARY_H

#include <stdbool.h>
#include <stdint.h>

enum ckpt_tok_kind { CKPT_TOK_COLL, CKPT_TOK_SYNC };

enum ckpt_bd_event {
    CKPT_BD_NONE,
    CKPT_BD_BOUNDARY,    /* an iteration ends at this token */
    CKPT_BD_LAST_COLL,   /* the last collective of an iteration */
};

/* every == 0: auto.  every > 0: every N-th host sync.  markers: only
 * ckpt_bd_marker() ends iterations (CKPT_BOUNDARY=nvtx:NAME). */
void ckpt_bd_init(unsigned every);
void ckpt_bd_init_markers(void);

/* An explicit end of iteration (the end of the named NVTX range).  Returns
 * CKPT_BD_BOUNDARY in marker mode, CKPT_BD_NONE otherwise. */
enum ckpt_bd_event ckpt_bd_marker(void);

/* Feeds one token; says what it is.  Thread-safe. */
enum ckpt_bd_event ckpt_bd_feed(enum ckpt_tok_kind kind, uint64_t hash);

/* Iterations completed so far (boundaries passed, counted back over the
 * history that matches the learned period once it is learned). */
uint64_t ckpt_bd_iteration(void);

/* The learned period in tokens (0 while learning), and whether it has
 * collectives.  For stats and tests. */
unsigned ckpt_bd_period(bool *has_collectives);

#endif
