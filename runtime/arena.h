/*
 * The host-memory arena of one rank: two slot files (double buffering)
 * under CKPT_ARENA_DIR/<uid>-<job>/rank<N>/, each a snapshot image as
 * format.h lays it out, mapped shared so ckpt-resume (and a restarted rank)
 * can read what the rank wrote, and surviving the rank's death.
 * Directories are 0700 and files 0600, owned by the job's user; an existing
 * path owned by someone else or open to others is refused, never used.
 */
#ifndef CKPT_ARENA_H
#define CKPT_ARENA_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The directory under CKPT_ARENA_DIR where a node's agent keeps the
 * replicas it holds for its peers, laid out as arenas of their own
 * (CKPT_ARENA_DIR/peers/<uid>-<job>/rank<N>/slot0|slot1); and in a
 * directory of replay logs on disk, the one holding the logs the agent
 * keeps for its peers (logship.c).  Never a valid <uid>-<job> name, so it
 * is never taken for a job's directory. */
#define CKPT_PEERS_SUBDIR "peers"

struct ckpt_arena {
    char dir[PATH_MAX];
    int fd[2];
    void *base[2];
    size_t len[2];
    int owner;    /* CKPT_ARENA_OWN: the locked owner file's fd, else -1 */
    pid_t holder; /* after -EBUSY: the process that owns the directory (0: not known) */
};

/* The file in a rank's directory that its one live process holds a lock on. */
#define CKPT_ARENA_OWNER "owner"
/* In a rank's directory, a replaying process's (interpose/world.c): what
 * the program prints, and the directory of the files it writes aside. */
#define CKPT_REPLAY_OUTPUT "replay-output"
#define CKPT_REPLAY_FILES "replay-files"

enum {
    CKPT_ARENA_FRESH = 1, /* empty the slots: a new run must never be taken for an old one's restart */
    CKPT_ARENA_OWN = 2,   /* the rank's own process: lock the directory first, or -EBUSY */
};

/* Creates (or opens) the rank's directory and both slot files, as @flags
 * say.  With CKPT_ARENA_OWN the directory is this process's until it
 * closes the arena or ends: a process that the rank started and that
 * initialises CUDA itself (it inherits RANK and LD_PRELOAD) gets -EBUSY,
 * a->holder, and never touches the files the rank has mapped.  Returns 0,
 * or -errno with a one-line reason in why (naming the path). */
int ckpt_arena_open(struct ckpt_arena *a, const char *root, const char *job, int rank, unsigned flags, char *why,
                    size_t whylen);

/* Makes slot at least bytes long and mapped.  *moved is set when the
 * mapping address changed (pinned registrations must be redone).  Returns
 * 0 or -errno (-ENOSPC when /dev/shm is full: the slot is left as it was). */
int ckpt_arena_reserve(struct ckpt_arena *a, int slot, size_t bytes, int *moved);

/* Unmaps and closes, and lets the directory go; the files stay for ckpt-resume. */
void ckpt_arena_close(struct ckpt_arena *a);
/* Whether the arena's slots were removed from under it (another process
 * took the directory away): its snapshots would reach nobody. */
bool ckpt_arena_removed(const struct ckpt_arena *a);

/* May @dir (its lstat/fstat in @st) hold other users' private
 * directories, as the arena root or a persist directory?  It must be this
 * user's or root's, and sticky if others may write to it.  Returns 0 or
 * -EPERM with why. */
struct stat;
int ckpt_shared_root_ok(const char *dir, const struct stat *st, char *why, size_t whylen);

/* How much the filesystem of dir (or of its nearest existing parent)
 * holds: *free and *total bytes.  Returns 0 or -errno. */
int ckpt_arena_room(const char *dir, uint64_t *free, uint64_t *total);

/* The bytes the slot files of every rank under @job_dir (an arena's
 * <uid>-<job> directory) hold on their filesystem: room the job has
 * already, counted with the free space when it asks for more. */
uint64_t ckpt_arena_held(const char *job_dir);

/* The fix for an arena filesystem too small (the same words in libckpt's
 * warning and in ckpt-doctor's report). */
