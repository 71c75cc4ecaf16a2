/*
 * What the files of ckpt-resume share: the settings it runs with (command
 * line and CKPT_* table), a job (the ranks of one launch and how they
 * ended), the agent channel the ranks report on, and the job's arena on
 * disk.  Every function here returns 0 or -errno unless its comment says
 * otherwise.  Declarations only: no definitions, no static tables.
 */
#ifndef CKPT_RESUME_H
#define CKPT_RESUME_H

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "coord.h"
#include "follow.h"
#include "format.h"
#include "recovery.h"
#include "util.h"

#define RESUME_MAX_NPROC 4096
#define RESUME_MAX_RESTARTS 1000
#define RESUME_MAX_BACKOFF_S 30.0
/* Ranks a wrapped launcher may report as (RANK values); reports past it are ignored. */
#define RESUME_MAX_RANKS 65536
/* The exit status of a job that ckpt-resume stopped because it hung, as timeout(1) has it. */
#define RESUME_EXIT_HUNG 124
/* A rank's exit status when it refused a restore (interpose/interpose.h: CKPT_EXIT_RESTORE). */
#define RESUME_EXIT_REFUSED 75
#define RESUME_EXIT_NO_ROOM 78 /* a rank found, at its first snapshot, that the host cannot hold the arena */

struct options {
    int nproc;              /* local ranks to start, >= 1 */
    int first_rank;         /* RANK of the first of them: node_rank * nproc */
    const char *coord;      /* where this agent's member and coordinator meet: its bridge's loopback
                             * address (bridge.c); NULL: one node */
    const char *etcd;       /* CKPT_COORD=etcd://ENDPOINTS: the etcd the nodes meet through; NULL: one node */
    int nnodes, node_rank;  /* CKPT_NNODES, CKPT_NODE_RANK */
    bool spare;             /* --spare: waits beside the job for a node to be lost and takes its rank */
    bool wrap;              /* no --nproc: CMD is one process, maybe a launcher of the ranks */
    int max_restarts;       /* restarts allowed before giving up: --max-restarts, else CKPT_MAX_RESTARTS */
    double kill_grace_s;    /* SIGTERM -> SIGKILL delay, CKPT_KILL_GRACE */
    double hang_timeout_s;  /* CKPT_HANG_TIMEOUT; 0: no hang detection */
    double backoff_s;       /* CKPT_RESTART_BACKOFF: wait before the first restart */
    bool keep_arena;        /* CKPT_KEEP_ARENA */
    uint64_t first_restore; /* the user's CKPT_RESTORE, for the first launch only */
    const char *arena_root; /* CKPT_ARENA_DIR */
    char job_name[CKPT_JOB_MAX]; /* CKPT_JOB, the user's or generated */
    char *preload;          /* LD_PRELOAD of the ranks: libckpt.so first */
    char *pythonpath;       /* PYTHONPATH of the ranks (NULL: none): the PyTorch helper first */
    char **cmd;             /* the command and its arguments, NULL-terminated */
    const char *launcher;   /* CKPT_NODE_LAUNCHER on node 0 of several; NULL: the nodes are started elsewhere */
    char job_key[128];      /* the key node 0 made (ckpt_auth_new_key) when CKPT_JOB_KEY is unset; "": none */
};

/* What one rank has told us on the agent channel during this launch. */
struct report {
    pid_t pid;              /* the process that reports as this rank; 0: none yet */
    bool gone;              /* that process has ended */
    bool ticking;           /* has sent a BOUNDARY: hang detection watches it */
    bool restored;          /* sent RESTORED */
    double boundary_s;      /* CLOCK_MONOTONIC seconds of its last BOUNDARY */
    uint64_t iteration;     /* of its last BOUNDARY */
    uint64_t committed_iteration; /* of its last COMMITTED */
    uint64_t skipped;       /* snapshots its process skipped, as its last BOUNDARY said */
};

