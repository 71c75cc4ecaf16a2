/*
 * The coordinator of a job on several nodes (coord.h), a thread of node
 * 0's ckpt-resume: it waits until every node has joined, decides where the
 * job goes back to (runtime/recovery.h) and which copies must travel,
 * launches every node at once, agrees with the nodes on the iterations
 * they keep and replicate, and stops the whole job when one rank fails or
 * one node is lost.  It decides only from what the members report; it
 * never reads an arena itself, and a member that sends something malformed
 * is dropped, never believed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "coord.h"
#include "log.h"
#include "placement.h"
#include "resume.h"
#include "wire.h"

#define HEARTBEAT_S 1.0
#define MAX_PENDING 64
#define LEAD_MAX 65536 /* iterations: the farthest a target is aimed past the nodes' newest commit */
#define HELD_MAX 1024 /* copies a JOIN may list per rank of the job: 2 slots, 2 replicas, CKPT_PERSIST_KEEP (<= 1000) generations */

enum phase {
    GATHER,                 /* waiting for every node to join */
    FETCH,                  /* PLAN sent: waiting for every FETCHED */
    RUN,                    /* LAUNCH sent: the ranks run */
    OVER,                   /* FINISH sent */
};

struct node {
    int fd;                 /* -1: not connected */
    bool joined, done, fetched, held_in, replicated, repl_warned;
    int fetch_status, repl_status;
    uint64_t refused;
    uint64_t standby;           /* its JOIN: its standbys replay up to here, 0: it has none ready */
    struct coord_addr addr;
    struct ckpt_held *held;
    uint32_t nheld;
    struct coord_held h;
    double heard, sent;
    struct ckpt_wire_rx rx;     /* a message on its way in */
    bool unfenced;              /* declared lost with CKPT_FENCE_CMD set: not fenced yet */
    pid_t fence;                /* the fence command running against it, 0: none */
    double fence_due, fence_since; /* when to run it (again), and since when it is wanted */
};

/* A connection that has not joined yet: its JOIN must come whole within
 * CKPT_NODE_TIMEOUT, else the connection is closed. */
struct pending {
    int fd;
    double since;
    struct ckpt_wire_rx rx;
};

struct coord {
    const struct options *opt;
    int lfd, stop[2];
    pthread_t thread;
    bool started;
    unsigned n, nproc, replicas;
    struct node *nodes;
    struct pending pending[MAX_PENDING];
    int npending;
    enum phase phase;
    uint64_t restore, below, durable, target, replicating;
    bool ever_durable, failed_launch;
    bool takeover_failed;    /* a node's standbys could not take over: the next plan is cold, no new restart */
    char no_room[128]; /* a rank stopped for want of host memory: the job ends, not restarted */
    int early, early_before; /* the exit status of this launch's and the last one's failure before any boundary, -1: none */
    char early_why[128];     /* which rank that was */
    uint64_t lead;           /* iterations a new target lies past the nodes' newest commit, set at each miss */
    uint64_t late_seen;      /* how late the latest node learned a target, at the last miss that was no stall */
    double durable_at;       /* when the nodes were last told the durable iteration and the target */
    double replicate_at;     /* when the round in flight was last asked for */
    uint32_t replicate_value; /* its REPLICATE's value (COORD_AGAIN or 0) */
    int launches, restarts, exit_code, user_signal;
    unsigned rounds, failed_rounds;     /* replication rounds ended, and those some node failed */
    double timeout_s, resume_at, gather_since;
    char master_addr[COORD_ADDR_MAX], master_port[16];
    char standby_port[16];              /* the standbys' rank 0 port: the next takeover's master port */
    char bound[128];                    /* the address listened on */
    bool master_from_node0;             /* no master address given: node 0's (through etcd) */
    struct pollfd *pfd;                 /* one turn's: the stop pipe, the listener, pending, nodes */
    struct spawn *spawn;                /* the nodes started with CKPT_NODE_LAUNCHER; NULL: none */
};

static void send_to(struct coord *c, unsigned j, uint16_t type, const void *a, size_t alen, const void *b,
                    size_t blen);

/* What a member's negative status says: it came off the wire, so it may be any value. */
static const char *status_text(int32_t status)
{
    return status > INT32_MIN ? strerror(-status) : "an unknown error";
}

static void drop(struct coord *c, unsigned j, const char *why)
{
    struct node *nd = &c->nodes[j];
    if (nd->fd < 0)
        return;
    close(nd->fd);
    nd->fd = -1;
    ckpt_wire_rx_clear(&nd->rx);
    nd->joined = false;
    ckpt_log(CKPT_WARN, "node %u is lost (%s)", j, why);
}

static void send_to(struct coord *c, unsigned j, uint16_t type, const void *a, size_t alen, const void *b,
                    size_t blen)
{
    struct node *nd = &c->nodes[j];
    if (nd->fd < 0)
        return;
    int rc = ckpt_wire_send(nd->fd, type, a, alen, b, blen);
    if (rc < 0)
        drop(c, j, strerror(-rc));
    else
        nd->sent = now_s();
}

static void broadcast(struct coord *c, uint16_t type, const void *a, size_t alen)
{
    for (unsigned j = 0; j < c->n; j++)
        send_to(c, j, type, a, alen, NULL, 0);
}

