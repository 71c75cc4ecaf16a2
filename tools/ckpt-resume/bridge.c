/*
 * The agents of a job on several nodes meeting through etcd (CKPT_COORD=
 * etcd://HOST:PORT,...), so that no node is special.  etcd carries the
 * coordination protocol (coord.h), and decides who runs the coordinator:
 *
 *   <job>/node/<I>             the agent that is node I, under its lease: a
 *                              node rank is claimed by a transaction that
 *                              creates the key, so a replacement machine, of
 *                              any name, takes the rank of a node whose
 *                              lease has expired;
 *   <job>/leader               the node whose agent runs the coordinator,
 *                              under its lease: won by the transaction that
 *                              creates it, campaigned for again by every
 *                              agent when it goes; its create revision is
 *                              the epoch;
 *   <job>/spare/<lease>, <job>/plan
 *                              the spares' keys (bridge_spare.c);
 *   <job>/decision             the coordinator's last decision, its
 *                              revision the plan's epoch (bridge_decide.c);
 *   <job>/e<epoch>/up/<I>/<lease>/<n>
 *                              the n-th message to the coordinator of the
 *                              agent that is node I under that lease,
 *   <job>/e<epoch>/down/<I>/<lease>/<n>
 *                              the coordinator's n-th to it (a type and a
 *                              payload, as on the wire, then with
 *                              CKPT_JOB_KEY its tag, replica/auth.h); each
 *                              taken once, in order, and deleted; each put
 *                              by a transaction that holds only while the
 *                              leader key is of that epoch (down) or the
 *                              node key is the one this agent claimed
 *                              (up).  A new agent for node I (a
 *                              replacement, or one back from a partition
 *                              with a new lease) has boxes of its own:
 *                              nothing of its predecessor's reaches it.
 *
 * The agent's member (member.c) connects to this bridge on loopback; on
 * the leader, the bridge connects to the coordinator
 * for each node whose messages arrive, and carries the answers back.  A
 * new epoch closes the member's connection: it stops its ranks and joins
 * the new coordinator, as it does when it loses one.  The lease
 * (CKPT_NODE_TIMEOUT) is renewed on a thread of its own (lease.c); an
 * agent that could not renew it for the TTL less a margin takes itself as
 * cut off and stops its ranks (self-fencing) before the others, who wait
 * the whole TTL, restart without it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "bridge_int.h"
#include "config.h"
#include "coord.h"
#include "etcd.h"
#include "lease.h"
#include "log.h"
#include "resume.h"
#include "wire.h"

/* etcd is read every TURN_MIN_MS while messages move and less often (up
 * to TURN_MAX_MS) while none do.  With the watch on the job's keys
 * running, it is read at once when the watch says something changed, and
 * otherwise from WATCHED_MIN_MS while messages move up to WATCHED_MAX_MS
 * (within a sixth of the lease, so that renewals keep their time): N
 * agents polling every 10 ms are 100 N requests a second, which at 32
 * nodes kept a small etcd from renewing their leases.  What the member or
 * the coordinator sends goes out at once. */
#define TURN_MIN_MS 10
#define TURN_MAX_MS 80
#define WATCHED_MIN_MS 40
#define WATCHED_MAX_MS 500
#define MAX_NODES 65536

struct bridge B = { .lfd = -1, .stop = { -1, -1 }, .leader_node = -1, .lost_leader = -1,
                    .spares_lock = PTHREAD_MUTEX_INITIALIZER };


/* ------------------------------------------------------------- mailboxes */

static void box(char *out, size_t n, int64_t epoch, const char *dir, unsigned node, int64_t lease)
{
    snprintf(out, n, "%se%" PRId64 "/%s/%u/%" PRIx64 "/", B.prefix, epoch, dir, node, (uint64_t)lease);
}

/* A message etcd did not put: its guard no longer holds.  Said once per
 * guard; the protocol does not wait for it (a leader that lost its lease
 * is replaced, and a node whose claim is gone stops its ranks, lease_turn()). */
static void refused(const struct outgoing *o)
{
    static char said[300];
    if (strcmp(said, o->guard) == 0)
        return;
    snprintf(said, sizeof(said), "%s", o->guard);
    size_t n = strlen(o->guard);
    if (n < 7 || strcmp(o->guard + n - 7, "/leader") != 0)
        ckpt_log(CKPT_WARN, "etcd refused this node's messages: its claim on node rank %u (revision %" PRId64 ") "
                 "is gone with its lease; nothing it says reaches the job", B.node, o->rev);
    else
        ckpt_log(CKPT_WARN, "etcd refused this agent's messages as the leader of epoch %" PRId64 ": another leads "
                 "now, and no decision of a leader whose lease ended is written", o->rev);
}

