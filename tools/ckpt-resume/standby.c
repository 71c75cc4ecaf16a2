/*
 * Standbys on one node (CKPT_STANDBY): beside each rank, the same command
 * with CKPT_FOLLOW set to our pid (a standby dies with us), which replays
 * the rank's log as the rank writes it (interpose/replay.c) up to the
 * newest iteration every rank has committed, so that it is never past a
 * restore point.  They are started once every rank has committed a first
 * snapshot (their logs are whole by then), in a process group of their own
 * that stopping the job never reaches, with a channel and a rank 0 port of
 * their own: their rendezvous is a shadow job that never meets the live
 * one.  When the job fails, the standbys are
 * told the iteration to go live at; each restores its rank's snapshot
 * there, and they become the job's ranks without a replay from the start.
 * A standby that died, or a takeover that fails, leaves the cold path: a
 * restart that replays from the start, as without standbys, said with why.
 *
 * On several nodes each agent runs its own ranks' standbys, and together
 * they are the shadow job: the coordinator hands out their rank 0 port
 * with each plan (standby_set_port), lets them replay no further than the
 * iteration every node keeps (member_durable), and a takeover happens on
 * every node or on none (member.c).
 *
 * Under torchrun (a wrapped launcher: no --nproc) a second torchrun starts
 * the standbys, as many as the ranks said their launcher started
 * (LOCAL_WORLD_SIZE), and serves their rendezvous on their own port
 * (torchrun.c); at a takeover it becomes the job's launcher.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "log.h"
#include "resume.h"
#include "timeline.h"
#include "util.h"

/* The longest a takeover may take, once every standby has replayed up to
 * its iteration, before the cold path is taken instead; and the longest
 * the standbys, once all are up, may replay no iteration on their way to
 * it (one of them hangs: waiting the whole minute would only delay the
 * job).  A standby still replaying towards it and moving is waited for,
 * however long: one started alone late replays from the start, but is
 * ahead of the cold path, which would replay every rank from there. */
#define TAKEOVER_WAIT_S 60.0
#define TAKEOVER_STILL_S 5.0
/* How long after their start standbys may take to come up (to say they
 * are, when CUDA starts) before the still clock runs for them too. */
#define TAKEOVER_START_S 30.0
/* How many standbys that died may be started again alone in one launch:
 * one that keeps dying is not worth its CPU. */
#define STANDBY_ALONE_MAX 4

/* A standby's variables, whoever starts it, from vars[0]: the job's
 * LD_PRELOAD and CKPT_JOB, its agent's channel (@socket) and the directory
 * its communicators' new unique ids are left in at a takeover (@ids;
 * CKPT_TAKEOVER_IDS), CKPT_FOLLOW (this process: a standby lives only as
 * long as it does), then, as set, CKPT_REPLAY_LOG_DIR and PYTHONPATH.  Each
 * slot is freed first.  The number of slots set, or -errno. */
int standby_env(char **vars, const struct options *opt, const char *socket, const char *ids, const char *log_dir)
{
    char self[24];
    int rc, k = 0;
    snprintf(self, sizeof(self), "%ld", (long)getpid());
    if ((rc = job_set_var(&vars[k++], "LD_PRELOAD", opt->preload)) < 0 ||
        (rc = job_set_var(&vars[k++], "CKPT_JOB", opt->job_name)) < 0 ||
        (rc = job_set_var(&vars[k++], "CKPT_AGENT_SOCKET", socket)) < 0 ||
        (rc = job_set_var(&vars[k++], "CKPT_FOLLOW", self)) < 0 ||
        (rc = job_set_var(&vars[k++], "CKPT_TAKEOVER_IDS", ids)) < 0 ||
        (log_dir[0] && (rc = job_set_var(&vars[k++], "CKPT_REPLAY_LOG_DIR", log_dir)) < 0) ||
        (opt->pythonpath && (rc = job_set_var(&vars[k++], "PYTHONPATH", opt->pythonpath)) < 0))
        return rc;
    return k;
}

