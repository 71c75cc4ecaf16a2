/*
 * The replay log: what the host of a rank could observe of the device, in
 * order, so that a restarted rank can re-run its host code up to a
 * snapshot's iteration with the device work suppressed.  One file per rank
 * beside its arena slots; records carry their own checksum; an ITER record
 * closes each iteration and is flushed before that iteration's snapshot is
 * taken, so every committed snapshot has its whole log behind it.
 */
#ifndef CKPT_REPLAY_H
#define CKPT_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ckpt_rl_type {
    CKPT_RL_ALLOC = 1,   /* a = ordinal, b = size */
    CKPT_RL_D2H = 2,     /* a = size; payload = the bytes the host received */
    CKPT_RL_VALUE = 3,   /* a = what (enum below), b = the result; e.g. elapsed time bits */
    CKPT_RL_ITER = 4,    /* a = iteration completed */
    CKPT_RL_OVERFLOW = 5 /* a = iteration: the log stops here (CKPT_REPLAY_LOG_MAX) */
};

/* Starts a fresh log for recording in dir (any old one is replaced).
 * Returns 0 or -errno with why. */
int ckpt_rlog_create(const char *dir, uint64_t max_bytes, char *why, size_t whylen);

/* Opens dir's log to replay up to the ITER record of iteration; everything
 * after it is cut off (the restarted run writes those iterations anew).
 * Returns 0, or -EBADMSG/-ENOENT/-ERANGE with why (a damaged record, no
 * log, no such iteration, or a log that overflowed before it). */
int ckpt_rlog_open_replay(const char *dir, uint64_t iteration, uint64_t max_bytes, char *why, size_t whylen);

/* Appends a record (buffered until ckpt_rlog_flush).  Over the size limit
 * it writes one OVERFLOW record, says so once, and drops the rest. */
void ckpt_rlog_append(enum ckpt_rl_type type, uint64_t a, uint64_t b, const void *payload, uint32_t len);

/* Writes what is buffered.  Returns 0 or -errno. */
int ckpt_rlog_flush(void);

/* True when the log can still restore the iterations being recorded. */
bool ckpt_rlog_complete(void);

/* Replay: the next record, which must be of type want.  Returns 0 and its
 * fields (payload points into the log, valid until close), -EPROTO with
 * why describing the divergence, or -ENODATA past the end. */
int ckpt_rlog_next(enum ckpt_rl_type want, uint64_t *a, uint64_t *b, const void **payload, uint32_t *len,
                   char *why, size_t whylen);

/* Replay is over (the target ITER record was consumed): switch to
 * appending after it. */
int ckpt_rlog_go_live(void);

void ckpt_rlog_close(void);

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