/* Ends the job on every node with @code and says why. */
static void finish(struct coord *c, int code, const char *why)
{
    struct coord_status st = { .status = code, .value = (uint64_t)c->restarts };
    ckpt_log(CKPT_INFO, "replication: %u round%s, %u of them failed on some node; newest durable iteration %llu",
             c->rounds, c->rounds == 1 ? "" : "s", c->failed_rounds, (unsigned long long)c->durable);
    if (why)
        ckpt_log(code ? CKPT_ERROR : CKPT_INFO, "%s", why);
    for (unsigned j = 0; j < c->n; j++)
        send_to(c, j, COORD_FINISH, &st, sizeof(st), why, why ? strlen(why) : 0);
    c->phase = OVER;
}

/* A launch is over on one node: everyone stops and joins again. */
static void stop_all(struct coord *c, const char *why)
{
    if (c->phase != RUN && c->phase != FETCH)
        return;
    ckpt_log(CKPT_INFO, "stopping the job on every node: %s", why);
    /* Every node joins again, with what it holds once its ranks are gone:
     * what it said before may be stale, and a plan made from it wrong. */
    for (unsigned j = 0; j < c->n; j++) {
        send_to(c, j, COORD_STOP, why, strlen(why), NULL, 0);
        c->nodes[j].joined = false;
    }
    c->phase = GATHER;
    c->gather_since = now_s();
    c->failed_launch = true;
    c->replicating = 0;
}

/* Drops the replicas @nd keeps of iteration @it: sending one failed, and they are not trusted again. */
static void forget_replicas(struct node *nd, uint64_t it)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < nd->nheld; i++)
        if (!(nd->held[i].tier == CKPT_TIER_PEER && nd->held[i].iteration == it))
            nd->held[k++] = nd->held[i];
    nd->nheld = k;
}

/*
 * Whether the standbys take over at @it: every node's run and may not
 * have replayed past it, every rank restores from its own node's arena
 * (a copy that must travel, or a node that lost its memory, means a node
 * whose standbys did not follow these ranks), and the last takeover did
 * not fail.  When some node has standbys and they cannot, says why.
 */
static bool by_standbys(const struct coord *c, uint64_t it, const struct ckpt_source *src)
{
    char why[160] = "";
    bool any = false;

    for (unsigned j = 0; j < c->n; j++)
        any |= c->nodes[j].standby > 0;
    if (!it || c->below || !any)
        return false;
    if (c->takeover_failed)
        snprintf(why, sizeof(why), "the last takeover failed");
    for (unsigned j = 0; j < c->n && !*why; j++)
        if (!c->nodes[j].standby)
            snprintf(why, sizeof(why), "node %u has no standbys ready", j);
        else if (c->nodes[j].standby > it)
            snprintf(why, sizeof(why), "the standbys of node %u may be past iteration %llu", j,
                     (unsigned long long)it);
    for (unsigned r = 0; r < c->n * c->nproc && !*why; r++)
        if (src[r].tier != CKPT_TIER_ARENA || src[r].node != r / c->nproc)
            snprintf(why, sizeof(why), "rank %u restores from a copy outside its node's arena", r);
    if (*why)
        ckpt_log(CKPT_INFO, "no takeover by the standbys (%s): every node recovers by the cold path", why);
    return !*why;
}

