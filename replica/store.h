/*
 * Where a node keeps the replicas its peers send it: laid out as an arena
 * (DIR/<uid>-<job>/rank<N>/slot0|slot1, arena.h), so that recovery reads a
 * peer's replica exactly as it reads a local snapshot.  Two slots per rank:
 * a replica being received goes into the slot that does not hold the
 * newest committed one, which stays intact whatever happens to the new
 * one.  An index of the chunk sums of every committed replica lets chunks
 * already held (identical data-parallel ranks, an unchanged chunk of the
 * previous generation) be copied locally instead of sent.  A replica is
 * committed only after every chunk verified, header last, magic last of
 * all, as runtime/image.c commits a snapshot.  One transfer at a time,
 * driven by one thread (and verified by one more, ckpt_store_verify).
 */
#ifndef CKPT_REPLICA_STORE_H
#define CKPT_REPLICA_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "fabric.h"
#include "format.h"

struct ckpt_store;

/* One replica being received. */
struct ckpt_store_tx {
    struct ckpt_header h;      /* the offered image's header */
    unsigned holder, slot;
    void *header;              /* the offered header region (h.header_bytes), owned */
    uint8_t *need;             /* bit c: chunk c must be sent; owned */
    uint64_t nneed;
    uint64_t data_roff;        /* the data area's offset in the slot's region */
    uint8_t key[CKPT_FAB_KEY_BYTES];
    struct ckpt_fab_region *reg; /* the slot's region (NULL without a fabric) */
    uint8_t *verified;         /* byte c: chunk c verified (ckpt_store_verify); owned */
};

/* Opens (creating) the store in dir and indexes the replicas found there
 * that verify (those that do not are left to be overwritten).  fab, when
 * not NULL, registers each slot once for peers to write into.  Returns 0
 * or -errno with why. */
int ckpt_store_open(struct ckpt_store **out, const char *dir, struct ckpt_fab *fab, char *why, size_t whylen);
void ckpt_store_close(struct ckpt_store *st);

/* Takes an offer (the header region of a committed image, as a sender
 * sent it): checks it, picks and invalidates the target slot, makes it
 * large enough, and marks in tx->need the chunks that no committed replica
 * holds.  Returns 0, or -errno with why (the store is unchanged). */
int ckpt_store_begin(struct ckpt_store *st, const void *offer, size_t len, struct ckpt_store_tx *tx, char *why,
                     size_t whylen);

/* Copies chunk c, which tx->need says is held, from the replica that
 * holds it.  Returns 0 or -ENOENT. */
int ckpt_store_fill(struct ckpt_store *st, struct ckpt_store_tx *tx, uint64_t c);

/* Verifies chunk c, whose bytes are in place (written by the sender or
 * filled), against the offered sum, and records it when it matches so
 * that commit does not check it again.  One other thread may call it, for
 * distinct chunks, while this one drives the transfer and fills; commit or
 * abort only after it returned.  Returns 0, -ERANGE for no such chunk, or
 * -EBADMSG with why naming the chunk. */
int ckpt_store_verify(const struct ckpt_store *st, struct ckpt_store_tx *tx, uint64_t c, char *why, size_t whylen);

/* Where chunk c of tx's slot is (its bytes, once in place), its length and
 * the sum the offer gave it: for checking it piece by piece as it lands
 * (tx->verified[c] set when it matched).  NULL for no such chunk. */
const void *ckpt_store_chunk(const struct ckpt_store *st, const struct ckpt_store_tx *tx, uint64_t c, size_t *len,
                             uint64_t *sum);

/* Verifies every chunk against the offered sums (those ckpt_store_verify
 * did not already) and, if all match, commits the replica (header, then
 * magic).  Returns 0, or -EBADMSG with why naming the chunk: the slot
 * stays invalid and the previous replica is untouched.  Releases tx
 * either way. */
int ckpt_store_commit(struct ckpt_store *st, struct ckpt_store_tx *tx, char *why, size_t whylen);

/* Gives up on tx: the slot stays invalid.  Releases tx. */
void ckpt_store_abort(struct ckpt_store *st, struct ckpt_store_tx *tx);

/* Lets go of the replicas of (job, rank): the store no longer holds,
 * indexes or writes to them, and their files are the caller's to move
 * (a replica promoted into the rank's own arena).  A later transfer for
 * the rank starts afresh.  May be called while another thread drives a
 * transfer.  Returns 0, -ENOENT when none are held, -EBUSY while a
 * transfer writes to them. */
int ckpt_store_forget(struct ckpt_store *st, const char *job, uint32_t rank);

/* The directory of the slot tx goes to (for messages). */
const char *ckpt_store_dir(const struct ckpt_store *st, const struct ckpt_store_tx *tx);

#endif
