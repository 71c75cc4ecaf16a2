/*
 * The coordinator of a job on several nodes (coord.h), a thread of the
 * leading agent's ckpt-resume (bridge.c: whichever agent etcd elected), on
 * loopback, each node's messages reaching it through etcd and the bridge
 * on a connection of their own: it waits until every node has joined, decides where the
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
#include "coord_int.h"

/* What a member's negative status says: it came off the wire, so it may be any value. */
const char *coord_status_text(int32_t status)
{
    return status > INT32_MIN ? strerror(-status) : "an unknown error";
}

static void drop(struct coord *c, unsigned j, const char *why)
{
    struct node *nd = &c->nodes[j];
    if (nd->conn.fd < 0)
        return;
    ckpt_conn_close(&nd->conn);
    nd->joined = false;
    /* Once the end is sent, the nodes leave: none of them is lost. */
    if (c->phase == OVER)
        ckpt_log(CKPT_DEBUG, "node %u left after the end (%s)", j, why);
    else
        ckpt_log(CKPT_WARN, "node %u is lost (%s)", j, why);
}

void coord_tell(struct coord *c, unsigned j, uint16_t type, const void *a, size_t alen, const void *b, size_t blen)
{
    struct node *nd = &c->nodes[j];
    if (nd->conn.fd < 0)
        return;
    int rc = ckpt_wire_send(nd->conn.fd, type, a, alen, b, blen);
    if (rc < 0)
        drop(c, j, strerror(-rc));
}

void coord_tell_all(struct coord *c, uint16_t type, const void *a, size_t alen)
{
    for (unsigned j = 0; j < c->n; j++)
        coord_tell(c, j, type, a, alen, NULL, 0);
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
        coord_tell(c, j, COORD_FINISH, &st, sizeof(st), why, why ? strlen(why) : 0);
    c->phase = OVER;
    c->end_code = code;
    snprintf(c->end_why, sizeof(c->end_why), "%s", why ? why : "");
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
        coord_tell(c, j, COORD_STOP, why, strlen(why), NULL, 0);
        c->nodes[j].joined = false;
    }
    c->phase = GATHER;
    c->gather_since = ckpt_now_s();
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
 * whose standbys did not follow these ranks) unless its node's standbys
 * followed copies of the logs and a peer holds its copy (a spare's: the
 * copy travels to it, and its standby checks that the log is the one it
 * replayed), and the last
 * takeover did not fail.  When some node has standbys and they cannot, says why.
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
        if ((src[r].tier != CKPT_TIER_ARENA || src[r].node != r / c->nproc) &&
            !(src[r].tier == CKPT_TIER_PEER && c->nodes[r / c->nproc].peer_logs))
            snprintf(why, sizeof(why), "rank %u restores from a copy outside its node's arena", r);
    if (*why)
        ckpt_log(CKPT_INFO, "no takeover by the standbys (%s): every node recovers by the cold path", why);
    return !*why;
}

/* Every decision any node acted under, the newest COORD_DECIDED_MAX, oldest first, in d; how many. */
static unsigned decisions(const struct coord *c, struct ckpt_decision *d)
{
    unsigned n = 0;
    for (unsigned j = 0; j < c->n; j++)
        for (uint32_t i = 0; i < c->nodes[j].ndecided; i++)
            ckpt_decision_add(d, &n, COORD_DECIDED_MAX, c->nodes[j].decided[i]);
    return n;
}

/*
 * Leaves out of @all (k copies, their nodes set) those that belong to a
 * run a later decision replaced (recovery.h): a node that was away while
 * the job went back brings them; it retires them when the plan reaches it
 * (member.c).  Each node's copies belong to its own decisions.  Returns
 * how many are left.
 */
