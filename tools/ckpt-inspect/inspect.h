/*
 * ckpt-inspect's internal interface: the tiers that hold snapshot images
 * (the host-memory arena, the replicas this node holds for its peers, the
 * generations persisted to disk, each behind the same small ops table),
 * the catalog of the images one job has in all
 * of them, the verification of an image, the commands, and the progress
 * display.  ckpt-inspect only ever reads what libckpt wrote, with the one
 * exception of `gc --yes`: it must never change an image, a replay log or
 * anything of a job that is still alive.
 */
#ifndef CKPT_INSPECT_H
#define CKPT_INSPECT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "format.h"
#include "registry.h"

/* Exit statuses, as docs/ckpt-inspect.md lists them. */
enum {
    EXIT_OK = 0,
    EXIT_DAMAGED = 1, /* something did not verify, or was not there to verify */
    EXIT_USAGE = 2,
    EXIT_ERROR = 3,   /* could not look: no arena, unreadable files, a full disk */
};

struct options {
    const char *arena_root; /* --arena, CKPT_ARENA_DIR, /dev/shm/ckpt */
    const char *persist_dirs; /* --persist-dirs, CKPT_PERSIST_DIRS; "": no disk tier */
    const char *job;        /* --job, CKPT_JOB; NULL: every job of this user */
    const char *tier;       /* --tier: only that tier ("arena", "peer", "disk"); NULL: all */
};

/* ---- display.c: progress on a terminal, human-readable sizes and ages ---- */

struct progress {
    char what[96];
    uint64_t total, done;
    bool tty;          /* stderr is a terminal: draw; otherwise say nothing */
    double last_draw;  /* seconds, CLOCK_MONOTONIC */
};

void progress_start(struct progress *p, const char *what, uint64_t total);
void progress_add(struct progress *p, uint64_t n);
/* Clears the bar so that a result line can be printed; the next
 * progress_add draws it again below that line. */
void progress_pause(struct progress *p);
/* Clears the bar for good. */
void progress_end(struct progress *p);

/* "1.5 MiB", "12 B" into out; returns out. */
const char *human_bytes(uint64_t n, char *out, size_t outlen);
/* "4s", "3m12s", "2h5m", "6d3h" since t (CLOCK_REALTIME ns); returns out. */
const char *human_age(uint64_t t_ns, char *out, size_t outlen);

/* ---- tiers: where images are held ---- */

struct tier;
struct image;

/* A readable view of one image: base..base+len. */
struct view {
    const char *base;
    size_t len;
};

/* Growing lists the tiers fill. */
struct names {
    char **v;
    size_t n, cap;
};

struct catalog {
    struct image *v;
    size_t n, cap;
};

/*
 * A backend that holds snapshot images, filled with designated
 * initialisers (tier_arena.c: the arena and the peer replicas; tier_disk.c:
 * persisted generations), listed by tiers_open.  Every function returns 0
 * or -errno, with a reason in why where it takes one.
 */
struct tier_ops {
    const char *name; /* "arena", "peer", "disk" */
    /* map reads the data (instead of mapping memory that holds it): as
     * slow as checking it again, so progress counts it */
    bool reads;
    /* Adds the names of this user's jobs the tier holds to out. */
    int (*jobs)(const struct tier *t, struct names *out, char *why, size_t whylen);
    /* Adds every image of job to cat (tier, rank, slot, where, file size,
     * modification time), reading no data. */
    int (*images)(const struct tier *t, const char *job, struct catalog *cat, char *why, size_t whylen);
    /* Makes the image readable; the caller calls unmap.  Without data only
     * the header area (header, records, chunk sums) need be read; p (may
     * be NULL) counts the data bytes a tier that reads has read. */
    int (*map)(const struct tier *t, const struct image *img, bool data, struct view *v, struct progress *p,
               char *why, size_t whylen);
    void (*unmap)(const struct tier *t, struct view *v);
    /* Verifies the replay log that goes with img (its rank's; with
     * log_per_copy, that copy's own); NULL where the tier keeps none. */
    int (*rlog_verify)(const struct tier *t, const struct image *img, uint64_t *last_iteration, char *why,
                       size_t whylen);
    /* each copy has a log of its own (disk: one per generation), not one
     * per rank */
    bool log_per_copy;
};

struct tier {
    const struct tier_ops *ops;
    char root[PATH_MAX];      /* arena, peer: the directory; disk: CKPT_PERSIST_DIRS */
};

extern const struct tier_ops arena_tier_ops, peer_tier_ops, disk_tier_ops;

/* tier_arena.c: where each rank's standby of @job is, one line each. */
void arena_print_standbys(const struct tier *t, const char *job, int world, uint64_t newest_iteration);

#define MAX_TIERS 4

/* Fills t with the tiers available now (those whose root exists, only
 * o->tier's when given), fastest first: arena, peer, disk; returns how
 * many. */
int tiers_open(const struct options *o, struct tier *t, int max);
/* Where tiers_open looks, for messages: "DIR", "DIR or D1,D2". */
const char *tiers_where(const struct options *o, char *out, size_t outlen);

/* ---- catalog.c: the images of one job in every tier ---- */

enum image_state {
    IMG_UNCHECKED,
    IMG_EMPTY,         /* nothing committed: never written, or being written now */
    IMG_BAD_HEADER,    /* unreadable, or a header that does not verify: generation unknown */
    IMG_HEADER_OK,     /* header verified, data not checked yet */
    IMG_BAD_DATA,      /* header verified, a chunk does not */
    IMG_CHANGED,       /* the writer replaced it while it was being read */
    IMG_VERIFIED,
};

