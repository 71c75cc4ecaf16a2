/*
 * The node agent's share of replication (replica/ does the bytes): a
 * receiver thread that keeps the replicas peers send into the store under
 * CKPT_ARENA_DIR/peers, a worker thread that sends this node's committed
 * snapshots of one iteration to the nodes that placement makes their
 * holders, the copies a recovery asks of this node (a peer's replica sent
 * back to a replacement of its node), and the promotion of such a copy
 * into the arena a rank restores from.  A snapshot travels with its rank's
 * replay log, which a restore needs as much as the image: the log first
 * (logship.c: what the holder lacks of it), then the image, whose commit
 * makes the pair usable.  Nothing here ever
 * holds a rank: a peer that is slow or gone makes a round fail, reported
 * to the coordinator, and the training goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "coord.h"
#include "image.h"
#include "log.h"
#include "placement.h"
#include "replay.h"
#include "replica.h"
#include "resume.h"
#include "schedule.h"
#include "timeline.h"
#include "wire.h"
#include "util.h"

#define RX_TIMEOUT_MS 30000

struct rep {
    const struct options *opt;
    char peers[PATH_MAX];               /* CKPT_ARENA_DIR/peers: the store's root */
    char ip[64];                        /* the local address the control connection uses */
    char addr[COORD_ADDR_MAX];          /* where the receiver listens */
    int lfd, stop[2], wake;
    struct ckpt_fab *rx_fab, *tx_fab;
    struct ckpt_store *store;
    pthread_t rx, tx;
    bool rx_started, tx_running;
    bool warned;                        /* the last round's failure was said (once per kind in a row) */
    unsigned spare_failed;              /* the rounds in a row whose copies for the spare failed */
    int warned_rc;
    int rx_warned;                      /* the receiver's last error, said once in a row */
    int tx_done;                        /* atomic: the worker has ended */
    int tx_status;
    uint64_t iteration;                 /* of the round in the worker */
    uint64_t epoch;                     /* atomic: the plan this node acts under (coord.h); offers of an
                                         * older one are refused, ours carry it */
    struct coord_addr *addrs;           /* every node's receiver, for the worker */
    unsigned nnodes;
    struct logship *logs;               /* the replay logs sent and held (logship.c) */
    pthread_mutex_t arrived_lock;
    uint64_t *arrived;                  /* per peer-store slot (rank * 2 + slot): the epoch of the plan the copy
                                         * in it came under, 0: none known (the receiver writes, under the lock) */
    uint64_t *arrivals;                 /* per rank: the copies kept (under the lock) */
    char log_dir[PATH_MAX];             /* where this node's ranks keep their logs on disk, "": the arena */
};

/* ---------------------------------------------------------------- receiving */

static void report(void *arg, const struct ckpt_replica_stats *st)
{
    struct rep *r = arg;
    size_t i = (size_t)st->rank * 2 + st->slot;
    if (r->arrived && st->slot < 2 && st->rank < (uint32_t)(r->opt->nnodes * r->opt->nproc)) {
        pthread_mutex_lock(&r->arrived_lock);
        r->arrived[i] = st->status < 0 ? 0 : st->epoch;
        r->arrivals[st->rank] += st->status >= 0;
        pthread_mutex_unlock(&r->arrived_lock);
    }
    if (st->status < 0)
        ckpt_log(CKPT_WARN, "replica of rank %u (iteration %llu) not kept: %s", st->rank,
                 (unsigned long long)st->iteration, st->why);
    else
        ckpt_log(CKPT_DEBUG, "kept the replica of rank %u iteration %llu: %llu of %llu chunks sent", st->rank,
                 (unsigned long long)st->iteration, (unsigned long long)st->sent_chunks,
                 (unsigned long long)st->chunks);
}

