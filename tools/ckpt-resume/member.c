/*
 * A node agent in a job on several nodes (coord.h): it joins the
 * coordinator with what its node holds, sends the copies a recovery asks
 * of it, brings its ranks' arenas to the chosen iteration (promoting a
 * peer's copy or reading the disk where its own is gone), launches its
 * ranks with every other node, and while they run keeps the iteration the
 * coordinator agreed on (the pin file its ranks read), replicates it and
 * persists it.  It acts on the coordinator's word and its own ranks; it
 * never decides a restore point, and losing the coordinator only stops its
 * ranks until one is back.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "coord.h"
#include "log.h"
#include "persist.h"
#include "pins.h"
#include "replay.h"
#include "resume.h"
#include "wire.h"

#define TICK_MS 1000 /* how often the loops look again with nothing to read */
#define CONNECT_RETRY_MS 500
#define RELAY_MS 50       /* ... for a while after a takeover, when communicators are being made */
#define RELAY_FAST_S 60.0

struct member {
    struct job *job;
    struct ckpt_conn conn;          /* to the coordinator (through this agent's bridge), fd -1 when lost */
    int wake[2];                    /* a replication round ended */
    struct rep *rep;
    double timeout_s;
    uint64_t durable, target, replicating, persisting;
    struct coord_held last_held;
    bool stopped, failed_sent, finished;
    bool gave_up_said;              /* the node this agent gave up starting was said to the coordinator */
    int finish_code, restarts;
    unsigned launches;      /* of the ranks on this node: every one after the first is a restart */
    bool planned;                   /* a coordinator planned a launch: a new one goes on counting restarts */
    int plan_restarts;              /* the job's restarts in the last plan */
    uint64_t epoch;                 /* the last plan's (coord.h): replicas carry it, older ones are refused */
    struct ledger ledger;           /* the decisions this node acted under (ledger.c) */
    bool by_standby;                /* the last plan: the standbys take over */
    uint64_t restored;              /* the iteration this launch restored, 0: none */
    bool superseded;                /* what is newer than it was retired (supersede) */
    char standby_port[16];          /* the last plan's port for the standbys' rank 0 */
    struct coord_addr *addrs;
    unsigned naddrs;
    char ip[64];
    struct held_msg { uint16_t type; void *msg; size_t len; } *held; /* read during a takeover, for after */
    size_t nheld_msgs, held_cap;
    uint64_t *ids;                  /* the takeover's unique ids this node has relayed (their names) */
    size_t nids, ids_cap;
    double relay_until;             /* until then the loops look for ids to relay more often */
};

/* ------------------------------------------------------------- the connection */

static void hang_up(struct member *m)
{
    ckpt_conn_close(&m->conn);
    while (m->nheld_msgs) /* the connection's: a new one starts afresh */
        free(m->held[--m->nheld_msgs].msg);
}

/* The coordinator is gone (@rc: how the connection ended), however that
 * was found: by a read, or a write, while the ranks run or between
 * launches.  Ranks running stop; the node then joins again. */
static void lose(struct member *m, int rc)
{
    struct job *job = m->job;
    bool running = job->phase == JOB_RUNNING && job->running;
    hang_up(m);
    ckpt_log(CKPT_WARN, "lost the coordinator (%s)%s",
             rc == -ECONNRESET || rc == -EPIPE ? "it closed the connection" : strerror(-rc),
             running ? ": stopping this node's ranks" : "");
    if (running)
        job_stop(job, SIGTERM);
}

/* The coordinator's next whole message, as ckpt_conn_recv gives it
 * (those read during a takeover first). */
static int recv_msg(struct member *m, uint16_t *type, void **msg, size_t *len)
{
    if (m->nheld_msgs) {
        struct held_msg h = m->held[0];
        memmove(m->held, m->held + 1, --m->nheld_msgs * sizeof(m->held[0]));
        *type = h.type, *msg = h.msg, *len = h.len;
        return 1;
    }
    return ckpt_conn_recv(&m->conn, type, msg, len);
}

static int send_msg(struct member *m, uint16_t type, const void *a, size_t alen, const void *b, size_t blen)
{
    if (m->conn.fd < 0)
        return -ENOTCONN;
    int rc = ckpt_wire_send(m->conn.fd, type, a, alen, b, blen);
    if (rc < 0)
        lose(m, rc);
    return rc;
}