/* The standbys' variables: a standby's, with their own channel (a standby
 * started alone holds the live job's ids, the others their shadow job's;
 * on several nodes the members relay them), and under torchrun the port
 * of the standbys' torchrun. */
static int standby_vars(struct job *job)
{
    struct standby *sb = &job->sb;
    int rc, k = standby_env(sb->vars, job->opt, sb->chan.path, sb->chan.dir, job->disk.log_dir);
    if (k < 0)
        return k;
    if (job->opt->wrap) {
        int m = k++;
        if ((rc = torchrun_shadow_vars(&sb->vars[m], &sb->vars[k], sb->master_port)) < 0)
            return rc;
        torchrun_shadow_free(sb->cmd);
        sb->cmd = NULL;
        if ((rc = torchrun_shadow(&sb->cmd, job->opt->cmd, sb->master_port)) < 0)
            return rc;
    }
    return 0;
}

/* The ranks the standbys follow, when known: opt->nproc, or under
 * torchrun as many as its ranks said it started; 0: not known yet. */
static int ranks_followed(const struct job *job)
{
    return job->opt->wrap ? job->chan.local_world : job->opt->nproc;
}

int standby_open(struct job *job)
{
    const struct options *opt = job->opt;
    struct standby *sb = &job->sb;
    char port[16];

    memset(sb, 0, sizeof(*sb));
    sb->chan.fd = -1;
    if (!ckpt_cfg_int(CFG_STANDBY))
        return 0;
    sb->ranks = calloc(opt->nproc, sizeof(*sb->ranks));
    if (!sb->ranks)
        return -ENOMEM;
    int rc = channel_open(&sb->chan);
    if (rc < 0 || (rc = job_spare_port(port)) < 0 || !(sb->master_port = strdup(port)) || standby_vars(job) < 0)
        return rc < 0 ? rc : -ENOMEM;
    sb->lag_s = ckpt_cfg_seconds(CFG_STANDBY_LAG);
    sb->on = true;
    return 0;
}

void standby_close(struct job *job)
{
    struct standby *sb = &job->sb;
    standby_stop(job, NULL);
    if (sb->chan.fd >= 0 || sb->chan.dir[0])
        channel_close(&sb->chan);
    for (size_t i = 0; i < sizeof(sb->vars) / sizeof(sb->vars[0]); i++)
        free(sb->vars[i]);
    free(sb->ranks);
    free(sb->orders);
    free(sb->drawn);
    torchrun_shadow_free(sb->cmd);
    free(sb->master_port);
    memset(sb, 0, sizeof(*sb));
    sb->chan.fd = -1;
}

/* Every rank of this launch has committed a snapshot: the lowest of their
 * newest commits (on several nodes, no further than what every node keeps),
 * else 0. */
static uint64_t committed_by_all(const struct job *job)
{
    uint64_t low = job->member ? member_durable(job) : UINT64_MAX;
    int n = ranks_followed(job);
    if (!n)
        return 0;
    for (int i = 0; i < n; i++) {
        int r = job->opt->first_rank + i;
        uint64_t c = r < job->chan.nreports ? job->chan.reports[r].committed_iteration : 0;
        low = c < low ? c : low;
    }
    return low == UINT64_MAX ? 0 : low;
}

/* The shadow job's rank 0 port, as the coordinator chose it (several nodes). */
int standby_set_port(struct job *job, const char *port)
{
    char *p = strdup(port);
    if (!p)
        return -ENOMEM;
    free(job->sb.master_port);
    job->sb.master_port = p;
    return 0;
}

/* The iteration this node's standbys may replay to, when every one of them
 * runs and none is lost; else 0: no takeover here. */
uint64_t standby_ready(const struct job *job)
{
    const struct standby *sb = &job->sb;
    return sb->on && !sb->lost[0] && sb->started_s && sb->running == job->opt->nproc ? sb->allowed : 0;
}

