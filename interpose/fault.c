/*
 * CKPT_FAULT: a failure injected where tests and demos need one, the way a
 * machine fails (SIGKILL, no cleanup): at an iteration boundary, while a
 * snapshot is being copied, between its copies and its commit, while the
 * node agent persists a slot, while a restarted run replays its log, or in
 * the middle of a restore.  It fires once per job, restarts included: the
 * first firing leaves a marker file in the job's arena directory, created
 * exclusively, and a marker that exists disarms it.  Unset, this is one
 * branch on a cold path; it must never fire in a process whose rank it
 * does not name.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "interpose.h"
#include "log.h"
#include "pins.h"

/* How long a boundary waits for the node agent to start a persist. */
#define PERSIST_WAIT_S 0.1

static struct ckpt_fault fault;
static bool armed;
static char marker[PATH_MAX + 32], pin[PATH_MAX + 48];

void ckpt_fault_init(const char *rank_dir)
{
    const char *spec = ckpt_cfg_str(CFG_FAULT), *rank = getenv("RANK");
    if (!spec || !*spec || ckpt_fault_parse(spec, &fault) < 0 || fault.kind != CKPT_FAULT_KILL)
        return; /* an io: fault is the node agent's persistence engine's */
    if (fault.rank != (unsigned long long)(rank ? atoll(rank) : 0))
        return;
    char job_dir[PATH_MAX];
    if (ckpt_rank_dir_job(job_dir, sizeof(job_dir), rank_dir) < 0)
        return;
    ckpt_pins_path(pin, sizeof(pin), job_dir);
    snprintf(marker, sizeof(marker), "%s/" CKPT_FAULT_FIRED, job_dir);
    armed = access(marker, F_OK) != 0;
}

/* Does the node agent hold the persist pin?  Waits for it up to
 * PERSIST_WAIT_S: the agent starts a persist once every rank committed. */
static bool persisting(void)
{
    struct timespec ts;
    for (int i = 0; i < (int)(PERSIST_WAIT_S * 5000); i++) {
        if (access(pin, F_OK) == 0)
            return true;
        ts = (struct timespec){.tv_nsec = 200000};
        nanosleep(&ts, NULL);
    }
    return false;
}

void ckpt_fault_point(int phase, uint64_t iteration)
{
    static const char *const names[CKPT_FAULT_PHASES] = {
        "at the boundary", "during the snapshot copy", "during the restore",
        "before the commit", "during the replay", "while the node agent persists",
    };
    if (!__atomic_load_n(&armed, __ATOMIC_ACQUIRE) || phase != fault.phase)
        return;
    /* A restore or a replay may never pass I itself, and iteration I's
     * snapshot may be skipped (its slot still being persisted): those fire
     * at the first point at or past it (the replay passes UINT64_MAX at its
     * last step). */
    if (phase == CKPT_FAULT_BOUNDARY ? iteration != fault.iteration : iteration < fault.iteration)
        return;
    if (phase == CKPT_FAULT_PERSIST && !persisting())
        return; /* no persist started: try again at the next boundary */
    if (!__atomic_exchange_n(&armed, false, __ATOMIC_ACQ_REL))
        return; /* another thread fired it */
    int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return; /* fired before, in an earlier run of this job */
    close(fd);
    ckpt_log(CKPT_WARN, "CKPT_FAULT: killing this rank %s of iteration %llu", names[phase],
             (unsigned long long)(iteration == UINT64_MAX ? 0 : iteration));
    kill(getpid(), SIGKILL);
}