/* Every node has joined: decide where to go and send the plan. */
static void plan(struct coord *c)
{
    unsigned nranks = c->n * c->nproc;
    size_t total = 0;
    char why[1024];

    for (unsigned j = 0; j < c->n; j++)
        total += c->nodes[j].nheld;
    struct ckpt_held *all = malloc((total ? total : 1) * sizeof(*all));
    struct ckpt_source *src = malloc(nranks * sizeof(*src));
    struct coord_send *sends = malloc((nranks ? nranks : 1) * sizeof(*sends));
    if (!all || !src || !sends) {
        free(all), free(src), free(sends);
        finish(c, 1, "cannot plan the restart: out of memory");
        return;
    }
    size_t k = 0;
    for (unsigned j = 0; j < c->n; j++)
        for (uint32_t i = 0; i < c->nodes[j].nheld; i++) {
            all[k] = c->nodes[j].held[i];
            all[k++].node = j;
        }
    uint64_t it = ckpt_recovery_pick(all, k, nranks, c->nproc, c->below, src, why, sizeof(why));
    if (!it && c->launches && c->ever_durable && !c->below) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "cannot recover the job from any tier: %s; its snapshots were lost with the "
                 "nodes that held them (start the job again to begin from iteration 0)", why);
        free(all), free(src), free(sends);
        finish(c, 1, msg);
        return;
    }
    /* Every restore was refused: a clean start throws away all training and
     * may overwrite the program's outputs, so only CKPT_FALLBACK=clean
     * allows it (restart.c says the same on one node). */
    if (!it && c->below && ckpt_cfg_int(CFG_FALLBACK) != 1) {
        char msg[1400];
        snprintf(msg, sizeof(msg), "no snapshot of this job can be restored (%s): the job stops here, with its "
                 "snapshots kept; CKPT_FALLBACK=clean would start it again from the beginning, losing the "
                 "training up to iteration %llu", why, (unsigned long long)c->below);
        free(all), free(src), free(sends);
        finish(c, 1, msg);
        return;
    }
    if (!it && c->below)
        ckpt_log(CKPT_INFO, "falling back to a clean start (CKPT_FALLBACK=clean): %s; the training up to "
                 "iteration %llu is lost", why, (unsigned long long)c->below);
    if (it) {
        ckpt_log(CKPT_INFO, "restarting from iteration %llu", (unsigned long long)it);
        for (unsigned r = 0; r < nranks; r++)
            ckpt_log(CKPT_INFO, "rank %u: from the %s of node %u", r,
                     src[r].tier == CKPT_TIER_ARENA ? "arena" : src[r].tier == CKPT_TIER_PEER ? "peer arena"
                                                                                              : "disk",
                     src[r].node);
    } else if (c->launches && !c->below) {
        ckpt_log(CKPT_INFO, "restarting from the beginning: %s", why);
    }
    c->restore = it;
    bool by_standby = by_standbys(c, it, src);
    c->takeover_failed = false;
    if (by_standby)
        ckpt_log(CKPT_INFO, "the standbys of every node take over at iteration %llu", (unsigned long long)it);
    /* Through etcd the coordinator may run on any node: rank 0's rendezvous
     * is at node 0's address, the one its agent takes replicas at. */
    if (c->master_from_node0) {
        const char *hp = c->nodes[0].addr.hostport, *colon = strrchr(hp, ':');
        size_t n = colon ? (size_t)(colon - hp) : strlen(hp);
        if (n >= 2 && hp[0] == '[' && hp[n - 1] == ']')
            hp++, n -= 2;
        snprintf(c->master_addr, sizeof(c->master_addr), "%.*s", (int)n, hp);
    }
    /* a port another process took costs one launch, not every restart (env.c);
     * standbys that take over are the job at their own port, and the next
     * ones get another */
    if (by_standby)
        memcpy(c->master_port, c->standby_port, sizeof(c->master_port));
    else if (c->launches && job_master_port(c->master_port) < 0)
        ckpt_log(CKPT_WARN, "keeping rank 0's port %s: cannot find another free one", c->master_port);
    if ((by_standby || c->launches) && job_spare_port(c->standby_port) < 0)
        ckpt_log(CKPT_WARN, "keeping the standbys' port %s: cannot find another free one", c->standby_port);
    c->launches++;
    for (unsigned j = 0; j < c->n; j++) {
        struct coord_addr *addrs = calloc(c->n, sizeof(*addrs));
        struct coord_plan p = { .restore = it, .launch = (uint64_t)c->launches, .nnodes = c->n,
                                .by_standby = by_standby };
        size_t ns = 0;
        if (!addrs) {
            free(all), free(src), free(sends);
            finish(c, 1, "cannot plan the restart: out of memory");
            return;
        }
        for (unsigned i = 0; i < c->n; i++)
            addrs[i] = c->nodes[i].addr;
        for (unsigned r = 0; it && r < nranks; r++)
            if (src[r].tier == CKPT_TIER_PEER && src[r].node == j && r / c->nproc != j)
                sends[ns++] = (struct coord_send){ .rank = r, .node = r / c->nproc, .iteration = it };
        p.nsend = (uint32_t)ns;
        snprintf(p.master_addr, sizeof(p.master_addr), "%s", c->master_addr);
        snprintf(p.master_port, sizeof(p.master_port), "%s", c->master_port);
        snprintf(p.standby_port, sizeof(p.standby_port), "%s", c->standby_port);
        /* One payload: the plan, the addresses, the sends. */
        size_t len = c->n * sizeof(*addrs) + ns * sizeof(*sends);
        char *tail = malloc(len ? len : 1);
        if (tail) {
            memcpy(tail, addrs, c->n * sizeof(*addrs));
            memcpy(tail + c->n * sizeof(*addrs), sends, ns * sizeof(*sends));
            send_to(c, j, COORD_PLAN, &p, sizeof(p), tail, len);
        }
        free(tail);
        free(addrs);
        c->nodes[j].fetched = false;
    }
    free(all), free(src), free(sends);
    c->phase = FETCH;
}

/*
 * Runs CKPT_FENCE_CMD against each node declared lost (fence.c), again
 * each second while it fails; the job is not restarted before every such
 * node is fenced, and ends when one cannot be within 10 x CKPT_NODE_TIMEOUT.
 */
static void fences(struct coord *c, double now)
{
    for (unsigned j = 0; j < c->n && c->phase != OVER; j++) {
        struct node *nd = &c->nodes[j];
        int status;
        if (nd->fence > 0 && fence_poll(nd->fence, &status) != 0) {
            nd->fence = 0;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                nd->unfenced = false;
                ckpt_log(CKPT_INFO, "node %u fenced by CKPT_FENCE_CMD in %.1f s", j, now - nd->fence_since);
                continue;
            }
            ckpt_log(CKPT_WARN, "CKPT_FENCE_CMD against node %u failed (%s %d): trying again", j,
                     WIFSIGNALED(status) ? "killed by signal" : "exit status",
                     WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            nd->fence_due = now + 1;
        }
        if (!nd->unfenced)
            continue;
        if (now - nd->fence_since > 10 * c->timeout_s) {
            char why[192];
            fence_cancel(nd->fence);
            nd->fence = 0;
            nd->unfenced = false;
            snprintf(why, sizeof(why), "node %u could not be fenced (CKPT_FENCE_CMD) in %g s: the job stops rather "
                     "than restart beside a node that may still run its ranks", j, 10 * c->timeout_s);
            finish(c, c->exit_code ? c->exit_code : 1, why);
            return;
        }
        if (nd->fence <= 0 && now >= nd->fence_due) {
            nd->fence = fence_start(j, nd->addr.hostport, c->opt->job_name);
            if (nd->fence < 0) {
                ckpt_log(CKPT_WARN, "cannot run CKPT_FENCE_CMD against node %u: %s", j, strerror(-nd->fence));
                nd->fence = 0;
                nd->fence_due = now + 1;
            }
        }
    }
}