/* One connection: a replay log or replica rounds, told apart by its first frame. */
static void serve_one(struct rep *r, int ctl)
{
    struct ckpt_wire_frame fr;
    struct pollfd p = { .fd = ctl, .events = POLLIN };
    uint64_t peer;
    char why[256];

    if (poll(&p, 1, RX_TIMEOUT_MS) <= 0 || recv(ctl, &fr, sizeof(fr), MSG_PEEK | MSG_WAITALL) != sizeof(fr))
        return;
    if (logship_offer(fr.type)) {
        int rc = logship_receive(r->logs, r->peers, r->opt->job_name, (unsigned)(r->opt->nnodes * r->opt->nproc),
                                 __atomic_load_n(&r->epoch, __ATOMIC_ACQUIRE), ctl);
        if (rc < 0 && rc != r->rx_warned)
            ckpt_log(CKPT_WARN, "a replay log from a peer was not kept: %s", strerror(-rc));
        r->rx_warned = rc;
        return;
    }
    if (ckpt_replica_hello(r->rx_fab, ctl, &peer, why, sizeof(why)) < 0) {
        ckpt_log(CKPT_WARN, "a peer could not start replicating: %s", why);
        return;
    }
    int rc = ckpt_replica_serve(r->rx_fab, ctl, r->store, &r->epoch, report, r);
    if (rc < 0)
        ckpt_log(CKPT_WARN, "a replication connection ended: %s", strerror(-rc));
}

/* Connections are served one after the other: the store takes one transfer at a time. */
static void *receiver(void *arg)
{
    struct rep *r = arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = r->stop[0], .events = POLLIN }, { .fd = r->lfd, .events = POLLIN } };
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[0].revents)
            break;
        int ctl, rc = p[1].revents ? ckpt_wire_accept(r->lfd, &ctl) : -EAGAIN;
        if (rc == -EACCES)
            ckpt_log(CKPT_WARN, "refused a replication connection that did not authenticate with this job's key "
                     "(CKPT_JOB_KEY)");
        if (rc < 0)
            continue;
        serve_one(r, ctl);
        close(ctl);
    }
    return NULL;
}

/* ---------------------------------------------------------------- sending */

/* The slot file of the rank directory @dir holding @it (*@slot), mapped read-only, or -errno. */
static int map_slot(const char *dir, uint64_t it, void **base, size_t *len, int *slot, char *why, size_t whylen)
{
    char path[PATH_MAX + 32];
    struct ckpt_header h;
    bool damaged = false;

    for (int s = 0; s < 2; s++) {
        struct stat st;
        if (ckpt_slot_path(path, sizeof(path), dir, s) < 0)
            continue;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(h) || pread(fd, &h, sizeof(h), 0) != sizeof(h) ||
            h.iteration != it) {
            close(fd);
            continue;
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            continue;
        char bad[200];
        int rc = ckpt_image_verify_header(m, (size_t)st.st_size, &h, bad, sizeof(bad));
        if (rc == 0 && h.iteration == it) {
            *base = m;
            *len = (size_t)st.st_size;
            *slot = s;
            return 0;
        }
        munmap(m, (size_t)st.st_size);
        if (rc == -EBADMSG && !damaged) {
            snprintf(why, whylen, "%s is damaged (%s)", path, bad);
            damaged = true;
        }
    }
    if (damaged)
        return -EBADMSG;
    snprintf(why, whylen, "%s holds no committed snapshot of iteration %llu", dir, (unsigned long long)it);
    return -ENOENT;
}

/* Replication rounds send in the idle gaps of the rank's own traffic (CKPT_SCHED=gap, runtime/schedule.h). */
struct pacing {
    struct ckpt_sched_reader sched;
    uint64_t chunk_bytes, data_bytes, t0;
};

static int pace(void *arg, uint64_t chunk, uint64_t sent)
{
    struct pacing *p = arg;
    uint64_t off = chunk * p->chunk_bytes;
    uint64_t bytes = off >= p->data_bytes ? 0 : p->data_bytes - off < p->chunk_bytes ? p->data_bytes - off
                                                                                      : p->chunk_bytes;
    /* The rate so far (1 GB/s before any): how long the chunk will hold the link. */
    uint64_t dt = ckpt_now_ns() - p->t0, rate = sent && dt ? (uint64_t)(sent * 1e9 / dt) : 1000000000ULL;
    if (bytes && ckpt_sched_wait(&p->sched, bytes, rate, 1000) == -E2BIG)
        ckpt_log_once(CKPT_DEBUG, "a %llu-byte chunk fits in no idle gap of %s: sent as it comes",
                      (unsigned long long)bytes, p->sched.dir);
    return 0; /* late or not, the chunk goes: a round never stops for the schedule */
}