struct channel {
    int fd;                 /* the bound datagram socket, -1 when closed */
    char dir[101];          /* private directory holding it (mkdtemp, 0700), "/agent" fits after it */
    char path[108];         /* the socket (sun_path's size), passed to ranks as CKPT_AGENT_SOCKET */
    struct report *reports; /* indexed by rank */
    int nreports;           /* entries allocated */
    int restored;           /* ranks that sent RESTORED in this launch */
    double restored_s;      /* when the last of the ranks did (with --nproc), 0: not yet */
    int refused_rank;       /* the first rank that sent REFUSED in this launch, -1: none */
    int no_room_rank;       /* the first rank that sent NO_ROOM in this launch, -1: none */
    int unprotected_rank;   /* the first rank that said it runs with checkpointing off, in any launch, -1: none */
    uint64_t committed;     /* COMMITTED reports, in every launch */
    uint64_t skipped;       /* snapshots the ranks skipped, in the launches before this one */
    uint64_t newest;        /* the newest iteration a rank committed, in any launch */
    uint64_t worst_lag;     /* the most iterations a rank's boundary was past its newest commit */
    int local_world;        /* the most ranks a rank said its launcher started here (LOCAL_WORLD_SIZE), 0: none */
    int world;              /* the largest WORLD_SIZE a rank said, 0: none */
    int seen_here;          /* the most ranks that had reported here at a commit, in any launch */
    bool elsewhere_said;    /* ranks running elsewhere (channel_elsewhere) were warned about */
};

struct rank {
    pid_t pid;              /* 0 once reaped */
    bool alone;             /* a standby started alone, in place of one that died */
};

/* How one launch of the job ended. */
struct outcome {
    int exit_code;          /* first failure's, as a shell has it (128 + N for signal N), else 0 */
    int failed_rank;        /* rank of the first failure, -1 when none */
    int stop_signal;        /* signal that asked the job to stop (forwarded), 0 if none */
    int refused_rank;       /* first rank that exited RESUME_EXIT_REFUSED in a restore, else -1 */
    int no_room_rank;       /* first rank that stopped because the host cannot hold the arena, else -1 */
    bool early;             /* the first failure was an exit status, before any rank reached a boundary */
    double failed_s;        /* when the first failure was seen, 0: none */
};

/* Persisting to disk (disk.c); engine NULL: CKPT_PERSIST_DIRS unset or not usable. */
struct disk {
    struct ckpt_persist *engine;
    unsigned every;         /* CKPT_PERSIST_EVERY; 0: restore only */
    char pin[PATH_MAX];     /* the job directory whose pin file (pins.h) it writes */
    char log_dir[PATH_MAX]; /* where the ranks keep their replay logs (CKPT_REPLAY_LOG_DIR, the user's, in
                             * the first persist directory, or under CKPT_LOG_HOME), "": in the arena */
    bool log_default;       /* log_dir is the one under CKPT_LOG_HOME (disk.c) */
    uint64_t seen;          /* newest iteration every rank of this launch has committed */
    uint64_t commits;       /* such iterations seen */
    uint64_t started;       /* commits when the last persist started */
    pthread_t thread;       /* the worker, while running */
    bool running, done;     /* done: set by the worker as it ends */
    bool own_pin;           /* the worker removes the pin file as it ends */
    const char *arena, *job;
    int *ranks;             /* the ranks being persisted, cap entries */
    int cap;
    unsigned nranks;
    uint64_t iteration;     /* being persisted, or last persisted */
    uint64_t restored;      /* the iteration last read back from disk, 0: none */
    uint64_t retire_after;  /* one node: a launch restored this; what is newer goes once it is live */
    uint64_t persisted, skipped, failed, bytes;
    uint64_t newest;        /* the newest iteration persisted whole, 0: none */
    uint64_t worst_lag;     /* the most iterations every rank had committed past it, seen at a commit */
    double seconds;         /* spent persisting what was persisted */
    uint64_t warned;        /* fault kinds (errno, 63: others) said once */
    /* The worker's outcome, counted by the main thread once it is joined. */
    int out_rc;
    uint64_t out_iteration, out_bytes;
    double out_seconds;
    char out_why[512];
};

