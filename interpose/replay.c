/*
 * Restore by deterministic replay.  A fresh run records, per iteration,
 * what its host could observe of the device: the allocation sequence, the
 * bytes of every device-to-host copy, elapsed times.  A restarted run with
 * CKPT_RESTORE=k re-runs the program's host code from the start with the
 * device work suppressed (the hooks return at once), serves those
 * observations back from the log, and at the k-th boundary copies the
 * snapshot of iteration k into the matching allocations and goes live.
 * Any difference from the log, or a snapshot that does not verify, ends the
 * process with CKPT_EXIT_RESTORE and the reason: ckpt-resume then tries an
 * older snapshot or a clean start.  It never lets a program continue on
 * state that did not verify.
 */
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "aside.h"
#include "agent.h"
#include "arena.h"
#include "boundary.h"
#include "config.h"
#include "follow.h"
#include "image.h"
#include "interpose.h"
#include "log.h"
#include "registry.h"
#include "replay.h"
#include "util.h"

int ckpt_replaying;
static bool recording;
static uint64_t target;

/* A standby: its orders, its rank's arena directory, and how often the
 * cut moved (threads that ran dry wait for it to move again). */
static struct ckpt_follow *orders;
static char follow_dir[PATH_MAX + 64];
static uint64_t cuts;

/* The snapshot being restored, mapped from its slot. */
static const char *image;
static size_t image_len;
static struct ckpt_header image_hdr;
static int image_slot;
static double replay_start;


void ckpt_refuse(const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    const char *out = ckpt_world_output();
    const char *tail = out ? "; what the program printed while it replayed is in " : "";
    if (target == UINT64_MAX) /* a standby with no takeover ordered yet */
        ckpt_log(CKPT_ERROR, "the standby stops: %s%s%s", why, tail, out ? out : "");
    else
        ckpt_log(CKPT_ERROR, "restore of iteration %llu refused: %s%s%s", (unsigned long long)target, why, tail,
                 out ? out : "");
    /* Said to the agent too: a launcher between us may not pass the exit status on. */
    ckpt_agent_send(CKPT_MSG_REFUSED, target, 0);
    _exit(CKPT_EXIT_RESTORE);
}

/*
 * A program that crashes while it replays did not see what its recorded
 * run saw: that is a refusal (ckpt-resume falls back to an older snapshot,
 * said with the frames of the crash), not a failure to try again with the
 * same snapshot.  The handlers are libckpt's from the first replayed call
 * until the restore goes live, then the program's again.
 */
static const int fatal[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
#define NFATAL (sizeof(fatal) / sizeof(fatal[0]))
static struct sigaction program_handlers[NFATAL];
static char crash_line[NFATAL][400]; /* made before: a handler may only write */
static bool guarded;

static void crashed(int sig)
{
    int fd = ckpt_log_fd(); /* the program's stderr is set aside while it replays */
    for (size_t i = 0; i < NFATAL; i++)
        if (fatal[i] == sig && write(fd, crash_line[i], strlen(crash_line[i])) < 0)
            break;
    void *frames[48];
    int n = backtrace(frames, 48);
    backtrace_symbols_fd(frames, n, fd);
    ckpt_agent_send(CKPT_MSG_REFUSED, target, 0);
    _exit(CKPT_EXIT_RESTORE);
}

static void guard(bool on)
{
    if (on == guarded)
        return;
    if (on) {
        void *warm[1];
        backtrace(warm, 1); /* loads the unwinder now, not in the handler */
        const char *rank = getenv("RANK");
        struct sigaction sa = {.sa_handler = crashed};
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < NFATAL; i++) {
            snprintf(crash_line[i], sizeof(crash_line[i]),
                     "libckpt[rank %s]: error: restore of iteration %llu refused: the program crashed while it "
                     "replayed (%s), where its recorded run went on; where it crashed:\n",
                     rank ? rank : "0", (unsigned long long)target, strsignal(fatal[i]));
            sigaction(fatal[i], &sa, &program_handlers[i]);
        }
    } else {
        for (size_t i = 0; i < NFATAL; i++)
            sigaction(fatal[i], &program_handlers[i], NULL);
    }
    guarded = on;
}