/* Puts what etcd did not take yet, in order, until it refuses one. */
static void flush(void)
{
    char why[512];
    size_t done = 0;
    static bool said;
    for (; done < B.nout && !B.paused; done++) {
        struct outgoing *o = &B.out[done];
        struct etcd_cmp held = { o->guard, ETCD_CREATE, o->rev, NULL };
        struct etcd_op put = { o->key, o->value, o->len, 0 };
        int rc = etcd_txn(B.e, &held, 1, &put, 1, NULL, why, sizeof(why));
        if (rc < 0) {
            if (!said)
                ckpt_log(CKPT_WARN, "messages for the coordination wait for etcd: %s", why);
            said = true;
            break;
        }
        if (rc == 0)
            refused(o);
        free(o->value);
        B.moved++;
    }
    if (done == B.nout && said)
        ckpt_log(CKPT_DEBUG, "the messages that waited for etcd are in it (%zu)", done);
    if (done == B.nout)
        said = false;
    if (done) /* B.out is NULL before the first post */
        memmove(B.out, B.out + done, (B.nout - done) * sizeof(*B.out));
    B.nout -= done;
}

/* A rank's failure that this agent could not put into etcd yet: said
 * once, as the job restarts only once its leader has it. */
static void failure_waits(void)
{
    bool waits = false;
    for (size_t i = 0; i < B.nout && !waits; i++) {
        uint16_t type;
        memcpy(&type, B.out[i].value, sizeof(type));
        waits = type == COORD_FAILED && strstr(B.out[i].key, "/up/");
    }
    if (waits && !B.failure_held)
        ckpt_log(CKPT_WARN, "a rank of this node failed while etcd %s: the job restarts once etcd is back (the "
                 "failure is told to the job's leader then)", B.paused ? "has no quorum" : "does not answer");
    B.failure_held = waits;
}

/* Drops what waits for boxes under @prefix: an epoch or an agent gone. */
static void unpost(const char *prefix)
{
    size_t k = 0, n = strlen(prefix);
    for (size_t i = 0; i < B.nout; i++) {
        if (strncmp(B.out[i].key, prefix, n) == 0)
            free(B.out[i].value);
        else
            B.out[k++] = B.out[i];
    }
    if (k < B.nout)
        ckpt_log(CKPT_DEBUG, "%zu messages for %s dropped: their reader is gone", B.nout - k, prefix);
    B.nout = k;
}

static void unpost_epoch(int64_t epoch)
{
    char prefix[300];
    snprintf(prefix, sizeof(prefix), "%se%" PRId64 "/", B.prefix, epoch);
    unpost(prefix);
}

/* Puts one message into dir's box of node, after whatever waits: a
 * message lost would leave the protocol waiting for it, and one taken out
 * of order would be skipped (take()). */
static int post(int64_t epoch, const char *dir, unsigned node, int64_t lease, uint64_t seq, uint16_t type,
                const void *msg, size_t len)
{
    if (B.nout == B.capout) {
        size_t cap = B.capout ? 2 * B.capout : 64;
        struct outgoing *o = realloc(B.out, cap * sizeof(*o));
        if (!o)
            return -ENOMEM;
        B.out = o;
        B.capout = cap;
    }
    struct outgoing *o = &B.out[B.nout];
    if (!(o->value = malloc(len + 2 + CKPT_AUTH_TAG)))
        return -ENOMEM;
    box(o->key, sizeof(o->key), epoch, dir, node, lease);
    if (strcmp(dir, "down") == 0) {
        snprintf(o->guard, sizeof(o->guard), "%sleader", B.prefix);
        o->rev = epoch;
    } else {
        snprintf(o->guard, sizeof(o->guard), "%snode/%u", B.prefix, B.node);
        o->rev = B.claimed;
    }
    size_t k = strlen(o->key);
    snprintf(o->key + k, sizeof(o->key) - k, "%016" PRIx64, seq);
    memcpy(o->value, &type, 2);
    if (len)
        memcpy(o->value + 2, msg, len);
    o->len = len + 2;
    if (ckpt_auth_enabled()) { /* the job key's tag, over the message's key and content */
        ckpt_auth_mac(o->key, o->value, o->len, (uint8_t *)o->value + o->len);
        o->len += CKPT_AUTH_TAG;
    }
    B.nout++;
    flush();
    failure_waits();
    return 0;
}

static void unauthentic(const char *dir, unsigned node, int64_t lease);

/* Takes every message in dir's box of node, in order: deliver(arg, type,
 * msg, len) each, then deletes them.  With a job key, a message without
 * its tag is not delivered (unauthentic()).  Returns how many, or -errno. */