static size_t leave_out_replaced(const struct coord *c, struct ckpt_held *all, size_t k, const struct ckpt_decision *d,
                                 unsigned nd)
{
    size_t kept = 0;
    for (unsigned j = 0, said = 0; j < c->n; j++, said = 0)
        for (size_t i = 0; i < k; i++) {
            if (all[i].node != j)
                continue;
            /* The plan the copy was committed under; a node's that predate
             * epochs in snapshots, the decision its ledger puts it in. */
            const struct node *node = &c->nodes[j];
            uint64_t own = all[i].epoch ? all[i].epoch
                                        : ckpt_decision_of(node->decided, node->ndecided, all[i].iteration);
            struct ckpt_decision by;
            if (!ckpt_decision_replaced(d, nd, own, all[i].iteration, &by)) {
                all[kept++] = all[i];
                continue;
            }
            if (!said++)
                ckpt_log(CKPT_INFO, "node %u holds copies of a run that the restore of iteration %llu (epoch %llu) "
                         "replaced while it was away, from rank %u's of iteration %llu in the %s tier on: "
                         "not used", j, (unsigned long long)by.restore, (unsigned long long)by.epoch,
                         all[i].rank, (unsigned long long)all[i].iteration, ckpt_tier_name(all[i].tier));
        }
    return kept;
}

/*
 * The plan's epoch, above every plan a node has had (the replicas and
 * replay logs a node sends carry it; a stale epoch's are refused): the
 * revision of the decision recorded in etcd, by a transaction that holds
 * only while this agent leads.  A leader that lost its lease decides
 * nothing.  0, or -1 when the plan waits (said once).
 */
