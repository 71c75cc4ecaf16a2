/*
 * A spare's standbys (--spare, with CKPT_STANDBY=1).  While it waits
 * beside the job (bridge.c), the spare takes the copies and replay logs
 * the nodes send it (node I sends to the spare I mod S), and runs, for
 * each rank whose copy it holds, a standby alone: the job's command in
 * follow mode, following the log it received (CKPT_FOLLOW_LOG) up to the
 * newest iteration it holds of every rank of that node, served the rank's
 * rendezvous from that log (CKPT_FOLLOW_ALONE: it has no shadow job to
 * meet), its orders in the spare's own arena.  When a node is lost and
 * this spare takes its place, the standbys of that node's ranks are the
 * node's standbys (standby_adopt): a takeover moves the copies into the
 * arena and they go live there, without a replay from the start; the
 * others are stopped.  A log replaced by a new lineage (the job went
 * back) is a new file: its standby starts again on it.  The logs it
 * takes go where a node's agent would keep its peers' (on disk, as
 * disk.c decides), not bounded by what a node keeps in memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "coord.h"
#include "follow.h"
#include "log.h"
#include "replay.h"
#include "resume.h"

/* How many times one rank's standby is started before the spare gives it up. */
#define SPARE_STARTS_MAX 4

struct spare_rank {
    pid_t pid;                  /* 0: not running */
    struct ckpt_follow *orders; /* mapped while it runs */
    dev_t dev;                  /* the file of its log, when last looked at: a new lineage is a new file */
    ino_t ino;
    uint64_t allowed;           /* its orders: the newest iteration held here of every rank of its node */
    uint64_t newest;            /* the store's, when it was scanned */
    uint64_t scanned;           /* the copies of it kept (rep_arrivals) then, UINT64_MAX: scan again */
    unsigned starts;
};

static struct {
    struct options *opt;
    struct rep *rep;
    struct disk disk;           /* only where the logs go: on disk as a node's do, unbounded (disk.c) */
    struct channel chan;
    int wake[2];
    int nranks;
    struct spare_rank *ranks;   /* each standby the leader of a process group of its own */
    char master_addr[64], master_port[16];
    char peers[PATH_MAX];       /* the store's job directory */
    uint64_t epoch;             /* of the newest plan seen */
    unsigned index, nspares;    /* this spare's place among those that take copies, and their number */
    struct ckpt_decision decided[COORD_DECIDED_MAX]; /* the decisions it knew, oldest first */
    unsigned ndecided;
} S = { .chan = { .fd = -1 }, .wake = { -1, -1 } };

static bool on(void)
{
    return S.ranks != NULL;
}

int spare_open(struct options *opt, const char *ip, char *addr, size_t addrlen)
{
    addr[0] = '\0';
    if (!ckpt_cfg_int(CFG_STANDBY) || opt->wrap)
        return 0;
    S.opt = opt;
    S.nranks = opt->nnodes * opt->nproc;
    int rc = pipe2(S.wake, O_CLOEXEC | O_NONBLOCK) < 0 ? -errno : 0;
    /* The arena first: where the logs go depends on what it is on, as it
     * will for the node's agent this spare may become. */
    if (rc == 0 && mkdir(opt->arena_root, 0700) < 0 && errno != EEXIST)
        rc = -errno;
    disk_open(&S.disk, opt);
    if (rc == 0)
        rc = rep_open(&S.rep, opt, ip, S.disk.log_dir, S.wake[1]);
    if (rc == 0)
        rc = channel_open(&S.chan);
    if (rc == 0 && !(S.ranks = calloc(S.nranks, sizeof(*S.ranks))))
        rc = -ENOMEM;
    for (int rank = 0; rc == 0 && rank < S.nranks; rank++)
        S.ranks[rank].scanned = UINT64_MAX; /* what the store holds already is looked at once */
    if (rc == 0)
        rc = rep_peer_job_dir(S.rep, S.peers, sizeof(S.peers));
    if (rc == 0 && !*rep_address(S.rep))
        rc = -EIO; /* said by rep_open */
    if (rc < 0) {
        ckpt_log(CKPT_WARN, "this spare runs no standbys: %s", rc == -EIO ? "it cannot take copies" : strerror(-rc));
        spare_close(false);
        return 0;
    }
    snprintf(addr, addrlen, "%s", rep_address(S.rep));
    ckpt_log(CKPT_INFO, "this spare takes copies at %s and runs standbys for the ranks they are of", addr);
    return 0;
}