/* The job's standbys (standby.c): one per local rank, in a process group
 * of their own, reporting on a channel of their own, with a rendezvous of
 * their own (the shadow job); at a takeover they become the job's ranks. */
struct standby {
    bool on;                /* CKPT_STANDBY, and a job this file can stand by */
    struct rank *ranks;     /* opt->nproc entries (under torchrun, its second one); pid 0: not running */
    int running;
    pid_t pgid;
    struct channel chan;
    char *master_port;
    char *vars[10];         /* LD_PRELOAD, CKPT_JOB, CKPT_AGENT_SOCKET, CKPT_FOLLOW, then as set:
                             * CKPT_TAKEOVER_IDS, CKPT_REPLAY_LOG_DIR, PYTHONPATH, PET_MASTER_PORT,
                             * PET_RDZV_ENDPOINT; NULL */
    char **cmd;             /* under torchrun, the standbys' torchrun (torchrun_shadow); NULL: opt->cmd */
    int nranks;             /* ranks followed: opt->nproc, or the ranks torchrun started (when started) */
    int cap;                /* entries of orders and drawn */
    struct ckpt_follow **orders; /* nranks entries, mapped while they run */
    char lost[256];         /* why they cannot take over ("": they can) */
    bool lost_killed;       /* lost names a standby killed by a signal */
    bool taking_over;       /* a standby that dies now is not replaced */
    unsigned replaced;      /* standbys started alone in this launch (STANDBY_ALONE_MAX) */
    double alone_s;         /* when the last of them was started, 0: none */
    bool peer_logs;         /* a spare's (standby_adopt): they follow the copies its store took */
    double started_s;       /* when they were started, 0: not yet */
    uint64_t allowed;       /* the last iteration they were let replay to */
    double lag_s;           /* CKPT_STANDBY_LAG */
    struct { uint64_t iteration; double at_s; } marks[32]; /* allowed, and when: a ring, lag_s / 8 apart */
    unsigned nmarks;
    uint64_t lagging;       /* ranks (bit rank % 64) said to lag and not yet caught up */
    struct { uint64_t at; double s; } *drawn; /* nranks entries: each standby's last timeline point */
};

enum job_phase {
    JOB_RUNNING,            /* ranks run; nothing asked them to stop */
    JOB_TERMINATING,        /* asked to stop; SIGKILL at the deadline */
    JOB_KILLING,            /* SIGKILL sent; give up waiting at the deadline */
};

struct job {
    const struct options *opt;
    struct rank *ranks;     /* opt->nproc entries */
    int running;            /* ranks not yet reaped */
    pid_t pgid;             /* the job's process group: the first rank's pid */
    char *master_addr, *master_port;
    char *vars[8];          /* LD_PRELOAD, CKPT_JOB, CKPT_AGENT_SOCKET, then as set: CKPT_REPLAY_LOG_DIR
                             * (the first nfixed), PYTHONPATH, CKPT_RESTORE, PYTHONUNBUFFERED; NULL */
    int nfixed;
    uint64_t restore;       /* CKPT_RESTORE of this launch, 0: a fresh start */
    struct channel chan;
    int sigfd;              /* signalfd for SIGCHLD and the forwarded signals */
    sigset_t rank_mask;     /* the signal mask ranks start with: ours before we blocked */
    enum job_phase phase;
    bool term_sent;         /* SIGTERM has gone to the job */
    double deadline;        /* CLOCK_MONOTONIC seconds at which the phase times out */
    double stopped_s;       /* when the last launch's ranks were all gone */
    const char *recovering; /* a recovery by restore under way: how ("standby", "cold"), else NULL */
    double recovering_since; /* when its failure was seen */
    struct outcome out;
    struct disk disk;
    struct member *member;  /* a job on several nodes: this node's agent (member.c); NULL on one node */
    struct standby sb;
    char recovered[256];    /* how each recovery was made, for the end-of-job line ("": none) */
    int recovered_more;     /* recoveries that did not fit in it */
};


/* env.c */
int rank_env(char ***out, const struct options *opt, int local, const char *master_addr, const char *master_port,
             char *const *vars);
