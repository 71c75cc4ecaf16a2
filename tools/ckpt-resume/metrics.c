/*
 * The node agent's Prometheus endpoint: with CKPT_METRICS_ADDR=HOST:PORT,
 * GET /metrics answers in the text exposition format (version 0.0.4) with
 * what this agent knows of its ranks and of the job (docs/metrics.md lists
 * every metric).  The page is rendered by the agent's own loop, from its
 * own state, at most every RENDER_S and at the job's end, into a buffer
 * the server thread (libmicrohttpd's) only copies under a lock: no request
 * ever reads the job while the loop changes it, and a slow scraper never
 * holds the loop up.  The counters the ranks feed (commits, skipped
 * snapshots, bytes, copy and stall times) are kept here, per rank, across
 * every launch of the job, so they only grow.  A listening socket that
 * cannot be made stops the job before it starts, naming the variable.
 */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <microhttpd.h>

#include "agent.h"
#include "arena.h"
#include "config.h"
#include "follow.h"
#include "log.h"
#include "replay.h"
#include "resume.h"

#define RENDER_S 0.25

/* Upper bounds of the histograms' buckets, in seconds (+Inf follows). */
static const double bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

struct histogram {
    uint64_t count[NBOUNDS + 1]; /* per bucket, not cumulative; the last is +Inf */
    double sum;
};

/* What one rank fed, over every launch. */
struct tally {
    uint64_t committed, bytes, last_bytes;
    uint64_t skipped_before, skipped_now; /* earlier processes', and its current process's count */
    int64_t pid;                          /* the process skipped_now is of */
};

static struct {
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock;
    char *page;            /* the last rendering, under lock */
    size_t len, page_cap;
    char *next;            /* being rendered (the loop's own) */
    size_t next_len, next_cap;
    double rendered_s;
    struct tally *tallies; /* by rank */
    int ntallies;
    struct histogram copy, stall;
    uint64_t restarts, recoveries[2];
    double recovery_s[2], phase_s[4]; /* the last recovery of each kind; its phases */
    uint64_t restored_copy_us, restored_replay_us; /* the slowest rank's, in the last restore */
    double recovered_since; /* the failure time of the last recovery counted */
} M = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const how_names[] = {"standby", "cold"};
static const char *const phase_names[] = {"stop", "replay", "copy_in", "total"};

static void observe(struct histogram *h, double s)
{
    size_t b = 0;
    while (b < NBOUNDS && s > bounds[b])
        b++;
    h->count[b]++;
    h->sum += s;
}

static struct tally *tally_of(int rank)
{
    if (rank < 0 || rank >= RESUME_MAX_RANKS)
        return NULL;
    if (rank >= M.ntallies) {
        int n = M.ntallies ? M.ntallies : 8;
        while (n <= rank)
            n *= 2;
        struct tally *t = realloc(M.tallies, n * sizeof(*t));
        if (!t)
            return NULL;
        memset(t + M.ntallies, 0, (n - M.ntallies) * sizeof(*t));
        M.tallies = t;
        M.ntallies = n;
    }
    return &M.tallies[rank];
}

void metrics_note(const struct ckpt_msg *m)
{
    if (!M.daemon)
        return;
    struct tally *t = tally_of((int)m->rank);
    if (!t)
        return;
    switch (m->kind) {
    case CKPT_MSG_BOUNDARY:
        if (m->pid != t->pid) {
            t->skipped_before += t->skipped_now;
            t->pid = m->pid;
        }
        t->skipped_now = m->generation;
        break;
    case CKPT_MSG_COMMITTED:
        t->committed++;
        t->bytes += m->bytes;
        t->last_bytes = m->bytes;
        observe(&M.copy, m->copy_us / 1e6);
        observe(&M.stall, m->held_us / 1e6);
        break;
    case CKPT_MSG_RESTORED:
        if (m->copy_us > M.restored_copy_us)
            M.restored_copy_us = m->copy_us;
        if (m->held_us > M.restored_replay_us)
            M.restored_replay_us = m->held_us;
        break;
    default:
        break;
    }
}

void metrics_restart(void)
{
    M.restarts++;
    M.restored_copy_us = M.restored_replay_us = 0;
}

static void recovered(const char *how, double stop_s, double total_s)
{
    int k = strcmp(how, "standby") != 0;
    M.recoveries[k]++;
    M.recovery_s[k] = total_s;
    M.phase_s[0] = stop_s;
    M.phase_s[1] = M.restored_replay_us / 1e6;
    M.phase_s[2] = M.restored_copy_us / 1e6;
    M.phase_s[3] = total_s;
}

/* ---- rendering ------------------------------------------------------- */