/* Connects to the coordinator, trying again until CKPT_NODE_TIMEOUT x 10 has passed. */
static int connect_coord(struct job *job, struct member *m)
{
    const struct options *opt = job->opt;
    char why[256];
    double give_up = ckpt_now_s() + 10 * m->timeout_s;
    bool said = false;

    for (;;) {
        int rc = ckpt_wire_connect(opt->coord, &m->conn.fd, why, sizeof(why));
        if (rc == 0)
            break;
        m->conn.fd = -1;
        if (rc == -EACCES) {
            ckpt_log(CKPT_ERROR, "%s: every node needs the same CKPT_JOB_KEY", why);
            return rc;
        }
        if (!said)
            ckpt_log(CKPT_INFO, "waiting for this agent's bridge to etcd at %s (%s)", opt->coord, why);
        said = true;
        if (ckpt_now_s() > give_up) {
            ckpt_log(CKPT_ERROR, "no bridge to etcd at %s for %g s (CKPT_NODE_TIMEOUT x 10): giving up",
                     opt->coord, 10 * m->timeout_s);
            return -ETIMEDOUT;
        }
        int sig = job_wait_signal(job, CONNECT_RETRY_MS);
        if (sig) {
            job->out.stop_signal = sig;
            return -EINTR;
        }
    }
    const char *ip = bridge_ip(); /* the bridge is on loopback: this machine's address towards etcd */
    snprintf(m->ip, sizeof(m->ip), "%s", ip ? ip : "127.0.0.1");
    return 0;
}

/* ------------------------------------------------------------- what the node holds */

struct holdings {
    struct ckpt_held *h;
    uint32_t n, cap;
};

static void add(struct holdings *hs, uint32_t rank, uint32_t tier, uint64_t it, uint64_t epoch)
{
    if (hs->n == hs->cap) {
        uint32_t cap = hs->cap ? 2 * hs->cap : 16;
        struct ckpt_held *g = realloc(hs->h, cap * sizeof(*g));
        if (!g)
            return; /* a copy left out only makes recovery choose from less */
        hs->h = g;
        hs->cap = cap;
    }
    hs->h[hs->n++] = (struct ckpt_held){ .rank = rank, .tier = tier, .iteration = it, .epoch = epoch };
}

/* Whether the replay log in @dir can bring a rank to @it. */
static bool log_reaches(const char *dir, uint64_t it)
{
    uint64_t last = 0;
    char why[256];
    int rc = ckpt_rlog_verify(dir, &last, why, sizeof(why));
    return (rc == 0 || rc == -ENODATA) && last >= it;
}

/* Adds the verified snapshots with a usable log of @rank in the job directory @dir. */
static void scan(struct holdings *hs, const char *job, const char *dir, int rank, uint32_t tier)
{
    struct held h;
    char rdir[PATH_MAX + 32];

    if (ckpt_rank_dir(rdir, sizeof(rdir), dir, rank) < 0)
        return;
    arena_scan_rank(job, dir, rank, &h);
    for (int i = 0; i < h.n; i++)
        if (log_reaches(rdir, h.iteration[i]))
            add(hs, (uint32_t)rank, tier, h.iteration[i], h.epoch[i]);
}

struct disk_scan {
    struct holdings *hs;
    const struct options *opt;
};

static void disk_gen(void *arg, const struct ckpt_persist_gen *g)
{
    struct disk_scan *ds = arg;
    if (g->status != 0 || g->nranks != (unsigned)ds->opt->nproc)
        return;
    for (int i = 0; i < ds->opt->nproc; i++)
        add(ds->hs, (uint32_t)(ds->opt->first_rank + i), CKPT_TIER_DISK, g->iteration, g->epoch);
}

/* Everything this node could restore its ranks or its peers' from. */
static void inventory(struct job *job, struct member *m, struct holdings *hs)
{
    const struct options *opt = job->opt;
    char dir[PATH_MAX], why[512];

    if (arena_job_dir(opt, dir, sizeof(dir)) == 0)
        for (int i = 0; i < opt->nproc; i++)
            scan(hs, opt->job_name, dir, opt->first_rank + i, CKPT_TIER_ARENA);
    if (rep_peer_job_dir(m->rep, dir, sizeof(dir)) == 0) {
        int nranks = opt->nnodes * opt->nproc;
        for (int r = 0; r < nranks; r++) {
            char rdir[PATH_MAX + 32];
            struct stat st;
            if (ckpt_rank_dir(rdir, sizeof(rdir), dir, r) == 0 && stat(rdir, &st) == 0)
                scan(hs, opt->job_name, dir, r, CKPT_TIER_PEER);
        }
    }
    if (job->disk.engine) {
        struct disk_scan ds = { .hs = hs, .opt = opt };
        if (ckpt_persist_list(job->disk.engine, opt->job_name, 0, disk_gen, &ds, why, sizeof(why)) < 0)
            ckpt_log(CKPT_DEBUG, "no generation on disk: %s", why);
    }
}