void rank_env_free(char **env);
int job_master(char **addr, char **port);
int job_master_port(char *port);
int job_spare_port(char *port);
int preload_value(char **out, const char *lib);

/* The PYTHONPATH of the ranks in *out (NULL when there is none; the caller
 * frees it): with @helper, the directory of libckpt's PyTorch helper
 * (libckpt-python beside the libckpt.so that @preload names first), then
 * ours.  A missing helper directory is said, once, and left out. */
int pythonpath_value(char **out, const char *preload, bool helper);

/* launch.c */
int job_open(struct job *job, const struct options *opt);
int job_launch(struct job *job, uint64_t restore);
void job_new_master_port(struct job *job);
void job_close(struct job *job);

/* watch.c (sig_name: "SIGTERM") */
void job_watch(struct job *job);
void job_stop(struct job *job, int sig);
/* The ranks' process group while any of them runs, else 0: read from any
 * thread (the lease's fence kills it, bridge.c). */
pid_t job_ranks_pgid(void);
void job_ranks_pgid_set(pid_t pgid);
/* Between launches: waits up to timeout_ms for a signal to ckpt-resume,
 * reaping any child meanwhile; returns the signal, or 0. */
int job_wait_signal(struct job *job, int timeout_ms);
const char *sig_name(int sig);

/* channel.c */
int channel_open(struct channel *c);
/* Removes what the ranks left in its directory (their takeover's unique ids). */
void channel_clear(struct channel *c);
void channel_close(struct channel *c);
void channel_reset(struct channel *c);
void channel_read(struct channel *c, const struct options *opt);
void channel_ended(struct channel *c, pid_t pid);
void channel_committed(const struct channel *c, char *out, size_t outlen);
int channel_hung(struct channel *c, double timeout_s, double *next_s);
/* What @from counted over the job (commits, skips, the newest commit, the
 * worst lag, an unprotected rank, the world the ranks said) goes on in @to: the standbys' channel
 * becomes the job's at a takeover. */
void channel_carry(struct channel *to, struct channel *from);
/* Has a rank reached an iteration boundary in this launch? */
bool channel_ticked(const struct channel *c);
/* The WORLD_SIZE the ranks said, when it is more than the ranks that had
 * reported here at a commit: the job has ranks under another agent (a
 * launcher of its own started them on other machines); else 0. */
int channel_elsewhere(const struct channel *c);

/* restart.c */
void job_recovered(struct job *job, const char *how, double since);
int job_run(struct job *job, int *restarts);

/* launch.c: starts process @i of a job (a rank, or its standby), @cmd
 * with @port and @vars, in process group *@pgid (a new one when 0, set). */
int spawn_process(struct job *job, int i, char *const *cmd, const char *port, char *const *vars, pid_t *pgid,
                  pid_t *pid);

/* launch.c: sets *@slot (freed first) to "@name=@value"; -ENOMEM leaves it NULL. */
int job_set_var(char **slot, const char *name, const char *value);

/* standby.c */
int standby_env(char **vars, const struct options *opt, const char *socket, const char *ids, const char *log_dir);
int standby_open(struct job *job);
void standby_close(struct job *job);
void standby_tick(struct job *job);
bool standby_reaped(struct job *job, pid_t pid, int status);
bool standby_owns(const struct job *job, pid_t pid);
int standby_take_over(struct job *job, uint64_t iteration);
int standby_set_port(struct job *job, const char *port);
uint64_t standby_ready(const struct job *job);
void standby_stop(struct job *job, const char *why);
int standby_adopt(struct job *job, const pid_t *pids, struct ckpt_follow **orders, struct channel *chan, pid_t pgid,
                  uint64_t allowed);

/* spare.c: a spare's standbys, while it waits (spare_open, then
 * spare_plan and spare_turn from bridge.c's wait) and once it is a node
 * (spare_claimed, then spare_adopt after job_open); spare_close ends them
 * (@remove: and removes what the spare took, the job no longer needs it). */
