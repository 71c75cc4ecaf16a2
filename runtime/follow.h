/*
 * A standby's orders: one small file per rank, CKPT_FOLLOW_FILE in its
 * arena directory, mapped shared by the node agent (ckpt-resume), which
 * writes the orders, and by the rank's standby, which follows them and
 * says where it is.  The agent creates it before it starts the standby.
 * Each field is one naturally aligned word, read and written atomically;
 * nothing else orders them.  The agent gives an order with
 * ckpt_follow_order, which also bumps wake and wakes the standby: a
 * standby with nothing to do sleeps on wake (a futex) instead of polling.
 */
#ifndef CKPT_FOLLOW_H
#define CKPT_FOLLOW_H

#include <stdint.h>

#define CKPT_FOLLOW_FILE "follow"
#define CKPT_FOLLOW_MAGIC 0x32574c4f464b4350ull /* "PCKFOLW2" */

struct ckpt_follow {
    uint64_t magic;
    uint64_t allowed;  /* agent: the standby may replay up to this iteration's end */
    uint64_t takeover; /* agent: nonzero, go live at this iteration's boundary */
    uint64_t at;       /* standby: the last iteration it replayed */
    uint64_t pid;      /* standby: the process following these orders */
    uint64_t live_at;  /* standby: the iteration it went live at (its takeover) */
    uint32_t wake;     /* agent: bumped at each order (a futex word) */
    uint32_t unused;
    uint64_t reserved;
};
_Static_assert(sizeof(struct ckpt_follow) == 64, "follow file layout changed: change its magic");

/* Maps rank_dir's follow file, creating it (empty orders) when create is
 * set.  Returns it, or NULL with errno set.  ckpt_follow_unmap lets it go. */
struct ckpt_follow *ckpt_follow_map(const char *rank_dir, int create);
void ckpt_follow_unmap(struct ckpt_follow *f);
/* Reads rank_dir's follow file into out without writing anything (for
 * tools that only look).  Returns 0 or -errno (-EBADMSG: not one of ours). */
int ckpt_follow_read(const char *rank_dir, struct ckpt_follow *out);

/* The agent: sets an order (allowed or takeover) to v and wakes the
 * standby. */
void ckpt_follow_order(struct ckpt_follow *f, uint64_t *field, uint64_t v);
/* The standby: the wake count to pass to ckpt_follow_wait, read before the
 * orders are; ckpt_follow_wait returns once an order newer than it was
 * given, or after timeout_ms, whichever comes first. */
uint32_t ckpt_follow_seen(const struct ckpt_follow *f);
void ckpt_follow_wait(struct ckpt_follow *f, uint32_t seen, int timeout_ms);

static inline uint64_t ckpt_follow_get(const uint64_t *field)
{
    return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}
static inline void ckpt_follow_set(uint64_t *field, uint64_t v)
{
    __atomic_store_n(field, v, __ATOMIC_RELEASE);
}

#endif