/*
 * The newest plan, as the leader put it (bridge.c): the job's master, and
 * the decisions.  A plan that went back retires the copies held here that
 * it replaced (those of later iterations that came under an older plan),
 * and copies offered under an older plan are refused from then on.
 */
void spare_plan(const char *value)
{
    char addr[64], port[16];
    int at = 0;
    struct ckpt_decision d[COORD_DECIDED_MAX + 1];
    unsigned n = 0;
    if (sscanf(value, "%63s %15s%n", addr, port, &at) != 2 || strspn(port, "0123456789") != strlen(port))
        return;
    for (const char *p = value + at; n < COORD_DECIDED_MAX + 1; n++) {
        int used = 0;
        if (sscanf(p, " %" SCNu64 ":%" SCNu64 "%n", &d[n].epoch, &d[n].restore, &used) != 2)
            break;
        p += used;
    }
    if (!n || d[0].epoch <= S.epoch)
        return;
    snprintf(S.master_addr, sizeof(S.master_addr), "%s", addr);
    snprintf(S.master_port, sizeof(S.master_port), "%s", port);
    S.epoch = d[0].epoch;
    S.ndecided = 0;
    for (unsigned i = 0; i < n; i++)
        ckpt_decision_add(S.decided, &S.ndecided, COORD_DECIDED_MAX, d[i]);
    if (S.rep) {
        rep_epoch(S.rep, d[0].epoch);
        rep_supersede(S.rep, d[0].restore, d[0].epoch);
        for (int rank = 0; S.ranks && rank < S.nranks; rank++)
            S.ranks[rank].scanned = UINT64_MAX;
    }
}

/* This spare is the @index-th of @count: the nodes I with I mod count == index send here. */
void spare_assign(unsigned index, unsigned count)
{
    S.index = index;
    S.nspares = count;
}

/* Whether node @node sends its copies here now. */
static bool mine(int node)
{
    return S.nspares && (unsigned)node % S.nspares == S.index;
}

/* The decisions this spare saw, for the ledger of the node it became. */
unsigned spare_decisions(struct ckpt_decision *d, unsigned max)
{
    unsigned n = S.ndecided < max ? S.ndecided : max;
    memcpy(d, S.decided + (S.ndecided - n), n * sizeof(*d));
    return n;
}

static void stop(int rank)
{
    struct spare_rank *sr = &S.ranks[rank];
    if (sr->pid > 0) {
        kill(-sr->pid, SIGKILL); /* its group: what the program started goes with it */
        kill(sr->pid, SIGKILL);
        waitpid(sr->pid, NULL, 0);
    }
    ckpt_follow_unmap(sr->orders);
    sr->orders = NULL;
    sr->pid = 0;
    sr->allowed = 0;
}

/* The newest iteration of @rank held here, scanned again when a copy came
 * (or a plan retired some). */
static uint64_t held(int rank)
{
    struct spare_rank *sr = &S.ranks[rank];
    uint64_t n = rep_arrivals(S.rep, rank);
    if (n == sr->scanned)
        return sr->newest;
    struct held h;
    arena_scan_rank(S.opt->job_name, S.peers, rank, &h);
    sr->scanned = n;
    sr->newest = 0;
    for (int i = 0; i < h.n; i++)
        sr->newest = h.iteration[i] > sr->newest ? h.iteration[i] : sr->newest;
    return sr->newest;
}

/* The file that holds @rank's log in the store (through the stub, when
 * the log is on disk): a new lineage is a new file.  0 or -errno. */