int spare_open(struct options *opt, const char *ip, char *addr, size_t addrlen);
void spare_plan(const char *value);
unsigned spare_decisions(struct ckpt_decision *d, unsigned max);
void spare_turn(void);
void spare_assign(unsigned index, unsigned count);
bool spare_covers(unsigned node);
void spare_claimed(unsigned node);
int spare_adopt(struct job *job);
void spare_close(bool remove);

/* disk.c */
void disk_open(struct disk *d, const struct options *opt);
uint64_t disk_due(struct job *job);
void disk_tick(struct job *job);
void disk_cancel(struct disk *d);
bool disk_wait(struct job *job);
uint64_t disk_restore(struct job *job, uint64_t below);
void disk_finish(struct job *job);
bool disk_busy(struct disk *d);
int disk_start(struct job *job, uint64_t k, bool own_pin);
int disk_read(struct job *job, uint64_t it);
void disk_supersede(struct job *job, uint64_t after);
void disk_close(struct disk *d);

/* ledger.c: the restart decisions this node acted under, oldest first
 * (recovery.h), kept in LEDGER_FILE in the arena's job directory and in the
 * first persist directory's. */
#define LEDGER_FILE "decisions"
struct ledger {
    struct ckpt_decision d[COORD_DECIDED_MAX];
    unsigned n;
};
void ledger_load(const struct job *job, struct ledger *l);
/* Adds those of d[0..n) it lacks and keeps the files; returns the lowest
 * restore point among them (what they replaced is past it), UINT64_MAX
 * when it lacked none. */
uint64_t ledger_take(const struct job *job, struct ledger *l, const struct ckpt_decision *d, unsigned n);
uint64_t ledger_newest(const struct ledger *l);

/* jobarena.c */
/* What one rank holds: up to two verified snapshots. */
struct held {
    int n;
    uint64_t iteration[2], generation[2], epoch[2];
};
void arena_scan_rank(const char *job, const char *dir, int r, struct held *h);
struct restore_point {
    uint64_t iteration;
    uint64_t generation;    /* of the lowest rank's snapshot */
};
int arena_job_dir(const struct options *opt, char *out, size_t outlen);
bool arena_pick(const struct options *opt, uint64_t below, struct restore_point *pt, char *why, size_t whylen);
int arena_remove(const struct options *opt);
/* Restoring @after: snapshots of later iterations belong to the run it
 * replaces and are retired (one rank in @dir, or this node's ranks). */
int arena_retire(const char *job, const char *dir, int r, uint64_t after, const char *what);
int arena_retire_slot(const char *job, const char *dir, int r, int s, uint64_t after, const char *what);
void arena_supersede(const struct options *opt, uint64_t after);
/* Makes this the one ckpt-resume of the job's arena on this machine: 0, -EBUSY (said), -errno. */
int arena_lock(const struct options *opt);
/* The job is over: the lock's file goes. */
void arena_unlock(void);

/* restart.c (backoff_s: seconds before restart number n, 1, 2, ...) */
void job_settle(const struct options *opt, int code);
double backoff_s(const struct options *opt, int n);

/* member.c: this node's agent in a job on several nodes */
struct member;
#define MEMBER_FDS 2
int member_run(struct job *job, int *restarts);
int member_prepare(struct job *job, struct pollfd *pfd);
void member_events(struct job *job, const struct pollfd *pfd);
void member_tick(struct job *job);
void member_failed(struct job *job);
/* A takeover on several nodes: relays its new unique ids in dir (member.c). */
void member_takeover_ids(struct job *job, const char *dir, bool start);
/* The newest iteration every rank of the job holds in a peer's memory (0: none). */
uint64_t member_durable(const struct job *job);

/* metrics.c: the Prometheus endpoint at CKPT_METRICS_ADDR (docs/metrics.md).
 * _start: 0, or -EINVAL after saying why; without the variable it does
 * nothing, and neither do the others.  _note takes every rank's message,
 * _restart the job's restarts; _update renders the page (at most every
 * 0.25 s unless now), and counts a recovery once its ranks are restored
 * (job->recovering). */