static int join(struct job *job, struct member *m, uint64_t refused)
{
    const struct options *opt = job->opt;
    struct holdings hs = { 0 };
    struct coord_join jn = { .node = (uint32_t)opt->node_rank, .nnodes = (uint32_t)opt->nnodes,
                             .nproc = (uint32_t)opt->nproc, .replicas = (uint32_t)ckpt_cfg_int(CFG_REPLICAS),
                             .refused = refused, .standby = standby_ready(job), .launched = m->planned,
                             .restarts = (uint32_t)m->plan_restarts, .epoch = m->epoch,
                             .flags = job->sb.peer_logs ? COORD_JOIN_PEER_LOGS : 0 };

    inventory(job, m, &hs);
    snprintf(jn.job, sizeof(jn.job), "%s", opt->job_name);
    snprintf(jn.replica.hostport, sizeof(jn.replica.hostport), "%s", rep_address(m->rep));
    jn.nheld = hs.n;
    jn.ndecided = m->ledger.n;
    for (uint32_t i = 0; i < hs.n; i++)
        ckpt_log(CKPT_DEBUG, "holding rank %u iteration %llu in the %s tier", hs.h[i].rank,
                 (unsigned long long)hs.h[i].iteration, ckpt_tier_name(hs.h[i].tier));
    /* One payload: the copies, then the decisions they belong to. */
    size_t held = hs.n * sizeof(*hs.h), len = held + m->ledger.n * sizeof(m->ledger.d[0]);
    char *tail = malloc(len ? len : 1);
    int rc = -ENOMEM;
    if (tail) {
        if (held) /* none held: hs.h is NULL */
            memcpy(tail, hs.h, held);
        memcpy(tail + held, m->ledger.d, len - held);
        rc = send_msg(m, COORD_JOIN, &jn, sizeof(jn), tail, len);
    }
    free(tail);
    free(hs.h);
    return rc;
}

/* ------------------------------------------------------------- the pin file */

/*
 * Tells the ranks what to keep (pins.h): the iterations no snapshot may
 * overwrite (the durable one, the one being replicated, the one being
 * persisted) and the iteration from which on a committed snapshot is kept
 * too, so that every rank of every node stops at the same one for the
 * next round; and the plan's epoch, which their snapshots carry.
 */
static void write_pins(struct job *job, struct member *m)
{
    char dir[PATH_MAX];
    struct ckpt_pins p = { .keep = { m->durable, m->replicating, m->persisting }, .n = 3, .from = m->target,
                           .epoch = m->epoch };

    if (arena_job_dir(job->opt, dir, sizeof(dir)) < 0)
        return;
    mkdir(job->opt->arena_root, 0700);
    mkdir(dir, 0700);
    int rc = ckpt_pins_write(dir, &p);
    if (rc < 0)
        ckpt_log_once(CKPT_WARN, "cannot write the pin file in %s: %s", dir, strerror(-rc));
}

/* ------------------------------------------------------------- while the ranks run */

/* Called by watch.c at a rank's failure: the coordinator stops the others. */
uint64_t member_durable(const struct job *job)
{
    return job->member ? job->member->durable : 0;
}

void member_failed(struct job *job)
{
    struct member *m = job->member;
    if (m->stopped || m->failed_sent)
        return;
    struct coord_status st = { .status = job->out.exit_code, .value = (uint64_t)job->out.failed_rank,
                               .flags = (job->out.no_room_rank >= 0 ? COORD_NO_ROOM : 0) |
                                        (job->out.early ? COORD_EARLY : 0) };
    m->failed_sent = true;
    send_msg(m, COORD_FAILED, &st, sizeof(st), NULL, 0);
}

/* The iterations every rank of this node keeps past the durable one, once each has committed one at the target. */
static bool node_held(struct job *job, struct member *m, struct coord_held *out)
{
    const struct options *opt = job->opt;
    const struct channel *c = &job->chan;
    uint64_t common[2] = { 0, 0 }, top = 0;
    char dir[PATH_MAX], rdir[PATH_MAX + 32], path[PATH_MAX + 48];

    if (arena_job_dir(opt, dir, sizeof(dir)) < 0 || c->nreports < opt->first_rank + opt->nproc)
        return false;
    for (int i = 0; i < opt->nproc; i++) {
        uint64_t k = c->reports[opt->first_rank + i].committed_iteration;
        if (k < m->target)
            return false;
        if (k > top)
            top = k;
    }
    for (int i = 0; i < opt->nproc; i++) {
        uint64_t mine[2] = { 0, 0 };
        bool named = ckpt_rank_dir(rdir, sizeof(rdir), dir, opt->first_rank + i) == 0;
        for (int s = 0; s < 2 && named; s++) {
            struct ckpt_header h;
            if (ckpt_slot_path(path, sizeof(path), rdir, s) < 0)
                continue;
            int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                continue;
            if (pread(fd, &h, sizeof(h), 0) == sizeof(h) && !memcmp(h.magic, CKPT_MAGIC, sizeof(h.magic)) &&
                h.iteration > m->durable)
                mine[s] = h.iteration;
            close(fd);
        }
        if (i == 0) {
            common[0] = mine[0], common[1] = mine[1];
            continue;
        }
        for (int k = 0; k < 2; k++)
            if (common[k] != mine[0] && common[k] != mine[1])
                common[k] = 0;
    }
    if (common[1] > common[0]) {
        uint64_t t = common[0];
        common[0] = common[1], common[1] = t;
    }
    *out = (struct coord_held){ .newest = common[0], .other = common[1], .committed = top };
    return true;
}

/*
 * The launch restored @after and its ranks here went live (or started from
 * the beginning, @after 0): what this node holds of later iterations
 * belongs to the run it replaces.  The ranks retired their own arena's
 * newer snapshots as they went live; the replicas held for peers and, on
 * this node's disks, the generations are retired here.  A restore that is
 * refused retires nothing: the snapshots stay for a restore by hand.
 */
