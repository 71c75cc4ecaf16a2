/*
 * Persistence of snapshots to local SSDs, for the node agent (ckpt-resume)
 * and the ckpt-persist tool: one generation at a time, the committed slot
 * images and replay logs of a node's ranks are written with io_uring
 * (O_DIRECT, registered aligned buffers, deep queues) striped over the
 * directories of CKPT_PERSIST_DIRS, identical chunks once, and committed by
 * a manifest renamed into place (persist_format.h); recovery finds the
 * newest complete generation and reads it back into the arena so that a
 * normal CKPT_RESTORE=<iteration> restart works from it.  The engine must
 * never run inside a training process (it would stall it) and never
 * touch a complete generation except to remove it after a newer one is
 * complete, or when a restore of an older iteration on several nodes
 * retires it (ckpt_persist_retire).  Every function returns 0 or -errno;
 * where there is a why, it holds one line naming the path or the rank at
 * fault.
 *
 * Pacing (CKPT_PERSIST_EVERY = N): the agent persists the newest committed
 * snapshot at every N-th boundary, but only when no persist is running; a
 * snapshot that comes due while one is running is skipped and reported,
 * never queued.  The effective interval is so max(N, time to persist one
 * generation / iteration time) and persisting always keeps up with the
 * disks; N = 1 (the default) persists as often as they allow.
 */
#ifndef CKPT_PERSIST_H
#define CKPT_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_PERSIST_MAX_DIRS 64
#define CKPT_PERSIST_MAX_RINGS 64
/* Rings per directory by default.  Copying a block into a ring's buffer
 * and hashing it takes one core a fraction of the time the disk takes to
 * write it, and a second ring on one directory measured no faster (bench/run,
 * `ckpt-persist save --rings 2`); more rings than directories remain a
 * choice for disks that need more than one core to keep busy. */
#define CKPT_PERSIST_RINGS_PER_DIR 1

struct ckpt_persist;

struct ckpt_persist_opts {
    const char *dirs;          /* comma separated, one per SSD; each must exist */
    unsigned depth;            /* I/Os in flight per ring */
    unsigned block_kb;         /* bytes per I/O / 1024, a multiple of 4 */
    unsigned keep;             /* complete generations kept, >= 1 */
    unsigned rings;            /* rings, each driven by its own thread, up to CKPT_PERSIST_MAX_RINGS;
                                  0: CKPT_PERSIST_RINGS_PER_DIR per directory */
    const char *fault;         /* CKPT_FAULT: an io: fault is injected into this engine's I/O; NULL: none */
};

/* Fills o from CKPT_PERSIST_DIRS, CKPT_IO_DEPTH, CKPT_IO_BLOCK_KB,
 * CKPT_PERSIST_KEEP and CKPT_FAULT (ckpt_config_load must have run). */
void ckpt_persist_opts_from_config(struct ckpt_persist_opts *o);

/* Sets up the rings and registers their buffers (depth x block bytes each,
 * once for the engine's life; where RLIMIT_MEMLOCK forbids it, unregistered
 * buffers are used and that is said once).  The directories are checked
 * when a generation is written or read, not here. */
int ckpt_persist_open(struct ckpt_persist **out, const struct ckpt_persist_opts *o, char *why, size_t whylen);
void ckpt_persist_close(struct ckpt_persist *p);

/* The job's private directory in the first persist directory, made when
 * it is not there (ranks keep their replay logs in it: replay.h). */
int ckpt_persist_job_dir(struct ckpt_persist *p, const char *job, char *out, size_t outlen, char *why, size_t whylen);

/* Asks the running call (from any thread, or a signal handler) to stop at
 * its next chunk: it cleans up what it wrote and returns -ECANCELED. */
void ckpt_persist_cancel(struct ckpt_persist *p);

/* Called after each chunk is moved (and verified), from the engine's I/O
 * threads, one call at a time: done and total are bytes.  It may sleep to
 * throttle; a non-zero return cancels as ckpt_persist_cancel does (chunks
 * already in flight are still reported). */
typedef int (*ckpt_persist_progress_fn)(void *arg, uint64_t done, uint64_t total);

struct ckpt_persist_req {
    const char *arena;         /* CKPT_ARENA_DIR */
    const char *job;           /* CKPT_JOB */
    const int *ranks;          /* save: the node's ranks (their arena directories) */
    unsigned nranks;
    uint64_t iteration;        /* save: 0 = the newest every rank holds; restore: 0 = the newest that restores */
    ckpt_persist_progress_fn progress; /* may be NULL */
    void *arg;
};