/* Maps the slot holding iteration k, verified; refuses otherwise. */
static void load_image(const char *dir)
{
    char path[PATH_MAX + 16], why[256] = "", whys[2][300] = {"", ""};
    for (int s = 0; s < 2; s++) {
        int fd = ckpt_slot_path(path, sizeof(path), dir, s) == 0 ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
            snprintf(whys[s], sizeof(whys[s]), "slot%d is empty", s);
            if (fd >= 0)
                close(fd);
            continue;
        }
        void *m = ckpt_mmap_aside((size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
        close(fd);
        struct ckpt_header h;
        if (m == MAP_FAILED || ckpt_image_verify(m, (size_t)st.st_size, &h, why, sizeof(why)) < 0) {
            snprintf(whys[s], sizeof(whys[s]), "slot%d: %s", s, m == MAP_FAILED ? strerror(errno) : why);
            if (m != MAP_FAILED)
                munmap(m, (size_t)st.st_size);
            continue;
        }
        if (h.iteration != target) {
            snprintf(whys[s], sizeof(whys[s]), "slot%d holds iteration %llu", s, (unsigned long long)h.iteration);
            munmap(m, (size_t)st.st_size);
            continue;
        }
        image = m;
        image_len = (size_t)st.st_size;
        image_hdr = h;
        image_slot = s;
        return;
    }
    ckpt_refuse("no verified snapshot of it in %s (%s; %s)", dir, whys[0], whys[1]);
}

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t live_cond = PTHREAD_COND_INITIALIZER;

/* The longest a standby caught up with its orders sleeps before it looks
 * at them again; a new order wakes it at once (ckpt_follow_order). */
#define FOLLOW_WAIT_MS 100

static void nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * CKPT_STANDBY_CPU: the CPU time this standby (all its threads) may use
 * per second while it follows.  A bucket of at most one second's
 * allowance: at a boundary, a standby that has spent more than it earned
 * waits until it has earned it back.  A takeover ordered meanwhile wakes
 * it, and from then on nothing holds it back.
 */
static void within_budget(void)
{
    static bool started;
    static double allowance, wall0, cpu0;
    double rate = ckpt_cfg_seconds(CFG_STANDBY_CPU);
    if (rate <= 0)
        return;
    for (;;) {
        double wall = clock_s(CLOCK_MONOTONIC), cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        allowance = started ? allowance + (wall - wall0) * rate - (cpu - cpu0) : rate;
        if (allowance > rate)
            allowance = rate;
        started = true;
        wall0 = wall, cpu0 = cpu;
        uint32_t seen = ckpt_follow_seen(orders);
        if (allowance >= 0 || ckpt_follow_get(&orders->takeover))
            return;
        double wait_ms = -allowance / rate * 1000;
        ckpt_follow_wait(orders, seen, wait_ms < FOLLOW_WAIT_MS ? (int)wait_ms + 1 : FOLLOW_WAIT_MS);
    }
}

/* At the boundary of iteration at (0: before the first), moves the cut to
 * the end of the next iteration as soon as the orders allow and the log
 * holds it: false when the orders say go live here instead. */
static bool follow_on(uint64_t at)
{
    char why[512];
    uint64_t next;
    within_budget();
    for (;;) {
        uint32_t seen = ckpt_follow_seen(orders);
        uint64_t takeover = ckpt_follow_get(&orders->takeover), allowed = ckpt_follow_get(&orders->allowed);
        if (takeover && takeover == at)
            return false;
        if (takeover && takeover < at)
            ckpt_refuse("the standby had replayed past iteration %llu, where it was to go live",
                        (unsigned long long)takeover);
        int rc = ckpt_rlog_follow_next(takeover > allowed ? takeover : allowed, &next, why, sizeof(why));
        if (rc == 0)
            break;
        if (rc == -EBUSY) /* caught up with the orders: sleep until new ones */
            ckpt_follow_wait(orders, seen, FOLLOW_WAIT_MS);
        else if (rc == -EAGAIN) /* the rank has not written it yet */
            nap_ms(1);
        else
            ckpt_refuse("%s", why);
    }
    pthread_mutex_lock(&live_lock);
    __atomic_add_fetch(&cuts, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&live_cond);
    pthread_mutex_unlock(&live_lock);
    return true;
}

/* Where this rank keeps its log on disk: in CKPT_REPLAY_LOG_DIR, named
 * after the rank of its arena directory (ckpt_rlog_disk_path); NULL when
 * it lives in the arena.  A directory that is not there stops the job
 * before it trains. */
static const char *disk_log(const char *dir)
{
    static char path[PATH_MAX];
    const char *logdir = ckpt_cfg_str(CFG_REPLAY_LOG_DIR);
    struct stat st;

    if (!logdir || !*logdir || strcmp(logdir, CKPT_LOG_IN_ARENA) == 0)
        return NULL;
    if (stat(logdir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        ckpt_log(CKPT_ERROR, "CKPT_REPLAY_LOG_DIR=%s: not a directory; make it, set it to \"" CKPT_LOG_IN_ARENA
                 "\", or unset the variable", logdir);
        _exit(2);
    }
    const char *base = strrchr(dir, '/'); /* rank<N>, as ckpt_arena_path names it */
    int rank;
    if (!ckpt_rank_dir_name(base ? base + 1 : dir, &rank) ||
        ckpt_rlog_disk_path(path, sizeof(path), logdir, rank) < 0) {
        ckpt_log(CKPT_ERROR, "CKPT_REPLAY_LOG_DIR=%s: too long a path", logdir);
        _exit(2);
    }
    return path;
}

/* A standby: replays the rank's log as the rank writes it, up to where its
 * orders allow, holding nothing of the rank's (its arena is taken at
 * takeover); what it prints went aside from its first line (world.c). */
static void follow_init(const char *dir, uint64_t max)
{
    char why[512];
    snprintf(follow_dir, sizeof(follow_dir), "%s", dir);
    if (!(orders = ckpt_follow_map(dir, 0)))
        ckpt_refuse("no orders for a standby in %s/%s: %s", dir, CKPT_FOLLOW_FILE, strerror(errno));
    ckpt_follow_set(&orders->pid, (uint64_t)getpid());
    ckpt_rlog_serve_sockets(ckpt_cfg_int(CFG_FOLLOW_ALONE));
    const char *log = ckpt_cfg_str(CFG_FOLLOW_LOG);
    if (ckpt_rlog_open_follow(log && *log ? log : dir, disk_log(dir), max, why, sizeof(why)) < 0)
        ckpt_refuse("%s", why);
    __atomic_store_n(&ckpt_replaying, 1, __ATOMIC_RELEASE);
    recording = true;
    ckpt_standby_mem_begin();
    ckpt_v_begin();
    replay_start = ckpt_now_s();
    target = UINT64_MAX; /* not known until the orders name it */
    ckpt_refuse_static_nccl();
    ckpt_log(CKPT_INFO, "standing by: following the replay log in %s", dir);
    if (!follow_on(0))
        ckpt_refuse("a standby cannot go live before the first iteration");
}

void ckpt_history_init(const char *dir, uint64_t restore)
{
    char why[512];
    uint64_t max = (uint64_t)ckpt_cfg_int(CFG_REPLAY_LOG_MAX);

    target = restore;
    if (ckpt_cfg_int(CFG_FOLLOW)) {
        follow_init(dir, max);
        return;
    }
    if (!restore) {
        if (ckpt_rlog_create(dir, disk_log(dir), max, why, sizeof(why)) < 0)
            ckpt_log(CKPT_WARN, "no replay log (%s): snapshots of this run cannot be restored", why);
        else
            recording = true;
        return;
    }
    load_image(dir);
    if (ckpt_rlog_open_replay(dir, disk_log(dir), restore, max, why, sizeof(why)) < 0)
        ckpt_refuse("%s", why);
    __atomic_store_n(&ckpt_replaying, 1, __ATOMIC_RELEASE);
    guard(true);
    recording = true;
    ckpt_world_quiet();
    ckpt_history_release_pollers();
    replay_start = ckpt_now_s();
    ckpt_log(CKPT_INFO, "replaying %llu iterations to restore generation %llu", (unsigned long long)restore,
             (unsigned long long)image_hdr.generation);
}

bool ckpt_history_recording(void)
{
    return recording;
}

/* This thread did all it did before the snapshot in the recorded run: it
 * waits for the restore, then goes on live.  Work it queued past that point
 * would otherwise be suppressed, and lost to the resumed run.  A standby's
 * thread waits for the cut to move past cut0 (the value of cuts before it
 * found itself dry) as well: true when it did, and the thread has more. */
static bool wait_live(uint64_t cut0)
{
    pthread_mutex_lock(&live_lock);
    while (__atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE) && __atomic_load_n(&cuts, __ATOMIC_ACQUIRE) == cut0)
        pthread_cond_wait(&live_cond, &live_lock);
    pthread_mutex_unlock(&live_lock);
    return __atomic_load_n(&ckpt_replaying, __ATOMIC_ACQUIRE);
}

bool ckpt_history_next(uint64_t thread, int type, struct ckpt_rl_rec *rec)
{
    char why[256];
    /* Fewer calls queued device work than in the recorded run: the rest
     * of the count goes (a call queued more often is suppressed too). */
    for (;;) {
        uint64_t cut0 = __atomic_load_n(&cuts, __ATOMIC_ACQUIRE);
        if (type != CKPT_RL_D2H)
            ckpt_history_late_copies(thread);
        while (type != CKPT_RL_WORK && ckpt_rlog_peek(thread, NULL) == CKPT_RL_WORK)
            ckpt_rlog_next(thread, CKPT_RL_WORK, rec, why, sizeof(why));
        int rc = ckpt_rlog_next(thread, type, rec, why, sizeof(why));
        if (rc == 0) {
            ckpt_history_count(type, rec->a);
            return true;
        }
        /* The thread ending the iterations never runs dry: its last record
         * before the cut is the target's ITER. */
        if (rc != -ENODATA)
            ckpt_refuse("the program diverged from its recorded run: %s", why);
        if (!wait_live(cut0))
            return false;
    }
}

bool ckpt_history_dry_wait(void)
{
    for (;;) {
        uint64_t cut0 = __atomic_load_n(&cuts, __ATOMIC_ACQUIRE);
        ckpt_history_late_copies(ckpt_thread_key());
        if (!ckpt_rlog_dry(ckpt_thread_key()))
            return false;
        if (!wait_live(cut0))
            return true;
    }
}

/* Replaying: the type of this thread's next record (into rec), past the
 * device work it counts; a standby waits for the cut to show one.  0:
 * the thread went live. */
static int peek_wait(uint64_t thread, struct ckpt_rl_rec *rec)
{
    char why[256];
    for (;;) {
        uint64_t cut0 = __atomic_load_n(&cuts, __ATOMIC_ACQUIRE);
        ckpt_history_late_copies(thread);
        while (ckpt_rlog_peek(thread, NULL) == CKPT_RL_WORK)
            ckpt_rlog_next(thread, CKPT_RL_WORK, rec, why, sizeof(why));
        int type = ckpt_rlog_peek(thread, rec);
        if (type)
            return type;
        if (!wait_live(cut0))
            return 0;
    }
}

uint64_t ckpt_history_alloc_at(void)
{
    struct ckpt_rl_rec rec;
    return peek_wait(ckpt_thread_key(), &rec) == CKPT_RL_ALLOC ? rec.c : 0;
}

bool ckpt_history_excl(int *err)
{
    uint64_t thread = ckpt_thread_key();
    struct ckpt_rl_rec rec;
    if (peek_wait(thread, &rec) != CKPT_RL_VALUE || rec.a != CKPT_VALUE_OPEN_EXCL)
        return false;
    ckpt_history_next(thread, CKPT_RL_VALUE, &rec);
    *err = (int)rec.b;
    return true;
}

/* Allocations whose address in replay is not the recorded one: the
 * program may keep their addresses, in host or in device memory. */
static struct moved {
    uint64_t ordinal, addr, recorded;
} *moved;
static size_t nmoved, moved_cap;
static pthread_mutex_t moved_lock = PTHREAD_MUTEX_INITIALIZER;

void ckpt_replay_address(uint64_t ordinal, uint64_t addr, uint64_t recorded)
{
    if (addr == recorded)
        return;
    pthread_mutex_lock(&moved_lock);
    if (nmoved == moved_cap) {
        size_t cap = moved_cap ? moved_cap * 2 : 16;
        struct moved *m = realloc(moved, cap * sizeof(*m));
        if (!m) {
            pthread_mutex_unlock(&moved_lock);
            ckpt_refuse("out of host memory");
        }
        moved = m;
        moved_cap = cap;
    }
    moved[nmoved++] = (struct moved){ordinal, addr, recorded};
    pthread_mutex_unlock(&moved_lock);
}

const char *ckpt_obs_name(enum ckpt_obs what)
{
    static const char *const names[] = {
        [CKPT_OBS_STREAM_SYNC] = "cuStreamSynchronize", [CKPT_OBS_CTX_SYNC] = "cuCtxSynchronize",
        [CKPT_OBS_EVENT_SYNC] = "cuEventSynchronize",   [CKPT_OBS_EVENT_QUERY] = "cuEventQuery",
        [CKPT_OBS_STREAM_QUERY] = "cuStreamQuery",      [CKPT_OBS_DTOH] = "a device-to-host copy",
        [CKPT_OBS_HTOD] = "a host-to-device copy",      [CKPT_OBS_MEMCPY] = "cuMemcpy",
        [CKPT_OBS_BOUNDARY] = "the end of an iteration",
    };
    return what < sizeof(names) / sizeof(names[0]) && names[what] ? names[what] : "an unknown observation";
}

/* Every thread has had what it saw before the snapshot: a thread that
 * lags behind gets 60 s to catch up. */
static void wait_threads(void)
{
    uint64_t thread = 0;
    size_t left = 0;
    for (int i = 0; i < 6000 && (left = ckpt_rlog_left(&thread)); i++)
        usleep(10000);
    if (left)
        ckpt_refuse("a thread of the program (key %016llx) did not come back to where it was at the snapshot "
                    "(%zu observations short)", (unsigned long long)thread, left);
}

/* Nothing the program keeps points where the recorded run's allocations
 * were not. */
static void check_addresses(const struct ckpt_alloc *live, size_t n)
{
    pthread_mutex_lock(&moved_lock);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < nmoved; k++) {
            if (moved[k].ordinal != live[i].ordinal)
                continue;
            pthread_mutex_unlock(&moved_lock);
            ckpt_refuse("allocation %llu (%llu bytes) is at 0x%llx in the replaying run and was at 0x%llx in "
                        "the recorded run: pointers the program keeps to it would dangle (run the job under "
                        "ckpt-resume, which keeps address-space randomisation off)",
                        (unsigned long long)live[i].ordinal, (unsigned long long)live[i].size,
                        (unsigned long long)moved[k].addr, (unsigned long long)moved[k].recorded);
        }
    }
    pthread_mutex_unlock(&moved_lock);
}

