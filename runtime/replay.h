/*
 * The replay log: what the host of a rank could observe of the device, in
 * order, so that a restarted rank can re-run its host code up to a
 * snapshot's iteration with the device work suppressed.  One file per rank
 * beside its arena slots; records carry their own checksum; an ITER record
 * closes each iteration and is flushed before that iteration's snapshot is
 * taken, so every committed snapshot has its whole log behind it.
 *
 * The log lives in the arena (host memory, up to CKPT_REPLAY_LOG_MAX), or
 * whole on disk when the rank is given a file there (disk below, from
 * CKPT_REPLAY_LOG_DIR): the arena's replay.log is then a one-page stub
 * naming that file, and every function here that takes a rank directory
 * reads the log through it.
 *
 * Every record belongs to one thread of the program (a key that names the
 * thread the same way in every run, interpose/thread.c): replay hands each
 * thread its own records in order, so independent threads may interleave
 * differently in the replaying run without a refusal or swapped payloads.
 */
#ifndef CKPT_REPLAY_H
#define CKPT_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ckpt_rl_type {
    CKPT_RL_ALLOC = 1,    /* a = ordinal, b = size, c = device address */
    CKPT_RL_D2H = 2,      /* a = size, b = issuing thread, c = its copy number (0: a
                           * synchronous copy); payload = the bytes the host received */
    CKPT_RL_VALUE = 3,    /* a = what (interpose's enum), b = the result; e.g. elapsed time bits */
    CKPT_RL_ITER = 4,     /* a = iteration completed */
    CKPT_RL_OVERFLOW = 5, /* a = iteration: the log stops here (CKPT_REPLAY_LOG_MAX) */
    CKPT_RL_OBSERVE = 6,  /* a = what the host asked (a sync, a query), b = the answer,
                           * c = how many more times in a row the thread asked and got it
                           * (appends count up; replay hands it out 1 + c times); the D2H
                           * records that follow became visible there */
    CKPT_RL_TAINT = 7,    /* a = iteration: from its boundary on, replay cannot be
                           * faithful; payload = the reason */
    CKPT_RL_FILE = 8,     /* a = the length, at this boundary, of a file the program writes
                           * (holds open, or appends to), b = its open flags; payload =
                           * its absolute path */
    CKPT_RL_WORK = 9,     /* a = how many calls that queue device work or free memory
                           * the thread made since its record before (replay hands it
                           * out a times): which of them came before the snapshot */
    CKPT_RL_ASIDE = 10,   /* a = size, b = device address, c = what (interpose's enum):
                           * device memory a library took or gave back on the thread's
                           * behalf; readers step over it (ckpt_rlog_on_aside) */
    CKPT_RL_SOCK = 11,    /* a = a connection to the job's rendezvous (its name), b = what
                           * (interpose's enum), c = the result (-errno, or bytes read);
                           * payload = the bytes read, or the peer's address (an accept):
                           * replay steps over these unless ckpt_rlog_serve_sockets */
    CKPT_RL_NTYPES
};

/* One record as replay hands it out. */
struct ckpt_rl_rec {
    uint64_t a, b, c;
    const void *payload; /* into the log, valid until close */
    uint32_t len;
};

/* Starts a fresh log for recording in dir, or in the file disk (NULL:
 * none) with a stub in dir; any old one is replaced.  Returns 0 or -errno
 * with why. */
int ckpt_rlog_create(const char *dir, const char *disk, uint64_t max_bytes, char *why, size_t whylen);

/* Opens dir's log to replay up to the ITER record of iteration; everything
 * after it is cut off (the restarted run writes those iterations anew).
 * Returns 0, or -EBADMSG/-ENOENT/-ERANGE/-EPERM with why (a damaged record,
 * no log, no such iteration, a log that overflowed before it, or one that
 * says replay stopped being faithful before it: the TAINT's reason). */
int ckpt_rlog_open_replay(const char *dir, const char *disk, uint64_t iteration, uint64_t max_bytes, char *why,
                          size_t whylen);

/* Whether replay hands out SOCK records (a standby started alone, which
 * is served its rank's rendezvous from the log) or steps over them (any
 * other replay meets its peers for real).  Before opening. */
void ckpt_rlog_serve_sockets(bool serve);

/* Follow mode (a standby): opens dir's log, which the live rank is
 * writing, with nothing before the cut yet; ckpt_rlog_follow_next moves the
 * cut forward as the log grows, and replay reads it as it reads a cut log.
 * Returns 0 or -errno with why.  In both, disk is the file the log is to
 * live in once the rank is live (NULL: the arena): a log found whole in
 * the arena moves there when it goes live (ckpt_rlog_go_live). */