static int take(int64_t epoch, const char *dir, unsigned node, int64_t lease, uint64_t *next,
                void (*deliver)(unsigned node, uint16_t type, const void *msg, size_t len))
{
    char key[400], why[512];
    struct etcd_kv *kv;
    size_t n;
    box(key, sizeof(key), epoch, dir, node, lease);
    int rc = etcd_get(B.e, key, true, &kv, &n, NULL, why, sizeof(why));
    if (rc < 0)
        return rc;
    struct etcd_op *del = calloc(n ? n : 1, sizeof(*del));
    size_t nd = 0;
    for (size_t i = 0; del && i < n; i++) {
        uint64_t seq = strtoull(kv[i].key + strlen(key), NULL, 16);
        del[nd++] = (struct etcd_op){ .key = kv[i].key };
        if (seq < *next || kv[i].len < 2)
            continue; /* taken before, or not ours */
        *next = seq + 1;
        size_t len = kv[i].len;
        if (ckpt_auth_enabled()) {
            len -= CKPT_AUTH_TAG;
            if (kv[i].len < 2 + CKPT_AUTH_TAG ||
                ckpt_auth_mac_check(kv[i].key, kv[i].value, len, (const uint8_t *)kv[i].value + len) < 0) {
                unauthentic(dir, node, lease);
                continue;
            }
        }
        uint16_t type;
        memcpy(&type, kv[i].value, 2);
        B.moved++;
        deliver(node, type, kv[i].value + 2, len - 2);
    }
    if (nd && etcd_txn(B.e, NULL, 0, del, nd, NULL, why, sizeof(why)) < 0)
        ckpt_log(CKPT_DEBUG, "taken messages not deleted: %s", why);
    free(del);
    etcd_kvs_free(kv, n);
    return (int)n;
}

/* ------------------------------------------------------------ the member */

static void to_member(unsigned node, uint16_t type, const void *msg, size_t len)
{
    (void)node;
    if (type == COORD_FINISH)
        B.finished = true;
    if (B.member.conn.fd < 0)
        return;
    if (type == COORD_CLOSED || ckpt_wire_send(B.member.conn.fd, type, msg, len, NULL, 0) < 0)
        ckpt_conn_close(&B.member.conn);
}

/* The member's connection gone: the coordinator forgets it too. */
static void member_gone(void)
{
    if (B.member.conn.fd >= 0 && B.epoch)
        post(B.epoch, "up", B.node, B.lease, B.member.seq++, COORD_CLOSED, NULL, 0);
    ckpt_conn_close(&B.member.conn);
}

static bool from_member(void *arg, uint16_t type, void *msg, size_t len)
{
    (void)arg;
    post(B.epoch, "up", B.node, B.lease, B.member.seq++, type, msg, len);
    free(msg);
    return true;
}

static void member_turn(void)
{
    if (B.member.conn.fd < 0 && B.epoch && !B.fenced) {
        struct pollfd p = { .fd = B.lfd, .events = POLLIN };
        if (poll(&p, 1, 0) == 1 && ckpt_wire_accept(B.lfd, &B.member.conn.fd) < 0)
            B.member.conn.fd = -1;
    }
    if (ckpt_conn_take(&B.member.conn, 64, from_member, NULL) < 0)
        member_gone();
    if (B.epoch && !B.paused)
        take(B.epoch, "down", B.node, B.lease, &B.member.taken, to_member);
}

/* ------------------------------------------------------------ the leader */

/* The coordinator's connection for node @j closed: it forgets what that
 * agent said (its JOIN, what it holds). */
static void close_node(unsigned j)
{
    ckpt_conn_close(&B.nodes[j].conn);
    __atomic_store_n(&B.heard[j], 0, __ATOMIC_RELEASE);
}

static void to_coord(unsigned node, uint16_t type, const void *msg, size_t len)
{
    struct link *l = &B.nodes[node];
    char why[256];
    if (type == COORD_CLOSED) {
        close_node(node);
        return;
    }
    if (l->conn.fd < 0) {
        if (ckpt_wire_connect(coord_address(B.coord), &l->conn.fd, why, sizeof(why)) < 0) {
            l->conn.fd = -1;
            ckpt_log(CKPT_WARN, "cannot reach this node's coordinator for node %u: %s", node, why);
            return;
        }
        __atomic_store_n(&B.heard[node], l->lease, __ATOMIC_RELEASE);
    }
    if (ckpt_wire_send(l->conn.fd, type, msg, len, NULL, 0) < 0)
        close_node(node);
}

/*
 * A message in a mailbox without this job key's tag: written by an agent
 * with another CKPT_JOB_KEY (or none), or by something else that reaches
 * etcd.  On the leader, the agent of that node is refused: its messages
 * are not used, and it is told to end (in a message it cannot read, which
 * is how it learns that its key is not the job's).  On a member, the
 * leader speaks with another key: this node ends.
 */
static void unauthentic(const char *dir, unsigned node, int64_t lease)
{
    struct coord_status st = { .status = 1 };
    char msg[sizeof(st) + 200];
    if (strcmp(dir, "up") == 0) {
        struct link *l = &B.nodes[node];
        if (l->refused)
            return;
        l->refused = true;
        ckpt_log(CKPT_WARN, "refused node %u's agent: its messages in etcd did not authenticate with this job's key "
                 "(CKPT_JOB_KEY); every node needs the same CKPT_JOB_KEY", node);
        /* Read as it is by an agent without a key: its text ends before the tag does. */
        int k = snprintf(msg + sizeof(st), sizeof(msg) - sizeof(st), "this node's messages did not authenticate "
                         "with the job's key (CKPT_JOB_KEY): every node needs the same CKPT_JOB_KEY");
        memcpy(msg, &st, sizeof(st));
        post(B.leading, "down", node, lease, l->seq++, COORD_FINISH, msg, sizeof(st) + (size_t)k + 1);
        return;
    }
    if (B.finished)
        return;
    int k = snprintf(msg + sizeof(st), sizeof(msg) - sizeof(st), "its messages in etcd did not authenticate "
                     "with this node's key (CKPT_JOB_KEY): every node needs the same CKPT_JOB_KEY");
    memcpy(msg, &st, sizeof(st));
    ckpt_log(CKPT_ERROR, "a message from the job's leader did not authenticate with this node's key (CKPT_JOB_KEY): "
             "this node leaves the job");
    to_member(node, COORD_FINISH, msg, sizeof(st) + (size_t)k);
}