/*
 * Sends rank's snapshot of @it in the rank directory @dir, log first, to
 * the agent at @to; @paced: in the gaps the rank publishes (a replication
 * round while it trains), else at once (a recovery, the ranks stopped).
 */
static int send_copy(struct rep *r, const char *dir, int rank, uint64_t it, const char *to, bool paced, char *why,
                     size_t whylen)
{
    struct pacing pc = { .t0 = ckpt_now_ns() };
    struct ckpt_replica_stats st;
    struct ckpt_fab_region *src = NULL;
    void *image;
    size_t len;
    uint64_t peer;
    int ctl = -1, slot;

    why[0] = '\0';
    int rc = map_slot(dir, it, &image, &len, &slot, why, whylen);
    if (rc < 0)
        return rc;
    if ((rc = logship_send(r->logs, dir, r->opt->job_name, rank, __atomic_load_n(&r->epoch, __ATOMIC_ACQUIRE), to,
                           why, whylen)) < 0)
        goto out;
    /* A failed write can leave the endpoint holding a broken connection
     * (to a node that was replaced at the same address, say): the next
     * try, and the next copy, get a fresh endpoint. */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt) {
            ckpt_log(CKPT_DEBUG, "rank %d iteration %llu to %s: %s; trying again on a new endpoint", rank,
                     (unsigned long long)it, to, why);
            close(ctl);
            ctl = -1;
            ckpt_fab_unregister(src);
            src = NULL;
        }
        if (!r->tx_fab &&
            (rc = ckpt_fab_open(&r->tx_fab, r->ip, ckpt_cfg_str(CFG_FABRIC_PROVIDER),
                                                (int)ckpt_cfg_int(CFG_FABRIC_DATA), why, whylen)) < 0) {
            r->tx_fab = NULL;
            goto out;
        }
        if ((rc = ckpt_fab_register(r->tx_fab, image, len, 0, &src)) < 0) {
            snprintf(why, whylen, "%s", ckpt_fab_error(r->tx_fab));
            goto out;
        }
        if ((rc = ckpt_wire_connect(to, &ctl, why, whylen)) < 0 ||
            (rc = ckpt_replica_hello(r->tx_fab, ctl, &peer, why, whylen)) < 0)
            goto out;
        if (!attempt)
            paced = paced && ckpt_cfg_int(CFG_SCHED) == CKPT_SCHED_GAP && ckpt_sched_reader_open(&pc.sched, dir) == 0;
        pc.chunk_bytes = ((const struct ckpt_header *)image)->chunk_bytes;
        pc.data_bytes = ((const struct ckpt_header *)image)->data_bytes;
        rc = ckpt_replica_send(r->tx_fab, ctl, peer, __atomic_load_n(&r->epoch, __ATOMIC_ACQUIRE), image, len, src,
                               paced ? pace : NULL, &pc, &st);
        if (rc == 0 || !st.fabric_failed || rc == -EHOSTUNREACH)
            break;
        snprintf(why, whylen, "%s", st.why);
        ckpt_fab_unregister(src);
        src = NULL;
        ckpt_fab_close(r->tx_fab);
        r->tx_fab = NULL;
    }
    if (rc < 0) {
        snprintf(why, whylen, "%s", st.why);
    } else {
        ckpt_log(CKPT_DEBUG, "rank %d iteration %llu to %s: %llu bytes in %.3f s", rank, (unsigned long long)it, to,
                 (unsigned long long)st.bytes_sent, st.seconds);
        struct ckpt_tl_event ev = { .start_ns = pc.t0, .end_ns = ckpt_now_ns(), .arg = st.bytes_sent,
                                    .kind = CKPT_TL_NET };
        if (paced)
            ckpt_tl_agent_add(dir, &ev); /* the rank's timeline shows the agent's sends beside its collectives */
    }
out:
    if (ctl >= 0)
        close(ctl);
    if (src)
        ckpt_fab_unregister(src);
    munmap(image, len);
    return rc;
}

/*
 * A spare waiting beside the job with standbys (bridge.c: node I's is
 * the spare I mod S) gets this node's copies and logs too, after the
 * holders: its standbys follow them.  Never part of the round's result:
 * a spare that cannot take them only falls behind, said once in a row
 * from the second round that failed (a spare that has just taken a lost
 * node's place is still listed for a second, and refuses the first).
 */