/* The device holds what the snapshot holds: every record is read back
 * and compared with the verified image, byte for byte.  at[i] is the
 * live address of record i's allocation. */
static void check_device(const uint64_t *at, const struct ckpt_rec *recs, size_t n)
{
    size_t chunk = 0;
    for (size_t i = 0; i < n; i++)
        chunk = recs[i].bytes > chunk ? recs[i].bytes : chunk;
    chunk = chunk < (64u << 20) ? chunk : (64u << 20);
    char *buf = chunk ? malloc(chunk) : NULL;
    if (chunk && !buf)
        ckpt_refuse("out of host memory to read the restored state back");
    for (size_t i = 0; i < n; i++) {
        const char *want = image + image_hdr.data_offset + recs[i].offset;
        for (uint64_t off = 0; off < recs[i].bytes; off += chunk) {
            size_t len = recs[i].bytes - off < chunk ? (size_t)(recs[i].bytes - off) : chunk;
            CUresult r = real_cuMemcpyDtoH_v2(buf, at[i] + recs[i].start + off, len);
            if (r != CUDA_SUCCESS || memcmp(buf, want + off, len) != 0) {
                free(buf);
                if (r != CUDA_SUCCESS)
                    ckpt_refuse("reading allocation %llu back from the device failed (CUDA error %d)",
                                (unsigned long long)recs[i].ordinal, (int)r);
                ckpt_refuse("allocation %llu does not hold the snapshot's bytes after the copy back (from "
                            "offset %llu): the device or the copy is faulty", (unsigned long long)recs[i].ordinal,
                            (unsigned long long)(recs[i].start + off));
            }
        }
    }
    free(buf);
}

