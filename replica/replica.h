/*
 * Replicating one committed snapshot into a peer's host memory: the
 * protocol between a sending and a receiving node agent, over a control
 * connection (wire.h) for the small messages and a fabric endpoint
 * (fabric.h) for the bytes.  Agent code, never linked into libckpt.so.
 *
 *   sender                                   receiver
 *   HELLO {provider, data path,       <-->   HELLO {provider, data path,
 *          endpoint name}                           endpoint name}
 *   OFFER {epoch, the image's header  --->   refuses an epoch older than its
 *          region}                           own; checks it, picks a slot, looks
 *                                            up every chunk sum it holds
 *                                     <---   ACCEPT {region key, data offset,
 *                                                    bitmap of chunks to send}
 *   RMA-writes the chunks asked for   ===>   copies the chunks it held
 *   PROGRESS {upto}, as writes        --->   verifies those bytes meanwhile
 *     complete                               (a verifier thread)
 *   DONE {status, bytes}              --->   verifies what is left, commits
 *                                     <---   RESULT {status, slot, generation,
 *                                                    reason}
 * (or RESULT at once instead of ACCEPT when the offer is refused).  A
 * receiver that finds a bad chunk, or a PROGRESS that contradicts an
 * earlier one, refuses at once: RESULT before DONE.  The sender then
 * stops writing, waits for what is in flight, and still sends DONE, which
 * the receiver waits for (driving the fabric) without answering again:
 * every round has one DONE and one RESULT.  After HELLO, a connection
 * carries any number of OFFER..RESULT rounds, one at a time.  All payloads
 * are little-endian, laid out as the structs below.
 *
 * With tagged messages instead of RMA writes (a provider without FI_RMA,
 * or CKPT_FABRIC_DATA=tagged on both ends), the receiver posts a receive
 * per piece before it sends ACCEPT, whose key then carries the round's tag
 * (inbound.h), the sender sends each piece (CKPT_REPLICA_PIECE bytes of a
 * chunk asked for, in order) tagged tag | its index in the round, and
 * sends no PROGRESS: a piece is in place when its receive completes, which
 * the receiver sees itself.  DONE, RESULT and refusals are the same.
 *
 * What the receiver relies on: PROGRESS {upto} and DONE mean that the
 * writes of those bytes completed with FI_DELIVERY_COMPLETE (they are in
 * its memory) and that the sender writes them no more in this round.  A
 * sender that breaks that gets its chunks refused, or, if it writes bytes
 * again after they verified, a replica that every reader's verification
 * (recovery's included) refuses: a committed replica is never trusted
 * without its chunks verifying.
 */
#ifndef CKPT_REPLICA_H
#define CKPT_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "fabric.h"
#include "store.h"

enum ckpt_replica_msg {
    CKPT_MSG_HELLO = 1, /* ckpt_msg_hello + endpoint name */
    CKPT_MSG_OFFER,     /* ckpt_msg_offer + the header region of a committed image (format.h) */
    CKPT_MSG_ACCEPT,    /* ckpt_msg_accept + need bitmap, (nchunks + 7) / 8 bytes */
    CKPT_MSG_DONE,      /* ckpt_msg_done */
    CKPT_MSG_RESULT,    /* ckpt_msg_result + reason (text, no NUL) */
    CKPT_MSG_PROGRESS,  /* ckpt_msg_progress (wire version 2) */
};

/* The pieces the bytes of a chunk travel in (and are reported and
 * verified by): still in the receiver's caches when it verifies them. */
#define CKPT_REPLICA_PIECE (1u << 20)

/* HELLO's data: how the bytes travel.  0 is what a peer that knows RMA
 * writes only sends (the field was reserved, 0). */
enum ckpt_hello_data { CKPT_HELLO_RMA = 0, CKPT_HELLO_TAGGED = 1 };

struct ckpt_msg_hello {
    char provider[CKPT_FAB_PROVIDER_MAX]; /* NUL-terminated; both ends must agree */
    uint32_t name_len;
    uint32_t data;                        /* enum ckpt_hello_data; both ends must agree */
};

/* OFFER's start: the plan of the job the sender acts under (its epoch,
 * coord.h).  A receiver that has heard of a newer plan refuses the offer:
 * its sender was left behind (cut off, frozen) and is fenced out of the
 * peers' memory.  0 on both sides: no fencing (ckpt-replica by hand). */
struct ckpt_msg_offer {
    uint64_t epoch;
    uint64_t reserved;
};