/* In GATHER: when every node is in and the backoff is over, decides what comes next. */
static void gathered(struct coord *c)
{
    if (c->user_signal) {
        char why[96];
        snprintf(why, sizeof(why), "the job was stopped by %s", sig_name(c->user_signal));
        finish(c, 128 + c->user_signal, why);
        return;
    }
    for (unsigned j = 0; j < c->n; j++)
        if (c->nodes[j].unfenced)
            return; /* fences() ends the job if it cannot be */
    for (unsigned j = 0; j < c->n; j++) {
        if (c->nodes[j].joined)
            continue;
        if (now_s() - c->gather_since > 10 * c->timeout_s) {
            char why[160];
            snprintf(why, sizeof(why), "node %u did not join within %g s (10 x CKPT_NODE_TIMEOUT); giving up", j,
                     10 * c->timeout_s);
            finish(c, c->exit_code ? c->exit_code : 1, why);
        }
        return;
    }
    if (c->failed_launch && c->no_room[0]) {
        char why[192];
        snprintf(why, sizeof(why), "%s: not restarted, as a restart would not either", c->no_room);
        finish(c, c->exit_code ? c->exit_code : 1, why);
        return;
    }
    if (c->failed_launch && c->early > 0 && c->early == c->early_before) {
        char why[384];
        snprintf(why, sizeof(why), "%s before any rank reached an iteration boundary, on two launches in a row: an "
                 "error in the command or its set-up (its output on that node says which), which a restart would "
                 "repeat; not restarted again", c->early_why);
        finish(c, c->early, why);
        return;
    }
    if (c->failed_launch) {
        c->failed_launch = false;
        c->early_before = c->early;
        c->early = -1;
        uint64_t refused = 0;
        for (unsigned j = 0; j < c->n; j++)
            if (c->nodes[j].refused)
                refused = c->nodes[j].refused;
        if (refused) {
            ckpt_log(CKPT_INFO, "the restore of iteration %llu was refused: trying an older one",
                     (unsigned long long)refused);
            c->below = refused;
        } else if (c->takeover_failed) {
            c->below = 0; /* the same restart goes on, by the cold path */
        } else {
            c->below = 0;
            if (c->restarts >= c->opt->max_restarts) {
                char why[96];
                snprintf(why, sizeof(why), "giving up after %d restart%s", c->restarts, c->restarts == 1 ? "" : "s");
                finish(c, c->exit_code ? c->exit_code : 1, why);
                return;
            }
            c->restarts++;
            c->resume_at = now_s() + backoff_s(c->opt, c->restarts);
            ckpt_log(CKPT_INFO, "restart %d of %d in %g s", c->restarts, c->opt->max_restarts,
                     backoff_s(c->opt, c->restarts));
        }
    }
    if (now_s() < c->resume_at)
        return;
    plan(c);
}

/* The iteration every node keeps, newest first, past what is durable; 0: none. */
static uint64_t common_held(const struct coord *c)
{
    const struct coord_held *h0 = &c->nodes[0].h;
    uint64_t cand[2] = { h0->newest, h0->other }, best = 0;
    for (int k = 0; k < 2; k++) {
        if (!cand[k] || cand[k] <= c->durable || cand[k] <= best)
            continue;
        bool all = true;
        for (unsigned j = 1; j < c->n && all; j++)
            all = c->nodes[j].h.newest == cand[k] || c->nodes[j].h.other == cand[k];
        if (all)
            best = cand[k];
    }
    return best;
}

/* A HELD arrived: when every node has said what it keeps, replicate or aim again. */
static void held(struct coord *c)
{
    if (c->replicating)
        return;
    uint64_t top = c->target;
    for (unsigned j = 0; j < c->n; j++) {
        if (!c->nodes[j].held_in)
            return;
        if (c->nodes[j].h.committed >= top)
            top = c->nodes[j].h.committed + 1;
    }
    uint64_t it = common_held(c);
    for (unsigned j = 0; j < c->n; j++)
        c->nodes[j].held_in = c->nodes[j].replicated = false;
    if (it) {
        struct coord_iter m = { .iteration = it };
        c->replicating = it;
        c->replicate_value = 0;
        c->replicate_at = now_s();
        c->lead /= 2;
        broadcast(c, COORD_REPLICATE, &m, sizeof(m));
        return;
    }
    /* The nodes kept different iterations: aim past all of them.  The
     * target must reach every node before its ranks get there, and through
     * etcd, or on a loaded machine, that takes as long as many iterations:
     * nodes that learn it late keep later iterations, and never meet.  How
     * late the latest learned it (what it kept, past the target) says how
     * far ahead to aim: twice that.  Doubling instead overshot, and left a
     * busy job's newest durable iteration a thousand iterations behind. */
    uint64_t every = (uint64_t)ckpt_cfg_int(CFG_EVERY), late = 0;
    bool measured = false;
    for (unsigned j = 0; j < c->n; j++)
        if (c->nodes[j].h.newest >= c->target) {
            uint64_t l = c->nodes[j].h.newest - c->target;
            late = l > late ? l : late;
            measured = true;
        }
    /* A lateness many times the last is a stall (etcd without a quorum
     * while the ranks trained on), not message lateness: the last lead is
     * doubled instead, past the newest any node kept. */
    uint64_t bound = c->lead > c->late_seen ? c->lead : c->late_seen;
    bound = bound > every ? bound : every;
    if (measured && late > 8 * bound) {
        c->lead = 2 * bound;
    } else if (measured) {
        c->lead = 2 * late + every;
        c->late_seen = late;
    }
    else
        c->lead = c->lead ? 2 * c->lead : every;
    if (c->lead > LEAD_MAX)
        c->lead = LEAD_MAX;
    c->target = top + c->lead - 1;
    struct coord_iter m = { .iteration = c->durable, .value = c->target };
    ckpt_log(CKPT_DEBUG, "the nodes keep different iterations (the latest learned the target %llu iterations "
             "late); next target %llu", (unsigned long long)late, (unsigned long long)c->target);
    c->durable_at = now_s();
    broadcast(c, COORD_DURABLE, &m, sizeof(m));
}

