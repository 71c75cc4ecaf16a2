/*
 * libckpt.so's life cycle.  At load: read and check the configuration and
 * nothing else (CUDA is not touched until the program's own first cuInit);
 * for CKPT_BOUNDARY=nvtx:NAME that includes pointing NVTX at libckpt.so.
 * A bad CKPT_* value stops the process here, before any training starts,
 * with one message naming the variable; unknown CKPT_* names are only
 * warned about.  At the first successful cuInit: wake.  In a child forked
 * after that: stay a pass-through forever, since the child shares nothing
 * of the parent's device state that libckpt could checkpoint.  So does a
 * process that wakes while another owns the rank's arena directory: one
 * the rank started (it inherits RANK and LD_PRELOAD) that uses CUDA.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "config.h"
#include "interpose.h"
#include "log.h"
#include "agent.h"
#include "arena.h"
#include "boundary.h"
#include "registry.h"

bool ckpt_active;
static bool disabled;
static bool launcher; /* torchrun's own process (elastic_agent) */
static pthread_once_t wake_once = PTHREAD_ONCE_INIT;

static void warn_unknown(const char *name, const char *suggestion)
{
    if (suggestion)
        ckpt_log(CKPT_WARN, "%s is not a libckpt variable; did you mean %s?", name, suggestion);
    else
        ckpt_log(CKPT_WARN, "%s is not a libckpt variable (ckpt-resume --help-env lists them)", name);
}

/*
 * torchrun's own process, the elastic agent that starts the ranks: it may
 * initialise CUDA (torchrun asks how many GPUs there are) under the RANK
 * that ckpt-resume gave the command, but it trains nothing and must not
 * take that rank's arena from the worker that does.  It is a Python
 * script (argv[0] or argv[1] is ".../torchrun") or `python -m
 * torch.distributed.run` (or .launch); its workers have
 * TORCHELASTIC_RUN_ID, which it does not.  Under ckpt-resume
 * (CKPT_LAUNCHER=torchrun) every process without it is no rank: a wrapper
 * on the way to torchrun (`#!/usr/bin/env python3`, a version manager's
 * shim) would otherwise take the rank's arena too, and in a standby set
 * its output aside.
 */
static bool elastic_agent(void)
{
    if (getenv("TORCHELASTIC_RUN_ID"))
        return false;
    /* ckpt-resume says so: torchrun, or a wrapper on the way to it. */
    if (ckpt_cfg_int(CFG_LAUNCHER) == CKPT_LAUNCHER_TORCHRUN)
        return true;
    char buf[4096];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *prev = "";
    int i = 0;
    for (const char *a = buf; a < buf + n; a += strlen(a) + 1, i++) {
        const char *base = strrchr(a, '/') ? strrchr(a, '/') + 1 : a;
        if (i < 2 && strcmp(base, "torchrun") == 0)
            return true;
        if (strcmp(prev, "-m") == 0)
            return strcmp(a, "torch.distributed.run") == 0 || strcmp(a, "torch.distributed.launch") == 0;
        prev = a;
    }
    return false;
}

/*
 * A standby dies with its agent, from its first line: nothing would ever
 * order it live, and it would hold a context on the GPU.  The signal is
 * armed first and the agent looked for after, so an agent gone before
 * either is seen (its pid, not our parent's: ckpt-resume may be pid 1 in
 * a container, and a wrapper may stand between, which dies with it the
 * same way).  The takeover disarms it: a rank outlives its agent.
 */
static void follow_agent(pid_t agent)
{
    if (agent <= 0)
        return;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (kill(agent, 0) < 0 && errno == ESRCH)
        _exit(CKPT_EXIT_RESTORE);
}

__attribute__((constructor)) static void ckpt_load(void)
{
    char err[512], prefix[48];
    const char *rank = getenv("RANK");

    snprintf(prefix, sizeof(prefix), "libckpt[rank %s]", rank ? rank : "0");
    if (ckpt_config_load(err, sizeof(err)) < 0) {
        ckpt_log_init(prefix, CKPT_ERROR);
        ckpt_log(CKPT_ERROR, "%s", err);
        _exit(2);
    }
    ckpt_log_init(prefix, (int)ckpt_cfg_int(CFG_LOG));
    ckpt_config_unknown(warn_unknown);
    follow_agent((pid_t)ckpt_cfg_int(CFG_FOLLOW));
    disabled = ckpt_cfg_int(CFG_DISABLE);
    /* Before the world: a standby's torchrun writes to the job's own
     * stdout and files, as the job's does. */
    if (!disabled && elastic_agent()) {
        ckpt_log(CKPT_DEBUG, "torchrun's own process: no rank, pass-through (its workers checkpoint)");
        disabled = launcher = true;
    }
    /* First of all that may map memory, and the same in every run. */
    if (!disabled)
        ckpt_addrspace_hold();
    /* Here: a replaying program may open its files before it touches CUDA. */
    if (!disabled) {
        ckpt_world_init((uint64_t)ckpt_cfg_int(CFG_RESTORE), ckpt_cfg_int(CFG_FOLLOW));
        ckpt_rendezvous_init(ckpt_cfg_int(CFG_FOLLOW) && ckpt_cfg_int(CFG_FOLLOW_ALONE));
    }
    /* Here and not at wake: the program's first NVTX range may come before
     * its first cuInit, and NVTX reads the variable at that first call. */
    if (!disabled && ckpt_nvtx_setup(ckpt_cfg_str(CFG_BOUNDARY), err, sizeof(err)) < 0) {
        ckpt_log(CKPT_ERROR, "%s", err);
        _exit(2);
    }
    /* Here too: NCCL reads it at the first communicator init.  Without it
     * only the timeline is poorer, so this is no reason to stop. */
    if (!disabled && ckpt_profiler_setup(err, sizeof(err)) < 0)
        ckpt_log(CKPT_WARN, "%s: collectives on the timeline get host times", err);
}

