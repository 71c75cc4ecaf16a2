/*
 * ckpt-resume's end of the agent channel (runtime/agent.h): a datagram
 * socket in a private directory (mkdtemp, 0700, so only this user's
 * processes can send to it), and what each rank has reported on it during
 * the current launch: its pid, its last iteration boundary and when,
 * its last committed snapshot, whether it restored.  Hang detection reads
 * those times.  Reports are hints about liveness only: the restore point
 * is always taken from the arena itself, never from a message, and a
 * malformed or lost datagram changes nothing but a heartbeat.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "log.h"
#include "resume.h"

/*
 * Ranks send without blocking and lose what does not fit; a larger buffer
 * keeps the heartbeats of many ranks between two reads.
 */
#define CHANNEL_RCVBUF (1 << 20)

/*
 * Creates the private directory and binds the socket in it.  The caller
 * calls channel_close() whatever this returns.
 */
int channel_open(struct channel *c)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    const char *tmp = getenv("TMPDIR");
    int rc;

    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->refused_rank = -1;
    c->no_room_rank = -1;
    c->unprotected_rank = -1;
    if (!tmp || !*tmp)
        tmp = "/tmp";
    /* sun_path is short: a long TMPDIR cannot hold the socket, /tmp can. */
    if (strlen(tmp) + sizeof("/ckpt-resume.XXXXXX") > sizeof(c->dir))
        tmp = "/tmp";
    snprintf(c->dir, sizeof(c->dir), "%s/ckpt-resume.XXXXXX", tmp);
    if (!mkdtemp(c->dir)) {
        rc = -errno;
        ckpt_log(CKPT_ERROR, "cannot create a private directory for the agent socket (%s): %s", c->dir,
                 strerror(-rc));
        c->dir[0] = '\0';
        return rc;
    }
    snprintf(c->path, sizeof(c->path), "%s/agent", c->dir);
    memcpy(addr.sun_path, c->path, strlen(c->path) + 1);

    c->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || bind(c->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        rc = -errno;
        ckpt_log(CKPT_ERROR, "cannot open the agent socket %s: %s", c->path, strerror(-rc));
        return rc;
    }
    int size = CHANNEL_RCVBUF;
    setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)); /* a hint: the default works too */
    return 0;
}

/* Removes what the ranks left in the directory (CKPT_TAKEOVER_IDS). */
void channel_clear(struct channel *c)
{
    DIR *d = c->dir[0] ? opendir(c->dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "agent") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
}