static void replicated(struct coord *c, unsigned j, const struct coord_status *st)
{
    if (st->iteration != c->replicating)
        return;
    c->nodes[j].replicated = true;
    c->nodes[j].repl_status = st->status;
    if (st->status < 0 && !c->nodes[j].repl_warned)
        ckpt_log(CKPT_WARN, "node %u could not replicate iteration %llu (%s): replication falls behind; the "
                 "next one is tried", j, (unsigned long long)st->iteration, status_text(st->status));
    c->nodes[j].repl_warned = st->status < 0;
    for (unsigned i = 0; i < c->n; i++)
        if (!c->nodes[i].replicated)
            return;
    bool ok = true;
    for (unsigned i = 0; i < c->n; i++)
        ok &= c->nodes[i].repl_status == 0;
    c->rounds++;
    c->failed_rounds += !ok;
    if (ok) {
        c->durable = c->replicating;
        c->ever_durable = true;
        ckpt_log(CKPT_DEBUG, "iteration %llu is held by every node and its replicas", (unsigned long long)c->durable);
    }
    c->target = c->replicating + 1;
    c->replicating = 0;
    for (unsigned i = 0; i < c->n; i++)
        c->nodes[i].held_in = false;
    struct coord_iter m = { .iteration = c->durable, .value = c->target };
    c->durable_at = now_s();
    broadcast(c, COORD_DURABLE, &m, sizeof(m));
}

/* A round's message lost on its way would leave a node pinning what it
 * kept and the round unended: whoever has not answered is told again
 * while nothing moves (both messages are idempotent at a node). */
#define DURABLE_AGAIN_S 2.0
#define REPLICATE_AGAIN_S 10.0
static void remind(struct coord *c, double now)
{
    bool round = c->replicating != 0;
    double *at = round ? &c->replicate_at : &c->durable_at;
    if (c->phase != RUN || !*at || now - *at < (round ? REPLICATE_AGAIN_S : DURABLE_AGAIN_S))
        return;
    struct coord_iter m = round ? (struct coord_iter){ .iteration = c->replicating, .value = c->replicate_value }
                                : (struct coord_iter){ .iteration = c->durable, .value = c->target };
    for (unsigned j = 0; j < c->n; j++)
        if (!(round ? c->nodes[j].replicated : c->nodes[j].held_in))
            send_to(c, j, round ? COORD_REPLICATE : COORD_DURABLE, &m, sizeof(m), NULL, 0);
    *at = now;
}

/*
 * Takes a JOIN from the connection @fd, which is node @self already or -1
 * when new; returns the node it is, or -1 after telling it why not (the
 * caller then closes the connection: a node's is still in c->nodes).
 */