static int decide(struct coord *c, uint64_t restore)
{
    char why[512];
    uint64_t above = c->epoch, rev;
    for (unsigned j = 0; j < c->n; j++)
        above = c->nodes[j].epoch > above ? c->nodes[j].epoch : above;
    if (!c->decide) {
        c->epoch = above + 1;
        return 0;
    }
    int rc = c->decide(c->term, restore, &rev, why, sizeof(why));
    if (rc <= 0) {
        if (!c->decide_said)
            ckpt_log(CKPT_WARN, "the %s waits to be decided: %s", restore ? "restore" : "launch",
                     rc == 0 ? "this agent leads no more" : why);
        c->decide_said = true;
        return -1;
    }
    c->decide_said = false;
    if (rev <= above) { /* etcd's revisions went back: its data was lost */
        ckpt_log(CKPT_WARN, "etcd decided at revision %llu, below epoch %llu a node acted under (was etcd's data "
                 "lost?): the plan takes epoch %llu", (unsigned long long)rev, (unsigned long long)above,
                 (unsigned long long)above + 1);
        rev = above + 1;
    }
    c->epoch = rev;
    ckpt_log(CKPT_INFO, "%s decided at etcd revision %llu", restore ? "the restore" : "the launch",
             (unsigned long long)rev);
    return 0;
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
    struct ckpt_decision decided[COORD_DECIDED_MAX];
    unsigned ndecided = decisions(c, decided);
    k = leave_out_replaced(c, all, k, decided, ndecided);
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
    if (decide(c, it) < 0) {
        free(all), free(src), free(sends);
        c->phase = GATHER; /* decided on a later turn, or by the next leader */
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
    /* The coordinator may run on any node: rank 0's rendezvous is at node
     * 0's address, the one its agent takes replicas at. */
    const char *port;
    if (ckpt_hostport_split(c->nodes[0].addr.hostport, c->master_addr, sizeof(c->master_addr), &port) < 0)
        snprintf(c->master_addr, sizeof(c->master_addr), "%s", c->nodes[0].addr.hostport);
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
                                .by_standby = by_standby, .restarts = (uint32_t)c->restarts,
                                .epoch = c->epoch, .ndecided = ndecided };
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
        /* One payload: the plan, the addresses, the sends, the decisions. */
        size_t at = c->n * sizeof(*addrs) + ns * sizeof(*sends), len = at + ndecided * sizeof(decided[0]);
        char *tail = malloc(len ? len : 1);
        if (tail) {
            memcpy(tail, addrs, c->n * sizeof(*addrs));
            memcpy(tail + c->n * sizeof(*addrs), sends, ns * sizeof(*sends));
            memcpy(tail + at, decided, ndecided * sizeof(decided[0]));
            coord_tell(c, j, COORD_PLAN, &p, sizeof(p), tail, len);
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
    /* Nodes that ran the job under a coordinator before this one (the
     * leader was lost): its first launch is a restart, and the count goes
     * on from theirs, so that no change of leader resets the job's bound.
     * With none left, there is no need to wait for the others. */
    if (!c->launches) {
        int before = -1;
        for (unsigned j = 0; j < c->n; j++)
            if (c->nodes[j].joined && c->nodes[j].launched && (int)c->nodes[j].plan_restarts > before)
                before = (int)c->nodes[j].plan_restarts;
        if (before >= c->opt->max_restarts) {
            char why[160];
            c->restarts = before;
            snprintf(why, sizeof(why), "giving up after %d restart%s (counted by the job's coordinators before this "
                     "one)", before, before == 1 ? "" : "s");
            finish(c, 1, why);
            return;
        }
        if (before + 1 > c->restarts) {
            c->restarts = before + 1;
            ckpt_log(CKPT_INFO, "restart %d of %d: the job ran under another coordinator before this one",
                     c->restarts, c->opt->max_restarts);
        }
    }
    for (unsigned j = 0; j < c->n; j++) {
        if (c->nodes[j].joined)
            continue;
        if (ckpt_now_s() - c->gather_since > 10 * c->timeout_s) {
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
            c->resume_at = ckpt_now_s() + backoff_s(c->opt, c->restarts);
            ckpt_log(CKPT_INFO, "restart %d of %d in %g s", c->restarts, c->opt->max_restarts,
                     backoff_s(c->opt, c->restarts));
        }
    }
    if (ckpt_now_s() < c->resume_at)
        return;
    plan(c);
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

    if (len < sizeof(*jn) || jn->ndecided > COORD_DECIDED_MAX ||
        len != sizeof(*jn) + (size_t)jn->nheld * sizeof(struct ckpt_held) +
                   jn->ndecided * sizeof(struct ckpt_decision))
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
    /* Only the agent holding the node's rank reaches here (bridge.c): a
     * JOIN on a new connection is that node's new agent. */
    else if (memchr(jn->replica.hostport, '\0', sizeof(jn->replica.hostport)) == NULL)
        snprintf(why, sizeof(why), "a malformed replica address");
    if (*why) {
        ckpt_log(CKPT_WARN, "refused a node: %s", why);
        struct coord_status st = { .status = 2 };
        ckpt_wire_send(fd, COORD_FINISH, &st, sizeof(st), why, strlen(why));
        return -1;
    }
    /* The job ended before this node (re)joined: it hears the end. */
    if (c->phase == OVER) {
        struct coord_status st = { .status = c->end_code, .value = (uint64_t)c->restarts };
        ckpt_wire_send(fd, COORD_FINISH, &st, sizeof(st), c->end_why, strlen(c->end_why));
        return -1;
    }
    struct node *nd = &c->nodes[jn->node];
    struct ckpt_held *h = malloc(jn->nheld ? jn->nheld * sizeof(*h) : 1);
    if (!h)
        return -1;
    /* Its old connection has gone quiet (the node's agent gave up on it
     * first, across a partition that kept the close from coming here):
     * the new one is the node. */
    if (nd->conn.fd >= 0 && nd->conn.fd != fd)
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
    memcpy(nd->decided, (const struct ckpt_held *)(jn + 1) + jn->nheld, jn->ndecided * sizeof(nd->decided[0]));
    nd->ndecided = jn->ndecided;
    nd->conn.fd = fd;
    nd->addr = jn->replica;
    nd->refused = jn->refused;
    nd->standby = jn->standby;
    nd->peer_logs = jn->flags & COORD_JOIN_PEER_LOGS;
    nd->launched = jn->launched == 1;
    nd->plan_restarts = jn->restarts;
    nd->epoch = jn->epoch;
    nd->joined = true;
    nd->done = false;
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
        if (join(c, nd->conn.fd, (int)j, msg, len) < 0)
            drop(c, j, "its JOIN was refused");
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
                         "%llu are not used", i, coord_status_text(c->nodes[i].fetch_status),
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
        coord_tell_all(c, COORD_LAUNCH, &m, sizeof(m));
        c->phase = RUN;
        c->durable_at = ckpt_now_s();
        /* The restore point may have come from the ranks' own arenas only,
         * and the peers' copies of an older one are about to be the only
         * others left: the first round makes it durable (the chunks the
         * holders have already do not travel). */
        if (c->restore) {
            struct coord_iter r = { .iteration = c->restore, .value = COORD_AGAIN };
            c->replicating = c->restore;
            c->replicate_value = COORD_AGAIN;
            c->replicate_at = ckpt_now_s();
            coord_tell_all(c, COORD_REPLICATE, &r, sizeof(r));
        }
        return;
    case COORD_HELD:
        if (len != sizeof(nd->h) || c->phase != RUN)
            return;
        memcpy(&nd->h, msg, sizeof(nd->h));
        nd->held_in = true;
        coord_held(c);
        return;
    case COORD_REPLICATED:
        if (len == sizeof(*st) && c->phase == RUN)
            coord_replicated(c, j, st);
        return;
    case COORD_FAILED:
        if (len != sizeof(*st) || st->status <= -NSIG)
            return;
        if (st->flags & COORD_NODE_GONE) {
            char why[160];
            snprintf(why, sizeof(why), "node %llu will not join: node %u gave up starting it (CKPT_NODE_LAUNCHER; "
                     "said there); the job ends", (unsigned long long)st->value, j);
            finish(c, c->exit_code ? c->exit_code : st->status, why);
            return;
        }
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
    case COORD_ID: /* a takeover's new unique id: every node's standbys look for it */
        if (len == sizeof(struct coord_id) && c->phase == RUN)
            coord_tell_all(c, COORD_ID, msg, len);
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
        ckpt_conn_close(&c->pending[i].conn);
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

    int rc = ckpt_conn_recv(&pd->conn, &type, &msg, &len);
    if (rc == 0)
        return;
    int fd = pd->conn.fd;
    bool joined = rc > 0 && type == COORD_JOIN && join(c, fd, -1, msg, len) >= 0;
    unpend(c, i, joined);
    free(msg);
}

struct from {
    struct coord *c;
    unsigned j;
    int fd;
};

static bool take_one(void *arg, uint16_t type, void *msg, size_t len)
{
    struct from *f = arg;
    take(f->c, f->j, type, msg, len);
    free(msg);
    return f->c->nodes[f->j].conn.fd == f->fd; /* not dropped, nor joined again on another connection */
}

/* Takes every whole message node @j has sent; a part of one waits for the
 * next turn, so a node whose frame is slow to come holds up no other. */
static void take_from(struct coord *c, unsigned j)
{
    struct from f = { c, j, c->nodes[j].conn.fd };
    int rc = ckpt_conn_take(&c->nodes[j].conn, 0, take_one, &f);
    if (rc < 0)
        drop(c, j, rc == -ECONNRESET ? "its agent left the job, or its etcd lease ended" : strerror(-rc));
}

/*
 * One turn of the coordinator's loop: waits up to @timeout_ms for a
 * connection or a message, takes what came, and keeps the timeouts and the
 * gathering going (a node is lost when its etcd lease ends: bridge.c
 * closes its connection).  Returns false when told to stop.
 */
bool coord_turn(struct coord *c, int timeout_ms)
{
    struct pollfd *pfd = c->pfd;
    unsigned n = c->n;
    int k = 0;

    pfd[k++] = (struct pollfd){ .fd = c->stop[0], .events = POLLIN };
    pfd[k++] = (struct pollfd){ .fd = c->lfd, .events = POLLIN };
    for (int i = 0; i < c->npending; i++)
        pfd[k++] = (struct pollfd){ .fd = c->pending[i].conn.fd, .events = POLLIN };
    for (unsigned j = 0; j < n; j++)
        pfd[k++] = (struct pollfd){ .fd = c->nodes[j].conn.fd, .events = POLLIN };
    if (poll(pfd, k, timeout_ms) < 0 && errno != EINTR)
        return false;
    if (pfd[0].revents)
        return false;
    double now = ckpt_now_s();
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
            c->pending[c->npending++] = (struct pending){ .conn = { .fd = fd }, .since = now };
        else if (rc == -EACCES)
            ckpt_log(CKPT_WARN, "refused a connection that did not authenticate with this job's key "
                     "(CKPT_JOB_KEY)");
    }
    for (unsigned j = 0; j < n; j++) {
        struct node *nd = &c->nodes[j];
        struct pollfd *p = &pfd[k - n + j];
        if (nd->conn.fd >= 0 && p->fd == nd->conn.fd && p->revents)
            take_from(c, j);
        /* A node lives while its etcd lease does: its connection here
         * closes when the lease ends (bridge.c). */
        if (nd->conn.fd < 0 && (c->phase == RUN || c->phase == FETCH)) {
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
    coord_remind(c, now);
    if (c->phase == GATHER)
        gathered(c);
    return true;
}

static void *run(void *arg)
{
    struct coord *c = arg;
    while (coord_turn(c, 250))
        ;
    return NULL;
}

/*
 * Listens at opt->coord (the bridge's loopback address); nothing runs
 * until coord_turn() or coord_run().  Rank 0's rendezvous is at node 0's
 * address, its port drawn here.  The caller calls coord_stop() whatever
 * this returns.
 */
int coord_open(struct coord **out, const struct options *opt)
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
        c->nodes[j].conn = CKPT_CONN_CLOSED;
    if (job_master_port(c->master_port) < 0 || job_spare_port(c->standby_port) < 0)
        return -EADDRINUSE;
    int rc = ckpt_wire_listen(opt->coord, &c->lfd, c->bound, sizeof(c->bound), why, sizeof(why));
    if (rc < 0) {
        ckpt_log(CKPT_ERROR, "cannot listen for the other nodes: %s (CKPT_COORD)", why);
        return rc;
    }
    if (pipe2(c->stop, O_CLOEXEC) < 0)
        return -errno;
    ckpt_log(CKPT_INFO, "coordinating %u nodes x %d rank%s on %s", c->n, opt->nproc, opt->nproc == 1 ? "" : "s",
             c->bound);
    c->gather_since = ckpt_now_s();
    return 0;
}

void coord_decide_by(struct coord *c, coord_decide_fn *decide, int64_t term)
{
    c->decide = decide;
    c->term = term;
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

void coord_lost(struct coord *c, unsigned node, const char *host)
{
    if (node >= c->n || !fence_wanted())
        return;
    struct node *nd = &c->nodes[node];
    snprintf(nd->addr.hostport, sizeof(nd->addr.hostport), strchr(host, ':') ? "[%s]:0" : "%s:0", host);
    nd->unfenced = true;
    nd->fence_due = nd->fence_since = ckpt_now_s();
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
    if (c->lfd >= 0)
        close(c->lfd);
    while (c->npending)
        unpend(c, 0, false);
    for (unsigned j = 0; c->nodes && j < c->n; j++) {
        ckpt_conn_close(&c->nodes[j].conn);
        fence_cancel(c->nodes[j].fence);
        free(c->nodes[j].held);
    }
    free(c->nodes);
    free(c->pfd);
    free(c);
}