/* Copies the snapshot into the live allocations that match it by ordinal
 * and size, and goes live.  Every allocation of the snapshot must be live,
 * and every live one must be in it; an allocation is one record or
 * several (its live parts, format.h). */
static void restore_now(void)
{
    wait_threads();
    ckpt_rendezvous_live();
    const struct ckpt_rec *recs = ckpt_image_recs(image);
    size_t n = image_hdr.nallocs;
    struct ckpt_alloc *live = malloc((n + 1) * sizeof(*live));
    uint64_t *at = malloc((n + 1) * sizeof(*at));
    if (!live || !at)
        ckpt_refuse("out of host memory");
    size_t nlive = ckpt_reg_snapshot(live, n + 1), nsnap = 0;
    for (size_t i = 0; i < n; i++)
        nsnap += !i || recs[i].ordinal != recs[i - 1].ordinal;
    if (nlive != nsnap)
        ckpt_refuse("the program has %zu allocations at iteration %llu, the snapshot %zu", nlive,
               (unsigned long long)target, nsnap);
    check_addresses(live, nlive);
    for (size_t i = 0, a = 0; i < n; i++) {
        if (i && recs[i].ordinal != recs[i - 1].ordinal)
            a++;
        if (live[a].ordinal != recs[i].ordinal || live[a].size != recs[i].size)
            ckpt_refuse("allocation %llu (%llu bytes) does not match the snapshot's allocation %llu (%llu bytes)",
                   (unsigned long long)live[a].ordinal, (unsigned long long)live[a].size,
                   (unsigned long long)recs[i].ordinal, (unsigned long long)recs[i].size);
        at[i] = live[a].addr;
    }
    free(live);
    if (ckpt_resolve("cuMemcpyHtoD_v2") < 0 || ckpt_resolve("cuMemcpyDtoH_v2") < 0 ||
        ckpt_resolve("cuCtxSynchronize") < 0)
        ckpt_refuse("the driver lacks cuMemcpyHtoD_v2, cuMemcpyDtoH_v2 or cuCtxSynchronize");
    ckpt_self_depth++;
    double copy_start = ckpt_now_s();
    for (size_t i = 0; i < n; i++) {
        if (i == n / 2)
            ckpt_fault_point(CKPT_FAULT_RESTORE, target);
        CUresult r = recs[i].bytes ? real_cuMemcpyHtoD_v2(at[i] + recs[i].start,
                                                          image + image_hdr.data_offset + recs[i].offset,
                                                          recs[i].bytes)
                                   : CUDA_SUCCESS;
        if (r != CUDA_SUCCESS)
            ckpt_refuse("copying allocation %llu back to the device failed (CUDA error %d)",
                   (unsigned long long)recs[i].ordinal, (int)r);
    }
    if (real_cuCtxSynchronize() != CUDA_SUCCESS)
        ckpt_refuse("the device failed while the snapshot was copied back");
    double copy_s = ckpt_now_s() - copy_start;
    double check_start = ckpt_now_s();
    check_device(at, recs, n);
    double check_s = ckpt_now_s() - check_start;
    ckpt_self_depth--;
    free(at);

    /* What replay held back goes out now: copies queued before the
     * snapshot, and the program's files as they were then. */
    ckpt_history_forget();
    ckpt_world_live();
    ckpt_snapshot_resumed(image_hdr.generation, image_hdr.iteration, image_slot);
    if (ckpt_rlog_go_live() < 0)
        ckpt_log(CKPT_WARN, "cannot reopen the replay log for writing: snapshots of this run cannot be restored");
    ckpt_history_check_from(target);
    ckpt_log(CKPT_INFO, "restored iteration %llu (generation %llu, %llu bytes): replay took %.2f s, "
             "copying back %.3f s (%.2f GB/s), reading it back to check it %.3f s", (unsigned long long)target,
             (unsigned long long)image_hdr.generation, (unsigned long long)image_hdr.data_bytes,
             copy_start - replay_start, copy_s, copy_s > 0 ? image_hdr.data_bytes / copy_s / 1e9 : 0.0, check_s);
    ckpt_agent_report(CKPT_MSG_RESTORED, target, image_hdr.generation, image_hdr.data_bytes, copy_s * 1e3,
                      (copy_start - replay_start) * 1e3);
    munmap((void *)image, image_len);
    image = NULL;
    pthread_mutex_lock(&live_lock);
    __atomic_store_n(&ckpt_replaying, 0, __ATOMIC_RELEASE);
    ckpt_standby_mem_live();
    pthread_cond_broadcast(&live_cond);
    pthread_mutex_unlock(&live_lock);
    guard(false);
}