static void stop_leading(void)
{
    if (!B.leading)
        return;
    for (unsigned j = 0; j < B.n; j++)
        close_node(j);
    coord_stop(B.coord);
    B.coord = NULL;
    B.leading = 0;
}

static void lead(int64_t epoch)
{
    char end[300], why[128];
    snprintf(end, sizeof(end), "%send", B.prefix); /* an earlier run's */
    if (etcd_delete(B.e, end, false, why, sizeof(why)) < 0)
        ckpt_log(CKPT_DEBUG, "an earlier run's end key stays: %s", why);
    /* Rank 0's rendezvous is on node 0, wherever the coordinator runs:
     * its address comes from node 0's JOIN (coord.c).  The leader before
     * this one, if its lease ended while the job ran, is fenced first. */
    for (unsigned j = 0; j < B.n; j++)
        B.nodes[j] = (struct link){ .conn = CKPT_CONN_CLOSED };
    int rc = coord_open(&B.coord, &B.copt);
    if (rc == 0)
        coord_decide_by(B.coord, bridge_decide, epoch);
    if (rc == 0 && B.lost_leader >= 0 && !(B.led && (unsigned)B.lost_leader == B.node))
        coord_lost(B.coord, (unsigned)B.lost_leader, B.lost_leader_ip);
    B.lost_leader = -1;
    if (rc < 0 || coord_run(B.coord) < 0) {
        ckpt_log(CKPT_ERROR, "cannot run the coordinator on this node");
        coord_stop(B.coord);
        B.coord = NULL;
        return;
    }
    B.leading = epoch;
    B.led = true;
    ckpt_log(CKPT_INFO, "this node (%u) leads the job (etcd epoch %" PRId64 ")", B.node, epoch);
}

/* Which agent is each node now: the lease its node key is under.  A node
 * with another agent than before talks to the coordinator afresh, on a
 * connection of its own (coord.c then drops the old one, if still there).
 * An agent whose lease ended is let go only lease_grace_s() later: until
 * then its node's ranks may still run (its own fence is due first), so the
 * coordinator decides nothing without it, and a replacement waits. */
static void agents(void)
{
    double t = ckpt_now_s();
    char key[300], why[512];
    struct etcd_kv *kv;
    size_t n;
    snprintf(key, sizeof(key), "%snode/", B.prefix);
    if (etcd_get(B.e, key, true, &kv, &n, NULL, why, sizeof(why)) < 0)
        return;
    int64_t *now = calloc(B.n, sizeof(*now));
    for (size_t i = 0; now && i < n; i++) {
        unsigned long j = strtoul(kv[i].key + strlen(key), NULL, 10);
        if (j < B.n)
            now[j] = kv[i].lease;
    }
    for (unsigned j = 0; now && j < B.n; j++) {
        struct link *l = &B.nodes[j];
        if (now[j] == l->lease) {
            l->gone = 0;
            continue;
        }
        if (l->lease && !l->gone && !B.finished) {
            l->gone = t;
            ckpt_log(CKPT_INFO, "node %u's etcd lease ended: the job goes on without its agent in %.2f s, once "
                     "the node has stopped its ranks", j, lease_grace_s(B.ttl_s));
        }
        if (l->lease && l->gone && t - l->gone < lease_grace_s(B.ttl_s))
            continue;
        if (l->lease) {
            box(key, sizeof(key), B.leading, "up", j, l->lease);
            etcd_delete(B.e, key, true, why, sizeof(why));
            box(key, sizeof(key), B.leading, "down", j, l->lease);
            unpost(key);
        }
        close_node(j);
        *l = (struct link){ .conn = CKPT_CONN_CLOSED, .lease = now[j] };
    }
    free(now);
    etcd_kvs_free(kv, n);
}

/*
 * The job's end, for the spares (--spare) and any agent that comes late:
 * the key end (the job's exit status) outlives the agents' leases, on a
 * lease of its own that nobody renews (END_TTL_S); a new run of the job's
 * name removes it when it elects its leader.
 */
#define END_TTL_S 120
static void put_end(const struct coord_status *st)
{
    char key[300], value[16], why[256];
    int64_t lease = 0;
    if (B.end_put)
        return;
    B.end_put = true;
    snprintf(key, sizeof(key), "%send", B.prefix);
    snprintf(value, sizeof(value), "%d", (int)st->status);
    if (etcd_lease_grant(B.e, END_TTL_S, &lease, why, sizeof(why)) < 0 ||
        etcd_put(B.e, key, value, strlen(value), lease, why, sizeof(why)) < 0)
        ckpt_log(CKPT_WARN, "the job's end is not in etcd (%s): its spares wait until they are stopped", why);
}