struct ckpt_msg;
int metrics_start(void);
void metrics_note(const struct ckpt_msg *m);
void metrics_restart(void);
void metrics_update(const struct job *job, bool now);
void metrics_stop(void);

/* bridge.c: the coordination carried by etcd (opt->etcd).  bridge_start
 * claims a node rank (opt->node_rank: the one wanted, or -1 for any free
 * one) and points opt->coord at the bridge; bridge_ip is this machine's
 * address towards etcd (NULL: no bridge). */
int bridge_start(struct options *opt, char *why, size_t whylen);
const char *bridge_ip(void);
/* The receiver of the spare that takes node @node's copies (node I mod
 * the spares waiting, with standbys) into @out; -ENOENT: none. */
int bridge_spare_for(unsigned node, char *out, size_t outlen);
/* When this agent, a spare, took a lost node's place (0: it did not). */
double bridge_claimed_s(void);
/* The node this agent gave up starting (CKPT_NODE_LAUNCHER: its command
 * ended too often), 0: none. */
unsigned bridge_gave_up(void);
void bridge_stop(void);

/* torchrun.c: torchrun as the command.  Whether @cmd runs torchrun (or
 * python -m torch.distributed.run); and 0, or -1 after saying why, when it
 * asks torchrun to restart its workers itself (--max-restarts other than 0,
 * or PET_MAX_RESTARTS), which would fight ckpt-resume's restarts, or runs
 * a torchrun of several nodes (--nnodes, PET_NNODES). */
bool torchrun_command(char *const *cmd);
int torchrun_check(char *const *cmd);
/* Standbys with a launcher of the job's own: 0 when it is torchrun, or
 * (CKPT_STANDBY unset, its default on) after saying the job runs without
 * them, CKPT_STANDBY now 0; -1 after saying why when CKPT_STANDBY=1 was
 * asked for.  torchrun_shadow: in *@out, @cmd
 * for the standbys' torchrun, its port options given @port (freed by
 * torchrun_shadow_free); torchrun_shadow_vars: PET_MASTER_PORT=@port, and
 * PET_RDZV_ENDPOINT at @port when ours is set, in *@master and *@rdzv. */
int torchrun_standby_check(char *const *cmd);
int torchrun_shadow(char ***out, char *const *cmd, const char *port);
void torchrun_shadow_free(char **argv);
int torchrun_shadow_vars(char **master, char **rdzv, const char *port);

/* coord.c: the coordinator the leading agent runs (bridge.c), on a thread
 * of its own (coord_open, then coord_run; coord_turn: a turn of its loop,
 * for a caller that turns it itself) */
struct coord;
/* spawn.c: the first agent starting the other nodes (CKPT_NODE_LAUNCHER), from the bridge's thread. */
struct spawn;
/* In a child just forked by a process with threads, before its exec: a
 * session of its own, @deathsig when the agent (@parent) dies (or _exit
 * if it is gone already), none of the agent's descriptors, the default
 * signal mask and SIGPIPE (spawn.c). */
void child_detach(pid_t parent, int deathsig);

/* The external fence (fence.c): CKPT_FENCE_CMD run against node @node,
 * which joined from @hostport.  Returns its pid or -errno; fence_poll()
 * is 1 once it ended (*status as waitpid's), 0 while it runs. */
bool fence_wanted(void);
pid_t fence_start(unsigned node, const char *hostport, const char *job);
int fence_poll(pid_t pid, int *status);
void fence_cancel(pid_t pid);

/* Prepares; *out stays NULL without a launcher.  Nothing starts before spawn_turn(). */
int spawn_open(struct spawn **out, const struct options *opt);
/* Reaps, and starts each node's command when it is due, unless the job
 * is @over.  Returns 0, or the node (> 0) whose command ended too often,
 * with the reason in why. */
int spawn_turn(struct spawn *s, bool over, char *why, size_t whylen);
/* Waits up to @wait_s for the commands to end, then ends them; frees s. */
void spawn_close(struct spawn *s, double wait_s);