/* The orders say go live at iteration it, where this standby is: the
 * rank's arena is this process's now, and the restore is a restore. */
static void take_over(uint64_t it)
{
    char dir[PATH_MAX + 64];
    double start = ckpt_now_s();
    target = it;
    char why[512];
    const char *log = ckpt_cfg_str(CFG_FOLLOW_LOG);
    bool elsewhere = log && *log;
    if (ckpt_rlog_follow_end(elsewhere ? follow_dir : NULL, disk_log(follow_dir), why, sizeof(why)) < 0)
        ckpt_refuse("%s", why);
    if (ckpt_snapshot_open(false, dir, sizeof(dir)) < 0)
        ckpt_refuse("the standby cannot take the rank's arena (said above)");
    load_image(follow_dir);
    ckpt_v_make_real("the takeover");
    if (ckpt_standby_mem_back(why, sizeof(why)) < 0 || ckpt_standby_host_back(why, sizeof(why)) < 0)
        ckpt_refuse("%s", why);
    ckpt_history_release_pollers();
    ckpt_log(CKPT_INFO, "taking over at iteration %llu (%.1f s after it started to follow; arena taken in %.3f s)",
             (unsigned long long)it, start - replay_start, ckpt_now_s() - start);
    replay_start = start;
    prctl(PR_SET_PDEATHSIG, 0); /* a rank now: it outlives its agent as ranks do */
    ckpt_follow_set(&orders->live_at, it);
    ckpt_follow_unmap(orders);
    orders = NULL;
    restore_now();
}

