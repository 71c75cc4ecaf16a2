/*
 * CKPT_FAULT: a failure injected where tests and demos need one, the way a
 * machine fails (SIGKILL, no cleanup): at an iteration boundary, while a
 * snapshot is being copied, or in the middle of a restore.  It fires once
 * per job, restarts included: the first firing leaves a marker file in the
 * job's arena directory, created exclusively, and a marker that exists
 * disarms it.  Unset, this is one branch on a cold path.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "interpose.h"
#include "log.h"

static struct ckpt_fault fault;
static bool armed;
static char marker[PATH_MAX + 32];

void ckpt_fault_init(const char *rank_dir)
{
    const char *spec = ckpt_cfg_str(CFG_FAULT), *rank = getenv("RANK");
    if (!spec || !*spec || ckpt_fault_parse(spec, &fault) < 0 || fault.kind != CKPT_FAULT_KILL)
        return; /* an io: fault is the node agent's persistence engine's */
    if (fault.rank != (unsigned long long)(rank ? atoll(rank) : 0))
        return;
    snprintf(marker, sizeof(marker), "%s", rank_dir);
    char *slash = strrchr(marker, '/');
    if (!slash)
        return;
    snprintf(slash, sizeof(marker) - (size_t)(slash - marker), "/fault-fired");
    armed = access(marker, F_OK) != 0;
}

void ckpt_fault_point(int phase, uint64_t iteration)
{
    static const char *const names[] = {"at the boundary", "during the snapshot copy", "during the restore"};
    if (!armed || phase != fault.phase)
        return;
    if (phase == 2 ? iteration < fault.iteration : iteration != fault.iteration)
        return;
    armed = false;
    int fd = open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return; /* fired before, in an earlier run of this job */
    close(fd);
    ckpt_log(CKPT_WARN, "CKPT_FAULT: killing this rank %s of iteration %llu", names[phase],
             (unsigned long long)iteration);
    kill(getpid(), SIGKILL);
}