/* The registry's lock may be held by a thread that does not exist in the
 * child; the child never touches it again. */
static void forked_child(void)
{
    ckpt_active = false;
    disabled = true;
}

static void wake(void)
{
    if (disabled) {
        if (!launcher)
            ckpt_log(CKPT_INFO, "CKPT_DISABLE is set: pass-through");
        return;
    }
    const char *b = ckpt_cfg_str(CFG_BOUNDARY);
    if (strncmp(b, "nvtx:", 5) == 0)
        ckpt_bd_init_markers(); /* nvtx.c ends the iterations */
    else
        ckpt_bd_init(strncmp(b, "every:", 6) == 0 ? (unsigned)strtoul(b + 6, NULL, 10) : 0);
    pthread_atfork(NULL, NULL, forked_child);

    char dir[PATH_MAX + 64];
    uint64_t restore = (uint64_t)ckpt_cfg_int(CFG_RESTORE);
    const char *rank = getenv("RANK");
    /* A standby takes the rank's arena only when it goes live. */
    bool follow = ckpt_cfg_int(CFG_FOLLOW);
    int arena = follow ? ckpt_arena_path(dir, sizeof(dir), ckpt_cfg_str(CFG_ARENA_DIR), ckpt_cfg_str(CFG_JOB),
                                         rank ? atoi(rank) : 0)
                       : ckpt_snapshot_open(restore == 0, dir, sizeof(dir));
    if (arena == -EBUSY) { /* another process is this rank: not a word to its agent, no restore */
        disabled = true;
        return;
    }
    int agent = ckpt_agent_connect(ckpt_cfg_str(CFG_AGENT_SOCKET), rank ? (uint32_t)atoi(rank) : 0);
    if (arena < 0 && !follow && ckpt_unprotected_refused()) { /* said by ckpt_snapshot_open */
        ckpt_agent_send(CKPT_MSG_NO_ROOM, restore, 0);
        fflush(NULL);
        _exit(CKPT_EXIT_ARENA);
    }
    if (arena == 0) {
        ckpt_fault_init(dir);
        ckpt_history_init(dir, restore);
    } else if (restore) {
        ckpt_log(CKPT_ERROR, "restore of iteration %llu refused: no arena", (unsigned long long)restore);
        ckpt_agent_send(CKPT_MSG_REFUSED, restore, 0);
        _exit(CKPT_EXIT_RESTORE);
    }
    if (agent < 0)
        ckpt_log(CKPT_WARN, "cannot reach ckpt-resume at CKPT_AGENT_SOCKET=%s: it cannot see this rank's progress",
                 ckpt_cfg_str(CFG_AGENT_SOCKET));
    /* With the job's WORLD_SIZE, and the ranks torchrun started on this
     * node (a wrapped torchrun's standbys follow that many); another
     * launcher may pass on the LOCAL_WORLD_SIZE ckpt-resume gave it, which
     * says nothing. */
    const char *lws = getenv("LOCAL_WORLD_SIZE"), *ws = getenv("WORLD_SIZE");
    bool torchrun = ckpt_cfg_int(CFG_LAUNCHER) == CKPT_LAUNCHER_TORCHRUN;
    ckpt_agent_report(CKPT_MSG_HELLO, 0, ws ? strtoull(ws, NULL, 10) : 0, torchrun && lws ? strtoull(lws, NULL, 10) : 0,
                      0, 0);
    __atomic_store_n(&ckpt_active, true, __ATOMIC_RELEASE);
    ckpt_log(CKPT_DEBUG, "awake: CUDA initialised");
}

bool ckpt_unprotected_refused(void)
{
    const char *agent = getenv("CKPT_AGENT_SOCKET");
    return agent && *agent && !ckpt_cfg_int(CFG_ALLOW_UNPROTECTED);
}

void ckpt_wake(void)
{
    pthread_once(&wake_once, wake);
}