static void start(struct job *job)
{
    const struct options *opt = job->opt;
    struct standby *sb = &job->sb;
    char dir[PATH_MAX];

    channel_reset(&sb->chan);
    sb->pgid = 0;
    sb->nranks = ranks_followed(job);
    if (sb->nranks > sb->cap) {
        free(sb->orders);
        free(sb->drawn);
        sb->orders = calloc(sb->nranks, sizeof(*sb->orders));
        sb->drawn = calloc(sb->nranks, sizeof(*sb->drawn));
        sb->cap = sb->orders && sb->drawn ? sb->nranks : 0;
    }
    int rc = sb->cap ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < sb->nranks; i++) {
        rc = ckpt_arena_path(dir, sizeof(dir), opt->arena_root, opt->job_name, opt->first_rank + i);
        if (rc == 0 && !(sb->orders[i] = ckpt_follow_map(dir, 1)))
            rc = -errno;
    }
    for (int i = 0; rc == 0 && i < opt->nproc; i++) {
        pid_t pid = 0;
        rc = spawn_process(job, i, sb->cmd ? sb->cmd : opt->cmd, sb->master_port, sb->vars, &sb->pgid, &pid);
        sb->ranks[i].pid = pid;
        sb->running += rc == 0;
    }
    if (rc < 0) {
        if (opt->wrap)
            snprintf(sb->lost, sizeof(sb->lost), "the standbys' torchrun could not be started: %s", strerror(-rc));
        else
            snprintf(sb->lost, sizeof(sb->lost), "the standby of rank %d could not be started: %s",
                     opt->first_rank + sb->running, strerror(-rc));
        standby_stop(job, sb->lost);
        return;
    }
    sb->started_s = ckpt_now_s();
    if (opt->wrap)
        ckpt_log(CKPT_INFO, "started %d standby%s through a second %s (pid %d, its port %s)", sb->nranks,
                 sb->nranks == 1 ? "" : "s", opt->cmd[0], (int)sb->pgid, sb->master_port);
    else
        ckpt_log(CKPT_INFO, "started %d standby%s (process group %d, master %s:%s)", opt->nproc,
                 opt->nproc == 1 ? "" : "s", (int)sb->pgid, job->master_addr, sb->master_port);
}

/*
 * A standby that has not reached an iteration every rank had committed
 * CKPT_STANDBY_LAG ago lags: said once, with how far behind it is, and
 * again when it has caught up.  It is not given up on: even behind, its
 * takeover replays less than the cold path's start from iteration 0, and
 * one that stops moving is caught at the takeover (TAKEOVER_STILL_S).
 */
static void check_lag(struct job *job, double now)
{
    struct standby *sb = &job->sb;
    const unsigned ring = sizeof(sb->marks) / sizeof(sb->marks[0]);
    unsigned last = (sb->nmarks - 1) % ring;

    if (sb->allowed && (!sb->nmarks || now - sb->marks[last].at_s >= sb->lag_s / 8)) {
        last = sb->nmarks++ % ring;
        sb->marks[last].iteration = sb->allowed;
        sb->marks[last].at_s = now;
    }
    for (int i = 0; i < sb->nranks; i++) {
        uint64_t at = ckpt_follow_get(&sb->orders[i]->at), bit = 1ull << (i % 64);
        unsigned k = 0;
        /* The newest mark at least lag_s old that the standby has not reached. */
        for (; k < sb->nmarks && k < ring; k++) {
            unsigned m = (sb->nmarks - 1 - k) % ring;
            if (now - sb->marks[m].at_s >= sb->lag_s)
                break;
        }
        bool behind = k < sb->nmarks && k < ring && at < sb->marks[(sb->nmarks - 1 - k) % ring].iteration;
        int rank = job->opt->first_rank + i;
        if (behind && !(sb->lagging & bit)) {
            unsigned m = (sb->nmarks - 1 - k) % ring;
            ckpt_log(CKPT_WARN, "the standby of rank %d lags: at iteration %llu, short of iteration %llu, which every "
                     "rank had committed %.0f s ago (CKPT_STANDBY_LAG=%g); a takeover now replays that much more",
                     rank, (unsigned long long)at, (unsigned long long)sb->marks[m].iteration, now - sb->marks[m].at_s,
                     sb->lag_s);
            sb->lagging |= bit;
        } else if (!behind && (sb->lagging & bit) && at >= sb->allowed) {
            ckpt_log(CKPT_INFO, "the standby of rank %d has caught up (iteration %llu)", rank, (unsigned long long)at);
            sb->lagging &= ~bit;
        }
    }
}

