/*
 * What a rank tells its node agent (ckpt-resume): one datagram per event on
 * the unix socket named by CKPT_AGENT_SOCKET.  Sending never blocks and
 * never fails the rank: a full or missing socket loses a message, nothing
 * else.  The agent uses them to see ranks alive (hang detection), which
 * generations are committed, and when a restore finished.
 */
#ifndef CKPT_AGENT_H
#define CKPT_AGENT_H

#include <stdint.h>

#define CKPT_MSG_MAGIC 0x54504b43u /* "CKPT" */
#define CKPT_MSG_VERSION 2u

enum ckpt_msg_kind {
    CKPT_MSG_HELLO = 1,     /* the rank woke (CUDA initialised); generation: its WORLD_SIZE (0: unset);
                             * bytes: LOCAL_WORLD_SIZE under torchrun, else 0 */
    CKPT_MSG_BOUNDARY = 2,  /* iteration ended; generation: the snapshots this process skipped so far */
    CKPT_MSG_COMMITTED = 3, /* generation holding iteration committed; bytes, copy_us, held_us: its snapshot */
    CKPT_MSG_RESTORED = 4,  /* iteration restored; the rank is live; bytes, copy_us: copied back, held_us: replay */
    CKPT_MSG_REFUSED = 5,   /* the restore of iteration was refused; the rank exits with status 75 */
    CKPT_MSG_NO_ROOM = 6,   /* the host cannot hold the rank's arena, or it cannot be made; the rank exits with status 78 */
    CKPT_MSG_UNPROTECTED = 7, /* checkpointing is off for the rest of the run (CKPT_ALLOW_UNPROTECTED, or no agent) */
};

struct ckpt_msg {
    uint32_t magic;
    uint32_t version;
    uint32_t kind;
    uint32_t rank;
    uint64_t iteration;
    uint64_t generation;
    int64_t pid;
    uint64_t bytes;   /* COMMITTED: what the snapshot copied; RESTORED: what was copied back */
    uint32_t copy_us; /* COMMITTED: how long its copies took on the device; RESTORED: the copy back */
    uint32_t held_us; /* COMMITTED: how long the program waited for it at its boundary; RESTORED: the replay */
};
_Static_assert(sizeof(struct ckpt_msg) == 56, "agent message layout changed: bump CKPT_MSG_VERSION");

/* Connects to the agent at path (NULL or empty: no agent).  Returns 0 or
 * -errno; without an agent ckpt_agent_send does nothing. */
int ckpt_agent_connect(const char *path, uint32_t rank);

void ckpt_agent_send(enum ckpt_msg_kind kind, uint64_t iteration, uint64_t generation);
/* With the figures of a COMMITTED or RESTORED message (above). */
void ckpt_agent_report(enum ckpt_msg_kind kind, uint64_t iteration, uint64_t generation, uint64_t bytes,
                       double copy_ms, double held_ms);

#endif