struct ckpt_persist_stats {
    uint64_t iteration;        /* persisted or restored */
    unsigned nranks;
    uint64_t logical_bytes;    /* images and logs of every rank */
    uint64_t moved_bytes;      /* written or read: deduplicated, padded to the I/O alignment */
    double seconds;            /* moving and committing */
    bool registered;           /* the buffers were registered with the rings */
    uint64_t direct_bytes;     /* of the true bytes moved, those that went straight between the
                                * arena's memory and the disk, copied through no buffer */
};

/* Whether the replay log on disk at path lies beside generations, which
 * name it (persist_format.h: CKPT_PM_LOG_FILE): it stays as long as they do. */
bool ckpt_persist_names_log(const char *path);

/* Writes the snapshot of req->iteration (committed in a slot of every
 * listed rank) and each rank's replay log as one generation (a log kept on
 * disk beside the generations is named, not copied: only its part the
 * snapshot needs is read, and of that only what the last call on this
 * engine did not read; one call at a time per engine); when it is
 * complete, removes generations beyond CKPT_PERSIST_KEEP and any partial
 * ones.  The ranks may keep training, but must not overwrite that slot
 * meanwhile (with a snapshot every iteration: persist within two of
 * them): a slot that changes under the copy fails with -ESTALE.  On any
 * failure (-ENOSPC, -EIO, -EROFS, -EACCES, -EPERM for a directory owned by
 * another user or open to others, -ENOENT for a missing one, -EEXIST when
 * that iteration is already complete, -EBUSY when another process is
 * persisting the job) the partial generation is removed and every complete
 * one is left as it was. */
int ckpt_persist_generation(struct ckpt_persist *p, const struct ckpt_persist_req *req, struct ckpt_persist_stats *st,
                            char *why, size_t whylen);

/* A generation found on disk.  status is 0 when it is complete (and, with
 * CKPT_PERSIST_VERIFY, every checksum matched), else -errno with why. */
struct ckpt_persist_gen {
    uint64_t iteration;
    uint64_t epoch;            /* the oldest plan its ranks' images were committed under (format.h) */
    unsigned nranks;
    uint64_t logical_bytes, stored_bytes;
    uint64_t time_ns;
    int status;
    char why[320];
};

/* Flags of ckpt_persist_list and ckpt_persist_newest. */
#define CKPT_PERSIST_VERIFY 1u /* read every extent and check its sum, not only the manifest and sizes */

/* Calls fn for every generation of job in the first directory, newest
 * (highest iteration) first. */
int ckpt_persist_list(struct ckpt_persist *p, const char *job, unsigned flags,
                      void (*fn)(void *arg, const struct ckpt_persist_gen *g), void *arg, char *why, size_t whylen);

/* A restore of iteration `after` on several nodes: every generation of a
 * later iteration (complete or not) is removed from every directory, each
 * complete one said as `whose` (e.g. "this node's").  Each node holds only
 * its own ranks' generations, and one node's generation of a later
 * iteration from the run the restore replaces must not be restored beside
 * another node's from the new run.  -EBUSY when another process persists
 * the job. */
int ckpt_persist_retire(struct ckpt_persist *p, const char *job, uint64_t after, const char *whose, char *why,
                        size_t whylen);

/* The newest complete generation with an iteration below `below` (0: any)
 * into *g; each newer one that is torn or corrupt is skipped with a
 * warning naming the reason.  -ENOENT when there is none. */
int ckpt_persist_newest(struct ckpt_persist *p, const char *job, uint64_t below, unsigned flags,
                        struct ckpt_persist_gen *g, char *why, size_t whylen);

/* Reads the generation of req->iteration back into the arena: for each of
 * its ranks, slot0 holds the image, slot1 is emptied and replay.log is the
 * persisted log; checksums are verified as the data arrives and nothing in
 * the arena changes unless every byte verified.  With iteration 0 it takes
 * the newest generation and, when that one does not verify, the next older
 * one, saying why.  st->iteration is the one restored: the restart then
 * runs with CKPT_RESTORE set to it.  The job's ranks must not be running. */
int ckpt_persist_restore(struct ckpt_persist *p, const struct ckpt_persist_req *req, struct ckpt_persist_stats *st,
                         char *why, size_t whylen);

#endif