/* Each standby's place on its rank's timeline (the standby lane): a
 * point when it has moved, at most one a second. */
static void draw(struct job *job, double now)
{
    struct standby *sb = &job->sb;
    char dir[PATH_MAX];
    for (int i = 0; i < sb->nranks; i++) {
        uint64_t at = ckpt_follow_get(&sb->orders[i]->at);
        if (at == sb->drawn[i].at || now - sb->drawn[i].s < 1.0)
            continue;
        sb->drawn[i].at = at;
        sb->drawn[i].s = now;
        uint64_t behind = sb->allowed > at ? sb->allowed - at : 0;
        uint64_t t = ckpt_now_ns();
        struct ckpt_tl_event e = {.start_ns = t, .end_ns = t, .arg = at, .kind = CKPT_TL_STANDBY,
                                  .detail = behind > UINT32_MAX ? UINT32_MAX : (uint32_t)behind};
        if (ckpt_arena_path(dir, sizeof(dir), job->opt->arena_root, job->opt->job_name, job->opt->first_rank + i) == 0)
            ckpt_tl_agent_add(dir, &e);
    }
}

void standby_tick(struct job *job)
{
    struct standby *sb = &job->sb;
    if (!sb->on || sb->lost[0] || job->phase != JOB_RUNNING)
        return;
    channel_read(&sb->chan, job->opt);
    uint64_t low = committed_by_all(job);
    if (!low)
        return;
    if (!sb->started_s)
        start(job);
    if (sb->started_s && low > sb->allowed) {
        for (int i = 0; i < sb->nranks; i++)
            ckpt_follow_order(sb->orders[i], &sb->orders[i]->allowed, low);
        sb->allowed = low;
    }
    if (sb->started_s && sb->running == job->opt->nproc) {
        check_lag(job, ckpt_now_s());
        draw(job, ckpt_now_s());
    }
}

bool standby_owns(const struct job *job, pid_t pid)
{
    /* By its pid too: a standby just started may not be in its group yet. */
    for (int i = 0; job->sb.ranks && i < job->opt->nproc; i++)
        if (job->sb.ranks[i].pid == pid)
            return true;
    return job->sb.pgid > 0 && getpgid(pid) == job->sb.pgid;
}

/*
 * Rank i's standby died while its rank runs: a new one follows the rank
 * alone.  The others met in their shadow job when they started, so it has
 * no one to meet: it gets the live job's own port and libckpt serves it,
 * from the rank's log, what the rank received at the rendezvous
 * (CKPT_FOLLOW_ALONE, interpose/rendezvous.c).  It replays from the start
 * and catches up behind the rank as the first ones did.
 */
static int start_alone(struct job *job, int i)
{
    struct standby *sb = &job->sb;
    char *vars[sizeof(sb->vars) / sizeof(sb->vars[0]) + 1];
    char alone[] = "CKPT_FOLLOW_ALONE=1";
    size_t k = 0;
    for (; sb->vars[k]; k++)
        vars[k] = sb->vars[k];
    vars[k++] = alone;
    vars[k] = NULL;
    ckpt_follow_set(&sb->orders[i]->at, 0);
    int rank = job->opt->first_rank + i;
    if (rank < sb->chan.nreports)
        sb->chan.reports[rank].pid = 0; /* up again once it says so */
    pid_t pgid = sb->running > 0 ? sb->pgid : 0, pid = 0;
    int rc = spawn_process(job, i, job->opt->cmd, job->master_port, vars, &pgid, &pid);
    if (rc < 0)
        return rc;
    sb->pgid = pgid;
    sb->ranks[i] = (struct rank){.pid = pid, .alone = true};
    sb->running++;
    sb->replaced++;
    sb->alone_s = ckpt_now_s();
    return 0;
}