static void supersede(struct job *job, struct member *m, uint64_t after)
{
    if (!after)
        arena_supersede(job->opt, 0);
    rep_supersede(m->rep, after, 0);
    disk_supersede(job, after);
    m->superseded = true;
}

/* After the agent channel was read: says what the node keeps when that changed. */
void member_tick(struct job *job)
{
    struct member *m = job->member;
    struct coord_held h;

    /* Before the first commit of the restored run leaves this node. */
    if (!m->superseded && job->chan.restored_s > 0)
        supersede(job, m, m->restored);
    disk_due(job); /* counts the commits; a persist starts with the next round (replicate) */
    if (job->phase != JOB_RUNNING || m->replicating || m->conn.fd < 0 || !node_held(job, m, &h))
        return;
    if (!memcmp(&h, &m->last_held, sizeof(h)))
        return;
    m->last_held = h;
    send_msg(m, COORD_HELD, &h, sizeof(h), NULL, 0);
}

/* REPLICATE: this node's snapshots of @it go to their holders; it may be
 * persisted too, unless @again (what the ranks restored from). */
static void replicate(struct job *job, struct member *m, uint64_t it, bool again)
{
    m->replicating = it;
    if (!again && disk_due(job) && disk_start(job, it, false) == 0)
        m->persisting = it;
    write_pins(job, m);
    int rc = rep_start(m->rep, it, m->addrs, m->naddrs);
    if (rc < 0) {
        struct coord_status st = { .status = rc, .iteration = it };
        m->replicating = 0;
        send_msg(m, COORD_REPLICATED, &st, sizeof(st), NULL, 0);
    }
}

/* Fills the poll entries watch.c adds for us; returns the milliseconds until we need to run again. */
int member_prepare(struct job *job, struct pollfd *pfd)
{
    struct member *m = job->member;
    pfd[0] = (struct pollfd){ .fd = m->conn.fd, .events = POLLIN };
    pfd[1] = (struct pollfd){ .fd = m->wake[0], .events = POLLIN };
    return m->by_standby && ckpt_now_s() < m->relay_until ? RELAY_MS : TICK_MS;
}

/* ------------------------------------------------------------- a takeover's unique ids */

static bool relayed(struct member *m, uint64_t name)
{
    for (size_t i = 0; i < m->nids; i++)
        if (m->ids[i] == name)
            return true;
    if (m->nids == m->ids_cap) {
        size_t cap = m->ids_cap ? 2 * m->ids_cap : 64;
        uint64_t *p = realloc(m->ids, cap * sizeof(*p));
        if (!p)
            return true; /* said nowhere: the communicator's ranks time out, and the cold path runs */
        m->ids = p, m->ids_cap = cap;
    }
    m->ids[m->nids++] = name;
    return false;
}

/* This node's standbys' new unique ids in @dir not relayed yet: to the coordinator. */
static void send_ids(struct member *m, const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end;
        unsigned long long name = strtoull(e->d_name, &end, 16);
        if (strcmp(end, ".id") != 0 || end - e->d_name != 16 || relayed(m, name))
            continue;
        struct coord_id ci = { .name = name };
        int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
        bool whole = fd >= 0 && read(fd, ci.id, sizeof(ci.id)) == (ssize_t)sizeof(ci.id);
        if (fd >= 0)
            close(fd);
        if (whole)
            send_msg(m, COORD_ID, &ci, sizeof(ci), NULL, 0);
        else
            m->nids--; /* not whole yet: looked at again */
    }
    if (d)
        closedir(d);
}

/* Another node's id, left in @dir for this node's ranks to find, written
 * whole.  No rank here writes that file: the communicator's rank 0, which
 * made the id, runs on that node (comm.c). */
static void keep_id(struct member *m, const char *dir, const void *msg, size_t len)
{
    const struct coord_id *ci = msg;
    char path[PATH_MAX];
    if (len != sizeof(*ci) || !dir[0] || relayed(m, ci->name))
        return;
    if (ckpt_pathf(path, sizeof(path), "%s/%016llx.id", dir, (unsigned long long)ci->name) == 0)
        ckpt_write_whole(path, ci->id, sizeof(ci->id));
}

/*
 * A takeover on several nodes: the communicators of the standbys going
 * live get new unique ids (their rank 0 makes each, comm.c), left in
 * their channel's directory, @dir (CKPT_TAKEOVER_IDS).  Each node's
 * member sends its standbys' to the coordinator and leaves every other
 * node's there, from the takeover on (standby.c calls this as it waits:
 * other messages read meanwhile wait for after it) and while the ranks
 * run (member_events: a communicator is made at its first use).
 */
