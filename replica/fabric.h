/*
 * One libfabric endpoint of a node agent, for moving snapshot bytes into
 * peers' host memory: a reliable-datagram (FI_EP_RDM) endpoint, whole
 * regions registered once, and transfers with a bounded number in flight
 * whose completions mean the bytes are in the peer's memory.  The bytes go
 * as RMA writes into a region the peer exposes, or, on a provider without
 * RMA (or when asked), as tagged messages that the peer receives into its
 * region with receives it posts itself.  Addresses and region keys leave
 * here as opaque blobs for the caller to carry over its own control
 * channel.  This is agent code: libckpt.so must
 * never link it (libfabric is not a dependency of the preloaded library).
 * Not thread-safe: one thread drives an endpoint.
 */
#ifndef CKPT_REPLICA_FABRIC_H
#define CKPT_REPLICA_FABRIC_H

#include <stddef.h>
#include <stdint.h>

struct ckpt_fab;
struct ckpt_fab_region;

#define CKPT_FAB_PROVIDER_MAX 64 /* a provider name, NUL included */
#define CKPT_FAB_NAME_MAX 256    /* an endpoint name blob */
#define CKPT_FAB_KEY_BYTES 24    /* a region key blob: address, key, length (3 x le64) */

/* How snapshot bytes travel: CKPT_FABRIC_DATA's values, in config.def's
 * order.  An open endpoint is RMA or TAGGED, never AUTO. */
enum ckpt_fab_data { CKPT_FAB_DATA_AUTO, CKPT_FAB_DATA_RMA, CKPT_FAB_DATA_TAGGED };

/* Opens an endpoint whose source address is node (the local IP the
 * control connection uses, so that the bytes take the same interface; NULL
 * for the provider's default).  provider (NULL or "" for the default
 * choice: verbs, efa, ... before tcp;ofi_rxm; shm and udp only when named)
 * is matched as fi_getinfo matches a provider name.  data (enum
 * ckpt_fab_data) picks the data path: RMA needs FI_RMA, TAGGED needs
 * FI_TAGGED, AUTO takes RMA from a provider that offers it and tagged
 * messages from one that does not.  Returns 0, or -ENODATA when no
 * provider offers FI_EP_RDM with what data needs, -EOPNOTSUPP when the
 * provider offers reliable messages but not the data path asked for, or
 * another -errno; why says which and names the provider. */
int ckpt_fab_open(struct ckpt_fab **out, const char *node, const char *provider, int data, char *why,
                  size_t whylen);
void ckpt_fab_close(struct ckpt_fab *f);

/* The provider in use, as fi_info names it ("tcp;ofi_rxm"). */
const char *ckpt_fab_provider(const struct ckpt_fab *f);

/* The data path in use: CKPT_FAB_DATA_RMA or CKPT_FAB_DATA_TAGGED. */
int ckpt_fab_data(const struct ckpt_fab *f);

/* This endpoint's name, for a peer's ckpt_fab_peer: up to *len bytes into
 * buf, *len set to its size.  Returns 0 or -errno. */
int ckpt_fab_name(struct ckpt_fab *f, void *buf, size_t *len);

/* Makes a peer's name addressable; *peer is what ckpt_fab_write takes.
 * Both ends must use the same provider.  Returns 0 or -errno. */
int ckpt_fab_peer(struct ckpt_fab *f, const void *name, size_t len, uint64_t *peer);

/* Registers [base, base + len) once, as a whole: remote = 1 lets peers
 * write into it (a replica slot; with tagged messages, a target of
 * ckpt_fab_recv), remote = 0 makes it a source of writes or sends (a
 * snapshot being sent).  The caller keeps the memory mapped until
 * ckpt_fab_unregister.  Returns 0 or -errno. */
int ckpt_fab_register(struct ckpt_fab *f, void *base, size_t len, int remote, struct ckpt_fab_region **out);
void ckpt_fab_unregister(struct ckpt_fab_region *r);

/* The key a peer needs to write into r. */
void ckpt_fab_region_key(const struct ckpt_fab_region *r, uint8_t key[CKPT_FAB_KEY_BYTES]);

/* Queues an RMA write of len bytes at src + off to offset roff of the
 * peer's region named by key, split into pieces the provider accepts; it
 * blocks only while the window of writes in flight is full.  src must stay
 * unchanged until ckpt_fab_drain.  Returns 0, -EOPNOTSUPP on an endpoint
 * for tagged messages, -ERANGE when the write does not fit either region,
 * or the first error of a write that failed (then the endpoint refuses
 * further writes). */
