/*
 * The pin file, <job dir>/persist-pin: what a node's agent needs its ranks
 * to keep.  The agent writes it (ckpt-resume: one node's persist, disk.c;
 * a node of several, member.c) and the ranks read it before each snapshot
 * (interpose/snapshot.c): the iterations no snapshot may overwrite (the
 * ones being persisted or replicated, the one the job agreed to keep),
 * and from=T: from iteration T on a committed snapshot is kept too, so
 * that every rank stops at the same one for the agent's next round; and
 * epoch=E, the plan the node acts under (coord.h: the etcd revision of its
 * decision), which every snapshot a rank commits then carries (format.h).
 * One line of text, "K1 K2 ... from=T epoch=E", replaced by rename so that
 * a rank never reads half of it.  No file: nothing is pinned, epoch 0.
 */
#ifndef CKPT_PINS_H
#define CKPT_PINS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_PINS_FILE "persist-pin"
#define CKPT_PINS_MAX 4

struct ckpt_pins {
    uint64_t keep[CKPT_PINS_MAX];   /* 0s are left out */
    unsigned n;
    uint64_t from;                  /* 0: none */
    uint64_t epoch;                 /* 0: none (one node) */
};

/* The pin file of the job directory @job_dir into @out. */
void ckpt_pins_path(char *out, size_t n, const char *job_dir);
/* Writes @p as the job's pins.  0 or -errno. */
int ckpt_pins_write(const char *job_dir, const struct ckpt_pins *p);
/* Reads the pins of the job whose rank directory is @rank_dir. */
void ckpt_pins_read(const char *rank_dir, struct ckpt_pins *p);
/* Nothing pinned any more: the file goes (a killed agent's too). */
void ckpt_pins_remove(const char *job_dir);
/* Whether the snapshot of iteration @it must not be overwritten. */
bool ckpt_pins_hold(const struct ckpt_pins *p, uint64_t it);

#endif