bool standby_reaped(struct job *job, pid_t pid, int status)
{
    struct standby *sb = &job->sb;
    int i = 0;
    for (; sb->ranks && i < job->opt->nproc; i++)
        if (sb->ranks[i].pid == pid)
            break;
    if (!sb->ranks || i == job->opt->nproc)
        return false;
    bool alone = sb->ranks[i].alone;
    sb->ranks[i] = (struct rank){0};
    sb->running--;
    /* A standby killed is the cause, one that then exits (its peer gone
     * from a communicator) a consequence, though it may be reaped first. */
    bool killed = WIFSIGNALED(status), refused = !killed && WEXITSTATUS(status) == RESUME_EXIT_REFUSED;
    char who[64], how[128];
    if (job->opt->wrap)
        snprintf(who, sizeof(who), "the standbys' %s", job->opt->cmd[0]);
    else
        snprintf(who, sizeof(who), "the standby of rank %d", job->opt->first_rank + i);
    if (killed)
        snprintf(how, sizeof(how), "%s (pid %d) was killed by %s", who, (int)pid, sig_name(WTERMSIG(status)));
    else
        snprintf(how, sizeof(how), "%s (pid %d) exited with status %d%s", who, (int)pid, WEXITSTATUS(status),
                 refused ? " (its reason is said above)" : "");
    /* One that died while its rank runs (not one that refused: it would
     * again) is started again, alone; one lost during a takeover is not. */
    if (!refused && !job->opt->wrap && !sb->lost[0] && !sb->taking_over && job->phase == JOB_RUNNING &&
        sb->started_s && sb->replaced < STANDBY_ALONE_MAX) {
        int rc = start_alone(job, i);
        if (rc == 0) {
            ckpt_log(CKPT_WARN, "%s: a new one (pid %d) follows rank %d alone, from the start", how,
                     (int)sb->ranks[i].pid, job->opt->first_rank + i);
            return true;
        }
        ckpt_log(CKPT_WARN, "cannot start a standby for rank %d alone: %s", job->opt->first_rank + i, strerror(-rc));
    }
    if (!sb->lost[0] || (killed && !sb->lost_killed)) {
        sb->lost_killed = killed;
        snprintf(sb->lost, sizeof(sb->lost), "%s", how);
        if (!refused && sb->replaced >= STANDBY_ALONE_MAX)
            ckpt_log(CKPT_WARN, "%s, and %d standbys were started alone already in this launch: a failure now "
                     "recovers by replaying from the start", how, STANDBY_ALONE_MAX);
        else
            ckpt_log(CKPT_WARN, "%s: a failure now recovers by replaying from the start", how);
    }
    /* Refused before it replayed an iteration: it would refuse again (its
     * program is not one a standby can follow, it said why), unless it
     * was alone (the program may not be one that can be served its
     * rendezvous: standbys started together still can).  A standby under
     * torchrun says so on the channel: torchrun exits 1. */
    channel_read(&sb->chan, job->opt);
    int r = refused ? i : sb->chan.refused_rank - job->opt->first_rank;
    if (!alone && r >= 0 && r < sb->nranks && sb->orders[r] && !ckpt_follow_get(&sb->orders[r]->at)) {
        ckpt_log(CKPT_WARN, "no more standbys for this job: the standby of rank %d refused to stand by before "
                 "its first iteration and would again", job->opt->first_rank + r);
        sb->on = false;
    }
    return true;
}

/* No standbys run: their orders are let go. */
static void forget(struct standby *sb)
{
    for (int i = 0; sb->orders && i < sb->nranks; i++) {
        ckpt_follow_unmap(sb->orders[i]);
        sb->orders[i] = NULL;
    }
    sb->running = 0;
    sb->pgid = 0;
    sb->started_s = 0;
    sb->allowed = 0;
    sb->nmarks = 0;
    sb->lagging = 0;
    sb->replaced = 0;
    sb->alone_s = 0;
    sb->peer_logs = false;
    if (sb->drawn)
        memset(sb->drawn, 0, sb->nranks * sizeof(*sb->drawn));
}