int ckpt_rlog_open_follow(const char *dir, const char *disk, uint64_t max_bytes, char *why, size_t whylen);
/* Moves the cut forward to the next ITER record, when the iteration it
 * ends is at most upto (into *iteration): the records up to it become
 * their threads' to read.  Returns 0; -EAGAIN when the log does not hold
 * it yet (look again soon), -EBUSY when it is past upto (wait for new
 * orders); -EBADMSG (a damaged record), -ERANGE (the log overflowed),
 * -EPERM (tainted), with why. */
int ckpt_rlog_follow_next(uint64_t upto, uint64_t *iteration, char *why, size_t whylen);
/* Takeover: what the live run logged after the cut is kept, as the failed
 * run's records (ckpt_rlog_failed_run), and the cut moves no more.  With
 * dir (a spare's standby, which followed a copy of the log), the log of
 * the rank directory dir is the one to go on writing (disk as in
 * ckpt_rlog_open_follow): refused, -EBADMSG with why, unless its first
 * bytes are the ones replayed.  Returns 0 or -errno. */
int ckpt_rlog_follow_end(const char *dir, const char *disk, char *why, size_t whylen);

/* Appends a record of thread (buffered until ckpt_rlog_flush).  Over the
 * size limit it writes one OVERFLOW record, says so once, and drops the
 * rest. */
void ckpt_rlog_append(enum ckpt_rl_type type, uint64_t thread, uint64_t a, uint64_t b, uint64_t c,
                      const void *payload, uint32_t len);

/* Writes what is buffered.  Returns 0 or -errno. */
int ckpt_rlog_flush(void);

/* True when the log can still restore the iterations being recorded. */
bool ckpt_rlog_complete(void);

/* Replay: thread's next record, which must be of type want.  Returns 0
 * and its fields, -EPROTO with why describing the divergence, or -ENODATA
 * when thread has no record left before the cut. */
int ckpt_rlog_next(uint64_t thread, enum ckpt_rl_type want, struct ckpt_rl_rec *out, char *why, size_t whylen);

/* The type of thread's next record (its fields in out, which may be
 * NULL), or 0 when it has none left.  Consumes nothing. */
int ckpt_rlog_peek(uint64_t thread, struct ckpt_rl_rec *out);
/* Replaying: fn sees each ASIDE record a thread's reading steps over, in
 * the thread's order, before the record after it is read (with the log's
 * lock held: fn may not read the log). */
void ckpt_rlog_on_aside(void (*fn)(uint64_t thread, const struct ckpt_rl_rec *rec));

/* After the restore went live: thread's next record in what the failed
 * run logged after the cut (out may be NULL), consumed when take is set;
 * 0 when the failed run has none left (it died there).  Until close. */
int ckpt_rlog_failed_run(uint64_t thread, struct ckpt_rl_rec *out, bool take);
/* How many of the failed run's records after the cut are not yet taken. */
size_t ckpt_rlog_failed_left(void);

/* Replay: lets go of every thread all of whose records before the cut
 * satisfy only(type, a) (a thread that only polled): they leave the cut,
 * so no one waits for the thread to use them.  Returns how many threads,
 * and in *records how many answers they had (repeats counted). */
size_t ckpt_rlog_release(bool (*only)(int type, uint64_t a), uint64_t *records);
/* Replay: thread was let go by ckpt_rlog_release. */
bool ckpt_rlog_released(uint64_t thread);

/* Replay: true when thread has records in the log and has had them all. */
bool ckpt_rlog_dry(uint64_t thread);

/* Replay: 0 when every thread has had all its records before the cut;
 * else how many records are left, with *thread one that has some. */
size_t ckpt_rlog_left(uint64_t *thread);

/* Replay is over (the target ITER record was consumed): switch to
 * appending after it. */
int ckpt_rlog_go_live(void);

void ckpt_rlog_close(void);

/* A read-only descriptor of dir's log, wherever it lives (the caller
 * closes it), or -errno with why. */
int ckpt_rlog_open_fd(const char *dir, char *why, size_t whylen);
/* The lineage of the log open on fd (nonzero), drawn anew whenever the log
 * is made or cut short at a restore: while it stays the same, the file
 * only grows, so bytes read between two equal readings of it are a prefix
 * of the log.  0 for a file too short to say. */
