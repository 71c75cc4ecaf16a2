/*
 * The per-rank timeline: when each collective, each snapshot copy and each
 * commit ran, in CLOCK_MONOTONIC nanoseconds, tagged with the iteration in
 * progress.  libckpt keeps the newest events in a fixed in-memory ring
 * (filled from any thread, never allocating) and writes the last
 * CKPT_TL_ITERS iterations of it (and the one in progress) to
 * <arena rank dir>/timeline at every boundary; ckpt-inspect draws them.  The file is versioned and checksummed:
 * a reader refuses a file whose magic, version, sizes or checksum are wrong
 * rather than draw something that never happened.
 */
#ifndef CKPT_TIMELINE_H
#define CKPT_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_TL_MAGIC "CKPTTML1"
#define CKPT_TL_VERSION 1
#define CKPT_TL_FILE "timeline"
#define CKPT_TL_AGENT_FILE "timeline.agent" /* the node agent's lanes (timeline_agent.c) */
#define CKPT_TL_CAP 4096  /* events in the ring; a power of two */
#define CKPT_TL_ITERS 64  /* finished iterations written to the file */

enum ckpt_tl_kind {
    CKPT_TL_COLL = 1,     /* a collective: detail is the NCCL function */
    CKPT_TL_COPY = 2,     /* libckpt's device-to-host snapshot copies: arg is bytes */
    CKPT_TL_COMMIT = 3,   /* checksum and header write of a snapshot */
    CKPT_TL_BOUNDARY = 4, /* an iteration ended (start == end) */
    CKPT_TL_NET = 5,      /* the node agent sent a replica: arg is bytes */
    CKPT_TL_DISK = 6,     /* the node agent persisted a snapshot: arg is bytes */
    CKPT_TL_STANDBY = 7,  /* where the rank's standby stood (a point): arg is the iteration it had
                           * replayed to, detail how many it was behind the newest every rank had
                           * committed (the node agent's, as it saw it move) */
};

/* Where the times came from. */
#define CKPT_TL_GPU_TIME 0x1 /* the GPU's timer (NCCL profiler KernelCh, or copy events) */
/* Of a COPY: queued when the program reached the update, not in a gap. */
#define CKPT_TL_SPILL 0x2
/* Of a COPY: placed in an idle gap by CKPT_SCHED=gap. */
#define CKPT_TL_PACED 0x4
/* Of a COPY: queued on the side stream because the program was about to
 * write what it copies (copy before write, interpose/pacer.c). */
#define CKPT_TL_TOUCH 0x8

/* NCCL functions, as detail of a CKPT_TL_COLL. */
enum ckpt_tl_func {
    CKPT_TL_OTHER, CKPT_TL_ALLREDUCE, CKPT_TL_BROADCAST, CKPT_TL_REDUCE, CKPT_TL_ALLGATHER,
    CKPT_TL_REDUCESCATTER, CKPT_TL_SEND, CKPT_TL_RECV, CKPT_TL_ALLTOALL, CKPT_TL_GATHER, CKPT_TL_SCATTER,
    CKPT_TL_NFUNCS
};

struct ckpt_tl_event {
    uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC */
    uint64_t iteration;        /* in progress when it started (first: 1) */
    uint64_t arg;              /* element count, or bytes */
    uint16_t kind;             /* enum ckpt_tl_kind */
    uint16_t flags;            /* CKPT_TL_GPU_TIME */
    uint32_t detail;           /* enum ckpt_tl_func; of a COPY/COMMIT, the
                                  snapshot's iteration */
};

struct ckpt_tl_header {
    char magic[8];         /* CKPT_TL_MAGIC */
    uint32_t version;      /* CKPT_TL_VERSION */
    uint32_t header_bytes; /* sizeof(struct ckpt_tl_header) */
    uint32_t event_bytes;  /* sizeof(struct ckpt_tl_event) */
    uint32_t rank;
    uint64_t nevents;      /* events after the header, oldest first */
    uint64_t dropped;      /* events the ring lost before they were written */
    uint64_t sum;          /* XXH3-64 of header (this field 0) and events */
};

_Static_assert(sizeof(struct ckpt_tl_event) == 40, "timeline event layout");
_Static_assert(sizeof(struct ckpt_tl_header) == 48, "timeline header layout");

/* Appends one event to the process's ring: lock-free, any thread, never
 * allocates; the oldest event is overwritten when the ring is full. */
void ckpt_tl_add(const struct ckpt_tl_event *e);

/* The iteration now in progress (events are tagged with it), and its
 * change at a boundary. */
uint64_t ckpt_tl_iteration(void);
void ckpt_tl_set_iteration(uint64_t in_progress);

/* Copies the ring's events of iterations >= from_iter, oldest first, into
 * out (room for CKPT_TL_CAP).  Returns the count; *dropped counts events
 * lost to wrap-around or to a writer still filling them. */
size_t ckpt_tl_collect(uint64_t from_iter, struct ckpt_tl_event *out, uint64_t *dropped);

/* Writes the events of the iteration in progress and the CKPT_TL_ITERS
 * before it to dir/timeline
 * (a new file renamed over the old, so a reader never sees half of one).
 * Returns 0 or -errno. */
int ckpt_tl_write(const char *dir, uint32_t rank);

/* Encodes a file image into buf (room for header + n events).  Returns its
 * length. */
size_t ckpt_tl_encode(void *buf, uint32_t rank, const struct ckpt_tl_event *ev, size_t n, uint64_t dropped);

/* Checks a file image of len bytes: magic, version, sizes, checksum.
 * Returns 0 (h filled, events at buf + h->header_bytes) or -EINVAL with
 * the reason in why. */
int ckpt_tl_decode(const void *buf, size_t len, struct ckpt_tl_header *h, char *why, size_t whylen);

/* The node agent records one of its sends or disk writes (kind
 * CKPT_TL_NET or CKPT_TL_DISK, CLOCK_MONOTONIC times, arg: bytes) into
 * rankdir/timeline.agent, keeping the newest CKPT_TL_CAP.  Safe between
 * threads and processes.  Returns 0 or -errno. */
int ckpt_tl_agent_add(const char *rankdir, const struct ckpt_tl_event *e);

/* The function's name ("AllReduce"), or "?". */
const char *ckpt_tl_func_name(uint32_t func);

#endif