int ckpt_fab_write(struct ckpt_fab *f, uint64_t peer, struct ckpt_fab_region *src, size_t off, size_t len,
                   const uint8_t key[CKPT_FAB_KEY_BYTES], uint64_t roff);

/* The tagged-message counterpart of ckpt_fab_write: queues one message of
 * len bytes at src + off with tag, for the receive the peer posted with
 * that tag (ckpt_fab_recv).  It is never split: -EMSGSIZE when len is over
 * the provider's message size.  It counts as a call of ckpt_fab_write
 * below, and its completion (FI_DELIVERY_COMPLETE) means the bytes are in
 * the peer's receive buffer.  Returns as ckpt_fab_write does. */
int ckpt_fab_send(struct ckpt_fab *f, uint64_t peer, struct ckpt_fab_region *src, size_t off, size_t len,
                  uint64_t tag);

/* The calls of ckpt_fab_write that returned 0 on this endpoint since it
 * was opened: the next such call is number ckpt_fab_queued(f), counting
 * from 0. */
uint64_t ckpt_fab_queued(const struct ckpt_fab *f);

/* How many of those calls, counted from the first, are complete with
 * every earlier one: calls 0 .. ckpt_fab_completed(f) - 1 have all their
 * bytes in the peer's memory.  Completions are read by ckpt_fab_write,
 * ckpt_fab_reap and ckpt_fab_drain; this only counts them. */
uint64_t ckpt_fab_completed(const struct ckpt_fab *f);

/* Reads the completions of queued writes; while some are in flight and
 * timeout_ms > 0, waits up to timeout_ms for at least one.  Returns how
 * many completed (0 when none is in flight), -ETIMEDOUT, or the first
 * write error. */
int ckpt_fab_reap(struct ckpt_fab *f, int timeout_ms);

/* Waits until every queued write is complete: its bytes are in the peer's
 * memory (FI_DELIVERY_COMPLETE), not merely sent.  Returns 0, the first
 * write error, or -ETIMEDOUT after timeout_ms without a completion. */
int ckpt_fab_drain(struct ckpt_fab *f, int timeout_ms);

/* The target side: RMA writes into this endpoint's regions, and messages
 * into its receives, progress only while it is driven (tcp's progress is
 * manual).  Drives it until fd is readable (returns 1), or timeout_ms pass
 * or a receive completed (returns 0; see ckpt_fab_arrivals); -errno on
 * error.  fd may be -1. */
int ckpt_fab_wait(struct ckpt_fab *f, int fd, int timeout_ms);

/* ---- the target side of tagged messages */

/* Tags for one round of receives: the next call's differ from this one's
 * in bits 32..47, so that a message left over from an earlier round (its
 * sender killed) never matches a receive of this one.  The caller tags
 * its pieces tag | i, i < 2^32. */
uint64_t ckpt_fab_round_tag(struct ckpt_fab *f);

/* How many more receives may be posted now (at most 32 are). */
size_t ckpt_fab_recv_room(const struct ckpt_fab *f);

/* Posts a receive of one message tagged tag into [off, off + len) of r
 * (registered with remote = 1), from any peer.  The memory must stay
 * mapped until the receive is reported (ckpt_fab_arrivals) or cancelled
 * (ckpt_fab_cancel).  Returns 0, -EBUSY when no room is left, -ERANGE when
 * it does not fit r, or -errno. */
int ckpt_fab_recv(struct ckpt_fab *f, struct ckpt_fab_region *r, size_t off, size_t len, uint64_t tag);

/* A posted receive that completed: its tag, the bytes that arrived, and 0
 * or the -errno it failed with (-EMSGSIZE: the message was longer). */
struct ckpt_fab_arrival {
    uint64_t tag;
    size_t len;
    int status;
};

/* Hands over up to max receives that completed since the last call, in
 * the order they completed; returns how many. */
size_t ckpt_fab_arrivals(struct ckpt_fab *f, struct ckpt_fab_arrival *out, size_t max);

/* Cancels every posted receive and waits, at most timeout_ms, until none
 * is left (completed or cancelled); what completed meanwhile is dropped.
 * Returns 0, or -ETIMEDOUT (receives may still be posted: the memory they
 * name must stay mapped) or -errno. */
int ckpt_fab_cancel(struct ckpt_fab *f, int timeout_ms);

/* The reason for the last error this endpoint returned. */
const char *ckpt_fab_error(const struct ckpt_fab *f);

#endif