void member_takeover_ids(struct job *job, const char *dir, bool start)
{
    struct member *m = job->member;
    if (start) {
        m->nids = 0;
        m->relay_until = ckpt_now_s() + RELAY_FAST_S;
    }
    send_ids(m, dir);
    struct pollfd p = { .fd = m->conn.fd, .events = POLLIN };
    for (int rc = m->conn.fd >= 0 ? poll(&p, 1, 0) : 0; rc > 0 && m->conn.fd >= 0;) {
        uint16_t type;
        void *msg = NULL;
        size_t len;
        if ((rc = ckpt_conn_recv(&m->conn, &type, &msg, &len)) <= 0)
            break; /* a lost coordinator is found after the takeover */
        if (type == COORD_ID) {
            keep_id(m, dir, msg, len);
            free(msg);
            continue;
        }
        if (m->nheld_msgs == m->held_cap) {
            size_t cap = m->held_cap ? 2 * m->held_cap : 8;
            struct held_msg *h = realloc(m->held, cap * sizeof(*h));
            if (!h) { /* a message lost: this node joins again, as when the coordinator is lost */
                ckpt_log(CKPT_WARN, "no memory for the coordinator's messages during the takeover: hanging up");
                free(msg);
                hang_up(m);
                break;
            }
            m->held = h, m->held_cap = cap;
        }
        m->held[m->nheld_msgs++] = (struct held_msg){type, msg, len};
    }
}

/* One message from the coordinator while the ranks run. */
static void take(struct job *job, struct member *m, uint16_t type, const void *msg, size_t len)
{
    const struct coord_iter *ci = msg;
    const struct coord_status *st = msg;

    switch (type) {
    case COORD_STOP:
        ckpt_log(CKPT_INFO, "the job stops on every node: %.*s", (int)len, (const char *)msg);
        m->stopped = true;
        if (job->phase == JOB_RUNNING && job->running)
            job_stop(job, SIGTERM);
        break;
    case COORD_FINISH:
        if (len < sizeof(*st))
            break;
        m->finished = m->stopped = true;
        m->finish_code = st->status;
        m->restarts = (int)st->value;
        if (job->phase == JOB_RUNNING && job->running)
            job_stop(job, SIGTERM);
        break;
    case COORD_REPLICATE:
        if (len == sizeof(*ci) && !m->replicating)
            replicate(job, m, ci->iteration, ci->value == COORD_AGAIN);
        break;
    case COORD_ID:
        if (m->by_standby)
            keep_id(m, job->chan.dir, msg, len);
        break;
    case COORD_DURABLE:
        if (len != sizeof(*ci))
            break;
        m->durable = ci->iteration;
        m->target = ci->value;
        ckpt_log(CKPT_DEBUG, "durable: iteration %llu; the ranks keep what they commit from iteration %llu",
                 (unsigned long long)m->durable, (unsigned long long)m->target);
        memset(&m->last_held, 0, sizeof(m->last_held));
        write_pins(job, m);
        member_tick(job);
        break;
    default:
        ckpt_log_once(CKPT_WARN, "the coordinator sent a message of type %u this agent does not know", type);
    }
}

/* Handles what poll() found on our entries. */
void member_events(struct job *job, const struct pollfd *pfd)
{
    struct member *m = job->member;

    /* Every whole message; a part of one waits for the next wake-up. */
    for (int rc = 1; rc > 0 && m->conn.fd >= 0 && pfd[0].fd == m->conn.fd && (pfd[0].revents || m->nheld_msgs);) {
        uint16_t type;
        void *msg = NULL;
        size_t len;
        if ((rc = recv_msg(m, &type, &msg, &len)) < 0)
            lose(m, rc);
        if (rc > 0)
            take(job, m, type, msg, len);
        free(msg);
    }
    if (pfd[1].revents) {
        char buf[16];
        while (read(m->wake[0], buf, sizeof(buf)) > 0)
            ;
    }
    if (m->by_standby && job->chan.dir[0]) /* the ranks are the standbys that took over */
        send_ids(m, job->chan.dir);
    int status;
    if (m->replicating && rep_reap(m->rep, &status)) {
        struct coord_status st = { .status = status, .iteration = m->replicating };
        m->replicating = 0;
        send_msg(m, COORD_REPLICATED, &st, sizeof(st), NULL, 0);
        write_pins(job, m);
    }
    if (m->persisting && !disk_busy(&job->disk)) {
        m->persisting = 0;
        write_pins(job, m);
    }
}

/* ------------------------------------------------------------- between launches */

/*
 * Waits for a message of type @want (or FINISH, or a new PLAN; or STOP
 * while waiting for LAUNCH: a node was lost after the plan, and every node
 * joins again).  Returns the type with *msg (the
 * caller frees it), or -errno when the coordinator is lost, -EINTR after a
 * signal (then the coordinator was told).
 */