static int join(struct coord *c, int fd, int self, const void *msg, size_t len)
{
    const struct coord_join *jn = msg;
    char why[256] = "";

    if (len < sizeof(*jn) || len != sizeof(*jn) + (size_t)jn->nheld * sizeof(struct ckpt_held))
        snprintf(why, sizeof(why), "a malformed JOIN");
    else if (jn->nheld > HELD_MAX * c->n * c->nproc) /* a node holds a few copies of each rank */
        snprintf(why, sizeof(why), "node %u lists %u copies held, more than %u per rank of the job", jn->node,
                 jn->nheld, HELD_MAX);
    else if (jn->nnodes != c->n || jn->nproc != c->nproc || jn->replicas != c->replicas)
        snprintf(why, sizeof(why), "node %u runs %u node(s) x %u rank(s) with %u replicas, the job %u x %u with %u",
                 jn->node, jn->nnodes, jn->nproc, jn->replicas, c->n, c->nproc, c->replicas);
    else if (jn->node >= c->n)
        snprintf(why, sizeof(why), "node rank %u is not below %u", jn->node, c->n);
    else if (self >= 0 && jn->node != (unsigned)self)
        snprintf(why, sizeof(why), "node %d joins again as node %u", self, jn->node);
    else if (strncmp(jn->job, c->opt->job_name, sizeof(jn->job)) != 0)
        snprintf(why, sizeof(why), "node %u belongs to job '%.64s', not '%s'", jn->node, jn->job, c->opt->job_name);
    /* Through etcd only the agent holding the node's rank reaches here
     * (bridge.c): a JOIN on a new connection is that node's new agent. */
    else if (!c->opt->etcd && c->nodes[jn->node].fd >= 0 && c->nodes[jn->node].fd != fd &&
             now_s() - c->nodes[jn->node].heard < 2 * HEARTBEAT_S)
        snprintf(why, sizeof(why), "node %u is already in the job", jn->node);
    else if (memchr(jn->replica.hostport, '\0', sizeof(jn->replica.hostport)) == NULL)
        snprintf(why, sizeof(why), "a malformed replica address");
    if (*why) {
        ckpt_log(CKPT_WARN, "refused a node: %s", why);
        struct coord_status st = { .status = 2 };
        ckpt_wire_send(fd, COORD_FINISH, &st, sizeof(st), why, strlen(why));
        return -1;
    }
    struct node *nd = &c->nodes[jn->node];
    struct ckpt_held *h = malloc(jn->nheld ? jn->nheld * sizeof(*h) : 1);
    if (!h)
        return -1;
    /* Its old connection has gone quiet (the node's agent gave up on it
     * first, across a partition that kept the close from coming here):
     * the new one is the node. */
    if (nd->fd >= 0 && nd->fd != fd)
        drop(c, jn->node, "it joined again on a new connection");
    /* A node that joins while the others run has stopped: so must they,
     * before it is counted in.  Told to stop once joined, it would wait
     * for a plan while the others waited for it to join again. */
    if (c->phase == RUN || c->phase == FETCH)
        stop_all(c, "a node's ranks stopped");
    memcpy(h, jn + 1, jn->nheld * sizeof(*h));
    free(nd->held);
    nd->held = h;
    nd->nheld = jn->nheld;
    nd->fd = fd;
    nd->addr = jn->replica;
    nd->refused = jn->refused;
    nd->standby = jn->standby;
    nd->joined = true;
    nd->done = false;
    nd->heard = now_s();
    ckpt_log(CKPT_DEBUG, "node %u joined (%u copies held, replicas at %s)", jn->node, jn->nheld,
             jn->replica.hostport);
    return (int)jn->node;
}

/* One message from node @j. */
static void take(struct coord *c, unsigned j, uint16_t type, const void *msg, size_t len)
{
    struct node *nd = &c->nodes[j];
    const struct coord_status *st = msg;

    switch (type) {
    case COORD_JOIN:
        if (join(c, nd->fd, (int)j, msg, len) < 0)
            drop(c, j, "its JOIN was refused");
        return;
    case COORD_HEARTBEAT:
        return;
    case COORD_FETCHED:
        if (len != sizeof(*st) || c->phase != FETCH)
            return;
        nd->fetched = true;
        nd->fetch_status = st->status;
        for (unsigned i = 0; i < c->n; i++)
            if (!c->nodes[i].fetched)
                return;
        bool failed = false;
        for (unsigned i = 0; i < c->n; i++) {
            if (c->nodes[i].fetch_status < 0) {
                ckpt_log(CKPT_WARN, "node %u could not send the copies asked of it (%s): its replicas of iteration "
                         "%llu are not used", i, status_text(c->nodes[i].fetch_status),
                         (unsigned long long)c->restore);
                forget_replicas(&c->nodes[i], c->restore);
                failed = true;
            }
        }
        if (failed) {
            c->launches--; /* the plan is made again: the same launch */
            plan(c);
            return;
        }
        c->below = 0;
        c->durable = c->restore;
        c->target = c->restore + 1;
        c->replicating = 0;
        if (c->restore)
            c->ever_durable = true;
        for (unsigned i = 0; i < c->n; i++)
            c->nodes[i].held_in = c->nodes[i].done = c->nodes[i].replicated = false;
        struct coord_iter m = { .iteration = c->restore, .value = c->target };
        broadcast(c, COORD_LAUNCH, &m, sizeof(m));
        c->phase = RUN;
        c->durable_at = now_s();
        /* The restore point may have come from the ranks' own arenas only,
         * and the peers' copies of an older one are about to be the only
         * others left: the first round makes it durable (the chunks the
         * holders have already do not travel). */
        if (c->restore) {
            struct coord_iter r = { .iteration = c->restore, .value = COORD_AGAIN };
            c->replicating = c->restore;
            c->replicate_value = COORD_AGAIN;
            c->replicate_at = now_s();
            broadcast(c, COORD_REPLICATE, &r, sizeof(r));
        }
        return;
    case COORD_HELD:
        if (len != sizeof(nd->h) || c->phase != RUN)
            return;
        memcpy(&nd->h, msg, sizeof(nd->h));
        nd->held_in = true;
        held(c);
        return;
    case COORD_REPLICATED:
        if (len == sizeof(*st) && c->phase == RUN)
            replicated(c, j, st);
        return;
    case COORD_FAILED:
        if (len != sizeof(*st) || st->status <= -NSIG)
            return;
        if (st->status < 0 && !c->user_signal) {
            c->user_signal = -st->status;
            ckpt_log(CKPT_INFO, "node %u was told to stop (%s)", j, sig_name(c->user_signal));
        } else if (st->status > 0 && c->phase == RUN) {
            c->exit_code = st->status;
            char why[128];
            snprintf(why, sizeof(why), "rank %llu on node %u failed (exit %d)", (unsigned long long)st->value, j,
                     st->status);
            if (st->flags & COORD_TAKEOVER) {
                c->takeover_failed = true;
                snprintf(why, sizeof(why), "the standbys of node %u could not take over (said there): every node "
                         "recovers by the cold path", j);
            }
            if (st->flags & COORD_NO_ROOM)
                snprintf(c->no_room, sizeof(c->no_room), "rank %llu on node %u cannot have its arena on that "
                         "node (said there)", (unsigned long long)st->value, j);
            c->early = st->flags & COORD_EARLY ? st->status : -1;
            if (c->early > 0)
                snprintf(c->early_why, sizeof(c->early_why), "rank %llu on node %u exited with status %d",
                         (unsigned long long)st->value, j, st->status);
            stop_all(c, why);
            return;
        }
        stop_all(c, "a node was told to stop");
        return;
    case COORD_DONE:
        if (c->phase != RUN)
            return;
        nd->done = true;
        for (unsigned i = 0; i < c->n; i++)
            if (!c->nodes[i].done)
                return;
        finish(c, 0, NULL);
        return;
    default:
        ckpt_log(CKPT_WARN, "node %u sent a message of unknown type %u: dropped", j, type);
        drop(c, j, "it does not speak this protocol");
    }
}