static void put(const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = M.next_cap - M.next_len;
        va_start(ap, fmt);
        int n = vsnprintf(M.next ? M.next + M.next_len : NULL, M.next ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < room) {
            M.next_len += (size_t)n;
            return;
        }
        size_t cap = M.next_cap ? M.next_cap * 2 : 16384;
        while (cap - M.next_len <= (size_t)n)
            cap *= 2;
        char *p = realloc(M.next, cap);
        if (!p)
            return; /* this rendering is cut short; the next one tries again */
        M.next = p;
        M.next_cap = cap;
    }
}

static void family(const char *name, const char *type, const char *help)
{
    put("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The job's label value, escaped as the format asks (\\, \", \n). */
static char labels[PATH_MAX];

static void set_labels(const struct job *job)
{
    char esc[2 * sizeof(job->opt->job_name)];
    size_t o = 0;
    for (const char *s = job->opt->job_name; *s && o + 2 < sizeof(esc); s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            esc[o++] = '\\';
        esc[o++] = *s == '\n' ? 'n' : *s;
    }
    esc[o] = '\0';
    snprintf(labels, sizeof(labels), "ckpt_job=\"%s\",node=\"%d\"", esc, job->opt->coord ? job->opt->node_rank : 0);
}

static void histogram(const char *name, const char *help, const struct histogram *h)
{
    family(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t b = 0; b < NBOUNDS; b++) {
        cum += h->count[b];
        put("%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, bounds[b], (unsigned long long)cum);
    }
    cum += h->count[NBOUNDS];
    put("%s_bucket{%s,le=\"+Inf\"} %llu\n%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels,
        (unsigned long long)cum, name, labels, h->sum, name, labels, (unsigned long long)cum);
}

/* One line per local rank of a per-rank family; value(i) for local rank i. */
#define PER_RANK(name, type, help, expr)                                                                      \
    do {                                                                                                      \
        family(name, type, help);                                                                             \
        for (int i = 0; i < local_ranks(job); i++) {                                                          \
            int rank = opt->first_rank + i;                                                                   \
            const struct report *r = rank < job->chan.nreports ? &job->chan.reports[rank] : &none;             \
            const struct tally *t = rank < M.ntallies ? &M.tallies[rank] : &zero;                             \
            (void)r;                                                                                          \
            (void)t;                                                                                          \
            put("%s{%s,rank=\"%d\"} %llu\n", name, labels, rank, (unsigned long long)(expr));                 \
        }                                                                                                     \
    } while (0)

static uint64_t standby_at(const struct job *job, int i)
{
    const struct standby *sb = &job->sb;
    return sb->on && sb->started_s && i < sb->nranks && sb->orders[i] ? ckpt_follow_get(&sb->orders[i]->at) : 0;
}

/* The ranks on this node: started with --nproc, or as many as a wrapped
 * torchrun's workers said it started (1 until they said). */
static int local_ranks(const struct job *job)
{
    return job->opt->wrap && job->chan.local_world > 0 ? job->chan.local_world : job->opt->nproc;
}

/* The size of local rank i's replay log, wherever it is kept: on disk
 * (CKPT_REPLAY_LOG_DIR, the arena then holding a page that names it) or
 * in the arena. */
static uint64_t log_bytes(const struct job *job, int i)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    struct stat st;
    int rank = job->opt->first_rank + i;
    int rc;
    if (job->disk.log_dir[0])
        rc = ckpt_rlog_disk_path(path, sizeof(path), job->disk.log_dir, rank);
    else if ((rc = ckpt_arena_path(dir, sizeof(dir), job->opt->arena_root, job->opt->job_name, rank)) == 0)
        rc = ckpt_rlog_arena_path(path, sizeof(path), dir);
    return rc == 0 && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Local rank i's standby: the CPU time it used and its resident memory,
 * from /proc (0 when none runs). */
static void standby_usage(const struct job *job, int i, double *cpu_s, uint64_t *rss)
{
    char path[64], buf[1024];
    *cpu_s = 0;
    *rss = 0;
    /* Under torchrun the standbys are the second torchrun's workers, who report on their channel. */
    const struct standby *sb = &job->sb;
    int rank = job->opt->first_rank + i;
    pid_t pid = !sb->on || !sb->ranks ? 0
              : !job->opt->wrap ? sb->ranks[i].pid
              : sb->running && rank < sb->chan.nreports && !sb->chan.reports[rank].gone ? sb->chan.reports[rank].pid : 0;
    if (pid <= 0)
        return;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    /* utime and stime are fields 14 and 15, counted after the command's closing parenthesis (field 2). */
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (p && sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu", &ut, &st) == 2)
        *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    unsigned long long size, resident;
    if ((f = fopen(path, "r"))) {
        if (fscanf(f, "%llu %llu", &size, &resident) == 2)
            *rss = resident * (uint64_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
}

static double standby_cpu(const struct job *job, int i)
{
    double cpu;
    uint64_t rss;
    standby_usage(job, i, &cpu, &rss);
    return cpu;
}

static uint64_t standby_rss(const struct job *job, int i)
{
    double cpu;
    uint64_t rss;
    standby_usage(job, i, &cpu, &rss);
    return rss;
}

static void render(const struct job *job)
{
    const struct options *opt = job->opt;
    const struct disk *d = &job->disk;
    static const struct report none;
    static const struct tally zero;

    M.next_len = 0;
    set_labels(job);
    PER_RANK("ckpt_snapshots_committed_total", "counter", "Snapshots the rank committed to its host arena.",
             t->committed);
    PER_RANK("ckpt_snapshots_skipped_total", "counter",
             "Snapshots the rank skipped (a copy still running, a peer not ready, a fault).",
             t->skipped_before + t->skipped_now);
    PER_RANK("ckpt_snapshot_bytes_total", "counter", "Bytes the rank's snapshots copied from the device.", t->bytes);
    PER_RANK("ckpt_snapshot_bytes", "gauge", "Bytes the rank's last snapshot copied.", t->last_bytes);
    PER_RANK("ckpt_iteration", "gauge", "The last iteration boundary the rank reported.", r->iteration);
    PER_RANK("ckpt_committed_iteration", "gauge", "The newest iteration the rank holds committed in host memory.",
             r->committed_iteration);
    PER_RANK("ckpt_replay_log_bytes", "gauge", "The size of the rank's replay log, on disk or in the arena.",
             log_bytes(job, i));
    if (job->sb.on)
        PER_RANK("ckpt_standby_lag_iterations", "gauge",
                 "Iterations the rank's standby is behind the rank's last boundary (the rank's iteration while it "
                 "has none).",
                 r->iteration > standby_at(job, i) ? r->iteration - standby_at(job, i) : 0);
    if (job->sb.on) {
        family("ckpt_standby_cpu_seconds_total", "counter", "CPU time the rank's standby used (user and system; a new "
               "standby starts again from 0).");
        for (int i = 0; i < local_ranks(job); i++)
            put("ckpt_standby_cpu_seconds_total{%s,rank=\"%d\"} %.2f\n", labels, opt->first_rank + i,
                standby_cpu(job, i));
        PER_RANK("ckpt_standby_resident_bytes", "gauge", "Resident memory of the rank's standby.", standby_rss(job, i));
    }
    histogram("ckpt_snapshot_copy_seconds", "Device time of each committed snapshot's copies.", &M.copy);
    histogram("ckpt_program_stall_seconds", "How long the program waited for each committed snapshot at its "
              "boundary.", &M.stall);

    family("ckpt_persisted_iteration", "gauge", "The newest iteration persisted whole to disk (0: none).");
    put("ckpt_persisted_iteration{%s} %llu\n", labels, (unsigned long long)d->newest);
    family("ckpt_persist_generations_total", "counter", "Generations persisted to disk whole.");
    put("ckpt_persist_generations_total{%s} %llu\n", labels, (unsigned long long)d->persisted);
    family("ckpt_persist_skipped_total", "counter", "Generations due to disk that were skipped (one still running).");
    put("ckpt_persist_skipped_total{%s} %llu\n", labels, (unsigned long long)d->skipped);
    family("ckpt_persist_errors_total", "counter", "Persists that failed (disk full, I/O error, ...).");
    put("ckpt_persist_errors_total{%s} %llu\n", labels, (unsigned long long)d->failed);
    family("ckpt_persist_bytes_total", "counter", "Bytes written to disk by persists that completed.");
    put("ckpt_persist_bytes_total{%s} %llu\n", labels, (unsigned long long)d->bytes);
    family("ckpt_persist_seconds_total", "counter", "Time spent on persists that completed.");
    put("ckpt_persist_seconds_total{%s} %.6f\n", labels, d->seconds);
    if (job->member) {
        family("ckpt_replicated_iteration", "gauge",
               "The newest iteration every rank of the job holds in a peer's memory (0: none).");
        put("ckpt_replicated_iteration{%s} %llu\n", labels, (unsigned long long)member_durable(job));
    }

    family("ckpt_restarts_total", "counter", "Restarts of the job after a failure.");
    put("ckpt_restarts_total{%s} %llu\n", labels, (unsigned long long)M.restarts);
    family("ckpt_recoveries_total", "counter", "Recoveries by restoring a snapshot, by how: a standby's takeover, or the cold path's replay.");
    for (int k = 0; k < 2; k++)
        put("ckpt_recoveries_total{%s,how=\"%s\"} %llu\n", labels, how_names[k], (unsigned long long)M.recoveries[k]);
    family("ckpt_recovery_seconds", "gauge", "The last recovery of each kind: from the failure seen to every rank "
           "restored.");
    for (int k = 0; k < 2; k++)
        put("ckpt_recovery_seconds{%s,how=\"%s\"} %.6f\n", labels, how_names[k], M.recovery_s[k]);
    family("ckpt_recovery_phase_seconds", "gauge", "The last recovery, by phase: stopping the job, the slowest "
           "rank's replay and copy back, and the whole.");
    for (int k = 0; k < 4; k++)
        put("ckpt_recovery_phase_seconds{%s,phase=\"%s\"} %.6f\n", labels, phase_names[k], M.phase_s[k]);

    family("ckpt_ranks_running", "gauge", "Ranks of this node running now.");
    put("ckpt_ranks_running{%s} %d\n", labels, job->running);
    family("ckpt_unprotected", "gauge", "1 when a rank of this node runs with checkpointing off.");
    put("ckpt_unprotected{%s} %d\n", labels, job->chan.unprotected_rank >= 0);

    /* The two buffers change places: the loop renders into the older one next time. */
    pthread_mutex_lock(&M.lock);
    char *old = M.page;
    size_t old_cap = M.page_cap;
    M.page = M.next;
    M.page_cap = M.next_cap;
    M.len = M.next_len;
    M.next = old;
    M.next_cap = old_cap;
    pthread_mutex_unlock(&M.lock);
}

void metrics_update(const struct job *job, bool now)
{
    if (!M.daemon)
        return;
    double t = ckpt_now_s();
    if (!now && t - M.rendered_s < RENDER_S)
        return;
    M.rendered_s = t;
    /* A recovery is done once its ranks are all restored (one-node jobs say when). */
    if (job->recovering && job->chan.restored_s > job->recovering_since &&
        M.recovered_since != job->recovering_since) {
        M.recovered_since = job->recovering_since;
        recovered(job->recovering, job->stopped_s > job->recovering_since ? job->stopped_s - job->recovering_since : 0,
                  job->chan.restored_s - job->recovering_since);
    }
    render(job);
}

/* ---- serving --------------------------------------------------------- */

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state)
{
    (void)cls, (void)version, (void)upload, (void)upload_size, (void)state;
    struct MHD_Response *resp;
    unsigned status = MHD_HTTP_OK;
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(url, "/metrics")) {
        static const char body[] = "libckpt serves its metrics at /metrics\n";
        status = MHD_HTTP_NOT_FOUND;
        resp = MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    } else {
        pthread_mutex_lock(&M.lock);
        resp = MHD_create_response_from_buffer(M.len, M.page ? M.page : (void *)"", MHD_RESPMEM_MUST_COPY);
        pthread_mutex_unlock(&M.lock);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    }
    if (!resp)
        return MHD_NO;
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* HOST:PORT or [V6]:PORT: a listening socket, or -1 with why. */
static int listen_on(const char *addr, char *why, size_t whylen)
{
    char host[256];
    const char *port;
    if (ckpt_hostport_split(addr, host, sizeof(host), &port) < 0) {
        snprintf(why, whylen, "not HOST:PORT");
        return -1;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    int e = getaddrinfo(host, port, &hints, &res);
    if (e) {
        snprintf(why, whylen, "%s", gai_strerror(e));
        return -1;
    }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

int metrics_start(void)
{
    const char *addr = ckpt_cfg_str(CFG_METRICS_ADDR);
    char why[256];
    if (!addr || !*addr)
        return 0;
    int fd = listen_on(addr, why, sizeof(why));
    if (fd < 0) {
        ckpt_log(CKPT_ERROR, "CKPT_METRICS_ADDR=%s: cannot serve metrics there (%s); give a free HOST:PORT of this "
                 "machine, or unset the variable", addr, why);
        return -EINVAL;
    }
    /* The server's thread takes no signal: SIGCHLD and the ones passed on
     * to the job are the agent loop's, read from its signalfd. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    M.daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, answer, NULL,
                                MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!M.daemon) {
        close(fd);
        ckpt_log(CKPT_ERROR, "CKPT_METRICS_ADDR=%s: cannot start the metrics server; unset the variable", addr);
        return -EINVAL;
    }
    ckpt_log(CKPT_INFO, "metrics at http://%s/metrics", addr);
    return 0;
}

void metrics_stop(void)
{
    if (!M.daemon)
        return;
    MHD_stop_daemon(M.daemon);
    M.daemon = NULL;
    free(M.page);
    free(M.next);
    free(M.tallies);
    M.page = M.next = NULL;
    M.tallies = NULL;
    M.ntallies = 0;
}