static void to_spare(struct rep *r)
{
    char spare[COORD_ADDR_MAX], dir[PATH_MAX], why[512];
    if (bridge_spare_for((unsigned)r->opt->node_rank, spare, sizeof(spare)) < 0)
        return;
    int rc = 0;
    for (int i = 0; rc == 0 && i < r->opt->nproc; i++) {
        int rank = r->opt->first_rank + i;
        if ((rc = ckpt_arena_path(dir, sizeof(dir), r->opt->arena_root, r->opt->job_name, rank)) == 0)
            rc = send_copy(r, dir, rank, r->iteration, spare, true, why, sizeof(why));
        if (rc < 0 && r->spare_failed == 1)
            ckpt_log(CKPT_WARN, "cannot send rank %d iteration %llu to the spare at %s: %s; its standby there falls "
                     "behind", rank, (unsigned long long)r->iteration, spare, why);
    }
    if (rc == 0 && r->spare_failed > 1)
        ckpt_log(CKPT_INFO, "the spare at %s takes this node's copies again", spare);
    r->spare_failed = rc < 0 ? r->spare_failed + 1 : 0;
}

static void *worker(void *arg)
{
    struct rep *r = arg;
    const struct options *opt = r->opt;
    enum ckpt_placement p = ckpt_placement_choose((enum ckpt_placement)ckpt_cfg_int(CFG_PLACEMENT), r->nnodes,
                                                  (unsigned)ckpt_cfg_int(CFG_REPLICAS));
    unsigned m = (unsigned)ckpt_cfg_int(CFG_REPLICAS), holders[64];
    char dir[PATH_MAX], why[512];
    int rc = 0;

    if (m > 1 && ckpt_placement_holders(p, r->nnodes, m, (unsigned)opt->node_rank, holders) < 0)
        rc = -EINVAL;
    for (int i = 0; rc == 0 && m > 1 && i < opt->nproc; i++) {
        int rank = opt->first_rank + i;
        if ((rc = ckpt_arena_path(dir, sizeof(dir), opt->arena_root, opt->job_name, rank)) < 0)
            break;
        for (unsigned k = 1; rc == 0 && k < m; k++) {
            const char *to = r->addrs[holders[k]].hostport;
            if (!*to) {
                snprintf(why, sizeof(why), "node %u takes no replicas", holders[k]);
                rc = -ECONNREFUSED;
            } else {
                rc = send_copy(r, dir, rank, r->iteration, to, true, why, sizeof(why));
            }
            if (rc < 0 && !(r->warned && rc == r->warned_rc))
                ckpt_log(CKPT_WARN, "cannot replicate rank %d iteration %llu to node %u: %s", rank,
                         (unsigned long long)r->iteration, holders[k], why);
            if (rc < 0)
                r->warned = true, r->warned_rc = rc;
            else
                r->warned = false;
        }
    }
    to_spare(r);
    r->tx_status = rc;
    __atomic_store_n(&r->tx_done, 1, __ATOMIC_RELEASE);
    if (write(r->wake, "r", 1) < 0)
        ckpt_log(CKPT_DEBUG, "cannot wake the agent: %s", strerror(errno));
    return NULL;
}

/* ---------------------------------------------------------------- the interface */

/*
 * Starts the receiver on @ip (the address the coordinator is reached
 * from), its store in CKPT_ARENA_DIR/peers, with the peers' replay logs
 * in @log_dir/peers when this node keeps its ranks' logs on disk ("":
 * beside the replicas).  @wake is written to when a round ends.  The
 * caller calls rep_close() whatever this returns.
 */