struct ckpt_msg_accept {
    uint64_t data_roff;                   /* the data area's offset in the region */
    uint64_t need;                        /* chunks to send (bits set) */
    uint8_t key[CKPT_FAB_KEY_BYTES];      /* the target region; tagged: le64 tag, then 0 */
};

struct ckpt_msg_done {
    int32_t status;                       /* 0, or the -errno that stopped the sender */
    uint32_t reserved;
    uint64_t bytes;                       /* chunk bytes written */
};

struct ckpt_msg_progress {
    uint64_t upto;                        /* an offset in the data area: every byte below it
                                             of the chunks ACCEPT asked for is in the
                                             receiver's memory; never decreases */
};

struct ckpt_msg_result {
    int32_t status;                       /* 0: committed; -errno: refused */
    uint32_t slot;
    uint64_t generation;
};

_Static_assert(sizeof(struct ckpt_msg_hello) == 72, "hello layout changed: bump CKPT_WIRE_VERSION");
_Static_assert(sizeof(struct ckpt_msg_accept) == 40, "accept layout changed: bump CKPT_WIRE_VERSION");
_Static_assert(sizeof(struct ckpt_msg_done) == 16, "done layout changed: bump CKPT_WIRE_VERSION");
_Static_assert(sizeof(struct ckpt_msg_result) == 16, "result layout changed: bump CKPT_WIRE_VERSION");
_Static_assert(sizeof(struct ckpt_msg_progress) == 8, "progress layout changed: bump CKPT_WIRE_VERSION");

/* What one transfer did, for either end. */
struct ckpt_replica_stats {
    int status;                           /* 0: committed; -errno */
    char job[CKPT_JOB_MAX];
    uint32_t rank, slot;
    uint64_t generation, iteration;
    uint64_t epoch;                       /* receiver: the plan the offer was made under */
    uint64_t chunks, sent_chunks, bytes_sent, data_bytes;
    double seconds;                       /* offer to result */
    char why[256];                        /* the reason, when status < 0 */
    double tail_seconds;                  /* the last write delivered (sender) or DONE
                                             (receiver) to the result: what is not
                                             overlapped with the transfer */
    double verify_seconds;                /* receiver: time spent verifying chunks */
    int fabric_failed;                    /* sender: a write or its completion failed
                                             (the endpoint may keep a broken connection) */
};

/* Both ends, first: exchanges provider, data path and endpoint names over
 * ctl and makes the peer addressable.  Returns 0 with *peer set, or -errno
 * with why (-EPROTONOSUPPORT when the two ends use different providers or
 * data paths: why names CKPT_FABRIC_PROVIDER or CKPT_FABRIC_DATA). */
int ckpt_replica_hello(struct ckpt_fab *f, int ctl, uint64_t *peer, char *why, size_t whylen);

/* Called before each chunk that must travel, with the bytes written so
 * far: the agent waits here for an idle gap in the training's traffic.  A
 * negative return stops the transfer with that error. */
typedef int (*ckpt_replica_pace_fn)(void *arg, uint64_t chunk, uint64_t bytes_sent);

/* Sends the committed image at [image, image + len), registered as src
 * (ckpt_fab_register(f, image, len, 0, &src)), to the peer.  The image
 * must stay mapped; if its header changes meanwhile (the rank reused the
 * slot), the transfer is abandoned with -ESTALE.  pace may be NULL.
 * @epoch: the plan the sender acts under (ckpt_msg_offer).
 * Returns 0 once the receiver committed the replica, or -errno with
 * st->why (the receiver's reason when it refused). */
int ckpt_replica_send(struct ckpt_fab *f, int ctl, uint64_t peer, uint64_t epoch, const void *image, size_t len,
                      struct ckpt_fab_region *src, ckpt_replica_pace_fn pace, void *arg, struct ckpt_replica_stats *st);

/* Receives offers on ctl into the store until the sender closes the
 * connection, calling report after each.  An offer under an epoch older
 * than *@epoch (read at each offer; NULL: no fencing) is refused with
 * -ESTALE.  Returns 0 at a clean close, or -errno when the connection or
 * the protocol failed (a transfer cut short leaves its slot invalid and
 * the previous replica intact). */
int ckpt_replica_serve(struct ckpt_fab *f, int ctl, struct ckpt_store *store, const uint64_t *epoch,
                       void (*report)(void *arg, const struct ckpt_replica_stats *st), void *arg);

#endif