static int log_file(int rank, struct stat *st)
{
    char dir[PATH_MAX + 32], why[256];
    int rc = ckpt_rank_dir(dir, sizeof(dir), S.peers, rank);
    if (rc < 0)
        return rc;
    int fd = ckpt_rlog_open_fd(dir, why, sizeof(why));
    if (fd < 0)
        return fd;
    rc = fstat(fd, st) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* Starts @rank's standby on the log in the store, alone. */
static int start(int rank)
{
    struct spare_rank *sr = &S.ranks[rank];
    struct options ropt = *S.opt;
    char dir[PATH_MAX], peer[PATH_MAX + 32], *vars[10] = { 0 };
    int rc;

    ropt.node_rank = rank / S.opt->nproc;
    ropt.first_rank = ropt.node_rank * S.opt->nproc;
    if ((rc = ckpt_rank_dir(peer, sizeof(peer), S.peers, rank)) < 0 ||
        (rc = logship_rank_dir(S.opt->arena_root, S.opt->job_name, (uint32_t)rank, dir, sizeof(dir))) < 0)
        return rc;
    if (!(sr->orders = ckpt_follow_map(dir, 1)))
        return -errno;
    int k = standby_env(vars, S.opt, S.chan.path, S.chan.dir, S.disk.log_dir);
    rc = k < 0 ? k : 0;
    if (rc == 0 && (rc = job_set_var(&vars[k++], "CKPT_FOLLOW_ALONE", "1")) == 0)
        rc = job_set_var(&vars[k++], "CKPT_FOLLOW_LOG", peer);
    struct job j = { .opt = &ropt, .master_addr = S.master_addr };
    sigprocmask(SIG_SETMASK, NULL, &j.rank_mask);
    pid_t pid = 0, pgid = 0; /* a group of its own, which stopping it kills whole */
    if (rc == 0)
        rc = spawn_process(&j, rank % S.opt->nproc, S.opt->cmd, S.master_port, vars, &pgid, &pid);
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        free(vars[i]);
    if (rc < 0) {
        stop(rank);
        return rc;
    }
    sr->pid = pid;
    sr->allowed = 0;
    sr->starts++;
    ckpt_log(CKPT_INFO, "the standby of rank %d (pid %d) follows the log this spare holds of it", rank, (int)pid);
    return 0;
}

/* Rank @rank's standby ended (it was reaped with @status): said, and
 * given up on when it refused (it would again: its reason is said above). */
static void ended(int rank, int status)
{
    struct spare_rank *sr = &S.ranks[rank];
    bool refused = WIFEXITED(status) && WEXITSTATUS(status) == RESUME_EXIT_REFUSED;
    const char *next = refused ? ": this spare runs none for the rank until its log is replaced"
                       : sr->starts < SPARE_STARTS_MAX ? ": it starts again" : ", too often: the rank has none here";
    if (WIFSIGNALED(status))
        ckpt_log(CKPT_WARN, "the standby of rank %d on this spare (pid %d) was killed by %s%s", rank, (int)sr->pid,
                 sig_name(WTERMSIG(status)), next);
    else
        ckpt_log(CKPT_WARN, "the standby of rank %d on this spare (pid %d) exited with status %d%s", rank,
                 (int)sr->pid, WEXITSTATUS(status), next);
    if (refused)
        sr->starts = SPARE_STARTS_MAX;
    sr->pid = 0;
    stop(rank);
}

/* One look at @rank: its standby reaped, stopped when its copies go to
 * another spare now, started again on a new lineage, started. */
static void look(int rank)
{
    struct spare_rank *sr = &S.ranks[rank];
    struct stat st;
    int status;
    pid_t w = sr->pid > 0 ? waitpid(sr->pid, &status, WNOHANG) : 0;
    if (w == sr->pid && w > 0)
        ended(rank, status);
    else if (w < 0) /* not ours any more */
        sr->pid = 0, stop(rank);
    if (!mine(rank / S.opt->nproc)) { /* another spare follows it now */
        if (sr->pid > 0) {
            ckpt_log(CKPT_INFO, "rank %d's copies go to another spare now: its standby here stops", rank);
            stop(rank);
        }
        sr->starts = 0;
        return;
    }
    if (!held(rank) || log_file(rank, &st) < 0)
        return;
    if (sr->dev && (st.st_dev != sr->dev || st.st_ino != sr->ino)) {
        if (sr->pid > 0)
            ckpt_log(CKPT_INFO, "rank %d's log was replaced (the job went back): its standby on this spare starts "
                     "again", rank);
        stop(rank);
        sr->starts = 0;
    }
    sr->dev = st.st_dev;
    sr->ino = st.st_ino;
    if (!sr->pid && sr->starts < SPARE_STARTS_MAX && S.master_port[0]) {
        int rc = start(rank);
        if (rc < 0 && ++sr->starts == SPARE_STARTS_MAX) /* said once, when given up */
            ckpt_log(CKPT_WARN, "cannot start a standby for rank %d on this spare: %s", rank, strerror(-rc));
    }
}

/* One look, between the spare's looks at etcd: copies taken, standbys
 * started, restarted on a new lineage, reaped, let replay further: a
 * node's all to the newest iteration this spare holds of every one of
 * its ranks (the point it reports when it takes the node's place). */
void spare_turn(void)
{
    char drain[64];
    if (!on())
        return;
    while (read(S.wake[0], drain, sizeof(drain)) > 0)
        ;
    channel_read(&S.chan, S.opt);
    for (int rank = 0; rank < S.nranks; rank++)
        look(rank);
    for (int node = 0; node < S.opt->nnodes; node++) {
        int first = node * S.opt->nproc;
        uint64_t common = UINT64_MAX;
        for (int rank = first; rank < first + S.opt->nproc; rank++) {
            uint64_t h = S.ranks[rank].pid > 0 ? held(rank) : 0;
            common = h < common ? h : common;
        }
        for (int rank = first; common && rank < first + S.opt->nproc; rank++) {
            struct spare_rank *sr = &S.ranks[rank];
            if (common > sr->allowed) {
                ckpt_follow_order(sr->orders, &sr->orders->allowed, common);
                sr->allowed = common;
            }
        }
    }
}

/* Whether this spare's standbys follow every rank of @node. */
bool spare_covers(unsigned node)
{
    if (!on() || !mine((int)node))
        return false;
    for (int i = 0; i < S.opt->nproc; i++) {
        const struct spare_rank *sr = &S.ranks[(int)node * S.opt->nproc + i];
        if (!sr->pid || !sr->allowed)
            return false;
    }
    return true;
}

/*
 * This spare is node @node now: its ranks' standbys are kept for the
 * node (spare_adopt), the others stopped, and the receiver closed (the
 * node's agent opens its own on the same store).
 */
void spare_claimed(unsigned node)
{
    if (!on())
        return;
    int first = (int)node * S.opt->nproc;
    for (int rank = 0; rank < S.nranks; rank++) {
        if (rank >= first && rank < first + S.opt->nproc)
            continue;
        stop(rank);
    }
    rep_close(S.rep);
    S.rep = NULL;
    S.disk.log_default = false; /* the node's agent has the same directory now: it is not this spare's to remove */
}

/* The node's standbys go to the agent's job: 0, or -ESRCH when not all of them run. */
int spare_adopt(struct job *job)
{
    const struct options *opt = job->opt;
    if (!on())
        return -ESRCH;
    pid_t pids[opt->nproc];
    struct ckpt_follow *orders[opt->nproc];
    uint64_t allowed = UINT64_MAX;
    int rc = 0;
    for (int i = 0; i < opt->nproc; i++) {
        struct spare_rank *sr = &S.ranks[opt->first_rank + i];
        int status;
        if (sr->pid > 0 && waitpid(sr->pid, &status, WNOHANG) == sr->pid)
            sr->pid = 0;
        pids[i] = sr->pid;
        orders[i] = sr->orders;
        allowed = sr->allowed < allowed ? sr->allowed : allowed;
        if (!sr->pid || !sr->allowed)
            rc = -ESRCH;
    }
    if (rc == 0 && (rc = standby_adopt(job, pids, orders, &S.chan, pids[0], allowed)) == 0) {
        for (int i = 0; i < opt->nproc; i++)
            S.ranks[opt->first_rank + i] = (struct spare_rank){ 0 };
        S.chan = (struct channel){ .fd = -1 };
        ckpt_log(CKPT_INFO, "this spare's standbys of node %d's ranks are the node's, replayed up to iteration %llu",
                 opt->node_rank, (unsigned long long)allowed);
    } else {
        ckpt_log(CKPT_INFO, "this spare's standbys of node %d's ranks are not all running: the node takes no part "
                 "in a takeover by standby", opt->node_rank);
    }
    spare_close(false);
    return rc;
}

void spare_close(bool remove)
{
    for (int rank = 0; S.ranks && rank < S.nranks; rank++)
        stop(rank);
    free(S.ranks);
    S.ranks = NULL;
    rep_close(S.rep);
    S.rep = NULL;
    if (S.chan.fd >= 0 || S.chan.dir[0])
        channel_close(&S.chan);
    S.chan = (struct channel){ .fd = -1 };
    if (remove && S.opt && !S.opt->keep_arena) { /* not needed: what it took is the job's no more */
        arena_remove(S.opt);
        rep_remove(S.opt);
    }
    disk_close(&S.disk); /* after: its directory goes once empty */
    for (int i = 0; i < 2; i++)
        if (S.wake[i] >= 0)
            close(S.wake[i]);
    S.wake[0] = S.wake[1] = -1;
}
