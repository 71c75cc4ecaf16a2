/*
 * A thread that verifies the chunks of a replica being received while the
 * transfer goes on, so that after the sender's DONE only the last piece is
 * left to check.  The receiving thread tells it how far the sender's bytes
 * are in place (PROGRESS), and queues the chunks it filled from held
 * replicas; the verifier only reads the slot and marks chunks verified in
 * the store transaction.  It must never outlive the transaction: end it
 * before commit or abort.
 */
#ifndef CKPT_REPLICA_VERIFIER_H
#define CKPT_REPLICA_VERIFIER_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct ckpt_verifier;

/* Starts verifying chunks of tx as they are queued.  Returns 0 or -errno
 * (then the caller does without: commit verifies every chunk). */
int ckpt_verifier_start(struct ckpt_verifier **out, const struct ckpt_store *st, struct ckpt_store_tx *tx);

/* Queues chunk c, filled from a held replica (tx->need clear); a chunk
 * queued before, or out of range, is ignored. */
void ckpt_verifier_add(struct ckpt_verifier *v, uint64_t c);

/* The bytes below data offset upto of the chunks the sender writes
 * (tx->need set) are in place: they are summed as they come, each chunk
 * checked when complete.  A smaller upto than before changes nothing. */
void ckpt_verifier_landed(struct ckpt_verifier *v, uint64_t upto);

/* Whether a queued chunk failed so far: 0, or -EBADMSG with why. */
int ckpt_verifier_failed(struct ckpt_verifier *v, char *why, size_t whylen);

/* Ends the thread and frees v: with drain, after it verified everything
 * queued (or failed); without, after the chunk it is on.  Returns 0 or the
 * first failure with why; *busy_s (may be NULL) gets the seconds it spent
 * verifying. */
int ckpt_verifier_end(struct ckpt_verifier *v, int drain, double *busy_s, char *why, size_t whylen);

#endif
