/*
 * Fault injection for tests and the demo: a rank that dies the way a GPU
 * machine's process dies (SIGKILL, no cleanup), at a reproducible point.
 * FAKEGPU_CRASH_RANK=r and FAKEGPU_CRASH_AT=n make the process whose RANK
 * is r kill itself at its n-th stream synchronisation; with
 * FAKEGPU_CRASH_ONCE=path it does so only if path does not exist yet, and
 * creates it first, so the restarted job runs through.  Nothing happens
 * unless FAKEGPU_CRASH_AT is set.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fakegpu.h"

void fg_maybe_crash(void)
{
    static uint64_t at, count;
    static int armed = -1;

    if (armed < 0) {
        const char *rank = getenv("RANK");
        at = fg_env_u64("FAKEGPU_CRASH_AT", 0);
        armed = at > 0 && (uint64_t)(rank ? atoi(rank) : 0) == fg_env_u64("FAKEGPU_CRASH_RANK", 0);
    }
    if (!armed || __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED) != at)
        return;
    const char *once = getenv("FAKEGPU_CRASH_ONCE");
    if (once && *once) {
        int fd = open(once, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0)
            return; /* crashed before */
        close(fd);
    }
    fprintf(stderr, "fakegpu: injected crash of rank %s at stream synchronisation %llu\n",
            getenv("RANK") ? getenv("RANK") : "0", (unsigned long long)at);
    kill(getpid(), SIGKILL);
}