/* What the coordinator says to node l, into its agent's box. */
static bool from_coord(void *arg, uint16_t type, void *msg, size_t len)
{
    struct link *l = arg;
    unsigned j = (unsigned)(l - B.nodes);
    if (type == COORD_FINISH && len >= sizeof(struct coord_status))
        put_end((const struct coord_status *)msg);
    if (type == COORD_PLAN && j == 0)
        bridge_put_plan(msg, len);
    post(B.leading, "down", j, l->lease, l->seq++, type, msg, len);
    free(msg);
    return true;
}

static void leader_turn(void)
{
    agents();
    for (unsigned j = 0; j < B.n; j++)
        if (B.nodes[j].lease)
            take(B.leading, "up", j, B.nodes[j].lease, &B.nodes[j].taken, to_coord);
    for (unsigned j = 0; j < B.n; j++) {
        struct link *l = &B.nodes[j];
        if (ckpt_conn_take(&l->conn, 64, from_coord, l) < 0) {
            post(B.leading, "down", j, l->lease, l->seq++, COORD_CLOSED, NULL, 0);
            close_node(j);
        }
    }
}

/* -------------------------------------------------- lease and leadership */

/* The lease lapsed (lease.c, on its thread): the ranks are killed at once,
 * whatever this bridge is waiting for, so that they are gone before the
 * others take the node as lost, at the end of the TTL.  fence() follows
 * when the bridge next turns. */
static void kill_ranks(void)
{
    pid_t pgid = job_ranks_pgid();
    if (pgid > 0 && killpg(pgid, SIGKILL) == 0)
        ckpt_log(CKPT_ERROR, "this node's etcd lease lapsed: its ranks (process group %d) are killed at once",
                 (int)pgid);
}

static void fence(const char *why)
{
    if (B.fenced)
        return;
    B.fenced = true;
    ckpt_log(CKPT_ERROR, "%s: this node stops its ranks before the others restart without it", why);
    stop_leading();
    ckpt_conn_close(&B.member.conn);
}


/* Fenced, and etcd answers again: a new lease, and the node's rank if no
 * one took it meanwhile; the member then joins the job again. */
static void regain(double now)
{
    char why[512];
    static bool said;
    static double tried;
    int64_t lease;
    if (now - tried < B.ttl_s / 3) /* the turns come at least every sixth of it */
        return;
    tried = now;
    if (etcd_lease_grant(B.e, (int)B.ttl_s, &lease, why, sizeof(why)) < 0)
        return;
    etcd_lease_revoke(B.e, B.lease, why, sizeof(why));
    B.lease = lease;
    int rc = bridge_claim((int)B.node, why, sizeof(why));
    if (rc == 1) {
        char key[300];
        snprintf(key, sizeof(key), "%snode/%u", B.prefix, B.node);
        lease_replace(B.keeper, lease, key);
        B.fenced = false;
        said = false;
        unpost_epoch(B.epoch);
        B.member.seq = B.member.taken = 0; /* the boxes of the new lease */
        ckpt_log(CKPT_INFO, "this node reaches etcd again: it is back in the job as node %u", B.node);
    } else if (rc == 0 && !said) {
        said = true;
        ckpt_log(CKPT_ERROR, "node %u was taken by another agent while this one was cut off: this one stays out "
                 "of the job", B.node);
    }
}

/* What became of the lease (kept by its own thread, lease.c): a node
 * whose lease lapsed fences itself, and once fenced tries to come back. */
static void lease_turn(double now)
{
    struct lease_state s;
    lease_state(B.keeper, &s);
    B.paused = s.paused;
    if (B.fenced)
        regain(now);
    else if (s.lapsed)
        fence(s.why);
}

/* The node that leads now, and its address, for the next leader to fence
 * should its lease end; another that leads fences the one lost before. */
static void whose(int leader)
{
    char key[300], why[512];
    struct etcd_kv *kv;
    size_t n;
    B.leader_node = leader;
    B.leader_ip[0] = '\0';
    if (leader < 0)
        return;
    if ((unsigned)leader != B.node)
        B.lost_leader = -1;
    snprintf(key, sizeof(key), "%snode/%d", B.prefix, leader);
    if (etcd_get(B.e, key, false, &kv, &n, NULL, why, sizeof(why)) < 0)
        return;
    if (n)
        snprintf(B.leader_ip, sizeof(B.leader_ip), "%.*s", (int)kv[0].len, kv[0].value);
    etcd_kvs_free(kv, n);
}

/* The leader key (@key): its create revision, the epoch (0: no leader),
 * and the node it names (-1: none).  0, or -errno when etcd cannot tell. */
