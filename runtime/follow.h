/*
 * A standby's orders: one small file per rank, CKPT_FOLLOW_FILE in its
 * arena directory, mapped shared by the node agent (ckpt-resume), which
 * writes the orders, and by the rank's standby, which follows them and
 * says where it is.  The agent creates it before it starts the standby.
 * Each field is one naturally aligned 64-bit word, read and written
 * atomically; nothing else orders them.
 */
#ifndef CKPT_FOLLOW_H
#define CKPT_FOLLOW_H

#include <stdint.h>

#define CKPT_FOLLOW_FILE "follow"
#define CKPT_FOLLOW_MAGIC 0x31574c4f464b4350ull /* "PCKFOLW1" */

struct ckpt_follow {
    uint64_t magic;
    uint64_t allowed;  /* agent: the standby may replay up to this iteration's end */
    uint64_t takeover; /* agent: nonzero, go live at this iteration's boundary */
    uint64_t at;       /* standby: the last iteration it replayed */
    uint64_t pid;      /* standby: the process following these orders */
    uint64_t live_at;  /* standby: the iteration it went live at (its takeover) */
    uint64_t reserved[2];
};
_Static_assert(sizeof(struct ckpt_follow) == 64, "follow file layout changed: change its magic");

/* Maps rank_dir's follow file, creating it (empty orders) when create is
 * set.  Returns it, or NULL with errno set.  ckpt_follow_unmap lets it go. */
struct ckpt_follow *ckpt_follow_map(const char *rank_dir, int create);
void ckpt_follow_unmap(struct ckpt_follow *f);

static inline uint64_t ckpt_follow_get(const uint64_t *field)
{
    return __atomic_load_n(field, __ATOMIC_ACQUIRE);
}
static inline void ckpt_follow_set(uint64_t *field, uint64_t v)
{
    __atomic_store_n(field, v, __ATOMIC_RELEASE);
}

#endif