int rep_open(struct rep **out, const struct options *opt, const char *ip, const char *log_dir, int wake)
{
    char hostport[96], why[512];
    struct rep *r = calloc(1, sizeof(*r));

    *out = r;
    if (!r)
        return -ENOMEM;
    r->opt = opt;
    r->lfd = r->stop[0] = r->stop[1] = -1;
    r->wake = wake;
    pthread_mutex_init(&r->arrived_lock, NULL);
    if (!(r->arrived = calloc((size_t)opt->nnodes * opt->nproc * 2, sizeof(*r->arrived))) ||
        !(r->arrivals = calloc((size_t)opt->nnodes * opt->nproc, sizeof(*r->arrivals))))
        return -ENOMEM;
    snprintf(r->log_dir, sizeof(r->log_dir), "%s", log_dir);
    if (logship_open(&r->logs, (unsigned)(opt->nnodes * opt->nproc), log_dir) < 0)
        return -ENOMEM;
    snprintf(r->ip, sizeof(r->ip), "%s", ip);
    if (ckpt_peers_root(r->peers, sizeof(r->peers), opt->arena_root) < 0)
        return -ENAMETOOLONG;
    snprintf(hostport, sizeof(hostport), strchr(ip, ':') ? "[%s]:0" : "%s:0", ip);
    int rc = ckpt_wire_listen(hostport, &r->lfd, r->addr, sizeof(r->addr), why, sizeof(why));
    if (rc == 0 && (rc = ckpt_fab_open(&r->rx_fab, ip, ckpt_cfg_str(CFG_FABRIC_PROVIDER),
                                                (int)ckpt_cfg_int(CFG_FABRIC_DATA), why, sizeof(why))) < 0)
        r->rx_fab = NULL;
    if (rc == 0 && mkdir(opt->arena_root, 0700) < 0 && errno != EEXIST)
        rc = -errno, snprintf(why, sizeof(why), "cannot create %s: %s", opt->arena_root, strerror(errno));
    struct stat st;
    if (rc == 0 && mkdir(r->peers, 0700) < 0 && errno != EEXIST)
        rc = -errno, snprintf(why, sizeof(why), "cannot create %.300s: %s", r->peers, strerror(errno));
    else if (rc == 0 && (lstat(r->peers, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
                         (st.st_mode & 077)))
        rc = -EPERM, snprintf(why, sizeof(why), "%.300s is not a private directory of this user", r->peers);
    if (rc == 0 && (rc = ckpt_store_open(&r->store, r->peers, r->rx_fab, why, sizeof(why))) < 0)
        r->store = NULL;
    if (rc == 0 && pipe2(r->stop, O_CLOEXEC) < 0)
        rc = -errno, snprintf(why, sizeof(why), "%s", strerror(errno));
    if (rc == 0 && (rc = -pthread_create(&r->rx, NULL, receiver, r)) < 0)
        snprintf(why, sizeof(why), "cannot start the receiver thread: %s", strerror(-rc));
    if (rc < 0) {
        /* This node still sends its own snapshots; the peers that would keep theirs here are told they cannot. */
        ckpt_log(CKPT_WARN, "cannot take replicas from peers: %s; the snapshots placed on this node are kept "
                 "elsewhere only", why);
        r->addr[0] = '\0';
        return 0;
    }
    r->rx_started = true;
    ckpt_log(CKPT_DEBUG, "taking replicas on %s (provider %s, %s) into %s", r->addr, ckpt_fab_provider(r->rx_fab),
             ckpt_fab_data(r->rx_fab) == CKPT_FAB_DATA_TAGGED ? "tagged messages" : "RMA writes", r->peers);
    return 0;
}

const char *rep_address(const struct rep *r)
{
    return r->addr;
}

/* Reaps a finished round: true when none runs now; *@status is the round's result when one ended. */
bool rep_reap(struct rep *r, int *status)
{
    if (r->tx_running && __atomic_load_n(&r->tx_done, __ATOMIC_ACQUIRE)) {
        pthread_join(r->tx, NULL);
        r->tx_running = false;
        *status = r->tx_status;
        return true;
    }
    return !r->tx_running;
}

/* Starts the round that sends this node's snapshots of @it to their holders; @addrs: every node's receiver. */
int rep_start(struct rep *r, uint64_t it, const struct coord_addr *addrs, unsigned nnodes)
{
    if (r->tx_running)
        return -EBUSY;
    struct coord_addr *copy = malloc(nnodes * sizeof(*copy));
    if (!copy)
        return -ENOMEM;
    memcpy(copy, addrs, nnodes * sizeof(*copy));
    free(r->addrs);
    r->addrs = copy;
    r->nnodes = nnodes;
    r->iteration = it;
    r->tx_done = 0;
    int rc = pthread_create(&r->tx, NULL, worker, r);
    if (rc)
        return -rc;
    r->tx_running = true;
    return 0;
}

/* Waits for a running round to end. */
void rep_wait(struct rep *r)
{
    if (r && r->tx_running) {
        pthread_join(r->tx, NULL);
        r->tx_running = false;
    }
}

/*
 * Sends the copies a recovery asks of this node: for each, the replica of
 * a rank it keeps for a peer goes back to that rank's node.  No round may
 * be running.  Returns 0 or the first error (said).
 */
int rep_fetch(struct rep *r, const struct coord_send *sends, unsigned n, const struct coord_addr *addrs,
              unsigned nnodes)
{
    char dir[PATH_MAX], why[512];
    int first = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct coord_send *s = &sends[i];
        why[0] = '\0';
        int rc = s->node < nnodes ? ckpt_arena_path(dir, sizeof(dir), r->peers, r->opt->job_name, (int)s->rank)
                                  : -EINVAL;
        if (rc == 0)
            rc = send_copy(r, dir, (int)s->rank, s->iteration, addrs[s->node].hostport, false, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s", strerror(-rc));
        if (rc < 0) {
            ckpt_log(CKPT_WARN, "cannot send rank %u's copy of iteration %llu to node %u: %s", s->rank,
                     (unsigned long long)s->iteration, s->node, why);
            if (!first)
                first = rc;
            continue;
        }
        ckpt_log(CKPT_INFO, "sent rank %u's copy of iteration %llu to node %u", s->rank,
                 (unsigned long long)s->iteration, s->node);
    }
    return first;
}

/* Copies the file @from to @to (0600), through a temporary name. */
/* Copies what is open on @in (closed here; -errno: nothing to copy) to
 * @to, through a file beside it renamed into place. */
static int copy_fd(int in, const char *to)
{
    char tmp[PATH_MAX + 40];
    int out = -1, rc = in < 0 ? in : 0;
    struct stat st = { 0 };

    snprintf(tmp, sizeof(tmp), "%s.tmp", to);
    if (rc == 0 && fstat(in, &st) < 0)
        rc = -errno;
    if (rc == 0 && (out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
        rc = -errno;
    for (off_t left = st.st_size; rc == 0 && left > 0;) {
        ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);
        if (n <= 0)
            rc = n < 0 ? -errno : -EIO;
        else
            left -= n;
    }
    if (out >= 0 && close(out) < 0 && rc == 0)
        rc = -errno;
    if (in >= 0)
        close(in);
    if (rc == 0 && rename(tmp, to) < 0)
        rc = -errno;
    if (rc < 0)
        unlink(tmp);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    return copy_fd(in < 0 ? -errno : in, to);
}

/*
 * Puts the replica of @rank's iteration @it that the store keeps into the
 * rank's arena directory (slot0, an empty slot1, replay.log), for a restore
 * on this node: the slot file is moved there (*@moved), or copied where it
 * cannot be; the log is copied, onto this node's disk when its ranks keep
 * their logs there.  The ranks must not run.  Returns 0 or -errno with why.
 */
int rep_promote(struct rep *r, int rank, uint64_t it, bool *moved, char *why, size_t whylen)
{
    const struct options *opt = r->opt;
    char from[PATH_MAX], to[PATH_MAX], a[PATH_MAX + 32], b[PATH_MAX + 32];
    void *image;
    size_t len;
    int slot;
    struct ckpt_header h;

    int rc = ckpt_arena_path(from, sizeof(from), r->peers, opt->job_name, rank);
    if (rc == 0)
        rc = logship_rank_dir(opt->arena_root, opt->job_name, (uint32_t)rank, to, sizeof(to));
    if (rc < 0) {
        snprintf(why, whylen, "cannot prepare rank %d's arena: %s", rank, strerror(-rc));
        return rc;
    }
    if ((rc = map_slot(from, it, &image, &len, &slot, why, whylen)) < 0)
        return rc;
    rc = ckpt_image_verify(image, len, &h, why, whylen);
    munmap(image, len);
    if (rc < 0)
        return rc;
    if ((rc = ckpt_slot_path(a, sizeof(a), from, slot)) < 0 || (rc = ckpt_slot_path(b, sizeof(b), to, 0)) < 0) {
        snprintf(why, whylen, "cannot copy the replica of rank %d into %s: %s", rank, to, strerror(-rc));
        return rc;
    }
    /* Moved, once the store has let go of it: no copy to wait for, and no
     * second copy of the rank's state left in the store. */
    int held = r->store ? ckpt_store_forget(r->store, opt->job_name, (uint32_t)rank) : -ENOENT;
    *moved = held != -EBUSY && rename(a, b) == 0;
    if (!*moved)
        rc = copy_file(a, b);
    if (rc == 0 && (rc = ckpt_slot_path(b, sizeof(b), to, 1)) == 0) {
        int fd = open(b, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        rc = fd < 0 ? -errno : 0;
        if (fd >= 0)
            close(fd);
    }
    if (rc == 0) {
        char lwhy[256];
        if (r->log_dir[0])
            rc = ckpt_rlog_disk_path(b, sizeof(b), r->log_dir, rank);
        else
            rc = ckpt_rlog_arena_path(b, sizeof(b), to);
        if (rc == 0)
            rc = copy_fd(ckpt_rlog_open_fd(from, lwhy, sizeof(lwhy)), b);
        if (rc == 0 && r->log_dir[0] && ckpt_rlog_point(to, b, lwhy, sizeof(lwhy)) < 0)
            rc = -EIO;
    }
    if (rc < 0)
        snprintf(why, whylen, "cannot copy the replica of rank %d into %s: %s", rank, to, strerror(-rc));
    return rc;
}

uint64_t rep_arrivals(struct rep *r, int rank)
{
    pthread_mutex_lock(&r->arrived_lock);
    uint64_t n = r->arrivals[rank];
    pthread_mutex_unlock(&r->arrived_lock);
    return n;
}

void rep_epoch(struct rep *r, uint64_t epoch)
{
    __atomic_store_n(&r->epoch, epoch, __ATOMIC_RELEASE);
}

/* The peer store's directory of the job: a directory per rank whose replicas it holds. */
int rep_peer_job_dir(const struct rep *r, char *out, size_t outlen)
{
    return ckpt_job_dir(out, outlen, r->peers, r->opt->job_name);
}

/* Restoring @after: the replicas held here of later iterations are retired (arena_retire). */
void rep_supersede(struct rep *r, uint64_t after, uint64_t keep_epoch)
{
    char dir[PATH_MAX];

    if (rep_peer_job_dir(r, dir, sizeof(dir)) < 0)
        return;
    for (int rank = 0; rank < r->opt->nnodes * r->opt->nproc; rank++)
        for (int s = 0; s < 2; s++) {
            pthread_mutex_lock(&r->arrived_lock);
            bool keep = keep_epoch && r->arrived && r->arrived[rank * 2 + s] >= keep_epoch;
            pthread_mutex_unlock(&r->arrived_lock);
            if (!keep)
                arena_retire_slot(r->opt->job_name, dir, rank, s, after, "held here for its node");
        }
}

void rep_close(struct rep *r)
{
    if (!r)
        return;
    rep_wait(r);
    if (r->rx_started && write(r->stop[1], "x", 1) == 1)
        pthread_join(r->rx, NULL);
    if (r->stop[0] >= 0)
        close(r->stop[0]), close(r->stop[1]);
    if (r->lfd >= 0)
        close(r->lfd);
    if (r->store)
        ckpt_store_close(r->store);
    if (r->rx_fab)
        ckpt_fab_close(r->rx_fab);
    if (r->tx_fab)
        ckpt_fab_close(r->tx_fab);
    logship_close(r->logs);
    free(r->addrs);
    free(r->arrived);
    free(r->arrivals);
    pthread_mutex_destroy(&r->arrived_lock);
    free(r);
}

void rep_log_totals(const struct rep *r, uint64_t *offered, uint64_t *shipped)
{
    logship_totals(r ? r->logs : NULL, offered, shipped);
}

/* Removes the replicas this node kept for the job (the job is over): the store is laid out as an arena. */
int rep_remove(const struct options *opt)
{
    char root[PATH_MAX];
    struct options o = *opt;

    if (ckpt_peers_root(root, sizeof(root), opt->arena_root) < 0)
        return -ENAMETOOLONG;
    o.arena_root = root;
    return arena_remove(&o);
}