bool ckpt_history_boundary(uint64_t iter)
{
    uint64_t t = ckpt_thread_key();
    if (ckpt_is_replaying()) {
        struct ckpt_rl_rec rec;
        CUresult unused;
        ckpt_history_work_boundary();
        ckpt_history_answer(CKPT_OBS_BOUNDARY, &unused);
        ckpt_world_boundary();
        ckpt_history_next(t, CKPT_RL_ITER, &rec);
        if (rec.a != iter)
            ckpt_refuse("iteration %llu ended where the recorded run ended iteration %llu", (unsigned long long)iter,
                        (unsigned long long)rec.a);
        ckpt_fault_point(CKPT_FAULT_REPLAY, iter == target ? UINT64_MAX : iter);
        if (orders) {
            ckpt_follow_set(&orders->at, iter);
            if (!follow_on(iter))
                take_over(iter);
            return false;
        }
        if (iter == target)
            restore_now();
        return false;
    }
    if (!recording)
        return true; /* no log: snapshots are still worth having */
    ckpt_history_work_boundary();
    ckpt_history_observed(CKPT_OBS_BOUNDARY, CUDA_SUCCESS, NULL);
    ckpt_world_boundary();
    ckpt_history_put(CKPT_RL_ITER, iter);
    ckpt_history_checked_boundary();
    ckpt_rlog_flush();
    return ckpt_rlog_complete();
}