static int await(struct job *job, struct member *m, uint16_t want, void **msg, size_t *len)
{
    *msg = NULL;
    *len = 0;
    for (;;) {
        if (m->conn.fd < 0)
            return -ENOTCONN;
        struct pollfd p[2] = { { .fd = m->conn.fd, .events = POLLIN }, { .fd = job->sigfd, .events = POLLIN } };
        int n = poll(p, 2, m->nheld_msgs ? 0 : TICK_MS);
        if (m->nheld_msgs)
            n = 1, p[0].revents |= POLLIN;
        if (n < 0 && errno != EINTR)
            return -errno;
        if (p[1].revents) {
            int sig = job_wait_signal(job, 0);
            if (sig) {
                struct coord_status st = { .status = -sig };
                ckpt_log(CKPT_INFO, "got %s: the job stops on every node", sig_name(sig));
                job->out.stop_signal = sig;
                send_msg(m, COORD_FAILED, &st, sizeof(st), NULL, 0);
            }
        }
        /* A node this agent gave up starting will not join: the job ends now, not after the wait for it. */
        unsigned lost = bridge_gave_up();
        if (lost && !m->gave_up_said) {
            struct coord_status st = { .status = 1, .flags = COORD_NODE_GONE, .value = lost };
            m->gave_up_said = send_msg(m, COORD_FAILED, &st, sizeof(st), NULL, 0) == 0;
        }
        for (int rc = 1; rc > 0 && n > 0 && p[0].revents;) {
            uint16_t type;
            if ((rc = recv_msg(m, &type, msg, len)) < 0) {
                lose(m, rc);
                return rc;
            }
            if (rc == 0)
                break; /* the rest of the message comes later */
            if (type == want || type == COORD_FINISH || type == COORD_PLAN ||
                (want == COORD_LAUNCH && type == COORD_STOP))
                return type;
            free(*msg);
            *msg = NULL;
        }
    }
}

/*
 * Decisions the job made while this node was away (cut off, frozen, or
 * down, on the machine it comes back on): what it holds past the lowest
 * of their restore points belongs to a run one of them replaced, and
 * goes before anything is fetched or restored here (the coordinator
 * already chose no such copy: coord.c's plan).  But for the copies that
 * came under the plan being taken, @epoch: its peers send them as soon as
 * they have taken it, which may be before this node has (seen with eight
 * nodes: a replacement retired the copy it was sent, and its rank then
 * refused to restore).
 */
static void missed(struct job *job, struct member *m, const struct ckpt_decision *d, unsigned n, uint64_t epoch)
{
    uint64_t newest = ledger_newest(&m->ledger), after = ledger_take(job, &m->ledger, d, n);
    if (after == UINT64_MAX)
        return;
    if (newest) /* a node new to the job has nothing of it */
        ckpt_log(CKPT_INFO, "while this node was away the job went back to iteration %llu: what this node holds "
                 "of later iterations belongs to the run that restore replaced, and is retired",
                 (unsigned long long)after);
    arena_supersede(job->opt, after);
    rep_supersede(m->rep, after, epoch);
    if (!disk_busy(&job->disk)) /* the ranks are gone and their persist settled (settle) */
        disk_supersede(job, after);
}

/* Takes a PLAN: the master and the nodes' addresses; sends what is asked of us.  Returns the restore point. */
static int take_plan(struct job *job, struct member *m, const void *msg, size_t len, uint64_t *restore)
{
    const struct coord_plan *p = msg;
    if (len < sizeof(*p) || p->nnodes != (uint32_t)job->opt->nnodes || p->ndecided > COORD_DECIDED_MAX ||
        len != sizeof(*p) + p->nnodes * sizeof(struct coord_addr) + p->nsend * sizeof(struct coord_send) +
                   p->ndecided * sizeof(struct ckpt_decision))
        return -EPROTO;
    const struct coord_addr *addrs = (const void *)(p + 1);
    const struct coord_send *sends = (const void *)(addrs + p->nnodes);
    struct ckpt_decision decided[COORD_DECIDED_MAX];
    memcpy(decided, sends + p->nsend, p->ndecided * sizeof(decided[0]));
    struct coord_addr *copy = malloc(p->nnodes * sizeof(*copy));
    char *maddr = strndup(p->master_addr, sizeof(p->master_addr)), *mport = strndup(p->master_port,
                                                                                    sizeof(p->master_port));
    if (!copy || !maddr || !mport) {
        free(copy), free(maddr), free(mport);
        return -ENOMEM;
    }
    memcpy(copy, addrs, p->nnodes * sizeof(*copy));
    for (uint32_t i = 0; i < p->nnodes; i++)
        copy[i].hostport[sizeof(copy[i].hostport) - 1] = '\0';
    free(m->addrs);
    m->addrs = copy;
    m->naddrs = p->nnodes;
    free(job->master_addr), free(job->master_port);
    job->master_addr = maddr;
    job->master_port = mport;
    *restore = p->restore;
    m->by_standby = p->by_standby == 1;
    m->planned = true;
    m->plan_restarts = (int)p->restarts;
    if (p->epoch > m->epoch) {
        m->epoch = p->epoch;
        rep_epoch(m->rep, p->epoch);
    }
    memcpy(m->standby_port, p->standby_port, sizeof(m->standby_port));
    m->standby_port[sizeof(m->standby_port) - 1] = '\0';
    /* The first launch of a fresh job: what an earlier run left here is not ours. */
    if (p->launch == 1 && !p->restore && arena_remove(job->opt) > 0)
        ckpt_log(CKPT_INFO, "removed the arena an earlier run of job %s left", job->opt->job_name);
    missed(job, m, decided, p->ndecided, p->epoch);
    ledger_take(job, &m->ledger, &(struct ckpt_decision){ .epoch = p->epoch, .restore = p->restore }, 1);
    write_pins(job, m); /* before any rank or standby of the plan commits */
    int rc = rep_fetch(m->rep, sends, p->nsend, m->addrs, m->naddrs);
    struct coord_status st = { .status = rc };
    return send_msg(m, COORD_FETCHED, &st, sizeof(st), NULL, 0);
}

