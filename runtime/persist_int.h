/*
 * What the files of the persistence engine share (persist.h is the public
 * side): the engine's state, the mover's job description (persist_io.c),
 * the manifest codec (persist_manifest.c) and the directory helpers
 * (persist.c).  Declarations only.
 */
#ifndef CKPT_PERSIST_INT_H
#define CKPT_PERSIST_INT_H

#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "persist.h"
#include "persist_format.h"
#include "replay.h"

struct pio_ring {
    struct io_uring ring;
    char *buf;                 /* depth x block bytes, page aligned */
    bool fixed;                /* buf is registered: READ_FIXED / WRITE_FIXED */
    bool broken;               /* failed with I/O perhaps in flight: never used again */
    bool no_direct;            /* I/O from or into the arena's mappings failed: buffers only */
};

struct ckpt_persist {
    char dirs[CKPT_PERSIST_MAX_DIRS][PATH_MAX];
    unsigned ndirs, depth, keep, nrings;
    size_t block;
    struct pio_ring *rings;
    int cancel;                /* atomic; cleared when a call starts */
    struct ckpt_fault fault;   /* CKPT_FAULT; only kind CKPT_FAULT_IO matters here */
    unsigned long long passes[2]; /* pio_run calls so far: writes, reads */
    /* How far each rank's log on disk has been summed (persist_save.c):
     * the generations name it, and each reads only what is new. */
    struct log_scan {
        int rank;
        struct ckpt_rlog_scan sc;
    } *scans;
    size_t nscans;
};

/* A place read bytes go to: a file of the arena being rebuilt, and where
 * it can be, that file mapped (the first place of an extent then takes
 * whole aligned blocks straight from the disk). */
struct pio_dst {
    int fd;
    uint64_t off;
    const char *path;          /* for messages */
    char *map;                 /* the file mapped writable from byte 0, or NULL */
    uint64_t map_len;
};

/* One extent to move between memory and a stripe file. */
struct pio_task {
    uint32_t dir;
    uint64_t off;              /* in the stripe file, aligned */
    uint64_t bytes;            /* true length */
    uint64_t sum;              /* XXH3-64 the bytes must have */
    const char *src;           /* write: the bytes (mapped from the arena: blocks that are
                                * aligned go to the disk from there, through no buffer) */
    struct pio_dst *dst;       /* read: ndst places the bytes go to (none: only verify) */
    uint32_t ndst;
    int rank;                  /* write: whose chunk it is, for messages */
    bool log;                  /* write: a replay log chunk, not image data */
    uint64_t chunk;            /* write: its index */
};

struct pio_job {
    bool write;
    struct pio_task *tasks;    /* each ring takes those of its directories, in order */
    size_t ntasks;
    int fd[CKPT_PERSIST_MAX_DIRS];
    const char *path[CKPT_PERSIST_MAX_DIRS]; /* of each stripe file, for messages */
    uint64_t total;            /* bytes of all tasks */
    ckpt_persist_progress_fn progress;
    void *arg;
    /* the movers' results */
    pthread_mutex_t lock;
    pthread_cond_t all_moved;  /* moving reached 0 */
    unsigned moving;           /* rings still moving their share */
    uint64_t done;
    uint64_t direct;           /* of done: moved straight between the arena's mappings and the disk */
    int fault;                 /* CKPT_FAULT: every completion fails with this errno */
    unsigned delay_ms;         /* CKPT_FAULT: every completion comes this late */
    int err;                   /* the first failure */
    char why[512];
};

/* Moves every task of j (fsyncing the stripe files after writes) with one
 * thread per ring.  Returns 0, the first failure (j->why says it) or
 * -ECANCELED. */
int pio_run(struct ckpt_persist *p, struct pio_job *j);

/* "a,b,,c" -> p->dirs and p->ndirs (empty entries are ignored; none at
 * all is -EINVAL).  Also how a reader that moves no data (ckpt-inspect)
 * learns the directories without opening an engine. */
int pdir_split(struct ckpt_persist *p, const char *list, char *why, size_t whylen);

/* <dir>/<uid>-<job> (ckpt_job_dir): its path; with create, made (0700)
 * if missing.  The persist directory itself must exist; the job directory
 * must be this user's and private.  Returns 1 when it made the directory,
 * else 0 or -errno. */
int pdir_job(const char *dir, const char *job, bool create, char *out, size_t outlen, char *why, size_t whylen);

/* Opens a stripe file with O_DIRECT (without, where the filesystem has
 * none) and O_NOFOLLOW; mode 0600.  Returns the fd or -errno with why. */
int pdir_open(const char *path, int flags, char *why, size_t whylen);

/* The iterations of the generation directories in jobdir, highest first,
 * in *out (the caller frees it). */
int pdir_generations(const char *jobdir, uint64_t **out, size_t *n, char *why, size_t whylen);

/* Removes a generation directory and every file in it (best effort). */
void pdir_remove_gen(const char *jobdir, uint64_t iteration);

/* fsync of a directory, so the entries made in it are durable. */
int pdir_sync(const char *dir, char *why, size_t whylen);

/* Reads and checks dir0's manifest of a generation: structure, checksum,
 * job, ndirs, and every rank's image header.  Returns 0 with *out (the
 * caller frees it) or -errno / -EBADMSG with why. */
int pm_load(const char *jobdir, uint64_t iteration, const char *job, unsigned ndirs, struct ckpt_pm_header **out,
            char *why, size_t whylen);

/* The tables of a loaded manifest. */
struct ckpt_pm_rank *pm_ranks(const struct ckpt_pm_header *m);
uint64_t *pm_stripes(const struct ckpt_pm_header *m);
struct ckpt_pm_extent *pm_extents(const struct ckpt_pm_header *m);
uint64_t *pm_refs(const struct ckpt_pm_header *m);

/* Bytes of a manifest with these counts and header areas. */
uint64_t pm_size(unsigned nranks, unsigned ndirs, uint64_t nextents, uint64_t nrefs, uint64_t heads);

/* Seals a manifest filled in by the writer: sets magic, version and sum. */
void pm_seal(struct ckpt_pm_header *m);

/* Checks that every stripe file of a generation is there and long enough
 * (a torn write leaves one short).  Returns 0 or -EBADMSG/-errno with why. */
int pm_check_stripes(const struct ckpt_persist *p, const char *job, const struct ckpt_pm_header *m, char *why,
                     size_t whylen);

/* A rank's files being rebuilt by a restore: its image, its replay log,
 * each mapped where it could be (map NULL: written with pwrite). */
struct pm_dest {
    int fd[2];
    char path[2][PATH_MAX + 64]; /* [1]: the log on disk a generation names (CKPT_PM_LOG_FILE) */
    char *map[2];
    uint64_t len[2];
};

/* Reads every extent of generation m with its checksum verified, each
 * shared extent once; when dest is given, writes rank i's image data into
 * dest[i].fd[0] (at its data_offset) and its log into dest[i].fd[1].
 * *moved (when given) gets the bytes read, *direct (when given) those
 * read straight into dest's mappings. */
int pm_read(struct ckpt_persist *p, const char *job, const struct ckpt_pm_header *m, const struct pm_dest *dest,
            ckpt_persist_progress_fn progress, void *arg, uint64_t *moved, uint64_t *direct, char *why,
            size_t whylen);

#endif