void standby_stop(struct job *job, const char *why)
{
    struct standby *sb = &job->sb;
    if (!sb->ranks)
        return;
    if (why)
        ckpt_log(CKPT_INFO, "stopping the standbys: %s", why);
    if (sb->running > 0 && sb->pgid > 0) {
        kill(-sb->pgid, SIGKILL);
        for (int i = 0; i < job->opt->nproc; i++)
            if (sb->ranks[i].pid > 0) {
                if (sb->peer_logs) /* a spare's: each leads a group of its own */
                    kill(-sb->ranks[i].pid, SIGKILL);
                kill(sb->ranks[i].pid, SIGKILL);
                waitpid(sb->ranks[i].pid, NULL, __WNOTHREAD);
            }
    }
    for (int i = 0; i < job->opt->nproc; i++)
        sb->ranks[i] = (struct rank){0};
    forget(sb);
}

/*
 * A spare that took node's place (spare.c): the standbys it ran for the
 * node's ranks, alone, following the logs it received, are this node's,
 * with their channel, replayed up to @allowed.  Their copies are moved
 * into the arena before they take over (peer_logs).
 */
int standby_adopt(struct job *job, const pid_t *pids, struct ckpt_follow **orders, struct channel *chan, pid_t pgid,
                  uint64_t allowed)
{
    struct standby *sb = &job->sb;
    int n = job->opt->nproc;
    if (!sb->on)
        return -ENOSYS;
    if (n > sb->cap) {
        free(sb->orders);
        free(sb->drawn);
        sb->orders = calloc(n, sizeof(*sb->orders));
        sb->drawn = calloc(n, sizeof(*sb->drawn));
        sb->cap = sb->orders && sb->drawn ? n : 0;
        if (!sb->cap)
            return -ENOMEM;
    }
    struct channel own = sb->chan;
    sb->chan = *chan;
    int rc = standby_vars(job);
    if (rc < 0) { /* the channel stays the spare's */
        sb->chan = own;
        sb->on = false;
        return rc;
    }
    channel_close(&own);
    sb->nranks = n;
    for (int i = 0; i < n; i++) {
        sb->orders[i] = orders[i];
        sb->ranks[i] = (struct rank){ .pid = pids[i], .alone = true };
    }
    sb->running = n;
    sb->pgid = pgid;
    sb->started_s = sb->alone_s = ckpt_now_s();
    sb->allowed = allowed;
    sb->peer_logs = true;
    return 0;
}

/* The standbys are the job's ranks now, and the ranks' channel and port
 * the next standbys'. */
static int swap_in(struct job *job, uint64_t iteration)
{
    struct standby *sb = &job->sb;
    struct rank *ranks = job->ranks;
    struct channel chan = job->chan;
    char port[16], *p = job->master_port;

    job->ranks = sb->ranks;
    sb->ranks = ranks;
    memset(sb->ranks, 0, job->opt->nproc * sizeof(*sb->ranks));
    job->running = sb->running;
    job->pgid = sb->pgid;
    job->chan = sb->chan;
    sb->chan = chan;
    job->disk.seen = 0; /* the commits of the standbys' launch count from where they took over */
    channel_carry(&job->chan, &sb->chan);
    channel_reset(&sb->chan);
    job->master_port = sb->master_port;
    sb->master_port = p;
    if (job_spare_port(port) == 0 && (p = strdup(port))) {
        free(sb->master_port);
        sb->master_port = p;
    }
    forget(sb);
    job->phase = JOB_RUNNING;
    job->term_sent = false;
    job->out = (struct outcome){ .failed_rank = -1, .refused_rank = -1, .no_room_rank = -1 };
    job->restore = iteration;
    job->disk.retire_after = iteration;
    free(job->vars[2]);
    job->vars[2] = NULL;
    if (asprintf(&job->vars[2], "CKPT_AGENT_SOCKET=%s", job->chan.path) < 0) {
        job->vars[2] = NULL;
        return -ENOMEM;
    }
    return standby_vars(job);
}