uint64_t ckpt_rlog_lineage(int fd);
/* 1 with the path in disk when dir's log lives on disk, 0 when in the
 * arena, -errno when there is none. */
int ckpt_rlog_where(const char *dir, char *disk, size_t disklen);
/* Removes dir's log, its file on disk included. */
void ckpt_rlog_remove(const char *dir);
/* Makes dir's log the file on disk at path (this user's, 0600): the
 * arena's replay.log becomes a stub that names it.  0 or -errno with why. */
int ckpt_rlog_point(const char *dir, const char *path, char *why, size_t whylen);

/* The names of a rank's log, spelled here and in replay_where.c only:
 * CKPT_RLOG_ARENA_NAME in its arena directory (the log, or the stub that
 * names its file on disk), rank<N>.replay.log in a directory on disk
 * (CKPT_REPLAY_LOG_DIR, beside the generations, a node's peers' logs).
 * A path is 0, or -ENAMETOOLONG when it does not fit @n bytes. */
#define CKPT_RLOG_ARENA_NAME "replay.log"
/* <rank_dir>/replay.log. */
int ckpt_rlog_arena_path(char *out, size_t n, const char *rank_dir);
/* <dir>/rank<rank>.replay.log. */
int ckpt_rlog_disk_path(char *out, size_t n, const char *dir, int rank);
/* Whether the entry @name of a directory on disk is a rank's log, as
 * ckpt_rlog_disk_path names it; *@rank is then the rank. */
bool ckpt_rlog_disk_name(const char *name, int *rank);
/* CKPT_REPLAY_LOG_DIR=arena: the logs live in the arena, in memory. */
#define CKPT_LOG_IN_ARENA "arena"
/* Where ckpt-resume keeps them on disk when nothing else says where: a
 * directory of its own per arena, CKPT_LOG_HOME/libckpt-<uid>/<xxh3 of the
 * arena's job directory>-<job>, with a file CKPT_LOG_HOME_ARENA naming that
 * job directory, so that ckpt-inspect gc finds the logs of an arena that
 * is gone. */
#define CKPT_LOG_HOME "/var/tmp"
#define CKPT_LOG_HOME_ARENA "arena"
/* Removes such a directory once it holds nothing but that file: 0, or
 * -errno (-ENOTEMPTY: logs are left in it). */
int ckpt_rlog_home_close(const char *dir);

/* The part of a log a snapshot of iteration needs (replay_prefix.c): the
 * log up to the end of that iteration's record, and the XXH3-64 of its
 * records.  A scan goes on from where the last one on the same file and
 * lineage stopped (start from a zeroed struct; free it with
 * ckpt_rlog_scan_free).  0 with bytes and sum; -ENODATA when the log does
 * not end the iteration (yet); -ESTALE when a restore cut it short while
 * it was read; -EBADMSG when it is not a log that could; why says which. */
struct ckpt_rlog_scan {
    uint64_t dev, ino, lineage; /* the file and lineage scanned */
    uint64_t iteration;         /* the iteration the prefix ends */
    uint64_t bytes;             /* the prefix's length; 0: start over */
    uint64_t sum;
    void *state;                /* the running XXH3 over the prefix's records */
};
int ckpt_rlog_scan(int fd, uint64_t iteration, struct ckpt_rlog_scan *sc, char *why, size_t whylen);
void ckpt_rlog_scan_free(struct ckpt_rlog_scan *sc);
/* Copies the first bytes of the log on from into to (to < 0: only
 * checks), checking its records against sum as ckpt_rlog_scan made it: 0,
 * -EBADMSG when they are not those bytes (why says so), or -errno. */
int ckpt_rlog_copy_prefix(int from, int to, uint64_t bytes, uint64_t sum, char *why, size_t whylen);

/* Checks every record of dir's log without opening it for replay (tools;
 * safe beside a rank that is appending).  Returns 0 with *last_iteration
 * the last iteration the log closes; -errno (why says so) when it cannot
 * be opened; -EBADMSG with why naming the byte offset of the first damaged
 * record, or -ENODATA when the last record is cut short by the end of the
 * file (a rank may be writing it: look again), *last_iteration then being
 * the last iteration closed before it. */
int ckpt_rlog_verify(const char *dir, uint64_t *last_iteration, char *why, size_t whylen);
/* The same check of a log the caller opened (path names it in messages),
 * e.g. one rebuilt in memory from a persisted generation; the caller
 * closes f. */
int ckpt_rlog_verify_fd(int f, const char *path, uint64_t *last_iteration, char *why, size_t whylen);

#endif