static int read_leader(const char *key, int64_t *epoch, int *leader)
{
    char why[512];
    struct etcd_kv *kv;
    size_t n;
    int rc = etcd_get(B.e, key, false, &kv, &n, NULL, why, sizeof(why));
    if (rc < 0)
        return rc;
    *epoch = n ? kv[0].create_revision : 0;
    *leader = n && kv[0].len ? atoi(kv[0].value) : -1;
    etcd_kvs_free(kv, n);
    return 0;
}

/* Who leads, read by a replacement or a spare while it waits for a node
 * rank: if that leader is gone when it has one, it is fenced. */
void bridge_note_leader(void)
{
    char key[300];
    int64_t epoch;
    int leader;
    snprintf(key, sizeof(key), "%sleader", B.prefix);
    if (read_leader(key, &epoch, &leader) < 0)
        return;
    B.late = true;
    if (leader >= 0)
        whose(leader);
}

static void leadership(void)
{
    char key[300], why[512], me[16];
    struct etcd_kv *kv;
    size_t n;
    int64_t epoch;
    int leader;
    snprintf(key, sizeof(key), "%sleader", B.prefix);
    if (read_leader(key, &epoch, &leader) < 0)
        return;
    if (!epoch && B.epoch) /* what the last leader said last (its FINISH) comes first */
        take(B.epoch, "down", B.node, B.lease, &B.member.taken, to_member);
    if (!epoch && !B.finished && B.leader_node >= 0) {
        B.lost_leader = B.leader_node;
        snprintf(B.lost_leader_ip, sizeof(B.lost_leader_ip), "%s", B.leader_ip);
    }
    /* A leader whose lease ended may still run its node's ranks until its
     * own fence is due: the next is elected only lease_grace_s() later.  A
     * replacement that finds the job without a leader waits as long: the
     * agents that saw the leader go know whom to fence, and lead first. */
    if (epoch)
        B.leader_gone = 0;
    else if (B.epoch || (B.late && !B.leader_gone))
        B.leader_gone = ckpt_now_s();
    B.late = false;
    bool waits = B.leader_gone && ckpt_now_s() - B.leader_gone < lease_grace_s(B.ttl_s);
    if (!epoch && !B.fenced && !B.finished && !waits) { /* campaign */
        snprintf(me, sizeof(me), "%u", B.node);
        struct etcd_cmp none = { key, ETCD_CREATE, 0, NULL };
        struct etcd_op put = { key, me, strlen(me), B.lease };
        if (etcd_txn(B.e, &none, 1, &put, 1, NULL, why, sizeof(why)) == 1 &&
            etcd_get(B.e, key, false, &kv, &n, NULL, why, sizeof(why)) == 0) {
            epoch = n ? kv[0].create_revision : 0;
            if (n && kv[0].lease == B.lease) {
                lead(epoch);
                leader = (int)B.node;
            }
            etcd_kvs_free(kv, n);
        }
    }
    if (epoch == B.epoch)
        return;
    /* A new coordinator: what the old one had not taken is its own. */
    if (B.epoch)
        take(B.epoch, "down", B.node, B.lease, &B.member.taken, to_member);
    if (B.leading && B.leading != epoch)
        stop_leading();
    if ((B.epoch || B.leaderless) && epoch)
        ckpt_log(CKPT_INFO, "the job has a new leader (etcd epoch %" PRId64 "): this node joins it", epoch);
    else if (B.epoch)
        ckpt_log(CKPT_INFO, "the job's leader is gone (its etcd lease ended): another is elected in %.2f s, once "
                 "its node has stopped its ranks", lease_grace_s(B.ttl_s));
    B.leaderless = B.epoch && !epoch;
    ckpt_conn_close(&B.member.conn);
    unpost_epoch(B.epoch);
    B.member.seq = B.member.taken = 0;
    B.epoch = epoch;
    whose(epoch ? leader : -1);
}

/* The nodes this agent started (CKPT_NODE_LAUNCHER): kept running while
 * the job runs.  A node's command is started again whenever it ends before
 * the job: its new agent waits for the rank's lease to end, then takes it.
 * One whose command ends too often will not join: unless a spare waits to
 * take its rank, the coordinator is told (by this agent's member), and the
 * job ends rather than wait for it. */
static void launch_turn(void)
{
    char why[512];
    int j;
    if (!B.spawn || B.spawn_given_up || (j = spawn_turn(B.spawn, B.finished, why, sizeof(why))) <= 0)
        return;
    B.spawn_given_up = true;
    /* A spare waiting beside the job takes the rank once it has been free a while (spare_wait). */
    char key[300], err[128];
    struct etcd_kv *kv;
    size_t n = 0;
    snprintf(key, sizeof(key), "%sspare/", B.prefix);
    if (etcd_get(B.e, key, true, &kv, &n, NULL, err, sizeof(err)) == 0)
        etcd_kvs_free(kv, n);
    if (n) {
        ckpt_log(CKPT_ERROR, "%s; a spare waits beside the job: it takes node %d's rank", why, j);
        return;
    }
    ckpt_log(CKPT_ERROR, "%s: the job ends (the coordinator is told)", why);
    __atomic_store_n(&B.spawn_failed, (unsigned)j, __ATOMIC_RELEASE);
}