int standby_take_over(struct job *job, uint64_t iteration)
{
    const struct options *opt = job->opt;
    struct standby *sb = &job->sb;

    if (!sb->on)
        return -ENOSYS;
    if (!sb->lost[0] && sb->running != opt->nproc)
        snprintf(sb->lost, sizeof(sb->lost), "the standbys had not started yet (no snapshot every rank committed)");
    if (sb->lost[0]) {
        ckpt_log(CKPT_INFO, "no takeover: %s", sb->lost);
        return -ESRCH;
    }
    double t0 = ckpt_now_s(), moved = t0, arrived = t0;
    uint64_t where = 0, behind = iteration;
    sb->taking_over = true;
    channel_clear(&sb->chan); /* the ids of a takeover before, if one failed */
    for (int i = 0; i < sb->nranks; i++) {
        uint64_t at = ckpt_follow_get(&sb->orders[i]->at);
        behind = at < behind ? at : behind;
        ckpt_follow_order(sb->orders[i], &sb->orders[i]->takeover, iteration);
    }
    ckpt_log(CKPT_INFO, "the standbys take over at iteration %llu (the one furthest behind is at iteration %llu)",
             (unsigned long long)iteration, (unsigned long long)behind);
    for (bool first = true; sb->chan.restored < sb->nranks && !sb->lost[0]; first = false) {
        if (job->member)
            member_takeover_ids(job, sb->chan.dir, first);
        double now = ckpt_now_s();
        uint64_t sum = 0;
        bool replaying = false, up = true;
        for (int i = 0; i < sb->nranks; i++) {
            int rank = opt->first_rank + i;
            sum += ckpt_follow_get(&sb->orders[i]->at);
            replaying |= ckpt_follow_get(&sb->orders[i]->live_at) != iteration;
            up &= rank < sb->chan.nreports && sb->chan.reports[rank].pid;
        }
        /* A standby still starting (a Python program importing its
         * libraries) has not replayed yet, and is not stuck, for a while. */
        double started = sb->alone_s > sb->started_s ? sb->alone_s : sb->started_s;
        if (sum != where || (!up && now - started < TAKEOVER_START_S))
            where = sum, moved = now;
        if (replaying)
            arrived = now;
        if (now - arrived >= TAKEOVER_WAIT_S) {
            snprintf(sb->lost, sizeof(sb->lost), "the standbys did not all go live within %g s of reaching "
                     "iteration %llu", TAKEOVER_WAIT_S, (unsigned long long)iteration);
            break;
        }
        if (replaying && now - moved >= TAKEOVER_STILL_S) {
            snprintf(sb->lost, sizeof(sb->lost), "the standbys replayed no iteration for %g s on their way to "
                     "iteration %llu (one hangs)", TAKEOVER_STILL_S, (unsigned long long)iteration);
            break;
        }
        struct pollfd pfd[2] = {{.fd = job->sigfd, .events = POLLIN}, {.fd = sb->chan.fd, .events = POLLIN}};
        poll(pfd, 2, 100);
        channel_read(&sb->chan, opt);
        struct signalfd_siginfo si;
        while (read(job->sigfd, &si, sizeof(si)) == sizeof(si)) {
            if (si.ssi_signo != SIGCHLD) {
                job->out.stop_signal = (int)si.ssi_signo;
                snprintf(sb->lost, sizeof(sb->lost), "got %s during the takeover", sig_name((int)si.ssi_signo));
            }
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG | __WNOTHREAD)) > 0)
            standby_reaped(job, pid, status);
    }
    sb->taking_over = false;
    if (sb->lost[0]) {
        standby_stop(job, sb->lost);
        return -EIO;
    }
    double took = ckpt_now_s() - t0;
    if (swap_in(job, iteration) < 0) {
        ckpt_log(CKPT_ERROR, "cannot go on after the takeover: %s", strerror(ENOMEM));
        return -ENOMEM;
    }
    ckpt_log(CKPT_INFO, "the standby%s took over at iteration %llu in %.3f s", sb->nranks == 1 ? "" : "s",
             (unsigned long long)iteration, took);
    return 0;
}