int coord_open(struct coord **out, const struct options *opt);
/* Before coord_run(): each launch is decided by @decide (bridge.c: a key
 * put by an etcd transaction that holds while the agent leads @term),
 * whose *epoch, the decision's revision, is the plan's; it returns 1,
 * 0 when the agent no longer leads, -errno when etcd cannot tell now.
 * Without one (the fuzzer), an epoch is one above every plan a node had. */
typedef int coord_decide_fn(int64_t term, uint64_t restore, uint64_t *epoch, char *why, size_t whylen);
void coord_decide_by(struct coord *c, coord_decide_fn *decide, int64_t term);
bool coord_turn(struct coord *c, int timeout_ms);
int coord_run(struct coord *c);
/* Before coord_run(): node @node (at @host) was lost while the job ran,
 * and is fenced (CKPT_FENCE_CMD) before the job goes on. */
void coord_lost(struct coord *c, unsigned node, const char *host);
const char *coord_address(const struct coord *c);
void coord_stop(struct coord *c);

/* replicate.c */
struct rep;
struct coord_addr;
struct coord_send;
int rep_open(struct rep **out, const struct options *opt, const char *ip, const char *log_dir, int wake);
void rep_close(struct rep *r);
const char *rep_address(const struct rep *r);
int rep_start(struct rep *r, uint64_t it, const struct coord_addr *addrs, unsigned nnodes);
bool rep_reap(struct rep *r, int *status);
void rep_wait(struct rep *r);
int rep_fetch(struct rep *r, const struct coord_send *sends, unsigned n, const struct coord_addr *addrs,
              unsigned nnodes);
int rep_promote(struct rep *r, int rank, uint64_t it, bool *moved, char *why, size_t whylen);
int rep_peer_job_dir(const struct rep *r, char *out, size_t outlen);
/* Retires the peers' copies after @after, but those that came under a
 * plan of epoch @keep_epoch or later (0: none is kept): a plan's copies
 * can arrive before this node has taken it. */
void rep_supersede(struct rep *r, uint64_t after, uint64_t keep_epoch);
int rep_remove(const struct options *opt);
/* The plan this node now acts under (its epoch, coord.h): what it sends
 * carries it, and it refuses offers of older ones. */
void rep_epoch(struct rep *r, uint64_t epoch);
/* How many copies of @rank the receiver has kept so far (it moves with each). */
uint64_t rep_arrivals(struct rep *r, int rank);
/* Bytes of replay logs this node sent to peers, whole or in part, and of
 * them the bytes that travelled (the rest the peers held already). */
void rep_log_totals(const struct rep *r, uint64_t *offered, uint64_t *shipped);

/* logship.c: a rank's replay log between agents, only the bytes the
 * receiver lacks.  The first frame type of an offer, and how long either
 * side waits for the other. */
#define LOGSHIP_OFFER 96
#define LOGSHIP_TIMEOUT_MS 30000
struct logship;
/* For the logs of ranks 0 .. nranks-1; peers' logs kept in disk/peers
 * (disk NULL or "": in memory, up to CKPT_REPLAY_LOG_MAX each);
 * logship_close lets go. */
int logship_open(struct logship **out, unsigned nranks, const char *disk);
void logship_close(struct logship *ls);
/* Sends the replay log of the rank directory dir (rank's) to the agent at
 * to, under epoch.  0 or -errno with why. */
int logship_send(struct logship *ls, const char *dir, const char *job, int rank, uint64_t epoch, const char *to,
                 char *why, size_t whylen);
/* A connection whose first frame is of this type is an offer. */
bool logship_offer(uint16_t type);
/* Takes the log offered on ctl into root's rank directory, for job (of
 * nranks ranks) under epoch: offers of older epochs are refused.  0 or
 * -errno; the sender is told either way. */
int logship_receive(struct logship *ls, const char *root, const char *job, unsigned nranks, uint64_t epoch, int ctl);
void logship_totals(const struct logship *ls, uint64_t *offered, uint64_t *shipped);
/* Makes root/<uid>-<job>/rank<N> (0700), a private directory, where a
 * rank's log is kept; its path into out. */
int logship_rank_dir(const char *root, const char *job, uint32_t rank, char *out, size_t outlen);

#endif