static void *run(void *arg)
{
    struct pollfd *p = calloc(4 + B.n, sizeof(*p));
    int wait_ms = TURN_MIN_MS, busy_ms = TURN_MIN_MS, quiet_ms = TURN_MAX_MS;
    if (B.watch) {
        busy_ms = WATCHED_MIN_MS;
        quiet_ms = B.ttl_s * 1000 / 6 < WATCHED_MAX_MS ? (int)(B.ttl_s * 1000 / 6) : WATCHED_MAX_MS;
    }
    (void)arg;
    for (; p;) {
        int k = 0;
        p[k++] = (struct pollfd){ .fd = B.stop[0], .events = POLLIN };
        p[k++] = (struct pollfd){ .fd = B.watch ? B.watch_fd : -1, .events = POLLIN };
        p[k++] = (struct pollfd){ .fd = lease_fd(B.keeper), .events = POLLIN };
        p[k++] = (struct pollfd){ .fd = B.member.conn.fd < 0 ? B.lfd : B.member.conn.fd, .events = POLLIN };
        for (unsigned j = 0; B.leading && j < B.n; j++)
            p[k++] = (struct pollfd){ .fd = B.nodes[j].conn.fd, .events = POLLIN };
        if (poll(p, k, wait_ms) > 0 && p[0].revents)
            break;
        if (p[1].revents) { /* something changed: read it now */
            char drain[64];
            while (read(B.watch_fd, drain, sizeof(drain)) > 0)
                ;
        }
        unsigned moved = B.moved;
        lease_turn(ckpt_now_s());
        if (!B.paused) {
            leadership();
            flush();
        }
        failure_waits();
        if (B.leading && !B.paused)
            leader_turn();
        member_turn();
        launch_turn();
        if (!B.paused)
            bridge_spares_turn(ckpt_now_s());
        wait_ms = B.moved != moved ? busy_ms : wait_ms * 2 > quiet_ms ? quiet_ms : wait_ms * 2;
    }
    free(p);
    /* The nodes started from here are this thread's children (their
     * parent-death signal is its end): they end once they heard the end. */
    spawn_close(B.spawn, B.ttl_s);
    B.spawn = NULL;
    return NULL;
}

/* ------------------------------------------------------------------- API */

/* Claims node rank @want, or with -1 the first free one: 1 when claimed,
 * 0 when taken, -errno. */
int bridge_claim(int want, char *why, size_t whylen)
{
    for (unsigned i = want >= 0 ? (unsigned)want : 0; i < B.n; i++) {
        char key[300];
        snprintf(key, sizeof(key), "%snode/%u", B.prefix, i);
        struct etcd_cmp none = { key, ETCD_CREATE, 0, NULL };
        struct etcd_op put = { key, B.ip, strlen(B.ip), B.lease };
        int64_t rev = 0;
        int rc = etcd_txn(B.e, &none, 1, &put, 1, &rev, why, whylen);
        if (rc != 0) {
            if (rc == 1)
                B.node = i, B.claimed = rev;
            return rc;
        }
        if (want >= 0)
            return 0;
    }
    return 0;
}

/* Whether the job has a leader now. */
bool bridge_led(void)
{
    char key[300], why[128];
    struct etcd_kv *kv;
    size_t n = 0;
    snprintf(key, sizeof(key), "%sleader", B.prefix);
    if (etcd_get(B.e, key, false, &kv, &n, NULL, why, sizeof(why)) < 0)
        return false;
    etcd_kvs_free(kv, n);
    return n > 0;
}

