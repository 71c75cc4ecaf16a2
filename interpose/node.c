/*
 * What the rank's node holds beside it: the committed slots of the other
 * ranks on it, the node agent's pins on this rank's slots, and room in the
 * arena's filesystem.  Read from the arena directory, never from a peer
 * process: a peer may be dead, and its files say what survives it.
 */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "arena.h"
#include "config.h"
#include "format.h"
#include "interpose.h"
#include "log.h"

/* Peers' slot headers are read, not verified: a set magic means the
 * peer's commit finished. */
bool ckpt_node_peers_hold(uint64_t iteration)
{
    const char *rank = getenv("RANK"), *local = getenv("LOCAL_RANK"), *local_world = getenv("LOCAL_WORLD_SIZE");
    int me = rank ? atoi(rank) : 0, first = me - (local ? atoi(local) : 0), n = local_world ? atoi(local_world) : 1;
    char dir[PATH_MAX + 64], path[PATH_MAX + 96];

    for (int r = first; r < first + n; r++) {
        if (r == me || ckpt_arena_path(dir, sizeof(dir), ckpt_cfg_str(CFG_ARENA_DIR), ckpt_cfg_str(CFG_JOB), r) < 0)
            continue;
        bool held = false;
        for (int s = 0; s < 2 && !held; s++) {
            struct ckpt_header h;
            if (ckpt_slot_path(path, sizeof(path), dir, s) < 0)
                continue;
            int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                continue;
            held = pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
                   memcmp(h.magic, CKPT_MAGIC, sizeof(h.magic)) == 0 && h.iteration == iteration;
            close(fd);
        }
        if (!held)
            return false;
    }
    return true;
}

/* The slot files the job holds already count as room.  Run by hand (no
 * agent socket) or with CKPT_ALLOW_UNPROTECTED=1, the rank trains on, and
 * the snapshots that find no room are skipped and said (snapshot.c). */
void ckpt_node_check_room(const char *rank_dir, uint64_t iter, size_t total)
{
    char job_dir[PATH_MAX];
    uint64_t room = 0, size = 0;
    if (!ckpt_unprotected_refused() || ckpt_arena_room(rank_dir, &room, &size) < 0)
        return;
    uint64_t held = ckpt_rank_dir_job(job_dir, sizeof(job_dir), rank_dir) == 0 ? ckpt_arena_held(job_dir) : 0;
    const char *lw = getenv("LOCAL_WORLD_SIZE");
    long long ranks = lw && atoi(lw) > 0 ? atoi(lw) : 1, slots = ckpt_cfg_int(CFG_SLOTS);
    uint64_t need = (uint64_t)ranks * (uint64_t)slots * total;
    if (need <= room + held)
        return;
    ckpt_log(CKPT_ERROR,
             "iteration %llu: this host cannot hold the arena: a snapshot of this rank is %.1f MiB, and %lld "
             "rank%s x %lld slot%s need %.1f MiB in %s, whose filesystem has %.1f MiB free of %.1f MiB (the job "
             "holds %.1f MiB of it already); " CKPT_ARENA_ROOM_FIX "%s; the rank stops rather than train "
             "unprotected", (unsigned long long)iter,
             total / 1048576.0, ranks, ranks == 1 ? "" : "s", slots, slots == 1 ? "" : "s", need / 1048576.0,
             rank_dir, room / 1048576.0, size / 1048576.0, held / 1048576.0,
             slots > 1 ? ", or set CKPT_SLOTS=1 (one slot per rank: the previous snapshot is then kept only by "
                         "peers and on disk while the next is written)" : "");
    ckpt_agent_send(CKPT_MSG_NO_ROOM, iter, need);
    fflush(NULL);
    _exit(CKPT_EXIT_ARENA);
}