struct image {
    const struct tier *tier;
    char job[CKPT_JOB_MAX];    /* the job whose directory it was found in */
    int rank;                  /* -1: unknown (disk: a manifest that does not verify) */
    int slot;                  /* the tier's index of this copy (arena, peer: slot0/slot1; disk: -1) */
    uint64_t key;              /* disk: the iteration of the generation's directory */
    char where[PATH_MAX];      /* for messages: the file (disk: the generation's directory) */
    uint64_t file_bytes;
    uint64_t mtime_ns;
    enum image_state state;
    struct ckpt_header h;      /* valid from IMG_HEADER_OK on (and IMG_BAD_DATA, IMG_CHANGED) */
    uint64_t bad_chunks;
    char why[256];             /* why it is not IMG_VERIFIED */
    /* From IMG_HEADER_OK on: the bytes it holds and the count of its
     * allocations by kind (enum ckpt_alloc_kind; the last: kinds this tool
     * does not know), and the bytes of those allocations (more than it
     * holds where the program declared parts of them free). */
    uint64_t kind_bytes[CKPT_KINDS + 1], kind_count[CKPT_KINDS + 1], allocated;
};

void names_add(struct names *n, const char *name);
void names_free(struct names *n);
struct image *catalog_add(struct catalog *c);
void catalog_free(struct catalog *c);

/* The jobs this command looks at: o->job, else every job of this user in
 * any tier (sorted, without repeats).  Returns 0 or -errno (said). */
int jobs_find(const struct options *o, const struct tier *t, int nt, struct names *jobs);
/* The one job a command works on: fails (said) when there are several or none. */
int job_one(const struct options *o, const struct tier *t, int nt, const char **job, struct names *keep);
/* Every image of job in every tier, headers checked, sorted by rank, tier,
 * slot.  Returns 0 or -errno (said). */
int catalog_build(const struct tier *t, int nt, const char *job, struct catalog *cat);

/* The newest generation that every rank holds a committed header of, or 0. */
uint64_t catalog_newest(const struct catalog *cat);
/* The world size the headers agree on (the highest rank + 1 when none says). */
int catalog_world(const struct catalog *cat);
/* "rank0 slot1 (arena)", "rank0 gen-20 (disk)" for messages. */
const char *image_name(const struct image *img, char *out, size_t outlen);

/* ---- check.c: verification ---- */

/* Checks img's header (data too when full), filling state, h, why and
 * bad_chunks; each(img, why) is called for every bad chunk when given.
 * Progress is counted in image bytes.  Returns 0 when it verified, else
 * -EBADMSG / -ENODATA / -errno. */
int image_check(struct image *img, bool full, struct progress *p,
                void (*each)(const struct image *img, const char *why));
/* With v mapping img (header verified before): still the same committed
 * image?  False once the writer has begun to replace it. */
bool image_unchanged(const struct image *img, const struct view *v);

/* The first copy of rank's generation gen, in tier order, that verifies
 * in full, or NULL. */
struct image *image_find(struct catalog *cat, int rank, uint64_t gen, struct progress *p);
/* Maps a verified image again for reading its data (p counts what a tier
 * that reads has read); -ESTALE (with why) when the writer has replaced it
 * since it verified.  The caller checks image_unchanged once more after
 * reading, and unmaps. */
int image_map(const struct image *img, struct view *v, struct progress *p, char *why, size_t whylen);

/* Progress units of the work on img: checking it in full (header and
 * data), and reading only its data, each counting the tier's reading. */
uint64_t image_check_work(const struct image *img);
uint64_t image_data_work(const struct image *img);

/* "plain", "async", "vmm", "managed": enum ckpt_alloc_kind in words. */
const char *alloc_kind_name(uint32_t kind);

/* ---- the commands: each returns an exit status ---- */

int cmd_list(const struct options *o, int argc, char **argv);
int cmd_verify(const struct options *o, int argc, char **argv);
int cmd_diff(const struct options *o, int argc, char **argv);
int cmd_export(const struct options *o, int argc, char **argv);
int cmd_gc(const struct options *o, int argc, char **argv);
int cmd_timeline(const struct options *o, int argc, char **argv);

/* "12" -> 12 in [min, max]; -EINVAL otherwise. */
/* ---- timeline_svg.c: the picture of iterations a..b of one rank's
 * timeline, or of several ranks of one node over one time axis. */
struct ckpt_tl_event;
struct tl_rank {
    uint32_t rank;
    const struct ckpt_tl_event *ev;
    size_t n;
};
void timeline_svg(FILE *f, const struct tl_rank *r, size_t nranks, uint64_t a, uint64_t b);

int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* ---- safetensors.c ---- */

/* Writes all of n bytes at fd's offset (a write returns at most about
 * 2 GiB, and may return less).  Returns 0 or -errno. */
int write_all(int fd, const void *p, size_t n);

struct st_tensor {
    char name[64];
    const void *data;
    uint64_t size; /* bytes: dtype U8, shape [size] */
};

struct st_meta {
    char key[80];
    char value[80];
};

/* Writes a safetensors file at path (created, mode 0600, never an
 * existing file replaced: the caller writes a temporary name and renames
 * it), synced to its device.  Progress counts the tensors' bytes.
 * Returns 0 or -errno with why. */
int safetensors_write(const char *path, const struct st_tensor *t, size_t nt, const struct st_meta *m, size_t nm,
                      struct progress *p, char *why, size_t whylen);

#endif