int bridge_start(struct options *opt, char *why, size_t whylen)
{
    struct etcd_opts o = { .endpoints = opt->etcd, .ca = ckpt_cfg_str(CFG_ETCD_CA),
                           .cert = ckpt_cfg_str(CFG_ETCD_CERT), .key = ckpt_cfg_str(CFG_ETCD_KEY),
                           .user = ckpt_cfg_str(CFG_ETCD_USER) };
    char password[256] = "";
    const char *pwfile = ckpt_cfg_str(CFG_ETCD_PASSWORD_FILE);
    if (o.user && *o.user && pwfile && *pwfile) {
        FILE *f = fopen(pwfile, "re");
        if (!f || !fgets(password, sizeof(password), f)) {
            snprintf(why, whylen, "CKPT_ETCD_PASSWORD_FILE=%s: %s", pwfile, f ? "empty" : strerror(errno));
            if (f)
                fclose(f);
            return -EINVAL;
        }
        fclose(f);
        password[strcspn(password, "\r\n")] = '\0';
        o.password = password;
    }
    if (o.user && !*o.user)
        o.user = NULL;
    B.opt = opt;
    B.n = (unsigned)opt->nnodes;
    B.ttl_s = ckpt_cfg_seconds(CFG_NODE_TIMEOUT);
    snprintf(B.prefix, sizeof(B.prefix), "/ckpt/%s/", opt->job_name);
    int rc = etcd_open(&B.e, &o, why, whylen);
    if (rc == 0)
        rc = etcd_open(&B.decider, &o, why, whylen);
    if (rc == 0 && etcd_watch_start(&B.watch, &o, B.prefix, &B.watch_fd, why, whylen) < 0) {
        ckpt_log(CKPT_WARN, "no etcd watch (%s): the job's keys are read every %d ms", why, TURN_MAX_MS);
        B.watch = NULL;
    }
    int ttl = B.ttl_s < 2 ? 2 : (int)B.ttl_s;
    if (rc == 0 && (rc = etcd_lease_grant(B.e, ttl, &B.lease, why, whylen)) == 0)
        rc = lease_start(&B.keeper, &o, ttl, B.lease, kill_ranks, why, whylen);
    memset(password, 0, sizeof(password));
    if (rc < 0)
        return rc;
    B.ttl_s = ttl;
    if (etcd_local_ip(B.e, B.ip, sizeof(B.ip)) < 0)
        snprintf(B.ip, sizeof(B.ip), "127.0.0.1");
    /* A node rank whose lease has not expired yet is still taken: a
     * replacement waits for it (up to 10 x the TTL); a spare, as long as
     * the job runs. */
    double give_up = ckpt_now_s() + 10 * B.ttl_s;
    bool said = false;
    if (opt->spare && (rc = bridge_spare_wait(why, whylen)) != 0)
        return rc;
    while (!opt->spare && (rc = bridge_claim(opt->node_rank, why, whylen)) == 0) {
        if (!said)
            ckpt_log(CKPT_INFO, "%s: waiting for %s to be free", opt->etcd,
                     opt->node_rank >= 0 ? "this node rank" : "a node rank");
        said = true;
        bridge_note_leader();
        if (ckpt_now_s() > give_up) {
            snprintf(why, whylen, "no node rank of job %s came free in %g s: %d nodes are in it already",
                     opt->job_name, 10 * B.ttl_s, opt->nnodes);
            return -EBUSY;
        }
        usleep(500 * 1000);
    }
    if (rc < 0)
        return rc;
    char key[300];
    snprintf(key, sizeof(key), "%snode/%u", B.prefix, B.node);
    lease_hold(B.keeper, key);
    opt->node_rank = (int)B.node;
    if (!(B.nodes = calloc(B.n, sizeof(*B.nodes))) || !(B.heard = calloc(B.n, sizeof(*B.heard))))
        return -ENOMEM;
    B.member = (struct link){ .conn = CKPT_CONN_CLOSED };
    if ((rc = ckpt_wire_listen("127.0.0.1:0", &B.lfd, B.local, sizeof(B.local), why, whylen)) < 0)
        return rc;
    opt->coord = B.local;
    if (pipe2(B.stop, O_CLOEXEC) < 0)
        return -errno;
    if ((rc = spawn_open(&B.spawn, opt)) < 0) {
        snprintf(why, whylen, "cannot prepare CKPT_NODE_LAUNCHER: %s", strerror(-rc));
        return rc;
    }
    /* The coordinator's options, should this agent lead: copied before
     * the thread starts, as the agent goes on setting its own. */
    B.copt = *opt;
    B.copt.coord = "127.0.0.1:0";
    B.copt.launcher = NULL;
    /* The thread takes no signal: SIGCHLD and the ones passed on to the
     * job are the agent loop's (its signalfd), and it starts before the
     * loop blocks them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&B.thread, NULL, run, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -rc;
    B.running = true;
    ckpt_log(CKPT_INFO, "node %u of %u in job %s, through etcd at %s", B.node, B.n, opt->job_name, opt->etcd);
    return 0;
}

unsigned bridge_gave_up(void)
{
    return __atomic_load_n(&B.spawn_failed, __ATOMIC_ACQUIRE);
}

const char *bridge_ip(void)
{
    return B.e ? B.ip : NULL;
}

void bridge_stop(void)
{
    char why[256];
    if (B.running && write(B.stop[1], "x", 1) == 1)
        pthread_join(B.thread, NULL);
    B.running = false;
    /* The last messages out (the coordinator's FINISH) before the lease goes. */
    if (B.leading)
        leader_turn();
    stop_leading();
    ckpt_conn_close(&B.member.conn);
    etcd_watch_stop(B.watch);
    B.watch = NULL;
    lease_stop(B.keeper);
    B.keeper = NULL;
    if (B.e && B.lease)
        etcd_lease_revoke(B.e, B.lease, why, sizeof(why));
    etcd_close(B.e);
    etcd_close(B.decider);
    B.e = B.decider = NULL;
    for (size_t i = 0; i < B.nout; i++)
        free(B.out[i].value);
    free(B.out);
    B.out = NULL;
    B.nout = B.capout = 0;
    free(B.nodes);
    free(B.heard);
    B.nodes = NULL;
    free(B.spares);
    B.spares = NULL;
    B.nspares = 0;
    if (B.lfd >= 0)
        close(B.lfd);
    B.lfd = -1;
    for (int i = 0; i < 2; i++)
        if (B.stop[i] >= 0)
            close(B.stop[i]);
    B.stop[0] = B.stop[1] = -1;
}
