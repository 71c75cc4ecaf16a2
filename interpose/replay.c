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
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "boundary.h"
#include "config.h"
#include "image.h"
#include "interpose.h"
#include "log.h"
#include "registry.h"
#include "replay.h"

int ckpt_replaying;
static bool recording;
static uint64_t target;

/* The snapshot being restored, mapped from its slot. */
static const char *image;
static size_t image_len;
static struct ckpt_header image_hdr;
static int image_slot;
static double replay_start;

/* Asynchronous device-to-host copies waiting for the next host sync. */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending {
    void *dst;
    size_t size;
} *pending;
static size_t npending, pending_cap;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noreturn, format(printf, 1, 2))) static void refuse(const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    ckpt_log(CKPT_ERROR, "restore of iteration %llu refused: %s", (unsigned long long)target, why);
    /* Said to the agent too: a launcher between us may not pass the exit status on. */
    ckpt_agent_send(CKPT_MSG_REFUSED, target, 0);
    _exit(CKPT_EXIT_RESTORE);
}

/* Maps the slot holding iteration k, verified; refuses otherwise. */
static void load_image(const char *dir)
{
    char path[PATH_MAX + 16], why[256] = "", whys[2][300] = {"", ""};
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof(path), "%s/slot%d", dir, s);
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
            snprintf(whys[s], sizeof(whys[s]), "slot%d is empty", s);
            if (fd >= 0)
                close(fd);
            continue;
        }
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
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
    refuse("no verified snapshot of it in %s (%s; %s)", dir, whys[0], whys[1]);
}

void ckpt_history_init(const char *dir, uint64_t restore)
{
    char why[512];
    uint64_t max = (uint64_t)ckpt_cfg_int(CFG_REPLAY_LOG_MAX);

    target = restore;
    if (!restore) {
        if (ckpt_rlog_create(dir, max, why, sizeof(why)) < 0)
            ckpt_log(CKPT_WARN, "no replay log (%s): snapshots of this run cannot be restored", why);
        else
            recording = true;
        return;
    }
    load_image(dir);
    if (ckpt_rlog_open_replay(dir, restore, max, why, sizeof(why)) < 0)
        refuse("%s", why);
    ckpt_replaying = 1;
    recording = true;
    replay_start = now_s();
    ckpt_log(CKPT_INFO, "replaying %llu iterations to restore generation %llu", (unsigned long long)restore,
             (unsigned long long)image_hdr.generation);
}

/* Reads the next record of a kind, refusing the restore on a divergence. */
static void next(enum ckpt_rl_type type, uint64_t *a, uint64_t *b, const void **payload, uint32_t *len)
{
    char why[256];
    if (ckpt_rlog_next(type, a, b, payload, len, why, sizeof(why)) < 0)
        refuse("the program diverged from its recorded run: %s", why);
}

void ckpt_history_alloc(uint64_t ordinal, uint64_t size)
{
    if (ckpt_replaying) {
        uint64_t o, n;
        next(CKPT_RL_ALLOC, &o, &n, NULL, NULL);
        if (o != ordinal || n != size)
            refuse("the program diverged from its recorded run: it made allocation %llu of %llu bytes where the "
                   "recorded run made allocation %llu of %llu bytes",
                   (unsigned long long)ordinal, (unsigned long long)size, (unsigned long long)o,
                   (unsigned long long)n);
    } else if (recording) {
        ckpt_rlog_append(CKPT_RL_ALLOC, ordinal, size, NULL, 0);
    }
}

static void serve(void *dst, size_t size)
{
    uint64_t n, unused;
    const void *bytes;
    uint32_t len;
    next(CKPT_RL_D2H, &n, &unused, &bytes, &len);
    if (n != size || len != size)
        refuse("a device-to-host copy of %zu bytes, the recorded run copied %llu", size, (unsigned long long)n);
    memcpy(dst, bytes, size);
}

/* Copies too large for one record are not logged (their bytes would not
 * fit a record length); a program that reads them back cannot be
 * restored, which the log says by overflowing. */
static void keep(const void *dst, size_t size)
{
    if (size > UINT32_MAX)
        ckpt_rlog_append(CKPT_RL_OVERFLOW, ckpt_bd_iteration(), 0, NULL, 0);
    else
        ckpt_rlog_append(CKPT_RL_D2H, size, 0, dst, (uint32_t)size);
}

bool ckpt_history_d2h(void *dst, size_t size, bool after_real_copy)
{
    if (ckpt_replaying) {
        serve(dst, size);
        return true;
    }
    if (recording && after_real_copy)
        keep(dst, size);
    return false;
}

void ckpt_history_d2h_async(void *dst, size_t size)
{
    if (!recording)
        return;
    pthread_mutex_lock(&pending_lock);
    if (npending == pending_cap) {
        size_t cap = pending_cap ? pending_cap * 2 : 16;
        struct pending *p = realloc(pending, cap * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&pending_lock);
            if (ckpt_replaying)
                refuse("out of host memory");
            ckpt_rlog_append(CKPT_RL_OVERFLOW, ckpt_bd_iteration(), 0, NULL, 0);
            return;
        }
        pending = p;
        pending_cap = cap;
    }
    pending[npending++] = (struct pending){dst, size};
    pthread_mutex_unlock(&pending_lock);
}