/* Brings every rank's arena to hold @it: its own copy, else a peer's promoted, else the node's disk. */
static void prepare_arena(struct job *job, struct member *m, uint64_t it)
{
    const struct options *opt = job->opt;
    char dir[PATH_MAX], why[512];
    bool need_disk = false;

    if (!it || arena_job_dir(opt, dir, sizeof(dir)) < 0)
        return;
    for (int i = 0; i < opt->nproc; i++) {
        int rank = opt->first_rank + i;
        struct held h;
        arena_scan_rank(opt->job_name, dir, rank, &h);
        if (h.n && (h.iteration[0] == it || (h.n == 2 && h.iteration[1] == it))) {
            ckpt_log(CKPT_INFO, "rank %d restores iteration %llu from this node's arena", rank,
                     (unsigned long long)it);
            continue;
        }
        bool moved;
        if (rep_promote(m->rep, rank, it, &moved, why, sizeof(why)) == 0) {
            ckpt_log(CKPT_INFO, "rank %d restores iteration %llu from a peer's copy (%s into its arena)", rank,
                     (unsigned long long)it, moved ? "moved" : "copied");
            continue;
        }
        need_disk = true;
    }
    if (need_disk) {
        if (disk_read(job, it) == 0)
            ckpt_log(CKPT_INFO, "the ranks of this node restore iteration %llu from disk", (unsigned long long)it);
        else
            ckpt_log(CKPT_WARN, "this node holds no copy of iteration %llu for some rank: it will refuse",
                     (unsigned long long)it);
    }
}

/*
 * After the ranks are gone: waits for a replication round (a peer that
 * died mid-transfer holds it until the fabric's timeout) and a persist to
 * end, taking what the coordinator says meanwhile.
 */
static void settle(struct job *job, struct member *m)
{
    int status;
    while (!rep_reap(m->rep, &status) || disk_busy(&job->disk)) {
        struct pollfd p = { .fd = m->conn.fd, .events = POLLIN };
        for (int rc = m->nheld_msgs ? 1 : poll(&p, m->conn.fd >= 0 ? 1 : 0, 100); rc > 0 && m->conn.fd >= 0;) {
            uint16_t type;
            void *msg = NULL;
            size_t len;
            if ((rc = recv_msg(m, &type, &msg, &len)) < 0)
                lose(m, rc);
            if (rc > 0 && type != COORD_REPLICATE) /* no new round: the launch is over */
                take(job, m, type, msg, len); /* a STOP or FINISH is kept for after */
            free(msg);
        }
    }
}

/*
 * One launch, from LAUNCH to the end of its ranks: new ranks, or this
 * node's standbys going live at @restore when the plan says so (a node
 * whose standbys cannot tells the coordinator, and every node goes on by
 * the cold path).  Returns the restore it refused, else 0.
 */
static uint64_t run_launch(struct job *job, struct member *m, uint64_t restore, uint64_t target)
{
    const char *how = restore && m->launches ? (m->by_standby ? "standby" : "cold") : NULL;
    double since = job->out.failed_s > 0 ? job->out.failed_s : job->stopped_s;
    if (restore && !m->launches && job->opt->spare) { /* a spare in a lost node's place: from when it took it */
        how = m->by_standby ? "spare" : "cold";
        since = bridge_claimed_s();
    }
    job->recovering = how;
    job->recovering_since = how ? since : 0;
    m->restored = restore;
    m->superseded = !restore && !m->launches; /* a first launch from the beginning has nothing to retire */
    if (!m->superseded && !restore) /* started again from the beginning: nothing of the failed run counts */
        supersede(job, m, 0);
    if (m->by_standby && job->sb.peer_logs) /* a spare's standbys: the copies they followed go into the arena */
        prepare_arena(job, m, restore);
    if (m->by_standby && standby_take_over(job, restore) < 0) {
        struct coord_status st = { .status = 1, .flags = COORD_TAKEOVER, .iteration = restore };
        m->failed_sent = true;
        send_msg(m, COORD_FAILED, &st, sizeof(st), NULL, 0);
        job->out.exit_code = 1;
        return 0;
    }
    if (!m->by_standby)
        prepare_arena(job, m, restore);
    m->durable = restore;
    m->target = target;
    m->replicating = m->persisting = 0;
    m->stopped = m->failed_sent = false;
    memset(&m->last_held, 0, sizeof(m->last_held));
    write_pins(job, m);
    if (m->launches++)
        metrics_restart();
    if (!m->by_standby)
        job_launch(job, restore);
    if (standby_set_port(job, m->standby_port) < 0)
        ckpt_log(CKPT_WARN, "cannot start standbys after this launch: %s", strerror(ENOMEM));
    job_watch(job);
    if (how)
        job_recovered(job, how, since);
    settle(job, m);
    m->replicating = m->persisting = 0;
    return job->out.refused_rank >= 0 ? restore : 0;
}

