/*
 * The receiving half of the tagged-message data path: for one round whose
 * bytes come as tagged messages (a provider without RMA, or
 * CKPT_FABRIC_DATA=tagged), it posts receives into the slot, one per piece
 * the sender sends, at the piece's place and with its tag, a bounded number
 * at a time, re-posting as they complete, and says how far the bytes are in
 * place.  A receive's completion is what "landed" means in this mode: the
 * receiver needs no word from the sender for it.  It must never leave a
 * receive posted into the slot once the round is over.
 *
 * The pieces of a round, in the order the sender sends them: the chunks
 * the ACCEPT asked for, in increasing order, each cut into pieces of piece
 * bytes from its start (the last one shorter); piece i is tagged tag | i.
 */
#ifndef CKPT_REPLICA_INBOUND_H
#define CKPT_REPLICA_INBOUND_H

#include <stddef.h>
#include <stdint.h>

#include "fabric.h"
#include "store.h"

struct ckpt_inbound;

/* Starts receiving tx's pieces of piece bytes, tagged tag | i (tag from
 * ckpt_fab_round_tag), into tx->reg, posting the first receives.  The
 * caller keeps tx until ckpt_inbound_end.  Returns 0 or -errno with why. */
int ckpt_inbound_start(struct ckpt_inbound **out, struct ckpt_fab *f, const struct ckpt_store_tx *tx, uint64_t piece,
                       uint64_t tag, char *why, size_t whylen);

/* Takes the receives that completed (drive the endpoint with ckpt_fab_wait
 * meanwhile) and posts the next ones.  *upto (never smaller than before)
 * gets the data offset below which every byte of the chunks asked for is
 * in place.  Returns 0, or the first failure (-EPROTO for a message of the
 * wrong size, the receive's own -errno) with why; it goes on receiving
 * after one, so that the sender's messages in flight complete. */
int ckpt_inbound_poll(struct ckpt_inbound *in, uint64_t *upto, char *why, size_t whylen);

/* Whether every piece arrived: 1, or 0 with why naming the first that did
 * not. */
int ckpt_inbound_complete(const struct ckpt_inbound *in, char *why, size_t whylen);

/* Cancels the receives still posted, waiting up to timeout_ms, and frees
 * in.  Returns 0, or -ETIMEDOUT when the provider kept some (their memory
 * must stay mapped), or -errno. */
int ckpt_inbound_end(struct ckpt_inbound *in, int timeout_ms);

#endif