#define CKPT_ARENA_ROOM_FIX                                                    \
    "make it larger (Docker: --shm-size; Kubernetes: an emptyDir volume with medium: Memory and a " \
    "sizeLimit, mounted at /dev/shm) or set CKPT_ARENA_DIR to a larger tmpfs"

/* Can this user's arena of @job be made under @root, and written to?
 * Makes the directories ckpt_arena_open would, writes a page there and
 * removes it.  Returns 0, or -errno with why naming the path. */
int ckpt_arena_usable(const char *root, const char *job, char *why, size_t whylen);

/*
 * Retires the snapshot in the slot file open as @fd when its header
 * verifies and it is job @job's, rank @rank's, and of an iteration after
 * @after: its header loses its magic, so that nothing takes it for a
 * snapshot again (a damaged one is left for the reader that names it).
 * A restore of @after makes such a copy belong to the run the restore
 * replaces (the restored run writes the rank's replay log again past
 * @after, and a program that is not bit-exact from run to run computes
 * those iterations otherwise): a later restore must never pair it with
 * the new run's copies.  Returns 1 with *@iteration set when it retired
 * one, 0 when there was none to retire, -errno.
 */
int ckpt_slot_retire(int fd, const char *job, int rank, uint64_t after, uint64_t *iteration);

/*
 * The names in a job's arena, spelled here and nowhere else: a root
 * (CKPT_ARENA_DIR, a peers' store, a persist directory) holds a directory
 * <uid>-<job> per user and job, <uid> the effective uid in decimal; in an
 * arena it holds a directory rank<N> per rank, each holding the slot files
 * slot0 and slot1 beside the rank's replay log (replay.h) and the files
 * named above.  The functions that make a path return 0, or -ENAMETOOLONG
 * when it does not fit @n bytes (ckpt_pathf).
 */
/* Whether @job can be a job's name: it names a directory in every root
 * and fills an image header's field (format.h), so CKPT_JOB, a tool's
 * --job and a name a peer sends are held to CKPT_JOB_NAME_RULE alike. */
bool ckpt_job_name_ok(const char *job);
#define CKPT_JOB_NAME_RULE "1 to 63 of A-Z a-z 0-9 . _ - (not starting with a dot)"
/* <arena_root>/peers: the replicas' store (CKPT_PEERS_SUBDIR). */
int ckpt_peers_root(char *out, size_t n, const char *arena_root);
/* In a job's directory: the mark that CKPT_FAULT's kill has fired, once
 * per job (interpose/fault.c); ckpt-resume removes it with the arena. */
#define CKPT_FAULT_FIRED "fault-fired"
/* <root>/<uid>-<job>: this user's directory of @job under @root. */
int ckpt_job_dir(char *out, size_t n, const char *root, const char *job);
/* Whether the entry @name of a root is this user's directory of a job, as
 * ckpt_job_dir names it (another user's never is); *@job then points at
 * the job's name in @name. */
bool ckpt_job_dir_name(const char *name, const char **job);
/* The directory of a rank, as ckpt_arena_open names it:
 * <root>/<uid>-<job>/rank<rank>. */
int ckpt_arena_path(char *out, size_t outlen, const char *root, const char *job, int rank);
/* <job_dir>/rank<rank>. */
int ckpt_rank_dir(char *out, size_t n, const char *job_dir, int rank);
/* The job's directory that holds the rank's directory @rank_dir
 * (<job_dir>/rank<N>, as ckpt_rank_dir makes it); -EINVAL when @rank_dir
 * is no such path. */
int ckpt_rank_dir_job(char *out, size_t n, const char *rank_dir);
/* Whether the entry @name of a job's directory is a rank's directory,
 * "rank<N>" as ckpt_rank_dir writes it; *@rank is then N. */
bool ckpt_rank_dir_name(const char *name, int *rank);
/* The name of a rank's slot file @slot (0 or 1) in its directory. */
const char *ckpt_slot_name(int slot);
/* <rank_dir>/slot<slot>, slot 0 or 1. */
int ckpt_slot_path(char *out, size_t n, const char *rank_dir, int slot);

#endif