/* Closes pending connection @i (or hands it over with @keep) and forgets it. */
static void unpend(struct coord *c, int i, bool keep)
{
    if (!keep)
        close(c->pending[i].fd);
    ckpt_wire_rx_clear(&c->pending[i].rx);
    c->pending[i] = c->pending[--c->npending];
    memset(&c->pending[c->npending], 0, sizeof(c->pending[0]));
}

/* What a new connection sent: its first message must be a JOIN. */
static void take_pending(struct coord *c, int i)
{
    struct pending *pd = &c->pending[i];
    uint16_t type;
    void *msg = NULL;
    size_t len;

    int rc = ckpt_wire_recv_some(pd->fd, &pd->rx, &type, &msg, &len);
    if (rc == 0)
        return;
    int fd = pd->fd;
    bool joined = rc > 0 && type == COORD_JOIN && join(c, fd, -1, msg, len) >= 0;
    unpend(c, i, joined);
    free(msg);
}

/* Takes every whole message node @j has sent; a part of one waits for the
 * next turn, so a node whose frame is slow to come holds up no other. */
static void take_from(struct coord *c, unsigned j, double now)
{
    struct node *nd = &c->nodes[j];
    int fd = nd->fd;
    for (;;) {
        uint16_t type;
        void *msg = NULL;
        size_t len;
        int rc = ckpt_wire_recv_some(fd, &nd->rx, &type, &msg, &len);
        if (rc < 0)
            drop(c, j, rc == -ECONNRESET ? "its agent closed the connection" : strerror(-rc));
        if (rc <= 0)
            return;
        nd->heard = now;
        take(c, j, type, msg, len);
        free(msg);
        if (nd->fd != fd)
            return; /* dropped, or joined again on another connection */
    }
}

static bool connected(void *ctx, unsigned j)
{
    const struct coord *c = ctx;
    return c->nodes[j].fd >= 0;
}

/*
 * One turn of the coordinator's loop: waits up to @timeout_ms for a
 * connection or a message, takes what came, and keeps the heartbeats, the
 * timeouts and the gathering going.  Returns false when told to stop.
 */
bool coord_turn(struct coord *c, int timeout_ms)
{
    struct pollfd *pfd = c->pfd;
    unsigned n = c->n;
    int k = 0;

    pfd[k++] = (struct pollfd){ .fd = c->stop[0], .events = POLLIN };
    pfd[k++] = (struct pollfd){ .fd = c->lfd, .events = POLLIN };
    for (int i = 0; i < c->npending; i++)
        pfd[k++] = (struct pollfd){ .fd = c->pending[i].fd, .events = POLLIN };
    for (unsigned j = 0; j < n; j++)
        pfd[k++] = (struct pollfd){ .fd = c->nodes[j].fd, .events = POLLIN };
    if (poll(pfd, k, timeout_ms) < 0 && errno != EINTR)
        return false;
    if (pfd[0].revents)
        return false;
    double now = now_s();
    /* From the last down: unpend() moves the last entry into the one it frees. */
    for (int i = c->npending - 1; i >= 0; i--) {
        if (pfd[2 + i].revents)
            take_pending(c, i);
        else if (i < c->npending && now - c->pending[i].since > c->timeout_s)
            unpend(c, i, false); /* no JOIN in time: not a node of ours */
    }
    if (pfd[1].revents) {
        int fd, rc = ckpt_wire_accept(c->lfd, &fd);
        if (rc == 0 && c->npending == MAX_PENDING) {
            int oldest = 0; /* room for the newcomer: the oldest has had the longest to join */
            for (int i = 1; i < c->npending; i++)
                if (c->pending[i].since < c->pending[oldest].since)
                    oldest = i;
            unpend(c, oldest, false);
        }
        if (rc == 0)
            c->pending[c->npending++] = (struct pending){ .fd = fd, .since = now };
        else if (rc == -EACCES)
            ckpt_log(CKPT_WARN, "refused a connection that did not authenticate with this job's key "
                     "(CKPT_JOB_KEY)");
    }
    for (unsigned j = 0; j < n; j++) {
        struct node *nd = &c->nodes[j];
        struct pollfd *p = &pfd[k - n + j];
        if (nd->fd >= 0 && p->fd == nd->fd && p->revents)
            take_from(c, j, now);
        /* Through etcd a node lives while its lease does: its bridge
         * connection closes when the lease ends (bridge.c). */
        if (nd->fd >= 0 && !c->opt->etcd && now - nd->heard > c->timeout_s)
            drop(c, j, "not heard from in time");
        if (nd->fd >= 0 && now - nd->sent >= HEARTBEAT_S)
            send_to(c, j, COORD_HEARTBEAT, NULL, 0, NULL, 0);
        if (nd->fd < 0 && (c->phase == RUN || c->phase == FETCH)) {
            char why[64];
            snprintf(why, sizeof(why), "node %u was lost", j);
            if (fence_wanted() && !nd->unfenced) {
                nd->unfenced = true;
                nd->fence_due = nd->fence_since = now;
            }
            if (!c->exit_code)
                c->exit_code = 1;
            stop_all(c, why);
        }
    }
    fences(c, now);
    remind(c, now);
    if (c->phase == GATHER)
        gathered(c);
    char why[256];
    if (spawn_turn(c->spawn, c->phase == OVER, connected, c, why, sizeof(why)) < 0)
        finish(c, 1, why);
    return true;
}