void ckpt_history_settle(void)
{
    if (!recording || !__atomic_load_n(&npending, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&pending_lock);
    for (size_t i = 0; i < npending; i++) {
        if (ckpt_replaying)
            serve(pending[i].dst, pending[i].size);
        else
            keep(pending[i].dst, pending[i].size);
    }
    npending = 0;
    pthread_mutex_unlock(&pending_lock);
}

void ckpt_history_value(uint64_t what, uint64_t *value)
{
    if (ckpt_replaying) {
        uint64_t w, v;
        next(CKPT_RL_VALUE, &w, &v, NULL, NULL);
        if (w != what)
            refuse("the program read value %llu where the recorded run read value %llu", (unsigned long long)what,
                   (unsigned long long)w);
        *value = v;
    } else if (recording) {
        ckpt_rlog_append(CKPT_RL_VALUE, what, *value, NULL, 0);
    }
}

/* Copies the snapshot into the live allocations that match it by ordinal
 * and size, and goes live.  Every allocation of the snapshot must be live,
 * and every live one must be in it. */
static void restore_now(void)
{
    const struct ckpt_rec *recs = ckpt_image_recs(image);
    size_t n = image_hdr.nallocs;
    struct ckpt_alloc *live = malloc((n + 1) * sizeof(*live));
    if (!live)
        refuse("out of host memory");
    size_t nlive = ckpt_reg_snapshot(live, n + 1);
    if (nlive != n)
        refuse("the program has %zu allocations at iteration %llu, the snapshot %zu", nlive,
               (unsigned long long)target, n);
    for (size_t i = 0; i < n; i++) {
        if (live[i].ordinal != recs[i].ordinal || live[i].size != recs[i].size)
            refuse("allocation %llu (%llu bytes) does not match the snapshot's allocation %llu (%llu bytes)",
                   (unsigned long long)live[i].ordinal, (unsigned long long)live[i].size,
                   (unsigned long long)recs[i].ordinal, (unsigned long long)recs[i].size);
    }
    if (ckpt_resolve("cuMemcpyHtoD_v2") < 0 || ckpt_resolve("cuCtxSynchronize") < 0)
        refuse("the driver lacks cuMemcpyHtoD_v2 or cuCtxSynchronize");
    ckpt_self_depth++;
    double copy_start = now_s();
    for (size_t i = 0; i < n; i++) {
        if (i == n / 2)
            ckpt_fault_point(CKPT_FAULT_RESTORE, target);
        CUresult r = real_cuMemcpyHtoD_v2(live[i].addr, image + image_hdr.data_offset + recs[i].offset,
                                          recs[i].size);
        if (r != CUDA_SUCCESS)
            refuse("copying allocation %llu back to the device failed (CUDA error %d)",
                   (unsigned long long)recs[i].ordinal, (int)r);
    }
    if (real_cuCtxSynchronize() != CUDA_SUCCESS)
        refuse("the device failed while the snapshot was copied back");
    ckpt_self_depth--;
    double copy_s = now_s() - copy_start;
    free(live);

    ckpt_snapshot_resumed(image_hdr.generation, image_hdr.iteration, image_slot);
    if (ckpt_rlog_go_live() < 0)
        ckpt_log(CKPT_WARN, "cannot reopen the replay log for writing: snapshots of this run cannot be restored");
    ckpt_log(CKPT_INFO, "restored iteration %llu (generation %llu, %llu bytes): replay took %.2f s, "
             "copying back %.3f s (%.2f GB/s)", (unsigned long long)target, (unsigned long long)image_hdr.generation,
             (unsigned long long)image_hdr.data_bytes, copy_start - replay_start, copy_s,
             copy_s > 0 ? image_hdr.data_bytes / copy_s / 1e9 : 0.0);
    ckpt_agent_send(CKPT_MSG_RESTORED, target, image_hdr.generation);
    munmap((void *)image, image_len);
    image = NULL;
    __atomic_store_n(&ckpt_replaying, 0, __ATOMIC_RELEASE);
}

bool ckpt_history_boundary(uint64_t iter)
{
    if (ckpt_replaying) {
        uint64_t it, unused;
        next(CKPT_RL_ITER, &it, &unused, NULL, NULL);
        if (it != iter)
            refuse("iteration %llu ended where the recorded run ended iteration %llu", (unsigned long long)iter,
                   (unsigned long long)it);
        ckpt_fault_point(CKPT_FAULT_REPLAY, iter == target ? UINT64_MAX : iter);
        if (iter == target)
            restore_now();
        return false;
    }
    if (!recording)
        return true; /* no log: snapshots are still worth having */
    ckpt_rlog_append(CKPT_RL_ITER, iter, 0, NULL, 0);
    ckpt_rlog_flush();
    return ckpt_rlog_complete();
}