/* Closes the socket and removes it and its directory. */
void channel_close(struct channel *c)
{
    if (c->fd >= 0)
        close(c->fd);
    if (c->dir[0]) {
        channel_clear(c);
        unlink(c->path);
        if (rmdir(c->dir) < 0)
            ckpt_log(CKPT_WARN, "cannot remove %s: %s", c->dir, strerror(errno));
    }
    free(c->reports);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

/* Drops what was sent but not read yet. */
static void drain(struct channel *c)
{
    struct ckpt_msg m;
    while (recv(c->fd, &m, sizeof(m), 0) >= 0 || errno == EINTR)
        ;
}

/*
 * Forgets every report, for a new launch.  What the previous launch's ranks
 * sent just before they died must not count for the new ones; they are all
 * gone when this is called, so nothing sent later can be theirs.
 */
void channel_reset(struct channel *c)
{
    drain(c);
    for (int i = 0; i < c->nreports; i++)
        c->skipped += c->reports[i].skipped;
    if (c->reports)
        memset(c->reports, 0, c->nreports * sizeof(*c->reports));
    c->restored = 0;
    c->restored_s = 0;
    c->refused_rank = -1;
    c->no_room_rank = -1;
}

/* The report of @rank, grown as ranks appear; NULL past RESUME_MAX_RANKS or without memory. */
static struct report *report_of(struct channel *c, uint32_t rank)
{
    if (rank >= RESUME_MAX_RANKS)
        return NULL;
    if ((int)rank >= c->nreports) {
        int n = c->nreports ? c->nreports : 8;
        while (n <= (int)rank)
            n *= 2;
        struct report *r = realloc(c->reports, n * sizeof(*r));
        if (!r)
            return NULL;
        memset(r + c->nreports, 0, (n - c->nreports) * sizeof(*r));
        c->reports = r;
        c->nreports = n;
    }
    return &c->reports[rank];
}

/* The ranks that reported in this launch. */
static int here(const struct channel *c)
{
    int n = 0;
    for (int i = 0; i < c->nreports; i++)
        n += c->reports[i].pid != 0;
    return n;
}

int channel_elsewhere(const struct channel *c)
{
    return c->seen_here && c->world > c->seen_here ? c->world : 0;
}

/* Takes in one message. */
static void take(struct channel *c, const struct ckpt_msg *m, const struct options *opt)
{
    struct report *r = report_of(c, m->rank);
    if (!r) {
        ckpt_log_once(CKPT_WARN, "rank %u is past the %d ranks this agent watches: its reports are ignored",
                      m->rank, RESUME_MAX_RANKS);
        return;
    }
    r->pid = (pid_t)m->pid;
    r->gone = false;
    switch (m->kind) {
    case CKPT_MSG_HELLO:
        ckpt_log(CKPT_DEBUG, "rank %u (pid %lld) is up", m->rank, (long long)m->pid);
        if (m->bytes <= RESUME_MAX_NPROC && (int)m->bytes > c->local_world)
            c->local_world = (int)m->bytes;
        if (m->generation <= RESUME_MAX_RANKS && (int)m->generation > c->world)
            c->world = (int)m->generation;
        break;
    case CKPT_MSG_BOUNDARY:
        r->ticking = true;
        r->boundary_s = ckpt_now_s();
        r->iteration = m->iteration;
        r->skipped = m->generation;
        if (r->committed_iteration && m->iteration - r->committed_iteration > c->worst_lag &&
            m->iteration > r->committed_iteration)
            c->worst_lag = m->iteration - r->committed_iteration;
        break;
    case CKPT_MSG_COMMITTED:
        r->committed_iteration = m->iteration;
        c->committed++;
        /* By a commit every rank here has said hello: its peers took part. */
        if (here(c) > c->seen_here)
            c->seen_here = here(c);
        if (opt->wrap && !c->elsewhere_said && channel_elsewhere(c)) {
            c->elsewhere_said = true;
            ckpt_log(CKPT_WARN, "the ranks say WORLD_SIZE=%d, and %d of them run under this ckpt-resume: the others "
                     "run under another agent, which would restore them from an iteration of its own choosing, so "
                     "a failure cannot be restored from here (CKPT_FALLBACK=clean starts the job again from the "
                     "beginning); run one ckpt-resume --coord etcd://HOST:PORT --nnodes N --nproc P -- CMD per node",
                     c->world, c->seen_here);
        }
        if (m->iteration > c->newest)
            c->newest = m->iteration;
        ckpt_log(CKPT_DEBUG, "rank %u committed generation %llu (iteration %llu)", m->rank,
                 (unsigned long long)m->generation, (unsigned long long)m->iteration);
        break;
    case CKPT_MSG_RESTORED:
        if (r->restored)
            break;
        r->restored = true;
        c->restored++;
        ckpt_log(CKPT_DEBUG, "rank %u restored iteration %llu", m->rank, (unsigned long long)m->iteration);
        /* The ranks: those started with --nproc, or as many as a wrapped
         * launcher's said it started (LOCAL_WORLD_SIZE), when they said. */
        int want = opt->wrap ? c->local_world : opt->nproc;
        if (want && c->restored == want) {
            c->restored_s = ckpt_now_s();
            ckpt_log(CKPT_INFO, "%s restored iteration %llu (generation %llu) and run%s on",
                     want == 1 ? "the rank" : "all ranks", (unsigned long long)m->iteration,
                     (unsigned long long)m->generation, want == 1 ? "s" : "");
        }
        break;
    case CKPT_MSG_REFUSED:
        if (c->refused_rank < 0)
            c->refused_rank = (int)m->rank;
        break;
    case CKPT_MSG_NO_ROOM:
        if (c->no_room_rank < 0)
            c->no_room_rank = (int)m->rank;
        break;
    case CKPT_MSG_UNPROTECTED:
        if (c->unprotected_rank < 0)
            c->unprotected_rank = (int)m->rank;
        break;
    default:
        ckpt_log_once(CKPT_DEBUG, "agent message of unknown kind %u ignored", m->kind);
    }
}

void channel_carry(struct channel *to, struct channel *from)
{
    for (int i = 0; i < from->nreports; i++)
        from->skipped += from->reports[i].skipped, from->reports[i].skipped = 0;
    to->committed += from->committed;
    to->skipped += from->skipped;
    to->newest = from->newest > to->newest ? from->newest : to->newest;
    to->worst_lag = from->worst_lag > to->worst_lag ? from->worst_lag : to->worst_lag;
    if (to->unprotected_rank < 0)
        to->unprotected_rank = from->unprotected_rank;
    to->world = from->world > to->world ? from->world : to->world;
    to->seen_here = from->seen_here > to->seen_here ? from->seen_here : to->seen_here;
    to->elsewhere_said |= from->elsewhere_said;
    from->committed = from->skipped = from->newest = from->worst_lag = 0;
    from->unprotected_rank = -1;
}

bool channel_ticked(const struct channel *c)
{
    for (int i = 0; i < c->nreports; i++)
        if (c->reports[i].ticking)
            return true;
    return false;
}

/* Reads every datagram waiting; malformed ones are dropped. */
void channel_read(struct channel *c, const struct options *opt)
{
    struct ckpt_msg m;

    for (;;) {
        ssize_t n = recv(c->fd, &m, sizeof(m), MSG_TRUNC);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (n != sizeof(m) || m.magic != CKPT_MSG_MAGIC || m.version != CKPT_MSG_VERSION) {
            ckpt_log_once(CKPT_WARN, "dropped a malformed message on the agent socket (%zd bytes)", n);
            continue;
        }
        take(c, &m, opt);
        metrics_note(&m);
    }
}

/*
 * Writes to @out what the ranks of the last launch reported as their
 * newest committed snapshots ("rank 0 iteration 27, rank 1 iteration 26"),
 * the first few of them, or nothing when none reported one.  It explains
 * an arena without a common iteration: each rank's newest commit is there,
 * but a rank stopped while copying the next one has invalidated the slot
 * of the one before.
 */
void channel_committed(const struct channel *c, char *out, size_t outlen)
{
    size_t n = 0;
    int shown = 0;

    out[0] = '\0';
    for (int i = 0; i < c->nreports && n < outlen; i++) {
        const struct report *r = &c->reports[i];
        if (!r->committed_iteration)
            continue;
        if (shown++ == 4) {
            n += snprintf(out + n, outlen - n, ", ...");
            break;
        }
        n += snprintf(out + n, outlen - n, "%srank %d iteration %llu", n ? ", " : "", i,
                      (unsigned long long)r->committed_iteration);
    }
}

/* The process @pid has ended: a rank it reported as is no longer watched. */
void channel_ended(struct channel *c, pid_t pid)
{
    for (int i = 0; i < c->nreports; i++)
        if (c->reports[i].pid == pid)
            c->reports[i].gone = true;
}

/*
 * The rank silent the longest once that is @timeout_s since its last
 * boundary, or -1; *@next_s is then the seconds until one could be (-1:
 * none is watched).  Ranks stuck waiting for a hung peer go silent too:
 * the longest silence points at the one that stopped first.  A rank whose
 * process has ended is not hung: it may have finished, and its exit is
 * judged when it is reaped.
 */
int channel_hung(struct channel *c, double timeout_s, double *next_s)
{
    double now = ckpt_now_s();
    int hung = -1;

    *next_s = -1;
    for (int i = 0; i < c->nreports; i++) {
        struct report *r = &c->reports[i];
        if (!r->ticking || r->gone)
            continue;
        double left = r->boundary_s + timeout_s - now;
        if (left <= 0) {
            if (kill(r->pid, 0) < 0 && errno == ESRCH)
                r->gone = true;
            else if (hung < 0 || r->boundary_s < c->reports[hung].boundary_s)
                hung = i;
            continue;
        }
        if (*next_s < 0 || left < *next_s)
            *next_s = left;
    }
    return hung;
}