static void *run(void *arg)
{
    struct coord *c = arg;
    while (coord_turn(c, 250))
        ;
    /* The nodes started from here end once they have heard the end: the
     * last persist of each may take a while. */
    spawn_close(c->spawn, c->timeout_s);
    c->spawn = NULL;
    return NULL;
}

/*
 * Listens on CKPT_COORD; nothing runs until coord_turn() is called.  The
 * caller calls coord_stop() whatever this returns.
 */
int coord_open(struct coord **out, const struct options *opt, const char *master_addr, const char *master_port)
{
    char why[256];
    struct coord *c = calloc(1, sizeof(*c));

    *out = c;
    if (!c)
        return -ENOMEM;
    c->opt = opt;
    c->lfd = c->stop[0] = c->stop[1] = -1;
    c->early = c->early_before = -1;
    c->n = (unsigned)opt->nnodes;
    c->nproc = (unsigned)opt->nproc;
    c->replicas = (unsigned)ckpt_cfg_int(CFG_REPLICAS);
    c->timeout_s = ckpt_cfg_seconds(CFG_NODE_TIMEOUT);
    c->nodes = calloc(c->n, sizeof(*c->nodes));
    c->pfd = calloc(2 + MAX_PENDING + c->n, sizeof(*c->pfd));
    if (!c->nodes || !c->pfd)
        return -ENOMEM;
    for (unsigned j = 0; j < c->n; j++)
        c->nodes[j].fd = -1;
    snprintf(c->master_addr, sizeof(c->master_addr), "%s", master_addr);
    snprintf(c->master_port, sizeof(c->master_port), "%s", master_port);
    c->master_from_node0 = !*master_addr;
    if ((!*master_port && job_master_port(c->master_port) < 0) || job_spare_port(c->standby_port) < 0)
        return -EADDRINUSE;
    int rc = ckpt_wire_listen(opt->coord, &c->lfd, c->bound, sizeof(c->bound), why, sizeof(why));
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "cannot listen for the other nodes: %s (CKPT_COORD)", why);
        return rc;
    }
    if (pipe2(c->stop, O_CLOEXEC) < 0)
        return -errno;
    if ((rc = spawn_open(&c->spawn, opt)) < 0) {
        ckpt_log(CKPT_ERROR, "cannot prepare CKPT_NODE_LAUNCHER: %s", strerror(-rc));
        return rc;
    }
    ckpt_log(CKPT_INFO, "coordinating %u nodes x %d rank%s on %s", c->n, opt->nproc, opt->nproc == 1 ? "" : "s",
             c->bound);
    c->gather_since = now_s();
    return 0;
}

/* The address the coordinator listens on, as "HOST:PORT". */
const char *coord_address(const struct coord *c)
{
    return c->bound;
}

int coord_run(struct coord *c)
{
    int rc = pthread_create(&c->thread, NULL, run, c);
    if (rc != 0)
        return -rc;
    c->started = true;
    return 0;
}

/* Opens the coordinator and starts its thread.  The caller calls coord_stop() whatever this returns. */
int coord_start(struct coord **out, const struct options *opt, const char *master_addr, const char *master_port)
{
    int rc = coord_open(out, opt, master_addr, master_port);
    return rc < 0 ? rc : coord_run(*out);
}

void coord_lost(struct coord *c, unsigned node, const char *host)
{
    if (node >= c->n || !fence_wanted())
        return;
    struct node *nd = &c->nodes[node];
    snprintf(nd->addr.hostport, sizeof(nd->addr.hostport), strchr(host, ':') ? "[%s]:0" : "%s:0", host);
    nd->unfenced = true;
    nd->fence_due = nd->fence_since = now_s();
    ckpt_log(CKPT_INFO, "node %u led the job until its lease ended: it is fenced before the job goes on", node);
}

void coord_stop(struct coord *c)
{
    if (!c)
        return;
    if (c->stop[1] >= 0) {
        if (c->started && write(c->stop[1], "x", 1) == 1)
            pthread_join(c->thread, NULL);
        close(c->stop[1]);
        close(c->stop[0]);
    }
    spawn_close(c->spawn, 0);
    if (c->lfd >= 0)
        close(c->lfd);
    while (c->npending)
        unpend(c, 0, false);
    for (unsigned j = 0; c->nodes && j < c->n; j++) {
        if (c->nodes[j].fd >= 0)
            close(c->nodes[j].fd);
        fence_cancel(c->nodes[j].fence);
        free(c->nodes[j].held);
    }
    free(c->nodes);
    free(c->pfd);
    free(c);
}