/*
 * The life of this node in the job, as this file's opening says.  Returns
 * the job's exit code as the coordinator gave it; *@restarts is its count.
 */
int member_run(struct job *job, int *restarts)
{
    const struct options *opt = job->opt;
    struct member *m = calloc(1, sizeof(*m));
    uint64_t refused = 0, restore = 0;
    int code = 1;

    *restarts = 0;
    if (!m)
        return 1;
    m->job = job;
    m->conn = CKPT_CONN_CLOSED;
    m->wake[0] = m->wake[1] = -1;
    ledger_load(job, &m->ledger);
    if (opt->spare) { /* the decisions it saw while it waited: the copies it took belong to them */
        struct ckpt_decision d[COORD_DECIDED_MAX];
        ledger_take(job, &m->ledger, d, spare_decisions(d, COORD_DECIDED_MAX));
    }
    m->epoch = ledger_newest(&m->ledger); /* a new plan's is above it */
    m->timeout_s = ckpt_cfg_seconds(CFG_NODE_TIMEOUT);
    job->member = m;
    if (pipe2(m->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        goto out;
    if (connect_coord(job, m) < 0 || rep_open(&m->rep, opt, m->ip, job->disk.log_dir, m->wake[1]) < 0)
        goto out;

    for (;;) {
        void *msg = NULL;
        size_t len;
        if (m->conn.fd < 0 && job->out.stop_signal)
            break; /* told to stop, with no coordinator to tell: this node ends */
        if (m->conn.fd < 0 && connect_coord(job, m) < 0)
            break;
        if (join(job, m, refused) < 0)
            continue;
        int type = await(job, m, COORD_PLAN, &msg, &len);
        while (type == COORD_PLAN) {
            int rc = take_plan(job, m, msg, len, &restore);
            free(msg);
            msg = NULL;
            type = rc < 0 ? rc : await(job, m, COORD_LAUNCH, &msg, &len);
        }
        if (type == COORD_FINISH) {
            const struct coord_status *st = msg;
            if (len >= sizeof(*st)) {
                m->finished = true;
                m->finish_code = st->status;
                m->restarts = (int)st->value;
                if (len > sizeof(*st))
                    ckpt_log(CKPT_INFO, "the coordinator ends the job: %.*s", (int)(len - sizeof(*st)),
                             (const char *)(st + 1));
            }
            free(msg);
            break;
        }
        if (type != COORD_LAUNCH) {
            if (type == COORD_STOP)
                ckpt_log(CKPT_INFO, "the job stops on every node before it starts: %.*s", (int)len,
                         (const char *)msg);
            free(msg);
            continue; /* lost, or stopped before the launch: join again */
        }
        const struct coord_iter *ci = msg;
        uint64_t target = len == sizeof(*ci) ? ci->value : restore + 1;
        free(msg);
        msg = NULL;
        refused = run_launch(job, m, restore, target);
        if (m->finished)
            break;
        if (m->conn.fd < 0)
            continue;
        if (job->out.stop_signal && !m->stopped) {
            struct coord_status st = { .status = -job->out.stop_signal };
            send_msg(m, COORD_FAILED, &st, sizeof(st), NULL, 0);
        } else if (job->out.exit_code == 0 && !m->stopped) {
            send_msg(m, COORD_DONE, NULL, 0, NULL, 0);
            type = await(job, m, COORD_STOP, &msg, &len);
            if (type == COORD_FINISH && len >= sizeof(struct coord_status)) {
                m->finished = true;
                m->finish_code = ((const struct coord_status *)msg)->status;
                m->restarts = (int)((const struct coord_status *)msg)->value;
                free(msg);
                break;
            }
            free(msg);
        } else if (!m->failed_sent && !m->stopped && job->out.exit_code) {
            member_failed(job);
        }
    }
    if (m->finished) {
        code = m->finish_code;
        *restarts = m->restarts;
    } else if (job->out.stop_signal) {
        code = 128 + job->out.stop_signal;
    }
out:
    hang_up(m);
    rep_wait(m->rep);
    uint64_t offered, shipped;
    rep_log_totals(m->rep, &offered, &shipped);
    if (offered)
        ckpt_log(CKPT_INFO, "replay logs to peers: %llu bytes sent, of logs %llu bytes long in all (the rest the "
                 "peers held)", (unsigned long long)shipped, (unsigned long long)offered);
    rep_close(m->rep);
    if (m->wake[0] >= 0)
        close(m->wake[0]), close(m->wake[1]);
    free(m->addrs);
    free(m->ids);
    free(m->held);
    free(m);
    job->member = NULL;
    return code;
}
